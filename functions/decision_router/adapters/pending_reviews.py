"""The pending-review index (DynamoDB): one row per review the routing workflow waits for, keyed by
execution name, so opening, answering or closing a review is one GetItem and one DeleteItem, never
a look through a queue or an execution's history.

Only the index writer puts rows (its role alone has PutItem: functions/review_index_writer), so a
row is proof that its execution asked for that review with that task token. The workflow deletes
the row when the wait ends, however it ends; whoever completes the task deletes it too, on the
token it completed (a second answer then finds no row); `expires_at` (the table's TTL) is the
backstop. LANE_INDEX lists a lane, `<policy>#<class>#<shard>`, by due time and projects only the
listing's columns (review/pending.py says why lanes)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from ..domain.ports.review import ListedReview, PendingReviewRow
from ..domain.records import DecisionRecord
from . import AwsAdapter
from .shards import every_shard, in_parallel, shard_of, sharded

#: Partition keys per lane: a lane (one policy's reviews of one target) takes up to 2,000 review
#: requests a second; a listing reads every shard of every lane at once.
LANE_SHARDS = 2
#: A row outlives its review's timeout by this much before the TTL removes it (the backstop).
MARGIN_SECONDS = 86400
LANE_INDEX = "lane-due_at"


def row_of(item: dict[str, Any]) -> PendingReviewRow:
    """A table item (DynamoDB's typed attributes) as the row it was put from."""
    return PendingReviewRow(
        execution_name=item["execution_name"]["S"], task_token=item["task_token"]["S"],
        requested_at=item["requested_at"]["S"], due_at=item["due_at"]["S"], lane=item["lane"]["S"].rsplit("#", 1)[0],
        summary=item["summary"]["S"], record=DecisionRecord.model_validate_json(item["record"]["S"]))


class PendingReviewTable(AwsAdapter):
    service = "dynamodb"

    def __init__(self, table_name: str, client: Any = None, *, review_timeout_seconds: int = 86400):
        super().__init__(client)
        self.table_name = table_name
        self.keep_seconds = review_timeout_seconds + MARGIN_SECONDS

    def put(self, row: PendingReviewRow) -> bool:
        """The row, only where the execution has none (a retried write of the same request: False)."""
        requested = datetime.fromisoformat(row.requested_at.replace("Z", "+00:00"))
        item = {"execution_name": {"S": row.execution_name}, "task_token": {"S": row.task_token},
                "requested_at": {"S": row.requested_at}, "due_at": {"S": row.due_at},
                "lane": {"S": sharded(row.lane, shard_of(row.execution_name, LANE_SHARDS))},
                "summary": {"S": row.summary}, "record": {"S": row.record.model_dump_json()},
                "expires_at": {"N": str(int(requested.timestamp()) + self.keep_seconds)}}
        try:
            self.client.put_item(TableName=self.table_name, Item=item,
                                 ConditionExpression="attribute_not_exists(execution_name)")
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def get(self, execution_name: str) -> PendingReviewRow | None:
        found = self.client.get_item(TableName=self.table_name, ConsistentRead=True,
                                     Key={"execution_name": {"S": execution_name}}).get("Item")
        return row_of(found) if found else None

    def listing(self, lanes: Sequence[str], limit: int) -> list[ListedReview]:
        """The first `limit` rows by due time of each of `lanes` (every shard of each: one Query
        apiece, all at once), merged in due order."""
        def first(key: str) -> list[dict[str, Any]]:
            return self.client.query(TableName=self.table_name, IndexName=LANE_INDEX, Limit=limit,
                                     KeyConditionExpression="lane = :lane",
                                     ExpressionAttributeValues={":lane": {"S": key}})["Items"]
        keys = [key for base in lanes for key in every_shard(base, LANE_SHARDS)]
        rows = [ListedReview(execution_name=item["execution_name"]["S"], requested_at=item["requested_at"]["S"],
                             due_at=item["due_at"]["S"], summary=item["summary"]["S"])
                for page in in_parallel(first, keys) for item in page]
        return sorted(rows, key=lambda row: (row.due_at, row.execution_name))

    def remove(self, execution_name: str, task_token: str | None = None) -> bool:
        """Delete the execution's row (only while it holds `task_token`, when given); False when
        there was none to delete."""
        condition: dict[str, Any] = {"ConditionExpression": "attribute_exists(execution_name)"}
        if task_token is not None:
            condition = {"ConditionExpression": "task_token = :token",
                         "ExpressionAttributeValues": {":token": {"S": task_token}}}
        try:
            self.client.delete_item(TableName=self.table_name, Key={"execution_name": {"S": execution_name}},
                                    **condition)
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True
