"""The endpoint's signals for a question, kept on the decision record as they were at decision
time, so that relearning fits on them without asking the endpoint again for a reviewed item.

What is kept is what the fitter reads of a decision (decision_contract/signals.py): the hidden
state (float16, base64: `hidden_text`), the option letters' logits, the token mass on them and
the prompt version, under the decision's request key (the model's sha256 and the decision's
content), so that a fitter rebuilding the same decision from the labelled example finds them, and
one rebuilding another (a changed policy, another model) does not.

Every question the endpoint is asked asks for the hidden state (model_requests.py), whatever its
head reads, so every question it answered has its signals here. They stay only on a record that
goes to review (what becomes a labelled example), as many questions' as keep the record within
the size a routing execution may start with (records.with_signals_that_fit). A result without a
finite hidden state (an endpoint that returned none) keeps nothing: relearning asks for it.
"""

from __future__ import annotations

import math
from typing import Mapping

from pydantic import BaseModel, ConfigDict, Field

from decision_contract import Decision, DecisionResult
from decision_contract.signals import hidden_text, request_key


class KeptSignals(BaseModel):
    """One question's signals as the endpoint answered them."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    request_key: str = Field(pattern=r"^[0-9a-f]{64}$", description="decision_contract.signals.request_key of the decision asked.")
    model_sha256: str = Field(min_length=1, description="The model that answered.")
    hidden: str = Field(min_length=1, description="The final-position hidden state: float16 little-endian, base64.")
    letter_logits: list[float] = Field(description="The option letters' raw logits, option order.")
    allowed_token_mass: float
    prompt_version: str


def keep_signals(asked: Mapping[str, Decision], results: Mapping[str, DecisionResult]) -> dict[str, KeptSignals]:
    """Question → its signals, for each question asked whose result carries a finite hidden state."""
    kept = {}
    for question, decision in asked.items():
        result = results.get(question)
        hidden = result.hidden_state if result is not None else None
        if result is None or not hidden or not all(math.isfinite(v) for v in hidden):
            continue
        try:
            text = hidden_text(hidden)
        except ValueError:  # past float16's range: the fitter asks the endpoint for it instead
            continue
        kept[question] = KeptSignals(request_key=request_key(result.model.sha256, decision),
                                     model_sha256=result.model.sha256, hidden=text,
                                     letter_logits=list(result.option_logits),
                                     allowed_token_mass=result.allowed_token_mass, prompt_version=result.prompt_version)
    return kept
