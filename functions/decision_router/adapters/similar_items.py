"""The resolved-items store (DynamoDB): one row per resolved item of a policy, newest first, with
its vector; what the console reads to show an item's nearest resolved items.

Keyed `policy#<shard>` + `resolved_key` (who answered it, `router` or `reviewer`, then the
resolution's time, then the item id). Every routed item of a policy writes a row, and every
lookup reads the policy's latest rows: under one partition key per policy both would meet one
DynamoDB partition's limits, so a policy's rows are spread over `SHARDS` partition keys (the shard
from a hash of the item id: an item's rows share one). The console reads one policy's latest
`RECENT` rows of each kind by a Query per shard, all at once, merged newest first (a shard is read
on only while its rows may still be among the latest), and compares them in memory: a compact
index, about 1 KB a row. A window per kind keeps the reviewers' answers in sight however many
items the router routes on its own. Each row carries `expires_at` (epoch seconds), the table's TTL
attribute: a row is gone `retention_days` after its resolution. The partition key starts with the
policy, so a writer's IAM role names the policies it may write (`dynamodb:LeadingKeys`).
docs/similar-items.md gives its cost and when a vector store (S3 Vectors) should take its place
behind the same two methods.

Rows a stack kept before sharding are under the policy's name alone: `recent` reads that key too
(as one more shard), until the table's TTL has removed them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, get_args

from ..domain.similar import RETENTION_DAYS, Kind, ResolvedItem, kind
from . import AwsAdapter
from .shards import every_shard, in_parallel, shard_of, sharded

#: Resolved items of a policy compared per lookup, per kind (router, reviewer): the latest ones
#: (2,000 rows, about 2 MB, a fraction of a second).
RECENT = 1000
#: The table's TTL attribute (template.yaml's TimeToLiveSpecification names it).
EXPIRES_AT = "expires_at"
#: Partition keys per policy. Writes are few (a million items a day is 12 a second), but a lookup
#: reads a policy's latest 2,000 rows (about 250 read units): one partition (3,000 a second) would
#: serve 12 lookups a second. Over 8 shards a lookup reads about 165 rows per kind of each, a sixth
#: of the rows and read units per partition (70 lookups a second), for at most a third more in all
#: (tests/functions/test_similar_items.py reads 4,000 rows: 2,320 read, at most 309 from one shard).
SHARDS = 8
#: A shard's first page holds its share of a window and this much more (a quarter, plus
#: PAGE_SPARE rows), so a lookup rarely reads a shard twice (its share of the latest rows is
#: binomial: 125 of 1,000 +- 11 over 8 shards).
PAGE_SHARE = 1.25
PAGE_SPARE = 8


def resolved_key(resolved: ResolvedItem) -> str:
    """The row's sort key: its kind first (a window each), then newest first by time."""
    return f"{kind(resolved)}#{resolved.resolved_at}#{resolved.item_id}"


def partition(resolved: ResolvedItem) -> str:
    """The row's partition key: its policy's shard of the item id (an item's rows share one)."""
    return sharded(resolved.policy, shard_of(resolved.item_id, SHARDS))


def partitions(policy: str) -> list[str]:
    """Every partition key a policy's rows are read from: the policy's name alone (the rows a stack
    kept before sharding, until they expire), then each shard."""
    return [policy, *every_shard(policy, SHARDS)]


def expires_at(resolved: ResolvedItem, retention_days: int) -> int:
    """When DynamoDB's TTL removes the row: `retention_days` after its resolution, epoch seconds."""
    return int((datetime.fromisoformat(resolved.resolved_at) + timedelta(days=retention_days)).timestamp())


@dataclass
class _Window:
    """What one partition's Query for one kind handed over so far, newest first."""

    partition: str
    page: int
    rows: list[tuple[str, ResolvedItem]] = field(default_factory=list)
    start: dict[str, Any] | None = None
    done: bool = False

    def may_hold_newer(self, cutoff: str | None) -> bool:
        """Whether rows not read yet may still be among the latest (all are older than its last)."""
        return not self.done and (cutoff is None or not self.rows or self.rows[-1][0] > cutoff)


class ResolvedItems(AwsAdapter):
    service = "dynamodb"

    def __init__(self, table_name: str, client: Any = None, *, retention_days: int = RETENTION_DAYS):
        super().__init__(client)
        self.table_name = table_name
        self.retention_days = retention_days

    def remember(self, resolved: ResolvedItem) -> None:
        """Keep one resolved item (a second resolution of the item, a correction, is a second row)."""
        self.client.put_item(TableName=self.table_name, Item={
            "policy": {"S": partition(resolved)},
            "resolved_key": {"S": resolved_key(resolved)},
            "item_id": {"S": resolved.item_id},
            EXPIRES_AT: {"N": str(expires_at(resolved, self.retention_days))},
            "body": {"S": resolved.model_dump_json()}})

    def recent(self, policy: str, limit: int = RECENT) -> list[ResolvedItem]:
        """The policy's latest `limit` resolved items of each kind, newest first."""
        rows: list[ResolvedItem] = []
        for each in get_args(Kind):
            rows.extend(self._latest(policy, each, limit))
        return sorted(rows, key=lambda row: (row.resolved_at, row.item_id), reverse=True)

    def _latest(self, policy: str, each: str, limit: int) -> list[ResolvedItem]:
        """The latest `limit` rows of one kind over every partition of the policy: each partition is
        read newest first, a page at a time, until its next page could hold none of the latest."""
        if limit < 1:
            return []
        share = math.ceil(limit / SHARDS * PAGE_SHARE) + PAGE_SPARE
        # The unsharded key holds every row of a stack that has just upgraded: read it a window at once.
        windows = [_Window(key, limit if key == policy else min(limit, share)) for key in partitions(policy)]
        cutoff: str | None = None
        merged: list[tuple[str, ResolvedItem]] = []
        while pending := [w for w in windows if w.may_hold_newer(cutoff)]:
            in_parallel(lambda window: self._read_page(window, each), pending)
            merged = sorted((row for w in windows for row in w.rows), key=lambda row: row[0], reverse=True)
            cutoff = merged[limit - 1][0] if len(merged) >= limit else None
        return [row for _, row in merged[:limit]]

    def _read_page(self, window: _Window, each: str) -> None:
        """The window's next page of one kind's rows, newest first."""
        page = self.client.query(
            TableName=self.table_name, KeyConditionExpression="#p = :p AND begins_with(#k, :k)",
            ScanIndexForward=False, ExpressionAttributeNames={"#p": "policy", "#k": "resolved_key"},
            ExpressionAttributeValues={":p": {"S": window.partition}, ":k": {"S": f"{each}#"}},
            ProjectionExpression="#k, body", Limit=window.page,
            **({"ExclusiveStartKey": window.start} if window.start else {}))
        window.rows.extend((row["resolved_key"]["S"], ResolvedItem.model_validate_json(row["body"]["S"]))
                           for row in page.get("Items", []))
        window.start = page.get("LastEvaluatedKey")
        window.done = not window.start
