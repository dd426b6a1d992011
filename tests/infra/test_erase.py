"""`make erase ITEM=kind:source:id` (ops/erase.py): one item's rows removed from every table of the
real template that holds its text (created in moto from template.yaml), each table's count
reported; the same id from another source, and every other item, left as they were."""

from __future__ import annotations

import functools
import io
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters import queues
from decision_router.adapters.escalations import SlaEscalations
from decision_router.adapters.head_store import HeadStore
from decision_router.adapters.link_index import FILED_COUNT, LOOKUP_ROW, filed_on
from decision_router.adapters.open_incidents import OpenIncidents
from decision_router.adapters.pending_reviews import PendingReviewTable
from decision_router.adapters.review import AuditTrail, LabelledExamples
from decision_router.adapters.similar_items import ResolvedItems
from decision_router.domain.kept_labels import KeptLabels, labels_key
from decision_router.domain.linking import filing_keys
from decision_router.domain.policies import load_policy
from decision_router.domain.records import AuditRow, DecisionRecord
from decision_router.domain.similar import resolved_item
from decision_router.items import parse_item
from decision_router.review.completion import PendingReview
from decision_router.review.pending import pending_row
from local.cloudformation import Stack
from ops import erase, erase_queues
from relearning.labels import sync_labels
from tests.functions.conftest import ALL_TARGETS, unsure_ticket

REPO = Path(__file__).resolve().parents[2]
ERASED = ["AuditTable", "LabelledExamplesTable", "ResolvedItemsTable", "OpenIncidentsTable", "IdempotencyTable",
          "PendingReviewsTable"]
#: Tables that hold no item text: a webhook delivery's hash and source; heads and shadow tallies.
NO_ITEM_TEXT = {"WebhookDeliveriesTable", "HeadHistoryTable"}
DESTINATIONS = {t: f"https://sqs.us-east-1.amazonaws.com/123456789012/{t}" for t in ALL_TARGETS}


@pytest.fixture(autouse=True)
def no_long_poll(monkeypatch):
    """moto answers a receive at once: the long poll that ends each read of a queue (a second of
    SQS's time, to reach every server) would only wait out its second here, per queue and run."""
    monkeypatch.setattr(erase_queues, "new_batches", functools.partial(queues.new_batches, wait=0))


def test_every_table_of_the_template_is_erased_or_holds_no_item_text():
    tables = {name for name, r in Stack.load().template["Resources"].items() if r["Type"] == "AWS::DynamoDB::Table"}
    assert tables == set(ERASED) | NO_ITEM_TEXT
    assert {f"{name}Name" for name in ERASED} == set(erase.TABLES.values())


def ticket_record(ticket_id: str, channel: str = "email") -> DecisionRecord:
    record = unsure_ticket(ticket_id, destinations=DESTINATIONS)
    item = {**record.item, "channel": channel}
    return record.model_copy(update={"item": item, "item_key": parse_item("ticket", item).key})


def audit_row(record: DecisionRecord, execution: str) -> AuditRow:
    return AuditRow(item_id=record.item_id, execution_name=execution, item_kind=record.item_kind, outcome="reviewed",
                    outcome_detail="{}", route=record.route, route_reason=record.route_reason,
                    policy_name=record.policy.name, policy_version=record.policy.version, decisions="[]",
                    item=json.dumps(record.item), decided_at=record.decided_at, audited_at="2026-12-01T10:00:00Z")


def labelled_row(record: DecisionRecord) -> dict[str, Any]:
    """A row as the workflow's StoreLabelledExample state writes it (its columns)."""
    return {"policy_name": {"S": record.policy.name}, "item_key": {"S": record.item_key},
            "item_id": {"S": f"{record.item_id}-{record.item['channel']}"},
            "item_kind": {"S": record.item_kind}, "item": {"S": json.dumps(record.item)}, "answers": {"S": "{}"},
            "reviewer": {"S": "alice"}, "labelled_at": {"S": "2026-12-01T10:00:00Z"}}


@pytest.fixture
def stack():
    with mock_aws():
        yield Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}).create(only=ERASED)


def test_erase_removes_the_items_rows_from_every_table_and_reports_each(stack):
    dynamodb = boto3.client("dynamodb")
    mine, same_id_other_source, other = ticket_record("T-1"), ticket_record("T-1", "chat"), ticket_record("T-2")
    audit, resolved = AuditTrail(stack.ref("AuditTable")), ResolvedItems(stack.ref("ResolvedItemsTable"))
    policy = load_policy("support-ticket")
    for minute, record in enumerate((mine, same_id_other_source, other)):
        for n in (1, 2):
            audit.write(audit_row(record, f"{record.item_id}-{record.item['channel']}-{n}"))
        dynamodb.put_item(TableName=stack.ref("LabelledExamplesTable"), Item=labelled_row(record))
        kept = resolved_item(policy, parse_item("ticket", record.item), {"queue": "billing"}, resolved_by="alice",
                             resolved_at=f"2026-12-01T10:0{minute}:00.000+00:00")
        assert kept is not None
        resolved.remember(kept)
        dynamodb.put_item(TableName=stack.ref("IdempotencyTable"), Item={
            "id": {"S": f"intake#{record.item_key}"}, "status": {"S": "COMPLETED"}, "data": {"S": record.model_dump_json()}})
    incidents = OpenIncidents(stack.ref("OpenIncidentsTable"))
    for key, delivery, service, title in (("cloudwatch#arn:alarm:db", "d-1", "orders-db", "orders database latency high"),
                                          ("cloudwatch#arn:alarm:api", "d-2", "orders-api", "orders api errors")):
        incidents.claim(key, delivery, incident_id=key.split("#", 1)[1], source="cloudwatch", service=service,
                        reported_at="2026-12-01T10:00:00Z", title=title)
        incidents.file(key, filing_keys(service, title, None), "2026-12-01T10:00:00Z")
    # Pending reviews: the item's is stopped (its execution waits on the token) and deleted.
    states = boto3.client("stepfunctions")
    machine = states.create_state_machine(name="routing", roleArn="arn:aws:iam::123456789012:role/r", definition=json.dumps(
        {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}))["stateMachineArn"]
    execution = states.start_execution(stateMachineArn=machine, name="ticket-T-1-idx")["executionArn"]
    index = PendingReviewTable(stack.ref("PendingReviewsTable"))
    for record, name in ((mine, "ticket-T-1-idx"), (other, "ticket-T-2-idx")):
        index.put(pending_row(PendingReview(task_token="tok", execution_name=name, record=record), policy,
                              review_timeout_seconds=3600))
    names = ["--audit-table", stack.ref("AuditTable"), "--labelled-table", stack.ref("LabelledExamplesTable"),
             "--resolved-table", stack.ref("ResolvedItemsTable"), "--open-incidents-table", stack.ref("OpenIncidentsTable"),
             "--idempotency-table", stack.ref("IdempotencyTable"),
             "--pending-reviews-table", stack.ref("PendingReviewsTable"), "--state-machine-arn", machine]

    dry = io.StringIO()
    assert erase.main(["ticket:email:T-1", *names, "--dry-run"], out=dry, session=boto3.Session()) == 0
    assert "audit: 2 row(s) found (dry run, nothing removed)" in dry.getvalue()
    assert len(audit.of_item("T-1")) == 4  # nothing removed

    out = io.StringIO()
    assert erase.main(["ticket:email:T-1", *names], out=out, session=boto3.Session()) == 0
    assert out.getvalue().splitlines() == [
        "erase ticket:email:T-1", "audit: 2 row(s) removed", "labelled: 1 row(s) removed",
        "resolved: 1 row(s) removed",  # by kind, source and id: the other source's row of the same id stays
        "open-incidents: 0 row(s) removed", "idempotency: 1 row(s) removed", "pending-reviews: 1 row(s) removed",
        UNREAD_KEPT_LABELS,
        *(f"not read: {name} (no --{name}-url: its messages, the item's text among them, are kept up to 14 days)"
          for name in erase.HELD_QUEUES)]
    # The other source's item and every other item are as they were.
    assert sorted(json.loads(r.item)["channel"] for r in audit.of_item("T-1")) == ["chat", "chat"]  # type: ignore[union-attr]
    assert len(audit.of_item("T-2")) == 2
    labelled = dynamodb.scan(TableName=stack.ref("LabelledExamplesTable"))["Items"]
    assert sorted(r["item_id"]["S"] for r in labelled) == ["T-1-chat", "T-2-email"]
    assert sorted((r.item_id, r.item_source) for r in resolved.recent("support-ticket")) == [("T-1", "chat"), ("T-2", "email")]
    idempotency = dynamodb.scan(TableName=stack.ref("IdempotencyTable"))["Items"]
    assert len(idempotency) == 2 and all("T-1:" not in r["id"]["S"] or ":chat:" in r["id"]["S"] for r in idempotency)
    assert states.describe_execution(executionArn=execution)["status"] == "ABORTED"
    assert (index.get("ticket-T-1-idx"), index.get("ticket-T-2-idx") is not None) == (None, True)

    # An incident: its open-incident row goes, the other alarm's stays.
    out = io.StringIO()
    assert erase.main(["incident:cloudwatch:arn:alarm:db", *names], out=out, session=boto3.Session()) == 0
    assert "open-incidents: 1 row(s) removed" in out.getvalue()
    rows = dynamodb.scan(TableName=stack.ref("OpenIncidentsTable"))["Items"]
    assert [r["incident_id"]["S"] for r in rows if "incident_id" in r] == ["arn:alarm:api"]
    # off the link index: no row keyed by its words alone is left, a shared word lists the other alone
    lookups = [r for r in rows if r["incident_key"]["S"].startswith(LOOKUP_ROW)]
    filed = {r["incident_key"]["S"]: set(filed_on(r)) for r in lookups}
    assert filed and all(keys == {"cloudwatch#arn:alarm:api"} for keys in filed.values()), filed
    assert all(r[FILED_COUNT] == {"N": "1"} for r in lookups), lookups
    assert not [key for key in filed if "latency" in key or "database" in key]


def kept_versions(s3: Any, bucket: str, key: str) -> list[KeptLabels]:
    """Every version of a kept-labels object, newest first."""
    listed = s3.list_object_versions(Bucket=bucket, Prefix=key).get("Versions", [])
    return [KeptLabels.load(s3.get_object(Bucket=bucket, Key=key, VersionId=v["VersionId"])["Body"].read(), key)
            for v in listed]


def test_erase_rewrites_the_kept_labels_without_the_items_rows_and_deletes_the_versions_that_hold_them():
    """Relearning keeps the labels it has read in the head bucket (relearning/labels.py): erased,
    the item's row is gone from the current copy and from every earlier version, the other rows and
    the watermark stay, and the next relearning sync reads only the labels new since it."""
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}).create(
            only=["LabelledExamplesTable", "HeadBucket"])
        dynamodb, s3 = boto3.client("dynamodb"), boto3.client("s3")
        table, bucket = stack.ref("LabelledExamplesTable"), stack.ref("HeadBucket")
        labels, store = LabelledExamples(table), HeadStore(bucket, "/test/heads", "history")
        now = datetime(2026, 12, 2, tzinfo=timezone.utc).timestamp()

        def sync(at: float, policy: str = "support-ticket") -> Any:
            return sync_labels(store, labels, policy, now=at, retention_days=365, full_read_after_seconds=86400)

        mine, same_id_other_source, other = ticket_record("T-1"), ticket_record("T-1", "chat"), ticket_record("T-2")
        for record in (mine, other):
            dynamodb.put_item(TableName=table, Item=labelled_row(record))
        sync(now)  # the first: the partition read whole
        later = {**labelled_row(same_id_other_source), "labelled_at": {"S": "2026-12-01T11:00:00Z"},
                 "label_shard": {"S": "support-ticket#3"}}
        dynamodb.put_item(TableName=table, Item=later)
        assert sync(now + 60).read == 1  # a second version: the new label, from the shard index
        sync(now, "incident")  # another policy's object, without the item
        key, incidents = labels_key("support-ticket"), labels_key("incident")
        before, incidents_before = kept_versions(s3, bucket, key), kept_versions(s3, bucket, incidents)
        assert len(before) == 2 and all(mine.item_key in v.rows for v in before)
        names = ["--labelled-table", table, "--head-bucket", bucket]

        dry = io.StringIO()
        assert erase.main(["ticket:email:T-1", *names, "--dry-run"], out=dry, session=boto3.Session()) == 0
        assert "kept-labels: 1 row(s) found (dry run, nothing removed)" in dry.getvalue()
        assert "kept-labels: 2 earlier version(s) found (dry run, nothing removed)" in dry.getvalue()
        assert kept_versions(s3, bucket, key) == before

        out = io.StringIO()
        assert erase.main(["ticket:email:T-1", *names], out=out, session=boto3.Session()) == 0
        assert out.getvalue().splitlines()[1:4] == [
            "labelled: 1 row(s) removed", "kept-labels: 1 row(s) removed", "kept-labels: 2 earlier version(s) removed"]
        [current] = kept_versions(s3, bucket, key)  # every version that held the item is gone
        assert sorted(current.rows) == sorted([same_id_other_source.item_key, other.item_key])
        assert current.rows[other.item_key] == before[0].rows[other.item_key]
        assert (current.watermark, current.full_read_at) == (before[0].watermark, before[0].full_read_at)
        assert current.watermark == "2026-12-01T11:00:00Z"
        assert kept_versions(s3, bucket, incidents) == incidents_before  # held no row of the item: left
        assert "note:" not in out.getvalue()

        # The next relearning sync reads only what is new since the watermark, and not the item.
        synced = sync(now + 120)
        assert (synced.read, synced.full_read) == (0, False)
        assert mine.item_key not in {row["item_key"] for row in synced.rows} and len(synced.rows) == 2

        again = io.StringIO()
        assert erase.main(["ticket:email:T-1", *names], out=again, session=boto3.Session()) == 0
        assert "kept-labels: 0 row(s) removed" in again.getvalue()
        assert "kept-labels: 0 earlier version(s) removed" in again.getvalue()


class ErasedWhileSyncing(HeadStore):
    """The head store as a relearning sync sees it when `make erase` runs between its read of the
    kept labels and its write: erase runs just before the sync's (conditional) write."""

    def __init__(self, erase_names: list[str], *args: Any) -> None:
        super().__init__(*args)
        self.erase_names, self.erased = erase_names, io.StringIO()
        self.written: list[bool] = []

    def put_unless_changed(self, key: str, data: bytes, etag: str | None) -> bool:
        if not self.erased.getvalue():
            assert erase.main(["ticket:email:T-1", *self.erase_names], out=self.erased, session=boto3.Session()) == 0
        written = super().put_unless_changed(key, data, etag)
        self.written.append(written)
        return written


@pytest.mark.parametrize("kept_before", [True, False], ids=["kept-labels", "first-sync"])
def test_a_relearning_sync_under_way_during_an_erasure_never_writes_the_item_back(kept_before):
    """S3's If-Match (If-None-Match for the first sync) in moto: the sync that read the labels, and
    the table, before the erasure meets the version erase wrote, starts over and keeps the item out."""
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}).create(
            only=["LabelledExamplesTable", "HeadBucket"])
        dynamodb, s3 = boto3.client("dynamodb"), boto3.client("s3")
        table, bucket = stack.ref("LabelledExamplesTable"), stack.ref("HeadBucket")
        labels = LabelledExamples(table)
        now = datetime(2026, 12, 2, tzinfo=timezone.utc).timestamp()
        mine, other = ticket_record("T-1"), ticket_record("T-2")
        for record in (mine, other):
            dynamodb.put_item(TableName=table, Item=labelled_row(record))
        if kept_before:
            sync_labels(HeadStore(bucket, "/test/heads", "history"), labels, "support-ticket", now=now - 3600,
                        retention_days=365, full_read_after_seconds=86400)
        later = {**labelled_row(ticket_record("T-3")), "labelled_at": {"S": "2026-12-01T11:00:00Z"},
                 "label_shard": {"S": "support-ticket#3"}}
        dynamodb.put_item(TableName=table, Item=later)  # a new label: the sync has something to write
        store = ErasedWhileSyncing(["--labelled-table", table, "--head-bucket", bucket], bucket, "/test/heads", "history")

        synced = sync_labels(store, labels, "support-ticket", now=now, retention_days=365, full_read_after_seconds=86400)

        assert "labelled: 1 row(s) removed" in store.erased.getvalue()
        assert store.written == [False, True] and synced.restarts == 1
        assert mine.item_key not in {row["item_key"] for row in synced.rows} and len(synced.rows) == 2
        for version in kept_versions(s3, bucket, labels_key("support-ticket")):
            assert mine.item_key not in version.rows
        assert "note:" not in store.erased.getvalue()


def test_a_kept_labels_version_that_does_not_read_is_named_and_left():
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}).create(only=["HeadBucket"])
        s3, bucket = boto3.client("s3"), stack.ref("HeadBucket")
        s3.put_object(Bucket=bucket, Key=labels_key("support-ticket"), Body=b"not gzip")
        out = io.StringIO()
        assert erase.main(["ticket:email:T-1", "--head-bucket", bucket], out=out, session=boto3.Session()) == 0
        assert "kept-labels: 0 row(s) removed" in out.getvalue()
        assert "note: kept-labels: labels/support-ticket.jsonl.gz (version " in out.getvalue()
        assert "not the labels relearning keeps" in out.getvalue()
        assert len(s3.list_object_versions(Bucket=bucket)["Versions"]) == 1


def test_the_review_sla_escalation_marks_hold_no_item_text_and_erase_leaves_them(stack):
    marks = SlaEscalations(stack.ref("IdempotencyTable"), review_timeout_seconds=3600)
    assert marks.claim_page("ticket-T-1-abc123")
    marks.sent("ticket-T-1-abc123")
    table = stack.ref("IdempotencyTable")
    rows = boto3.client("dynamodb").scan(TableName=table)["Items"]
    assert len(rows) == 1 and "T-1" not in json.dumps(rows)

    out = io.StringIO()
    assert erase.main(["ticket:email:T-1", "--idempotency-table", table], out=out, session=boto3.Session()) == 0
    assert "idempotency: 0 row(s) removed" in out.getvalue()
    assert boto3.client("dynamodb").scan(TableName=table)["Items"] == rows


@pytest.mark.parametrize(("item", "why"), [
    ("T-1", "the kind 'T-1' is not one of incident, ticket"),
    ("ticket:email", "expected kind:source:id"),
    ("ticket::T-1", "expected kind:source:id"),
])
def test_an_item_key_that_is_not_kind_source_id_is_refused_with_the_reason(item, why, capsys):
    assert erase.main([item, "--audit-table", "audit"], session=object()) == 2
    assert why in capsys.readouterr().err


def test_a_stack_names_every_table_queue_and_the_state_machine_by_its_outputs():
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})
        outputs = stack.outputs()
    wanted = {*erase.TABLES.values(), *erase.HELD_QUEUES.values(), "RoutingStateMachineArn",
              erase.HEAD_BUCKET}
    assert wanted <= set(outputs)


@pytest.mark.stack
def test_erasing_an_open_parent_takes_it_out_of_its_slots_and_its_held_children_are_decided_next(monkeypatch):
    """An open incident that pages and holds a dependant: erased, it holds nothing new, the erase
    says what it held, and the held child is decided at its next event (or the sweep): its
    parent is gone. Before, the child stayed held for ever and the slot still named the parent."""
    from tests.fakes.worlds import MotoWorld
    from tests.functions.test_dependencies import ARN, alarm, deliver, make_flow

    with mock_aws():
        world = MotoWorld()
        flow = make_flow(world, monkeypatch)
        db = deliver(flow, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
        assert deliver(flow, alarm("checkout-5xx", "medium", "ALARM", 1, 2, service="checkout"))["outcome"] == "held"
        table = world.environment("IncidentIntakeFunction")["OPEN_INCIDENTS_TABLE_NAME"]
        erased = erase.Eraser(erase.ItemKey("incident", "aws.cloudwatch", db["incident_id"]), {"open-incidents": table},
                              dynamodb=boto3.client("dynamodb"), sqs=boto3.client("sqs"),
                              stepfunctions=boto3.client("stepfunctions")).erase()
        out = io.StringIO()
        erased.report(out)
        assert [line for line in out.getvalue().splitlines() if not line.startswith("not read: ")] == [
            "open-incidents: 1 row(s) removed",
            f"note: {ARN}orders-db-cpu held 1 incident(s) ({ARN}checkout-5xx): the incident intake's sweep decides "
            "and routes them within 5 minutes, their parent gone"]
        assert flow.store.parents("parent#service#orders-db") == []  # it holds nothing new
        again = deliver(flow, alarm("checkout-5xx", "medium", "ALARM", 5, 3, service="checkout"))
        assert again["outcome"] == "routed" and "its parent incident is gone" in again["reason"]


def test_every_queue_of_the_template_that_keeps_item_text_is_erased():
    """Each dead-letter and escalation queue keeps what it is sent up to 14 days: erase reads them
    all (the notification DLQ keeps EventBridge's failed pages, the relearning DLQ its runs)."""
    template = Stack.load().template
    queues = {name for name, r in template["Resources"].items() if r["Type"] == "AWS::SQS::Queue"
              and any(word in name for word in ("DeadLetter", "Escalation"))}
    erased = {output.removesuffix("Url") for output in erase.HELD_QUEUES.values()}
    assert queues - erased == {"NotificationDeadLetterQueue", "RelearningDeadLetterQueue"}


def test_each_queue_erase_reads_keeps_messages_as_long_as_it_says_a_queue_not_read_keeps_them():
    """What `not read:` says of a queue that was not named (14 days) is the template's retention."""
    resources = Stack.load().template["Resources"]
    for output in erase.HELD_QUEUES.values():
        retention = resources[output.removesuffix("Url")]["Properties"]["MessageRetentionPeriod"]
        assert int(retention) == erase.QUEUE_RETENTION_DAYS * 86400, output


def sample(name: str) -> dict:
    return json.loads((REPO / "events" / f"{name}.json").read_text())


def sns(message: str) -> str:
    return json.dumps({"Type": "Notification", "MessageId": "m-1", "TopicArn": "arn:aws:sns:us-east-1:123456789012:t",
                       "Message": message})


def team_message(record: DecisionRecord) -> str:
    """A team queue's message as the workflow's DeliverToDestination state sends it."""
    body = json.loads(record.model_dump_json())
    return json.dumps({key: body[key] for key in ("item_kind", "item_id", "item", "route", "route_reason", "policy",
                                                   "decisions")} | {"target": "billing", "execution_name": "e-1"})


def failed(record: DecisionRecord, execution: str) -> str:
    """A workflow DLQ message as SendToDeadLetterQueue sends it."""
    return json.dumps({"error": {"Error": "States.TaskFailed", "Cause": "x"}, "execution_name": execution,
                       "execution_arn": f"arn:aws:states:us-east-1:123456789012:execution:routing:{execution}",
                       "failed_at": "2026-12-01T10:00:00Z", "record": json.loads(record.model_dump_json())})


def overdue(record: DecisionRecord, execution: str) -> str:
    """An escalation queue message as EscalateOverdueReview sends it."""
    return json.dumps({"reason": "review_overdue", "item_kind": record.item_kind, "item_id": record.item_id,
                       "execution_name": execution, "record": json.loads(record.model_dump_json())})


def lambda_failure(event: dict) -> str:
    """The incident intake's on-failure destination record (an asynchronous invoke that failed)."""
    return json.dumps({"version": "1.0", "requestContext": {"condition": "RetriesExhausted"},
                       "requestPayload": event, "responsePayload": {"errorMessage": "boom"}})


def visible(sqs, queue: str) -> list[str]:
    """Every message of the queue visible now (read until none is left, then made visible again)."""
    read: list[dict] = []
    while messages := sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=600,
                                          WaitTimeSeconds=0).get("Messages", []):
        read += messages
    for message in read:
        sqs.change_message_visibility(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    return [message["Body"] for message in read]


UNREAD_KEPT_LABELS = ("not read: kept-labels (no --head-bucket: relearning's copy of the labelled examples, the item's "
                      "among them, keeps a label up to LabelRetentionDays)")


def test_erase_removes_the_items_messages_from_the_dead_letter_and_escalation_queues():
    """Each queue, each in the shape that writes it: the item's messages go, the same id from
    another source and every other item's message stay, visible again at once (no wait for their
    visibility timeout); a dry run counts and leaves all of them visible."""
    held = [output.removesuffix("Url") for output in erase.HELD_QUEUES.values()]
    with mock_aws():
        # A stack name of its own: an execution another test left running in moto's background
        # threads may still dead-letter its record into the stack's workflow DLQ of that name.
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"},
                           stack_name="erase-queues").create(only=held)
        sqs = boto3.client("sqs")
        url = {name: stack.ref(output.removesuffix("Url")) for name, output in erase.HELD_QUEUES.items()}
        mine, same_id_other_source, other = ticket_record("T-1"), ticket_record("T-1", "chat"), ticket_record("T-2")
        keep = {  # the messages that stay, per queue
            "ticket-dlq": [json.dumps(other.item), json.dumps(same_id_other_source.item), "not json"],
            "team-dlq": [team_message(other)],
            "workflow-dlq": [failed(same_id_other_source, "ticket-T-1-chat")],
            "escalation-queue": [overdue(other, "ticket-T-2-x")],
            "incident-dlq": [json.dumps(sample("cloudwatch_alarm_state_change"))],
        }
        gone = {  # the ticket T-1's messages
            "ticket-dlq": [json.dumps(mine.item), sns(json.dumps(mine.item))],  # bare, or in an SNS notification
            "team-dlq": [team_message(mine)],
            "workflow-dlq": [failed(mine, "ticket-T-1-abc")],
            "escalation-queue": [overdue(mine, "ticket-T-1-abc")],
            "incident-dlq": [],
        }
        for name in erase.HELD_QUEUES:
            for body in gone[name] + keep[name]:
                sqs.send_message(QueueUrl=url[name], MessageBody=body)
        flags = [arg for name in erase.HELD_QUEUES for arg in (f"--{name}-url", url[name])]

        dry = io.StringIO()
        assert erase.main(["ticket:email:T-1", *flags, "--dry-run"], out=dry, session=boto3.Session()) == 0
        assert dry.getvalue().splitlines()[1:] == [
            *(f"{name}: {len(gone[name])} row(s) found (dry run, nothing removed)" for name in erase.HELD_QUEUES),
            UNREAD_KEPT_LABELS]
        for name in erase.HELD_QUEUES:  # all there, visible again at once
            assert sorted(visible(sqs, url[name])) == sorted(gone[name] + keep[name]), name

        out = io.StringIO()
        assert erase.main(["ticket:email:T-1", *flags], out=out, session=boto3.Session()) == 0
        assert out.getvalue().splitlines() == ["erase ticket:email:T-1", "ticket-dlq: 2 row(s) removed",
                                               "incident-dlq: 0 row(s) removed", "team-dlq: 1 row(s) removed",
                                               "workflow-dlq: 1 row(s) removed", "escalation-queue: 1 row(s) removed",
                                               UNREAD_KEPT_LABELS]
        for name in erase.HELD_QUEUES:  # the others stay, visible again at once
            assert sorted(visible(sqs, url[name])) == sorted(keep[name]), name
        out = io.StringIO()
        assert erase.main(["ticket:email:T-1", *flags], out=out, session=boto3.Session()) == 0
        assert all(line.endswith(": 0 row(s) removed") for line in out.getvalue().splitlines()[1:-2])  # a second run


def test_erase_removes_an_incidents_events_from_the_incident_dlq_as_the_intake_reads_them():
    """An incident's event is matched by the id its source gives it: an alarm on EventBridge, the
    same alarm in an SNS message (Lambda's on-failure record), a Grafana alert (`grafana:` and its
    fingerprint, in a POST of several alerts: the others it carried are named), and our own
    `Incident Reported`; another alarm's event stays, visible again."""
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"},
                           stack_name="erase-incidents").create(only=["IncidentDeadLetterQueue"])
        sqs, queue = boto3.client("sqs"), stack.ref("IncidentDeadLetterQueue")
        alarm = sample("cloudwatch_alarm_state_change")
        arn = alarm["resources"][0]
        other_alarm = json.loads(json.dumps(alarm).replace(arn, arn + "-2").replace("checkout-api-5xx-rate\"",
                                                                                    "checkout-api-5xx-rate-2\""))
        grafana = sample("grafana_alerting_webhook")
        reported = sample("incident_reported")
        bodies = [json.dumps(alarm), lambda_failure(sample("cloudwatch_alarm_sns")), json.dumps(other_alarm),
                  json.dumps(grafana), lambda_failure(reported)]
        for body in bodies:
            sqs.send_message(QueueUrl=queue, MessageBody=body)

        def run(item: str, *more: str) -> list[str]:
            out = io.StringIO()
            assert erase.main([item, "--incident-dlq-url", queue, *more], out=out, session=boto3.Session()) == 0
            return [line for line in out.getvalue().splitlines() if not line.startswith("not read: ")]

        assert run(f"incident:aws.cloudwatch:{arn}") == [f"erase incident:aws.cloudwatch:{arn}",
                                                         "incident-dlq: 2 row(s) removed"]
        assert sorted(visible(sqs, queue)) == sorted(bodies[2:])
        assert run("incident:grafana:grafana:c6eadffa33fcdf37", "--dry-run")[1:] == [
            "incident-dlq: 1 row(s) found (dry run, nothing removed)",
            "note: incident-dlq: a message of incident:grafana:grafana:c6eadffa33fcdf37 also carried incident(s) "
            "grafana:grafana:bc97ff14869b13e3: it is kept (dry run)"]
        assert len(visible(sqs, queue)) == 3
        assert run("incident:grafana:grafana:c6eadffa33fcdf37")[1:] == [
            "incident-dlq: 1 row(s) removed",
            "note: incident-dlq: a message of incident:grafana:grafana:c6eadffa33fcdf37 also carried incident(s) "
            "grafana:grafana:bc97ff14869b13e3: it was removed with them (redrive cannot re-send them)"]
        detail = reported["detail"]
        assert run(f"incident:{detail['source']}:{detail['incident_id']}")[1:] == ["incident-dlq: 1 row(s) removed"]
        assert visible(sqs, queue) == [json.dumps(other_alarm)]


def test_a_queue_read_longer_than_its_messages_stay_hidden_says_to_run_again(monkeypatch):
    monkeypatch.setattr(erase_queues, "QUEUE_VISIBILITY", 0)
    with mock_aws():
        queue = boto3.client("sqs").create_queue(QueueName="dlq")["QueueUrl"]
        erased = erase.Eraser(erase.ItemKey("ticket", "email", "T-1"), {"ticket-dlq": queue},
                              dynamodb=boto3.client("dynamodb"), sqs=boto3.client("sqs"),
                              stepfunctions=boto3.client("stepfunctions")).erase()
    assert erased.rows == {"ticket-dlq": 0}
    assert erased.notes == ["ticket-dlq: read for longer than its messages stay hidden (0 s): some may not have been "
                            "read; run erase again (a run that finds none is complete)"]
    assert sorted(erased.unread) == sorted(["kept-labels", *erase.HELD_QUEUES.keys() - {"ticket-dlq"}])
