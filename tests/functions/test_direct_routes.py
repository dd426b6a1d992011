"""An automatic route delivered by the intake itself (adapters/direct_routes.py): the same audit
row, team message and `Item Routed` event as the routing workflow writes for the same record
(on the stack, field by field), and the claim's behaviour on the fake and on the adapter (moto)."""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters.direct_routes import PENDING, DeliveryInProgress, DirectRoutes, audit_row, entered_time
from decision_router.domain.leases import Held
from decision_router.domain.records import AUDIT_SHARDS, AuditRow, DecisionRecord, execution_name
from local.cloudformation import Stack
from tests.fakes.console import FakeAuditTrail
from tests.fakes.console_worlds import console_world
from tests.fakes.intake import FakeDirectRoutes, FakeQueue
from tests.functions.test_review_console import SURE_TICKET, TICKET, decided

#: What differs by nature between the two writers: when the row was written, and the execution's
#: ARN (the direct row has no execution); the direct row carries the rest of the record beside;
#: the shard of the index of recent rows (the workflow picks it at random, the intake by a hash:
#: compared by form).
BY_NATURE = {"audited_at", "execution_arn", "routing_record", "outcome_shard"}


def name_of(record: DecisionRecord) -> str:
    return execution_name(record.item_kind, record.item_id, record.item_key)


def capture_routed_events(stack: Stack) -> str:
    """A queue that receives every `Item Routed` event on the decision bus; its URL."""
    sqs, events = boto3.client("sqs"), boto3.client("events")
    url = sqs.create_queue(QueueName="routed-events-capture")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    bus = stack.function_environment("TicketIntakeFunction")["EVENT_BUS_NAME"]
    events.put_rule(Name="capture-routed", EventBusName=bus, EventPattern=json.dumps({"detail-type": ["Item Routed"]}))
    events.put_targets(Rule="capture-routed", EventBusName=bus, Targets=[{"Id": "capture", "Arn": arn}])
    return url


def taken(url: str) -> list[dict[str, Any]]:
    sqs, found = boto3.client("sqs"), []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        for message in batch:
            found.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return found


def raw_row(table: str, item_id: str, name: str) -> dict[str, Any]:
    return boto3.client("dynamodb").get_item(TableName=table, Key={
        "item_id": {"S": item_id}, "execution_name": {"S": name}})["Item"]


@pytest.mark.stack
def test_the_direct_route_writes_the_workflows_row_message_and_event_field_by_field():
    with console_world("moto") as world:
        stack, table = world.template, world.ref("AuditTable")
        env = stack.function_environment("TicketIntakeFunction")
        events_url = capture_routed_events(stack)
        record = decided(stack, "ticket", TICKET, SURE_TICKET)
        assert record.route == "auto" and not record.escalate and record.destination.target == "billing"

        name = world.start(record)  # the workflow's way
        assert world.wait_for(lambda: world.status(name) == "SUCCEEDED", "the execution to succeed")
        by_workflow = (raw_row(table, record.item_id, name), world.delivered("BillingQueue"),
                       [e["detail"] for e in world.wait_for(lambda: taken(events_url), "the workflow's event")])
        boto3.client("dynamodb").delete_item(TableName=table, Key={"item_id": {"S": record.item_id},
                                                                    "execution_name": {"S": name}})

        routes = DirectRoutes(table, env["EVENT_BUS_NAME"], retention_days=int(env["AUDIT_RETENTION_DAYS"]))
        assert routes.deliver(record, name_of(record)).delivered  # the intake's way, under the same name
        by_intake = (raw_row(table, record.item_id, name), world.delivered("BillingQueue"),
                     [e["detail"] for e in world.wait_for(lambda: taken(events_url), "the direct event")])

    (workflow_row, workflow_messages, workflow_events), (direct_row, direct_messages, direct_events) = by_workflow, by_intake
    assert PENDING not in direct_row  # marked delivered
    assert set(workflow_row) - BY_NATURE == set(direct_row) - BY_NATURE
    for column in set(workflow_row) - BY_NATURE:
        workflow_value, direct_value = workflow_row[column], direct_row[column]
        if column in {"outcome_detail", "decisions", "item", "linked_incident"}:  # JSON text: compared parsed
            assert json.loads(workflow_value["S"]) == json.loads(direct_value["S"]), column
        else:
            assert workflow_value == direct_value, column
    assert "execution_arn" in workflow_row and "execution_arn" not in direct_row
    shards = {f"auto_routed#{n}" for n in range(AUDIT_SHARDS)}
    assert workflow_row["outcome_shard"]["S"] in shards and direct_row["outcome_shard"]["S"] in shards
    assert AuditRow.model_validate({k: v["S"] for k, v in direct_row.items() if "S" in v}).routed_record() == record
    assert len(workflow_messages) == len(direct_messages) == 1 and workflow_messages[0] == direct_messages[0]
    assert len(workflow_events) == len(direct_events) == 1 and workflow_events[0] == direct_events[0]


# ------------------------------------------------------------------------------ the claim: fake and adapter
class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["fake", "moto"])
def side(request) -> Iterator[tuple[Any, Clock, Any]]:
    """(direct routes, their clock, a reader of (pending rows, team messages)) on the fake or on the
    adapter over moto (the audit table and the billing queue alone; events on the default bus)."""
    clock = Clock()
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}).create(
            only=["AuditTable", "TeamDeadLetterQueue", "BillingQueue"])
        if request.param == "fake":
            queues: dict[str, FakeQueue] = {}
            fake = FakeDirectRoutes(FakeAuditTrail(), lambda url: queues.setdefault(url, FakeQueue(url)), clock=clock)
            yield fake, clock, lambda: (len(fake.pending), sum(len(q.sent) for q in queues.values()), stack)
            return
        adapter = DirectRoutes(stack.ref("AuditTable"), "default", clock=clock)  # the bus is made with the whole stack only

        def read() -> tuple[int, int, Stack]:
            rows = boto3.client("dynamodb").scan(TableName=stack.ref("AuditTable"))["Items"]
            depth = boto3.client("sqs").get_queue_attributes(QueueUrl=stack.ref("BillingQueue"),
                                                             AttributeNames=["ApproximateNumberOfMessages"])
            return sum(PENDING in r for r in rows), int(depth["Attributes"]["ApproximateNumberOfMessages"]), stack
        yield adapter, clock, read


def billing_record(stack: Stack) -> DecisionRecord:
    record = decided(Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}), "ticket", TICKET, SURE_TICKET)
    destination = record.destination.model_copy(update={"queue_url": stack.ref("BillingQueue")})
    return record.model_copy(update={"destination": destination})


def test_a_route_is_delivered_once_and_a_second_delivery_finds_it_delivered(side):
    routes, _, read = side
    record = billing_record(read()[2])
    assert routes.deliver(record, name_of(record)).delivered
    assert routes.deliver(record, name_of(record)).delivered is False
    assert read()[:2] == (0, 1)


def test_a_name_a_failed_execution_audited_is_spent_and_delivers_nothing(side):
    routes, _, read = side
    record = billing_record(read()[2])
    failed = {"item_id": record.item_id, "execution_name": name_of(record), "outcome": "failed"}
    if isinstance(routes, FakeDirectRoutes):  # the workflow's RecordFailed row, as it puts it
        routes.audit.rows[(record.item_id, name_of(record))] = failed
    else:
        boto3.client("dynamodb").put_item(TableName=read()[2].ref("AuditTable"),
                                          Item={key: {"S": value} for key, value in failed.items()})
    delivery = routes.deliver(record, name_of(record))
    assert (delivery.delivered, delivery.ended_unrouted) == (False, True)
    assert read()[:2] == (0, 0)  # nothing sent, nothing claimed: the intake goes on to the next attempt's name


class Crash(BaseException):
    """An invocation that ends mid-send (a timeout): no `except Exception` runs."""


def failing_send(routes: Any, failure: BaseException) -> None:
    if isinstance(routes, FakeDirectRoutes):
        routes.fail_send = failure
        return

    def send(**_: Any) -> None:
        del routes.sqs.send_message
        raise failure
    routes.sqs.send_message = send


def test_a_pending_claim_holds_until_its_holders_deadline_then_is_taken_over_once(side):
    routes, clock, read = side
    record = billing_record(read()[2])
    failing_send(routes, Crash())  # a holder that claimed and died before the send
    with pytest.raises(Crash):
        routes.deliver(record, name_of(record), holds_until=clock.now + 60)
    assert read()[:2] == (1, 0)
    with pytest.raises(DeliveryInProgress):
        routes.deliver(record, name_of(record))  # the holder may still be delivering
    clock.now += 61
    assert routes.deliver(record, name_of(record)).delivered
    assert routes.deliver(record, name_of(record)).delivered is False
    assert read()[:2] == (0, 1)


def test_a_send_that_fails_hands_the_claim_back_so_the_retry_delivers_at_once(side):
    routes, clock, read = side
    record = billing_record(read()[2])
    failing_send(routes, ConnectionError("the queue is unreachable"))
    with pytest.raises(ConnectionError):
        routes.deliver(record, name_of(record), holds_until=clock.now + 600)
    assert read()[:2] == (1, 0)
    assert routes.deliver(record, name_of(record)).delivered
    assert read()[:2] == (0, 1)


def test_the_audit_row_is_taken_over_only_while_its_pending_mark_is_the_one_read(side):
    routes, clock, read = side
    record = billing_record(read()[2])
    item_id, name = record.item_id, name_of(record)
    row = audit_row(record, name, entered_time(clock.now))
    assert routes._place(row, None, 100.0) == "placed"
    assert routes._place(row, None, 200.0) == Held(lease_until=100.0)  # the row there, as read
    assert not routes._take_over(item_id, name, Held(lease_until=50.0), 300.0)
    assert routes._take_over(item_id, name, Held(lease_until=100.0), 300.0)
    assert not routes._take_over(item_id, name, Held(lease_until=100.0), 400.0)  # once only
    routes._release(item_id, name, 100.0)  # no longer its mark: neither handed back ...
    assert routes._mark_delivered(item_id, name, 100.0) is None  # ... nor marked delivered
    assert routes._place(row, None, 0.0) == Held(lease_until=300.0)
    routes._release(item_id, name, 300.0)
    assert routes._place(row, None, 0.0) == Held(lease_until=0.0)  # handed back: its deadline past
    assert routes._take_over(item_id, name, Held(lease_until=0.0), 500.0)
    assert routes._mark_delivered(item_id, name, 500.0) is None
    assert routes._place(row, None, 600.0) == Held(lease_until=None)  # delivered
    assert read()[:2] == (0, 0)
