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
longer than a review may wait before the workflow times it out.

Whether a sweep takes a mark is the lease rule's (domain/leases.py); `EscalationClaims` applies it
over the conditional writes `SlaEscalations` makes on the table."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from ..domain.leases import Held, LeaseRows, Placement
from . import AwsAdapter, put_if_lease_is

#: The rows' key prefix (the console function's grant names it: dynamodb:LeadingKeys).
KEY_PREFIX = "review-sla-escalation#"
#: How long a claim holds off other sweeps: past the console function's timeout (29 s), inside the
#: sweep's 5-minute schedule, so the next sweep retries a page the last one could not put.
LEASE_SECONDS = 120
#: A row is kept this long past the review timeout (the table's TTL removes it after).
MARGIN_SECONDS = 86400

#: A mark as stored, as plain values (numbers as int): `state` (claimed | sent), `marked_at`,
#: `expiration` and, while claimed, `lease_until`.
Row = dict[str, Any]


def mark_key(execution_name: str) -> str:
    """The row's key: the prefix and a hash of the execution name (no item id in the table)."""
    return KEY_PREFIX + hashlib.sha256(execution_name.encode("utf-8")).hexdigest()


def held(row: Row) -> Held:
    """A mark as the lease rule reads it: claimed under its lease, else sent."""
    if row.get("state") == "claimed":
        return Held(lease_until=float(row.get("lease_until", 0)))
    return Held(lease_until=None)


class EscalationClaims(LeaseRows):
    """The marks by the lease rule, over the store's writes: `_place` (where no live row is: none,
    or one past `expiration`), `_take_over` (only while the row's lease is the one read), `_put`."""

    keep_seconds: int
    lease_seconds: int = LEASE_SECONDS

    def now(self) -> int:  # this module's clock: the tests move it
        return int(time.time())

    def _put(self, key: str, row: Row) -> None:
        raise NotImplementedError

    def _row(self, state: str, now: int) -> Row:
        row: Row = {"state": state, "marked_at": now, "expiration": now + self.keep_seconds}
        if state == "claimed":
            row["lease_until"] = now + self.lease_seconds
        return row

    def claim_page(self, execution_name: str) -> bool:
        """True once this sweep holds the execution's mark: no row, a row past its TTL that DynamoDB
        has not deleted yet, or a claim whose lease ran out (its put failed or its sweep died)."""
        key = mark_key(execution_name)
        return self.claim_key(key, lambda now: self._row("claimed", now)).action == "take"

    def sent(self, execution_name: str) -> None:
        """The execution's page is on the bus: no sweep claims it again while the row lives."""
        self._put(mark_key(execution_name), self._row("sent", self.now()))


def _typed(key: str, row: Row) -> dict[str, Any]:
    return {"id": {"S": key},
            **{name: {"N": str(value)} if isinstance(value, int) else {"S": value} for name, value in row.items()}}


class SlaEscalations(EscalationClaims, AwsAdapter):
    """The marks' writes on the idempotency table: PutItem alone (the function's grant)."""

    service = "dynamodb"

    def __init__(self, table_name: str, *, review_timeout_seconds: int, client: Any = None,
                 lease_seconds: int = LEASE_SECONDS) -> None:
        super().__init__(client)
        self.table_name, self.lease_seconds = table_name, lease_seconds
        self.keep_seconds = review_timeout_seconds + MARGIN_SECONDS

    def _place(self, key: str, row: Row) -> Placement:
        try:
            self.client.put_item(TableName=self.table_name, Item=_typed(key, row),
                                 ConditionExpression="attribute_not_exists(id) OR expiration < :now",
                                 ExpressionAttributeValues={":now": {"N": str(row["marked_at"])}},
                                 ReturnValuesOnConditionCheckFailure="ALL_OLD")
            return "placed"
        except self.client.exceptions.ConditionalCheckFailedException as error:
            found = error.response.get("Item")
        if not found:
            return "gone"
        return held({name: int(value["N"]) if "N" in value else value.get("S") for name, value in found.items()})

    def _take_over(self, key: str, theirs: Held, row: Row) -> bool:
        return put_if_lease_is(self.client, self.table_name, _typed(key, row), theirs.lease_until)

    def _put(self, key: str, row: Row) -> None:
        self.client.put_item(TableName=self.table_name, Item=_typed(key, row))
