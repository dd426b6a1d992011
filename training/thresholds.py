"""Choosing thresholds from out-of-fold probabilities: a readout's accuracy, calibration and the
lowest min_confidence at which the automatic answers' precision meets the question's target with
95 % confidence (its one-sided Clopper–Pearson lower bound, `evaluation.metrics.meets_target`), not
merely on average (`threshold_readout`), and per-option minimums
that keep protected answers (priority's most urgent options) from being auto-assigned a less
urgent option (`option_thresholds`). `training.learn` fits the heads whose probabilities these read."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from evaluation import metrics


@dataclass(frozen=True)
class OutOfFoldReadout:
    """Out-of-fold view of one readout on the training examples."""

    probabilities: list[np.ndarray]
    accuracy: float
    ece: float
    log_loss: float
    min_confidence: float | None  # lowest threshold meeting the target with confidence; None: none does
    auto_routed_share: float
    auto_routed_accuracy: float | None
    threshold_table: list[metrics.ThresholdRow]
    #: The lower confidence bound of auto_routed_accuracy (at min_confidence); None: nothing routed alone.
    auto_routed_lower_bound: float | None = None
    #: When no threshold qualifies: how many labelled items, all answered right, it would take
    #: at the least (`metrics.items_needed`); None when a threshold qualifies.
    items_needed: int | None = None


#: Thresholds tried, finer than the evaluation report's: calibrated heads are rarely near 1.0.
THRESHOLDS = tuple(round(0.01 * i, 2) for i in range(101))


def threshold_readout(probabilities: list[np.ndarray], gold: np.ndarray, formula: str, target_error: float,
          min_auto_routed: int) -> OutOfFoldReadout:
    scores = metrics.calibration_scores(probabilities, list(gold))
    conf = metrics.confidences(probabilities, formula)
    table = metrics.threshold_table(conf, metrics.correct(probabilities, list(gold)), THRESHOLDS)
    chosen = metrics.threshold_for_error_rate(table, target_error, min_auto_routed)
    return OutOfFoldReadout(
        probabilities=probabilities, accuracy=scores.accuracy, ece=scores.ece, log_loss=scores.log_loss,
        min_confidence=chosen.threshold if chosen else None,
        auto_routed_share=chosen.share_auto_routed if chosen else 0.0,
        auto_routed_accuracy=(1 - chosen.error_rate) if chosen and chosen.error_rate is not None else None,
        threshold_table=table, auto_routed_lower_bound=chosen.precision_lower_bound if chosen else None,
        items_needed=None if chosen else max(metrics.items_needed(1 - target_error), min_auto_routed),
    )


@dataclass(frozen=True)
class Targets:
    """What the thresholds must keep, from the policy question (`learning`)."""

    max_error: float = 0.05
    protected: tuple[int, ...] = ()  # option indices whose under-assignment is the costly mistake
    max_under_assignment: float = 0.01
    min_auto_routed: int = 5


def under_assigned(predicted: np.ndarray, gold: np.ndarray, protected: Sequence[int]) -> np.ndarray:
    """Where a protected gold answer got a later (less urgent) option: options are listed most urgent first."""
    return np.isin(gold, list(protected)) & (predicted > gold)


def option_thresholds(probabilities: list[np.ndarray], gold: np.ndarray, formula: str, floor: float,
                      targets: Targets) -> dict[int, float]:
    """Per answered option, the lowest min_confidence (≥ floor) at which, among out-of-fold items
    auto-assigned that option: the precision's lower confidence bound meets the target
    (`metrics.meets_target`), and protected gold answers
    assigned it are at most their share of the under-assignment budget. 1.0: never alone."""
    P = np.array(probabilities)
    predicted, conf = P.argmax(axis=1), metrics.confidences(probabilities, formula)
    wrong = predicted != gold
    under = under_assigned(predicted, gold, targets.protected)
    n_protected = int(np.isin(gold, list(targets.protected)).sum())
    can_under = [o for o in range(P.shape[1]) if any(p < o for p in targets.protected)]
    budget = math.floor(targets.max_under_assignment * n_protected / max(1, len(can_under)))
    out = {}
    for option in range(P.shape[1]):
        mine = np.flatnonzero(predicted == option)
        chosen = 1.0
        for t in sorted({float(c) for c in conf[mine] if c >= floor}):
            auto = mine[conf[mine] >= t]
            if len(auto) < targets.min_auto_routed:
                break
            if metrics.meets_target(int((~wrong[auto]).sum()), len(auto), targets.max_error) \
                    and under[auto].sum() <= budget:
                chosen = t
                break
        out[option] = chosen
    return out


def promise(auto_precision: float | None, target: float, items_needed: int | None) -> dict:
    """Whether a test split's automatic answers kept the target precision: `target_missed` (their
    precision below the target; false when nothing was routed alone) and `missed_by` (how far
    below, 0.0 when kept), and, when the training data set no threshold (nothing is routed
    alone), `items_needed`: the fewest labelled items, all answered right, that could."""
    missed = auto_precision is not None and auto_precision < target
    return {"target_precision": target, "target_missed": missed,
            "missed_by": round(target - auto_precision, 6) if missed and auto_precision is not None else 0.0,
            "routed_alone": items_needed is None, "items_needed": items_needed}


def verdict(kept: dict) -> str:
    """A clause for the printed and written summaries (`promise`'s fields): a missed target, or why
    nothing is routed alone; empty when the promise was kept."""
    target = kept["target_precision"]
    if not kept["routed_alone"]:
        return (f"NOTHING IS ROUTED ALONE: out of fold, no threshold shows {target:.1%} precision with 95 % confidence "
                f"(that takes at least {kept['items_needed']} labelled items above it, all answered right)")
    if kept["target_missed"]:
        return (f"TARGET MISSED: automatic answers {target - kept['missed_by']:.1%} right on test, "
                f"{kept['missed_by']:.1%} below the promised {target:.1%}")
    return ""
