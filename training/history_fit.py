"""`make fit-history`'s fitting step, the head (`fit`): its model weight and C chosen on a
held-out fifth of DATA, its temperature and threshold read from out-of-fold logits, fitted on every
row (a stratified sample of a large export), written by the one head writer `make fit` and
relearning use (training/learn.py `head_file`), its novelty part attached; beside it the text
classifier a user would compare with, fitted on the same rows."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from datetime import date
from typing import Any, Callable, Sequence

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from decision_contract import MAX_OPTIONS, ModelInfo
from decision_router import sentences
from decision_router.domain.heads import LETTERED_OPTIONS, MAX_HEAD_BYTES, MAX_MANY_OPTIONS_HEAD_BYTES
from evaluation import metrics, text_classifier

from . import learn, novelty
from .history_policy import question_sha256
from .learn import stratified_sample
from .thresholds import OutOfFoldReadout, judge

#: Weights in a head's rows (options x terms + hidden width) at most; make fit-history keeps the
#: most frequent terms so a many-option head stays within MAX_MANY_OPTIONS_HEAD_BYTES.
MAX_WEIGHTS = 1_600_000
#: The same for a head of at most 16 options (MAX_HEAD_BYTES, 2 MB).
LETTERED_WEIGHTS = 150_000
#: The model's blocks against the lexical ones, chosen on the held-out fifth (0: text only).
MODEL_WEIGHTS = (0.0, 1.0)
#: The regularisation the model's weight is chosen at; then, for that weight, the one of C_CHOICES
#: with the least held-out log loss (a few labels a option want a stronger prior than thousands).
HEAD_C = 10.0
C_CHOICES = (1.0, 3.0, 10.0, 30.0, 100.0)
#: Fewer training rows an option than this, on average, and the head keeps terms seen in a single
#: row (learn.MIN_DF otherwise): with an item or two an option, such a term is often all the
#: evidence its option has (the text classifier keeps them at every size).
FEW_ROWS_AN_OPTION = 5
#: Fewer held-out items of options the fitting rows saw than this, and neither is chosen: C stays
#: HEAD_C (the text classifier's) and the model's weight the largest asked for.
MIN_JUDGED = 10
#: The temperature and the threshold are read from out-of-fold logits of this many folds over the
#: grid sample (every row held out once); the model's weight from the first fold alone.
FOLDS = 5
#: A larger history is learned from stratified samples, so that fitting takes minutes and bounded
#: memory at a million rows: the model's weight, the temperature and the threshold are chosen on at
#: most GRID_ROWS rows (the weight on a held-out fifth of them, the temperature and the threshold
#: out of fold over all of them), and the head and the text classifier it is compared with are
#: fitted on the same FIT_ROWS at most. Every fitted row is embedded by the sentence encoder (1.5 ms
#: a short query, 4 ms a ticket-length text here), which is most of a large export's fit: at
#: 20,000 rows a text-only fit of 100,000 tickets takes minutes (docs/benchmarks/history-scale.md).
GRID_ROWS, FIT_ROWS = 20_000, 20_000
BASELINE_ROWS = FIT_ROWS
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


@dataclass
class _Rows:
    """One fit's signals and rows: the head's (`s`, a stratified sample of at most FIT_ROWS), TEST's
    (read by the text classifier alone), the grid (at most GRID_ROWS) and its folds, the first held
    out to choose the model's weight and C, and the head's vocabulary limits."""

    s: learn.Signals
    test: learn.Signals
    k: int
    grid: np.ndarray
    parts: list[np.ndarray]
    max_terms: int
    min_df: int

    @property
    def held(self) -> np.ndarray:
        return self.parts[0]

    @property
    def fit_rows(self) -> np.ndarray:
        return np.setdiff1d(self.grid, self.held)

    def space_on(self, rows: np.ndarray) -> learn.Space:
        return learn.Space.fit(self.s, rows, max_terms=self.max_terms, min_df=self.min_df)


@dataclass
class _Choice:
    """The model's weight and C chosen on the held-out fifth, and the log losses they were chosen by."""

    weight: float
    head_C: float
    at_C: dict[float, learn.Linear]  # the heads fitted on the fitting rows, by C, at `weight`
    losses: dict[float, float]  # by model weight
    c_losses: dict[float, float]
    judged: int  # held-out items of options the fitting rows saw


@dataclass
class _OutOfFold:
    rows: np.ndarray
    logits: np.ndarray
    temperature: float
    readout: OutOfFoldReadout


@dataclass
class _Baseline:
    rows: np.ndarray
    readout: OutOfFoldReadout
    test: np.ndarray
    columns: dict[str, Any]


def fit(raw: dict[str, Any], train_states: list[Any], train_hidden: np.ndarray, gold: np.ndarray,
        test_states: list[Any], test_hidden: np.ndarray, *, model: ModelInfo, prompt_version: str, max_error: float,
        seed: int, data: list[str], say: Callable[[str], None], terms_cap: int | None = None,
        model_weight: float | None = None, novelty_budget: float | None = novelty.DEFAULT_BUDGET,
        out_of_scope_hidden: np.ndarray | None = None, out_of_scope_states: list[Any] | None = None,
        encoder: str | None = sentences.DEFAULT_ENCODER) -> Fitted:
    question = raw["questions"][0]
    rows = _rows(raw, train_states, train_hidden, gold, test_states, test_hidden, seed=seed, say=say, terms_cap=terms_cap,
                 encoder=encoder)
    s, n = rows.s, len(rows.s)
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        choice = _choose(rows, model_weight, say)
        oof = _out_of_fold(rows, choice, max_error, say)
        started = time.perf_counter()
        final = learn.fit_linear(s, np.arange(n), rows.k, choice.head_C, choice.weight, space=rows.space_on(np.arange(n)))
        say(f"  head on all {n}: {time.perf_counter() - started:.0f} s")
        baseline = _baseline(rows, max_error, seed, say)
    binding = {"question_sha256": question_sha256(raw), "model_sha256": model.sha256, "hidden_size": model.hidden_size,
               "prompt_version": prompt_version}
    record = {"examples": n, **({"sampled_from": len(gold)} if n < len(gold) else {}),
              "fitted_on": date.today().isoformat(), "data": data, "regularisation": choice.head_C,
              "model_weight": choice.weight, "folds": len(rows.parts), "cv_accuracy": round(oof.readout.accuracy, 4),
              "cv_ece": round(oof.readout.ece, 4), "text_only_cv_accuracy": round(baseline.readout.accuracy, 4)}
    # the letters are not read (a many-option question has none): their block is left out
    document = learn.head_file(final, s, options=[o["id"] for o in question["options"]], binding=binding,
                               temperature=oof.temperature, min_confidence=oof.readout.min_confidence, fit=record,
                               letters=False)
    # None: no novelty part (a head on the text alone without an encoder: nothing it could read
    # would not bind it to a model)
    if novelty_budget is not None and ("hidden" in document or s.sentences is not None):
        _attach_novelty(document, rows, final, oof, binding, novelty_budget, seed, say, out_of_scope_hidden,
                        out_of_scope_states, encoder)
    learn.stamp_version(document, raw["name"], question["id"])
    return Fitted(document, _holdout(rows, choice, oof, baseline, len(final.space.terms)), baseline.readout.min_confidence,
                  baseline.test)


def _rows(raw: dict[str, Any], train_states: list[Any], train_hidden: np.ndarray, gold: np.ndarray,
          test_states: list[Any], test_hidden: np.ndarray, *, seed: int, say: Callable[[str], None],
          terms_cap: int | None, encoder: str | None) -> _Rows:
    """The head's rows (a stratified sample of at most FIT_ROWS), embedded; the grid and its folds;
    how many terms the head's size limit leaves, and whether a term seen in one row is kept."""
    k = len(raw["questions"][0]["options"])
    fields = [s["key"] for s in raw["state"]]
    rows = stratified_sample(gold, FIT_ROWS, seed)
    if len(rows) < len(gold):
        say(f"  {len(gold)} training rows: the head is fitted on a stratified sample of {len(rows)}")
    started = time.perf_counter()
    s = head_signals([train_states[i] for i in rows], train_hidden[rows].astype(np.float64), gold[rows], fields, encoder)
    # TEST is read here by the text classifier alone; the head judges it as routing does (history_judging)
    test = head_signals(test_states, test_hidden, np.zeros(len(test_states), dtype=int), fields, None)
    if encoder is not None:
        say(f"  {len(s)} items embedded by {encoder}: {time.perf_counter() - started:.0f} s")
    n = len(s)
    grid = stratified_sample(s.gold, GRID_ROWS, seed)
    parts = [grid[part] for part in metrics.fold_indices(len(grid), FOLDS, seed)]
    budget = MAX_WEIGHTS if k > MAX_OPTIONS else LETTERED_WEIGHTS
    width = train_hidden.shape[1] + (0 if s.sentences is None else s.sentences.shape[1])
    max_terms = min(learn.MAX_TERMS, max(500, budget // k - width), terms_cap or learn.MAX_TERMS)
    seen_options = len(np.unique(s.gold))
    min_df = 1 if n < FEW_ROWS_AN_OPTION * seen_options else learn.MIN_DF
    if min_df == 1:
        say(f"  {n} rows for {seen_options} options (fewer than {FEW_ROWS_AN_OPTION} an option): the head keeps terms seen "
            "in one row too")
    return _Rows(s, test, k, grid, parts, max_terms, min_df)


def _choose(rows: _Rows, model_weight: float | None, say: Callable[[str], None]) -> _Choice:
    """The model's weight (MODEL_WEIGHTS, or the one asked for) at HEAD_C, then C for that weight
    (`search_C`), each by the held-out fifth's log loss."""
    s, held, fit_rows = rows.s, rows.held, rows.fit_rows
    space = rows.space_on(fit_rows)
    losses = {}
    weights = MODEL_WEIGHTS if model_weight is None else (model_weight,)
    # Only held-out items of options the fitting rows saw judge a choice: an item of an option the
    # head never saw is no choice it could get right, and its log loss favours the flattest head
    # (with a few items a label, most held-out items are such)
    seen = np.isin(s.gold[held], s.gold[fit_rows])
    judged, judged_gold = np.flatnonzero(seen), list(s.gold[held][seen])
    choose = len(judged) >= MIN_JUDGED
    if not choose:
        say(f"  {len(judged)} held-out item(s) of options the fitting rows saw (fewer than {MIN_JUDGED}): nothing is "
            f"chosen, C {HEAD_C:g} and the model's weight {weights[-1]:g}")
    fitted: dict[float, learn.Linear] = {}  # at HEAD_C, by model weight
    for weight in weights if choose else weights[-1:]:
        started = time.perf_counter()
        fitted[weight] = learn.fit_linear(s, fit_rows, rows.k, HEAD_C, weight, space=space)
        held_logits = learn.numpy_logits(fitted[weight], s, held)
        if choose:
            losses[weight] = metrics.mean_nll_at(list(held_logits[judged]), judged_gold, 1.0)
            say(f"  head, model weight {weight}: held-out log loss {losses[weight]:.3f} ({time.perf_counter() - started:.0f} s)")
    weight = min(losses, key=lambda w: (round(losses[w], 9), w)) if choose else weights[-1]
    at_C: dict[float, learn.Linear] = {HEAD_C: fitted[weight]}
    c_losses: dict[float, float] = {}
    if choose:
        search_C(lambda C: learn.fit_linear(s, fit_rows, rows.k, C, weight, space=space),
                 lambda linear: learn.numpy_logits(linear, s, held)[judged], judged_gold, at_C, c_losses,
                 lambda C, loss, at, seconds: say(f"  head, model weight {weight}, C {C:g}: held-out log loss {loss:.3f} "
                                                  f"at temperature {at:.2f} ({seconds:.0f} s)"))
    head_C = min(c_losses, key=lambda c: (round(c_losses[c], 9), abs(np.log(c / HEAD_C)))) if choose else HEAD_C
    return _Choice(weight, head_C, at_C, losses, c_losses, len(judged))


def _out_of_fold(rows: _Rows, choice: _Choice, max_error: float, say: Callable[[str], None]) -> _OutOfFold:
    """The chosen head's logits on every grid row out of fold (the first fold's head is the one
    the choice fitted), the temperature fitted on them and the threshold judged at it."""
    s = rows.s
    started = time.perf_counter()
    oof_logits = [learn.numpy_logits(choice.at_C[choice.head_C], s, rows.held)]
    for part in rows.parts[1:]:
        train = np.setdiff1d(rows.grid, part)
        linear = learn.fit_linear(s, train, rows.k, choice.head_C, choice.weight, space=rows.space_on(train))
        oof_logits.append(learn.numpy_logits(linear, s, part))
    oof_rows, oof = np.concatenate(rows.parts), np.vstack(oof_logits)
    say(f"  head out of fold ({len(rows.parts)} folds of {len(rows.grid)} rows): {time.perf_counter() - started:.0f} s")
    temperature = metrics.fit_temperature(list(oof), list(s.gold[oof_rows])).temperature
    readout = judge(learn._softmax_rows(oof, temperature), s.gold[oof_rows], FORMULA, max_error, 5)
    return _OutOfFold(oof_rows, oof, temperature, readout)


def _baseline(rows: _Rows, max_error: float, seed: int, say: Callable[[str], None]) -> _Baseline:
    """The text classifier on the same folds (its threshold judged the same way) and, fitted on at
    most BASELINE_ROWS, on TEST."""
    s, k = rows.s, rows.k
    started = time.perf_counter()
    base_rows = stratified_sample(s.gold, BASELINE_ROWS, seed)
    base_oof = np.vstack([learn.baseline_probabilities(s, np.intersect1d(np.setdiff1d(rows.grid, part), base_rows), part, k)
                          for part in rows.parts])
    readout = judge(list(base_oof), s.gold[np.concatenate(rows.parts)], FORMULA, max_error, 5)
    base_test = learn.baseline_probabilities(s, base_rows, np.arange(len(rows.test)), k, rows.test)
    columns = text_classifier.columns_read(s.classifier_counts.rows(base_rows))
    left_out = [f"{c['read']:,} of its {c['seen']:,} {kind} n-gram columns"
                for kind, c in columns.items() if c["read"] < c["seen"]]
    say(f"  text classifier (TF-IDF + logistic regression): {time.perf_counter() - started:.0f} s"
        + (f"; it read the most frequent {' and '.join(left_out)}" if left_out else ""))
    return _Baseline(base_rows, readout, base_test, columns)


def _attach_novelty(document: dict[str, Any], rows: _Rows, final: learn.Linear, oof: _OutOfFold,
                    binding: dict[str, Any], budget: float, seed: int, say: Callable[[str], None],
                    out_of_scope_hidden: np.ndarray | None, out_of_scope_states: list[Any] | None,
                    encoder: str | None) -> None:
    """The head's novelty part (training/novelty.py), in the sentence encoder's space or over the
    hidden state, its surprise out of fold; DATA's out-of-scope items, when there are any, score
    how much of them it catches."""
    s, k = rows.s, rows.k
    started = time.perf_counter()
    surprise = novelty.Surprise(oof.rows, novelty.Surprise.of(np.vstack(learn._softmax_rows(oof.logits, oof.temperature))))
    outside = None
    if out_of_scope_states:
        if out_of_scope_hidden is None or not len(out_of_scope_hidden):
            out_of_scope_hidden = np.zeros((len(out_of_scope_states), s.hidden.shape[1]))
        outside = head_signals(out_of_scope_states, out_of_scope_hidden, np.zeros(len(out_of_scope_states), dtype=int),
                           s.text_fields, encoder)
        logits = learn.numpy_logits(final, outside, np.arange(len(outside)))
        surprise.out_of_scope = novelty.Surprise.of(np.vstack(learn._softmax_rows(logits, oof.temperature)))
    said = novelty.attach(
        document, s.gold, max_bytes=MAX_HEAD_BYTES if k <= LETTERED_OPTIONS else MAX_MANY_OPTIONS_HEAD_BYTES,
        sentences=s.sentences, hidden=s.hidden if "hidden" in document else None,
        binding={key: binding[key] for key in learn.MODEL_BINDING},
        budget=budget, folds=FOLDS, seed=seed, surprise=surprise,
        out_of_scope=None if outside is None else (outside.sentences if "sentence" in document else outside.hidden))
    say(f"  {said} ({time.perf_counter() - started:.0f} s)")


def _holdout(rows: _Rows, choice: _Choice, oof: _OutOfFold, baseline: _Baseline, terms: int) -> dict[str, Any]:
    """What report.json's `holdout` says of the choices and of the out-of-fold readouts."""
    readout, base_readout = oof.readout, baseline.readout
    return {"rows": len(rows.held), "grid_rows": len(rows.grid), "folds": len(rows.parts), "fitted_rows": len(rows.s),
            "model_weight": choice.weight, "judged_rows": choice.judged, "min_df": rows.min_df,
            "log_loss": {str(w): v for w, v in choice.losses.items()}, "regularisation": choice.head_C,
            "log_loss_by_C": {f"{c:g}": v for c, v in choice.c_losses.items()},
            "accuracy": readout.accuracy, "min_confidence": readout.min_confidence, "auto_share": readout.auto_routed_share,
            "auto_precision": readout.auto_routed_accuracy, "auto_precision_lower_bound": readout.auto_routed_lower_bound,
            "items_needed": readout.items_needed,
            "baseline_accuracy": base_readout.accuracy, "baseline_min_confidence": base_readout.min_confidence,
            "terms": terms, "baseline_rows": len(baseline.rows), "baseline_columns": baseline.columns}


def search_C(fit_at: Callable[[float], learn.Linear], held_logits: Callable[[learn.Linear], np.ndarray],
             held_gold: list[int], at_C: dict[float, learn.Linear], losses: dict[float, float],
             said: Callable[[float, float, float, float], None]) -> None:
    """C by the held-out log loss at its own best temperature (the head is calibrated after, so a
    large C's overconfidence is not held against it, only how well it ranks the options), searched
    from HEAD_C (its head in `at_C`) one step of C_CHOICES at a time: up while the loss falls, or,
    when the first step up does not lower it, down while it falls (the loss has one low point in C:
    the C's beyond a rise are not fitted). Fills `at_C` and `losses` with every C tried;
    `said(C, loss, temperature, seconds)`."""
    def tried(C: float) -> float:
        started = time.perf_counter()
        if C not in at_C:
            at_C[C] = fit_at(C)
        logits = list(held_logits(at_C[C]))
        at = metrics.fit_temperature(logits, held_gold).temperature
        losses[C] = metrics.mean_nll_at(logits, held_gold, at)
        said(C, losses[C], at, time.perf_counter() - started)
        return round(losses[C], 9)

    best = tried(HEAD_C)
    larger = [C for C in C_CHOICES if C > HEAD_C]
    smaller = [C for C in reversed(C_CHOICES) if C < HEAD_C]
    for direction in (larger, smaller):
        previous = HEAD_C
        for C in direction:
            loss = tried(C)
            if loss >= best:
                break
            best, previous = loss, C
        if previous != HEAD_C:  # the loss fell this way: the other way it would rise
            return
