"""Fitting a head for one policy question, and judging it against the letters on held-out folds.

- The head is multinomial logistic regression (L2) on the standardised hidden state; the
  standardisation is folded into the weights, so the shipped head is a plain linear map of the
  raw hidden state. The regularisation C is chosen by group k-fold cross-validation (out-of-fold
  log-loss); a temperature is then fitted on the out-of-fold logits.
- The letters get the same treatment they get in production: a temperature fitted on the
  training folds (`bench.evaluate.metrics.out_of_fold_probabilities`).
- Thresholds come from out-of-fold probabilities only: the lowest `min_confidence` at which the
  auto-routed decisions are wrong at most `target_error` of the time.
Everything is seeded and deterministic: the same data gives the same head, byte for byte.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from datetime import date
from typing import Sequence

import numpy as np
from scipy.stats import binomtest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from bench.evaluate import metrics
from decision_contract import softmax

#: Inverse regularisation strengths tried by cross-validation.
C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
#: Significant digits written for head weights (float32 carries about 7).
WEIGHT_DIGITS = 7
#: A head that does not beat always-the-commonest-answer at this significance is not shipped.
CHANCE_ALPHA = 0.01


@dataclass(frozen=True)
class Readout:
    """Out-of-fold view of one readout (letters or head) on the training examples."""

    probabilities: list[np.ndarray]
    accuracy: float
    ece: float
    log_loss: float
    min_confidence: float | None  # lowest threshold meeting the target error; None: none does
    auto_routed_share: float
    threshold_table: list[metrics.ThresholdRow]


@dataclass(frozen=True)
class LinearMap:
    weights: np.ndarray  # options x hidden
    bias: np.ndarray

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        return hidden @ self.weights.T + self.bias


@dataclass
class QuestionFit:
    name: str
    option_ids: list[str]
    n_train: int
    folds: int
    regularisation: float
    temperature: float
    letters_temperature: float
    letters: Readout
    head: Readout
    linear: LinearMap
    chance_rate: float
    beats_chance: bool
    learning_curve: list[dict] = field(default_factory=list)

    @property
    def head_wins(self) -> bool:
        return (self.beats_chance and self.head.accuracy > self.letters.accuracy
                and self.head.log_loss < self.letters.log_loss)


def fit_linear(hidden: np.ndarray, gold: np.ndarray, n_options: int, C: float) -> LinearMap:
    """Logistic regression on standardised features, folded back into a map of the raw hidden state."""
    mean = hidden.mean(axis=0)
    scale = hidden.std(axis=0)
    scale[scale < 1e-8] = 1.0
    model = LogisticRegression(C=C, max_iter=5000, tol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit((hidden - mean) / scale, gold)
    weights = np.zeros((n_options, hidden.shape[1]))
    bias = np.full(n_options, -30.0)  # an option never seen in training is never predicted
    coef, intercept = model.coef_, model.intercept_
    if len(model.classes_) == 2:  # sklearn gives one row for two classes: logit(1) - logit(0)
        coef, intercept = np.vstack([-coef / 2, coef / 2]), np.array([-intercept[0] / 2, intercept[0] / 2])
    for row, option in enumerate(model.classes_):
        weights[option] = coef[row] / scale
        bias[option] = intercept[row] - float(coef[row] @ (mean / scale))
    return LinearMap(weights, bias)


def out_of_fold_logits(hidden: np.ndarray, gold: np.ndarray, n_options: int, C: float,
                       parts: Sequence[np.ndarray], train_size: int | None = None, seed: int = 0) -> np.ndarray:
    """Each example's head logits from a map fitted on the other folds (optionally on a seeded
    subsample of `train_size` of them, for the learning curve)."""
    n = len(gold)
    out = np.zeros((n, n_options))
    rng = np.random.default_rng(seed)
    for part in parts:
        train = np.setdiff1d(np.arange(n), part)
        if train_size is not None and train_size < len(train):
            train = np.sort(rng.choice(train, size=train_size, replace=False))
        out[part] = fit_linear(hidden[train], gold[train], n_options, C).logits(hidden[part])
    return out


def _mean_log_loss(logits: np.ndarray, gold: np.ndarray) -> float:
    return metrics.mean_nll_at(list(logits), list(gold), 1.0)


def judge(probabilities: list[np.ndarray], gold: np.ndarray, formula: str, target_error: float,
          min_auto_routed: int) -> Readout:
    scores = metrics.calibration_scores(probabilities, list(gold))
    conf = metrics.confidences(probabilities, formula)
    table = metrics.threshold_table(conf, metrics.correct(probabilities, list(gold)))
    chosen = metrics.threshold_for_error_rate(table, target_error, min_auto_routed)
    return Readout(
        probabilities=probabilities, accuracy=scores.accuracy, ece=scores.ece, log_loss=scores.log_loss,
        min_confidence=chosen.threshold if chosen else None,
        auto_routed_share=chosen.share_auto_routed if chosen else 0.0, threshold_table=table,
    )


def fit_question(name: str, option_ids: list[str], hidden: np.ndarray, letter_logits: list[np.ndarray],
                 gold: np.ndarray, groups: Sequence[str], *, formula: str, folds: int, seed: int,
                 target_error: float, min_auto_routed: int = 5, curve: bool = True) -> QuestionFit:
    n_options = len(option_ids)
    parts = metrics.fold_indices(len(gold), folds, seed, list(groups))
    if len(parts) < 2:
        raise ValueError(f"{name}: {len(gold)} labelled decisions in {len(set(groups))} groups; need two folds at least")

    losses = {C: _mean_log_loss(out_of_fold_logits(hidden, gold, n_options, C, parts), gold) for C in C_GRID}
    best_C = min(C_GRID, key=lambda C: (round(losses[C], 9), C))
    oof = out_of_fold_logits(hidden, gold, n_options, best_C, parts)
    temperature = metrics.fit_temperature(list(oof), list(gold)).temperature
    head = judge(metrics.probabilities_at(list(oof), temperature), gold, formula, target_error, min_auto_routed)

    letters_probs, _ = metrics.out_of_fold_probabilities(letter_logits, list(gold), parts=parts)
    letters = judge(letters_probs, gold, formula, target_error, min_auto_routed)
    letters_temperature = metrics.fit_temperature(letter_logits, list(gold)).temperature

    counts = np.bincount(gold, minlength=n_options)
    chance = counts.max() / len(gold)
    hits = int(round(head.accuracy * len(gold)))
    beats_chance = binomtest(hits, len(gold), chance, alternative="greater").pvalue < CHANCE_ALPHA

    fit = QuestionFit(
        name=name, option_ids=option_ids, n_train=len(gold), folds=len(parts), regularisation=best_C,
        temperature=temperature, letters_temperature=letters_temperature, letters=letters, head=head,
        linear=fit_linear(hidden, gold, n_options, best_C), chance_rate=float(chance), beats_chance=beats_chance,
    )
    if curve:
        fit.learning_curve = learning_curve(hidden, gold, n_options, best_C, parts, formula, target_error, seed)
    return fit


def learning_curve(hidden: np.ndarray, gold: np.ndarray, n_options: int, C: float, parts: Sequence[np.ndarray],
                   formula: str, target_error: float, seed: int, repeats: int = 3) -> list[dict]:
    """Out-of-fold accuracy, and the share auto-routed at `target_error`, against the number of
    training examples (subsamples of each training fold, averaged over seeded repeats)."""
    largest = min(len(gold) - len(p) for p in parts)
    sizes = sorted({s for s in (10, 20, 40, 80, 120, 160, 240, 320) if s < largest} | {largest})
    points = []
    for size in sizes:
        accuracy, share = [], []
        for repeat in range(repeats):
            logits = out_of_fold_logits(hidden, gold, n_options, C, parts, train_size=size, seed=seed + repeat)
            probabilities = [np.asarray(softmax(list(z))) for z in logits]
            readout = judge(probabilities, gold, formula, target_error, min_auto_routed=1)
            accuracy.append(readout.accuracy)
            share.append(readout.auto_routed_share)
        points.append({"examples": size, "accuracy": float(np.mean(accuracy)), "auto_routed_share": float(np.mean(share))})
    return points


def head_document(fit: QuestionFit, *, version: str, model_sha256: str, hidden_size: int, prompt_version: str,
                  question_sha256: str, data: list[str], fitted_on: date, min_margin: float = 0.0) -> dict:
    """The head as the policy stores it (decision_router.heads.Head), weights rounded for the file."""
    def rounded(values: np.ndarray) -> list[float]:
        return [float(f"{v:.{WEIGHT_DIGITS}g}") for v in values]

    return {
        "version": version,
        "model_sha256": model_sha256,
        "hidden_size": hidden_size,
        "prompt_version": prompt_version,
        "question_sha256": question_sha256,
        "options": fit.option_ids,
        "weights": [rounded(row) for row in fit.linear.weights],
        "bias": rounded(fit.linear.bias),
        "temperature": round(fit.temperature, 4),
        "thresholds": {"min_confidence": fit.head.min_confidence if fit.head.min_confidence is not None else 1.0,
                       "min_margin": min_margin},
        "fit": {
            "examples": fit.n_train, "fitted_on": fitted_on.isoformat(), "data": data,
            "regularisation": fit.regularisation, "folds": fit.folds,
            "cv_accuracy": round(fit.head.accuracy, 4), "cv_ece": round(fit.head.ece, 4),
            "letters_cv_accuracy": round(fit.letters.accuracy, 4),
        },
    }
