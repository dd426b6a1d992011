"""`make learn`'s inputs: the answers file is checked line by line (which line, which field), and
the shipped samples it runs on by default fit together (every answer names an item of FIRST)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from decision_router.domain.policies import load_policy
from local.learn import SAMPLES, main, read_answer_lines, read_answers
from local.relearning import RelearningRun


def test_bad_answers_lines_are_named(tmp_path):
    path = tmp_path / "answers.jsonl"
    for text, problem in [("{", "answers.jsonl:1: not JSON"), ('{"answers": {"team": "data"}}', "item_id"),
                          ('{"item_id": "X", "answers": {}}', "answers: an object"),
                          ('{"item_id": "X", "answers": {"team": "data"}, "reviewer": ""}', "answers.jsonl:1: reviewer")]:
        path.write_text(text + "\n")
        with pytest.raises(ValueError, match=problem):
            read_answers(path)


def test_the_samples_answer_items_of_first_with_options_of_their_policy():
    answers = read_answers(SAMPLES / "answers.jsonl")
    first = [json.loads(line) for line in (SAMPLES / "first.jsonl").read_text().splitlines()]
    assert set(answers) == {item["incident_id"] for item in first}
    # answered by a team: no reviewer gives more than half of what a candidate is judged on
    reviewers = Counter(reviewer for _, reviewer in read_answer_lines(SAMPLES / "answers.jsonl").values())
    assert len(reviewers) >= 3 and max(reviewers.values()) <= len(answers) / 2
    incident = load_policy("incident")
    for given in answers.values():
        assert all(option in incident.question(q).option_ids for q, option in given.items())
    assert (SAMPLES / "then.jsonl").read_text().strip()


def test_a_verdict_line_says_what_the_gate_and_the_shadow_decided():
    fit = {"questions": [
        {"question": "team", "promoted": True, "reason": "not worse on any measure", "current": {"accuracy": 0.5},
         "candidate": {"accuracy": 0.7}},
        {"question": "priority", "promoted": False, "reason": "worse on log loss", "current": {}, "candidate": {}}]}
    shadow = {"items": 5, "agreed": 4, "reviewed": 0}
    judged = {"questions": [{"question": "team", "promoted": True, "reason": "shadowed 5 items", "shadow": shadow}]}
    run = RelearningRun("incident", "arn", "SUCCEEDED", {"fit": fit, "shadow_judged": judged,
                                                          "promote": {"promoted": [{"question": "team"}]}}, None, 1.0)
    team, priority = run.verdicts()
    assert team == {**team, "promoted": True, "shadow": shadow,
                    "reason": "not worse on any measure; in shadow: shadowed 5 items"}
    assert priority == {**priority, "promoted": False, "shadow": None, "reason": "worse on log loss"}

    refused = {"questions": [{**judged["questions"][0], "promoted": False, "reason": "too few shadowed items: 2"}]}
    [team, _] = RelearningRun("incident", "arn", "SUCCEEDED", {"fit": fit, "shadow_judged": refused}, None, 1.0).verdicts()
    assert not team["promoted"] and team["reason"].endswith("in shadow: too few shadowed items: 2")

    [team, _] = RelearningRun("incident", "arn", "FAILED", {"fit": fit}, "States.Timeout", 1.0).verdicts()
    assert not team["promoted"] and team["reason"].endswith("not judged in shadow: States.Timeout")


def test_a_negative_shadow_count_is_refused(capsys):
    assert main(["--shadow-items", "-1"]) == 2
    assert "--shadow-items -1: must be 0 or more" in capsys.readouterr().err
