"""A resolved item kept for the console's similar items (domain/similar.py): an item the router
routed on its own, when its workflow starts, and an item a reviewer answered or corrected, once
the answer is accepted. Keeping it is best effort: a store that cannot be written is logged and
counted (`ResolvedItemNotKept`), and the item is routed all the same."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Mapping

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from ..domain.policies import Policy, load_policy
from ..domain.ports.outcomes import ResolvedItemStore
from ..domain.records import DecisionRecord
from ..domain.similar import resolved_item
from ..items import parse_item


def remember_resolved(record: DecisionRecord, answers: Mapping[str, str], resolved_by: str,
                      store: ResolvedItemStore | None, logger: Logger, *, policy: Policy | None = None) -> None:
    """Keep the record's item with its final `answers` (nothing without a store)."""
    if store is None:
        return
    try:
        policy = policy or load_policy(record.policy.name)
        resolved = resolved_item(policy, parse_item(record.item_kind, record.item), answers, resolved_by=resolved_by,
                                 resolved_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"))
        if resolved is not None:
            store.remember(resolved)
    except Exception as error:  # noqa: BLE001 - the item was routed or answered; only its neighbour row is missing
        with single_metric(name="ResolvedItemNotKept", unit=MetricUnit.Count, value=1) as metric:
            metric.add_dimension(name="policy", value=record.policy.name)
        logger.error("resolved item not kept for similar items", extra={
            "item_id": record.item_id, "reason": f"{type(error).__name__}: {error}"})
