"""The review SLA's escalations, one row per routing execution in the idempotency table (its rows
of this use start with `review-sla-escalation#`; the IAM grant is limited to them), so the sweep
pages the on-call once per pending review.

Order: the row is claimed (`claimed`, under a lease) before the event is put and marked `sent`
after. A sweep that fails to put the event, or dies before it could, leaves a claim whose lease
(LEASE_SECONDS, shorter than the 5-minute schedule, longer than the function's 29 s timeout) has
run out by the next sweep, which claims it again and retries: a page is never lost to a failed
put. The one duplicate left is a sweep that put the event and died before `sent`: the next sweep
pages again (a rare second page rather than a missed one).

The row holds no item text: its key is a hash of the execution name (which carries the item's id),
and its columns are a state and times. It is kept `keep_seconds` (the table's TTL `expiration`):
longer than a review may wait before the workflow times it out."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from . import AwsAdapter

#: The rows' key prefix (the console function's grant names it: dynamodb:LeadingKeys).
KEY_PREFIX = "review-sla-escalation#"
#: How long a claim holds off other sweeps: past the console function's timeout (29 s), inside the
#: sweep's 5-minute schedule, so the next sweep retries a page the last one could not put.
LEASE_SECONDS = 120
#: A row is kept this long past the review timeout (the table's TTL removes it after).
MARGIN_SECONDS = 86400


def mark_key(execution_name: str) -> str:
    """The row's key: the prefix and a hash of the execution name (no item id in the table)."""
    return KEY_PREFIX + hashlib.sha256(execution_name.encode("utf-8")).hexdigest()


class SlaEscalations(AwsAdapter):
    service = "dynamodb"

    def __init__(self, table_name: str, *, review_timeout_seconds: int, client: Any = None,
                 lease_seconds: int = LEASE_SECONDS) -> None:
        super().__init__(client)
        self.table_name, self.lease_seconds = table_name, lease_seconds
        self.keep_seconds = review_timeout_seconds + MARGIN_SECONDS

    def _item(self, execution_name: str, state: str, now: int) -> dict[str, Any]:
        item = {"id": {"S": mark_key(execution_name)}, "state": {"S": state}, "marked_at": {"N": str(now)},
                "expiration": {"N": str(now + self.keep_seconds)}}
        if state == "claimed":
            item["lease_until"] = {"N": str(now + self.lease_seconds)}
        return item

    def claim(self, execution_name: str) -> bool:
        """True once this sweep holds the execution's mark: no row, a row past its TTL that DynamoDB
        has not deleted yet, or a claim whose lease ran out (its put failed or its sweep died)."""
        now = int(time.time())
        try:
            self.client.put_item(
                TableName=self.table_name, Item=self._item(execution_name, "claimed", now),
                ConditionExpression="attribute_not_exists(id) OR expiration < :now "
                                    "OR (#state = :claimed AND lease_until < :now)",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={":now": {"N": str(now)}, ":claimed": {"S": "claimed"}})
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def sent(self, execution_name: str) -> None:
        """The execution's page is on the bus: no sweep claims it again while the row lives."""
        self.client.put_item(TableName=self.table_name, Item=self._item(execution_name, "sent", int(time.time())))
