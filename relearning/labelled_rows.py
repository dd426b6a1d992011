"""The labelled-examples table's rows as the fitter reads them: each a case with its label time,
the model's suggestions, the signals kept at decision time, and who answered, counted as that
reviewer only where the stack's signing key verifies the row's identity for its execution."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from decision_router.adapters.signing_key import SigningKey
from decision_router.domain.kept_signals import KeptSignals
from decision_router.review.completion import labelled_example
from evaluation.cases import Case, case_from_row

from .labels import signals_of


@dataclass(frozen=True)
class LabelledRow:
    """A labelled examples table row as the fitter reads it, with its label time."""

    case: Case
    labelled_at: str
    answers: dict[str, str]
    suggested: dict[str, str]  # the model's answer per question, where the model answered
    corrected_auto: bool  # the row is a correction of an automatic route
    reviewer: str | None = None  # the display name the answer gave (None: the row names nobody)
    #: Who answered, authenticated: the row's `reviewer_id` where the stack's key signed it for this
    #: row's execution; None (counted as gate.UNAUTHENTICATED) for every other row.
    reviewer_id: str | None = None
    #: The endpoint's signals kept at decision time, by question ({}: asked of the endpoint).
    signals: dict[str, KeptSignals] = field(default_factory=dict)


def verified_identity(row: Mapping[str, str], key: SigningKey | None) -> str | None:
    """The row's reviewer identity when its signature verifies with `key`; else None. Without a
    key (a run outside a stack) no row's identity can be verified: none counts apart."""
    reviewer_id, execution = (row.get("reviewer_id") or "").strip(), row.get("execution_name") or ""
    if key is None or not reviewer_id or not key.review_verified(execution, reviewer_id, row.get("identity_signature")):
        return None
    return reviewer_id


def read_labels(rows: Sequence[dict[str, str]], key: SigningKey | None = None) -> tuple[list[LabelledRow], list[str]]:
    """The table's rows as cases (a row that does not parse is reported, never fatal), each with
    its verified reviewer identity (`verified_identity`)."""
    found, problems = [], []
    policies: dict[str, Any] = {}  # each policy loaded once, not once a row (its heads are validated at load)
    for number, row in enumerate(rows, start=1):
        try:
            case = case_from_row(labelled_example(row), "labelled-examples", number, policies)
            decisions = json.loads(row.get("model_decisions") or "[]")
        except (ValueError, KeyError) as error:
            problems.append(f"{row.get('item_id', '?')}: {error}")
            continue
        suggested = {d["question"]: d["option_id"] for d in decisions if d.get("source") == "model" and d.get("option_id")}
        try:
            signals = signals_of(row)
        except ValueError as error:  # pydantic's ValidationError too: the endpoint is asked instead
            problems.append(f"{row.get('item_id', '?')}: signals not read, asked of the endpoint ({error})")
            signals = {}
        found.append(LabelledRow(case, row.get("labelled_at", ""), json.loads(row["answers"]), suggested,
                              (row.get("route_reason") or "").startswith("correction by"),
                              (row.get("reviewer") or "").strip() or None, verified_identity(row, key), signals))
    return found, problems
