"""Learned heads: files beside the policy checked at load, the model binding, and how routing
applies every block (text, categories, hidden state, letters)."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random

import pytest

from decision_contract import ModelInfo, softmax
from decision_router.domain.heads import MAX_HEAD_BYTES, Head
from decision_router.domain.judging import model_entry
from decision_router.domain.lexical import term_counts, tfidf
from decision_router.domain.model_requests import build_decisions, build_state
from decision_router.domain.policies import POLICY_DIR, PolicyError, load_policy
from decision_router.items import parse_item
from tests.functions.conftest import make_result

HIDDEN = 8
MODEL = ModelInfo(file="m.gguf", bytes=1, sha256="a" * 64, context_size=2048, threads=1, gpu_layers=0,
                  llama_cpp_python_version="test", hidden_size=HIDDEN)
TERMS = ["c: ch", "c:ed ", "w:charged", "w:charged twice", "w:password"]


def head_for(policy, question, *, model: bool = True, **changes) -> dict:
    """A small, valid head for `question`: text and categorical blocks, and (with `model`) hidden
    state (8 wide) and letters, as a head file holds it."""
    rng = random.Random(7)
    k = len(question.options)

    def rows(width: int) -> list[list[float]]:
        return [[round(rng.uniform(-1, 1), 4) for _ in range(width)] for _ in range(k)]

    head = {
        "format": "decision-router-head/2", "version": "test-1", "question_sha256": policy.question_sha256(question),
        "options": question.option_ids,
        "text": {"fields": ["subject", "message"], "terms": TERMS, "idf": [1.0, 1.5, 2.0, 2.5, 3.0], "weights": rows(len(TERMS))},
        "categorical": {"fields": ["channel", "customer_tier"], "values": ["channel=email", "customer_tier=pro"],
                        "weights": rows(2)},
        "bias": [0.0] * k, "temperature": 1.5,
        "thresholds": {"min_confidence": 0.3, "min_margin": 0.05},
        "fit": {"examples": 50, "fitted_on": "2026-11-30", "regularisation": 0.1, "folds": 5, "cv_accuracy": 0.8,
                "cv_ece": 0.05},
    }
    if model:
        head.update({"model_sha256": MODEL.sha256, "hidden_size": HIDDEN, "prompt_version": "direct-options-v1",
                     "hidden": {"weights": rows(HIDDEN)}, "letters": {"weights": rows(k)}})
    head.update(changes)
    return head


def install(tmp_path, raw_policy: dict, head: dict | None, *, name: str = "policy.json") -> "object":
    """Write the policy and its head file into tmp_path, referenced by path and sha256; load it."""
    raw = copy.deepcopy(raw_policy)
    if head is not None:
        (tmp_path / "heads").mkdir(exist_ok=True)
        text = json.dumps(head)
        (tmp_path / "heads" / "queue.json").write_text(text)
        raw["questions"][0]["head"] = {"file": "heads/queue.json", "sha256": hashlib.sha256(text.encode()).hexdigest()}
    (tmp_path / name).write_text(json.dumps(raw))
    return load_policy(tmp_path / name)


@pytest.fixture
def raw_ticket_policy():
    return json.loads((POLICY_DIR / "support-ticket.json").read_text())


@pytest.fixture
def shipped():
    policy = load_policy("support-ticket")
    return policy, policy.questions[0]


def test_a_head_loads_from_its_file_and_is_asked_for_the_hidden_state(tmp_path, raw_ticket_policy, shipped, ticket_data):
    policy = install(tmp_path, raw_ticket_policy, head_for(*shipped))
    assert policy.questions[0].learned_head.hidden_size == HIDDEN
    [decision] = build_decisions(policy, parse_item("ticket", ticket_data))
    assert decision.return_hidden_state is True
    text_only = install(tmp_path, raw_ticket_policy, head_for(*shipped, model=False))
    # asked all the same: a record going to review keeps it for relearning (domain/kept_signals.py)
    assert build_decisions(text_only, parse_item("ticket", ticket_data))[0].return_hidden_state is True
    plain = install(tmp_path, {**raw_ticket_policy, "questions": [
        {k: v for k, v in raw_ticket_policy["questions"][0].items() if k != "head"}]}, None)
    assert plain.questions[0].learned_head is None


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda h: h["hidden"]["weights"][1].pop(), r"hidden\.weights\[1\] has 7 values; expected 8"),
        (lambda h: h["text"]["weights"][0].append(1.0), r"text\.weights\[0\] has 6 values; expected 5"),
        (lambda h: h["text"]["idf"].pop(), r"text\.idf has 4 values for 5 terms"),
        (lambda h: h.update(options=["billing", "refunds", "technical_fault", "how_to", "sales"]),
         r"question 'queue': head file heads/queue\.json: options \['billing', 'refunds'.* are not the question's options"),
        (lambda h: h["hidden"]["weights"][0].__setitem__(3, float("nan")), r"hidden\.weights\.0\.3: Input should be a finite number"),
        (lambda h: h["bias"].__setitem__(0, float("inf")), r"bias\.0: Input should be a finite number"),
        (lambda h: h.pop("model_sha256"), r"a head that reads the hidden state or the letters names model_sha256"),
        (lambda h: h.update(model_sha256="abc"), r"model_sha256: String should match pattern"),
        (lambda h: h.update(bias=[0.0]), r"bias has 1 values for 5 options"),
        (lambda h: h.update(question_sha256="b" * 64), r"question_sha256 does not match the question's wording"),
        (lambda h: h.update(temperature=0), r"temperature: Input should be greater than 0"),
        (lambda h: h["thresholds"].update(by_option={"refunds": 0.9}), r"by_option names options \['refunds'\]"),
    ],
)
def test_bad_heads_fail_at_policy_load_naming_file_and_field(tmp_path, raw_ticket_policy, shipped, change, message):
    head = head_for(*shipped)
    change(head)
    with pytest.raises(PolicyError) as caught:
        install(tmp_path, raw_ticket_policy, head)
    assert str(tmp_path / "policy.json") in str(caught.value)
    assert caught.match(message)


def test_a_changed_or_missing_head_file_fails_at_load_naming_it(tmp_path, raw_ticket_policy, shipped):
    install(tmp_path, raw_ticket_policy, head_for(*shipped))
    head_file = tmp_path / "heads" / "queue.json"
    head_file.write_text(head_file.read_text().replace('"test-1"', '"test-2"'))
    with pytest.raises(PolicyError, match=r"heads/queue\.json: sha256 .* is not the policy's .*the file changed"):
        load_policy(tmp_path / "policy.json")
    head_file.unlink()
    with pytest.raises(PolicyError, match=r"head file .*heads/queue\.json: cannot read it"):
        load_policy(tmp_path / "policy.json")


def test_a_head_file_over_two_megabytes_is_refused(tmp_path, raw_ticket_policy, shipped):
    head = head_for(*shipped, notes=None)
    head.pop("notes")
    padded = json.dumps(head) + " " * MAX_HEAD_BYTES
    (tmp_path / "heads").mkdir()
    (tmp_path / "heads" / "queue.json").write_text(padded)
    raw = copy.deepcopy(raw_ticket_policy)
    raw["questions"][0]["head"] = {"file": "heads/queue.json", "sha256": hashlib.sha256(padded.encode()).hexdigest()}
    (tmp_path / "policy.json").write_text(json.dumps(raw))
    with pytest.raises(PolicyError, match=r"bytes; at most 2097152"):
        load_policy(tmp_path / "policy.json")


def test_rewording_the_question_invalidates_its_head(tmp_path, raw_ticket_policy, shipped):
    raw = copy.deepcopy(raw_ticket_policy)
    raw["questions"][0]["options"][0]["description"] = "Money matters."
    with pytest.raises(PolicyError, match="fitted on another prompt; refit it"):
        install(tmp_path, raw, head_for(*shipped))


def result_with_hidden(question, hidden, *, model=MODEL, prompt_version="direct-options-v1", letters=None):
    result = make_result("queue", question.option_ids, letters or [2.0, 0.0, 0.0, 0.0, 0.0], mass=0.05)
    return result.model_copy(update={"hidden_state": hidden, "model": model, "prompt_version": prompt_version})


def expected_logits(head: Head, state: dict, hidden, letters) -> list[float]:
    """Every block by hand, from the lexical module's documented weighting."""
    index = {t: i for i, t in enumerate(head.text.terms)}
    vector = tfidf(term_counts(f"{state['subject']}\n{state['message']}"), index, head.text.idf)
    mean = sum(letters) / len(letters)
    indicators = [f"channel={state['channel']}", f"customer_tier={state['customer_tier']}"]
    out = []
    for o in range(len(head.options)):
        z = head.bias[o] + sum(head.text.weights[o][c] * v for c, v in vector.items())
        z += sum(head.categorical.weights[o][head.categorical.values.index(v)] for v in indicators if v in head.categorical.values)
        z += sum(w * h for w, h in zip(head.hidden.weights[o], hidden))
        z += sum(w * (x - mean) for w, x in zip(head.letters.weights[o], letters))
        out.append(z)
    return out


def test_a_matching_head_decides_from_every_block_with_its_own_thresholds(tmp_path, raw_ticket_policy, shipped, ticket_data):
    policy = install(tmp_path, raw_ticket_policy, head_for(*shipped))
    question = policy.questions[0]
    ticket = parse_item("ticket", {**ticket_data, "subject": "Charged twice", "channel": "email"})
    state = build_state(policy, ticket)
    hidden, letters = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 1.0], [2.0, 0.0, 1.0, 0.0, -1.0]
    entry = model_entry(question, result_with_hidden(question, hidden, letters=letters), state)
    head = question.learned_head
    expected = softmax(expected_logits(head, state, hidden, letters), 1.5)
    assert entry.readout == "head" and entry.head_version == "test-1" and entry.head_skipped is None
    assert [entry.probabilities[o] for o in question.option_ids] == pytest.approx(expected, abs=1e-12)
    assert entry.head_probabilities == entry.probabilities
    # the letters are still recorded beside the head, at the policy's letter temperature
    assert [entry.letter_probabilities[o] for o in question.option_ids] == pytest.approx(softmax(letters, question.temperature))
    # the head's thresholds judge it; the letters' allowed-token mass (0.05 here) does not
    assert entry.thresholds.min_confidence == 0.3 and entry.thresholds.min_allowed_token_mass == 0.0
    assert not any("allowed_token_mass" in r for r in entry.reasons)
    assert entry.temperature == 1.5


def test_the_text_blocks_matter(tmp_path, raw_ticket_policy, shipped, ticket_data):
    policy = install(tmp_path, raw_ticket_policy, head_for(*shipped))
    head = policy.questions[0].learned_head
    money = build_state(policy, parse_item("ticket", {**ticket_data, "subject": "charged twice", "body": "charged"}))
    login = build_state(policy, parse_item("ticket", {**ticket_data, "subject": "password", "body": "password"}))
    assert head.logits(money, [0.0] * HIDDEN, [0.0] * 5) != head.logits(login, [0.0] * HIDDEN, [0.0] * 5)


def test_a_per_option_minimum_applies_when_the_head_answers_that_option(tmp_path, raw_ticket_policy, shipped, ticket_data):
    head = head_for(*shipped, model=False)
    head["bias"] = [5.0, 0.0, 0.0, 0.0, 0.0]  # answers billing, confidently
    head["thresholds"] = {"min_confidence": 0.3, "min_margin": 0.0, "by_option": {"billing": 0.999}}
    policy = install(tmp_path, raw_ticket_policy, head)
    state = build_state(policy, parse_item("ticket", ticket_data))
    entry = model_entry(policy.questions[0], result_with_hidden(policy.questions[0], None), state)
    assert entry.option_id == "billing" and entry.thresholds.min_confidence == 0.999
    assert not entry.passed and entry.reasons[0].startswith("confidence")


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
def test_a_head_never_reads_another_models_hidden_state(tmp_path, raw_ticket_policy, shipped, ticket_data, model,
                                                         prompt_version, hidden, reason):
    policy = install(tmp_path, raw_ticket_policy, head_for(*shipped))
    question = policy.questions[0]
    state = build_state(policy, parse_item("ticket", ticket_data))
    entry = model_entry(question, result_with_hidden(question, hidden, model=model, prompt_version=prompt_version), state)
    assert entry.readout == "letters" and entry.head_skipped == reason
    assert entry.head_probabilities is None and entry.head_version is None
    assert entry.probabilities == entry.letter_probabilities
    assert entry.thresholds == question.thresholds  # the letters' own, mass check included
    assert any("allowed_token_mass" in r for r in entry.reasons)


def test_a_head_that_reads_only_the_evidence_serves_any_model(tmp_path, raw_ticket_policy, shipped, ticket_data):
    policy = install(tmp_path, raw_ticket_policy, head_for(*shipped, model=False))
    question = policy.questions[0]
    state = build_state(policy, parse_item("ticket", ticket_data))
    other = MODEL.model_copy(update={"sha256": "c" * 64, "hidden_size": 4096})
    entry = model_entry(question, result_with_hidden(question, None, model=other, prompt_version="other"), state)
    assert entry.readout == "head" and entry.head_skipped is None
    with pytest.raises(ValueError, match="pass the decision's state"):
        model_entry(question, result_with_hidden(question, None))


def test_head_probabilities_are_a_distribution_even_for_large_logits(shipped):
    head = Head.model_validate(head_for(*shipped, bias=[1000.0, 0.0, 0.0, 0.0, 0.0]))
    p = head.probabilities({"subject": "x", "message": "y"}, [10.0] * HIDDEN, [0.0] * 5)
    assert math.isclose(sum(p), 1.0) and p[0] > 0.999
    with pytest.raises(ValueError, match="hidden state has 3 values; the head reads 8"):
        head.probabilities({"subject": "x"}, [1.0, 2.0, 3.0], [0.0] * 5)
