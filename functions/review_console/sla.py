"""The review SLA's sweep, on the console function's schedule (every 5 minutes): the reviews
waiting, at risk and past due their first-review target, per policy, as metrics (EMF on stdout:
ReviewsWaiting, ReviewsAtRisk, ReviewsBreached, dimension `policy`), which the stack's breach
alarm and dashboard read. The same listing and the same clock as the console's list: only the
review messages their execution vouches for count."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from decision_router.domain.policies import POLICY_DIR, PolicyError
from decision_router.review import console

from .reviews import verified
from .wiring import Wiring, now

logger = Logger(child=True)


def is_sweep(event: dict[str, Any]) -> bool:
    """EventBridge's scheduled event (the template's ReviewSlaSweep), not an API request."""
    return event.get("source") == "aws.events" and event.get("detail-type") == "Scheduled Event"


def sweep(given: Wiring) -> dict[str, dict[str, int]]:
    pending = given.queue.pending(limit=500)
    given.queue.release(pending.reviews)  # counted, not taken
    moment = now()
    summaries = []
    for queued in verified(given, pending.reviews):
        try:
            summaries.append(console.pending_summary(queued.review, given.policy(queued.review.record.policy.name), moment))
        except PolicyError as error:
            logger.warning("pending review under an unknown policy", extra={"error": str(error)})
    counts = console.sla_counts(summaries, sorted(p.stem for p in POLICY_DIR.glob("*.json")))
    for policy, row in counts.items():
        for what, name in console.SLA_METRICS.items():
            with single_metric(name=name, unit=MetricUnit.Count, value=row[what]) as metric:
                metric.service = ""  # the alarm and the dashboard name the policy alone
                metric.add_dimension(name="policy", value=policy)
    logger.info("review SLA", extra={"counts": counts})
    return counts
