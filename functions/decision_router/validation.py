"""Validation errors in words: every place that validates outside input names the bad fields
the same way ('field.path: reason'); and the strict model the domain's input models are made of."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

#: A link back to an item in its own system: as long as browsers and proxies keep a URL (an
#: unbounded one would carry its bytes into every record, to the workflow's input limit).
Url = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2_048)]


class StrictModel(BaseModel):
    """A model of outside input (an item, a policy, a head file): unknown fields are rejected, so a
    misspelt field does not pass as a missing optional one; no infinity or NaN; frozen once read."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def describe_errors(error: ValidationError) -> list[str]:
    """Pydantic errors as 'field.path: reason' lines."""
    lines = []
    for e in error.errors(include_url=False):
        loc = ".".join(str(part) for part in e["loc"])
        message = e["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {message}" if loc else message)
    return lines
