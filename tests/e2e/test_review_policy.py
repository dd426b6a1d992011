"""`make review` applies the policy `make demo` applied: the demo records its policy files in its
log folder (.demo/run.json), the console's entry point applies them, and POLICY= (--policy) takes
their place, said when it differs. Fast tier: `_run` (the services) is replaced; nothing starts."""

from __future__ import annotations

import argparse
import io

import pytest

from local import demo, review
from local.cloudformation import REPO_ROOT

MANY_OPTIONS = REPO_ROOT / "events/many-options/policy.json"


@pytest.fixture
def served(monkeypatch):
    """What `review.main` would serve: its arguments as `_run` receives them."""
    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(review, "_run", lambda args, out, stop: seen.append(args) or 0)
    return seen


def test_review_applies_the_policy_the_last_demo_applied(tmp_path, served):
    demo.record_run(tmp_path, {"ticket": str(MANY_OPTIONS)})
    out = io.StringIO()
    assert review.main(["--log-dir", str(tmp_path)], out=out) == 0
    assert served[0].policies == {"ticket": str(MANY_OPTIONS)}
    assert "applying what the last make demo applied: events/many-options/policy.json" in out.getvalue()


def test_policy_given_to_review_takes_the_place_of_the_demos_and_the_difference_is_said(tmp_path, served):
    demo.record_run(tmp_path, {})  # the last demo applied the shipped policies
    out = io.StringIO()
    assert review.main(["--log-dir", str(tmp_path), "--policy", str(MANY_OPTIONS)], out=out) == 0
    assert served[0].policies == {"ticket": str(MANY_OPTIONS)}
    assert "not what the last make demo applied (the shipped policies)" in out.getvalue()


def test_the_same_policy_as_the_demos_is_applied_without_a_word(tmp_path, served):
    demo.record_run(tmp_path, {"ticket": str(MANY_OPTIONS)})
    out = io.StringIO()
    assert review.main(["--log-dir", str(tmp_path), "--policy", str(MANY_OPTIONS)], out=out) == 0
    assert served[0].policies == {"ticket": str(MANY_OPTIONS)} and out.getvalue() == ""


def test_without_a_demo_record_or_policy_the_shipped_policies_are_applied(tmp_path, served):
    out = io.StringIO()
    assert review.main(["--log-dir", str(tmp_path)], out=out) == 0
    assert served[0].policies == {} and out.getvalue() == ""


def test_a_policy_that_is_not_there_is_refused_before_anything_starts(tmp_path, served, capsys):
    assert review.main(["--log-dir", str(tmp_path), "--policy", str(tmp_path / "missing.json")], out=io.StringIO()) == 2
    assert "missing.json: no such file" in capsys.readouterr().err and not served


def test_the_demo_record_round_trips(tmp_path):
    assert demo.last_run_policies(tmp_path) is None
    demo.record_run(tmp_path, {"ticket": "/a/ticket.json", "incident": "/b/incident.json"})
    assert [str(p) for p in demo.last_run_policies(tmp_path)] == ["/a/ticket.json", "/b/incident.json"]


def test_review_routes_the_items_the_last_demo_routed_unless_given_its_own(tmp_path, served):
    items = tmp_path / "mine.jsonl"
    items.write_text("{}\n")
    demo.record_run(tmp_path, {}, [items])
    out = io.StringIO()
    assert review.main(["--log-dir", str(tmp_path)], out=out) == 0
    assert served[0].items == [items.resolve()]
    assert "routing what the last make demo routed" in out.getvalue()
    given = tmp_path / "other.jsonl"
    given.write_text("{}\n")
    assert review.main(["--log-dir", str(tmp_path), "--items", str(given)], out=io.StringIO()) == 0
    assert served[1].items == [given]


def test_a_record_without_items_leaves_the_sample_items(tmp_path, served):
    (tmp_path / demo.RUN_RECORD).write_text('{"policies": []}\n')  # written before item files were recorded
    assert demo.last_run_items(tmp_path) == []
    assert review.main(["--log-dir", str(tmp_path)], out=io.StringIO()) == 0
    assert served[0].items is None
