"""Shadow heads: a candidate head that answers every live item beside the head in service and
decides nothing, so a relearned head meets live items before it routes them.

Between the gate and service, the relearning workflow names each passing candidate the shadow of
its question (a second pointer in the head store, `head_versions.shadow_parameter_name`). The
routing functions apply it to every item the model answers (`shadow_answer`: the routing code's
own `judging.model_entry` at the shadow head's thresholds) and keep its answer in the decision
record's `shadow` beside the answer that decided. Each shadowed item is counted once, keyed by the
shadow head's sha256 (`ShadowCounts`: items, agreement); where a reviewer answers the question, so
is which of the two heads the reviewer agreed with (`review_tally`).

The workflow then judges the shadow (`shadow_verdict`): at least `min_items` shadowed items, and
on the reviewed ones a precision (the share of its answers the reviewers gave too) no worse than
the head in service's on the same items. Only then is the candidate promoted.
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from .heads import Head
from .judging import model_entry
from .policies import Question
from .records import DecisionEntry, DecisionRecord, ShadowAnswer

#: Differences smaller than this are ties.
TOLERANCE = 1e-9


class ShadowCounts(BaseModel):
    """A shadow head's tally on live items (one row of the head history table per shadow head)."""

    model_config = ConfigDict(extra="forbid")

    items: int = Field(0, ge=0, description="Items the shadow answered beside the head in service.")
    agreed: int = Field(0, ge=0, description="Of those, answered with the same option.")
    reviewed: int = Field(0, ge=0, description="Shadowed items a reviewer answered the question of.")
    shadow_right: int = Field(0, ge=0, description="Of those, the reviewer gave the shadow's answer.")
    service_right: int = Field(0, ge=0, description="Of those, the reviewer gave the answer of the head in service.")

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.items if self.items else None

    def precision(self, which: str) -> float | None:
        """The share of the reviewed items on which the reviewer gave `which` head's answer
        ("shadow" or "service"); None before any review."""
        right = self.shadow_right if which == "shadow" else self.service_right
        return right / self.reviewed if self.reviewed else None

    def figures(self) -> dict[str, Any]:
        """The counts with the shares, as the workflow's output and the dashboard show them."""
        return {**self.model_dump(), "agreement": _round(self.agreement),
                "shadow_precision": _round(self.precision("shadow")),
                "service_precision": _round(self.precision("service"))}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def shadow_answer(question: Question, head: Head, sha256: str, result: Any, state: Any,
                  deciding: DecisionEntry) -> ShadowAnswer | None:
    """The shadow head's answer to the endpoint's `result`, judged by the routing code at the
    shadow head's own thresholds; None where it cannot read this result (another model, no hidden
    state): a shadow that cannot answer is not counted."""
    entry = model_entry(question.with_head(head), result, state)
    if entry.readout != "head" or entry.option_id is None:
        return None
    return ShadowAnswer(head_version=head.version, sha256=sha256, option_id=entry.option_id,
                        confidence=entry.confidence, passed=entry.passed,
                        agrees=entry.option_id == deciding.option_id)


def review_tally(record: DecisionRecord, answers: Mapping[str, str]) -> dict[str, tuple[ShadowAnswer, bool, bool]]:
    """Per shadowed question a reviewer answered: (the shadow's answer, whether the reviewer gave
    the shadow's answer, whether the reviewer gave the head in service's)."""
    served = {d.question: d.option_id for d in record.decisions}
    return {question: (shadow, answers[question] == shadow.option_id, answers[question] == served.get(question))
            for question, shadow in record.shadow.items() if question in answers}


def shadow_verdict(counts: ShadowCounts, min_items: int, *, timed_out: bool = False) -> tuple[bool, str]:
    """Whether the shadow may be promoted, and why (not): at least `min_items` shadowed items,
    and no worse precision than the head in service on the reviewed ones."""
    if min_items < 0:
        raise ValueError(f"min_items {min_items!r}: must be 0 or more")
    if counts.items < min_items:
        waited = "the shadow period ended with " if timed_out else ""
        return False, f"too few shadowed items: {waited}{counts.items}, at least {min_items}"
    agreement = f"agreed with the head in service on {counts.agreed} of {counts.items} items"
    shadow, service = counts.precision("shadow"), counts.precision("service")
    if shadow is None or service is None:
        return True, f"shadowed {counts.items} items ({agreement}); none reviewed"
    on = f"on the {counts.reviewed} reviewed items"
    if shadow < service - TOLERANCE:
        return False, (f"the shadow's precision {on} is worse than the head in service's: {shadow:.3f} < "
                       f"{service:.3f} ({agreement})")
    return True, (f"the shadow's precision {on} is no worse than the head in service's: {shadow:.3f} >= "
                  f"{service:.3f} ({agreement})")
