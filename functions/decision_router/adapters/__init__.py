"""The only modules that talk to AWS. Clients are created on first use, so importing
a handler never opens a connection (and tests can start moto first)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

import boto3


def expiry(days: int, now: datetime | None = None) -> int:
    """A DynamoDB TTL attribute's value for a row kept `days` from `now`: epoch seconds."""
    return int(((now or datetime.now(timezone.utc)) + timedelta(days=days)).timestamp())


#: BatchGetItem's most keys a request, and its rounds for keys DynamoDB left unprocessed
#: (throttled) before giving up.
BATCH_GET_KEYS = 100
BATCH_GET_ROUNDS = 5


def batch_get(client: Any, table: str, keys: list[dict[str, Any]], *, what: str, consistent: bool = False,
              projection: str | None = None, names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The rows of `keys` (DynamoDB key maps) that exist in `table`, BATCH_GET_KEYS a request (only
    `projection`'s attributes, when given); the keys DynamoDB leaves unprocessed asked again with a
    growing pause. RuntimeError naming `what` when some are still unprocessed after BATCH_GET_ROUNDS."""
    found: list[dict[str, Any]] = []
    options: dict[str, Any] = {"ConsistentRead": True} if consistent else {}
    if projection:
        options.update(ProjectionExpression=projection, ExpressionAttributeNames=names or {})
    for start in range(0, len(keys), BATCH_GET_KEYS):
        request: dict[str, Any] = {table: {"Keys": keys[start:start + BATCH_GET_KEYS], **options}}
        for attempt in range(BATCH_GET_ROUNDS):
            if attempt:
                time.sleep(0.05 * 2 ** attempt)
            answer = client.batch_get_item(RequestItems=request)
            found.extend(answer.get("Responses", {}).get(table, []))
            request = answer.get("UnprocessedKeys") or {}
            if not request:
                break
        else:
            raise RuntimeError(f"{what}: {len(request[table]['Keys'])} of its rows were still unprocessed after "
                               f"{BATCH_GET_ROUNDS} BatchGetItem rounds (throttled); read it again")
    return found


def put_if_lease_is(client: Any, table: str, item: dict[str, Any], lease_until: float | None) -> bool:
    """Put `item` only while the row's `lease_until` is the one read (a lease-claim table's take-over,
    domain/leases.py); False when another invocation changed the row first."""
    try:
        client.put_item(TableName=table, Item=item, ConditionExpression="lease_until = :theirs",
                        ExpressionAttributeValues={":theirs": {"N": str(int(lease_until or 0))}})
    except client.exceptions.ConditionalCheckFailedException:
        return False
    return True


class AwsAdapter:
    """One boto3 client of `service`, created on first use unless one is injected."""

    service: str

    def __init__(self, client: Any = None):
        self._client = client

    def _new_client(self) -> Any:
        return boto3.client(self.service)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._new_client()
        return self._client
