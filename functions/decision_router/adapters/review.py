"""Review side of AWS: SendTaskSuccess (and the close of a resolved incident's review), the audit
trail, and the labelled-examples table the workflow fills. Pending reviews are the pending-review
index's (adapters/pending_reviews.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from pydantic import ValidationError

from ..domain.records import AUDIT_SHARDS, AuditRow, ReviewAnswer
from ..validation import describe_errors
from . import AwsAdapter, expiry
from .shards import every_shard, in_parallel

GONE_CODES = {"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"}


class ReviewTaskGone(RuntimeError):
    """The task token no longer accepts an answer (timed out, already completed, or malformed)."""


class ReviewTasks(AwsAdapter):
    service = "stepfunctions"

    def complete(self, task_token: str, output: ReviewAnswer) -> None:
        try:
            self.client.send_task_success(taskToken=task_token, output=output.model_dump_json())
        except self.client.exceptions.ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in GONE_CODES:
                raise ReviewTaskGone(f"the review can no longer be completed ({code}): it timed out, "
                                     "was already completed, or the token is wrong") from error
            raise


    def close_resolved(self, task_token: str, reason: str) -> None:
        """End a pending review because the incident was resolved at its source: the workflow
        audits it as resolved_at_source (its IncidentResolved catch)."""
        try:
            self.client.send_task_failure(taskToken=task_token, error="IncidentResolved", cause=reason[:32_000])
        except self.client.exceptions.ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in GONE_CODES:
                raise ReviewTaskGone(f"the review can no longer be closed ({code})") from error
            raise


class AuditTrail(AwsAdapter):
    """Reads the audit table the workflow writes: one row per outcome (JSON strings for the
    structured fields). RECENT_INDEX orders the rows of one outcome by time, spread over
    AUDIT_SHARDS keys (`outcome_shard`, `<outcome>#<n>`), with RECENT_COLUMNS alone; LINK_INDEX,
    sparse, holds the rows of linked tickets alone, by their incident's id. Every read here is a
    Query or a GetItem but `all` (a replay's export).

    `unsharded_index` (UNSHARDED_INDEX, where the stack keeps it: AuditOutcomeIndex) keys the rows by
    their outcome alone: it lists the rows written before `outcome_shard` was, until
    `ops.backfill_audit_shards` has given them theirs. None (a stack without it): not read."""

    service = "dynamodb"
    RECENT_INDEX = "outcome_shard-audited_at"
    UNSHARDED_INDEX = "outcome-audited_at"
    LINK_INDEX = "linked_incident_id-audited_at"
    #: What RECENT_INDEX holds besides the keys (template.yaml's NonKeyAttributes): the columns
    #: `AuditRow` requires, and the record of a route the intake delivered itself, which a
    #: correction reads back (review_console/corrections.py).
    RECENT_COLUMNS = ("item_kind", "outcome", "outcome_detail", "route", "route_reason", "policy_name",
                      "policy_version", "decisions", "item", "decided_at", "routing_record")

    def __init__(self, table_name: str, client: Any = None, *, retention_days: int = 0,
                 unsharded_index: str | None = None):
        super().__init__(client)
        self.table_name = table_name
        self.retention_days = retention_days
        self.unsharded_index = unsharded_index

    def recent(self, outcome: str, limit: int = 50) -> list[AuditRow | Unreadable]:
        """The latest `limit` rows of this outcome (auto_routed, reviewed, ...), newest first: the
        latest `limit` of each shard, and of the unsharded index where it is read, all at once,
        merged. A row is in both while the unsharded one is kept: the sharded one's (RECENT_COLUMNS)
        is listed."""
        if limit < 1:
            return []
        reads = [(self.RECENT_INDEX, "outcome_shard", shard) for shard in every_shard(outcome, AUDIT_SHARDS)]
        if self.unsharded_index:
            reads.append((self.unsharded_index, "outcome", outcome))
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for rows in in_parallel(lambda read: self._latest(*read, limit), reads):
            for row in rows:
                found.setdefault(_key_of(row), row)  # the shards are read first
        newest = sorted(found.values(), key=_recency, reverse=True)[:limit]
        return [_audit_row(row) for row in newest]

    def _latest(self, index: str, key: str, value: str, limit: int) -> list[dict[str, Any]]:
        """The latest `limit` rows of one key of an index, newest first (read on past a page that
        DynamoDB's 1 MB ends before `limit` rows)."""
        pages = self.client.get_paginator("query").paginate(
            TableName=self.table_name, IndexName=index, KeyConditionExpression="#k = :v", ScanIndexForward=False,
            ExpressionAttributeNames={"#k": key}, ExpressionAttributeValues={":v": {"S": value}},
            PaginationConfig={"MaxItems": limit, "PageSize": limit})
        return [row for page in pages for row in page["Items"]][:limit]

    def of_item(self, item_id: str) -> list[AuditRow | Unreadable]:
        """Every row of one item (its routing, a correction, a review), in execution-name order."""
        response = self.client.query(TableName=self.table_name, KeyConditionExpression="item_id = :i",
                                     ExpressionAttributeValues={":i": {"S": item_id}})
        return [_audit_row(row) for row in response["Items"]]

    def all(self) -> list[AuditRow | Unreadable]:
        """Every row (a read-only scan, page by page): what a replay reads (an ops tool's export,
        never a request's read). A row that does not read
        is named in the list, so one damaged row does not hide the others."""
        return [_audit_row(row) for page in self.client.get_paginator("scan").paginate(
            TableName=self.table_name) for row in page["Items"]]

    def linked_to(self, incident_id: str) -> list[AuditRow]:
        """The rows of the tickets linked to the incident `incident_id`: a Query of the sparse
        link index (only linked rows are in it, by their incident's id), oldest first; each
        row's link read back and compared exactly. Rows audited before the index was kept have
        no `linked_incident_id` and are not listed."""
        rows = []
        for page in self.client.get_paginator("query").paginate(
                TableName=self.table_name, IndexName=self.LINK_INDEX, KeyConditionExpression="linked_incident_id = :id",
                ExpressionAttributeValues={":id": {"S": incident_id}}):
            for row in map(_audit_row, page["Items"]):
                if isinstance(row, Unreadable):
                    continue  # a row that does not read as the workflow writes it
                try:
                    linked = row.link()
                except ValueError:  # pydantic's ValidationError too
                    continue  # nor does its link
                if linked is not None and linked.incident_id == incident_id:
                    rows.append(row)
        return rows

    def write(self, row: AuditRow) -> bool:
        """Write one row (every field a string, with its shard of the index of recent rows), as the
        workflow's audit state does, only where none is: an audit row is never rewritten. False
        when it exists already (a retry's)."""
        item: dict[str, Any] = {key: {"S": value} for key, value in row.columns().items()}
        if self.retention_days:
            item["expires_at"] = {"N": str(expiry(self.retention_days))}
        try:
            self.client.put_item(TableName=self.table_name, Item=item, ConditionExpression="attribute_not_exists(item_id)")
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def row(self, item_id: str, execution_name: str) -> AuditRow | None:
        found = self.client.get_item(TableName=self.table_name, Key={
            "item_id": {"S": item_id}, "execution_name": {"S": execution_name}}).get("Item")
        return AuditRow.model_validate(_strings(found)) if found else None


def _strings(row: dict[str, Any]) -> dict[str, str]:
    return {key: value["S"] for key, value in row.items() if "S" in value}


def _key_of(row: dict[str, Any]) -> tuple[str, str]:
    return row["item_id"]["S"], row["execution_name"]["S"]


def _recency(row: dict[str, Any]) -> tuple[str, str, str]:
    """Newest first by `audited_at`; rows of one instant in a fixed order, by their key."""
    return (row["audited_at"]["S"], *_key_of(row))


@dataclass(frozen=True)
class Unreadable:
    """An audit row that does not read as the workflow writes it: its key and why, for the log."""

    item_id: str
    execution_name: str
    problem: str


def _audit_row(raw: dict[str, Any]) -> AuditRow | Unreadable:
    columns = _strings(raw)
    try:
        return AuditRow.model_validate(columns)
    except ValidationError as error:
        return Unreadable(columns.get("item_id", "?"), columns.get("execution_name", "?"),
                          "; ".join(describe_errors(error)))


class LabelledExamples(AwsAdapter):
    """Reads the table the workflow writes after each review (JSON strings for item/answers).
    SHARD_INDEX holds each row the workflow wrote since rows carried `label_shard` (the policy and
    one of LABEL_SHARDS shards, StoreLabelledExample's States.MathRandom(0, LABEL_SHARDS - 1)) by
    its `labelled_at`: `since` reads the new labels alone, a Query of each shard."""

    service = "dynamodb"
    SHARD_INDEX = "label_shard-labelled_at"
    LABEL_SHARDS = 8

    def __init__(self, table_name: str, client: Any = None):
        super().__init__(client)
        self.table_name = table_name

    def scan(self) -> Iterator[dict[str, str]]:
        for page in self.client.get_paginator("scan").paginate(TableName=self.table_name):
            for row in page["Items"]:
                yield _strings(row)

    def page(self, limit: int, after: dict[str, str] | None = None) -> tuple[list[dict[str, str]], dict[str, str] | None]:
        """Up to `limit` rows from after the key `after` (the last page's key), and the key to
        read the next page from (None at the end): one answer stays far below Lambda's 6 MB."""
        start = {"ExclusiveStartKey": {name: {"S": value} for name, value in after.items()}} if after else {}
        response = self.client.scan(TableName=self.table_name, Limit=limit, **start)
        last = response.get("LastEvaluatedKey")
        return [_strings(row) for row in response["Items"]], (_strings(last) if last else None)

    def since(self, policy_name: str, labelled_after: str) -> Iterator[dict[str, str]]:
        """The policy's labelled examples labelled after `labelled_after` (an ISO 8601 time as the
        workflow writes `labelled_at`; "" for all in the index): a Query of each shard of the shard
        index, never a read of older rows. Rows written before rows carried a shard are not in it
        (`of_policy` reads them)."""
        paginator = self.client.get_paginator("query")
        # DynamoDB refuses an empty string as a key's value: "" reads the whole shard
        after = " AND labelled_at > :t" if labelled_after else ""
        for shard in every_shard(policy_name, self.LABEL_SHARDS):
            values = {":s": {"S": shard}, **({":t": {"S": labelled_after}} if labelled_after else {})}
            for page in paginator.paginate(TableName=self.table_name, IndexName=self.SHARD_INDEX,
                                           KeyConditionExpression=f"label_shard = :s{after}",
                                           ExpressionAttributeValues=values):
                for row in page["Items"]:
                    yield _strings(row)

    def of_policy(self, policy_name: str) -> Iterator[dict[str, str]]:
        """Every labelled example of one policy (the table's partition for it)."""
        paginator = self.client.get_paginator("query")
        for page in paginator.paginate(TableName=self.table_name, KeyConditionExpression="policy_name = :p",
                                       ExpressionAttributeValues={":p": {"S": policy_name}}):
            for row in page["Items"]:
                yield _strings(row)
