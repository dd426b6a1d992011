"""The intake functions' composition root: each part made once from the settings, a missing
setting named, a part handed in used as it is. No AWS call: the adapters make their clients on
first use, and nothing here uses one."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

from decision_router.adapters.queues import Queue
from decision_router.config import ConfigError, Settings
from decision_router.intake.pipeline import Intake
from decision_router.intake.tickets import TicketIntake
from decision_router.intake.wiring import Wiring
from decision_router.items import parse_item
from tests.fakes.console import FakeAuditTrail
from tests.fakes.intake import FakeDirectRoutes, FakeEndpoint, FakeQueue, InMemoryIdempotency, RecordingWorkflow
from tests.functions.conftest import TICKET_TARGETS

DLQ = "https://sqs.us-east-1.amazonaws.com/123456789012/ticket-dlq"


def test_each_part_is_made_once_from_the_settings_and_a_missing_setting_is_named():
    wiring = Wiring(Settings.from_env({"DEAD_LETTER_QUEUE_URL": DLQ}))

    assert isinstance(wiring.dead_letters, Queue) and wiring.dead_letters.url == DLQ
    assert wiring.dead_letters is wiring.dead_letters
    with pytest.raises(ConfigError, match="TICKET_QUEUE_URL"):
        _ = wiring.ticket_queue
    assert wiring.open_incidents is None  # no table: tickets are not linked, nothing fails


def test_a_part_handed_in_is_the_one_every_flow_over_the_intake_uses():
    given = Queue(DLQ.replace("ticket-dlq", "elsewhere"))
    wiring = Wiring(Settings.from_env({}), dead_letters=given)
    intake = Intake("ticket", logger=None, metrics=None, wiring=wiring)  # type: ignore[arg-type]

    tickets = TicketIntake(intake, logger=None, metrics=None)  # type: ignore[arg-type]

    assert tickets.wiring is wiring and tickets.wiring.dead_letters is given


def test_the_idempotency_store_is_made_from_the_settings_and_a_missing_table_is_named():
    wiring = Wiring(Settings.from_env({"IDEMPOTENCY_TABLE_NAME": "decisions"}))

    assert isinstance(wiring.idempotency_store, DynamoDBPersistenceLayer)
    assert wiring.idempotency_store.table_name == "decisions" and wiring.idempotency_store is wiring.idempotency_store
    with pytest.raises(ConfigError, match="IDEMPOTENCY_TABLE_NAME"):
        _ = Wiring(Settings.from_env({})).idempotency_store


class LambdaContext:
    """An invocation with a minute left (the idempotency record's lock lasts as long)."""

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def test_the_intake_judges_each_item_once_in_the_idempotency_store_handed_in():
    """A duplicate is answered from the store given (no second model call), not from a table."""
    settings = Settings.from_env({
        "DECISION_ENDPOINT_NAME": "decision-endpoint", "IDEMPOTENCY_TABLE_NAME": "never-read",
        "ROUTING_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:routing",
        "DESTINATION_QUEUES": json.dumps({t: f"https://sqs/{t}" for t in TICKET_TARGETS}),
        "POLICY_NAME": "support-ticket",
        "AUDIT_TABLE_NAME": "never-written", "EVENT_BUS_NAME": "never-put"})
    store, workflow = InMemoryIdempotency(), RecordingWorkflow()
    direct = FakeDirectRoutes(FakeAuditTrail(), FakeQueue)  # an automatic route is delivered without an execution
    # the shipped head reads the hidden state; on another model than its own it is skipped: the letters decide
    endpoint = FakeEndpoint({"queue": [6.0, 0.0, 0.0, 0.0, 0.0]}, hidden_state=[0.0] * 576)
    intake = Intake("ticket", logger=Logger(service="test"), metrics=Metrics(namespace="test"),
                    wiring=Wiring(settings, endpoint=endpoint, workflow=workflow, idempotency_store=store,
                                  direct_routes=direct))
    ticket = parse_item("ticket", {"ticket_id": "T-1", "subject": "Charged twice", "body": "Refund one payment.",
                                   "customer": {"id": "C-1", "tier": "pro"}, "channel": "email",
                                   "created_at": "2026-11-29T12:00:00Z"})

    context = LambdaContext()
    intake.register(context)
    first, again = intake.route(ticket, context), intake.route(ticket, context)

    assert len(endpoint.requests) == 1 and [item["status"] for item in store.items.values()] == ["COMPLETED"]
    assert first["execution_name"] == again["execution_name"] and list(direct.records) == [first["execution_name"]]
    assert not workflow.records  # answered automatically: no execution started
    assert first["target"] == "billing"
