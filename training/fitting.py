"""Fitting one policy question's head into its head file's document: what `make fit` writes
beside the policy and what the relearning workflow promotes into the head store, both through the
one head fitter `make fit-history` uses too (training/head_fit.py)."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from decision_router import sentences

from . import head_fit, learn, novelty
from .features import Example
from .question_fit import QuestionFit, fit_question
from .thresholds import Targets

REPO = Path(__file__).resolve().parents[1]
#: The shipped labelled sets (the relearning image carries them at the same place).
SHIPPED = [REPO / "bench/data/support-tickets.jsonl", REPO / "bench/data/incidents.jsonl"]
#: Rows of this split are never fitted on.
TEST_SPLIT = "test"


def fit_head(policy: Any, question: Any, train: list[Example], model: Any, *, sources: list[str], folds: int = head_fit.FOLDS,
             seed: int = 0, target_error: float | None = None, curve: bool = True,
             fitted_on: date, novelty_budget: float = novelty.DEFAULT_BUDGET,
             say: Any = None, encoder: str | None = sentences.DEFAULT_ENCODER) -> tuple[QuestionFit, dict]:
    """One policy question's head fitted on `train` by the one head fitter (training/head_fit.py: a
    stratified sample of a large history) and its head file's document (versioned by its own
    content), with its novelty part (training/novelty.py: the share `novelty_budget` of in-scope
    items sent to review, out of fold): what `make fit` writes and what the relearning workflow
    promotes. `encoder`: the sentence encoder the head reads beside TF-IDF (None: none)."""
    picked = [train[i] for i in head_fit.sample(np.array([e.gold for e in train]), seed)]
    signals = learn.Signals.build(
        [e.state for e in picked], np.array([e.hidden for e in picked]), [e.letter_logits for e in picked],
        np.array([e.gold for e in picked]), [e.fold_group for e in picked],
        text_fields=[s.key for s in policy.state], categorical_fields=policy.categorical_keys, encoder=encoder)
    goals = question.learning
    targets = Targets(
        max_error=target_error if target_error is not None else goals.max_auto_error,
        protected=tuple(question.option_ids.index(o) for o in goals.protect),
        max_under_assignment=goals.max_under_assignment)
    binding = {"question_sha256": policy.question_sha256(question), "model_sha256": model.sha256,
               "hidden_size": model.hidden_size, "prompt_version": train[0].prompt_version}
    fit = fit_question(f"{policy.name}/{question.id}", question.option_ids, signals,
                       formula=question.confidence_formula.value, folds=folds, seed=seed, targets=targets, curve=curve)
    document = head_fit.head_document(fit.fitted, options=question.option_ids, binding=binding, data=sources,
                                      fitted_on=fitted_on, sampled_from=len(train))
    said = head_fit.attach_novelty(document, fit.fitted, binding=binding, budget=novelty_budget, seed=seed, folds=folds)
    if say is not None:
        say(f"{policy.name}/{question.id}: {said}")
    return fit, learn.stamp_version(document, policy.name, question.id)
