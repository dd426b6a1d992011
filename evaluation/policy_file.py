"""A policy file's text in the shipped files' one layout, for the fitter and the policy update
that write policy files (the Lambda functions only read them)."""

from __future__ import annotations

import json
from typing import Any

#: A JSON container shorter than this stays on one line in a policy file.
_ONE_LINE = 100


def format_policy(document: Any) -> str:
    """A policy file's text, in the shipped files' layout: indented by two, containers that fit
    stay on one line, and a head's weight rows take one line each (not one per number)."""

    def dump(value: Any, depth: int) -> str:
        flat = json.dumps(value, ensure_ascii=False)
        numbers = isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        if not isinstance(value, (dict, list)) or numbers or len(flat) + 2 * depth <= _ONE_LINE:
            return flat
        pad = "  " * (depth + 1)
        if isinstance(value, dict):
            items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {dump(v, depth + 1)}" for k, v in value.items()]
            return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"
        return "[\n" + ",\n".join(pad + dump(v, depth + 1) for v in value) + "\n" + "  " * depth + "]"

    return dump(document, 0) + "\n"
