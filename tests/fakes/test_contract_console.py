"""The fakes of tests/fakes/console.py held to their adapters: each behaviour is written once and
runs against the fake and against the adapter over moto, on template.yaml's own resources created
one by one (`Stack.create(only=...)`), never the whole stack. Where moto cannot play the part alone:

- the decision bus is created with boto3 (an EventBus is not created alone) and read through an
  SQS queue its rule delivers to, as the other bus tests read it;
- the routing workflow's state machine is created with boto3 from the template's definition;
  moto does not run it here, so an execution stays RUNNING until it is stopped;
- the review tasks run over botocore's Stubber on a real Step Functions client: moto answers a
  task token only while a whole workflow execution waits on it. The stub plays Step Functions'
  part (a token takes one answer; one never issued is TaskDoesNotExist, one already answered
  TaskTimedOut), so what the tasks' contract holds is the adapter's requests and its error mapping.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import boto3
import pytest
from botocore import xform_name
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws
from pydantic import ValidationError

from decision_router.adapters import deliveries as deliveries_adapter
from decision_router.adapters import escalations as escalations_adapter
from decision_router.adapters import used_proofs as used_proofs_adapter
from decision_router.adapters.deliveries import LEASE_SECONDS, RECORD_SECONDS, Deliveries
from decision_router.adapters.escalations import MARGIN_SECONDS, SlaEscalations, mark_key
from decision_router.adapters.head_store import HeadStore
from decision_router.adapters.precision_tally import PrecisionTally
from decision_router.adapters.queues import EventBus
from decision_router.adapters.review import (
    GONE_CODES,
    AuditTrail,
    LabelledExamples,
    ReviewTaskGone,
    ReviewTasks,
    Unreadable,
)
from decision_router.adapters.similar_items import ResolvedItems, partition, partitions, resolved_key
from decision_router.adapters.used_proofs import UsedProofs
from decision_router.adapters.workflow import ExecutionNotRunning, WorkflowStarter
from decision_router.domain.head_versions import parameter_name
from decision_router.domain.leases import Held
from decision_router.domain.linking import LinkedIncident
from decision_router.domain.policies import load_policy
from decision_router.domain.records import AuditRow, DecisionRecord, ReviewAnswer
from decision_router.domain.similar import ResolvedItem, resolved_item
from decision_router.items import parse_item
from decision_router.review.completion import InvalidReview, PendingReview
from decision_router.sources.webhook import FORWARDED_SOURCE
from local.cloudformation import Stack
from tests.fakes.console import (
    ConsoleWorkflow,
    FakeAuditTrail,
    FakeBus,
    FakeDeliveries,
    FakeLabelledExamples,
    FakePrecisionTally,
    FakeResolvedItems,
    FakeReviewTasks,
    FakeSlaEscalations,
    FakeUsedProofs,
)
from tests.fakes.head_store import FakeHeadStore
from tests.functions.conftest import ALL_TARGETS, unsure_ticket

VARIANTS = ["fake", "moto"]
ASL = Path(__file__).resolve().parents[2] / "statemachine" / "routing.asl.json"
DESTINATIONS = {target: f"https://sqs.us-east-1.amazonaws.com/123456789012/{target}" for target in ALL_TARGETS}


#: One session for every client: moto gives each mock a fresh default session, whose clients would
#: read their service's model from disk again (a tenth of a second each); this one keeps them read.
AWS = boto3.Session(region_name="us-east-1")


def client(service: str) -> Any:
    return AWS.client(service)


class Clock:
    """Epoch seconds that move only when the test moves them."""

    def __init__(self, now: float = 1_900_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def template(monkeypatch) -> Iterator[Stack]:
    """moto, and the template read; each moto variant creates only what its adapter needs."""
    with mock_aws():
        yield Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})


def ticket_record(ticket_id: str) -> DecisionRecord:
    """A ticket the routing code sends to review (the model unsure between two queues)."""
    return unsure_ticket(ticket_id, destinations=DESTINATIONS)


# ------------------------------------------------------------------------------ webhook deliveries
@dataclass
class DeliveriesSide:
    record: Any
    clock: Clock
    put_row: Callable[[str, dict[str, Any]], None]  # a row as an older release wrote it


@pytest.fixture(params=VARIANTS)
def deliveries(request, monkeypatch) -> DeliveriesSide:
    clock = Clock()
    if request.param == "fake":
        fake = FakeDeliveries(clock=clock)

        def put_old_row(key: str, columns: dict[str, Any]) -> None:
            fake.rows[key] = dict(columns)

        return DeliveriesSide(fake, clock, put_old_row)
    stack = request.getfixturevalue("template").create(client=client, only=["WebhookDeliveriesTable"])
    monkeypatch.setattr(deliveries_adapter, "time", SimpleNamespace(time=clock))  # the adapter reads only time.time()
    dynamodb, table = client("dynamodb"), stack.ref("WebhookDeliveriesTable")

    def put_row(key: str, columns: dict[str, Any]) -> None:
        typed = {name: {"N": str(value)} if isinstance(value, int) else {"S": value} for name, value in columns.items()}
        dynamodb.put_item(TableName=table, Item={"delivery_key": {"S": key}, **typed})

    return DeliveriesSide(Deliveries(table, dynamodb), clock, put_row)


def test_a_delivery_is_claimed_once_and_its_twin_is_told_when_the_lease_runs_out(deliveries):
    record, clock = deliveries.record, deliveries.clock
    first = record.claim(["k#signed", "k#id"], "zendesk")
    assert first.state == "new" and first.token

    twin = record.claim(["k#other-signature", "k#id"], "zendesk")
    assert (twin.state, twin.key, twin.retry_after) == ("pending", "k#id", LEASE_SECONDS)
    clock.advance(LEASE_SECONDS - 10)
    assert record.claim(["k#id"], "zendesk").retry_after == 10
    # The twin released what it had claimed before it met the held key: its retry finds it free.
    assert record.claim(["k#other-signature"], "zendesk").state == "new"


def test_a_lease_that_ran_out_is_taken_over_once_and_released_only_by_its_owner(deliveries):
    record, clock = deliveries.record, deliveries.clock
    keys = ["k#signed", "k#id"]
    dead = record.claim(keys, "zendesk")
    clock.advance(LEASE_SECONDS)
    at_the_end = record.claim(keys, "zendesk")  # the lease runs to its last second
    assert (at_the_end.state, at_the_end.retry_after) == ("pending", 1)
    clock.advance(1)

    taker = record.claim(keys, "zendesk")
    assert taker.state == "new" and taker.token != dead.token
    assert record.claim(keys, "zendesk").state == "pending"  # a fresh lease: taken over once only
    record.forget(keys, dead.token)
    record.done(keys, dead.token, "zendesk")
    assert record.claim(keys, "zendesk").state == "pending"  # the dead owner neither releases nor finishes it
    record.forget(keys, taker.token)
    assert record.claim(keys, "zendesk").state == "new"


def test_a_delivery_handed_on_is_a_duplicate_until_its_record_expires(deliveries):
    record, clock = deliveries.record, deliveries.clock
    claim = record.claim(["k#signed", "k#id"], "jira")
    record.done(["k#signed", "k#id"], claim.token, "jira")

    replayed = record.claim(["k#signed"], "jira")
    assert (replayed.state, replayed.key) == ("done", "k#signed")
    resigned = record.claim(["k#re-signed", "k#id"], "jira")  # the sender's retry, signed again
    assert (resigned.state, resigned.key) == ("done", "k#id")
    assert record.claim(["k#re-signed"], "jira").state == "done"  # marked done with the delivery it belongs to

    clock.advance(RECORD_SECONDS + 1)  # past the row's expiry, before DynamoDB's TTL deletes it
    assert record.claim(["k#signed"], "jira").state == "new"


def test_a_row_without_a_state_counts_as_handed_on_until_it_expires(deliveries):
    now = int(deliveries.clock())
    deliveries.put_row("k#old", {"source": "zendesk", "received_at": now - 10, "expires_at": now + 100})
    deliveries.put_row("k#older", {"source": "zendesk", "received_at": now - 200, "expires_at": now - 1})

    assert deliveries.record.claim(["k#old"], "zendesk").state == "done"
    assert deliveries.record.claim(["k#older"], "zendesk").state == "new"


def test_a_delivery_released_is_not_marked_done_by_its_late_owner(deliveries):
    record = deliveries.record
    claim = record.claim(["k"], "generic")
    record.forget(["k"], claim.token)
    record.done(["k"], claim.token, "generic")

    assert record.claim(["k"], "generic").state == "new"


def test_the_deliveries_table_takes_a_claim_over_only_while_its_lease_is_the_one_read(deliveries):
    store, now = deliveries.record, int(deliveries.clock())
    lease = Held(lease_until=now + LEASE_SECONDS)
    assert store._place("k", store._row("jira", "first", "pending", now)) == "placed"
    assert store._place("k", store._row("jira", "second", "pending", now)) == lease  # the row there, as read
    assert not store._take_over("k", Held(lease_until=now - 1), store._row("jira", "second", "pending", now))
    deliveries.clock.advance(LEASE_SECONDS + 1)
    later = int(deliveries.clock())
    assert store._take_over("k", lease, store._row("jira", "second", "pending", later))
    assert not store._take_over("k", lease, store._row("jira", "third", "pending", later))  # once only
    store._finish("k", "first", store._row("jira", "first", "done", later))  # not the owner: nothing written
    assert store._place("k", store._row("jira", "third", "pending", later)) == Held(lease_until=later + LEASE_SECONDS)
    store._finish("k", "second", store._row("jira", "second", "done", later))
    assert store._place("k", store._row("jira", "third", "pending", later)) == Held(lease_until=None)
    assert not store._take_over("k", Held(lease_until=later + LEASE_SECONDS), store._row("jira", "third", "pending", later))
    store._release("k", "third")  # not the owner: the row stays
    assert store._place("k", store._row("jira", "third", "pending", later)) == Held(lease_until=None)
    store._release("k", "second")
    assert store._place("k", store._row("jira", "third", "pending", later)) == "placed"


# ------------------------------------------------------------------------------ review SLA escalations
REVIEW_TIMEOUT = 3600
#: The columns the marks take from the clock: compared as offsets from the clock's reading.
CLOCK_READINGS = ("marked_at", "expiration", "lease_until")


@dataclass
class EscalationsSide:
    marks: Any
    clock: Clock
    rows: Callable[[], dict[str, dict[str, Any]]]  # the table's rows of this use, numbers as int


@pytest.fixture(params=VARIANTS)
def escalations(request, monkeypatch) -> EscalationsSide:
    clock = Clock()
    if request.param == "fake":
        fake = FakeSlaEscalations(review_timeout_seconds=REVIEW_TIMEOUT, clock=clock)
        return EscalationsSide(fake, clock, lambda: {key: dict(row) for key, row in fake.rows.items()})
    stack = request.getfixturevalue("template").create(client=client, only=["IdempotencyTable"])
    monkeypatch.setattr(escalations_adapter, "time", SimpleNamespace(time=clock))  # the adapter reads only time.time()
    dynamodb, table = client("dynamodb"), stack.ref("IdempotencyTable")

    def rows() -> dict[str, dict[str, Any]]:
        items = dynamodb.scan(TableName=table)["Items"]
        return {item["id"]["S"]: {name: int(value["N"]) if "N" in value else value["S"]
                                  for name, value in item.items() if name != "id"} for item in items}

    return EscalationsSide(SlaEscalations(table, review_timeout_seconds=REVIEW_TIMEOUT, client=dynamodb), clock, rows)


def marks(side: EscalationsSide) -> dict[str, dict[str, Any]]:
    now = int(side.clock())
    return {key: {name: value - now if name in CLOCK_READINGS else value for name, value in row.items()}
            for key, row in side.rows().items()}


def test_an_escalation_is_claimed_once_and_kept_past_the_review_timeout_once_sent(escalations):
    side = escalations
    assert side.marks.claim_page("incident-INC-1-abc")
    assert not side.marks.claim_page("incident-INC-1-abc")  # another sweep, while the first puts the page
    assert side.marks.claim_page("incident-INC-2-def")  # another execution is another mark
    key = mark_key("incident-INC-1-abc")
    assert marks(side)[key] == {"state": "claimed", "marked_at": 0, "lease_until": escalations_adapter.LEASE_SECONDS,
                                "expiration": REVIEW_TIMEOUT + MARGIN_SECONDS}
    assert "INC-1" not in json.dumps(side.rows())  # the key is a hash: no item id in the table

    side.clock.advance(5)
    side.marks.sent("incident-INC-1-abc")
    assert marks(side)[key] == {"state": "sent", "marked_at": 0, "expiration": REVIEW_TIMEOUT + MARGIN_SECONDS}
    side.clock.advance(escalations_adapter.LEASE_SECONDS + 1)
    assert not side.marks.claim_page("incident-INC-1-abc")  # sent: never again while the row lives
    side.clock.advance(REVIEW_TIMEOUT + MARGIN_SECONDS)  # past its expiry, before DynamoDB's TTL deletes it
    assert side.marks.claim_page("incident-INC-1-abc")


def test_a_claim_whose_page_was_never_sent_is_taken_again_once_its_lease_ran_out(escalations):
    side = escalations
    assert side.marks.claim_page("ticket-T-9-abc")  # its sweep's put failed, or the sweep died
    side.clock.advance(escalations_adapter.LEASE_SECONDS)
    assert not side.marks.claim_page("ticket-T-9-abc")  # the lease runs to its last second
    side.clock.advance(1)
    assert side.marks.claim_page("ticket-T-9-abc")
    assert not side.marks.claim_page("ticket-T-9-abc")  # a fresh lease: taken again once only
    assert marks(side)[mark_key("ticket-T-9-abc")]["state"] == "claimed"


def test_the_marks_table_takes_a_mark_over_only_while_its_lease_is_the_one_read(escalations):
    store, now, key = escalations.marks, int(escalations.clock()), mark_key("ticket-T-7-abc")
    lease = Held(lease_until=now + escalations_adapter.LEASE_SECONDS)
    assert store._place(key, store._row("claimed", now)) == "placed"
    assert store._place(key, store._row("claimed", now)) == lease
    assert not store._take_over(key, Held(lease_until=now - 1), store._row("claimed", now))
    assert store._take_over(key, lease, store._row("claimed", now + 1))
    assert not store._take_over(key, lease, store._row("claimed", now + 1))  # the lease is the taker's now
    store._put(key, store._row("sent", now + 2))
    assert store._place(key, store._row("claimed", now + 2)) == Held(lease_until=None)
    assert not store._take_over(key, Held(lease_until=now + 1 + escalations_adapter.LEASE_SECONDS),
                                store._row("claimed", now + 2))  # a sent mark has no lease to take over


# ------------------------------------------------------------------------------ identity proofs used
@dataclass
class UsedProofsSide:
    proofs: Any
    clock: Clock
    rows: Callable[[], dict[str, dict[str, Any]]]  # the rows of this use by proof key, numbers as int


@pytest.fixture(params=VARIANTS)
def used_proofs(request, monkeypatch) -> UsedProofsSide:
    clock = Clock()
    if request.param == "fake":
        fake = FakeUsedProofs(clock=clock)
        return UsedProofsSide(fake, clock, lambda: {key: dict(row) for key, row in fake.rows.items()})
    stack = request.getfixturevalue("template").create(client=client, only=["IdempotencyTable"])
    monkeypatch.setattr(used_proofs_adapter, "time", SimpleNamespace(time=clock))  # the adapter reads only time.time()
    dynamodb, table = client("dynamodb"), stack.ref("IdempotencyTable")

    def rows() -> dict[str, dict[str, Any]]:
        items = dynamodb.scan(TableName=table)["Items"]
        return {item["id"]["S"].removeprefix(used_proofs_adapter.KEY_PREFIX): {
            name: int(value["N"]) for name, value in item.items() if name != "id"} for item in items}

    return UsedProofsSide(UsedProofs(table, client=dynamodb), clock, rows)


def test_a_proof_is_used_once_while_it_is_remembered_and_again_only_past_its_expiry(used_proofs):
    side = used_proofs
    now = int(side.clock())
    assert side.proofs.first_use("sig-hash-1", now + 60)
    assert not side.proofs.first_use("sig-hash-1", now + 60)  # its maker again, or whoever captured it
    assert side.proofs.first_use("sig-hash-2", now + 60)  # another proof
    margin = used_proofs_adapter.MARGIN_SECONDS
    assert side.rows()["sig-hash-1"] == {"used_at": now, "expiration": now + 60 + margin}

    side.clock.advance(60 + margin)  # the row's last second: STS refuses the proof by now anyway
    assert not side.proofs.first_use("sig-hash-1", now + 60)
    side.clock.advance(1)  # past the row's expiry, before DynamoDB's TTL deletes it
    assert side.proofs.first_use("sig-hash-1", now + 60)


def test_a_proof_dated_ahead_is_remembered_from_now_on(used_proofs):
    side = used_proofs
    now = int(side.clock())
    assert side.proofs.first_use("sig-hash-3", now - 30)  # expired already (STS would say so): kept the margin
    assert side.rows()["sig-hash-3"]["expiration"] == now + used_proofs_adapter.MARGIN_SECONDS


# ------------------------------------------------------------------------------ the decision bus
@dataclass
class BusSide:
    bus: Any
    seen: Callable[[], list[tuple[str, str, dict]]]  # every event on the bus, in order


@pytest.fixture(params=VARIANTS)
def bus(request) -> BusSide:
    if request.param == "fake":
        fake = FakeBus()
        return BusSide(fake, lambda: list(fake.events))
    stack = request.getfixturevalue("template")
    client("events").create_event_bus(Name=stack.ref("DecisionBus"))
    url = stack.observe_bus("DecisionBus", {"source": [FORWARDED_SOURCE, "decision-router"]}, "contract", client=client)
    sqs = client("sqs")

    def seen() -> list[tuple[str, str, dict]]:
        events = []
        while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            for message in messages:
                event = json.loads(message["Body"])
                events.append((event["source"], event["detail-type"], event["detail"]))
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return events

    return BusSide(EventBus(stack.ref("DecisionBus"), client("events")), seen)


def test_each_event_is_put_with_its_source_type_and_detail(bus):
    alert = {"event": {"id": "Q1", "title": "Disk füll ⚠", "urgency": 1.5, "tags": ["db", None], "ack": False}}
    bus.bus.put(FORWARDED_SOURCE, "PagerDuty Webhook", alert)
    bus.bus.put("decision-router", "Item Escalated", {"item_id": "INC-7"})

    assert bus.seen() == [(FORWARDED_SOURCE, "PagerDuty Webhook", alert),
                          ("decision-router", "Item Escalated", {"item_id": "INC-7"})]


def test_a_detail_that_is_no_json_is_refused_and_nothing_is_put(bus):
    with pytest.raises(TypeError):
        bus.bus.put(FORWARDED_SOURCE, "Grafana Alert", {"at": object()})
    assert bus.seen() == []


# ------------------------------------------------------------------------------ the review request
def test_the_review_request_is_what_the_index_writer_reads_field_for_field():
    """The one behaviour moto cannot hold (no Lambda runs there): RequestReview's payload
    (statemachine/routing.asl.json) is the writer's event, field for field, and reads back as
    the review it asked for."""
    definition = json.loads(ASL.read_text())
    sent = definition["States"]["RequestReview"]["Parameters"]["Payload"]
    record = ticket_record("T-5")
    event = {"task_token": "tok-5", "execution_name": "ticket-T-5", "requested_at": "2030-03-17T17:46:40.000Z",
             "record": json.loads(record.model_dump_json())}

    assert sorted(event) == sorted(name.removesuffix(".$") for name in sent)
    assert sorted(PendingReview.model_fields) == sorted(event)
    review = PendingReview.from_message(json.dumps(event))
    assert (review.task_token, review.execution_name, review.record) == ("tok-5", "ticket-T-5", record)
    with pytest.raises(InvalidReview, match="record: Field required"):
        PendingReview.from_message(json.dumps({k: v for k, v in event.items() if k != "record"}))


# ------------------------------------------------------------------------------ the audit table
@dataclass
class AuditSide:
    audit: Any
    put_columns: Callable[[dict[str, str]], None]  # a row as any writer put it


def audit_side(request, *, unsharded: bool = False) -> AuditSide:
    """The audit table of a stack with the sharded index of recent rows alone, or (`unsharded`)
    with the index by outcome alone kept beside it and read (AuditOutcomeIndex)."""
    read = AuditTrail.UNSHARDED_INDEX if unsharded else None
    if request.param == "fake":
        fake = FakeAuditTrail(unsharded_index=read)
        return AuditSide(fake, fake.put_columns)
    request.getfixturevalue("template")  # inside moto
    stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint",
                                   "AuditOutcomeIndex": "sharded-and-unsharded" if unsharded else "sharded"})
    stack.create(client=client, only=["AuditTable"])
    dynamodb, table = client("dynamodb"), stack.ref("AuditTable")

    def put_columns(columns: dict[str, str]) -> None:
        dynamodb.put_item(TableName=table, Item={name: {"S": value} for name, value in columns.items()})

    return AuditSide(AuditTrail(table, dynamodb, unsharded_index=read), put_columns)


@pytest.fixture(params=VARIANTS)
def audit(request) -> AuditSide:
    return audit_side(request)


@pytest.fixture(params=VARIANTS)
def audit_before_backfill(request) -> AuditSide:
    """A stack that keeps the unsharded index, before the backfill gave every row its shard."""
    return audit_side(request, unsharded=True)


def audit_row(item_id: str, execution_name: str, *, outcome: str = "auto_routed", audited_at: str = "2026-11-29T12:00:01Z",
              linked: str | None = "null") -> AuditRow:
    return AuditRow(item_id=item_id, execution_name=execution_name, item_kind="ticket", outcome=outcome,
                    outcome_detail=json.dumps({"status": outcome, "target": "billing"}), route="auto",
                    route_reason="all thresholds met", policy_name="support-ticket", policy_version="1",
                    decisions="[]", item=json.dumps({"ticket_id": item_id}), decided_at="2026-11-29T12:00:00Z",
                    audited_at=audited_at, linked_incident=linked)


def link_to(incident_id: str) -> str:
    return LinkedIncident(incident_key=f"cloudwatch#{incident_id}", incident_id=incident_id, service="checkout-api",
                          opened_at="2026-11-29T11:59:00Z", why="subject names checkout-api").model_dump_json()


def test_an_audit_row_is_written_once_and_never_over(audit):
    routed = audit_row("T-1", "ticket-T-1-b")

    assert audit.audit.write(routed) is True
    assert audit.audit.write(audit_row("T-1", "ticket-T-1-b", outcome="failed")) is False  # a retry's row
    assert audit.audit.write(audit_row("T-1", "ticket-T-1-a", outcome="reviewed")) is True  # another execution

    assert audit.audit.row("T-1", "ticket-T-1-b") == routed
    assert audit.audit.row("T-1", "ticket-T-1-c") is None
    assert [(r.execution_name, r.outcome) for r in audit.audit.of_item("T-1")] == [
        ("ticket-T-1-a", "reviewed"), ("ticket-T-1-b", "auto_routed")]  # in execution-name order
    assert audit.audit.of_item("T-2") == []


def test_recent_lists_the_latest_rows_of_one_outcome_newest_first(audit):
    for n, (outcome, minute) in enumerate([("auto_routed", 1), ("auto_routed", 3), ("reviewed", 4), ("auto_routed", 2)]):
        audit.audit.write(audit_row(f"T-{n}", f"ticket-T-{n}", outcome=outcome, audited_at=f"2026-11-29T12:0{minute}:00Z"))

    assert [r.item_id for r in audit.audit.recent("auto_routed", limit=2)] == ["T-1", "T-3"]
    assert [r.item_id for r in audit.audit.recent("auto_routed")] == ["T-1", "T-3", "T-0"]
    assert sorted((r.item_id, r.execution_name) for r in audit.audit.all()) == [
        (f"T-{n}", f"ticket-T-{n}") for n in range(4)]


def routed_columns(item_id: str, minute: int, shard: int | None, *, outcome: str = "auto_routed") -> dict[str, str]:
    """A row as the workflow puts it, in shard `shard` (its random pick), or without one (None: a
    row written before rows carried `outcome_shard`), with the columns the index of recent rows
    leaves out (the execution's ARN, the link)."""
    columns = {**audit_row(item_id, f"ticket-{item_id}", outcome=outcome, linked=link_to("INC-7"),
                           audited_at=f"2026-11-29T12:{minute:02d}:00Z").columns(),
               "execution_arn": f"arn:aws:states:us-east-1:1:execution:routing:ticket-{item_id}"}
    if shard is None:
        del columns["outcome_shard"]
    else:
        columns["outcome_shard"] = f"{outcome}#{shard}"
    return columns


def test_recent_merges_every_shard_and_the_rows_from_before_them_newest_first(audit_before_backfill):
    """The latest rows of an outcome are read from each of its shards and from the unsharded index
    (the rows written before shards, while the stack keeps it), merged newest first: a shard that holds
    all of the latest rows gives them all. A sharded row comes with the index's columns alone
    (RECENT_COLUMNS), a row from before whole."""
    audit = audit_before_backfill
    rows = [routed_columns(f"T-{n}", 10 + n, n) for n in range(6)]  # one in each of shards 0-5
    rows += [routed_columns(f"T-{n}", 10 + n, 7) for n in range(6, 12)]  # the newest, all in shard 7
    rows += [routed_columns("T-tie", 21, 9)]  # T-11's instant: the row of the greater key first
    rows += [routed_columns(f"O-{n}", 1 + n, None) for n in range(3)]  # from before, the oldest
    rows += [routed_columns("R-0", 30, 7, outcome="reviewed"), routed_columns("R-1", 31, None, outcome="reviewed")]
    for columns in rows:
        audit.put_columns(columns)
    projected = {"item_id", "execution_name", "outcome_shard", "audited_at", *AuditTrail.RECENT_COLUMNS}

    latest = audit.audit.recent("auto_routed", limit=7)
    assert [r.item_id for r in latest] == ["T-tie", "T-11", "T-10", "T-9", "T-8", "T-7", "T-6"]
    everything = audit.audit.recent("auto_routed", limit=20)
    assert [r.item_id for r in everything] == ["T-tie", *(f"T-{n}" for n in range(11, -1, -1)), "O-2", "O-1", "O-0"]
    by_id = {columns["item_id"]: columns for columns in rows}
    for row in everything:
        written = by_id[row.item_id]
        if "outcome_shard" in written:
            assert row == AuditRow.model_validate({k: v for k, v in written.items() if k in projected})
            assert row.execution_arn is None and row.linked_incident is None  # not in the index
        else:
            assert row == AuditRow.model_validate(written)  # whole, its shard given from its key
    assert [r.item_id for r in audit.audit.recent("reviewed")] == ["R-1", "R-0"]

    # Once the console is told the stack has dropped the unsharded index, its rows are read no more.
    audit.audit.unsharded_index = None
    assert [r.item_id for r in audit.audit.recent("auto_routed", limit=20)][-3:] == ["T-2", "T-1", "T-0"]
    assert [r.item_id for r in audit.audit.recent("reviewed")] == ["R-0"]
    assert audit.audit.recent("auto_routed", limit=0) == []


def test_a_row_that_does_not_read_as_the_workflow_writes_it_is_named_in_lists_and_raises_when_read(
        audit_before_backfill):
    audit = audit_before_backfill  # the odd row has no shard: the unsharded index lists it
    audit.audit.write(audit_row("T-1", "ticket-T-1-a"))
    odd = {"item_id": "T-1", "execution_name": "ticket-T-1-b", "outcome": "auto_routed",
           "audited_at": "2026-11-29T12:09:00Z", "colour": "blue"}
    audit.put_columns(odd)

    (good, unreadable) = audit.audit.of_item("T-1")
    assert isinstance(good, AuditRow) and isinstance(unreadable, Unreadable)
    assert (unreadable.item_id, unreadable.execution_name) == ("T-1", "ticket-T-1-b")
    assert "colour" in unreadable.problem and "route" in unreadable.problem
    assert audit.audit.recent("auto_routed", limit=1) == [unreadable]
    with pytest.raises(ValidationError):
        audit.audit.row("T-1", "ticket-T-1-b")
    assert sorted(audit.audit.all(), key=lambda r: r.execution_name) == [good, unreadable]


def test_linked_to_lists_the_tickets_linked_to_that_incident_exactly(audit):
    audit.audit.write(audit_row("T-1", "ticket-T-1", linked=link_to("INC-7")))
    audit.audit.write(audit_row("T-2", "ticket-T-2", linked=link_to("INC-77")))  # its id holds INC-7
    audit.audit.write(audit_row("T-3", "ticket-T-3", linked="null"))
    audit.audit.write(audit_row("T-4", "ticket-T-4", linked=None))  # a row from before links were kept
    audit.audit.write(audit_row("T-5", "ticket-T-5", linked='{"incident_id": "INC-7"}'))  # not a link
    audit.put_columns({"item_id": "T-6", "execution_name": "ticket-T-6", "linked_incident": link_to("INC-7")})

    assert [(r.item_id, r.link().incident_id) for r in audit.audit.linked_to("INC-7")] == [("T-1", "INC-7")]
    assert audit.audit.linked_to("INC-8") == []


def test_linked_to_reads_the_link_index_only_and_a_row_from_before_it_is_not_listed(audit):
    """Only a linked row carries the index's key (`linked_incident_id`): a row written before it
    was kept has its link, not the key, and is left out, as the sparse index leaves it out."""
    audit.audit.write(audit_row("T-1", "ticket-T-1", linked=link_to("INC-7"), audited_at="2026-11-29T12:05:00Z"))
    audit.audit.write(audit_row("T-2", "ticket-T-2", linked=link_to("INC-7"), audited_at="2026-11-29T12:01:00Z"))
    assert audit.audit.row("T-1", "ticket-T-1").linked_incident_id == "INC-7"
    assert audit.audit.row("T-2", "ticket-T-2").columns()["linked_incident_id"] == "INC-7"
    unlinked = audit_row("T-3", "ticket-T-3", linked="null")
    assert "linked_incident_id" not in unlinked.columns()  # no entry in the sparse index
    older = {k: v for k, v in audit_row("T-4", "ticket-T-4", linked=link_to("INC-7")).columns().items()
             if k != "linked_incident_id"}
    audit.put_columns(older)
    assert [r.item_id for r in audit.audit.linked_to("INC-7")] == ["T-2", "T-1"]  # oldest first


def test_a_row_written_with_a_retention_expires_after_it(template):
    """`write` (the incident intake's held rows) sets the TTL attribute, as the workflow does from
    the record's audit_expires_at."""
    days = 30
    fake = FakeAuditTrail(retention_days=days)
    stack = template.create(client=client, only=["AuditTable"])
    real = AuditTrail(stack.ref("AuditTable"), client("dynamodb"), retention_days=days)
    before = int(time.time()) + days * 86_400
    for side in (fake, real):
        assert side.write(audit_row("T-1", "ticket-T-1")) is True
    after = int(time.time()) + days * 86_400
    stored = client("dynamodb").get_item(TableName=real.table_name, Key={
        "item_id": {"S": "T-1"}, "execution_name": {"S": "ticket-T-1"}})["Item"]
    assert before - 1 <= int(stored["expires_at"]["N"]) <= after
    assert before - 1 <= fake.expires[("T-1", "ticket-T-1")] <= after
    assert real.row("T-1", "ticket-T-1") == fake.row("T-1", "ticket-T-1")  # the number is no column


# ------------------------------------------------------------------------------ labelled examples
@dataclass
class ExamplesSide:
    examples: Any
    put: Callable[[dict[str, str]], None]  # the workflow's StoreLabelledExample


@pytest.fixture(params=VARIANTS)
def examples(request) -> ExamplesSide:
    if request.param == "fake":
        fake = FakeLabelledExamples()
        return ExamplesSide(fake, fake.put)
    stack = request.getfixturevalue("template").create(client=client, only=["LabelledExamplesTable"])
    dynamodb, table = client("dynamodb"), stack.ref("LabelledExamplesTable")

    def put(row: dict[str, str]) -> None:
        dynamodb.put_item(TableName=table, Item={name: {"S": value} for name, value in row.items()})

    return ExamplesSide(LabelledExamples(table, dynamodb), put)


def example(policy: str, item_id: str, answer: str) -> dict[str, str]:
    return {"policy_name": policy, "item_key": f"ticket:email:{item_id}:0", "item_id": item_id, "item": json.dumps({"id": item_id}),
            "answers": json.dumps({"queue": answer}), "reviewer": "a-1"}


def test_pages_walk_every_example_once(examples):
    rows = [example("support-ticket", f"T-{n}", "billing") for n in range(3)] + [
        example("incident", f"INC-{n}", "platform") for n in range(2)]
    for row in rows:
        examples.put(row)

    pages, after = [], None
    while True:
        page, after = examples.examples.page(2, after)
        pages.append(page)
        if after is None:
            break

    assert [len(p) for p in pages] == [2, 2, 1]
    assert sorted(r["item_id"] for p in pages for r in p) == sorted(r["item_id"] for r in rows)
    assert sorted(r["item_id"] for r in examples.examples.scan()) == sorted(r["item_id"] for r in rows)


def test_a_later_review_of_an_item_replaces_its_example_of_its_policy(examples):
    examples.put(example("support-ticket", "T-1", "billing"))
    examples.put(example("support-ticket", "T-1", "technical_fault"))
    examples.put(example("incident", "T-1", "platform"))  # the same id under another policy: its own row

    (ticket,) = examples.examples.of_policy("support-ticket")
    assert json.loads(ticket["answers"]) == {"queue": "technical_fault"}
    assert [r["policy_name"] for r in examples.examples.of_policy("incident")] == ["incident"]


def test_since_reads_the_labels_after_a_time_from_every_shard_and_no_older(examples):
    """The shard index (label_shard, labelled_at) as StoreLabelledExample writes it; a row from
    before rows carried a shard is not in it (of_policy reads it)."""
    for n, shard in enumerate([0, 3, 7, 3]):
        examples.put({**example("support-ticket", f"T-{n}", "billing"), "label_shard": f"support-ticket#{shard}",
                      "labelled_at": f"2026-12-01T00:00:0{n}.000Z"})
    examples.put({**example("incident", "INC-1", "platform"), "label_shard": "incident#3",
                  "labelled_at": "2026-12-01T00:00:09.000Z"})
    examples.put({**example("support-ticket", "OLD-1", "billing"), "labelled_at": "2026-12-01T00:00:09.000Z"})

    def since(after: str) -> list[str]:
        return sorted(r["item_id"] for r in examples.examples.since("support-ticket", after))

    assert since("") == ["T-0", "T-1", "T-2", "T-3"]
    assert since("2026-12-01T00:00:01.000Z") == ["T-2", "T-3"]
    assert since("2026-12-01T00:00:03.000Z") == []
    assert sorted(r["item_id"] for r in examples.examples.of_policy("support-ticket")) == ["OLD-1", "T-0", "T-1", "T-2", "T-3"]


# ------------------------------------------------------------------------------ review tasks
@dataclass
class TasksSide:
    tasks: Any
    issue: Callable[[str], Any]  # the workflow waits on this task token
    sent: Callable[[], list[tuple[str, dict[str, str]]]]  # the answers and closes the tasks took, as requests


@pytest.fixture(params=["fake", "stubber"])
def tasks(request) -> Iterator[TasksSide]:
    if request.param == "fake":
        fake = FakeReviewTasks()
        yield TasksSide(fake, fake.issue, lambda: [
            *(("SendTaskSuccess", {"taskToken": t, "output": a.model_dump_json()}) for t, a in fake.answered.items()),
            *(("SendTaskFailure", {"taskToken": t, "error": "IncidentResolved", "cause": c}) for t, c in fake.closed.items())])
        return
    sfn = client("stepfunctions")
    stubber, waiting, ended, sent = Stubber(sfn), set(), set(), []

    def step_functions(params: dict, model: Any, **_: Any) -> None:
        """Step Functions' answer to the call being made, queued as the adapter makes it."""
        token, operation = params.get("taskToken"), xform_name(model.name)
        if token in waiting:
            waiting.discard(token)
            ended.add(token)
            sent.append((model.name, dict(params)))
            stubber.add_response(operation, {})
        else:
            stubber.add_client_error(operation, service_error_code="TaskTimedOut" if token in ended else "TaskDoesNotExist",
                                     service_message="Task Token is no longer valid")

    sfn.meta.events.register("provide-client-params.sfn", step_functions)
    with stubber:
        yield TasksSide(ReviewTasks(sfn), waiting.add, lambda: list(sent))
        stubber.assert_no_pending_responses()


def answer_for(record: DecisionRecord, name: str) -> ReviewAnswer:
    return ReviewAnswer(execution_name=name, reviewer="a-1", choice=record.review.choices[0], note="refund one",
                        reviewer_username="alice", reviewer_email="alice@example.com")


def test_an_answer_reaches_its_waiting_task_once(tasks):
    answer = answer_for(ticket_record("T-1"), "ticket-T-1")
    tasks.issue("tok-1")

    tasks.tasks.complete("tok-1", answer)

    assert tasks.sent() == [("SendTaskSuccess", {"taskToken": "tok-1", "output": answer.model_dump_json()})]
    with pytest.raises(ReviewTaskGone, match=r"can no longer be completed \(TaskTimedOut\)"):
        tasks.tasks.complete("tok-1", answer)
    with pytest.raises(ReviewTaskGone, match=r"can no longer be closed \(TaskTimedOut\)"):
        tasks.tasks.close_resolved("tok-1", "resolved at its source")
    assert len(tasks.sent()) == 1


def test_a_review_closed_as_resolved_takes_no_answer(tasks):
    reason = "alarm OK: " + "x" * 40_000
    tasks.issue("tok-2")

    tasks.tasks.close_resolved("tok-2", reason)

    assert tasks.sent() == [("SendTaskFailure", {"taskToken": "tok-2", "error": "IncidentResolved", "cause": reason[:32_000]})]
    with pytest.raises(ReviewTaskGone, match="TaskTimedOut"):
        tasks.tasks.complete("tok-2", answer_for(ticket_record("T-2"), "ticket-T-2"))


def test_a_task_token_never_issued_takes_nothing(tasks):
    with pytest.raises(ReviewTaskGone, match=r"can no longer be completed \(TaskDoesNotExist\)"):
        tasks.tasks.complete("tok-never", answer_for(ticket_record("T-3"), "ticket-T-3"))
    with pytest.raises(ReviewTaskGone, match="TaskDoesNotExist"):
        tasks.tasks.close_resolved("tok-never", "resolved")
    assert tasks.sent() == []


@pytest.mark.parametrize("code", sorted(GONE_CODES))
def test_every_code_of_a_task_gone_is_review_task_gone_and_any_other_error_is_raised(code):
    """The adapter's side of the fake's one error: each code Step Functions gives for a task that
    takes no answer is ReviewTaskGone; anything else (throttling: the fake has none) is raised as it came."""
    sfn = client("stepfunctions")
    adapter, answer = ReviewTasks(sfn), answer_for(ticket_record("T-4"), "ticket-T-4")
    with Stubber(sfn) as stubber:
        stubber.add_client_error("send_task_success", service_error_code=code)
        stubber.add_client_error("send_task_failure", service_error_code=code)
        stubber.add_client_error("send_task_success", service_error_code="ThrottlingException")
        with pytest.raises(ReviewTaskGone, match=code):
            adapter.complete("tok", answer)
        with pytest.raises(ReviewTaskGone, match=code):
            adapter.close_resolved("tok", "resolved")
        with pytest.raises(ClientError, match="ThrottlingException"):
            adapter.complete("tok", answer)


# ------------------------------------------------------------------------------ the routing workflow
@dataclass
class WorkflowSide:
    workflow: Any
    stop: Callable[[str], None]  # the execution is aborted (Step Functions' part)


@pytest.fixture(params=VARIANTS)
def workflow(request) -> WorkflowSide:
    if request.param == "fake":
        fake = ConsoleWorkflow()
        return WorkflowSide(fake, lambda name: fake.end(name, "ABORTED"))
    stack = request.getfixturevalue("template")
    sfn = client("stepfunctions")
    name = stack.physical_name("RoutingStateMachine")
    arn = sfn.create_state_machine(name=name, definition=stack.state_machine_definition("RoutingStateMachine"),
                                   roleArn=f"arn:aws:iam::{stack.account_id}:role/{name}")["stateMachineArn"]
    starter = WorkflowStarter(arn, sfn)
    return WorkflowSide(starter, lambda execution: sfn.stop_execution(executionArn=starter.execution_arn(execution)))


def test_a_running_execution_hands_over_its_own_record(workflow):
    record = ticket_record("T-1")

    assert workflow.workflow.start_named("ticket-T-1", record) is True
    assert workflow.workflow.start_named("ticket-T-1", ticket_record("T-1-other")) is False

    assert workflow.workflow.describe("ticket-T-1") == ("RUNNING", json.loads(record.model_dump_json()))


def test_an_execution_that_ended_is_described_and_one_that_never_was_is_named(workflow):
    record = ticket_record("T-2")
    workflow.workflow.start_named("ticket-T-2", record)
    workflow.stop("ticket-T-2")

    assert workflow.workflow.describe("ticket-T-2") == ("ABORTED", json.loads(record.model_dump_json()))
    assert workflow.workflow.start_named("ticket-T-2", record) is False  # whatever its status
    with pytest.raises(ExecutionNotRunning, match="no routing execution named 'ticket-T-9'"):
        workflow.workflow.describe("ticket-T-9")


# ------------------------------------------------------------------------------ the head store
PREFIX = "/decision-router/heads"


@dataclass
class HeadStoreSide:
    store: Any
    put_pointer_text: Callable[[str, str, str], None]  # a parameter as anyone with access could write it


@pytest.fixture(params=VARIANTS)
def heads(request) -> HeadStoreSide:
    if request.param == "fake":
        fake = FakeHeadStore()
        return HeadStoreSide(fake, fake.put_pointer_text)
    stack = request.getfixturevalue("template").create(client=client, only=["HeadBucket", "HeadHistoryTable"])
    ssm = client("ssm")
    store = HeadStore(stack.ref("HeadBucket"), PREFIX, stack.ref("HeadHistoryTable"), client=client("s3"), ssm=ssm,
                      dynamodb=client("dynamodb"))

    def put_pointer_text(policy: str, question: str, text: str) -> None:
        ssm.put_parameter(Name=parameter_name(PREFIX, policy, question), Value=text, Type="String", Overwrite=True)

    return HeadStoreSide(store, put_pointer_text)


def promote(store: Any, head: bytes, version: str) -> Any:
    return store.promote("support-ticket", "queue", head, b"{}", sha256=hashlib.sha256(head).hexdigest(),
                         head_version=version, by="relearning", reason="passed its gate")


def test_no_pointer_means_the_shipped_head_decides(heads):
    assert heads.store.pointer("support-ticket", "queue") is None
    assert heads.store.shadow_pointer("support-ticket", "queue") is None


def test_the_head_in_service_is_read_back_exactly_and_its_predecessor_kept(heads):
    first = promote(heads.store, b'{"v": 1}', "h-1")
    promote(heads.store, b'{"v": 2}', "h-2")

    serving = heads.store.pointer("support-ticket", "queue")
    assert (serving.head_version, serving.previous.head_version, serving.sha256) == (
        "h-2", "h-1", hashlib.sha256(b'{"v": 2}').hexdigest())
    assert heads.store.read(serving) == b'{"v": 2}'
    assert heads.store.read(first) == b'{"v": 1}'  # the version the pointer names, not the latest
    assert heads.store.shadow_pointer("support-ticket", "queue") is None


def test_a_shadow_is_read_beside_the_head_in_service_until_it_ends(heads):
    heads.store.shadow("support-ticket", "queue", b'{"s": 1}', sha256=hashlib.sha256(b'{"s": 1}').hexdigest(),
                       head_version="c-1", by="relearning", reason="candidate")

    shadow = heads.store.shadow_pointer("support-ticket", "queue")
    assert (shadow.action, shadow.head_version) == ("shadow", "c-1")
    assert heads.store.read(shadow) == b'{"s": 1}'
    assert heads.store.pointer("support-ticket", "queue") is None
    heads.store.end_shadow("support-ticket", "queue", by="relearning", reason="judged")
    assert heads.store.shadow_pointer("support-ticket", "queue") is None


def test_a_pointer_elsewhere_is_refused_and_a_version_not_held_is_no_such_version(heads):
    serving = promote(heads.store, b'{"v": 1}', "h-1")

    with pytest.raises(ValueError, match="names bucket 'someone-elses'"):
        heads.store.read(serving.model_copy(update={"bucket": "someone-elses"}))
    with pytest.raises(ValueError, match="names key 'heads/incident/team.json'"):
        heads.store.read(serving.model_copy(update={"key": "heads/incident/team.json"}))
    with pytest.raises(ClientError) as missing:
        heads.store.read(serving.model_copy(update={"s3_version": "not-a-version"}))
    assert missing.value.response["Error"]["Code"] == "NoSuchVersion"


def test_a_malformed_pointer_raises_where_it_is_read(heads):
    heads.put_pointer_text("support-ticket", "queue", '{"policy": "support-ticket"}')

    with pytest.raises(ValidationError):
        heads.store.pointer("support-ticket", "queue")


# ------------------------------------------------------------------------------ resolved items
@pytest.fixture(params=VARIANTS)
def resolved(request) -> Any:
    if request.param == "fake":
        return FakeResolvedItems()
    stack = request.getfixturevalue("template").create(client=client, only=["ResolvedItemsTable"])
    return ResolvedItems(stack.ref("ResolvedItemsTable"), client("dynamodb"))


def resolved_ticket(ticket_id: str, at: str, answer: str = "billing") -> ResolvedItem:
    policy = load_policy("support-ticket")
    item = parse_item("ticket", {"ticket_id": ticket_id, "subject": "Charged twice", "body": "Refund one of two charges.",
                                 "customer": {"id": "C-1", "tier": "pro"}, "channel": "email",
                                 "created_at": "2026-11-29T12:00:00Z"})
    found = resolved_item(policy, item, {"queue": answer}, resolved_by="alice@example.com", resolved_at=at)
    assert found is not None
    return found


def test_recent_hands_over_a_policys_latest_resolved_items_newest_first(resolved):
    for n, minute in enumerate([2, 9, 5]):
        resolved.remember(resolved_ticket(f"T-{n}", f"2026-11-29T12:0{minute}:00.000+00:00"))
    other = resolved_ticket("T-9", "2026-11-29T12:59:00.000+00:00").model_copy(update={"policy": "incident"})
    resolved.remember(other)

    assert [r.item_id for r in resolved.recent("support-ticket")] == ["T-1", "T-2", "T-0"]
    assert [r.item_id for r in resolved.recent("support-ticket", limit=2)] == ["T-1", "T-2"]
    assert resolved.recent("incident") == [other]


def test_the_routers_and_the_reviewers_rows_each_have_their_own_window(resolved):
    resolved.remember(answered := resolved_ticket("T-R", "2026-11-29T11:00:00.000+00:00"))
    for minute in range(5):  # newer automatic routes: they fill the router's window only
        resolved.remember(resolved_ticket(f"T-{minute}", f"2026-11-29T12:0{minute}:00.000+00:00").model_copy(
            update={"resolved_by": "router"}))
    assert [r.item_id for r in resolved.recent("support-ticket", limit=3)] == ["T-4", "T-3", "T-2", "T-R"]
    assert resolved.recent("support-ticket", limit=3)[-1] == answered


def test_the_same_resolution_kept_twice_is_one_row_the_later(resolved):
    at = "2026-11-29T12:00:00.000+00:00"
    resolved.remember(resolved_ticket("T-1", at, "billing"))
    resolved.remember(resolved_ticket("T-1", at, "technical_fault"))

    (kept,) = resolved.recent("support-ticket")
    assert kept.answers == {"queue": "technical_fault"}


def resolved_partitions(resolved: Any) -> dict[str, int]:
    """Rows per partition key, as the store holds them."""
    if isinstance(resolved, FakeResolvedItems):
        keys = [key for key, _ in resolved.rows]
    else:
        keys = [row["policy"]["S"] for row in client("dynamodb").scan(TableName=resolved.table_name)["Items"]]
    return {key: keys.count(key) for key in set(keys)}


def keep_as_before_sharding(resolved: Any, row: ResolvedItem) -> None:
    """Keep a row under the policy's name alone, as a stack did before the rows were sharded."""
    if isinstance(resolved, FakeResolvedItems):
        resolved.rows[(row.policy, resolved_key(row))] = row
        return
    client("dynamodb").put_item(TableName=resolved.table_name, Item={
        "policy": {"S": row.policy}, "resolved_key": {"S": resolved_key(row)}, "item_id": {"S": row.item_id},
        "body": {"S": row.model_dump_json()}})


def test_a_policys_rows_spread_over_its_shards_and_are_read_with_those_kept_before(resolved):
    for n in range(30):
        resolved.remember(resolved_ticket(f"T-{n}", f"2026-11-29T12:{n:02d}:00.000+00:00"))
    before = resolved_ticket("T-old", "2026-11-29T11:59:00.000+00:00")
    keep_as_before_sharding(resolved, before)
    spread = resolved_partitions(resolved)
    assert len(spread) > 2 and set(spread) <= set(partitions("support-ticket"))  # many shards, one policy's
    assert spread["support-ticket"] == 1 and sum(spread.values()) == 31
    assert all(partition(resolved_ticket(f"T-{n}", "2026-11-29T12:00:00.000+00:00")) in spread for n in range(30))

    assert [r.item_id for r in resolved.recent("support-ticket")] == [*(f"T-{n}" for n in range(29, -1, -1)), "T-old"]
    assert [r.item_id for r in resolved.recent("support-ticket", limit=4)] == ["T-29", "T-28", "T-27", "T-26"]
    newer = resolved_ticket("T-old", "2026-11-29T13:00:00.000+00:00")  # a row of before, newer than all
    keep_as_before_sharding(resolved, newer)
    assert [r.item_id for r in resolved.recent("support-ticket", limit=2)] == ["T-old", "T-29"]


# ------------------------------------------------------------------------------ precision tallies
@pytest.fixture(params=VARIANTS)
def precision(request) -> Any:
    if request.param == "fake":
        return FakePrecisionTally()
    stack = request.getfixturevalue("template").create(client=client, only=["HeadHistoryTable"])
    return PrecisionTally(stack.ref("HeadHistoryTable"), client=client("dynamodb"))


def test_a_checked_answer_counts_for_its_question_and_its_option_and_hands_back_the_questions_counts(precision):
    assert precision.counts("support-ticket", "queue").checked == 0
    first = precision.add("support-ticket", "queue", "billing", checked=1, right=1)
    second = precision.add("support-ticket", "queue", "account_access", checked=1, right=0)
    precision.add("support-ticket", "queue", "billing", corrected=1)

    assert (first.checked, first.right, second.checked, second.right) == (1, 1, 2, 1)
    assert precision.counts("support-ticket", "queue").model_dump() == {"checked": 2, "right": 1, "corrected": 1}
    assert precision.counts("support-ticket", "queue", "billing").model_dump() == {"checked": 1, "right": 1, "corrected": 1}
    assert precision.counts("support-ticket", "queue", "account_access").model_dump() == {
        "checked": 1, "right": 0, "corrected": 0}
    assert precision.counts("incident", "queue").checked == 0  # another policy's question is its own row
    assert precision.options("support-ticket", "queue") == {
        "billing": precision.counts("support-ticket", "queue", "billing"),
        "account_access": precision.counts("support-ticket", "queue", "account_access")}
    assert precision.options("support-ticket", "team") == {}


def test_a_count_the_tally_does_not_keep_is_refused(precision):
    with pytest.raises(ValueError, match="name one or more of"):
        precision.add("support-ticket", "queue", "billing", wrong=1)
    with pytest.raises(ValueError, match="name one or more of"):
        precision.add("support-ticket", "queue", "billing")
