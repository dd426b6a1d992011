"""The review SLA: how soon a pending item must have its first review, and how close it is to breaching.

A policy's ``review_sla`` gives a time-to-first-review target per priority (and per ticket queue
where wanted), with a default. An item's priority is what the policy names: the suggested answer of
a question (an incident's ``priority``) or an item field (a ticket's ``customer.tier``, an
incident's ``severity``). The clock starts when the review is requested (the workflow's review
state is entered), so an item held by the noise controls or under its parent incident has no
review yet and its clock has not started.

The review console lists items by breach risk (past due, then due within ``at_risk_share`` of
their target), then by target (the shorter promise first), then by age (`sla_order`).

A policy may also escalate an item before it breaches (`escalate`): once its review has reached the
named risk (at risk, or breached), the console's sweep pages the on-call with an `Item Escalated`
event of its own source (`SWEEP_SOURCE`), once per execution (`escalates`, `escalation_reason`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..validation import StrictModel

#: Breach risk, most urgent first; the console's first sort key.
Risk = Literal["breached", "at_risk", "on_track"]
RISK_ORDER: dict[str, int] = {"breached": 0, "at_risk": 1, "on_track": 2}
#: A target in minutes: at least one, at most 30 days.
MAX_TARGET_MINUTES = 30 * 24 * 60
#: The `source` of the Item Escalated events the console's sweep puts on the decision bus (the
#: template's `Events` mapping, `ReviewSla`; the bus takes it from the console function alone).
SWEEP_SOURCE = "decision-router.review-sla"


class PrioritySource(StrictModel):
    """Where an item's priority is read: exactly one of a question's suggested answer or an item field."""

    question: str | None = Field(None, description="A question of the policy whose suggested option id is the priority.")
    field: str | None = Field(None, description="A dotted item field whose value is the priority (customer.tier).")

    @model_validator(mode="after")
    def _one(self) -> "PrioritySource":
        if (self.question is None) == (self.field is None):
            raise ValueError("give exactly one of question (its suggested answer) or field (an item field)")
        return self


class Escalation(StrictModel):
    """When a pending review is escalated (paged) before its first review: once it reaches `when`."""

    when: Literal["at_risk", "breached"] = Field(description=(
        "at_risk: once less than at_risk_share of the target is left; breached: once past due."))
    priorities: list[str] | None = Field(None, min_length=1, description=(
        "Only items of these priorities escalate (P1); absent: every item of the policy."))


class ReviewSla(StrictModel):
    """Time-to-first-review targets, in minutes: per priority, per queue, else the default."""

    default_minutes: int = Field(ge=1, le=MAX_TARGET_MINUTES, description="The target of an item no entry below names.")
    priority: PrioritySource | None = Field(None, description="Where the item's priority is read; needed by by_priority.")
    by_priority: dict[str, int] = Field(default_factory=dict, description=(
        "priority → target minutes (P1: 15); the priorities are the question's option ids or the field's values."))
    by_queue: dict[str, int] = Field(default_factory=dict, description=(
        "option id of the routing question (the suggested queue) → target minutes; the shorter of this and "
        "the priority's target applies."))
    at_risk_share: float = Field(0.25, gt=0.0, lt=1.0, allow_inf_nan=False, description=(
        "An item is at risk once less than this share of its target is left (0.25: the last quarter)."))
    escalate: Escalation | None = Field(None, description=(
        "Page the on-call (an Item Escalated event) once per review that reaches this risk; absent: never."))

    @model_validator(mode="after")
    def _targets(self) -> "ReviewSla":
        problems = [f"{where}[{key!r}]: {minutes} minutes; a target is 1 to {MAX_TARGET_MINUTES} minutes"
                    for where, table in (("by_priority", self.by_priority), ("by_queue", self.by_queue))
                    for key, minutes in table.items() if not 1 <= minutes <= MAX_TARGET_MINUTES]
        if self.by_priority and self.priority is None:
            problems.append("by_priority needs priority (a question or an item field to read the priority from)")
        if self.escalate is not None and self.escalate.priorities is not None and self.priority is None:
            problems.append("escalate.priorities needs priority (a question or an item field to read the priority from)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def priority_of(self, item: Mapping[str, Any], suggested: Mapping[str, str | None]) -> str | None:
        """The item's priority as the policy reads it; None when it names none (or no answer was suggested)."""
        if self.priority is None:
            return None
        if self.priority.question is not None:
            return suggested.get(self.priority.question)
        value: Any = item
        for part in (self.priority.field or "").split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return None if value is None else str(value)

    def target_minutes(self, priority: str | None, queue: str | None) -> int:
        """The item's target: the shorter of its priority's and its queue's, else the default."""
        named = [table[key] for table, key in ((self.by_priority, priority), (self.by_queue, queue))
                 if key is not None and key in table]
        return min(named) if named else self.default_minutes

    def escalates(self, status: SlaStatus) -> bool:
        """Whether an item in this state is to be escalated (its policy's `escalate`)."""
        rule = self.escalate
        if rule is None or RISK_ORDER[status.risk] > RISK_ORDER[rule.when]:
            return False
        return rule.priorities is None or status.priority in rule.priorities


def _minutes(seconds: float) -> str:
    whole = int(abs(seconds) // 60)
    return f"{whole // 60}h {whole % 60}m" if whole >= 60 else f"{whole}m"


def escalation_reason(status: SlaStatus) -> str:
    """The page's reason: "review SLA at risk: 12m left of 60m (P2)"."""
    left = status.time_left_seconds
    where = f"{_minutes(left)} left" if left > 0 else f"{_minutes(left)} past due"
    risk = status.risk.replace("_", " ")
    priority = f" ({status.priority})" if status.priority is not None else ""
    return f"review SLA {risk}: {where} of {status.target_minutes}m{priority}"


class SlaStatus(BaseModel):
    """One pending item's clock: its target, when it is due, how long is left and its breach risk."""

    model_config = ConfigDict(frozen=True)

    priority: str | None
    target_minutes: int
    time_left_seconds: float = Field(description="Negative once past due.")
    risk: Risk


def sla_status(sla: ReviewSla, priority: str | None, queue: str | None, age_seconds: float) -> SlaStatus:
    """Where an item waiting `age_seconds` since its review was requested stands against its target."""
    target = sla.target_minutes(priority, queue)
    left = target * 60.0 - age_seconds
    risk: Risk = "breached" if left <= 0 else "at_risk" if left <= sla.at_risk_share * target * 60.0 else "on_track"
    return SlaStatus(priority=priority, target_minutes=target, time_left_seconds=left, risk=risk)


def sla_order(status: SlaStatus | None, age_seconds: float | None) -> tuple[int, float, float]:
    """The console's sort key: breach risk, then the shorter target (the higher priority), then the
    older item. An item without a target (its policy has no review_sla) sorts with those on track,
    after every target."""
    if status is None:
        return RISK_ORDER["on_track"], float("inf"), -(age_seconds or 0.0)
    return RISK_ORDER[status.risk], float(status.target_minutes), -(age_seconds or 0.0)
