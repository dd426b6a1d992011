"""Readout pieces that need no model: control-token scanning, the common prefix, and the
prompt's layouts (rendered with a ChatML template and one token per character)."""

from __future__ import annotations

import json

import pytest

from decision_contract import Decision
from decision_server.readout import (
    CRITERION_FIRST_VERSION,
    PROMPT_VERSION,
    ControlTokens,
    Readout,
    longest_common_prefix,
    user_payload,
)

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
OPTIONS = [{"id": "known", "description": "Known"}, {"id": "unknown", "description": "Unknown"}]


@pytest.fixture(scope="module")
def readout() -> Readout:
    return Readout(CHATML, bos_token="", eos_token="<|im_end|>", tokenize=lambda text: [ord(c) for c in text],
                   token_text=chr)


def asked(state, layout: str = "criterion-first", question: str = "Which intent?") -> Decision:
    return Decision(id="d", state=state, question=question, options=OPTIONS, layout=layout)


def test_control_tokens_found_in_values_and_keys_with_their_path():
    tokens = ControlTokens(["<|im_start|>", "<|im_end|>", ""])
    assert tokens.find({"a": ["ok", {"b": "x<|im_end|>y"}]}) == ("body.a[1].b", "<|im_end|>")
    assert tokens.find({"<|im_start|>": 1}, "decision.state") == ("decision.state (key '<|im_start|>')", "<|im_start|>")
    assert tokens.find({"a": ["<|im", "_start|>"], "n": 3, "f": 1.5, "z": None}) is None
    assert ControlTokens([]).find("<|im_start|>") is None


def test_control_token_scan_does_not_recurse():
    deep: object = "<|im_end|>"
    for _ in range(5000):  # deeper than Python's recursion limit
        deep = [deep]
    assert ControlTokens(["<|im_end|>"]).find(deep) is not None


def test_longest_common_prefix():
    assert longest_common_prefix([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert longest_common_prefix([[1, 2], [1, 2]]) == 2
    assert longest_common_prefix([[5], [6]]) == 0
    assert longest_common_prefix([]) == 0


def test_the_default_layout_is_direct_options_v1_evidence_first():
    payload = json.loads(user_payload(asked({"text": "hi"}, layout="evidence-first")))
    assert list(payload) == ["evidence", "criterion", "options"]
    assert user_payload(asked({"text": "hi"}, layout="evidence-first")) == (
        '{"evidence": {"text": "hi"}, "criterion": "Which intent?", "options": [{"letter": "A", "description": '
        '"Known"}, {"letter": "B", "description": "Unknown"}]}')


def test_a_criterion_first_prompt_puts_the_evidence_last(readout):
    evidence_first, criterion_first = (readout.prompt(asked({"text": "hi"}, layout)) for layout in ("evidence-first", "criterion-first"))
    # the same members, in another order
    assert json.loads(user_payload(asked({"text": "hi"}))) == json.loads(user_payload(asked({"text": "hi"}, "evidence-first")))
    assert criterion_first.text.endswith(
        '<|im_start|>user\n{"criterion": "Which intent?", "options": [{"letter": "A", "description": "Known"}, '
        '{"letter": "B", "description": "Unknown"}], "evidence": {"text": "hi"}}<|im_end|>\n<|im_start|>assistant\n')
    assert (evidence_first.version, criterion_first.version) == (PROMPT_VERSION, CRITERION_FIRST_VERSION)
    assert PROMPT_VERSION == "direct-options-v1" and CRITERION_FIRST_VERSION == "criterion-first-v1"
    assert evidence_first.fixed_prefix == 0


@pytest.mark.parametrize("state", ["hi", "a", {"text": "hi"}, ["x", 1], {"a": {"b": 2}}])
def test_the_fixed_prefix_is_everything_before_the_evidence(readout, state):
    prompt = readout.prompt(asked(state))
    before = prompt.text[: prompt.fixed_prefix]
    assert before.endswith('"evidence": ')  # one token a character: the prefix stops where the state starts
    other = readout.prompt(asked("something else entirely"))
    assert other.tokens[: other.fixed_prefix] == prompt.tokens[: prompt.fixed_prefix]
    # another criterion has another prefix
    assert readout.prompt(asked(state, question="Which queue?")).text[: prompt.fixed_prefix] != before
