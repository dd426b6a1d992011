"""Thresholds that keep the policy's promise with confidence: `judge` and `option_thresholds`
choose the lowest min_confidence whose automatic answers' precision has a one-sided 95 %
Clopper–Pearson lower bound at the target, and say how many items it would take when none does."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation import metrics
from training.thresholds import Targets, option_thresholds, threshold_readout


def confident(n_right: int, n_wrong: int = 0, option: int = 0, k: int = 2, peak: float = 0.98) -> tuple[list, list]:
    """n_right items answered `option` with confidence and right, n_wrong answered it and wrong."""
    p = np.full(k, (1 - peak) / (k - 1))
    p[option] = peak
    other = (option + 1) % k
    return [p.copy() for _ in range(n_right + n_wrong)], [option] * n_right + [other] * n_wrong


def test_thirty_right_of_thirty_routes_nothing_alone_and_says_how_many_items_it_would_take():
    probabilities, gold = confident(30)
    readout = threshold_readout(probabilities, np.array(gold), "normalized_peak", 0.03, 5)
    assert readout.accuracy == 1.0
    assert readout.min_confidence is None and readout.auto_routed_share == 0.0
    assert readout.auto_routed_accuracy is None and readout.auto_routed_lower_bound is None
    assert readout.items_needed == metrics.items_needed(0.97) == 99
    # the table still shows the point estimate and its bound
    row = readout.threshold_table[0]
    assert row.error_rate == 0.0 and row.precision_lower_bound == pytest.approx(0.05 ** (1 / 30))


def test_ninety_nine_right_of_ninety_nine_meet_97_percent():
    probabilities, gold = confident(99)
    readout = threshold_readout(probabilities, np.array(gold), "normalized_peak", 0.03, 5)
    assert readout.min_confidence == 0.0 and readout.auto_routed_share == 1.0
    assert readout.auto_routed_lower_bound == pytest.approx(0.05 ** (1 / 99))
    assert readout.auto_routed_lower_bound >= 0.97
    assert readout.items_needed is None


def test_the_threshold_rises_until_the_lower_bound_meets_the_target():
    # 200 confident right answers, and 20 wrong ones at a lower confidence: all together are
    # 90.9 % right; above the wrong ones' confidence every answer is right
    right_p, right_gold = confident(200, peak=0.99)
    wrong_p, wrong_gold = confident(0, 20, peak=0.7)
    readout = threshold_readout(right_p + wrong_p, np.array(right_gold + wrong_gold), "normalized_peak", 0.03, 5)
    assert readout.min_confidence is not None
    chosen = next(r for r in readout.threshold_table if r.threshold == readout.min_confidence)
    assert chosen.errors == 0 and chosen.auto_routed == 200
    assert readout.auto_routed_share == pytest.approx(200 / 220)


def test_per_option_thresholds_use_the_lower_bound_too():
    # option 0: 30 right answers (point estimate 100 %, bound 90 %); option 1: 150 right answers
    p0, g0 = confident(30, option=0)
    p1, g1 = confident(150, option=1)
    out = option_thresholds(p0 + p1, np.array(g0 + g1), "normalized_peak", 0.0, Targets(max_error=0.03))
    assert out[0] == 1.0  # never alone: 30 of 30 do not show 97 %
    assert out[1] < 1.0
    # at a 10 % target 30 of 30 are enough (bound 0.905)
    assert option_thresholds(p0 + p1, np.array(g0 + g1), "normalized_peak", 0.0, Targets(max_error=0.1))[0] < 1.0
