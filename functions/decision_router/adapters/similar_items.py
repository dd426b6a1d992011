"""The resolved-items store (DynamoDB): one row per resolved item of a policy, newest first, with
its vector; what the console reads to show an item's nearest resolved items.

Keyed `policy` + `resolved_key` (who answered it, `router` or `reviewer`, then the resolution's
time, then the item id), so the console reads one policy's latest `RECENT` rows of each kind in
two paginated queries and compares them in memory: a compact index, about 1 KB a row. A window per
kind keeps the reviewers' answers in sight however many items the router routes on its own. Each
row carries `expires_at` (epoch seconds), the table's TTL attribute: a row is gone `retention_days`
after its resolution. The partition key is the policy, so a writer's IAM role names the policies
it may write (`dynamodb:LeadingKeys`). docs/similar-items.md gives its cost and when a vector store
(S3 Vectors) should take its place behind the same two methods.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, get_args

from ..domain.similar import RETENTION_DAYS, Kind, ResolvedItem, kind
from . import AwsAdapter

#: Resolved items of a policy compared per lookup, per kind (router, reviewer): the latest ones
#: (2,000 rows, about 2 MB, a fraction of a second).
RECENT = 1000
#: The table's TTL attribute (template.yaml's TimeToLiveSpecification names it).
EXPIRES_AT = "expires_at"


def resolved_key(resolved: ResolvedItem) -> str:
    """The row's sort key: its kind first (a window each), then newest first by time."""
    return f"{kind(resolved)}#{resolved.resolved_at}#{resolved.item_id}"


def expires_at(resolved: ResolvedItem, retention_days: int) -> int:
    """When DynamoDB's TTL removes the row: `retention_days` after its resolution, epoch seconds."""
    return int((datetime.fromisoformat(resolved.resolved_at) + timedelta(days=retention_days)).timestamp())


class ResolvedItems(AwsAdapter):
    service = "dynamodb"

    def __init__(self, table_name: str, client: Any = None, *, retention_days: int = RETENTION_DAYS):
        super().__init__(client)
        self.table_name = table_name
        self.retention_days = retention_days

    def remember(self, resolved: ResolvedItem) -> None:
        """Keep one resolved item (a second resolution of the item, a correction, is a second row)."""
        self.client.put_item(TableName=self.table_name, Item={
            "policy": {"S": resolved.policy},
            "resolved_key": {"S": resolved_key(resolved)},
            "item_id": {"S": resolved.item_id},
            EXPIRES_AT: {"N": str(expires_at(resolved, self.retention_days))},
            "body": {"S": resolved.model_dump_json()}})

    def recent(self, policy: str, limit: int = RECENT) -> list[ResolvedItem]:
        """The policy's latest `limit` resolved items of each kind, newest first."""
        rows: list[ResolvedItem] = []
        for each in get_args(Kind):
            pages = self.client.get_paginator("query").paginate(
                TableName=self.table_name, KeyConditionExpression="#p = :p AND begins_with(#k, :k)",
                ScanIndexForward=False, ExpressionAttributeNames={"#p": "policy", "#k": "resolved_key"},
                ExpressionAttributeValues={":p": {"S": policy}, ":k": {"S": f"{each}#"}},
                ProjectionExpression="body", PaginationConfig={"MaxItems": limit})
            for page in pages:
                rows.extend(ResolvedItem.model_validate_json(row["body"]["S"]) for row in page["Items"])
        return sorted(rows, key=lambda row: (row.resolved_at, row.item_id), reverse=True)
