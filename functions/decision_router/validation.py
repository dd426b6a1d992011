"""Validation errors in words: every place that validates outside input names the bad fields
the same way ('field.path: reason')."""

from __future__ import annotations

from pydantic import ValidationError


def describe_errors(error: ValidationError) -> list[str]:
    """Pydantic errors as 'field.path: reason' lines."""
    lines = []
    for e in error.errors(include_url=False):
        loc = ".".join(str(part) for part in e["loc"])
        message = e["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {message}" if loc else message)
    return lines
