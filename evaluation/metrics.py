"""Accuracy, calibration, threshold and latency metrics over scored decisions.

Pure functions over numpy arrays; no model, no I/O. Decisions may offer different numbers of
options, so probability and logit inputs are sequences of 1-D vectors (ragged), each with the
index of its gold option. Confidence formulas and the softmax come from `decision_contract`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

from decision_contract import confidence, softmax

# One definition of how sure a precision is, shared with the routing functions' live checks.
from decision_router.domain.precision_bound import PRECISION_CONFIDENCE, items_needed, precision_lower_bound  # noqa: F401 - re-exported

from .stats import percentile

Vectors = Sequence[Sequence[float]]

#: The equal-width bins of the expected calibration error and the reliability diagram.
ECE_BINS = 10
#: Where the temperature search looks: far wider than the T ≈ 1.2–2.5 usually found.
TEMPERATURE_BOUNDS = (0.05, 20.0)
DEFAULT_THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(21))


def _check(probabilities: Vectors, gold: Sequence[int]) -> None:
    if len(probabilities) != len(gold):
        raise ValueError(f"{len(probabilities)} probability vectors but {len(gold)} gold indices")
    if not gold:
        raise ValueError("no decisions to measure")
    for i, (p, g) in enumerate(zip(probabilities, gold)):
        if not 0 <= g < len(p):
            raise ValueError(f"decision {i}: gold index {g} outside its {len(p)} options")


def top_label(probabilities: Vectors) -> tuple[np.ndarray, np.ndarray]:
    """(top-label confidence = max p, predicted index) per decision; ties go to the first option."""
    top = np.array([float(np.max(p)) for p in probabilities])
    predicted = np.array([int(np.argmax(p)) for p in probabilities])
    return top, predicted


def correct(probabilities: Vectors, gold: Sequence[int]) -> np.ndarray:
    _check(probabilities, gold)
    return top_label(probabilities)[1] == np.asarray(gold)


def accuracy(probabilities: Vectors, gold: Sequence[int]) -> float:
    return float(np.mean(correct(probabilities, gold)))


def brier_score(probabilities: Vectors, gold: Sequence[int]) -> float:
    """Multi-class Brier score: mean over decisions of sum_k (p_k - [k == gold])^2 (0 best, 2 worst)."""
    _check(probabilities, gold)
    total = 0.0
    for p, g in zip(probabilities, gold):
        onehot = np.zeros(len(p))
        onehot[g] = 1.0
        total += float(np.sum((np.asarray(p, dtype=float) - onehot) ** 2))
    return total / len(gold)


def log_loss(probabilities: Vectors, gold: Sequence[int], eps: float = 1e-15) -> float:
    """Mean negative natural log of the gold option's probability (clipped at `eps`)."""
    _check(probabilities, gold)
    return float(np.mean([-math.log(max(float(p[g]), eps)) for p, g in zip(probabilities, gold)]))


@dataclass(frozen=True)
class ReliabilityBin:
    lower: float
    upper: float
    count: int
    mean_confidence: float | None
    accuracy: float | None


def reliability_bins(probabilities: Vectors, gold: Sequence[int], n_bins: int = ECE_BINS) -> list[ReliabilityBin]:
    """Equal-width bins [0, 0.1), [0.1, 0.2), …, [0.9, 1.0] over the top-label confidence."""
    ok = correct(probabilities, gold)
    top, _ = top_label(probabilities)
    index = np.minimum((top * n_bins).astype(int), n_bins - 1)
    bins = []
    for b in range(n_bins):
        members = index == b
        count = int(members.sum())
        bins.append(
            ReliabilityBin(
                lower=b / n_bins,
                upper=(b + 1) / n_bins,
                count=count,
                mean_confidence=float(top[members].mean()) if count else None,
                accuracy=float(ok[members].mean()) if count else None,
            )
        )
    return bins


def expected_calibration_error(probabilities: Vectors, gold: Sequence[int], n_bins: int = ECE_BINS) -> float:
    """ECE = sum over bins of (bin count / N) * |accuracy(bin) - mean top-label confidence(bin)|."""
    n = len(gold)
    return float(
        sum(b.count / n * abs(b.accuracy - b.mean_confidence) for b in reliability_bins(probabilities, gold, n_bins) if b.count)
    )


def probabilities_at(logits: Vectors, temperature: float) -> list[np.ndarray]:
    """The option probabilities a policy with this temperature would see: softmax(z / T)."""
    return [np.asarray(softmax(list(map(float, z)), temperature)) for z in logits]


def mean_nll_at(logits: Vectors, gold: Sequence[int], temperature: float) -> float:
    """Log-loss of softmax(z / T), computed in log space so that small T stays exact."""
    total = 0.0
    for z, g in zip(logits, gold):
        scaled = np.asarray(z, dtype=float) / temperature
        peak = scaled.max()
        total += peak + math.log(float(np.exp(scaled - peak).sum())) - scaled[g]
    return total / len(gold)


@dataclass(frozen=True)
class TemperatureFit:
    temperature: float
    log_loss: float
    log_loss_at_1: float
    #: True when the optimum sits on a search bound (e.g. every training decision right → T → 0).
    at_bound: bool


def fit_temperature(
    logits: Vectors,
    gold: Sequence[int],
    bounds: tuple[float, float] = TEMPERATURE_BOUNDS,
    tolerance: float = 1e-5,
) -> TemperatureFit:
    """The T minimising log-loss of softmax(z / T): golden-section search on log T.

    Log-loss is convex in 1/T (log-sum-exp is convex, the gold term linear), hence unimodal in
    log T, which golden-section search needs.
    """
    _check(logits, gold)
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    ratio = (math.sqrt(5.0) - 1.0) / 2.0

    def loss(log_t: float) -> float:
        return mean_nll_at(logits, gold, math.exp(log_t))

    c, d = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fc, fd = loss(c), loss(d)
    while hi - lo > tolerance:
        if fc <= fd:
            hi, d, fd = d, c, fc
            c = hi - ratio * (hi - lo)
            fc = loss(c)
        else:
            lo, c, fc = c, d, fd
            d = lo + ratio * (hi - lo)
            fd = loss(d)
    log_t = (lo + hi) / 2.0
    temperature = math.exp(log_t)
    edge = 1e-3
    return TemperatureFit(
        temperature=temperature,
        log_loss=loss(log_t),
        log_loss_at_1=mean_nll_at(logits, gold, 1.0),
        at_bound=log_t - math.log(bounds[0]) < edge or math.log(bounds[1]) - log_t < edge,
    )


@dataclass(frozen=True)
class CalibrationScores:
    ece: float
    log_loss: float
    brier: float
    accuracy: float


def calibration_scores(probabilities: Vectors, gold: Sequence[int]) -> CalibrationScores:
    return CalibrationScores(
        ece=expected_calibration_error(probabilities, gold),
        log_loss=log_loss(probabilities, gold),
        brier=brier_score(probabilities, gold),
        accuracy=accuracy(probabilities, gold),
    )


def fold_indices(n: int, folds: int, seed: int, groups: Sequence[Hashable] | None = None) -> list[np.ndarray]:
    """Indices 0…n-1 cut into at most `folds` held-out parts of nearly equal size, never
    splitting a group: every index of one group lands in the same part (group k-fold, as
    JevBench reports ECE). Without `groups` every index is its own group.

    The groups are shuffled by `seed`, then placed largest first, each into the part that is
    smallest so far (ties: the earlier part), so the parts stay balanced when groups differ in size.
    """
    if groups is not None and len(groups) != n:
        raise ValueError(f"{len(groups)} group names for {n} decisions")
    members: dict[Hashable, list[int]] = {}
    for index, name in enumerate(range(n) if groups is None else groups):
        members.setdefault(name, []).append(index)
    names = list(members)
    shuffled = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    parts: list[list[int]] = [[] for _ in range(min(folds, len(names)))]
    for name in sorted(shuffled, key=lambda g: -len(members[g])):  # stable: ties keep the shuffle
        min(parts, key=len).extend(members[name])
    return [np.array(sorted(part), dtype=int) for part in parts if part]


def out_of_fold_probabilities(
    logits: Vectors,
    gold: Sequence[int],
    folds: int = 5,
    seed: int = 0,
    groups: Sequence[Hashable] | None = None,
    parts: Sequence[np.ndarray] | None = None,
) -> tuple[list[np.ndarray] | None, list[float]]:
    """Each decision's probabilities at the temperature fitted on the *other* folds, and the
    per-fold temperatures; folds never split a group (see `fold_indices`; `parts` passes folds
    already cut by it). (None, []) when there are fewer than two groups (or, without groups,
    decisions) to split."""
    _check(logits, gold)
    n = len(gold)
    parts = fold_indices(n, folds, seed, groups) if parts is None else parts
    if len(parts) < 2:
        return None, []
    held_out: list[np.ndarray] = [np.empty(0)] * n
    temperatures = []
    for part in parts:
        train = np.setdiff1d(np.arange(n), part)
        fit = fit_temperature([logits[i] for i in train], [gold[i] for i in train])
        temperatures.append(fit.temperature)
        for i in part:
            held_out[i] = np.asarray(softmax(list(map(float, logits[i])), fit.temperature))
    return held_out, temperatures


def confidences(probabilities: Vectors, formula: str) -> np.ndarray:
    """The policy's named confidence (from decision_contract) of each probability vector."""
    return np.array([confidence(list(map(float, p)), formula) for p in probabilities])


@dataclass(frozen=True)
class ThresholdRow:
    threshold: float
    auto_routed: int
    share_auto_routed: float
    errors: int
    #: Wrong among the auto-routed; None when nothing is auto-routed.
    error_rate: float | None
    #: `precision_lower_bound` of the auto-routed (right among them); None when nothing is auto-routed.
    precision_lower_bound: float | None = None


def threshold_table(
    confidence_values: Sequence[float],
    is_correct: Sequence[bool],
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
) -> list[ThresholdRow]:
    """For each threshold t: decisions with confidence >= t are auto-routed (the pipeline's rule)."""
    conf = np.asarray(confidence_values, dtype=float)
    ok = np.asarray(is_correct, dtype=bool)
    if conf.shape != ok.shape or conf.size == 0:
        raise ValueError("threshold_table needs one correctness flag per confidence, at least one")
    rows = []
    for t in thresholds:
        auto = conf >= t
        count = int(auto.sum())
        errors = int((auto & ~ok).sum())
        rows.append(
            ThresholdRow(
                threshold=float(t),
                auto_routed=count,
                share_auto_routed=count / conf.size,
                errors=errors,
                error_rate=errors / count if count else None,
                precision_lower_bound=precision_lower_bound(count - errors, count),
            )
        )
    return rows


def meets_target(right: int, n: int, target_error: float) -> bool:
    """Whether `right` correct among `n` automatic answers show, at PRECISION_CONFIDENCE, a
    precision of at least 1 - target_error (its lower bound, not its point estimate)."""
    bound = precision_lower_bound(right, n)
    return bound is not None and bound >= 1.0 - target_error


def threshold_for_error_rate(table: Sequence[ThresholdRow], target: float, min_auto_routed: int = 1) -> ThresholdRow | None:
    """The lowest threshold (most automation) at which the lower confidence bound of the
    auto-routed precision (`precision_lower_bound`) is at least 1 - target, over at least
    `min_auto_routed` decisions; None when no threshold qualifies."""
    for row in sorted(table, key=lambda r: r.threshold):
        if row.auto_routed >= min_auto_routed and meets_target(row.auto_routed - row.errors, row.auto_routed, target):
            return row
    return None


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """count, min, mean, median, p95 (linear interpolation), max."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return {"count": 0, "min": None, "mean": None, "median": None, "p95": None, "max": None}
    return {
        "count": int(v.size),
        "min": float(v.min()),
        "mean": float(v.mean()),
        "median": float(percentile(v.tolist(), 0.5)),
        "p95": float(percentile(v.tolist(), 0.95)),
        "max": float(v.max()),
    }


def histogram(values: Sequence[float], edges: Sequence[float]) -> list[dict[str, float | int]]:
    """Counts per [edge_i, edge_i+1) (last bin closed), for distributions in the reports."""
    counts, _ = np.histogram(np.asarray(values, dtype=float), bins=np.asarray(edges, dtype=float))
    return [{"lower": float(lo), "upper": float(hi), "count": int(c)} for lo, hi, c in zip(edges[:-1], edges[1:], counts)]

