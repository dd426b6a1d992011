"""Learned heads: a linear map from the decision model's final hidden state to option logits.

A small model often *represents* the right answer in its final hidden state while its letter
logits cannot read it out. A head fitted on labelled decisions (`make fit`) reads it: logits =
W·h + b, probabilities = softmax(logits / temperature). A head is data in the policy, bound to
what it was fitted on: the GGUF (sha256, hidden width), the prompt version, and the question's
own wording (options, evidence fields), because the hidden state of another model or another
prompt means something else. A head never applies to another model's hidden state: the routing
function then falls back to the letters.

Pure Python on purpose: the Lambda functions apply heads without numpy, and the fitter scores
its folds with this same function, so both compute the same probabilities.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import date
from typing import Annotated, Sequence

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from decision_contract import ModelInfo, softmax

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class HeadThresholds(_Strict):
    """When the head's answer may route on its own (no letter mass check: a head does not read
    the letters)."""

    min_confidence: Unit
    min_margin: Unit


class FitReport(_Strict):
    """How the head was fitted, for the people who decide to trust it."""

    examples: int = Field(ge=1, description="Labelled decisions the head was fitted on.")
    fitted_on: date
    data: list[str] = Field(default_factory=list, description="Labelled sets used (files, split).")
    regularisation: float = Field(gt=0, description="Inverse L2 strength C, chosen by cross-validation.")
    folds: int = Field(ge=2)
    cv_accuracy: Unit
    cv_ece: Unit
    letters_cv_accuracy: Unit | None = None


class Head(_Strict):
    version: Annotated[str, StringConstraints(min_length=1, max_length=80)]
    model_sha256: Sha256 = Field(description="SHA-256 of the GGUF whose hidden states the head was fitted on.")
    hidden_size: int = Field(ge=1, description="Width of those hidden states.")
    prompt_version: Annotated[str, StringConstraints(min_length=1)]
    question_sha256: Sha256 = Field(description="Digest of the question's prompt inputs (see question_digest).")
    options: list[str] = Field(min_length=2, description="Option ids, in the order of the weight rows.")
    weights: list[list[float]] = Field(description="One row of hidden_size weights per option.")
    bias: list[float]
    temperature: float = Field(1.0, gt=0)
    thresholds: HeadThresholds
    fit: FitReport

    @model_validator(mode="after")
    def _shape(self) -> "Head":
        if len(self.weights) != len(self.options):
            raise ValueError(f"weights has {len(self.weights)} rows for {len(self.options)} options")
        for i, row in enumerate(self.weights):
            if len(row) != self.hidden_size:
                raise ValueError(f"weights[{i}] has {len(row)} values; hidden_size is {self.hidden_size}")
        if len(self.bias) != len(self.options):
            raise ValueError(f"bias has {len(self.bias)} values for {len(self.options)} options")
        return self

    def mismatch(self, model: ModelInfo | None, prompt_version: str | None) -> str | None:
        """Why this head must not read the endpoint's hidden state, or None when it may."""
        if model is None:
            return "the endpoint reported no model"
        if model.sha256 != self.model_sha256:
            return f"endpoint model sha256 {model.sha256[:12]}… is not the head's {self.model_sha256[:12]}…"
        if model.hidden_size is not None and model.hidden_size != self.hidden_size:
            return f"endpoint hidden size {model.hidden_size} is not the head's {self.hidden_size}"
        if prompt_version != self.prompt_version:
            return f"endpoint prompt version {prompt_version!r} is not the head's {self.prompt_version!r}"
        return None

    def logits(self, hidden: Sequence[float]) -> list[float]:
        if len(hidden) != self.hidden_size:
            raise ValueError(f"hidden state has {len(hidden)} values; the head reads {self.hidden_size}")
        return [b + math.fsum(w * h for w, h in zip(row, hidden)) for row, b in zip(self.weights, self.bias)]

    def probabilities(self, hidden: Sequence[float]) -> list[float]:
        """The head's calibrated probabilities, in `options` order."""
        return softmax(self.logits(hidden), self.temperature)


def question_digest(question_text: str, options: Sequence[tuple[str, str]], state_keys: Sequence[str]) -> str:
    """What a head's hidden states depend on besides the model: the question, its options (id,
    description, in order) and the evidence fields. Changing any of them means refitting."""
    payload = {"question": question_text, "options": [list(o) for o in options], "state": list(state_keys)}
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False, sort_keys=True).encode()).hexdigest()
