"""`make fit-history`'s fitting step, the head (`fit`): fitted by the one head fitter `make fit` and
relearning use (training/head_fit.py: its model weight and C chosen on held-out rows of DATA, its
temperature and threshold read from out-of-fold logits, fitted on every row, or a stratified sample
of a large export), written by the one head writer (training/learn.py `head_file`), its novelty part
attached; beside it the text classifier a user would compare with, fitted on the same rows, on TEST."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date
from typing import Any, Callable, Sequence

import numpy as np

from decision_contract import ModelInfo
from decision_router import sentences
from evaluation import text_classifier

from . import head_fit, learn, novelty
from .history_policy import question_sha256
from .thresholds import Targets

#: The confidence formula the head's threshold and the text classifier's are read with.
FORMULA = "normalized_peak"


@dataclass
class Fitted:
    document: dict[str, Any]
    holdout: dict[str, Any]
    baseline_threshold: float | None
    baseline_probabilities: np.ndarray  # on TEST


def head_signals(st: Sequence[Any], hidden: np.ndarray, gold: np.ndarray, fields: Sequence[str],
                 encoder: str | None) -> learn.Signals:
    # the letters are not read (a many-option question has none): one constant column, weight 0
    return learn.Signals.build(st, hidden, list(np.zeros((len(st), 1))), gold, [str(i) for i in range(len(st))],
                               text_fields=fields, categorical_fields=[], encoder=encoder)


def fit(raw: dict[str, Any], train_states: list[Any], train_hidden: np.ndarray, gold: np.ndarray,
        test_states: list[Any], test_hidden: np.ndarray, *, model: ModelInfo, prompt_version: str, max_error: float,
        seed: int, data: list[str], say: Callable[[str], None], terms_cap: int | None = None,
        model_weight: float | None = None, novelty_budget: float | None = novelty.DEFAULT_BUDGET,
        out_of_scope_hidden: np.ndarray | None = None, out_of_scope_states: list[Any] | None = None,
        encoder: str | None = sentences.DEFAULT_ENCODER, fitted_on: date | None = None) -> Fitted:
    question = raw["questions"][0]
    fields = [s["key"] for s in raw["state"]]
    rows = head_fit.sample(gold, seed)
    if len(rows) < len(gold):
        say(f"  {len(gold)} training rows: the head is fitted on a stratified sample of {len(rows)}")
    started = time.perf_counter()
    s = head_signals([train_states[i] for i in rows], train_hidden[rows].astype(np.float64), gold[rows], fields, encoder)
    if encoder is not None:
        say(f"  {len(s)} items embedded by {encoder}: {time.perf_counter() - started:.0f} s")
    fitted = head_fit.fit(s, len(question["options"]), seed=seed, formula=FORMULA, targets=Targets(max_error=max_error),
                          model_weight=model_weight, terms_cap=terms_cap, say=say)
    binding = {"question_sha256": question_sha256(raw), "model_sha256": model.sha256, "hidden_size": model.hidden_size,
               "prompt_version": prompt_version}
    document = head_fit.head_document(fitted, options=[o["id"] for o in question["options"]], binding=binding, data=data,
                                      fitted_on=fitted_on or date.today(), sampled_from=len(gold))
    started = time.perf_counter()
    said = head_fit.attach_novelty(document, fitted, binding=binding, budget=novelty_budget, seed=seed,
                                   out_of_scope=_out_of_scope(s, out_of_scope_hidden, out_of_scope_states, encoder))
    say(f"  {said} ({time.perf_counter() - started:.0f} s)")
    learn.stamp_version(document, raw["name"], question["id"])
    # TEST is read here by the text classifier alone; the head judges it as routing does (history_judging)
    test = head_signals(test_states, test_hidden, np.zeros(len(test_states), dtype=int), fields, None)
    base_test = learn.baseline_probabilities(s, fitted.baseline_rows, np.arange(len(test)), fitted.rows.k, test)
    columns = text_classifier.columns_read(s.classifier_counts.rows(fitted.baseline_rows))
    left_out = [f"{c['read']:,} of its {c['seen']:,} {kind} n-gram columns" for kind, c in columns.items() if c["read"] < c["seen"]]
    if left_out:
        say(f"  the text classifier read the most frequent {' and '.join(left_out)}")
    return Fitted(document, _holdout(fitted, columns), fitted.text_only.min_confidence, base_test)


def _out_of_scope(s: learn.Signals, hidden: np.ndarray | None, states: list[Any] | None,
                  encoder: str | None) -> learn.Signals | None:
    """DATA's out-of-scope items, whose scores choose the novelty part's surprise weight (None: none)."""
    if not states:
        return None
    if hidden is None or not len(hidden):
        hidden = np.zeros((len(states), s.hidden.shape[1]))
    return head_signals(states, hidden, np.zeros(len(states), dtype=int), s.text_fields, encoder)


def _holdout(fitted: head_fit.FittedHead, columns: dict[str, Any]) -> dict[str, Any]:
    """What report.json's `holdout` says of the choices and of the out-of-fold readouts."""
    rows, choice, readout, base_readout = fitted.rows, fitted.choice, fitted.oof.readout, fitted.text_only
    return {"rows": choice.held, "grid_rows": len(rows.grid), "folds": len(rows.parts), "judging_folds": rows.judging,
            "fitted_rows": len(rows.s), "model_weight": choice.weight, "judged_rows": choice.judged, "min_df": rows.min_df,
            "log_loss": {str(w): v for w, v in choice.losses.items()}, "regularisation": choice.head_C,
            "log_loss_by_C": {f"{c:g}": v for c, v in choice.c_losses.items()},
            "accuracy": readout.accuracy, "min_confidence": readout.min_confidence, "auto_share": readout.auto_routed_share,
            "auto_precision": readout.auto_routed_accuracy, "auto_precision_lower_bound": readout.auto_routed_lower_bound,
            "items_needed": readout.items_needed,
            "baseline_accuracy": base_readout.accuracy, "baseline_min_confidence": base_readout.min_confidence,
            "terms": len(fitted.linear.space.terms), "baseline_rows": len(fitted.baseline_rows), "baseline_columns": columns}
