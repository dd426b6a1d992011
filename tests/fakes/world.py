"""What a flow test asks of the world it runs in, whichever world it is. Each kind of world comes
as two sibling classes: a fake one over the in-memory ports (the fast tier) and a moto one over the
real boto3 adapters on the template's resources (the smoke tests, marked `stack`); neither
inherits from the other, and each answers the protocol of its kind here, so a test written against
the protocol runs unchanged on both.

    World         the intakes       tests/fakes/worlds.py          FakeWorld, MotoWorld
    WebhookWorld  the webhook       tests/fakes/webhook_worlds.py  FakeWebhookWorld, MotoWebhookWorld
    ReviewWorld   the review side   tests/fakes/console_worlds.py  FakeConsoleWorld, MotoConsoleWorld

A webhook or review world is an intake world too (a flow goes on through the intakes), so each
extends the intake world of its own kind. What only one kind has (a fake's `workflow`, `bus`,
`pending_reviews`) is for the tests that run on that kind alone.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Mapping, Protocol

import pytest

from decision_router.domain.ports.routing import Endpoint
from decision_router.domain.precision import CheckCounts
from decision_router.domain.records import DecisionRecord
from decision_router.intake.wiring import Wiring
from local.cloudformation import Stack


class World(Protocol):
    """The template's names and the intakes' wiring, and what became of the items afterwards."""

    template: Stack
    #: How long the template keeps audit rows (AuditRetentionDays), as the intakes are told it.
    audit_retention_days: int

    def ref(self, logical_id: str) -> str: ...

    def environment(self, function: str) -> dict[str, str]:
        """The function's environment as the template gives it (a fresh dict each call)."""
        ...

    def wiring(self, function: str, *, endpoint: Endpoint, env: dict[str, str] | None = None) -> Wiring:
        """The function's intake wiring over this world's parts, `env` in place of its environment."""
        ...

    def executions(self) -> dict[str, DecisionRecord]:
        """Execution name -> the record it was started with, and each route delivered directly."""
        ...

    def delivered_directly(self) -> dict[str, DecisionRecord]:
        """Execution name -> the record of each automatic route the intake delivered itself."""
        ...

    def dead_letters(self, logical_id: str = ...) -> list[dict[str, Any]]:
        """The queue's messages (Body, MessageAttributes), as SQS hands them over, taken off it."""
        ...

    def idempotency_statuses(self) -> list[str]: ...


class WebhookWorld(World, Protocol):
    """The webhook function cold-started on this world, and what it queued and put on the bus."""

    def webhook(self) -> ModuleType:
        """The webhook handler's module, its WIRING this world's."""
        ...

    def set_secrets(self, secrets: Mapping[str, str]) -> None: ...

    def pass_time(self, seconds: float) -> None:
        """The delivery record's clock moves on."""
        ...

    def queued(self, logical_id: str = ...) -> list[dict[str, Any]]: ...

    def on_bus(self) -> list[dict[str, Any]]:
        """The events IncidentWebhookRule hands the incident intake, in EventBridge's envelope, taken off."""
        ...


class ReviewWorld(World, Protocol):
    """The review console and function over this world, the routing workflow's executions, and the
    rows and messages the workflow wrote."""

    #: STS as the review function's proofs meet it (tests/functions/sts_stand_in.py).
    sts: Any
    #: The stack's signing key (SigningKeySecret).
    signing_key: Any
    #: The audit trail (port `AuditTrail`), read as the console reads it.
    audit: Any

    def console_function(self) -> Callable[[dict], dict]: ...

    def review_function(self, monkeypatch: pytest.MonkeyPatch) -> None: ...

    def start(self, record: DecisionRecord) -> str:
        """The record's routing execution started, as the intakes start it; its name."""
        ...

    def status(self, name: str) -> str | None: ...

    def wait_for(self, predicate: Callable[[], Any], what: str) -> Any:
        """The predicate's first true value, once the workflow went as far as it goes."""
        ...

    def pending(self, *records: DecisionRecord) -> list[str]:
        """Each record's execution started, once the workflow requested every review."""
        ...

    def pending_message(self) -> dict[str, Any]: ...

    def finished(self, name: str) -> str:
        """The execution's status once it ended."""
        ...

    def depth(self, logical_id: str) -> int: ...

    def delivered(self, logical_id: str) -> list[dict[str, Any]]:
        """The queue's messages (their JSON bodies), taken off it."""
        ...

    def review_requests(self) -> list[dict[str, Any]]:
        """The reviews waiting (task_token, execution_name, requested_at, record), oldest first."""
        ...

    def audit_columns(self, item_id: str, execution_name: str) -> dict[str, str]: ...

    def audit_expiry(self, item_id: str, execution_name: str) -> int | None: ...

    def labelled_example(self, policy: str, item_id: str) -> dict[str, str]: ...

    def labelled_examples(self) -> list[dict[str, str]]: ...

    def put_labelled_example(self, columns: dict[str, str]) -> None: ...

    def workflow_events(self) -> list[tuple[str, dict[str, Any]]]:
        """What the routing workflow put on the decision bus (detail type, detail), taken off."""
        ...

    def precision_counts(self, policy: str, question: str, option: str | None = None) -> CheckCounts: ...
