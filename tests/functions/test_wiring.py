"""The intake functions' composition root: each part made once from the settings, a missing
setting named, a part handed in used as it is. No AWS call: the adapters make their clients on
first use, and nothing here uses one."""

from __future__ import annotations

import pytest
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

from decision_router.adapters.queues import Queue
from decision_router.config import ConfigError, Settings
from decision_router.intake.pipeline import Intake
from decision_router.intake.tickets import TicketIntake
from decision_router.intake.wiring import Wiring

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
