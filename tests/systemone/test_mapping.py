"""System One <-> structured decisions: the pure mapping, without the model.

Decision results here are built from chosen probabilities to check the answer arithmetic
(score = probability-weighted level, P(yes), argmax, confidence); the scoring itself is
tested with the real model in test_http.py.
"""

from __future__ import annotations

import json
import math

import pytest
from typesafe_sdk import SystemOneResponse as ClientResponse

from decision_contract import (
    FORMULA_TEXT,
    BatchDecisionResponse,
    BatchTiming,
    ConfidenceFormula,
    DecisionRequest,
    DecisionResult,
    DecisionTiming,
    ModelInfo,
    confidence,
)
from decision_server.systemone import (
    DEFAULT_INSTRUCTIONS,
    SystemOneRequest,
    answer_from_result,
    question_decision,
    to_decisions,
    to_response,
)

MODEL = ModelInfo(
    file="tiny.gguf", bytes=1, sha256="0" * 64, context_size=2048, threads=1, gpu_layers=0,
    llama_cpp_python_version="test",
)


def result_for(decision_id: str, option_ids: list[str], probabilities: list[float], *, tokens=100, reused=0) -> DecisionResult:
    logits = [math.log(p) if p > 0 else -1e4 for p in probabilities]
    return DecisionResult(
        id=decision_id, option_ids=option_ids, probabilities=probabilities, option_logits=logits, temperature=1.0,
        input_tokens=tokens, reused_prefix_tokens=reused, allowed_token_mass=0.5, prompt_sha256="f" * 64,
        prompt_version="direct-options-v1", model=MODEL,
        timing=DecisionTiming(tokenize_seconds=0.0, prefill_seconds=0.0, total_seconds=0.0),
    )


def request(**questions) -> SystemOneRequest:
    return SystemOneRequest.model_validate({"model": "jev-latest", "state": "I was charged twice.", "questions": questions})


def test_noul_becomes_yes_then_no_with_described_outcomes():
    q = request(spam={"type": "noul", "instructions": "Is this spam?", "criteria": {"true": "Unsolicited advertising"}})
    (decision,) = to_decisions(q)
    assert decision.id == "spam"
    assert decision.question == "Is this spam?"
    assert [(o.id, o.description) for o in decision.options] == [("yes", "Yes: Unsolicited advertising"), ("no", "No")]


def test_noul_without_instructions_uses_the_default_criterion():
    q = request(spam={"type": "noul", "criteria": {"false": "A legitimate conversation"}})
    (decision,) = to_decisions(q)
    assert decision.question == DEFAULT_INSTRUCTIONS["noul"]
    assert [o.description for o in decision.options] == ["Yes", "No: A legitimate conversation"]


def test_choice_keeps_criteria_order_and_a_null_description_means_the_name():
    q = request(tone={"type": "choice", "instructions": {"task": "tone", "scale": ["calm", "angry"]},
                      "criteria": {"calm": None, "angry": "An upset or hostile message", "excited": ["eager", "happy"]}})
    (decision,) = to_decisions(q)
    assert decision.question == '{"task":"tone","scale":["calm","angry"]}'
    assert [(o.id, o.description) for o in decision.options] == [
        ("calm", "calm"), ("angry", "angry: An upset or hostile message"), ("excited", 'excited: ["eager","happy"]'),
    ]


def test_score_levels_are_options_from_index_zero():
    q = request(urgency={"type": "score", "criteria": ["Can wait", {"when": "this week"}, "Today"]})
    (decision,) = to_decisions(q)
    assert decision.question == DEFAULT_INSTRUCTIONS["score"]
    assert [(o.id, o.description) for o in decision.options] == [("0", "Can wait"), ("1", '{"when":"this week"}'), ("2", "Today")]


def test_mixed_questions_form_one_shared_state_batch_in_request_order():
    state = {"subject": "Refund", "body": "Charged twice"}
    q = SystemOneRequest.model_validate({"model": "m", "state": state, "questions": {
        "billing": {"type": "noul", "instructions": "About billing?"},
        "tone": {"type": "choice", "criteria": {"calm": None, "angry": None}},
        "urgency": {"type": "score", "criteria": ["low", "high"]},
    }})
    decisions = to_decisions(q)
    assert [d.id for d in decisions] == ["billing", "tone", "urgency"]
    assert all(d.state == state for d in decisions)
    # The batch is valid under the SemIf contract: one state for all.
    assert DecisionRequest(decisions=decisions).items == decisions


def test_answers_carry_the_readout_probabilities():
    q = request(
        spam={"type": "noul", "instructions": "Spam?"},
        tone={"type": "choice", "criteria": {"calm": None, "angry": None, "excited": None}},
        urgency={"type": "score", "criteria": ["low", "mid", "high"]},
    )
    noul = answer_from_result(q.questions["spam"], result_for("spam", ["yes", "no"], [0.8, 0.2]))
    assert noul.noul == 0.8
    choice = answer_from_result(q.questions["tone"], result_for("tone", ["calm", "angry", "excited"], [0.2, 0.5, 0.3]))
    assert choice.choice == "angry"
    assert choice.probabilities == {"calm": 0.2, "angry": 0.5, "excited": 0.3}
    assert choice.confidence == pytest.approx(confidence([0.2, 0.5, 0.3], ConfidenceFormula.NORMALIZED_PEAK))
    score = answer_from_result(q.questions["urgency"], result_for("urgency", ["0", "1", "2"], [0.1, 0.3, 0.6]))
    assert score.score == pytest.approx(0 * 0.1 + 1 * 0.3 + 2 * 0.6)
    assert score.legend == {"0": "low", "1": "mid", "2": "high"}
    assert score.probabilities == {"0": 0.1, "1": 0.3, "2": 0.6}


def test_a_tie_picks_the_first_choice_in_request_order():
    q = request(tone={"type": "choice", "criteria": {"b": None, "a": None}})
    answer = answer_from_result(q.questions["tone"], result_for("tone", ["b", "a"], [0.5, 0.5]))
    assert answer.choice == "b"
    assert answer.confidence == 0.0


def test_confidence_formula_is_selectable_and_stated():
    q = request(tone={"type": "choice", "criteria": {"a": None, "b": None, "c": None}})
    batch = BatchDecisionResponse(
        results=[result_for("tone", ["a", "b", "c"], [0.6, 0.3, 0.1])],
        timing=BatchTiming(shared_prefix_tokens=0, shared_prefix_seconds=0.0, total_seconds=0.0),
    )
    formula = ConfidenceFormula.ONE_MINUS_NORMALIZED_ENTROPY
    response = to_response(q, batch, formula)
    assert response.answers["tone"].confidence == pytest.approx(confidence([0.6, 0.3, 0.1], formula))
    assert response.metadata.confidence_formula is formula
    assert response.metadata.confidence_formula_text == FORMULA_TEXT[formula]


def _number_tokens(text: str) -> dict[str, list[str]]:
    """Every number in a JSON text, by its raw token, split into ints and floats."""
    found: dict[str, list[str]] = {"int": [], "float": []}
    json.loads(text, parse_int=lambda s: found["int"].append(s), parse_float=lambda s: found["float"].append(s))
    return found


def test_whole_numbers_still_serialise_as_floats_and_the_client_accepts_them():
    q = request(
        spam={"type": "noul", "instructions": "Spam?"},
        urgency={"type": "score", "criteria": ["low", "high"]},
    )
    batch = BatchDecisionResponse(
        results=[result_for("spam", ["yes", "no"], [1.0, 0.0], tokens=120, reused=100),
                 result_for("urgency", ["0", "1"], [0.0, 1.0], tokens=118, reused=100)],
        timing=BatchTiming(shared_prefix_tokens=100, shared_prefix_seconds=0.0, total_seconds=0.0),
    )
    response = to_response(q, batch)
    body = response.model_dump_json()
    answers = json.dumps(json.loads(body)["answers"])
    # Re-encoded by json.dumps, a float stays "1.0": the answers hold no integer at all.
    assert _number_tokens(answers)["int"] == []
    assert '"noul": 1.0' in answers and '"score": 1.0' in answers and '"0": 0.0' in answers
    assert '"noul":1.0' in body and '"score":1.0' in body
    # Token counts are integers (the client's Usage is a strict int); the prefix counts once.
    assert json.loads(body)["usage"] == {"input_tokens": 100 + 20 + 18, "output_tokens": 0}
    client_view = ClientResponse.model_validate_json(body)
    assert client_view.nouls["spam"].noul == 1.0
    assert client_view.scores["urgency"].probabilities == {0: 0.0, 1: 1.0}


def test_results_must_match_the_questions():
    q = request(a={"type": "noul", "instructions": "A?"}, b={"type": "noul", "instructions": "B?"})
    batch = BatchDecisionResponse(
        results=[result_for("b", ["yes", "no"], [0.5, 0.5]), result_for("a", ["yes", "no"], [0.5, 0.5])],
        timing=BatchTiming(shared_prefix_tokens=0, shared_prefix_seconds=0.0, total_seconds=0.0),
    )
    with pytest.raises(ValueError, match="do not match"):
        to_response(q, batch)


def test_question_decision_is_the_reusable_entry_point():
    # What the evaluation tool calls for one JevBench task.
    q = request(x={"type": "choice", "instructions": "Pick", "criteria": {"left": None, "right": None}})
    decision = question_decision("task-17", q.questions["x"], "some evidence")
    assert decision.id == "task-17" and decision.state == "some evidence" and decision.option_ids == ["left", "right"]
