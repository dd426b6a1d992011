"""Shadow heads: a candidate head that answers every live item beside the head in service and
decides nothing, so a relearned head meets live items before it routes them.

Between the gate and service, the relearning workflow names each passing candidate the shadow of
its question (a second pointer in the head store, `head_versions.shadow_parameter_name`). The
routing functions apply it to every item the model answers (`shadow_answer`: the routing code's
own `judging.model_entry` at the shadow head's thresholds) and keep its answer in the decision
record's `shadow` beside the answer that decided. Each shadowed item is counted once, keyed by the
shadow head's sha256 (`ShadowCounts`: items, agreement); where a reviewer answers the question, so
is which of the two heads the reviewer agreed with (`review_tally`).

The workflow then judges the shadow (`shadow_verdict`): at least `min_items` shadowed items, at
least `min_reviewed` of them reviewed, on the reviewed ones a precision (the share of its answers
the reviewers gave too) no worse than the head in service's on the same items, and on the
unreviewed ones (which nobody checked) a disagreement with the head in service of at most
`max_disagreement`. Only then is the candidate promoted: a shadow nobody reviewed, or one that
answers the unchecked items differently, is refused however its reviewed items went.
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from .heads import Head
from .judging import model_entry, words_entry
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
    reviewed_agreed: int = Field(0, ge=0, description="Reviewed items on which the shadow agreed with the head "
                                                      "in service (tallies from before it was counted: 0).")

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.items if self.items else None

    @property
    def unreviewed_disagreement(self) -> float | None:
        """The share of the shadowed items nobody reviewed on which the shadow answered otherwise
        than the head in service; None when every shadowed item was reviewed."""
        unreviewed = self.items - self.reviewed
        if unreviewed <= 0:
            return None
        agreed = max(0, self.agreed - self.reviewed_agreed)
        return max(0, unreviewed - agreed) / unreviewed

    def precision(self, which: str) -> float | None:
        """The share of the reviewed items on which the reviewer gave `which` head's answer
        ("shadow" or "service"); None before any review."""
        right = self.shadow_right if which == "shadow" else self.service_right
        return right / self.reviewed if self.reviewed else None

    def figures(self) -> dict[str, Any]:
        """The counts with the shares, as the workflow's output and the dashboard show them."""
        return {**self.model_dump(), "agreement": _round(self.agreement),
                "shadow_precision": _round(self.precision("shadow")),
                "service_precision": _round(self.precision("service")),
                "unreviewed_disagreement": _round(self.unreviewed_disagreement)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def shadow_answer(question: Question, head: Head, sha256: str, result: Any, state: Any,
                  deciding: DecisionEntry) -> ShadowAnswer | None:
    """The shadow head's answer to the endpoint's `result` (None: the endpoint was not asked, the
    words alone), judged by the routing code at the shadow head's own thresholds; None where it
    cannot read this result (another model, no hidden state, or no answer to read at all): a
    shadow that cannot answer is not counted."""
    if result is None:
        if head.reads_model:
            return None
        entry = words_entry(question.with_head(head), state)
    else:
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


#: Reviewed shadowed items a shadow needs before its precision is trusted (RelearningShadowMinReviewed).
MIN_REVIEWED = 20
#: The most a shadow may disagree with the head in service on the items nobody reviewed
#: (RelearningShadowMaxDisagreement).
MAX_DISAGREEMENT = 0.25


def shadow_verdict(counts: ShadowCounts, min_items: int, *, min_reviewed: int = MIN_REVIEWED,
                   max_disagreement: float = MAX_DISAGREEMENT, timed_out: bool = False) -> tuple[bool, str]:
    """Whether the shadow may be promoted, and why (not): at least `min_items` shadowed items and
    `min_reviewed` reviewed ones, no worse precision than the head in service on the reviewed
    ones, and at most `max_disagreement` with it on the unreviewed ones."""
    if min_items < 0 or min_reviewed < 0:
        raise ValueError(f"min_items {min_items!r}, min_reviewed {min_reviewed!r}: must be 0 or more")
    if not 0 <= max_disagreement <= 1:
        raise ValueError(f"max_disagreement {max_disagreement!r}: must be from 0 to 1")
    waited = "the shadow period ended with " if timed_out else ""
    if counts.items < min_items:
        return False, f"too few shadowed items: {waited}{counts.items}, at least {min_items}"
    agreement = f"agreed with the head in service on {counts.agreed} of {counts.items} items"
    if counts.reviewed < min_reviewed:
        return False, (f"too few reviewed shadowed items: {waited}{counts.reviewed}, at least {min_reviewed}: "
                       f"its answers are unchecked ({agreement})")
    disagreement = counts.unreviewed_disagreement
    if disagreement is not None and disagreement > max_disagreement + TOLERANCE:
        return False, (f"the shadow disagrees with the head in service on {disagreement:.1%} of the "
                       f"{counts.items - counts.reviewed} unreviewed items, more than {max_disagreement:.1%}")
    shadow, service = counts.precision("shadow"), counts.precision("service")
    if shadow is None or service is None:
        return True, f"shadowed {counts.items} items ({agreement}); none reviewed"
    on = f"on the {counts.reviewed} reviewed items"
    if shadow < service - TOLERANCE:
        return False, (f"the shadow's precision {on} is worse than the head in service's: {shadow:.3f} < "
                       f"{service:.3f} ({agreement})")
    return True, (f"the shadow's precision {on} is no worse than the head in service's: {shadow:.3f} >= "
                  f"{service:.3f} ({agreement})")
