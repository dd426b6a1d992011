"""The one head fitter of `make fit`, relearning and `make fit-history`, with its one model-selection
rule, so that the same rows and signals give the same head file, byte for byte, whichever of them fits.

The rule:
- a history of more than FIT_ROWS rows is learned from a stratified sample of them (`sample`), and
  the choices below are made on a stratified sample of at most GRID_ROWS (the grid), cut into FOLDS
  folds that never split a fold group;
- the choices are judged on held-out rows: the first fold alone, or, on a grid of fewer than
  ALL_FOLDS_BELOW rows, every fold (each judged by heads fitted on the other folds), so that a small
  set's choice does not rest on a few dozen rows; only held-out rows of options their fitting rows
  saw judge (an unseen option is no choice a head could get right, and its log loss favours the
  flattest head), and with fewer than MIN_JUDGED of them nothing is chosen (C HEAD_C, the largest
  model weight);
- the model's weight (MODEL_WEIGHTS; 0 alone when the model's signals never vary) by the held-out
  log loss at HEAD_C, then C stepwise outward from HEAD_C through C_CHOICES (`search_C`); each
  loss is read at its own best temperature, because the head is calibrated after: a larger weight's
  larger logits are not held against it, only how well it ranks the options;
- the temperature fitted on the chosen head's out-of-fold logits over the grid, the threshold (and a
  protected question's per-option minimums) read from them at that temperature; the head fitted on
  every row, and its novelty part attached (training/novelty.py).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from datetime import date
from typing import Any, Callable

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from decision_contract import MAX_OPTIONS
from decision_router.domain.heads import LETTERED_OPTIONS, MAX_HEAD_BYTES, MAX_MANY_OPTIONS_HEAD_BYTES
from evaluation import metrics

from . import learn, novelty
from .thresholds import OutOfFoldReadout, Targets, option_thresholds, threshold_readout

#: Weights in a head's rows (options x terms + dense width) at most; the most frequent terms are kept
#: so that a many-option head stays within MAX_MANY_OPTIONS_HEAD_BYTES.
MAX_WEIGHTS = 1_600_000
#: The same for a head of at most 16 options (MAX_HEAD_BYTES, 2 MB).
LETTERED_WEIGHTS = 150_000
#: The model's blocks against the lexical ones (0: text only; 0.5 is what the shipped incident team
#: head chose on its few hundred rows).
MODEL_WEIGHTS = (0.0, 0.5, 1.0)
#: The regularisation the model's weight is chosen at; then, for that weight, the one of C_CHOICES
#: with the least held-out log loss (a few labels an option want a stronger prior than thousands).
HEAD_C = 10.0
C_CHOICES = (1.0, 3.0, 10.0, 30.0, 100.0)
#: Fewer training rows an option than this, on average, and the head keeps terms seen in a single
#: row (learn.MIN_DF otherwise): with an item or two an option, such a term is often all the
#: evidence its option has (the text classifier keeps them at every size).
FEW_ROWS_AN_OPTION = 5
#: Fewer held-out items of options the fitting rows saw than this, and neither is chosen: C stays
#: HEAD_C (the text classifier's) and the model's weight the largest asked for.
MIN_JUDGED = 10
#: The folds the grid is cut into: the temperature and the threshold are read from the out-of-fold
#: logits of all of them (every grid row held out once).
FOLDS = 5
#: A grid of fewer rows than this is judged on every fold, not on the first alone: a fifth of a few
#: hundred rows is too few to choose by (a few hundred rows: `make fit`'s shipped sets, a young
#: relearning history).
ALL_FOLDS_BELOW = 1_000
#: A larger history is learned from stratified samples, so that fitting takes minutes and bounded
#: memory at a million rows: the choices are made on at most GRID_ROWS rows and the head and the
#: text classifier it is compared with are fitted on the same FIT_ROWS at most. Every fitted row is
#: embedded by the sentence encoder, which is most of a large export's fit
#: (docs/benchmarks/history-scale.md).
GRID_ROWS, FIT_ROWS = 20_000, 20_000
BASELINE_ROWS = FIT_ROWS

Say = Callable[[str], None]


def sample(gold: np.ndarray, seed: int) -> np.ndarray:
    """The rows a head is fitted on: every row, or a stratified sample of FIT_ROWS of a larger history."""
    return learn.stratified_sample(gold, FIT_ROWS, seed)


@dataclass
class HeadRows:
    """One fit's signals and rows: the grid (at most GRID_ROWS) and its folds, how many of them judge
    the choices, and the head's vocabulary limits."""

    s: learn.Signals
    k: int
    grid: np.ndarray
    parts: list[np.ndarray]
    judging: int  # the first `judging` folds judge the model's weight and C
    max_terms: int
    min_df: int

    @property
    def judged_parts(self) -> list[np.ndarray]:
        return self.parts[:self.judging]

    def train_of(self, part: np.ndarray) -> np.ndarray:
        return np.setdiff1d(self.grid, part)

    def space_on(self, rows: np.ndarray) -> learn.FeatureSpace:
        return learn.FeatureSpace.fit(self.s, rows, max_terms=self.max_terms, min_df=self.min_df)


def head_rows(s: learn.Signals, k: int, *, seed: int, folds: int = FOLDS, terms_cap: int | None = None,
              say: Say) -> HeadRows:
    """The grid and its folds (never splitting a fold group); how many terms the head's size limit
    leaves, and whether a term seen in one row is kept."""
    grid = learn.stratified_sample(s.gold, GRID_ROWS, seed)
    parts = [grid[part] for part in metrics.fold_indices(len(grid), folds, seed, [s.groups[i] for i in grid])]
    if len(parts) < 2:
        raise ValueError(f"{len(s)} labelled rows in {len(set(s.groups))} fold groups: need two folds at least")
    budget = MAX_WEIGHTS if k > MAX_OPTIONS else LETTERED_WEIGHTS
    width = s.hidden.shape[1] + (0 if s.sentences is None else s.sentences.shape[1])
    max_terms = min(learn.MAX_TERMS, max(500, budget // k - width), terms_cap or learn.MAX_TERMS)
    seen_options = len(np.unique(s.gold))
    min_df = 1 if len(s) < FEW_ROWS_AN_OPTION * seen_options else learn.MIN_DF
    if min_df == 1:
        say(f"  {len(s)} rows for {seen_options} options (fewer than {FEW_ROWS_AN_OPTION} an option): the head keeps "
            "terms seen in one row too")
    return HeadRows(s, k, grid, parts, len(parts) if len(grid) < ALL_FOLDS_BELOW else 1, max_terms, min_df)


@dataclass
class Choice:
    """The model's weight and C chosen on the held-out rows, and the log losses they were chosen by."""

    weight: float
    head_C: float
    at_C: dict[float, list[learn.Linear]]  # the judging folds' heads, by C, at `weight`
    losses: dict[float, float]  # by model weight
    c_losses: dict[float, float]
    held: int  # the held-out rows judging
    judged: int  # of them, rows of options their fitting rows saw


def model_signals_vary(s: learn.Signals) -> bool:
    """Whether the model's hidden state or letters vary at all: a fit on the words alone passes
    constants, which carry nothing (weight 0 alone, rather than a tie the solver's last digits break)."""
    return bool((s.hidden.std(axis=0) > 1e-8).any() or letters_vary(s))


def letters_vary(s: learn.Signals) -> bool:
    return bool((learn.centre(s.letters).std(axis=0) > 1e-8).any())


def _choose(rows: HeadRows, model_weight: float | None, say: Say) -> Choice:
    """The model's weight (MODEL_WEIGHTS, or the one asked for) at HEAD_C, then C for that weight
    (`search_C`), each by the judging folds' held-out log loss."""
    s, k, judging = rows.s, rows.k, rows.judged_parts
    spaces = [rows.space_on(rows.train_of(part)) for part in judging]
    seen = np.concatenate([np.isin(s.gold[part], s.gold[rows.train_of(part)]) for part in judging])
    judged = np.flatnonzero(seen)
    judged_gold = list(s.gold[np.concatenate(judging)][judged])
    weights = (model_weight,) if model_weight is not None else MODEL_WEIGHTS if model_signals_vary(s) else (0.0,)
    choose = len(judged) >= MIN_JUDGED
    if not choose:
        say(f"  {len(judged)} held-out item(s) of options the fitting rows saw (fewer than {MIN_JUDGED}): nothing is "
            f"chosen, C {HEAD_C:g} and the model's weight {weights[-1]:g}")

    def fit_at(C: float, weight: float) -> list[learn.Linear]:
        return [learn.fit_linear(s, rows.train_of(part), k, C, weight, space=space) for part, space in zip(judging, spaces)]

    def held_logits(heads: list[learn.Linear]) -> np.ndarray:
        return np.vstack([learn.numpy_logits(head, s, part) for head, part in zip(heads, judging)])[judged]

    fitted: dict[float, list[learn.Linear]] = {}  # at HEAD_C, by model weight
    losses: dict[float, float] = {}
    for weight in weights if choose else weights[-1:]:
        started = time.perf_counter()
        fitted[weight] = fit_at(HEAD_C, weight)
        if choose:
            logits = list(held_logits(fitted[weight]))
            losses[weight] = metrics.mean_nll_at(logits, judged_gold, metrics.fit_temperature(logits, judged_gold).temperature)
            say(f"  head, model weight {weight}: held-out log loss {losses[weight]:.3f} ({time.perf_counter() - started:.0f} s)")
    weight = min(losses, key=lambda w: (round(losses[w], 9), w)) if choose else weights[-1]
    at_C: dict[float, list[learn.Linear]] = {HEAD_C: fitted[weight]}
    c_losses: dict[float, float] = {}
    if choose:
        search_C(lambda C: fit_at(C, weight), held_logits, judged_gold, at_C, c_losses,
                 lambda C, loss, at, seconds: say(f"  head, model weight {weight}, C {C:g}: held-out log loss {loss:.3f} "
                                                  f"at temperature {at:.2f} ({seconds:.0f} s)"))
    head_C = min(c_losses, key=lambda c: (round(c_losses[c], 9), abs(np.log(c / HEAD_C)))) if choose else HEAD_C
    return Choice(weight, head_C, at_C, losses, c_losses, int(len(seen)), len(judged))


def search_C(fit_at: Callable[[float], Any], held_logits: Callable[[Any], np.ndarray], held_gold: list[int],
             at_C: dict[float, Any], losses: dict[float, float], said: Callable[[float, float, float, float], None]) -> None:
    """C by the held-out log loss at its own best temperature (the head is calibrated after, so a
    large C's overconfidence is not held against it, only how well it ranks the options), searched
    from HEAD_C (its heads in `at_C`) one step of C_CHOICES at a time: up while the loss falls, or,
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


@dataclass
class OutOfFold:
    """The chosen head's logits on every grid row out of fold (in the folds' order), the temperature
    fitted on them and the readout at it."""

    rows: np.ndarray
    logits: np.ndarray
    temperature: float
    readout: OutOfFoldReadout

    @property
    def probabilities(self) -> list[np.ndarray]:
        return learn.softmax_rows(self.logits, self.temperature)


def _out_of_fold(rows: HeadRows, choice: Choice, formula: str, targets: Targets, say: Say) -> OutOfFold:
    """The chosen head out of fold: the judging folds' heads are the ones the choice fitted."""
    s = rows.s
    started = time.perf_counter()
    heads = choice.at_C[choice.head_C]
    logits = [learn.numpy_logits(head, s, part) for head, part in zip(heads, rows.judged_parts)]
    for part in rows.parts[len(heads):]:
        train = rows.train_of(part)
        head = learn.fit_linear(s, train, rows.k, choice.head_C, choice.weight, space=rows.space_on(train))
        logits.append(learn.numpy_logits(head, s, part))
    oof_rows, oof = np.concatenate(rows.parts), np.vstack(logits)
    say(f"  head out of fold ({len(rows.parts)} folds of {len(rows.grid)} rows): {time.perf_counter() - started:.0f} s")
    temperature = metrics.fit_temperature(list(oof), list(s.gold[oof_rows])).temperature
    readout = threshold_readout(learn.softmax_rows(oof, temperature), s.gold[oof_rows], formula, targets.max_error,
                    targets.min_auto_routed)
    return OutOfFold(oof_rows, oof, temperature, readout)


@dataclass
class FittedHead:
    """A head fitted by the one rule, with what it was chosen and judged by."""

    rows: HeadRows
    choice: Choice
    oof: OutOfFold
    linear: learn.Linear  # fitted on every row
    letters: OutOfFoldReadout | None  # the letters on the same folds (None: no letter per option, as fit-history's)
    text_only: OutOfFoldReadout  # the text classifier on the same folds
    baseline_rows: np.ndarray  # the rows the text classifier is fitted on (at most BASELINE_ROWS)
    option_minimums: dict[int, float] | None  # a protected question's per-option minimums; None: none protected
    formula: str
    targets: Targets

    @property
    def gold(self) -> np.ndarray:
        """The grid rows' gold answers in the folds' order (the readouts' order)."""
        return self.rows.s.gold[self.oof.rows]

    @property
    def reads_letters(self) -> bool:
        """Whether the head's letter weights read anything (not for a question without letters)."""
        return self.choice.weight > 0 and letters_vary(self.rows.s)


def fit(s: learn.Signals, k: int, *, seed: int, formula: str, targets: Targets, model_weight: float | None = None,
        terms_cap: int | None = None, folds: int = FOLDS, say: Say = lambda text: None) -> FittedHead:
    """The head on `s` by the one rule (the module's doc); `model_weight`: that weight, not chosen."""
    # L-BFGS here works on vectors of a few ten thousand values: a multi-threaded BLAS spends more
    # on its threads than on the work (measured 14x slower on 2 busy cores).
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        rows = head_rows(s, k, seed=seed, folds=folds, terms_cap=terms_cap, say=say)
        choice = _choose(rows, model_weight, say)
        oof = _out_of_fold(rows, choice, formula, targets, say)
        started = time.perf_counter()
        every = np.arange(len(s))
        linear = learn.fit_linear(s, every, k, choice.head_C, choice.weight, space=rows.space_on(every))
        say(f"  head on all {len(s)}: {time.perf_counter() - started:.0f} s")
        letters, text_only, baseline_rows = _comparisons(rows, formula, targets, seed, say)
    minimums = None
    if targets.protected:
        floor = oof.readout.min_confidence if oof.readout.min_confidence is not None else 0.0
        minimums = option_thresholds(oof.probabilities, s.gold[oof.rows], formula, floor, targets)
    return FittedHead(rows, choice, oof, linear, letters, text_only, baseline_rows, minimums, formula, targets)


def _comparisons(rows: HeadRows, formula: str, targets: Targets, seed: int,
                 say: Say) -> tuple[OutOfFoldReadout | None, OutOfFoldReadout, np.ndarray]:
    """The letters (where there is one per option: a temperature fitted on the other folds) and the
    text classifier on the head's folds, judged as the head is; the rows the text classifier is
    fitted on (at most BASELINE_ROWS)."""
    s, k = rows.s, rows.k
    gold = s.gold[np.concatenate(rows.parts)]
    letters = None
    if s.letters.shape[1] == k:
        probabilities = []
        for part in rows.parts:
            train = rows.train_of(part)
            at = metrics.fit_temperature(list(s.letters[train]), list(s.gold[train])).temperature
            probabilities += learn.softmax_rows(s.letters[part], at)
        letters = threshold_readout(probabilities, gold, formula, targets.max_error, targets.min_auto_routed)
    started = time.perf_counter()
    base_rows = learn.stratified_sample(s.gold, BASELINE_ROWS, seed)
    base_oof = np.vstack([learn.baseline_probabilities(s, np.intersect1d(rows.train_of(part), base_rows), part, k)
                          for part in rows.parts])
    say(f"  text classifier (TF-IDF + logistic regression) out of fold: {time.perf_counter() - started:.0f} s")
    return letters, threshold_readout(list(base_oof), gold, formula, targets.max_error, targets.min_auto_routed), base_rows


def head_document(fitted: FittedHead, *, options: list[str], binding: dict[str, Any], data: list[str],
                  fitted_on: date, sampled_from: int) -> dict[str, Any]:
    """The head file's document (learn.head_file) with its fit record, before its novelty part and version."""
    readout, n = fitted.oof.readout, len(fitted.rows.s)
    record = {"examples": n, **({"sampled_from": sampled_from} if sampled_from > n else {}),
              "fitted_on": fitted_on.isoformat(), "data": data, "regularisation": fitted.choice.head_C,
              "model_weight": fitted.choice.weight, "folds": len(fitted.rows.parts),
              "cv_accuracy": round(readout.accuracy, 4), "cv_ece": round(readout.ece, 4),
              **({"letters_cv_accuracy": round(fitted.letters.accuracy, 4)} if fitted.reads_letters and fitted.letters else {}),
              "text_only_cv_accuracy": round(fitted.text_only.accuracy, 4)}
    by_option = None
    if fitted.option_minimums is not None:
        floor = readout.min_confidence if readout.min_confidence is not None else 0.0
        by_option = {options[o]: t for o, t in fitted.option_minimums.items() if t > floor}
    return learn.head_file(fitted.linear, fitted.rows.s, options=options, binding=binding,
                           temperature=fitted.oof.temperature, min_confidence=readout.min_confidence, fit=record,
                           by_option=by_option, letters=fitted.reads_letters)


def attach_novelty(document: dict[str, Any], fitted: FittedHead, *, binding: dict[str, Any], budget: float | None,
                   seed: int, folds: int = FOLDS, out_of_scope: learn.Signals | None = None) -> str:
    """The head's novelty part (training/novelty.py), in the sentence encoder's space or over the
    hidden state, its surprise out of fold; `out_of_scope`: the training items labelled as no option,
    whose scores choose the surprise's weight. Returns what was done, for the fit's log."""
    s, k = fitted.rows.s, fitted.rows.k
    if budget is None:
        return "no novelty part: none asked"
    if "sentence" not in document and "hidden" not in document:  # binding it to the model would be all it read
        return "no novelty part: the head reads the text alone (model weight 0), so it serves any model"
    surprise = novelty.Surprise(fitted.oof.rows, novelty.Surprise.of(np.vstack(fitted.oof.probabilities)))
    outside = None
    if out_of_scope is not None:
        logits = learn.numpy_logits(fitted.linear, out_of_scope, np.arange(len(out_of_scope)))
        surprise.out_of_scope = novelty.Surprise.of(np.vstack(learn.softmax_rows(logits, fitted.oof.temperature)))
        outside = out_of_scope.sentences if "sentence" in document else out_of_scope.hidden
    return novelty.attach(
        document, s.gold, max_bytes=MAX_HEAD_BYTES if k <= LETTERED_OPTIONS else MAX_MANY_OPTIONS_HEAD_BYTES,
        sentences=s.sentences, hidden=s.hidden if "hidden" in document else None,
        binding={key: binding[key] for key in learn.MODEL_BINDING}, budget=budget, folds=folds, seed=seed,
        groups=s.groups, surprise=surprise, out_of_scope=outside)
