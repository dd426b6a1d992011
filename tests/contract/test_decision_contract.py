"""The shared wire schema's own rules."""

from __future__ import annotations

import pytest
from decision_contract import Decision, DecisionRequest
from pydantic import ValidationError

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


def test_batch_ids_must_be_unique():
    with pytest.raises(ValidationError, match=r"decisions\[1\]\.id 'd' appears more than once"):
        DecisionRequest(decisions=[decision(), decision()])


def test_batch_shares_one_state():
    with pytest.raises(ValidationError, match="differs"):
        DecisionRequest(decisions=[decision(id="x"), decision(id="y", state={"k": 1})])
    assert len(DecisionRequest(decisions=[decision(id="x"), decision(id="y")]).items) == 2


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
