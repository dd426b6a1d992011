"""The resolved-items store (DynamoDB): one row per resolved item of a policy, newest first, with
its vector; what the console reads to show an item's nearest resolved items.

Keyed `policy` + `resolved_key` (the resolution's time, then the item id), so the console reads
one policy's latest `RECENT` rows in one paginated query and compares them in memory: a compact
index, about 1 KB a row. docs/similar-items.md gives its cost and when a vector store (S3
Vectors) should take its place behind the same two methods.
"""

from __future__ import annotations

from typing import Any

from ..domain.similar import ResolvedItem
from . import AwsAdapter

#: Resolved items of a policy compared per lookup: the latest ones (about 1 MB, a fraction of a second).
RECENT = 2000


class ResolvedItems(AwsAdapter):
    service = "dynamodb"

    def __init__(self, table_name: str, client: Any = None):
        super().__init__(client)
        self.table_name = table_name

    def remember(self, resolved: ResolvedItem) -> None:
        """Keep one resolved item (a second resolution of the item, a correction, is a second row)."""
        self.client.put_item(TableName=self.table_name, Item={
            "policy": {"S": resolved.policy},
            "resolved_key": {"S": f"{resolved.resolved_at}#{resolved.item_id}"},
            "item_id": {"S": resolved.item_id},
            "body": {"S": resolved.model_dump_json()}})

    def recent(self, policy: str, limit: int = RECENT) -> list[ResolvedItem]:
        """The policy's latest `limit` resolved items, newest first."""
        rows: list[ResolvedItem] = []
        pages = self.client.get_paginator("query").paginate(
            TableName=self.table_name, KeyConditionExpression="#p = :p", ScanIndexForward=False,
            ExpressionAttributeNames={"#p": "policy"}, ExpressionAttributeValues={":p": {"S": policy}},
            ProjectionExpression="body", PaginationConfig={"MaxItems": limit})
        for page in pages:
            rows.extend(ResolvedItem.model_validate_json(row["body"]["S"]) for row in page["Items"])
        return rows
