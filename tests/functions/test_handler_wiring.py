"""The composition roots of the webhook function, the review console and the review function: each
part made once from its own setting (a missing one named), and each part handed in used by the
handler as it is. Here the parts handed in are the in-memory fakes of tests/fakes/console.py, and
a request goes through the real handler: no AWS, not even moto."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from decision_router.adapters.caller_identity import StsCallerIdentity
from decision_router.adapters.pending_reviews import PendingReviewTable
from decision_router.config import ConfigError, Settings
from decision_router.domain.policies import load_policy
from decision_router.domain.records import DecisionRecord, execution_name
from decision_router.intake.webhooks import sign
from decision_router.review.completion import PendingReview
from decision_router.review.pending import pending_row
from decision_router.sources.webhook import FORWARDED_SOURCE
from local.event_sources import http_event
from tests.fakes.console import (
    FakeAuditTrail,
    FakeBus,
    FakeDeliveries,
    FakeLabelledExamples,
    FakePendingReviews,
    FakeResolvedItems,
    FakeReviewTasks,
    FakeUsedProofs,
)
from tests.functions.conftest import ALL_TARGETS, EVENTS
from tests.functions.conftest import unsure_ticket as shared_unsure_ticket
from tests.functions.sts_stand_in import CAROL, TEST_REVIEWER_PRINCIPALS, StsStandIn
from tests.functions.test_intake_handlers import FakeLambdaContext

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/review"
DESTINATIONS = {target: f"https://sqs.us-east-1.amazonaws.com/123456789012/{target}" for target in ALL_TARGETS}
ALICE = {"sub": "a-1", "email": "alice@example.com", "email_verified": "true", "cognito:username": "alice",
         "cognito:groups": ["reviewers"]}
KEYS = {"generic": "our-own-secret", "pagerduty": "pagerduty-subscription-secret"}


class Sent:
    """A queue that keeps what is sent to it (the ticket queue, the webhook DLQ)."""

    def __init__(self) -> None:
        self.bodies: list[str] = []

    def send(self, body: str, attributes: dict[str, str] | None = None) -> None:
        self.bodies.append(body)


def unsure_ticket(ticket_id: str) -> DecisionRecord:
    """A ticket the routing code sends to review, between billing and technical support."""
    return shared_unsure_ticket(ticket_id, destinations=DESTINATIONS)


@pytest.fixture
def in_review():
    """A ticket waiting for its reviewer: its task waiting, its row in the pending-review index."""
    record = unsure_ticket("T-77")
    name = execution_name(record.item_kind, record.item_id, record.item_key)
    tasks, reviews = FakeReviewTasks(), FakePendingReviews()
    token = tasks.issue()
    request = PendingReview(task_token=token, execution_name=name, requested_at="2026-12-01T09:00:00.000Z", record=record)
    reviews.put(pending_row(request, load_policy(record.policy.name), review_timeout_seconds=3600))
    return name, token, tasks, reviews


# ------------------------------------------------------------------------------ review console
def test_the_console_makes_each_part_from_its_own_setting_and_names_a_missing_one():
    from review_console.wiring import Wiring

    wiring = Wiring(Settings.from_env({"PENDING_REVIEWS_TABLE_NAME": "pending-reviews"}))

    assert isinstance(wiring.pending_reviews, PendingReviewTable) and wiring.pending_reviews.table_name == "pending-reviews"
    assert wiring.pending_reviews is wiring.pending_reviews
    with pytest.raises(ConfigError, match="AUDIT_TABLE_NAME"):
        _ = wiring.audit
    assert wiring.resolved_items is None  # no table: no similar items, nothing kept, nothing fails


def test_the_console_lists_and_answers_a_review_with_the_parts_it_is_given(monkeypatch, in_review):
    from review_console import app
    from review_console.wiring import Wiring

    name, _, tasks, reviews = in_review
    resolved = FakeResolvedItems()
    monkeypatch.setattr(app, "WIRING", Wiring(Settings.from_env({}), pending_reviews=reviews, tasks=tasks,
                                              audit=FakeAuditTrail(), examples=FakeLabelledExamples(),
                                              resolved_items=resolved))

    def call(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        event = http_event(method, path, body=json.dumps(body) if body else None, claims=ALICE)
        response = app.lambda_handler(event, FakeLambdaContext())
        return response["statusCode"], json.loads(response["body"])

    status, listed = call("GET", "/api/reviews")
    assert status == 200 and [r["execution_name"] for r in listed["reviews"]] == [name]
    status, answered = call("POST", f"/api/reviews/{name}", {"answers": {"queue": "technical_fault"}})

    assert (status, answered["status"], answered["target"]) == (200, "answered", "technical-support")
    (answer,) = tasks.answered.values()
    assert (answer.execution_name, answer.reviewer, answer.chosen.answers) == (name, "a-1", {"queue": "technical_fault"})
    assert reviews.rows == {}  # the answered review's row removed
    assert [r.item_id for r in resolved.recent("support-ticket")] == ["T-77"]
    assert call("POST", f"/api/reviews/{name}", {"answers": {"queue": "billing"}})[0] == 409  # answered already


# ------------------------------------------------------------------------------ review function
def test_the_review_function_completes_a_review_with_the_parts_it_is_given(monkeypatch, in_review):
    from review import app
    from review.wiring import Wiring

    name, token, tasks, reviews = in_review
    sts, proofs = StsStandIn(), FakeUsedProofs()
    identity = StsCallerIdentity(region="us-east-1")
    sts.attach(identity.client)  # STS answers who signed the proof (a signature-checking stand-in)
    monkeypatch.setattr(app, "WIRING", Wiring(Settings.from_env({"REVIEWER_PRINCIPALS": TEST_REVIEWER_PRINCIPALS}),
                                              pending_reviews=reviews, tasks=tasks, used_proofs=proofs,
                                              resolved_items=FakeResolvedItems(), caller_identity=identity))

    result = app.lambda_handler(CAROL.prove({"task_token": token, "execution_name": name,
                                             "answers": {"queue": "billing"}}), FakeLambdaContext())

    assert (result["status"], result["destination"]["target"]) == ("completed", "billing")
    assert tasks.answered[token].reviewer == "carol"  # the proven user's name
    assert tasks.answered[token].reviewer_id == f"iam:{CAROL.arn}"
    assert len(proofs.rows) == 1  # the proof, remembered
    assert reviews.rows == {}  # the answered review's row removed


def test_the_review_function_needs_the_index_only_when_it_is_not_given():
    from review.wiring import Wiring

    wiring = Wiring(Settings.from_env({}))

    with pytest.raises(ConfigError, match="PENDING_REVIEWS_TABLE_NAME"):
        _ = wiring.pending_reviews
    assert wiring.used_proofs is None and wiring.resolved_items is None  # no table: every answer is refused


# ------------------------------------------------------------------------------ webhook function
def test_the_webhook_queues_forwards_and_refuses_a_replay_with_the_parts_it_is_given(monkeypatch):
    from ticket_webhook import app
    from ticket_webhook.wiring import Wiring

    tickets, dead_letters, deliveries, bus = Sent(), Sent(), FakeDeliveries(), FakeBus()
    monkeypatch.setattr(app, "WIRING", Wiring(Settings.from_env({}), secrets=lambda: KEYS, tickets=tickets,
                                              dead_letters=dead_letters, deliveries=deliveries, bus=bus))

    def call(source: str, raw: bytes) -> tuple[int, str]:
        headers = sign(source, raw, KEYS[source], at=time.time())
        response = app.lambda_handler(http_event("POST", f"/webhooks/{source}", headers=headers, body=raw),
                                      FakeLambdaContext())
        return response["statusCode"], json.loads(response["body"])["status"]

    ticket = (EVENTS / "webhook_generic_ticket.json").read_bytes()
    assert call("generic", ticket) == (202, "queued")
    assert call("generic", ticket) == (200, "duplicate")
    assert len(tickets.bodies) == 1 and {row["state"] for row in deliveries.rows.values()} == {"done"}

    alert = json.loads((EVENTS / "pagerduty_webhook_incident_triggered.json").read_text())["body"]
    alert["event"]["occurred_at"] = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    raw = json.dumps(alert).encode()
    assert call("pagerduty", raw) == (202, "forwarded")
    assert bus.events == [(FORWARDED_SOURCE, "PagerDuty Webhook", alert)]
    assert dead_letters.bodies == []


def test_the_webhook_makes_its_parts_from_the_settings_and_names_a_missing_one():
    from ticket_webhook.wiring import Wiring

    wiring = Wiring(Settings.from_env({"TICKET_QUEUE_URL": QUEUE_URL}))

    assert wiring.tickets is wiring.tickets and wiring.bus is None  # no bus: incident webhooks are refused
    with pytest.raises(ConfigError, match="WEBHOOK_DELIVERIES_TABLE_NAME"):
        _ = wiring.deliveries
    with pytest.raises(ConfigError, match="WEBHOOK_SECRET_ARN"):
        _ = wiring.intake  # the first part it needs that the settings cannot make
