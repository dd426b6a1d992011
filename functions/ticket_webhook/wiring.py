"""The webhook function's composition root: its settings and the parts its intake works with (the
signing keys, the ticket queue, the webhook DLQ, the delivery record, the bus), each made from the
settings on first use and then kept for the execution environment. app.py makes one `Wiring` at
import (nothing is read or connected then); a test, or the local run, hands it the parts it
replaces, and the rest are made from the settings as in the account."""

from __future__ import annotations

from datetime import datetime
from functools import cached_property
from typing import Any, Callable, Mapping

from aws_lambda_powertools.utilities import parameters

from decision_router.adapters.deliveries import Deliveries
from decision_router.adapters.queues import EventBus, Queue
from decision_router.config import Settings
from decision_router.domain.ports import Bus, DeliveryRecord, Sender
from decision_router.intake.webhooks import WebhookIntake

#: Seconds a fetched secret is reused before Secrets Manager is asked again (a rotated secret is picked up).
SECRET_MAX_AGE = 300
#: The signing keys, by source (what `WebhookIntake` asks for each delivery).
Secrets = Callable[[], Mapping[str, str]]


class Wiring:
    def __init__(self, settings: Settings | None = None, *, secrets: Secrets | None = None,
                 tickets: Sender | None = None, dead_letters: Sender | None = None,
                 deliveries: DeliveryRecord | None = None, bus: Bus | None = None,
                 clock: Callable[[], datetime] | None = None):
        """Each part given here replaces the one the settings would make; `clock`: the intake's
        now, for the signed times' window (the system clock when none is given)."""
        given = {"settings": settings, "secrets": secrets, "tickets": tickets, "dead_letters": dead_letters,
                 "deliveries": deliveries, "bus": bus}
        self.__dict__.update({name: part for name, part in given.items() if part is not None})  # cached_property reads these first
        self.clock = clock

    @cached_property
    def settings(self) -> Settings:
        return Settings.from_env()

    @cached_property
    def secrets(self) -> Secrets:
        """Each source's signing key from the webhook secret (a JSON object of source -> key)."""
        arn = self.settings.require("webhook_secret_arn").webhook_secret_arn
        # Its own provider (not Powertools' process-wide default): its client is made here, on first use.
        provider = parameters.SecretsProvider()

        def secrets() -> dict[str, Any]:
            value = provider.get(arn, transform="json", max_age=SECRET_MAX_AGE)
            if not isinstance(value, dict):  # a secret that is not a JSON object of source -> key
                raise RuntimeError(f"WEBHOOK_SECRET_ARN: the secret is not a JSON object of source keys: {type(value).__name__}")
            return value

        return secrets

    @cached_property
    def tickets(self) -> Sender:
        return Queue(self.settings.require("ticket_queue_url").ticket_queue_url)

    @cached_property
    def dead_letters(self) -> Sender:
        return Queue(self.settings.require("dead_letter_queue_url").dead_letter_queue_url)

    @cached_property
    def deliveries(self) -> DeliveryRecord:
        return Deliveries(self.settings.require("webhook_deliveries_table").webhook_deliveries_table)

    @cached_property
    def bus(self) -> Bus | None:
        """The decision bus; None when the function is given none (incident webhooks are then refused)."""
        name = self.settings.event_bus_name
        return EventBus(name) if name else None

    @cached_property
    def intake(self) -> WebhookIntake:
        s = self.settings
        return WebhookIntake(secrets=self.secrets, tickets=self.tickets, dead_letters=self.dead_letters,
                             deliveries=self.deliveries, bus=self.bus, max_skew_seconds=s.webhook_max_skew_seconds,
                             default_tier=s.webhook_default_tier, clock=self.clock)
