"""Every evaluation metric against values computed by hand (the arithmetic is in the comments)."""

import math

import numpy as np
import pytest

from evaluation import metrics

# Three decisions with 3, 2 and 3 options. Predictions: 0 (right), 1 (wrong), 0 (wrong).
PROBS = [[0.7, 0.2, 0.1], [0.4, 0.6], [0.5, 0.25, 0.25]]
GOLD = [0, 0, 2]


def test_accuracy_counts_the_top_option():
    assert metrics.accuracy(PROBS, GOLD) == pytest.approx(1 / 3)


def test_ties_go_to_the_first_option_like_the_pipeline():
    assert metrics.correct([[0.5, 0.5]], [0]).tolist() == [True]


def test_brier_is_the_mean_squared_distance_to_the_one_hot_gold():
    # (0.3² + 0.2² + 0.1²) = 0.14; (0.6² + 0.6²) = 0.72; (0.5² + 0.25² + 0.75²) = 0.875
    assert metrics.brier_score(PROBS, GOLD) == pytest.approx((0.14 + 0.72 + 0.875) / 3)


def test_log_loss_is_the_mean_negative_log_of_the_gold_probability():
    assert metrics.log_loss(PROBS, GOLD) == pytest.approx(-(math.log(0.7) + math.log(0.4) + math.log(0.25)) / 3)
    assert metrics.log_loss([[1.0, 0.0]], [1]) == pytest.approx(-math.log(1e-15))  # clipped, not infinite


def test_ece_one_decision_per_bin():
    # top confidences 0.7 (right), 0.6 (wrong), 0.5 (wrong) in bins 7, 6, 5:
    # (|1 - 0.7| + |0 - 0.6| + |0 - 0.5|) / 3
    assert metrics.expected_calibration_error(PROBS, GOLD) == pytest.approx(1.4 / 3)


def test_ece_pools_decisions_that_share_a_bin():
    probs = [[0.82, 0.18], [0.12, 0.88], [0.55, 0.45], [0.95, 0.05]]
    gold = [0, 0, 0, 1]
    # bin 8: 0.82 right, 0.88 wrong → accuracy 0.5, confidence 0.85 → 2/4 · 0.35 = 0.175
    # bin 5: 0.55 right → 1/4 · 0.45 = 0.1125;  bin 9: 0.95 wrong → 1/4 · 0.95 = 0.2375
    assert metrics.expected_calibration_error(probs, gold) == pytest.approx(0.525)
    bins = metrics.reliability_bins(probs, gold)
    assert len(bins) == 10 and [b.count for b in bins] == [0, 0, 0, 0, 0, 1, 0, 0, 2, 1]
    assert bins[8].accuracy == 0.5 and bins[8].mean_confidence == pytest.approx(0.85)
    assert bins[0].accuracy is None and bins[0].mean_confidence is None


def test_a_confidence_of_exactly_one_lands_in_the_last_bin():
    assert metrics.reliability_bins([[1.0, 0.0]], [0])[9].count == 1


def test_perfectly_calibrated_predictions_have_zero_ece():
    # confidence 0.75 on four decisions, three of them right
    probs = [[0.75, 0.25]] * 4
    assert metrics.expected_calibration_error(probs, [0, 0, 0, 1]) == pytest.approx(0.0)


def test_confidences_use_the_contract_formulas():
    # normalized peak: (3 · 0.7 - 1) / 2 = 0.55;  1 - H/ln 3 for (0.7, 0.2, 0.1)
    assert metrics.confidences([[0.7, 0.2, 0.1]], "normalized_peak")[0] == pytest.approx(0.55)
    entropy = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1))
    assert metrics.confidences([[0.7, 0.2, 0.1]], "one_minus_normalized_entropy")[0] == pytest.approx(
        1 - entropy / math.log(3)
    )


def test_probabilities_at_a_temperature_divide_the_logits():
    (p,) = metrics.probabilities_at([[2.0, 0.0]], 2.0)
    assert p[0] == pytest.approx(1 / (1 + math.exp(-1.0)))


def test_nll_in_log_space_matches_log_loss_of_the_softmax():
    logits = [[1.0, 3.0, -2.0], [0.5, 0.0]]
    gold = [0, 1]
    for t in (0.3, 1.0, 2.7):
        assert metrics.mean_nll_at(logits, gold, t) == pytest.approx(
            metrics.log_loss(metrics.probabilities_at(logits, t), gold)
        )


def test_temperature_fit_recovers_the_hand_solved_optimum():
    # Two options, logit gap 2, three right and one wrong: the best p(top) is 3/4,
    # so sigmoid(2 / T) = 3/4 → T = 2 / ln 3.
    logits = [[2.0, 0.0]] * 4
    fit = metrics.fit_temperature(logits, [0, 0, 0, 1])
    assert fit.temperature == pytest.approx(2 / math.log(3), rel=1e-4)
    assert not fit.at_bound
    assert fit.log_loss == pytest.approx(-(3 * math.log(0.75) + math.log(0.25)) / 4, rel=1e-6)
    assert fit.log_loss < fit.log_loss_at_1


def test_temperature_fit_sharpens_an_underconfident_model():
    # gap 1 and always right → p(top) should go to 1 → T runs to the lower bound
    fit = metrics.fit_temperature([[1.0, 0.0]] * 3, [0, 0, 0])
    assert fit.at_bound and fit.temperature == pytest.approx(metrics.TEMPERATURE_BOUNDS[0], rel=1e-3)


def test_temperature_fit_never_changes_the_argmax():
    rng = np.random.default_rng(3)
    logits = [list(rng.normal(size=4) * 4) for _ in range(30)]
    gold = list(rng.integers(0, 4, size=30))
    fit = metrics.fit_temperature(logits, gold)
    assert metrics.correct(metrics.probabilities_at(logits, fit.temperature), gold).tolist() == metrics.correct(
        metrics.probabilities_at(logits, 1.0), gold
    ).tolist()


def test_out_of_fold_calibration_leave_one_out_by_hand():
    # Same four decisions, leave-one-out (4 folds):
    # - hold out a right one: train 2 right 1 wrong → p(top) = 2/3 (T = 2 / ln 2)
    # - hold out the wrong one: train all right → T at the lower bound 0.05 → p(top) ≈ 1
    logits = [[2.0, 0.0]] * 4
    gold = [0, 0, 0, 1]
    held_out, temperatures = metrics.out_of_fold_probabilities(logits, gold, folds=4, seed=0)
    assert len(temperatures) == 4
    assert sorted(temperatures)[1:] == pytest.approx([2 / math.log(2)] * 3, rel=1e-4)
    assert sorted(temperatures)[0] == pytest.approx(0.05, rel=1e-3)
    after = metrics.calibration_scores(held_out, gold)
    before = metrics.calibration_scores(metrics.probabilities_at(logits, 1.0), gold)
    # before: all at sigmoid(2) = 0.8808 in bin 8 with accuracy 0.75
    assert before.ece == pytest.approx(abs(0.75 - 1 / (1 + math.exp(-2))))
    # after: three right at 2/3 (bin 6: 3/4 · 1/3) + one wrong at ≈1 (bin 9: 1/4 · 1)
    assert after.ece == pytest.approx(0.25 + 0.25, abs=1e-6)
    assert after.accuracy == before.accuracy == 0.75


def test_out_of_fold_needs_two_decisions():
    assert metrics.out_of_fold_probabilities([[1.0, 0.0]], [0]) == (None, [])


def test_folds_cover_every_decision_once():
    parts = metrics.fold_indices(11, 5, seed=1)
    assert sorted(np.concatenate(parts).tolist()) == list(range(11))
    assert [len(p) for p in parts] == [3, 2, 2, 2, 2]


@pytest.mark.parametrize("seed", range(6))
def test_group_folds_never_split_a_group_and_stay_balanced(seed):
    rng = np.random.default_rng(100 + seed)
    sizes = rng.integers(1, 6, size=23)  # 23 groups of 1–5 rows, rows of a group scattered
    groups = rng.permutation(np.repeat([f"g{i}" for i in range(len(sizes))], sizes)).tolist()
    parts = metrics.fold_indices(len(groups), 5, seed=seed, groups=groups)
    assert len(parts) == 5
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(groups)))
    fold_of = {}
    for k, part in enumerate(parts):
        for i in part:
            assert fold_of.setdefault(groups[i], k) == k, f"group {groups[i]} split across folds"
    lengths = [len(p) for p in parts]
    assert max(lengths) - min(lengths) <= max(sizes)


def test_group_folds_are_seeded_and_no_more_than_the_groups():
    groups = ["a", "a", "b", "b", "b", "c"]
    assert [p.tolist() for p in metrics.fold_indices(6, 5, 3, groups)] == [p.tolist() for p in metrics.fold_indices(6, 5, 3, groups)]
    assert sorted(p.tolist() for p in metrics.fold_indices(6, 5, 3, groups)) == [[0, 1], [2, 3, 4], [5]]
    with pytest.raises(ValueError, match="5 group names for 6 decisions"):
        metrics.fold_indices(6, 2, 0, groups[:5])


def test_out_of_fold_holds_out_whole_groups():
    # Group "right": three decisions the model gets right; group "wrong": one right, one wrong.
    # Two groups → two folds: each group is scored at the T fitted on the other group only.
    logits = [[2.0, 0.0]] * 5
    gold = [0, 0, 0, 0, 1]
    groups = ["right", "right", "right", "wrong", "wrong"]
    held_out, temperatures = metrics.out_of_fold_probabilities(logits, gold, folds=5, seed=0, groups=groups)
    assert len(temperatures) == 2
    from_wrong = metrics.fit_temperature(logits[3:], gold[3:]).temperature  # half right: p(top) → 1/2
    from_right = metrics.fit_temperature(logits[:3], gold[:3]).temperature  # all right: lower bound
    assert sorted(temperatures) == pytest.approx(sorted([from_wrong, from_right]))
    for i in range(3):
        assert held_out[i] == pytest.approx(metrics.probabilities_at([logits[i]], from_wrong)[0])
    for i in (3, 4):
        assert held_out[i] == pytest.approx(metrics.probabilities_at([logits[i]], from_right)[0])
    # one group only: nothing to hold out against
    assert metrics.out_of_fold_probabilities(logits, gold, groups=["g"] * 5) == (None, [])


def test_threshold_table_by_hand():
    conf = [0.9, 0.7, 0.5, 0.2]
    ok = [True, False, True, False]
    rows = metrics.threshold_table(conf, ok, thresholds=[0.0, 0.5, 0.8, 0.95])
    assert [(r.auto_routed, r.errors) for r in rows] == [(4, 2), (3, 1), (1, 0), (0, 0)]
    assert [r.share_auto_routed for r in rows] == [1.0, 0.75, 0.25, 0.0]
    assert rows[1].error_rate == pytest.approx(1 / 3)
    assert rows[3].error_rate is None  # nothing auto-routed: no rate, not 0
    assert rows[3].precision_lower_bound is None
    assert rows[1].precision_lower_bound == pytest.approx(metrics.precision_lower_bound(2, 3))
    # 2 right of 3, 1 of 1: the point estimates meet 60 % and 90 %, their lower bounds do not
    assert metrics.threshold_for_error_rate(rows, 0.4) is None
    assert metrics.threshold_for_error_rate(rows, 0.1) is None
    # 2 of 4 right shows more than 8 % precision (bound 0.098), 2 of 3 more than 12 % (0.135)
    assert metrics.threshold_for_error_rate(rows, 0.92).threshold == 0.0
    assert metrics.threshold_for_error_rate(rows, 0.88).threshold == 0.5
    assert metrics.threshold_for_error_rate(rows, 0.88, min_auto_routed=4) is None


def test_precision_lower_bound_is_the_one_sided_clopper_pearson_bound():
    from scipy.stats import binomtest

    for right, n in ((2, 4), (97, 100), (290, 295), (30, 30)):
        two_sided_90 = binomtest(right, n).proportion_ci(confidence_level=0.90, method="exact").low
        assert metrics.precision_lower_bound(right, n) == pytest.approx(two_sided_90)
    assert metrics.precision_lower_bound(30, 30) == pytest.approx(0.05 ** (1 / 30))  # all right: alpha^(1/n)
    assert metrics.precision_lower_bound(0, 10) == 0.0
    assert metrics.precision_lower_bound(0, 0) is None
    with pytest.raises(ValueError):
        metrics.precision_lower_bound(3, 2)


def _all_right(n: int, confidence: float = 0.9) -> list[metrics.ThresholdRow]:
    return metrics.threshold_table([confidence] * n, [True] * n, thresholds=[0.5])


def test_thirty_right_of_thirty_cannot_promise_97_percent_but_99_of_99_can():
    assert metrics.threshold_for_error_rate(_all_right(30), 0.03) is None
    assert metrics.precision_lower_bound(30, 30) < 0.97
    assert metrics.threshold_for_error_rate(_all_right(98), 0.03) is None
    assert metrics.threshold_for_error_rate(_all_right(99), 0.03).threshold == 0.5
    # one wrong among them takes many more: 97 right of 100 is 97 % on average, not with confidence
    rows = metrics.threshold_table([0.9] * 100, [True] * 97 + [False] * 3, thresholds=[0.5])
    assert rows[0].error_rate == pytest.approx(0.03)
    assert metrics.threshold_for_error_rate(rows, 0.03) is None


def test_items_needed_is_the_fewest_all_right_answers_meeting_the_target():
    assert metrics.items_needed(0.97) == 99
    assert metrics.items_needed(0.95) == 59
    assert metrics.items_needed(0.5) == 5
    for target in (0.5, 0.9, 0.95, 0.97, 0.99):
        n = metrics.items_needed(target)
        assert metrics.precision_lower_bound(n, n) >= target > metrics.precision_lower_bound(n - 1, n - 1)
    assert metrics.items_needed(0.97, level=0.5) < metrics.items_needed(0.97)
    with pytest.raises(ValueError):
        metrics.items_needed(1.0)


def test_a_confidence_equal_to_the_threshold_is_auto_routed():
    assert metrics.threshold_table([0.6], [True], thresholds=[0.6])[0].auto_routed == 1


def test_summary_median_p95_max_by_hand():
    s = metrics.summary([1, 2, 3, 4, 10])
    # p95 by linear interpolation: rank 0.95 · 4 = 3.8 → 4 + 0.8 · (10 - 4) = 8.8
    assert s == {"count": 5, "min": 1.0, "mean": 4.0, "median": 3.0, "p95": pytest.approx(8.8), "max": 10.0}
    assert metrics.summary([])["median"] is None


def test_histogram_counts_per_bin():
    h = metrics.histogram([0.05, 0.5, 0.55, 1.0], [0.0, 0.5, 1.0])
    assert [b["count"] for b in h] == [1, 3]


def test_mismatched_inputs_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="gold index 2 outside its 2 options"):
        metrics.accuracy([[0.5, 0.5]], [2])
    with pytest.raises(ValueError, match="2 probability vectors but 1 gold"):
        metrics.brier_score([[0.5, 0.5], [0.5, 0.5]], [0])
