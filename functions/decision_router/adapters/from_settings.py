"""The adapters that several functions make alike, each from a function's settings: one recipe
each, for the wirings (`decision_router.composition`) to make their parts with. A part that
only one function makes is made in its own wiring. Each recipe imports its adapter itself, so a
function loads only the adapters it makes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import Settings

if TYPE_CHECKING:
    from .pending_reviews import PendingReviewTable
    from .precision_tally import PrecisionTally
    from .shadow_tally import ShadowTally
    from .signing_key import SigningKey
    from .similar_items import ResolvedItems
    from .workflow import WorkflowStarter


def workflow(settings: Settings) -> WorkflowStarter:
    """The routing workflow (`ROUTING_STATE_MACHINE_ARN`, required), its executions' audit rows
    kept `AUDIT_RETENTION_DAYS`."""
    from .workflow import WorkflowStarter

    s = settings.require("state_machine_arn")
    return WorkflowStarter(s.state_machine_arn, audit_retention_days=s.audit_retention_days,
                           label_retention_days=s.label_retention_days)


def pending_reviews(settings: Settings) -> PendingReviewTable:
    """The pending-review index (`PENDING_REVIEWS_TABLE_NAME`, required), its rows kept until a day
    after their review would time out (`REVIEW_TIMEOUT_SECONDS`)."""
    from .pending_reviews import PendingReviewTable

    s = settings.require("pending_reviews_table")
    return PendingReviewTable(s.pending_reviews_table, review_timeout_seconds=s.review_timeout_seconds)


def resolved_items(settings: Settings) -> ResolvedItems | None:
    """The store of a function's `RESOLVED_ITEMS_TABLE_NAME`, keeping each row its
    `RESOLVED_ITEMS_RETENTION_DAYS` (None: unset, nothing is kept). Each store opens its own
    boto3 client."""
    from .similar_items import ResolvedItems

    table = settings.resolved_items_table
    return ResolvedItems(table, retention_days=settings.resolved_items_retention_days) if table else None


def precision_tally(settings: Settings) -> PrecisionTally | None:
    """The live precision's tallies in the head history table (None: the function is given none)."""
    from .precision_tally import PrecisionTally

    table = settings.head_history_table
    return PrecisionTally(table) if table else None


def shadow_tally(settings: Settings) -> ShadowTally | None:
    """The shadow heads' tallies in the head history table (None: the function is given none)."""
    from .shadow_tally import ShadowTally

    table = settings.head_history_table
    return ShadowTally(table) if table else None


def signing_key(settings: Settings) -> SigningKey | None:
    """The stack's signing key (`SIGNING_KEY_SECRET_ARN`), read on first use (None: the function
    is given none; its answers count as unauthenticated)."""
    from .signing_key import SigningKey

    arn = settings.signing_key_secret_arn
    return SigningKey.from_secret(arn) if arn else None
