"""Review side of AWS: the review queue (messages carry a task token and the decision record),
SendTaskSuccess, and the labelled-examples table the workflow fills."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from pydantic import ValidationError

from ..domain.records import AuditRow, ReviewAnswer
from ..review.completion import InvalidReview, PendingReview
from ..validation import describe_errors
from . import AwsAdapter, expiry
from .queues import new_batches, release_now

PEEK_SECONDS = 5
#: Long polling: a receive waits this long for messages before answering empty.
POLL_SECONDS = 2
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


@dataclass
class Malformed:
    """A review-queue message that is not a review request (left on the queue, reported)."""

    message_id: str
    problem: str


@dataclass(frozen=True)
class QueuedReview:
    """A pending review as it sits on the review queue: the request, and the receipt handle that
    removes its message once answered."""

    review: PendingReview
    receipt_handle: str


@dataclass
class Pending:
    reviews: list[QueuedReview] = field(default_factory=list)
    malformed: list[Malformed] = field(default_factory=list)


class ReviewQueue(AwsAdapter):
    """Pending reviews: the workflow's `{task_token, execution_name, requested_at, record}` messages."""

    service = "sqs"

    def __init__(self, queue_url: str, client: Any = None):
        super().__init__(client)
        self.queue_url = queue_url

    def pending(self, limit: int = 50) -> Pending:
        """Peek at up to `limit` pending reviews, hiding each only briefly from other reviewers.

        Each message is received once per call (a short visibility timeout keeps it out of the
        following receives), so a listing neither repeats items nor hides them for long. Every
        receive long-polls: a short poll samples only some SQS servers and can come back empty
        while reviews wait. A message that is not a review request is reported, never fatal."""
        found = Pending()
        for batch in new_batches(self.client, self.queue_url, visibility=PEEK_SECONDS, wait=POLL_SECONDS):
            for message in batch:
                try:
                    review = PendingReview.from_message(message["Body"])
                except InvalidReview as error:
                    found.malformed.append(Malformed(message["MessageId"], str(error)))
                    continue
                found.reviews.append(QueuedReview(review, message["ReceiptHandle"]))
            if len(found.reviews) >= limit:
                break
        found.reviews = found.reviews[:limit]
        return found

    def remove(self, receipt_handle: str) -> None:
        self.client.delete_message(QueueUrl=self.queue_url, ReceiptHandle=receipt_handle)

    def release(self, reviews: list[QueuedReview]) -> None:
        """Make peeked messages visible again at once (a listing must not hide the items it shows
        from the reviewer who opens one of them a second later)."""
        release_now(self.client, self.queue_url, [q.receipt_handle for q in reviews])

    def find(self, execution_name: str, *, limit: int = 1000, tries: int = 3) -> QueuedReview | None:
        """The pending review of this execution (its message held for PEEK_SECONDS), the others
        released; None when no message of it is on the queue. A message another reviewer's
        listing hides for a moment is looked for again, `tries` times in all."""
        for _ in range(tries):
            found = self.pending(limit=limit).reviews
            mine = [q for q in found if q.review.execution_name == execution_name]
            self.release([q for q in found if q.review.execution_name != execution_name])
            if mine:
                return mine[0]
        return None


class AuditTrail(AwsAdapter):
    """Reads the audit table the workflow writes: one row per outcome (JSON strings for the
    structured fields). RECENT_INDEX orders the rows of one outcome by time; LINK_INDEX, sparse,
    holds the rows of linked tickets alone, by their incident's id. Every read here is a Query or
    a GetItem but `all` (a replay's export)."""

    service = "dynamodb"
    RECENT_INDEX = "outcome-audited_at"
    LINK_INDEX = "linked_incident_id-audited_at"

    def __init__(self, table_name: str, client: Any = None, *, retention_days: int = 0):
        super().__init__(client)
        self.table_name = table_name
        self.retention_days = retention_days

    def recent(self, outcome: str, limit: int = 50) -> list[AuditRow | Unreadable]:
        """The latest `limit` rows of this outcome (auto_routed, reviewed, ...), newest first."""
        response = self.client.query(TableName=self.table_name, IndexName=self.RECENT_INDEX, Limit=limit,
                                     KeyConditionExpression="outcome = :o", ScanIndexForward=False,
                                     ExpressionAttributeValues={":o": {"S": outcome}})
        return [_audit_row(row) for row in response["Items"]]

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
        """Write one row (every field a string), as the workflow's audit state does, only where
        none is: an audit row is never rewritten. False when it exists already (a retry's)."""
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
    """Reads the table the workflow writes after each review (JSON strings for item/answers)."""

    service = "dynamodb"

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

    def of_policy(self, policy_name: str) -> Iterator[dict[str, str]]:
        """Every labelled example of one policy (the table's partition for it)."""
        paginator = self.client.get_paginator("query")
        for page in paginator.paginate(TableName=self.table_name, KeyConditionExpression="policy_name = :p",
                                       ExpressionAttributeValues={":p": {"S": policy_name}}):
            for row in page["Items"]:
                yield _strings(row)
