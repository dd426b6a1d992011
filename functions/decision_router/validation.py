"""Validation errors in words: every place that validates outside input names the bad fields
the same way ('field.path: reason'); and the strict model the domain's input models are made of."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError


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
