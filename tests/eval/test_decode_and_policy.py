"""Parsing generated answers, summarising the decode comparison, and writing calibration into a
policy file (on a copy: the shipped policies are never touched by tests)."""

import json
import shutil

import pytest

from bench.evaluate import decode, policy_update
from bench.evaluate.decode import DecodePair
from tests.functions.conftest import policy_files_beside


@pytest.mark.parametrize(
    ("text", "n", "index"),
    [
        ("B", 4, 1),
        (" C.\n", 4, 2),
        ("(A) because the card was charged twice", 4, 0),
        ('{"answer": "D"}', 4, 3),
        ("The answer is: B", 4, 1),
        ("Option C", 4, 2),
        ("E", 4, None),  # not an offered letter
        ("A fee was charged", 4, None),  # a word, not a letter answer
        ("The customer should pay for the refund of", 5, None),
        ("", 2, None),
    ],
)
def test_parse_letter(text, n, index):
    assert decode.parse_letter(text, n) == index


def test_generation_sees_the_readouts_own_prompt():
    from decision_contract import Decision
    from decision_server.readout import SYSTEM_INSTRUCTION, user_payload

    d = Decision(id="d", state="s", question="q?", options=[{"id": "x", "description": "X"}, {"id": "y", "description": "Y"}])
    assert decode.generation_messages(d) == [
        {"role": "system", "content": SYSTEM_INSTRUCTION},
        {"role": "user", "content": user_payload(d)},
    ]


def test_summary_by_hand():
    pairs = [
        DecodePair("a", 0, 0, 0.1, "A", 0, 0.3, 1),
        DecodePair("b", 1, 0, 0.2, "B", 1, 0.5, 1),
        DecodePair("c", 1, 1, 0.3, "well", None, 0.7, 8),
        DecodePair("d", 0, None, None, None, None, None, None, error="HTTP 503 busy"),
    ]
    s = decode.summarise(pairs)
    assert (s["decisions"], s["failed"]) == (4, 1)
    assert s["readout"]["accuracy"] == pytest.approx(2 / 3)  # a, c right
    assert s["generation"]["accuracy"] == pytest.approx(2 / 3)  # a, b right
    assert s["generation"]["unparsed"] == 1
    assert s["generation"]["agrees_with_readout"] == pytest.approx(1 / 3)  # only a
    assert s["generation"]["mean_completion_tokens"] == pytest.approx(10 / 3)
    assert s["ratio_median"] == pytest.approx(0.5 / 0.2)
    assert s["generation"]["examples"][2] == {"decision": "c", "generated": "well", "parsed": None, "gold": 1}


@pytest.fixture
def policy_copy(tmp_path):
    from decision_router.domain.policies import POLICY_DIR

    path = tmp_path / "incident.json"
    shutil.copy(POLICY_DIR / "incident.json", path)
    policy_files_beside(tmp_path)
    return path


def test_policy_change_edits_only_temperature_and_min_confidence(policy_copy):
    before = policy_copy.read_text()
    change = policy_update.propose(
        str(policy_copy),
        {"team": policy_update.QuestionChange("team", temperature=1.83456, min_confidence=0.35)},
    )
    assert policy_copy.read_text() == before  # proposing writes nothing
    old, new = json.loads(before), json.loads(change.new_text)
    old["questions"][1]["temperature"] = 1.835
    old["questions"][1]["thresholds"]["min_confidence"] = 0.35
    assert new == old
    # the layout is kept: exactly two lines change
    assert sum(line.startswith("+") and not line.startswith("+++") for line in change.diff.splitlines()) == 2
    assert '+      "temperature": 1.835,' in change.diff

    policy_update.write(change)
    from decision_router.domain.policies import load_policy

    team = load_policy(policy_copy).question("team")
    assert (team.temperature, team.thresholds.min_confidence) == (1.835, 0.35)


def test_policy_change_falls_back_to_reserialising(tmp_path, policy_copy):
    data = json.loads(policy_copy.read_text())
    data["notes"] = 'mentions "temperature": 3 in prose'  # a second match: the text edit is unsafe
    policy_copy.write_text(json.dumps(data))
    change = policy_update.propose(str(policy_copy), {"priority": policy_update.QuestionChange("priority", 2.0, 0.5)})
    assert json.loads(change.new_text)["questions"][0]["temperature"] == 2.0
    assert json.loads(change.new_text)["notes"] == data["notes"]


def test_no_change_means_no_diff(policy_copy):
    now = json.loads(policy_copy.read_text())["questions"][0]
    same = policy_update.QuestionChange("priority", now["temperature"], now["thresholds"]["min_confidence"])
    change = policy_update.propose(str(policy_copy), {"priority": same})
    assert not change.changed and change.diff == ""
