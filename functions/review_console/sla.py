"""The review SLA's sweep, on the console function's schedule (every 5 minutes): the reviews
waiting, at risk and past due their first-review target, per policy, as metrics (EMF on stdout:
ReviewsWaiting, ReviewsAtRisk, ReviewsBreached, dimension `policy`), which the stack's breach
alarm and dashboard read. The same listing and the same clock as the console's list: only the
review messages their execution vouches for count.

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

from decision_router.domain.policies import POLICY_DIR, Policy, PolicyError
from decision_router.domain.review_sla import SWEEP_SOURCE, escalation_reason
from decision_router.review import console
from decision_router.review.completion import PendingReview

from .reviews import verified
from .wiring import Wiring, now

logger = Logger(child=True)

#: The workflow's detail-type for a page (statemachine/routing.asl.json, PutItemEscalated).
ESCALATED = "Item Escalated"


def is_sweep(event: dict[str, Any]) -> bool:
    """EventBridge's scheduled event (the template's ReviewSlaSweep), not an API request."""
    return event.get("source") == "aws.events" and event.get("detail-type") == "Scheduled Event"


def sweep(given: Wiring) -> dict[str, Any]:
    """The counts per policy (`review_sla`), the executions escalated now (`escalated`) and those
    whose page could not be put (`not_escalated`: the next sweep tries again)."""
    pending = given.queue.pending(limit=500)
    given.queue.release(pending.reviews)  # counted, not taken
    moment = now()
    summaries: list[tuple[PendingReview, Policy, console.PendingSummary]] = []
    for queued in verified(given, pending.reviews):
        try:
            policy = given.policy(queued.review.record.policy.name)
            summaries.append((queued.review, policy, console.pending_summary(queued.review, policy, moment)))
        except PolicyError as error:
            logger.warning("pending review under an unknown policy", extra={"error": str(error)})
    counts = console.sla_counts([s for _, _, s in summaries], sorted(p.stem for p in POLICY_DIR.glob("*.json")))
    for policy_name, row in counts.items():
        for what, name in console.SLA_METRICS.items():
            with single_metric(name=name, unit=MetricUnit.Count, value=row[what]) as metric:
                metric.service = ""  # the alarm and the dashboard name the policy alone
                metric.add_dimension(name="policy", value=policy_name)
    logger.info("review SLA", extra={"counts": counts})
    escalated, failed = [], []
    for review, policy, summary in summaries:
        sla = policy.review_sla
        if sla is None or summary.sla is None or not sla.escalates(summary.sla):
            continue
        if review.record.escalate:  # paged already, as its review was requested (PutItemEscalatedBeforeReview)
            continue
        try:
            if escalate(given, review, summary):
                escalated.append(summary.execution_name)
        except Exception as error:  # noqa: BLE001 - one item's page must not stop the others'
            failed.append(summary.execution_name)
            logger.error("review SLA escalation not put; the next sweep tries again", extra={
                "execution_name": summary.execution_name, "reason": f"{type(error).__name__}: {error}"})
    return {"review_sla": counts, "escalated": escalated, "not_escalated": failed}


def escalate(given: Wiring, review: PendingReview, summary: console.PendingSummary) -> bool:
    """Page the on-call for this review unless a sweep did already (False)."""
    assert summary.sla is not None
    if not given.escalations.claim(summary.execution_name):
        return False
    record, reason = review.record, escalation_reason(summary.sla)
    # The workflow's PutItemEscalatedBeforeReview fields (no item text: the page names the item),
    # target null as there (the destination awaits the reviewer), and why.
    given.bus.put(SWEEP_SOURCE, ESCALATED, {
        "item_kind": record.item_kind, "item_id": record.item_id, "target": None, "route": record.route,
        "policy": record.policy.model_dump(mode="json"), "execution_name": summary.execution_name,
        "reason": reason, "sla": summary.sla.model_dump(mode="json")})
    given.escalations.sent(summary.execution_name)
    logger.info("review SLA escalated", extra={"execution_name": summary.execution_name, "reason": reason})
    return True
