"""Readout pieces that need no model: control-token scanning and the common prefix."""

from __future__ import annotations

from decision_server.readout import ControlTokens, longest_common_prefix


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
