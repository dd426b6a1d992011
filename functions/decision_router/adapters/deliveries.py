"""The webhook deliveries accepted: one DynamoDB row per key (a delivery's signed message, and its
sender's delivery id where it sends one), kept for RECORD_SECONDS by the table's TTL, far longer
than any source's time window, so a replay is recognised for as long as its signature would still
be accepted.

A row is claimed `pending` under a lease (LEASE_SECONDS) before the delivery is handed on, and
marked `done` once it has been (queued, forwarded, parked or ignored). An invocation that dies in
between (the function's timeout, an out-of-memory kill: nothing runs `forget`) leaves a pending
row whose lease runs out: the sender's retry then takes it over with a conditional write and hands
the delivery on, instead of being answered "duplicate" for a delivery nobody handed on. A retry
that finds a pending row whose lease still runs is told to come back later; a done row is a
duplicate. A row written before rows had a state counts as done.

Who takes, waits or finds a duplicate is the lease rule's (domain/leases.py); `DeliveryClaims`
claims a delivery's keys by it over four conditional writes, which `Deliveries` makes on the
table (and an in-memory store in the tests, on a dictionary)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from ..domain.leases import Held, LeaseRows, Placement, Verdict
from . import AwsAdapter, put_if_lease_is

#: How long a delivery is remembered (the table's TTL attribute `expires_at`): a day, against
#: windows of at most an hour (WebhookMaxSkewSeconds, Jira's and PagerDuty's retry windows).
RECORD_SECONDS = 86400
#: How long a pending claim holds off the sender's retries: four times the webhook function's
#: timeout (15 s, template.yaml), so a live invocation always finishes (or is killed) well inside
#: its lease and two invocations never hand the same delivery on; and short enough that a retry
#: after a killed invocation gets through within a sender's retry schedule (about a minute).
LEASE_SECONDS = 60

#: A row as stored, as plain values (numbers as int): `source`, `received_at`, `expires_at`,
#: `state` (pending | done), `owner` (the claim's token) and, while pending, `lease_until`.
Row = dict[str, Any]


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming a delivery's keys. `state`: `new` (every key is now pending under
    `token`: hand the delivery on, then `done` or `forget`), `done` (`key` was handed on already: a
    duplicate) or `pending` (another invocation holds `key` for `retry_after` more seconds)."""

    state: Literal["new", "done", "pending"]
    token: str = ""
    key: str = ""
    retry_after: int = 0


def held(row: Row) -> Held:
    """A row as the lease rule reads it: pending under its lease (none written: one long past),
    else handed on (a row of an older release, with no state, too)."""
    if row.get("state") == "pending":
        return Held(lease_until=float(row.get("lease_until", 0)))
    return Held(lease_until=None)


class DeliveryClaims(LeaseRows):
    """Claims a delivery's keys by the lease rule over the store's conditional writes: `_place`
    (where no live row is: none, or one past `expires_at`), `_take_over` (only while the row's
    lease is the one read), `_finish` and `_release` (only while `owner` is the token)."""

    record_seconds: int = RECORD_SECONDS
    lease_seconds: int = LEASE_SECONDS

    def now(self) -> int:  # this module's clock: the tests move it
        return int(time.time())

    def _finish(self, key: str, token: str, row: Row) -> None:
        raise NotImplementedError

    def _release(self, key: str, token: str) -> None:
        raise NotImplementedError

    def _row(self, source: str, token: str, state: str, now: int) -> Row:
        row: Row = {"source": source, "received_at": now, "expires_at": now + self.record_seconds,
                    "state": state, "owner": token}
        if state == "pending":
            row["lease_until"] = now + self.lease_seconds
        return row

    def claim(self, keys: Sequence[str], source: str) -> Claim:
        """Claim every key of a delivery as pending. The first key that another delivery holds
        decides: `done` (keys claimed before it are marked done too: they belong to a delivery
        already handed on) or `pending` (keys claimed before it are released, so the retry this
        answer asks for finds them free)."""
        token = uuid.uuid4().hex
        claimed: list[str] = []
        for key in keys:
            verdict = self._claim_one(key, source, token)
            if verdict.action == "take":
                claimed.append(key)
                continue
            if verdict.action == "wait":
                self.forget(claimed, token)
                return Claim("pending", key=key, retry_after=max(1, int(verdict.until) - self.now()))
            self.done(claimed, token, source)
            return Claim("done", key=key)
        return Claim("new", token=token)

    def _claim_one(self, key: str, source: str, token: str) -> Verdict:
        return self.claim_key(key, lambda now: self._row(source, token, "pending", now))

    def done(self, keys: Sequence[str], token: str, source: str) -> None:
        """Mark the keys claimed under `token` handed on. A key another invocation has taken over
        meanwhile (only possible past the lease) is left to that invocation's outcome."""
        now = self.now()
        for key in keys:
            self._finish(key, token, self._row(source, token, "done", now))

    def forget(self, keys: Sequence[str], token: str) -> None:
        """Release the keys claimed under `token` for a delivery that could not be handed on (the
        sender's retry must get through); a key another invocation holds now stays its own."""
        for key in keys:
            self._release(key, token)


def _typed(key: str, row: Row) -> dict[str, Any]:
    return {"delivery_key": {"S": key},
            **{name: {"N": str(value)} if isinstance(value, int) else {"S": value} for name, value in row.items()}}


def _plain(item: dict[str, Any]) -> Row:
    return {name: int(value["N"]) if "N" in value else value.get("S") for name, value in item.items()
            if name != "delivery_key"}


class Deliveries(DeliveryClaims, AwsAdapter):
    """The deliveries table's conditional writes."""

    service = "dynamodb"

    def __init__(self, table_name: str, client: Any = None, record_seconds: int = RECORD_SECONDS,
                 lease_seconds: int = LEASE_SECONDS):
        super().__init__(client)
        self.table_name, self.record_seconds, self.lease_seconds = table_name, record_seconds, lease_seconds

    def _place(self, key: str, row: Row) -> Placement:
        try:
            self.client.put_item(
                TableName=self.table_name, Item=_typed(key, row),
                # No live row: none, or one past its TTL that DynamoDB has not deleted yet.
                ConditionExpression="attribute_not_exists(delivery_key) OR expires_at < :now",
                ExpressionAttributeValues={":now": {"N": str(row["received_at"])}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD")
            return "placed"
        except self.client.exceptions.ConditionalCheckFailedException as error:
            found = error.response.get("Item") or self.client.get_item(
                TableName=self.table_name, Key={"delivery_key": {"S": key}}, ConsistentRead=True).get("Item")
        return held(_plain(found)) if found else "gone"

    def _take_over(self, key: str, theirs: Held, row: Row) -> bool:
        return put_if_lease_is(self.client, self.table_name, _typed(key, row), theirs.lease_until)

    def _finish(self, key: str, token: str, row: Row) -> None:
        try:
            self.client.put_item(
                TableName=self.table_name, Item=_typed(key, row), ConditionExpression="#owner = :token",
                ExpressionAttributeNames={"#owner": "owner"}, ExpressionAttributeValues={":token": {"S": token}})
        except self.client.exceptions.ConditionalCheckFailedException:
            pass

    def _release(self, key: str, token: str) -> None:
        try:
            self.client.delete_item(
                TableName=self.table_name, Key={"delivery_key": {"S": key}}, ConditionExpression="#owner = :token",
                ExpressionAttributeNames={"#owner": "owner"}, ExpressionAttributeValues={":token": {"S": token}})
        except self.client.exceptions.ConditionalCheckFailedException:
            pass
