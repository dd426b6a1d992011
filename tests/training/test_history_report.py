"""make fit-history's report beyond the overall figures: TEST per group, the next step after the
verdict (how many labelled rows to collect), "nothing answered" in place of precision 0, and the
learning curve judged on its points. The report's functions on tiny inputs; nothing is fitted."""

from __future__ import annotations

import json

import pytest

from decision_router.domain.precision_bound import items_needed, precision_lower_bound
from training import history_outlook, history_report
from training.thresholds import promise

TARGET = 0.97


def test_each_group_gets_its_figures_and_a_group_that_misses_the_target_is_flagged():
    # billing: 8 answered automatically, 5 right (the user's group); access: 100 of 100 right; sales: none answered
    groups = ["billing"] * 10 + ["access"] * 120 + ["sales"] * 4
    gold = groups[:]
    answers = ["billing"] * 5 + ["access"] * 3 + ["billing"] * 2 + ["access"] * 120 + ["billing"] * 4
    auto = [True] * 8 + [False] * 2 + [True] * 100 + [False] * 20 + [False] * 4
    figures = history_report.group_figures(groups, gold, answers, auto, TARGET)
    billing, access, sales = figures["billing"], figures["access"], figures["sales"]
    assert billing["rows"] == 10 and billing["accuracy"] == pytest.approx(0.7) and billing["auto_share"] == 0.8
    assert billing["auto_precision"] == 5 / 8 and billing["auto_precision_lower_bound"] == precision_lower_bound(5, 8)
    assert billing["status"] == "missed" and billing["flagged"] and billing["rows_to_confirm"] is None
    assert access["status"] == "kept" and not access["flagged"] and access["auto_precision_lower_bound"] >= TARGET
    assert sales["auto_precision"] is None and sales["auto_precision_lower_bound"] is None
    assert sales["status"] == "nothing answered" and not sales["flagged"]
    lines = history_report.group_lines(figures, TARGET)
    assert "group billing: 10 rows, accuracy 70.0%; answered 80.0% automatically, 62.5% right (5 of 8)" in lines[1]
    assert lines[1].endswith("— MISSES 97.0%") and "nothing answered automatically" in lines[2]
    assert json.loads(json.dumps(figures))["sales"]["auto_precision"] is None  # null in report.json, not 0


def test_a_group_with_enough_answers_whose_bound_stays_below_the_target_is_flagged():
    n = items_needed(TARGET) + 50  # 149 answers, 4 wrong: 97.3 % right, bound below 97 %
    figures = history_report.group_figures(["a"] * n, ["a"] * n, ["a"] * (n - 4) + ["b"] * 4, [True] * n, TARGET)
    assert figures["a"]["auto_precision"] > TARGET > figures["a"]["auto_precision_lower_bound"]
    assert figures["a"]["status"] == "not shown" and figures["a"]["flagged"]
    few = history_report.group_figures(["a"] * 20, ["a"] * 20, ["a"] * 20, [True] * 20, TARGET)["a"]
    assert few["status"] == "too few to confirm" and not few["flagged"]
    assert few["rows_to_confirm"] == items_needed(TARGET) - 20  # all answered, none wrong: 99 answers in all


def test_answers_to_confirm_follow_the_clopper_pearson_bound_at_todays_error_rate():
    assert history_report.answers_to_confirm(30, 30, TARGET) == items_needed(TARGET) == 99
    needed = history_report.answers_to_confirm(99, 100, TARGET)  # 1 % wrong
    assert precision_lower_bound(int(needed * 0.99), needed) >= TARGET
    assert precision_lower_bound(int((needed - 20) * 0.99), needed - 20) < TARGET
    assert history_report.answers_to_confirm(96, 100, TARGET) is None  # below the target: no number confirms it
    assert history_report.answers_to_confirm(200, 200, TARGET) == 200  # already shown
    # answers into rows at the automatic share: 50 of 100 rows answered, all right: 49 more answers, 98 more rows
    assert history_report.rows_to_confirm(50, 50, 100, TARGET) == 98


def report(**changes):
    base = {"n_train": 1600, "n_test": 400, "accuracy": 0.9, "auto_share": 0.5, "auto_precision": 1.0,
            "auto_precision_lower_bound": precision_lower_bound(80, 80), **promise(1.0, TARGET, None)}
    return {**base, **changes}


def test_too_small_to_confirm_says_how_many_more_labelled_rows_and_of_which_groups():
    r = report(n_test=160, auto_share=0.5)  # 80 answers, all right: 19 more answers, about 38 more rows
    groups = history_report.group_figures(["a"] * 100 + ["b"] * 60, ["a"] * 100 + ["b"] * 60, ["a"] * 100 + ["b"] * 60,
                                          [i % 2 == 0 for i in range(160)], TARGET)
    step = history_report.next_step(r, groups)
    assert step["rows"] == 38 and step["groups"] == ["b", "a"]
    assert step["text"].startswith("collect about 38 more labelled TEST rows, most of groups b and a, to confirm 97.0%")
    line = history_report.last_line({**r, "next_step": step})
    assert line.startswith("TEST IS TOO SMALL TO CONFIRM the 97.0% target: its automatic answers were 100.0% right, at least")
    assert "; next: collect about 38 more labelled TEST rows" in line


def test_nothing_routed_alone_says_how_many_rows_to_collect_not_answers():
    r = report(**promise(None, TARGET, 99), auto_share=0.0, auto_precision=None, auto_precision_lower_bound=None,
               n_train=60, holdout={"accuracy": 0.99, "judged_rows": 60})
    step = history_report.next_step(r, {})
    assert step["rows"] == 40  # 99 answers at 99 % out-of-fold accuracy: at least 100 rows judged, 60 now
    line = history_report.last_line({**r, "next_step": step})
    assert line.startswith("NOTHING IS ROUTED ALONE: out of fold, no threshold shows 97.0% precision with 95 % confidence")
    assert "next: collect about 40 more labelled rows for DATA" in line and "above it" not in line
    weak = history_report.next_step({**r, "holdout": {"accuracy": 0.8, "judged_rows": 60}}, {})
    assert weak["rows"] is None and "more rows of the same will not show the target" in weak["text"]


def test_a_missed_target_names_the_groups_to_fix_and_how_many_wrong_answers_must_go():
    groups = history_report.group_figures(["a"] * 8 + ["b"] * 92, ["a"] * 100, ["a"] * 5 + ["x"] * 3 + ["a"] * 92,
                                          [True] * 100, TARGET)
    r = report(n_test=100, auto_share=1.0)
    step = history_report.next_step({**r, **promise(0.96, TARGET, None), "auto_precision": 0.96}, groups)
    assert step["groups"] == ["a"] and step["rows"] is None
    assert step["text"].startswith("2 of the 4 wrong automatic answers must go (to review, or right) for 97.0%: "
                                   "collect more labelled training rows of a")


def test_nothing_answered_is_said_so_never_precision_zero():
    assert history_report.precision_words(None) == "(nothing answered)"
    assert history_report.precision_words(0.0) == "at precision 0.000"
    line = history_report.out_of_scope_line({"in_scope_accuracy": None, "auto_share": 0.0, "auto_precision": None,
                                      "out_of_scope": {"caught": 1.0, "items": 5, "in_scope_sent_to_review": 1.0}})
    assert "precision 0" not in line and "nothing answered automatically; out of scope: 100.0% of 5 caught" in line


@pytest.mark.parametrize("points, levelled, says", [
    ([{"rows": 800, "accuracy": 0.80}, {"rows": 1600, "accuracy": 0.815}], False,
     "is still rising at the last point (+1.5 points from the previous: 0.800 → 0.815 from 800 to 1600 rows"),
    ([{"rows": 800, "accuracy": 0.80}, {"rows": 1600, "accuracy": 0.804}], True,
     "has levelled off at 0.804 (+0.4 points from the previous"),
    ([{"rows": 800, "accuracy": 0.80}, {"rows": 1600, "accuracy": 0.79}], True, "has levelled off at 0.790 (-1.0 points"),
    ([{"rows": 50, "accuracy": 0.6}], None, "reaches 0.600 (one point: too few to tell"),
])
def test_the_curve_levels_off_only_below_the_stated_gain(points, levelled, says):
    judged = history_report.judge_curve(points)
    assert judged["levelled_off"] is levelled and judged["says"].startswith(says), judged["says"]
    assert judged["levelled_off_below"] == history_report.LEVELLED_OFF_GAIN == 0.01
    if levelled:
        assert "levelled off means under +1 point a step" in judged["says"]
    assert history_report.judge_curve(points)["says"] in history_outlook.curve_outlook({"points": points}, 1600, 8, 2000, True)
