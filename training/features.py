"""What the model produces for each labelled decision (`Example`): its final hidden state and its
letter logits, scored by the one scorer (training/scoring.py: the batch scorer in this process, a
decision server over HTTP, an endpoint) into the signals store (training/signals_store.py).

Scoring hundreds of items takes minutes on a CPU, so the store keeps them per model (GGUF sha256)
and per decision (its content, not its id): a second `make fit` on the same model and data scores
nothing, and a changed prompt, question or model scores afresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from decision_contract import Decision, DecisionResult, ModelInfo
from decision_contract.signals import request_key
from evaluation.cases import Case, RowError

from .scoring import Scorer
from .signals_store import SignalsStore


@dataclass(frozen=True)
class Example:
    """One labelled decision and what the model produced for it."""

    policy: str
    question: str
    case_id: str
    where: str
    split: str | None
    fold_group: str
    option_ids: list[str]
    gold: int
    state: Any  # the decision's evidence (what the lexical features read)
    hidden: np.ndarray
    letter_logits: np.ndarray
    allowed_token_mass: float
    prompt_version: str
    note: str | None = None
    language: str | None = None
    reviewer: str | None = None  # who labelled it (a review); None: a shipped label, or nobody named

    def result(self, model: ModelInfo) -> DecisionResult:
        """The decision result the routing function would have received (for its own code path)."""
        return DecisionResult.from_signals(self.question, self.option_ids, self.letter_logits, model=model,
                                           prompt_version=self.prompt_version, allowed_token_mass=self.allowed_token_mass,
                                           hidden_state=self.hidden)


def case_decisions(cases: Sequence[Case], model_sha256: str) -> tuple[list[Decision], list[str], list[Case]]:
    """Every decision of the cases (the hidden state asked for), its request key, and its case."""
    decisions, keys, owners = [], [], []
    for case in cases:
        for labelled in case.decisions:
            decision = labelled.decision.model_copy(update={"return_hidden_state": True})
            decisions.append(decision)
            keys.append(request_key(model_sha256, decision))
            owners.append(case)
    return decisions, keys, owners


def score_cases(scorer: Scorer, store: SignalsStore, model_sha256: str, cases: Sequence[Case]) -> list[RowError]:
    """Score every decision of the cases that the store lacks (training/scoring.py's scorer);
    a decision the model could not score is named by its case's row."""
    decisions, keys, owners = case_decisions(cases, model_sha256)
    not_scored = scorer.score_missing(store, decisions, keys, what="labelled decisions")
    store.save()
    return [RowError(owners[row.index].source, owners[row.index].line, "(scoring)", row.reason) for row in not_scored]


def examples_of(store: SignalsStore, model_sha256: str, cases: Sequence[Case]) -> list[Example]:
    """Every decision of the cases whose signals the store holds, as an Example (the others are
    left out: what scoring could not score was reported as it happened)."""
    _, keys, _ = case_decisions(cases, model_sha256)
    rows = store.rows(keys)
    examples = []
    for case in cases:
        for labelled in case.decisions:
            row = rows.get(request_key(model_sha256, labelled.decision))
            if row is None:
                continue
            hidden, logits, mass, version = row
            examples.append(Example(
                policy=case.family, question=labelled.question, case_id=case.case_id, where=case.where,
                split=case.split, fold_group=case.cv_group, option_ids=labelled.decision.option_ids,
                gold=labelled.gold_index, state=labelled.decision.state, hidden=hidden.astype(np.float64), letter_logits=logits,
                allowed_token_mass=mass, prompt_version=version, note=case.note, language=case.language,
            ))
    return examples
