"""Reviewers working the review queue, simulated (local/review_load.py, what `make soak` reports
after its ledger): the console's SLA order against oldest first, on the same arrivals."""

import io

from local.review_load import compare, gold_records, problems, simulate


def test_at_half_pace_the_sla_order_breaches_less_than_oldest_first_and_no_p1():
    records = gold_records(seed=7)
    out = io.StringIO()
    tallies = compare(records, out, reviewers=3, review_minutes=4.0, rate=0.5, seed=7)
    by_sla, oldest = tallies["by SLA"], tallies["oldest first"]
    assert sum(by_sla.items.values()) == sum(oldest.items.values()) == len(records)  # each reviewed once
    assert oldest.breached["P1"] > 0, "oldest first lets P1s wait past their 15 minutes"
    assert by_sla.breached["P1"] == 0 and by_sla.total_breached <= oldest.total_breached
    assert problems(tallies) == []
    assert out.getvalue().splitlines()[-1].startswith("review sla: by SLA breached ")


def test_at_the_usual_pace_fewer_breach_than_at_half_pace():
    records = gold_records(seed=7)
    usual = simulate(records, "oldest first", reviewers=3, rate=1.0, seed=7)
    half = simulate(records, "oldest first", reviewers=3, rate=0.5, seed=7)
    assert usual.total_breached < half.total_breached


def test_two_reviewers_both_busy_past_a_p1s_target_breach_it_whatever_the_order():
    # No order can help when every reviewer is in a review longer than 15 minutes: what the
    # escalation of an item at risk is for. The soak says so, and fails.
    tallies = {order: simulate(gold_records(seed=8), order, reviewers=2, rate=0.5, seed=8)
               for order in ("by SLA", "oldest first")}
    assert tallies["by SLA"].breached["P1"] > 0
    assert any("P1 review(s)" in problem for problem in problems(tallies))
