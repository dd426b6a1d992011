"""Fitting one policy question's head into its head file's document: what `make fit` writes
beside the policy and what the relearning workflow promotes into the head store."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from decision_router import sentences
from decision_router.domain.heads import LETTERED_OPTIONS, MAX_HEAD_BYTES, MAX_MANY_OPTIONS_HEAD_BYTES

from . import learn, novelty
from .features import Example

REPO = Path(__file__).resolve().parents[1]
#: The shipped labelled sets (the relearning image carries them at the same place).
SHIPPED = [REPO / "bench/data/support-tickets.jsonl", REPO / "bench/data/incidents.jsonl"]
#: Rows of this split are never fitted on.
TEST_SPLIT = "test"


def fit_head(policy: Any, question: Any, train: list[Example], model: Any, *, sources: list[str], folds: int = 5,
             seed: int = 0, target_error: float | None = None, curve: bool = True,
             fitted_on: date, novelty_budget: float = novelty.DEFAULT_BUDGET,
             say: Any = None, encoder: str | None = sentences.DEFAULT_ENCODER) -> tuple[learn.QuestionFit, dict]:
    """One policy question's head fitted on `train` and its head file's document (versioned by its
    own content), with its novelty part (training/novelty.py: the share `novelty_budget` of
    in-scope items sent to review, out of fold): what `make fit` writes and what the relearning
    workflow promotes. `encoder`: the sentence encoder the head reads beside TF-IDF (None: none)."""
    signals = learn.Signals.build(
        [e.state for e in train], np.array([e.hidden for e in train]), [e.letter_logits for e in train],
        np.array([e.gold for e in train]), [e.fold_group for e in train],
        text_fields=[s.key for s in policy.state], categorical_fields=policy.categorical_keys, encoder=encoder)
    goals = question.learning
    targets = learn.Targets(
        max_error=target_error if target_error is not None else goals.max_auto_error,
        protected=tuple(question.option_ids.index(o) for o in goals.protect),
        max_under_assignment=goals.max_under_assignment)
    binding = {"question_sha256": policy.question_sha256(question), "model_sha256": model.sha256,
               "hidden_size": model.hidden_size, "prompt_version": train[0].prompt_version}
    fit = learn.fit_question(f"{policy.name}/{question.id}", question.option_ids, signals, binding=binding,
                             formula=question.confidence_formula.value, folds=folds, seed=seed,
                             targets=targets, curve=curve)
    document = learn.head_document(fit, version="", binding=binding, data=sources, fitted_on=fitted_on)
    limit = MAX_HEAD_BYTES if len(question.option_ids) <= LETTERED_OPTIONS else MAX_MANY_OPTIONS_HEAD_BYTES
    # the head's own surprise, out of fold for every training item, joins the distance
    surprise = novelty.Surprise(np.arange(len(train)), novelty.Surprise.of(np.vstack(fit.head.probabilities)))
    if "sentence" in document:  # in the encoder's space: bound to no model
        said = novelty.attach(document, signals.gold, max_bytes=limit, sentences=signals.sentences,
                              budget=novelty_budget, folds=folds, seed=seed, surprise=surprise)
    elif fit.model_weight > 0:
        said = novelty.attach(document, signals.gold, max_bytes=limit, hidden=signals.hidden, binding=binding,
                              budget=novelty_budget, folds=folds, seed=seed, groups=signals.groups, surprise=surprise)
    else:  # a head on the text alone serves any model: a novelty part would bind it to this one
        said = "no novelty part: the head reads the text alone (model weight 0), so it serves any model"
    if say is not None:
        say(f"{policy.name}/{question.id}: {said}")
    return fit, learn.stamp_version(document, policy.name, question.id)
