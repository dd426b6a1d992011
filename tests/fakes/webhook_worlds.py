"""Where a webhook flow test runs: the webhook function on the template's names over in-memory
fakes of its ports (the fast tier), or on the template's resources in moto (the smoke tests,
marked `stack`). Both cold-start the real handler on the function's environment with the signing
keys `SECRETS`, and answer the same questions afterwards (what was queued, parked, put on the bus
for the incident intake: the `WebhookWorld` protocol of tests/fakes/world.py), so a test reads
alike on either. Each extends the intake world of its own kind in `worlds.py` (its ticket queue is
the one the ticket intake reads), so a flow may go on through the ticket or the incident intake;
the fake and the moto one share only `Clock` and the functions here, never each other.

    world = FakeWebhookWorld(monkeypatch)
    webhook = world.webhook()          # ticket_webhook.app, its WIRING this world's
    ...
    world.queued()                     # the ticket queue's messages, as SQS hands them over, taken off
    world.on_bus()                     # what IncidentWebhookRule hands the incident intake, taken off
    world.pass_time(61)                # the delivery record's clock moves on
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from datetime import datetime, timezone
from types import ModuleType, SimpleNamespace
from typing import Any, Iterator, Mapping

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from moto import mock_aws

from decision_router.adapters import deliveries as deliveries_adapter
from decision_router.config import Settings
from tests.fakes.console import FakeBus, FakeDeliveries
from tests.fakes.world import WebhookWorld
from tests.fakes.worlds import FakeWorld, MotoWorld

#: Each source's signing key, as the webhook secret holds them.
SECRETS = {"zendesk": "zendesk-signing-secret", "jira": "jira-webhook-secret", "generic": "our-own-secret",
           "pagerduty": "pagerduty-subscription-secret", "grafana": "grafana-hmac-secret"}
WEBHOOK_FUNCTION = "TicketWebhookFunction"
#: The rule that takes the forwarded incident webhooks off the decision bus, and its target.
INCIDENT_WEBHOOK_RULE, INCIDENT_INTAKE_TARGET = "IncidentWebhookRule", "IncidentIntake"


class Clock:
    """Epoch seconds: the system's, plus what the test moved on (`advance`)."""

    def __init__(self) -> None:
        self.moved = 0.0

    def __call__(self) -> float:
        return time.time() + self.moved

    def advance(self, seconds: float) -> None:
        self.moved += seconds


class FakeWebhookWorld(FakeWorld):
    """The template's names (nothing created) over the fakes: the signing keys in `secrets`, the
    delivery record in `deliveries` (on `clock`), the decision bus in `bus`, the ticket queue and
    the webhook DLQ as the intake world's queues of those URLs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__()
        self.monkeypatch = monkeypatch
        self.clock = Clock()
        self.secrets: dict[str, str] = dict(SECRETS)
        self.deliveries = FakeDeliveries(clock=self.clock)
        self.bus = FakeBus()

    def webhook(self) -> ModuleType:
        """The webhook handler's module, cold-started: its WIRING made from the function's
        environment in the template, its ports this world's."""
        from ticket_webhook import app
        from ticket_webhook.wiring import Wiring

        settings = Settings.from_env(self.environment(WEBHOOK_FUNCTION))
        wiring = Wiring(settings, secrets=lambda: dict(self.secrets), deliveries=self.deliveries, bus=self.bus,
                        tickets=self._queue_at(settings.ticket_queue_url),
                        dead_letters=self._queue_at(settings.dead_letter_queue_url))
        self.monkeypatch.setattr(app, "WIRING", wiring)
        return app

    def set_secrets(self, secrets: Mapping[str, str]) -> None:
        """The webhook secret's new value (before the function's first request: the function keeps
        a secret it fetched for SECRET_MAX_AGE seconds)."""
        self.secrets = dict(secrets)

    def pass_time(self, seconds: float) -> None:
        """The delivery record's clock moves on (a lease or a record running out); the signed
        times are still checked against the system clock."""
        self.clock.advance(seconds)

    # ------------------------------------------------------------------ what became of the deliveries
    def queued(self, logical_id: str = "TicketQueue") -> list[dict[str, Any]]:
        """The queue's messages (Body, MessageAttributes), as SQS hands them over, taken off it."""
        return self.dead_letters(logical_id)

    def on_bus(self) -> list[dict[str, Any]]:
        """The events IncidentWebhookRule hands the incident intake (those its pattern matches, in
        EventBridge's envelope), taken off the bus."""
        pattern = self.template.resolve(self.template.properties(INCIDENT_WEBHOOK_RULE))["EventPattern"]
        events = [self._envelope(source, detail_type, detail) for source, detail_type, detail in self.bus.events
                  if _matches(pattern, {"source": source, "detail-type": detail_type})]
        self.bus.events.clear()
        return events

    def _envelope(self, source: str, detail_type: str, detail: dict) -> dict[str, Any]:
        return {"version": "0", "id": str(uuid.uuid4()), "detail-type": detail_type, "source": source,
                "account": self.template.account_id, "time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "region": self.template.region, "resources": [], "detail": detail}


def _matches(pattern: Mapping[str, Any], fields: Mapping[str, str]) -> bool:
    """An EventBridge pattern of exact values on the envelope's fields (all the fake reads: any
    other pattern fails loudly, so a rule changed in the template is not misread)."""
    unread = set(pattern) - set(fields)
    if unread or not all(isinstance(values, list) and all(isinstance(v, str) for v in values)
                         for values in pattern.values()):
        raise ValueError(f"{INCIDENT_WEBHOOK_RULE}'s pattern is more than exact values of {sorted(fields)}: {pattern}")
    return all(fields[name] in values for name, values in pattern.items())


class MotoWebhookWorld(MotoWorld):
    """The template's resources created in moto (inside mock_aws), the signing keys in its
    webhook secret, the function wired as in the account. The delivery table's adapter reads
    `clock` for its time."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__()
        self.monkeypatch = monkeypatch
        self.clock = Clock()
        self.set_secrets(SECRETS)
        monkeypatch.setattr(deliveries_adapter, "time", SimpleNamespace(time=self.clock))  # it reads only time.time()

    def webhook(self) -> ModuleType:
        from ticket_webhook import app
        from ticket_webhook.wiring import Wiring

        env = self.environment(WEBHOOK_FUNCTION)
        for name, value in env.items():
            self.monkeypatch.setenv(name, value)
        # A cold start: every part made from the settings; read now, so an intake's environment set later is not its own.
        self.monkeypatch.setattr(app, "WIRING", Wiring(Settings.from_env(env)))
        parameters.clear_caches()
        return app

    def set_secrets(self, secrets: Mapping[str, str]) -> None:
        boto3.client("secretsmanager").put_secret_value(SecretId=self.ref("WebhookSecret"), SecretString=json.dumps(secrets))

    def pass_time(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def queued(self, logical_id: str = "TicketQueue") -> list[dict[str, Any]]:
        return self.dead_letters(logical_id)

    def on_bus(self) -> list[dict[str, Any]]:
        return self.template.rule_events(INCIDENT_WEBHOOK_RULE, INCIDENT_INTAKE_TARGET)


@contextlib.contextmanager
def webhook_world(kind: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[WebhookWorld]:
    """The world of `kind` ("fakes" or "moto"), always inside mock_aws: a call no fake answers
    fails at once against an empty moto instead of reaching for an account."""
    with mock_aws():
        world: WebhookWorld = MotoWebhookWorld(monkeypatch) if kind == "moto" else FakeWebhookWorld(monkeypatch)
        yield world
