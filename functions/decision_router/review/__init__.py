"""Human review: completing a pending review against its record's own choices (`completion`)
and what the review console shows and accepts (`console`)."""
