"""The webhook function's composition root (`decision_router.composition`): its settings and the
parts its intake works with (the signing keys, the ticket queue, the webhook DLQ, the delivery
record, the bus), each made from the settings on first use and then kept for the execution
environment. app.py makes one `Wiring` at import (nothing is read or connected then); a test, or
the local run, hands it the parts it replaces, and the rest are made from the settings as in the
account."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Mapping

from aws_lambda_powertools.utilities import parameters

from decision_router.adapters.deliveries import Deliveries
from decision_router.adapters.queues import EventBus, Queue
from decision_router.composition import CompositionRoot, part
from decision_router.domain.ports.messaging import Bus, Sender
from decision_router.domain.ports.webhooks import DeliveryRecord
from decision_router.intake.webhooks import WebhookIntake

#: Seconds a fetched secret is reused before Secrets Manager is asked again (a rotated secret is picked up).
SECRET_MAX_AGE = 300
#: The signing keys, by source (what `WebhookIntake` asks for each delivery).
Secrets = Callable[[], Mapping[str, str]]


class Wiring(CompositionRoot):
    @part
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

    @part
    def tickets(self) -> Sender:
        return Queue(self.settings.require("ticket_queue_url").ticket_queue_url)

    @part
    def dead_letters(self) -> Sender:
        return Queue(self.settings.require("dead_letter_queue_url").dead_letter_queue_url)

    @part
    def deliveries(self) -> DeliveryRecord:
        return Deliveries(self.settings.require("webhook_deliveries_table").webhook_deliveries_table)

    @part
    def bus(self) -> Bus | None:
        """The decision bus; None when the function is given none (incident webhooks are then refused)."""
        name = self.settings.event_bus_name
        return EventBus(name) if name else None

    @part
    def clock(self) -> Callable[[], datetime] | None:
        """The intake's now, for the signed times' window; None: the system clock (a test hands in its own)."""
        return None

    @part
    def intake(self) -> WebhookIntake:
        s = self.settings
        return WebhookIntake(secrets=self.secrets, tickets=self.tickets, dead_letters=self.dead_letters,
                             deliveries=self.deliveries, bus=self.bus, max_skew_seconds=s.webhook_max_skew_seconds,
                             default_tier=s.webhook_default_tier, clock=self.clock)
