"""`make learn`'s inputs: the answers file is checked line by line (which line, which field), and
the shipped samples it runs on by default fit together (every answer names an item of FIRST)."""

from __future__ import annotations

import json

import pytest

from decision_router.domain.policies import load_policy
from local.learn import SAMPLES, read_answers


def test_bad_answers_lines_are_named(tmp_path):
    path = tmp_path / "answers.jsonl"
    for text, problem in [("{", "answers.jsonl:1: not JSON"), ('{"answers": {"team": "data"}}', "item_id"),
                          ('{"item_id": "X", "answers": {}}', "answers: an object")]:
        path.write_text(text + "\n")
        with pytest.raises(ValueError, match=problem):
            read_answers(path)


def test_the_samples_answer_items_of_first_with_options_of_their_policy():
    answers = read_answers(SAMPLES / "answers.jsonl")
    first = [json.loads(line) for line in (SAMPLES / "first.jsonl").read_text().splitlines()]
    assert set(answers) == {item["incident_id"] for item in first}
    incident = load_policy("incident")
    for given in answers.values():
        assert all(option in incident.question(q).option_ids for q, option in given.items())
    assert (SAMPLES / "then.jsonl").read_text().strip()
