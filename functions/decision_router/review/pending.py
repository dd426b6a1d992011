"""A waiting review as the pending-review index keeps it, and the index's lanes.

The console lists reviews by breach risk, then target, then age (`domain.review_sla.sla_order`).
Within one policy and one target (its SLA class) that order is the due time's, so the index lists
by lane, `<policy>#<class>`, each lane sorted by `due_at`: the first `limit` rows of every lane
hold the first `limit` of the whole list. A policy's classes are the targets its `review_sla` can
give (and `none` without one), so the lanes to read are known from the policies alone, never from
the rows. (The adapter spreads each lane over shards: adapters/pending_reviews.py.)
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ..domain.policies import Policy
from ..domain.ports.review import PendingReviewRow
from ..domain.review_sla import SlaStatus, sla_status
from .completion import PendingReview
from .console import PendingSummary, _parse_time, pending_summary

#: The class of a policy without a review SLA: due when the workflow times the review out.
NO_TARGET = "none"


def lane(policy_name: str, sla_class: str) -> str:
    return f"{policy_name}#{sla_class}"


def policy_lanes(policy: Policy) -> list[str]:
    """Every lane a review of `policy` can be in: one per target its review SLA can give."""
    sla = policy.review_sla
    if sla is None:
        return [lane(policy.name, NO_TARGET)]
    targets = {sla.default_minutes, *sla.by_priority.values(), *sla.by_queue.values()}
    return [lane(policy.name, f"{minutes}m") for minutes in sorted(targets)]


def entered_time(moment: datetime) -> str:
    """A time as Step Functions writes `$$.State.EnteredTime` (ISO 8601 UTC, milliseconds, Z):
    one fixed width, so the index's text sort key sorts as time does."""
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def pending_row(review: PendingReview, policy: Policy, *, review_timeout_seconds: int) -> PendingReviewRow:
    """The index row of a review the workflow just requested: due at its SLA target (or, without
    one, when the workflow times it out), in the lane of its policy and target."""
    requested = _parse_time(review.requested_at) or _parse_time(review.record.decided_at)
    if requested is None:
        raise ValueError(f"requested_at: {review.requested_at!r} is not an ISO 8601 time, and the record's "
                         f"decided_at ({review.record.decided_at!r}) is not either")
    summary = pending_summary(review, policy, requested)
    minutes = summary.sla.target_minutes if summary.sla is not None else None
    due = requested + timedelta(seconds=minutes * 60 if minutes is not None else review_timeout_seconds)
    return PendingReviewRow(
        execution_name=review.execution_name, task_token=review.task_token, requested_at=entered_time(requested),
        due_at=entered_time(due), lane=lane(policy.name, f"{minutes}m" if minutes is not None else NO_TARGET),
        summary=summary.model_dump_json(), record=review.record)


def moved_on(summary: PendingSummary, policy: Policy, now: datetime) -> PendingSummary:
    """`summary` (as its row was written) with its age and SLA clock as of `now`."""
    requested = _parse_time(summary.requested_at)
    if requested is None:
        return summary
    age = max(0.0, (now - requested).total_seconds())
    status: SlaStatus | None = None
    if summary.sla is not None and policy.review_sla is not None:
        status = sla_status(policy.review_sla, summary.sla.priority, summary.suggested.get(policy.routing_question.id),
                            age)
    return summary.model_copy(update={"age_seconds": age, "sla": status})


def as_pending(row: PendingReviewRow) -> PendingReview:
    """The row as the review it stands for (what the console's item view and the answer read)."""
    return PendingReview(task_token=row.task_token, execution_name=row.execution_name,
                         requested_at=row.requested_at, record=row.record)
