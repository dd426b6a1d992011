"""The review SLA's sweep, on the console function's schedule (every 5 minutes): the reviews
waiting, at risk and past due their first-review target, per policy, as metrics (EMF on stdout:
ReviewsWaiting, ReviewsAtRisk, ReviewsBreached, dimension `policy`), which the stack's breach
alarm and dashboard read, and the oldest waiting review's age across every lane
(OldestReviewAgeSeconds, no dimension; 0 when none waits), which the stack's ReviewAgeAlarm
reads. The same listing and the same clock as the console's list: the pending-review index's
rows, the first of each lane by due time (the ones at risk first).

Then each review that reached its policy's `review_sla.escalate` risk (and that the workflow did
not page already, before its review) is escalated once: an
`Item Escalated` event of the sweep's own source (`SWEEP_SOURCE`) on the decision bus, which
the stack's ItemEscalatedRule pages the on-call with, as it does the workflow's. Once: the
execution's mark is claimed before the event is put and marked sent after (adapters/escalations.py
says why in that order); a put that fails is logged and retried by the next sweep."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from decision_router.domain.review_sla import SWEEP_SOURCE, escalation_reason
from decision_router.review import console

from .reviews import listed
from .wiring import Wiring, now

logger = Logger(child=True)

#: The workflow's detail-type for a page (statemachine/routing.asl.json, PutItemEscalated).
ESCALATED = "Item Escalated"
#: The oldest waiting review's age (template.yaml ReviewAgeAlarm reads it).
OLDEST_AGE_METRIC = "OldestReviewAgeSeconds"


def is_sweep(event: dict[str, Any]) -> bool:
    """EventBridge's scheduled event (the template's ReviewSlaSweep), not an API request."""
    return event.get("source") == "aws.events" and event.get("detail-type") == "Scheduled Event"


def sweep(given: Wiring) -> dict[str, Any]:
    """The counts per policy (`review_sla`), the executions escalated now (`escalated`) and those
    whose page could not be put (`not_escalated`: the next sweep tries again)."""
    summaries, _ = listed(given, given.all_lanes(), now())
    counts = console.sla_counts(summaries, given.policy_names())
    for policy_name, row in counts.items():
        for what, name in console.SLA_METRICS.items():
            with single_metric(name=name, unit=MetricUnit.Count, value=row[what]) as metric:
                metric.service = ""  # the alarm and the dashboard name the policy alone
                metric.add_dimension(name="policy", value=policy_name)
    oldest = oldest_age_seconds(summaries)
    with single_metric(name=OLDEST_AGE_METRIC, unit=MetricUnit.Seconds, value=oldest) as metric:
        metric.service = ""  # one figure for the stack: the alarm reads it without a dimension
    logger.info("review SLA", extra={"counts": counts, "oldest_review_age_seconds": oldest})
    escalated, failed = [], []
    for summary in summaries:
        sla = given.policy(summary.policy).review_sla
        if sla is None or summary.sla is None or not sla.escalates(summary.sla):
            continue
        try:
            if escalate(given, summary):
                escalated.append(summary.execution_name)
        except Exception as error:  # noqa: BLE001 - one item's page must not stop the others'
            failed.append(summary.execution_name)
            logger.error("review SLA escalation not put; the next sweep tries again", extra={
                "execution_name": summary.execution_name, "reason": f"{type(error).__name__}: {error}"})
    return {"review_sla": counts, "oldest_review_age_seconds": oldest, "escalated": escalated,
            "not_escalated": failed}


def oldest_age_seconds(summaries: list[console.PendingSummary]) -> float:
    """The longest any listed review has waited (0 when none waits, so the alarm resolves). Each
    lane lists by due time, which within a lane is the order of requested_at (one target per
    lane), so each lane's first row, always listed, is its oldest: no read beyond the listing."""
    return max((s.age_seconds for s in summaries if s.age_seconds is not None), default=0.0)


def escalate(given: Wiring, summary: console.PendingSummary) -> bool:
    """Page the on-call for this review unless the workflow paged before it (its record says
    escalate) or a sweep did already (False). The record is read from the review's row only now."""
    assert summary.sla is not None
    row = given.pending_reviews.get(summary.execution_name)
    if row is None or row.record.escalate:  # answered meanwhile, or paged as its review was requested
        return False
    if not given.escalations.claim_page(summary.execution_name):
        return False
    record, reason = row.record, escalation_reason(summary.sla)
    # The workflow's PutItemEscalatedBeforeReview fields (no item text: the page names the item),
    # target null as there (the destination awaits the reviewer), and why.
    given.bus.put(SWEEP_SOURCE, ESCALATED, {
        "item_kind": record.item_kind, "item_id": record.item_id, "target": None, "route": record.route,
        "policy": record.policy.model_dump(mode="json"), "execution_name": summary.execution_name,
        "reason": reason, "sla": summary.sla.model_dump(mode="json")})
    given.escalations.sent(summary.execution_name)
    logger.info("review SLA escalated", extra={"execution_name": summary.execution_name, "reason": reason})
    return True
