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
duplicate. A row written before rows had a state counts as done."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from . import AwsAdapter

#: How long a delivery is remembered (the table's TTL attribute `expires_at`): a day, against
#: windows of at most an hour (WebhookMaxSkewSeconds, Jira's and PagerDuty's retry windows).
RECORD_SECONDS = 86400
#: How long a pending claim holds off the sender's retries: four times the webhook function's
#: timeout (15 s, template.yaml), so a live invocation always finishes (or is killed) well inside
#: its lease and two invocations never hand the same delivery on; and short enough that a retry
#: after a killed invocation gets through within a sender's retry schedule (about a minute).
LEASE_SECONDS = 60
#: Rewrites of one key before giving up when other invocations keep changing its row under us.
CLAIM_ATTEMPTS = 3


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming a delivery's keys. `state`: `new` (every key is now pending under
    `token`: hand the delivery on, then `done` or `forget`), `done` (`key` was handed on already: a
    duplicate) or `pending` (another invocation holds `key` for `retry_after` more seconds)."""

    state: Literal["new", "done", "pending"]
    token: str = ""
    key: str = ""
    retry_after: int = 0


class Deliveries(AwsAdapter):
    service = "dynamodb"

    def __init__(self, table_name: str, client: Any = None, record_seconds: int = RECORD_SECONDS,
                 lease_seconds: int = LEASE_SECONDS):
        super().__init__(client)
        self.table_name, self.record_seconds, self.lease_seconds = table_name, record_seconds, lease_seconds

    def _item(self, key: str, source: str, token: str, state: str, now: int) -> dict[str, Any]:
        item = {"delivery_key": {"S": key}, "source": {"S": source}, "received_at": {"N": str(now)},
                "expires_at": {"N": str(now + self.record_seconds)}, "state": {"S": state}, "owner": {"S": token}}
        if state == "pending":
            item["lease_until"] = {"N": str(now + self.lease_seconds)}
        return item

    def claim(self, keys: Sequence[str], source: str) -> Claim:
        """Claim every key of a delivery as pending. The first key that another delivery holds
        decides: `done` (keys claimed before it are marked done too: they belong to a delivery
        already handed on) or `pending` (keys claimed before it are released, so the retry this
        answer asks for finds them free)."""
        token = uuid.uuid4().hex
        claimed: list[str] = []
        for key in keys:
            held = self._claim_one(key, source, token)
            if held is None:
                claimed.append(key)
                continue
            if held.state == "done":
                self.done(claimed, token, source)
            else:
                self.forget(claimed, token)
            return held
        return Claim("new", token=token)

    def _claim_one(self, key: str, source: str, token: str) -> Claim | None:
        """None once `key` is pending under `token`; else who holds it."""
        for _ in range(CLAIM_ATTEMPTS):
            now = int(time.time())
            try:
                self.client.put_item(
                    TableName=self.table_name, Item=self._item(key, source, token, "pending", now),
                    # Free: no row, a row past its TTL that DynamoDB has not deleted yet, or a
                    # pending claim whose lease ran out (its invocation died).
                    ConditionExpression="attribute_not_exists(delivery_key) OR expires_at < :now "
                                        "OR (#state = :pending AND lease_until < :now)",
                    ExpressionAttributeNames={"#state": "state"},
                    ExpressionAttributeValues={":now": {"N": str(now)}, ":pending": {"S": "pending"}},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD")
                return None
            except self.client.exceptions.ConditionalCheckFailedException as error:
                row = error.response.get("Item") or self.client.get_item(
                    TableName=self.table_name, Key={"delivery_key": {"S": key}}, ConsistentRead=True).get("Item")
            if not row:
                continue  # released in between: claim it again
            if row.get("state", {}).get("S") == "pending":
                left = int(row.get("lease_until", {}).get("N", "0")) - now
                if left < 0:
                    continue  # its lease ran out in between: take it over
                return Claim("pending", key=key, retry_after=max(1, left))
            return Claim("done", key=key)
        # Rows that keep changing under us are claims being made and released: come back later.
        return Claim("pending", key=key, retry_after=1)

    def done(self, keys: Sequence[str], token: str, source: str) -> None:
        """Mark the keys claimed under `token` handed on. A key another invocation has taken over
        meanwhile (only possible past the lease) is left to that invocation's outcome."""
        now = int(time.time())
        for key in keys:
            try:
                self.client.put_item(
                    TableName=self.table_name, Item=self._item(key, source, token, "done", now),
                    ConditionExpression="#owner = :token",
                    ExpressionAttributeNames={"#owner": "owner"}, ExpressionAttributeValues={":token": {"S": token}})
            except self.client.exceptions.ConditionalCheckFailedException:
                pass

    def forget(self, keys: Sequence[str], token: str) -> None:
        """Release the keys claimed under `token` for a delivery that could not be handed on (the
        sender's retry must get through); a key another invocation holds now stays its own."""
        for key in keys:
            try:
                self.client.delete_item(
                    TableName=self.table_name, Key={"delivery_key": {"S": key}}, ConditionExpression="#owner = :token",
                    ExpressionAttributeNames={"#owner": "owner"}, ExpressionAttributeValues={":token": {"S": token}})
            except self.client.exceptions.ConditionalCheckFailedException:
                pass
