"""The shared wire schema's own rules."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from decision_contract import (
    DEFAULT_LAYOUT,
    NO_PROMPT_SHA256,
    NON_BLANK_PATTERN,
    Decision,
    DecisionRequest,
    DecisionResult,
    ModelInfo,
    softmax,
)
from decision_contract.signals import request_key

OPTIONS = [{"id": "a", "description": "A"}, {"id": "b", "description": "B"}]


def decision(**changes):
    return {"id": "d", "state": "s", "question": "q", "options": OPTIONS, **changes}


@pytest.mark.parametrize("state, got", [("", "an empty string"), (3, "a JSON number"), (None, "a JSON null"), (True, "a JSON boolean")])
def test_bad_state_has_one_clear_reason(state, got):
    with pytest.raises(ValidationError) as caught:
        Decision(**decision(state=state))
    errors = caught.value.errors()
    assert len(errors) == 1 and errors[0]["loc"] == ("state",)
    assert got in errors[0]["msg"]


def test_no_rule_across_decisions_or_options():
    # What JSON Schema cannot state is not asked: ids are positional labels, a batch may mix states.
    assert len(DecisionRequest(decisions=[decision(), decision()]).items) == 2
    assert len(DecisionRequest(decisions=[decision(id="x"), decision(id="y", state={"k": 1})]).items) == 2
    assert Decision(**decision(options=[OPTIONS[0], OPTIONS[0]])).option_ids == ["a", "a"]


def test_exactly_one_shape():
    with pytest.raises(ValidationError, match="exactly one"):
        DecisionRequest()
    with pytest.raises(ValidationError, match="exactly one"):
        DecisionRequest(decision=decision(), decisions=[decision()])


def test_state_depth_limit():
    deep: object = 1
    for _ in range(33):
        deep = [deep]
    with pytest.raises(ValidationError, match="levels deep"):
        Decision(**decision(state=deep))


@pytest.mark.parametrize("field, value", [("temperature", "1.5"), ("temperature", True), ("id", 7), ("question", False)])
def test_values_are_not_coerced(field, value):
    # JSON's types as the published schema states them: "1.5" is not a number, true is not 1.
    with pytest.raises(ValidationError):
        Decision(**decision(**{field: value}))
    assert Decision(**decision(temperature=2)).temperature == 2.0  # an integer is a number


@pytest.mark.parametrize("temperature", [5e-324, 1e-300, 1e-12])
def test_a_tiny_temperature_gives_a_distribution_not_nan(temperature):
    assert softmax([1.0, 2.0, 2.0 - 1e-9], temperature)[0] == 0.0
    probabilities = softmax([3.0, 1.0], temperature)
    assert probabilities == [1.0, 0.0]
    assert softmax([1.0, 1.0], temperature) == [0.5, 0.5]


def test_the_json_schema_says_exactly_one_shape():
    import jsonschema_rs

    validator = jsonschema_rs.Draft202012Validator(DecisionRequest.model_json_schema())
    assert validator.is_valid({"decision": decision()})
    assert validator.is_valid({"decisions": [decision()], "decision": None})
    assert not validator.is_valid({})
    assert not validator.is_valid({"decision": None})
    assert not validator.is_valid({"decision": decision(), "decisions": [decision()]})
    assert not validator.is_valid({"decision": decision(state={})})


def test_the_non_blank_pattern_is_what_strip_keeps():
    # In Python's regex and in the Rust one Schemathesis validates with: `\s` differs between
    # dialects (U+001F is whitespace to str.strip(), not to ECMAScript), the spelled-out set does not.
    import re

    import jsonschema_rs

    schema = jsonschema_rs.Draft202012Validator({"type": "string", "pattern": NON_BLANK_PATTERN})
    for code in range(0x3100):
        char = chr(code)
        if 0xD800 <= code <= 0xDFFF:
            continue
        kept = bool(char.strip())
        assert (re.search(NON_BLANK_PATTERN, char) is not None) == kept, hex(code)
        assert schema.is_valid(char) == kept, hex(code)


def test_a_decision_is_evidence_first_unless_it_asks_for_criterion_first():
    assert Decision(**decision()).layout == DEFAULT_LAYOUT == "evidence-first"
    assert Decision(**decision(layout="criterion-first")).layout == "criterion-first"
    with pytest.raises(ValidationError):
        Decision(**decision(layout="evidence-last"))
    schema = Decision.model_json_schema()["properties"]["layout"]
    assert schema["enum"] == ["evidence-first", "criterion-first"] and schema["default"] == "evidence-first"


def test_a_default_layout_decision_is_written_as_before_the_layout_existed():
    # an older server forbids unknown fields, and the shipped signals are keyed by this text
    written = Decision(**decision()).model_dump(mode="json")
    assert "layout" not in written and Decision.model_validate(written).layout == "evidence-first"
    assert "layout" not in Decision(**decision(layout="evidence-first")).model_dump_json()
    chosen = Decision(**decision(layout="criterion-first"))
    assert chosen.model_dump()["layout"] == "criterion-first"
    assert Decision.model_validate_json(chosen.model_dump_json()) == chosen


def test_request_keys_of_default_layout_decisions_are_unchanged():
    asked = Decision(id="d", state={"text": "my card was declined"}, question="Which intent?",
                     options=[{"id": "known", "description": "K"}, {"id": "unknown", "description": "U"}],
                     return_hidden_state=True)
    # the key this decision had before decisions had a layout
    assert request_key("0" * 64, asked) == "b3adfffed88d7db09aed1fe0684c8f19a8c792c3c2ec8a554558d93ee61a3896"
    assert request_key("0" * 64, asked.model_copy(update={"layout": "evidence-first"})) == request_key("0" * 64, asked)
    assert request_key("0" * 64, asked.model_copy(update={"layout": "criterion-first"})) != request_key("0" * 64, asked)


MODEL_INFO = {"file": "m.gguf", "bytes": 1, "sha256": "a" * 64, "context_size": 2048, "threads": 1, "gpu_layers": 0,
              "llama_cpp_python_version": "test", "hidden_size": 2}


def test_a_result_from_signals_in_hand_names_no_prompt_and_spends_nothing():
    result = DecisionResult.from_signals("d", ["a", "b"], [2.0, 0.0], model=ModelInfo(**MODEL_INFO),
                                         prompt_version="direct-options-v1", allowed_token_mass=0.5, hidden_state=[0.25, -1])
    assert result.probabilities == softmax([2.0, 0.0]) and result.top_option_id == "a"
    assert (result.prompt_sha256, result.input_tokens, result.timing.total_seconds, result.temperature) == (NO_PROMPT_SHA256, 0, 0.0, 1.0)
    assert result.hidden_state == [0.25, -1.0] and result.allowed_token_mass == 0.5
    assert DecisionResult.model_validate_json(result.model_dump_json()) == result  # the wire contract's own shape


@pytest.mark.parametrize("logits, reason", [([1.0], r"option_logits: 1 values for 2 option_ids"),
                                            ([1.0, float("nan")], r"option_logits\[1\] is nan: a logit must be finite")])
def test_a_result_from_signals_refuses_logits_that_do_not_answer_its_options(logits, reason):
    with pytest.raises(ValueError, match=reason):
        DecisionResult.from_signals("d", ["a", "b"], logits, model=ModelInfo(**MODEL_INFO), prompt_version="v")
