"""Where each input line ended up (`Outcome`, filled in by the pipeline as it sends and reads
back), and the report for scripts: one JSON line per input line (`report_line`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from local.items import InputItem

if TYPE_CHECKING:
    from decision_router.domain.records import DecisionRecord


@dataclass
class Outcome:
    """Where one input item ended up, read back from the queues and tables."""

    item: InputItem
    record: DecisionRecord | None = None  # the decision record the workflow received
    execution_arn: str | None = None
    status: str | None = None  # execution status
    queues: list[str] = field(default_factory=list)  # template logical ids of the queues holding it
    escalated: bool = False
    audit: str | None = None  # audit outcome (auto_routed, reviewed, ...) once written
    problem: str | None = None  # why it was rejected or dead-lettered
    reviewed_target: str | None = None  # where a reviewer's answer sent it (demo's review loop)
    source_outcome: str | None = None  # a raw event that routed nothing: resolved, updated, duplicate, ignored
    note: str | None = None  # why (source_outcome)
    duplicate_of: str | None = None  # the input line whose execution this one joined (same item key)
    message_id: str | None = None  # the SQS message id it was sent as (a ticket)
    delivered_by: list[str] = field(default_factory=list)  # the executions whose messages reached team queues
    audit_missing: str | None = None  # routed, but the workflow could not write its audit row (why)
    similar: list[str] = field(default_factory=list)  # the nearest resolved items' ids, nearest first
    dependency: dict[str, Any] | None = None  # held under a parent, or a resolution's releases (local.dependency_report)

    @property
    def route(self) -> str:
        if self.item.rejected:
            return "rejected"
        if self.source_outcome:
            return self.source_outcome
        if self.record is None:
            return "failed"
        return self.record.route

    @property
    def reason(self) -> str:
        if self.problem:
            return self.problem
        if self.note:
            return self.note
        if self.record is not None and self.record.route == "review":
            return self.record.route_reason
        return ""


def report_line(outcome: Outcome) -> dict[str, Any]:
    """What became of one input line, for scripts (`--report`): `outcome` is one of routed,
    review, duplicate, dead_lettered, rejected, and for a raw source event that routed nothing
    resolved, updated, ignored, or held by the policy's noise controls: grouped (joined an open
    incident), flapping, suppressed (a maintenance window), held (under an open parent incident: the
    policy's dependencies) (`reason` says why); `via` says how it
    came in; each decision says which readout gave the answer (rule, letters, head), whether it
    stood without a person (`auto`), the head that decided (`head_version`) and the reason (`why`:
    the decision's trace, decision_router.domain.why). Per item, `similar` (the nearest resolved
    items' ids, nearest first, as the console shows them when the report is written) and `linked`
    (the id of the open incident a ticket is linked to, decision_router.domain.linking, or null)."""
    record = outcome.record
    if outcome.source_outcome:
        kind = outcome.source_outcome
    elif outcome.item.rejected or (record is None and not any("DeadLetter" in q for q in outcome.queues)):
        kind = "rejected"
    elif outcome.duplicate_of:
        kind = "duplicate"
    elif record is None or outcome.problem:
        kind = "dead_lettered"
    else:
        kind = "routed" if record.route == "auto" else "review"
    if kind == "review" and outcome.audit and "resolved_at_source" in outcome.audit:
        kind, outcome.note = "resolved", "resolved at its source while it waited for review (the review was closed)"
    reason = outcome.problem or outcome.note or (
        f"same item as {outcome.duplicate_of}: routed once" if kind == "duplicate" else None)
    if kind in ("routed", "review") and record is not None:
        reason = record.route_reason
    elif kind == "resolved" and record is not None:
        reason = outcome.note
    target = None
    if record is not None and kind != "dead_lettered":
        target = record.destination.target if record.destination else outcome.reviewed_target
    decisions = {} if record is None else {
        d.question: {"answer": d.option_id, "confidence": d.confidence, "readout": d.readout or d.source,
                     "auto": record.route == "auto" and d.passed, "head_version": d.head_version,
                     "why": d.why.model_dump(mode="json") if d.why is not None else None}
        for d in record.decisions}
    return {"line": outcome.item.line, "source": outcome.item.source, "item_id": outcome.item.item_id,
            "kind": outcome.item.kind, "via": outcome.item.via, "outcome": kind, "reason": reason, "target": target,
            "escalated": outcome.escalated, "decisions": decisions, "similar": outcome.similar,
            "linked": record.linked.incident_id if record is not None and record.linked is not None else None}


def write_report(path: Path, outcomes: list[Outcome]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for outcome in outcomes:
            handle.write(json.dumps(report_line(outcome), ensure_ascii=False) + "\n")
