"""Schemathesis hooks for fuzzing the decision server (the pytest fuzz test imports this module;
`make fuzz` passes it to `st run` as SCHEMATHESIS_HOOKS).

A few rules of the structured-decision contract cannot be written in JSON Schema: option ids
unique within a decision, decision ids unique within a batch, and one `state` shared by a batch.
The OpenAPI document states them in its descriptions; here, a generated *valid* body is brought
within them (duplicate ids renamed, the first state shared), so that "schema-valid data must be
accepted" checks the server on everything else. Invalid bodies are left as generated.
"""

from __future__ import annotations

from typing import Any

import schemathesis

DECISION_PATHS = ("/invocations", "/endpoints/{endpoint_name}/invocations")


@schemathesis.hook
def map_case(context: schemathesis.HookContext, case: schemathesis.Case) -> schemathesis.Case:
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or case.path not in DECISION_PATHS:
        return case
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("decision"), dict):
        _unique_ids(body["decision"].get("options"))
    elif isinstance(body, dict) and isinstance(body.get("decisions"), list):
        decisions = [d for d in body["decisions"] if isinstance(d, dict)]
        _unique_ids(decisions)
        for decision in decisions:
            decision["state"] = decisions[0].get("state")
            _unique_ids(decision.get("options"))
    return case


def _unique_ids(items: Any) -> None:
    """Rename repeated `id`s in place (`a`, `a` -> `a`, `a~1`); every id stays a non-empty string."""
    if not isinstance(items, list):
        return
    seen: set[Any] = set()
    for index, item in enumerate(items):
        if not isinstance(item, dict) or "id" not in item:
            continue
        while item["id"] in seen:
            item["id"] = f"{item['id']}~{index}"
        seen.add(item["id"])
