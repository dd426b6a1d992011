"""Ticket webhooks through the real handler (Powertools HTTP API resolver) on the template's names
over in-memory fakes of its ports (tests/fakes/webhook_worlds.py), and two smoke tests of the same
flows on the template's resources in moto (ticket queue, ticket DLQ, the signing secret in Secrets
Manager): good signatures queue the ticket, and the ticket intake then routes it; bad, missing and
replayed signatures get 401 with nothing queued; a payload without the needed text is parked with
why. The attacks on the webhook API, and its fuzz, are in test_webhook_attacks.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from datetime import datetime, timezone

import pytest

from decision_router.intake.webhooks import scheme, verify
from decision_router.sources.webhook import Unauthorized
from tests.fakes.webhook_worlds import SECRETS, webhook_world
from tests.functions.conftest import EVENTS
from tests.functions.test_intake_handlers import (
    ON_THE_STACK,
    TICKET_OPTIONS,
    FakeLambdaContext,
    StubbedEndpoint,
    body,
    make_intake,
    ticket_event,
)


def payload(name: str) -> dict:
    return json.loads((EVENTS / f"{name}.json").read_text())


def sign(source: str, raw: bytes, *, at: float | None = None, secret: str | None = None) -> dict[str, str]:
    """The headers each source sends (signing as the source does)."""
    key = (secret or SECRETS[source]).encode()
    at = time.time() if at is None else at
    if source == "zendesk":
        stamp = datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        signature = base64.b64encode(hmac.new(key, stamp.encode() + raw, hashlib.sha256).digest()).decode()
        return {"x-zendesk-webhook-signature": signature, "x-zendesk-webhook-signature-timestamp": stamp}
    if source == "jira":
        return {"x-hub-signature": "sha256=" + hmac.new(key, raw, hashlib.sha256).hexdigest()}
    stamp = str(int(at))
    return {"x-signature": "sha256=" + hmac.new(key, stamp.encode() + b"." + raw, hashlib.sha256).hexdigest(),
            "x-signature-timestamp": stamp}


def request(source: str, raw: bytes, headers: dict[str, str]) -> dict:
    """An API Gateway HTTP API (payload 2.0) event for POST /webhooks/{source}."""
    path = f"/webhooks/{source}"
    return {
        "version": "2.0", "routeKey": "POST /webhooks/{source}", "rawPath": path, "rawQueryString": "",
        "headers": {"content-type": "application/json", **headers}, "pathParameters": {"source": source},
        "requestContext": {"accountId": "123456789012", "apiId": "webhooks", "domainName": "webhooks.example",
                           "domainPrefix": "webhooks", "requestId": "req-1", "routeKey": "POST /webhooks/{source}",
                           "stage": "$default", "time": "29/Nov/2026:12:00:00 +0000", "timeEpoch": 1796126400000,
                           "http": {"method": "POST", "path": path, "protocol": "HTTP/1.1",
                                    "sourceIp": "203.0.113.9", "userAgent": "webhook-sender"}},
        "body": raw.decode(), "isBase64Encoded": False,
    }


def jira_now() -> bytes:
    data = payload("jira_issue_created")
    data["timestamp"] = int(time.time() * 1000)
    return json.dumps(data).encode()


RAW = {"zendesk": lambda: json.dumps(payload("zendesk_ticket_created")).encode(), "jira": jira_now,
       "generic": lambda: json.dumps(payload("webhook_generic_ticket")).encode()}


@pytest.fixture
def world(request, monkeypatch):
    """The fakes, or, for a test marked `ON_THE_STACK`, also the template's resources in moto."""
    with webhook_world(getattr(request, "param", "fakes"), monkeypatch) as world:
        yield world


@pytest.fixture
def webhook(world):
    return world.webhook()


def call(webhook, source: str, raw: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    response = webhook.lambda_handler(request(source, raw, headers), FakeLambdaContext())
    return response["statusCode"], json.loads(response["body"])


@ON_THE_STACK
@pytest.mark.parametrize("source, ticket_id, tier, reference", [
    ("zendesk", "zendesk-48213", "pro", {"system": "zendesk", "id": "48213"}),
    ("jira", "jira-SUP-1187", "enterprise", {"system": "jira", "id": "SUP-1187", "url": "https://acme.atlassian.net/browse/SUP-1187"}),
    ("generic", "W-3001", "pro", {"system": "crm", "id": "OPP-55120"}),
])
def test_a_good_signature_queues_the_ticket_it_carries(webhook, world, source, ticket_id, tier, reference):
    raw = RAW[source]()
    status, answer = call(webhook, source, raw, sign(source, raw))
    assert (status, answer["status"], answer["ticket_id"]) == (202, "queued", ticket_id)
    (message,) = world.queued()
    ticket = json.loads(message["Body"])
    assert ticket["ticket_id"] == ticket_id and ticket["customer"]["tier"] == tier and ticket["reference"] == reference
    assert ticket["subject"] and ticket["body"]


@pytest.mark.parametrize("source", ["zendesk", "jira", "generic"])
@pytest.mark.parametrize("attack", ["bad", "missing", "replayed", "tampered"])
def test_a_bad_missing_or_replayed_signature_is_refused_and_nothing_is_queued(webhook, world, source, attack):
    raw = RAW[source]()
    headers = sign(source, raw, secret="someone-else" if attack == "bad" else None)
    if attack == "missing":
        headers = {}
    if attack == "replayed":  # a request captured two hours ago, sent again unchanged
        if source == "jira":
            old = json.loads(raw)
            old["timestamp"] -= 7200 * 1000
            raw = json.dumps(old).encode()
        headers = sign(source, raw, at=time.time() - 7200)
    if attack == "tampered":
        raw = raw.replace(b'"', b' "', 1)
    status, answer = call(webhook, source, raw, headers)
    # One fixed reason, whatever failed: the answer says nothing of what is configured.
    assert (status, answer) == (401, {"status": "refused", "message": "unauthorized", "reason": "signature missing, invalid or expired"})
    assert world.queued() == [] and world.queued("TicketDeadLetterQueue") == []


@pytest.mark.parametrize("source, remove, reason", [
    ("zendesk", ("detail", "description"), "detail.description is missing or empty"),
    ("jira", ("issue", "fields", "description"), "fields.description is missing or empty"),
    ("generic", ("body",), "body: Field required"),
])
def test_a_payload_without_the_needed_text_is_parked_with_its_reason(webhook, world, source, remove, reason):
    data = json.loads(RAW[source]())
    holder = data
    for part in remove[:-1]:
        holder = holder[part]
    holder[remove[-1]] = None if source == "jira" else ""
    if source == "generic":
        del holder[remove[-1]]
    raw = json.dumps(data).encode()
    status, answer = call(webhook, source, raw, sign(source, raw))
    assert (status, answer["status"]) == (202, "parked") and reason in answer["reason"]
    assert world.queued() == []
    (parked,) = world.queued("TicketDeadLetterQueue")
    assert reason in parked["MessageAttributes"]["failure_reason"]["StringValue"] and parked["Body"] == raw.decode()


def test_other_events_are_acknowledged_and_ignored(webhook, world):
    data = payload("zendesk_ticket_created") | {"type": "zen:event-type:ticket.status_changed"}
    raw = json.dumps(data).encode()
    status, answer = call(webhook, "zendesk", raw, sign("zendesk", raw))
    assert (status, answer["status"]) == (202, "ignored") and "only ticket.created" in answer["reason"]
    assert world.queued() == []


def test_an_unknown_source_is_refused(webhook, world):
    raw = RAW["generic"]()
    status, answer = call(webhook, "servicenow", raw, sign("generic", raw))
    assert status == 401 and answer["reason"] == "signature missing, invalid or expired" and world.queued() == []


@ON_THE_STACK
def test_a_queued_webhook_ticket_is_routed_by_the_ticket_intake(webhook, world, monkeypatch):
    from ticket_intake import app as tickets

    raw = RAW["zendesk"]()
    assert call(webhook, "zendesk", raw, sign("zendesk", raw))[0] == 202
    (message,) = world.queued()
    stub = StubbedEndpoint()
    make_intake(monkeypatch, world, tickets, "ticket", "TicketIntakeFunction", stub.endpoint)
    stub.answer(body(TICKET_OPTIONS, [7.0, 0, 0, 0, 0]))  # billing
    assert tickets.lambda_handler(ticket_event(json.loads(message["Body"])), FakeLambdaContext()) == {"batchItemFailures": []}
    (record,) = world.executions().values()
    assert record.item_id == "zendesk-48213" and record.destination.target == "billing"
    assert record.item["reference"] == {"system": "zendesk", "id": "48213", "url": None}


def test_verify_needs_a_configured_secret():
    with pytest.raises(Unauthorized, match="no signing secret is configured for jira"):
        verify(scheme("jira"), {}, b"{}", "", now=datetime.now(timezone.utc), max_skew=300)
