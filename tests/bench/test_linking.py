"""The labelled ticket-incident pairs (events/linking/) and the bench that measures the link rule on
them (bench/linking.py): the threshold the rule ships with is the one the fit half chooses, the
pairs hold the near misses the rule must not link, and a ticket's pairs stay in one half."""

from __future__ import annotations

import json
from collections import Counter

from bench.linking import DATA, choose, load, main, measure
from decision_router.domain.linking import THRESHOLD


def test_the_shipped_threshold_is_the_one_the_fit_half_chooses():
    fit = [case for case in load() if case.split == "fit"]
    assert choose(fit).threshold == THRESHOLD


def test_the_pairs_hold_outages_and_their_near_misses_and_each_ticket_stays_in_one_half():
    pairs = [json.loads(line) for line in (DATA / "pairs.jsonl").read_text().splitlines()]
    assert len(pairs) >= 150
    kinds = Counter(p["kind"] for p in pairs)
    assert {"outage", "other-outage", "same-product", "unrelated"} <= set(kinds)
    assert all(p["describes"] == (p["kind"] == "outage") for p in pairs)
    halves = {(p["ticket_id"], p["split"]) for p in pairs}
    assert len(halves) == len({p["ticket_id"] for p in pairs})
    assert {split for _, split in halves} == {"fit", "test"}


def test_the_report_measures_the_test_half_at_the_shipped_threshold(tmp_path, capsys):
    out = main(["--json", str(tmp_path / "linking.json")])
    test = [case for case in load() if case.split == "test"]
    figures = measure(test, THRESHOLD)
    assert out["test"]["precision"] == figures.precision and out["test"]["recall"] == figures.recall
    assert json.loads((tmp_path / "linking.json").read_text()) == json.loads(json.dumps(out))
    assert f"test: threshold {THRESHOLD:.2f} (shipped): precision {figures.precision:.3f}" in capsys.readouterr().out
    # The old rule alone (the service's id named) finds none of these customers' tickets.
    assert out["test_named_only"]["linked"] == 0 and figures.right > 0
