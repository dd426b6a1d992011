"""The open-incident table (DynamoDB, keyed `incident_key`) as every store of it reads it: its
constants, its rows as Python values, and the sparse, sharded index of the open incidents
(adapters/open_incidents.py says what each row holds).

Reads on a request path never scan: an incident's row carries `OPEN_MARK` only while it is open,
and the sparse index `OPEN_INDEX` holds those rows alone, so `expired_holds` and `held_open` read
the open incidents however many resolved ones the table keeps.

The mark's value is the index's partition key, and every write of an open row (its claim, each
delivery, its routing, holds, pages) is a write of the index too: one value would put every open
incident, and an alert storm's writes, on one partition of the index. The mark is `open#<n>`
instead, one of `OPEN_SHARDS` values (`open_mark`, from a hash of the incident key: a row keeps
its shard), and a read queries every shard at once, merged by incident key as one partition
would hand them over. Rows marked before sharding carry `OPEN` alone: the readers query that value
too, and an open row's next delivery (`touch`) moves it to its shard. Open rows have no expiry, so
the value of before is read for as long as any row may carry it (docs/operations/hot-keys.md says
how to see that none does).
"""

from __future__ import annotations

from typing import Any, Iterator, TypeVar

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from pydantic import BaseModel

from . import BATCH_GET_KEYS, AwsAdapter
from .shards import every_shard, in_parallel, shard_of, sharded

Row = TypeVar("Row", bound=BaseModel)
#: The sparse index of the open incidents (template.yaml OpenIncidentsTable): its key, the
#: attribute an incident's row carries while it is open, and the attribute's value before the
#: index was sharded (still read: `OPEN_MARKS`).
OPEN_INDEX = "open-incidents"
OPEN_MARK = "open_mark"
OPEN = "open"
#: Values of the open mark (partitions of the index). Each takes at most 1,000 writes a second, and
#: every write of an open row is one (an alert storm: thousands of deliveries a second); 10 take
#: 10,000 a second. A read queries all 10 and the unsharded value at once: 11 small Queries.
OPEN_SHARDS = 10
#: Every value a read of the open incidents queries: the unsharded one, then each shard's.
OPEN_MARKS = (OPEN, *every_shard(OPEN, OPEN_SHARDS))
#: How long a resolved row is kept by default (the stack's OpenIncidentRetentionDays).
RETENTION_DAYS = 30
#: BatchGetItem's most keys a request.
BATCH_KEYS = BATCH_GET_KEYS


def open_mark(key: str) -> str:
    """The open mark of the incident of `key`: its shard of the open-incident index."""
    return sharded(OPEN, shard_of(key, OPEN_SHARDS))


def plain(raw: dict[str, Any]) -> dict[str, Any]:
    """A DynamoDB item as Python values (a string set as a sorted list)."""
    deserializer = TypeDeserializer()
    values = {name: deserializer.deserialize(value) for name, value in raw.items()}
    return {name: sorted(value) if isinstance(value, set) else value for name, value in values.items()}


def item_of(values: dict[str, Any]) -> dict[str, Any]:
    """Python values as a DynamoDB item (a `set` of strings as a string set)."""
    serializer = TypeSerializer()
    return {name: serializer.serialize(value) for name, value in values.items()}


def read(model: type[Row], raw: dict[str, Any]) -> Row:
    """A row of the table (a DynamoDB item) as the model the store hands over."""
    return model.model_validate(plain(raw))


class IncidentTable(AwsAdapter):
    """One store of the open-incident table: its name, its client, and how long a resolved row is kept."""

    service = "dynamodb"

    def __init__(self, table_name: str, client: Any = None, *, retention_days: int = RETENTION_DAYS):
        super().__init__(client)
        self.table_name = table_name
        self.retention_days = retention_days

    def _key(self, key: str) -> dict[str, Any]:
        return {"incident_key": {"S": key}}

    def _written_if(self, write: str, **request: Any) -> dict[str, Any] | None:
        """One conditional write of this table (`write`: put_item, update_item or delete_item):
        its response, or None when its condition failed (nothing was written)."""
        try:
            response: dict[str, Any] = getattr(self.client, write)(TableName=self.table_name, **request)
            return response
        except self.client.exceptions.ConditionalCheckFailedException:
            return None

    def _item(self, key: str) -> dict[str, Any] | None:
        return self.client.get_item(TableName=self.table_name, Key=self._key(key), ConsistentRead=True).get("Item")

    def _open_rows(self, *, names: dict[str, str] | None = None, values: dict[str, Any] | None = None,
                   **query: Any) -> list[dict[str, Any]]:
        """Every row of the open-incident index (only rows with `OPEN_MARK`): each of its values
        queried at once, the rows by incident key (one row seen under two values while the index
        moves it to its shard: once, as its shard has it)."""
        def marked(mark: str) -> list[dict[str, Any]]:
            return list(self._marked(mark, names=names, values=values, **query))

        by_key = {row["incident_key"]["S"]: row for shard in in_parallel(marked, OPEN_MARKS) for row in shard}
        return [by_key[key] for key in sorted(by_key)]

    def _marked(self, mark: str, *, names: dict[str, str] | None, values: dict[str, Any] | None,
                **query: Any) -> Iterator[dict[str, Any]]:
        """The rows of the open-incident index under one value of the mark, page by page."""
        start = None
        while True:
            page = self.client.query(
                TableName=self.table_name, IndexName=OPEN_INDEX, KeyConditionExpression="#m = :open",
                ExpressionAttributeNames={"#m": OPEN_MARK, **(names or {})},
                ExpressionAttributeValues={":open": {"S": mark}, **(values or {})},
                **query, **({"ExclusiveStartKey": start} if start else {}))
            yield from page.get("Items", [])
            start = page.get("LastEvaluatedKey")
            if not start:
                return
