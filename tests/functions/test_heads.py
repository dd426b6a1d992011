"""Learned heads in policies: validation at load, the model binding, and how routing uses them."""

from __future__ import annotations

import copy
import json
import math
import random

import pytest

from decision_contract import ModelInfo, softmax
from decision_router.heads import Head
from decision_router.items import parse_item
from decision_router.judging import model_entry
from decision_router.policies import POLICY_DIR, PolicyError, build_decisions, load_policy
from tests.functions.conftest import make_result

HIDDEN = 8
MODEL = ModelInfo(file="m.gguf", bytes=1, sha256="a" * 64, context_size=2048, threads=1, gpu_layers=0,
                  llama_cpp_python_version="test", hidden_size=HIDDEN)


def head_for(policy, question, **changes) -> dict:
    """A small, valid head for `question` (8-wide hidden state), as a policy file holds it."""
    rng = random.Random(7)
    head = {
        "version": "test-1", "model_sha256": MODEL.sha256, "hidden_size": HIDDEN, "prompt_version": "direct-options-v1",
        "question_sha256": policy.question_sha256(question), "options": question.option_ids,
        "weights": [[rng.uniform(-1, 1) for _ in range(HIDDEN)] for _ in question.options],
        "bias": [0.0] * len(question.options), "temperature": 1.5,
        "thresholds": {"min_confidence": 0.3, "min_margin": 0.05},
        "fit": {"examples": 50, "fitted_on": "2026-11-30", "regularisation": 0.1, "folds": 5, "cv_accuracy": 0.8,
                "cv_ece": 0.05},
    }
    head.update(changes)
    return head


@pytest.fixture
def ticket_policy_with_head(tmp_path):
    raw = json.loads((POLICY_DIR / "support-ticket.json").read_text())
    policy = load_policy("support-ticket")
    raw["questions"][0]["head"] = head_for(policy, policy.questions[0])
    return raw


def load_raw(tmp_path, raw):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(raw))
    return load_policy(path)


def test_a_head_loads_and_is_asked_for_the_hidden_state(tmp_path, ticket_policy_with_head, ticket_data):
    policy = load_raw(tmp_path, ticket_policy_with_head)
    assert policy.questions[0].head.hidden_size == HIDDEN
    [decision] = build_decisions(policy, parse_item("ticket", ticket_data))
    assert decision.return_hidden_state is True
    plain = load_raw(tmp_path, {**ticket_policy_with_head, "questions": [
        {k: v for k, v in ticket_policy_with_head["questions"][0].items() if k != "head"}]})
    assert build_decisions(plain, parse_item("ticket", ticket_data))[0].return_hidden_state is False


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda h: h["weights"][1].pop(), r"questions\.0\.head: weights\[1\] has 7 values; hidden_size is 8"),
        (lambda h: h.update(options=["billing", "refunds", "technical_fault", "how_to", "sales"]),
         r"question 'queue': head\.options \['billing', 'refunds'.* are not the question's options"),
        (lambda h: h["weights"][0].__setitem__(3, float("nan")), r"questions\.0\.head\.weights\.0\.3: Input should be a finite number"),
        (lambda h: h["bias"].__setitem__(0, float("inf")), r"questions\.0\.head\.bias\.0: Input should be a finite number"),
        (lambda h: h.pop("model_sha256"), r"questions\.0\.head\.model_sha256: Field required"),
        (lambda h: h.update(model_sha256="abc"), r"questions\.0\.head\.model_sha256: String should match pattern"),
        (lambda h: h.update(bias=[0.0]), r"bias has 1 values for 5 options"),
        (lambda h: h.update(question_sha256="b" * 64), r"head\.question_sha256 does not match the question's wording"),
        (lambda h: h.update(temperature=0), r"questions\.0\.head\.temperature: Input should be greater than 0"),
    ],
)
def test_bad_heads_fail_at_policy_load_naming_file_and_field(tmp_path, ticket_policy_with_head, change, message):
    raw = copy.deepcopy(ticket_policy_with_head)
    change(raw["questions"][0]["head"])
    with pytest.raises(PolicyError) as caught:
        load_raw(tmp_path, raw)
    assert str(tmp_path / "policy.json") in str(caught.value)
    assert caught.match(message)


def test_rewording_the_question_invalidates_its_head(tmp_path, ticket_policy_with_head):
    raw = copy.deepcopy(ticket_policy_with_head)
    raw["questions"][0]["options"][0]["description"] = "Money matters."
    with pytest.raises(PolicyError, match="fitted on another prompt; refit it"):
        load_raw(tmp_path, raw)


def result_with_hidden(question, hidden, *, model=MODEL, prompt_version="direct-options-v1"):
    result = make_result("queue", question.option_ids, [2.0, 0.0, 0.0, 0.0, 0.0], mass=0.05)
    return result.model_copy(update={"hidden_state": hidden, "model": model, "prompt_version": prompt_version})


def test_a_matching_head_decides_with_its_own_probabilities_and_thresholds(tmp_path, ticket_policy_with_head):
    question = load_raw(tmp_path, ticket_policy_with_head).questions[0]
    hidden = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 1.0]
    entry = model_entry(question, result_with_hidden(question, hidden))
    head = question.head
    expected = softmax([b + sum(w * h for w, h in zip(row, hidden)) for row, b in zip(head.weights, head.bias)], 1.5)
    assert entry.readout == "head" and entry.head_version == "test-1" and entry.head_skipped is None
    assert [entry.probabilities[o] for o in question.option_ids] == pytest.approx(expected, abs=1e-12)
    assert entry.head_probabilities == entry.probabilities
    # the letters are still recorded beside the head, at the policy's letter temperature
    letters = softmax([2.0, 0.0, 0.0, 0.0, 0.0], question.temperature)
    assert [entry.letter_probabilities[o] for o in question.option_ids] == pytest.approx(letters)
    # the head's thresholds judge it; the letters' allowed-token mass (0.05 here) does not
    assert entry.thresholds.min_confidence == 0.3 and entry.thresholds.min_allowed_token_mass == 0.0
    assert not any("allowed_token_mass" in r for r in entry.reasons)
    assert entry.temperature == 1.5


@pytest.mark.parametrize(
    "model, prompt_version, hidden, reason",
    [
        (MODEL.model_copy(update={"sha256": "c" * 64}), "direct-options-v1", [0.0] * HIDDEN,
         "endpoint model sha256 cccccccccccc… is not the head's aaaaaaaaaaaa…"),
        (MODEL.model_copy(update={"hidden_size": 16}), "direct-options-v1", [0.0] * 16, "endpoint hidden size 16 is not the head's 8"),
        (MODEL, "direct-options/1", [0.0] * HIDDEN, "endpoint prompt version 'direct-options/1' is not the head's 'direct-options-v1'"),
        (MODEL, "direct-options-v1", None, "the endpoint returned no hidden state"),
        (MODEL.model_copy(update={"hidden_size": None}), "direct-options-v1", [0.0] * 4, "hidden state of 4 values; the head reads 8"),
    ],
)
def test_a_head_never_reads_another_models_hidden_state(tmp_path, ticket_policy_with_head, model, prompt_version, hidden, reason):
    question = load_raw(tmp_path, ticket_policy_with_head).questions[0]
    entry = model_entry(question, result_with_hidden(question, hidden, model=model, prompt_version=prompt_version))
    assert entry.readout == "letters" and entry.head_skipped == reason
    assert entry.head_probabilities is None and entry.head_version is None
    assert entry.probabilities == entry.letter_probabilities
    assert entry.thresholds == question.thresholds  # the letters' own, mass check included
    assert any("allowed_token_mass" in r for r in entry.reasons)


def test_head_probabilities_are_a_distribution_even_for_large_logits():
    head = Head.model_validate(head_for(load_policy("support-ticket"), load_policy("support-ticket").questions[0],
                                        weights=[[100.0] * HIDDEN] + [[0.0] * HIDDEN] * 4))
    p = head.probabilities([10.0] * HIDDEN)
    assert math.isclose(sum(p), 1.0) and p[0] > 0.999
    with pytest.raises(ValueError, match="hidden state has 3 values; the head reads 8"):
        head.probabilities([1.0, 2.0, 3.0])
