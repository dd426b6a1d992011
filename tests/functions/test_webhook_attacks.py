"""Attacks on the webhook API, each against the real handler (Powertools' HTTP API resolver) on
template.yaml's names over in-memory fakes of its ports (ticket queue, its DLQ, the delivery
record, the decision bus, the signing secret: tests/fakes/webhook_worlds.py), three of them also
on the template's resources in moto (a replay, a killed invocation, a forwarded incident), and a
property-based fuzz of POST /webhooks/{source}. The delivery record's own conditional writes are
tried on its real table (alone, in moto).

Each test names the finding it guards (all failed before the webhook API refused them):
replays inside the window queued again; Jira's own retries refused; the generic key posing as
Zendesk; 500s from undecodable bodies, deep nesting, huge numbers and oversized bodies; 401
bodies naming what is configured. The incident webhooks (PagerDuty V3, Grafana alerting) are
verified and forwarded to the bus, never queued as tickets.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from datetime import datetime, timezone

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from decision_router.intake.webhooks import MAX_BODY_BYTES, MAX_DEPTH, NOT_SQS_TEXT
from local.cloudformation import Stack
from tests.fakes.webhook_worlds import webhook_world
from tests.functions.test_intake_handlers import ON_THE_STACK, FakeLambdaContext
from tests.functions.test_webhooks import EVENTS, RAW, SECRETS, call, request, sign

UNAUTHORIZED = {"status": "refused", "message": "unauthorized", "reason": "signature missing, invalid or expired"}


def sample(name: str) -> dict:
    return json.loads((EVENTS / f"{name}.json").read_text())


def pagerduty_body(event_type: str = "incident.triggered", *, occurred_at: datetime | None = None) -> bytes:
    body = sample("pagerduty_webhook_incident_triggered")["body"]
    body["event"]["event_type"] = event_type
    body["event"]["occurred_at"] = (occurred_at or datetime.now(timezone.utc)).isoformat(timespec="milliseconds")
    return json.dumps(body).encode()


def pagerduty_headers(raw: bytes, *, secrets: tuple[str, ...] = (SECRETS["pagerduty"],), delivery: str = "wh-1") -> dict:
    """As PagerDuty signs: `v1=<hex>` per secret, comma-separated (two while a secret rotates)."""
    signatures = ",".join("v1=" + hmac.new(s.encode(), raw, hashlib.sha256).hexdigest() for s in secrets)
    return {"x-pagerduty-signature": signatures, "x-webhook-id": delivery}


def grafana_headers(raw: bytes, *, at: float | None = None, timestamped: bool = True, secret: str = SECRETS["grafana"]) -> dict:
    """As Grafana 12 signs: lowercase hex of HMAC-SHA256 over "<ts>:<body>" (or the body alone)."""
    if not timestamped:
        return {"x-grafana-alerting-signature": hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()}
    stamp = str(int(time.time() if at is None else at))
    return {"x-grafana-alerting-signature": hmac.new(secret.encode(), f"{stamp}:".encode() + raw, hashlib.sha256).hexdigest(),
            "x-grafana-alerting-signature-timestamp": stamp}


@pytest.fixture
def world(request, monkeypatch):
    """The fakes, or, for a test marked `ON_THE_STACK`, also the template's resources in moto."""
    with webhook_world(getattr(request, "param", "fakes"), monkeypatch) as world:
        yield world


@pytest.fixture
def webhook(world):
    return world.webhook()


@pytest.fixture
def deliveries_table():
    """The delivery record's table alone, in moto: what its adapter's conditional writes run on."""
    with mock_aws():
        yield Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}).create(
            only=["WebhookDeliveriesTable"]).ref("WebhookDeliveriesTable")


def invoke(webhook, event: dict) -> tuple[int, dict]:
    response = webhook.lambda_handler(event, FakeLambdaContext())
    return response["statusCode"], json.loads(response["body"])


# ---------------------------------------------------------------------------- replays
@ON_THE_STACK
def test_attack_a_replayed_zendesk_request_is_queued_once_and_counted(webhook, world, capsys):
    raw = RAW["zendesk"]()
    headers = {**sign("zendesk", raw), "x-zendesk-webhook-id": "01GK8E6BKWMJZD2T8Y5AXJQMG5"}
    answers = [call(webhook, "zendesk", raw, headers) for _ in range(3)]
    assert [(status, a["status"]) for status, a in answers] == [(202, "queued"), (200, "duplicate"), (200, "duplicate")]
    assert len(world.queued()) == 1
    metrics = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    counted = [m["WebhooksDuplicate"] for m in metrics if "WebhooksDuplicate" in m]
    assert sum(sum(v) if isinstance(v, list) else v for v in counted) == 2


def test_attack_a_replay_with_a_new_delivery_id_is_still_a_duplicate(webhook, world):
    raw = RAW["zendesk"]()
    headers = sign("zendesk", raw)
    assert call(webhook, "zendesk", raw, {**headers, "x-zendesk-webhook-id": "a"})[1]["status"] == "queued"
    assert call(webhook, "zendesk", raw, {**headers, "x-zendesk-webhook-id": "b"})[1]["status"] == "duplicate"
    assert len(world.queued()) == 1


def test_a_senders_retry_signed_anew_is_recognised_by_its_delivery_id(webhook, world):
    raw = RAW["zendesk"]()
    first = {**sign("zendesk", raw, at=time.time() - 60), "x-zendesk-webhook-id": "same-delivery"}
    retry = {**sign("zendesk", raw), "x-zendesk-webhook-id": "same-delivery"}
    assert call(webhook, "zendesk", raw, first)[1]["status"] == "queued"
    assert call(webhook, "zendesk", raw, retry)[1]["status"] == "duplicate"
    assert len(world.queued()) == 1


def test_attack_jiras_own_retry_after_the_skew_window_is_accepted_once(webhook, world):
    """Jira retries a failed delivery with the same body (its event's time) for up to half an hour."""
    data = json.loads(RAW["jira"]())
    data["timestamp"] = int((time.time() - 20 * 60) * 1000)  # the event happened 20 minutes ago
    raw = json.dumps(data).encode()
    headers = {**sign("jira", raw), "x-atlassian-webhook-identifier": "5d2a7c-retry", "x-atlassian-webhook-retry": "3"}
    assert call(webhook, "jira", raw, headers)[:1] == (202,)
    assert call(webhook, "jira", raw, headers)[1]["status"] == "duplicate"
    assert len(world.queued()) == 1
    data["timestamp"] = int((time.time() - 2 * 3600) * 1000)  # past any retry: refused
    old = json.dumps(data).encode()
    assert call(webhook, "jira", old, sign("jira", old)) == (401, UNAUTHORIZED)


def test_a_delivery_that_could_not_be_queued_is_not_remembered(webhook, world):
    raw = RAW["generic"]()
    headers = sign("generic", raw)
    intake = webhook.intake()
    send = intake.tickets.send

    def refuse(*_, **__):
        raise RuntimeError("SQS is down")

    intake.tickets.send = refuse
    try:
        with pytest.raises(RuntimeError):
            call(webhook, "generic", raw, headers)
    finally:
        intake.tickets.send = send
    assert call(webhook, "generic", raw, headers)[1]["status"] == "queued"  # the sender's retry gets through


@ON_THE_STACK
def test_attack_an_invocation_killed_after_the_claim_does_not_lose_the_ticket(webhook, world):
    """The invocation dies between claiming the delivery and queueing it (the function's timeout, an
    out-of-memory kill: no `except` runs). The sender's retry is told to come back while the dead
    invocation's lease runs, then takes the delivery over and queues it; after that it is a duplicate."""
    from decision_router.adapters import deliveries

    raw = RAW["generic"]()
    headers = sign("generic", raw)
    intake = webhook.intake()
    send = intake.tickets.send

    def killed(*_, **__):
        raise SystemExit("Task timed out after 15.00 seconds")

    intake.tickets.send = killed
    try:
        with pytest.raises(SystemExit):
            call(webhook, "generic", raw, headers)
    finally:
        intake.tickets.send = send
    response = webhook.lambda_handler(request("generic", raw, headers), FakeLambdaContext())
    answer = json.loads(response["body"])
    assert (response["statusCode"], answer["status"]) == (409, "in_progress")
    assert 0 < int(response["headers"]["Retry-After"]) <= deliveries.LEASE_SECONDS
    assert world.queued() == []
    world.pass_time(deliveries.LEASE_SECONDS + 1)  # the dead invocation's lease has run out
    assert call(webhook, "generic", raw, headers)[:1] == (202,)
    assert len(world.queued()) == 1
    assert call(webhook, "generic", raw, headers)[1]["status"] == "duplicate"
    assert world.queued() == []


def test_a_delivery_record_lease_is_taken_over_once_and_released_only_by_its_owner(deliveries_table, monkeypatch):
    from decision_router.adapters import deliveries
    from decision_router.adapters.deliveries import LEASE_SECONDS, Deliveries

    table = deliveries_table
    record = Deliveries(table, boto3.client("dynamodb"))
    first = record.claim(["k#signed", "k#id"], "zendesk")
    assert first.state == "new" and first.token
    busy = record.claim(["k#other-signature", "k#id"], "zendesk")
    assert (busy.state, busy.key) == ("pending", "k#id") and 0 < busy.retry_after <= LEASE_SECONDS
    # The busy claim released what it had claimed (its retry must find it free).
    assert "Item" not in boto3.client("dynamodb").get_item(TableName=table, Key={"delivery_key": {"S": "k#other-signature"}})
    now = time.time()
    monkeypatch.setattr(deliveries.time, "time", lambda: now + LEASE_SECONDS + 1)
    second = record.claim(["k#signed", "k#id"], "zendesk")  # the first invocation died: taken over
    assert second.state == "new" and second.token != first.token
    assert record.claim(["k#signed", "k#id"], "zendesk").state == "pending"  # a fresh lease: once only
    record.forget(["k#signed", "k#id"], first.token)  # the dead owner's release removes nothing
    assert record.claim(["k#signed"], "zendesk").state == "pending"
    record.done(["k#signed", "k#id"], second.token, "zendesk")
    assert record.claim(["k#signed"], "zendesk").state == "done"
    assert record.claim(["k#re-signed", "k#id"], "zendesk").state == "done"  # a re-signed retry
    assert record.claim(["k#re-signed"], "zendesk").state == "done"  # recorded as the duplicate it was


def test_a_delivery_recorded_without_a_state_counts_as_handed_on(deliveries_table):
    from decision_router.adapters.deliveries import Deliveries

    table, dynamodb = deliveries_table, boto3.client("dynamodb")
    now = int(time.time())
    dynamodb.put_item(TableName=table, Item={"delivery_key": {"S": "old#row"}, "source": {"S": "jira"},
                                             "received_at": {"N": str(now - 3600)}, "expires_at": {"N": str(now + 3600)}})
    assert Deliveries(table, dynamodb).claim(["old#row"], "jira").state == "done"


# ---------------------------------------------------------------------------- the generic key posing as another source
@pytest.mark.parametrize("claim, reason", [
    ({"ticket_id": "zendesk-777"}, "prefix belongs to the zendesk webhook"),
    ({"ticket_id": "JIRA-SUP-1"}, "prefix belongs to the jira webhook"),
    ({"reference": {"system": "zendesk", "id": "777"}}, "belongs to the zendesk webhook"),
    ({"reference": {"system": " Zendesk ", "id": "777"}}, "belongs to the zendesk webhook"),
    ({"reference": {"system": "pagerduty", "id": "P1"}}, "belongs to the pagerduty webhook"),
])
def test_attack_the_generic_key_cannot_pose_as_another_source(webhook, world, claim, reason):
    data = json.loads(RAW["generic"]()) | claim
    raw = json.dumps(data).encode()
    status, answer = call(webhook, "generic", raw, sign("generic", raw))
    assert (status, answer["status"]) == (202, "parked") and reason in answer["reason"]
    assert world.queued() == []
    (parked,) = world.queued("TicketDeadLetterQueue")
    assert reason in parked["MessageAttributes"]["failure_reason"]["StringValue"]


def test_the_write_back_policy_names_zendesk_tickets_from_zendesk_only():
    from decision_router.sources.claims import WRITE_BACK, may_write_back

    assert may_write_back("zendesk", "zendesk") and not may_write_back("generic", "zendesk")
    assert not may_write_back("jira", "zendesk") and set(WRITE_BACK) == {"zendesk"}


# ---------------------------------------------------------------------------- no 5xx for any input
def test_attack_a_base64_body_that_is_not_utf8_gets_400_without_a_key(webhook, world):
    event = request("zendesk", b"{}", {})
    event |= {"body": base64.b64encode(b"\xff\xfe{\x80}").decode(), "isBase64Encoded": True}
    assert invoke(webhook, event) == (400, {"status": "refused", "message": "bad request", "reason": "body is not UTF-8"})
    event |= {"body": "not base64 at all!", "isBase64Encoded": True}
    assert invoke(webhook, event) == (400, {"status": "refused", "message": "bad request",
                                                 "reason": "body is not valid base64"})
    assert world.queued() == []


def test_a_base64_encoded_utf8_body_is_verified_like_any_other(webhook, world):
    raw = RAW["generic"]()
    event = request("generic", raw, sign("generic", raw)) | {"body": base64.b64encode(raw).decode(), "isBase64Encoded": True}
    assert invoke(webhook, event)[1]["status"] == "queued"


def test_attack_deeply_nested_signed_json_is_parked_not_a_500(webhook, world):
    raw = b'{"ticket_id": "W-1", "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    assert len(raw) <= MAX_BODY_BYTES
    status, answer = call(webhook, "generic", raw, sign("generic", raw))
    assert (status, answer["status"]) == (202, "parked") and f"nested deeper than {MAX_DEPTH}" in answer["reason"]
    assert world.queued() == [] and len(world.queued("TicketDeadLetterQueue")) == 1


@pytest.mark.parametrize("stamp", ["1e400", "-1e400", "NaN", "Infinity", "9" * 500, "1e20"])
def test_attack_a_signed_jira_timestamp_out_of_range_is_refused_not_a_500(webhook, world, stamp):
    raw = RAW["jira"]().replace(b'"timestamp": ', f'"timestamp": {stamp}, "was": '.encode(), 1)
    assert call(webhook, "jira", raw, sign("jira", raw)) == (401, UNAUTHORIZED)
    assert world.queued() == []


@pytest.mark.parametrize("stamp", ["1e20", "100000000000000000000", "9" * 400, "-5", "1.5", " 17"])
def test_attack_a_signed_generic_timestamp_out_of_range_is_refused_not_a_500(webhook, world, stamp):
    raw = RAW["generic"]()
    key = SECRETS["generic"].encode()
    headers = {"x-signature": "sha256=" + hmac.new(key, stamp.encode() + b"." + raw, hashlib.sha256).hexdigest(),
               "x-signature-timestamp": stamp}
    assert call(webhook, "generic", raw, headers) == (401, UNAUTHORIZED)


def with_value(source: str, path: tuple, value) -> bytes:
    data = json.loads(RAW[source]())
    target = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return json.dumps(data).encode()


@pytest.mark.parametrize("source, path, value, reason", [
    ("zendesk", ("detail", "tags"), 7, "detail.tags is a JSON number, not an array"),
    ("zendesk", ("detail", "tags"), "tier_pro", "detail.tags is a JSON string, not an array"),
    ("zendesk", ("detail", "via"), ["web"], "detail.via is a JSON array, not an object"),
    ("zendesk", ("detail", "id"), {"n": 1}, "detail.id is a JSON object, not a string or an integer"),
    ("zendesk", ("detail",), "text", "detail is a JSON string, not an object"),
    ("jira", ("issue", "fields"), "text", "issue.fields is a JSON string, not an object"),
    ("jira", ("issue", "fields", "labels"), True, "issue.fields.labels is a JSON boolean, not an array"),
    ("jira", ("issue", "fields", "reporter"), 5, "issue.fields.reporter is a JSON number, not an object"),
    ("jira", ("issue", "key"), [1], "issue.key is a JSON array, not a string or an integer"),
    ("jira", ("issue", "self"), 1, "issue.self is a JSON number, not a string"),
])
def test_attack_a_signed_field_of_the_wrong_json_type_is_parked_not_a_500(webhook, world, source, path, value, reason):
    raw = with_value(source, path, value)
    status, answer = call(webhook, source, raw, sign(source, raw))
    assert (status, answer["status"]) == (202, "parked") and reason in answer["reason"], answer
    assert world.queued() == []
    (parked,) = world.queued("TicketDeadLetterQueue")
    assert reason in parked["MessageAttributes"]["failure_reason"]["StringValue"] and parked["Body"] == raw.decode()


def test_a_mapping_that_fails_on_a_body_parks_it_with_the_cause(webhook, world, monkeypatch):
    """Whatever a source's shape check misses, a TypeError, AttributeError or ValueError from its
    mapping parks the body with the cause instead of answering 500 (retried for ever)."""
    from decision_router import sources
    from decision_router.sources.generic import GenericWebhook

    class Broken(GenericWebhook):
        def ticket(self, payload, default_tier):
            return payload["detail"].upper()  # the mapping trips over a shape it did not expect

    monkeypatch.setitem(sources.TICKET_SOURCES, "generic", Broken())
    raw = with_value("generic", ("detail",), 7)
    status, answer = call(webhook, "generic", raw, sign("generic", raw))
    assert (status, answer["status"]) == (202, "parked") and "AttributeError" in answer["reason"], answer
    assert world.queued() == [] and len(world.queued("TicketDeadLetterQueue")) == 1


def test_attack_an_oversized_body_is_refused_before_anything_reads_it(webhook, world):
    data = json.loads(RAW["generic"]()) | {"body": "x" * (MAX_BODY_BYTES + 1)}
    raw = json.dumps(data).encode()
    assert call(webhook, "generic", raw, sign("generic", raw)) == (413, {"status": "refused", "message": "request entity too large",
                                                                         "reason": "body too large"})
    assert world.queued() == [] and world.queued("TicketDeadLetterQueue") == []


def test_a_signed_body_sqs_would_refuse_is_still_queued_or_parked(webhook, world):
    """SQS refuses U+FFFF and control characters in a message: the ticket is escaped, a raw body
    parked as base64 (what was signed but cannot be queued is parked, never a 500). Neither moto
    nor the fake queue refuses them, so what was sent is read for them."""
    data = json.loads(RAW["generic"]()) | {"subject": "broken \uffff char"}
    raw = json.dumps(data, ensure_ascii=False).encode()
    assert call(webhook, "generic", raw, sign("generic", raw))[1]["status"] == "queued"
    (message,) = world.queued()
    assert json.loads(message["Body"])["subject"] == "broken \uffff char" and not NOT_SQS_TEXT.search(message["Body"])
    junk = b"not json \x00\x01 \xef\xbf\xbf"
    status, answer = call(webhook, "generic", junk, sign("generic", junk))
    assert (status, answer["status"]) == (202, "parked") and "not JSON" in answer["reason"]
    (parked,) = world.queued("TicketDeadLetterQueue")
    assert parked["MessageAttributes"]["body_encoding"]["StringValue"] == "base64"
    assert base64.b64decode(parked["Body"]) == junk


# ---------------------------------------------------------------------------- refusals say nothing of the configuration
def test_attack_every_refusal_has_the_same_short_reason(webhook, world):
    raw = RAW["generic"]()
    world.set_secrets({**SECRETS, "grafana": ""})
    answers = {
        "unknown source": call(webhook, "servicenow", raw, sign("generic", raw)),
        "source without a key": call(webhook, "grafana", raw, grafana_headers(raw)),
        "bad signature": call(webhook, "jira", raw, sign("jira", raw, secret="guess")),
        "no signature": call(webhook, "pagerduty", raw, {}),
    }
    assert all(answer == (401, UNAUTHORIZED) for answer in answers.values()), answers
    assert not any(name in json.dumps(answers[k]) for k in answers for name in ("jira", "grafana", "configured", "servicenow"))


# ---------------------------------------------------------------------------- incident webhooks
@ON_THE_STACK
def test_a_pagerduty_incident_is_forwarded_to_the_bus_and_never_queued(webhook, world):
    raw = pagerduty_body()
    # During a secret rotation PagerDuty signs with both; either matching is enough.
    headers = pagerduty_headers(raw, secrets=("the-old-secret", SECRETS["pagerduty"]))
    status, answer = call(webhook, "pagerduty", raw, headers)
    assert (status, answer["status"]) == (202, "forwarded")
    (event,) = world.on_bus()
    assert (event["source"], event["detail-type"]) == ("decision-router.webhooks", "PagerDuty Webhook")
    assert event["detail"] == json.loads(raw)
    assert world.queued() == [] and world.queued("TicketDeadLetterQueue") == []
    # PagerDuty retries with the same X-Webhook-Id: acknowledged, not forwarded again.
    status, answer = call(webhook, "pagerduty", raw, headers)
    assert (status, answer["status"]) == (200, "duplicate") and "already accepted" in answer["reason"]
    assert world.on_bus() == []


@pytest.mark.parametrize("event_type, resource, reason", [
    ("pagey.ping", "pagey", "ping"),
    ("service.updated", "service", "only incident events are forwarded"),
    ("incident.annotated", "incident_note", "only incident events are forwarded"),
])
def test_pagerduty_pings_and_other_resources_are_acknowledged_and_not_forwarded(webhook, world, event_type, resource, reason):
    body = json.loads(pagerduty_body(event_type))
    body["event"]["resource_type"] = resource
    raw = json.dumps(body).encode()
    status, answer = call(webhook, "pagerduty", raw, pagerduty_headers(raw))
    assert (status, answer["status"]) == (202, "ignored") and reason in answer["reason"]
    assert world.on_bus() == [] and world.queued() == []


def test_attack_pagerduty_without_a_valid_signature_or_with_an_old_event_is_refused(webhook, world):
    raw = pagerduty_body()
    assert call(webhook, "pagerduty", raw, pagerduty_headers(raw, secrets=("guess",))) == (401, UNAUTHORIZED)
    split_on_equals = {"x-pagerduty-signature": pagerduty_headers(raw)["x-pagerduty-signature"].replace("v1=", "")}
    assert call(webhook, "pagerduty", raw, split_on_equals) == (401, UNAUTHORIZED)
    old = pagerduty_body(occurred_at=datetime.fromtimestamp(time.time() - 2 * 3600, timezone.utc))
    assert call(webhook, "pagerduty", old, pagerduty_headers(old)) == (401, UNAUTHORIZED)
    assert world.on_bus() == []


def test_a_grafana_notification_signed_with_its_time_is_forwarded(webhook, world):
    raw = json.dumps(sample("grafana_alerting_webhook_firing")["body"]).encode()
    status, answer = call(webhook, "grafana", raw, grafana_headers(raw))
    assert (status, answer["status"]) == (202, "forwarded")
    (event,) = world.on_bus()
    assert (event["source"], event["detail-type"], event["detail"]) == ("decision-router.webhooks", "Grafana Alerting Webhook",
                                                                        json.loads(raw))


def test_attack_grafana_stale_unsigned_or_forged_is_refused(webhook, world):
    raw = json.dumps(sample("grafana_alerting_webhook_firing")["body"]).encode()
    assert call(webhook, "grafana", raw, grafana_headers(raw, at=time.time() - 3600)) == (401, UNAUTHORIZED)
    assert call(webhook, "grafana", raw, {}) == (401, UNAUTHORIZED)
    assert call(webhook, "grafana", raw, grafana_headers(raw, secret="guess")) == (401, UNAUTHORIZED)
    # The signature covers the time: a fresh time on an old signature does not verify.
    headers = grafana_headers(raw, at=time.time() - 3600)
    headers["x-grafana-alerting-signature-timestamp"] = str(int(time.time()))
    assert call(webhook, "grafana", raw, headers) == (401, UNAUTHORIZED)
    assert world.on_bus() == []


def test_attack_grafana_signed_without_its_time_is_refused_even_after_the_record_expires(webhook, world):
    """A signature of the body alone never expires: a captured "resolved" POST replayed once the
    delivery record's row is gone would resolve the incident again. Refused at once and later."""
    from decision_router.adapters import deliveries

    body = sample("grafana_alerting_webhook_firing")["body"]
    body["status"] = "resolved"
    for alert in body["alerts"]:
        alert["status"] = "resolved"
    raw = json.dumps(body).encode()
    captured = grafana_headers(raw, timestamped=False)
    assert call(webhook, "grafana", raw, captured) == (401, UNAUTHORIZED)
    world.pass_time(deliveries.RECORD_SECONDS + 1)
    assert call(webhook, "grafana", raw, captured) == (401, UNAUTHORIZED)
    # The header present but empty is no time either.
    assert call(webhook, "grafana", raw, {**captured, "x-grafana-alerting-signature-timestamp": " "}) == (401, UNAUTHORIZED)
    assert world.on_bus() == []


def test_grafana_without_its_time_logs_the_precise_reason():
    from decision_router.sources.grafana import GRAFANA_TIMESTAMP, WEBHOOK
    from decision_router.sources.webhook import Unauthorized

    raw = b'{"alerts": []}'
    with pytest.raises(Unauthorized, match=f"missing {GRAFANA_TIMESTAMP} header.*replay"):
        WEBHOOK.verify(grafana_headers(raw, timestamped=False), raw, None, SECRETS["grafana"].encode(),
                       datetime.now(timezone.utc), 300)


# ---------------------------------------------------------------------------- fuzz
SOURCES = ["zendesk", "jira", "generic", "pagerduty", "grafana"]
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=20)
header_names = st.sampled_from(["x-signature", "x-signature-timestamp", "x-zendesk-webhook-signature",
                                "x-zendesk-webhook-signature-timestamp", "x-hub-signature", "x-pagerduty-signature",
                                "x-grafana-alerting-signature", "x-grafana-alerting-signature-timestamp", "x-webhook-id",
                                "x-zendesk-webhook-id", "x-atlassian-webhook-identifier", "content-type"]) \
    | st.text(min_size=1, max_size=12)
header_values = st.text(max_size=80) | st.sampled_from(["sha256=", "v1=", "1e400", "9" * 30, "2026-11-29T12:00:00Z", ""])


@st.composite
def requests(draw):
    """A request to POST /webhooks/{source}: a real sample, JSON, text or bytes; signed with the right
    key now (`valid`), or with a wrong key, a stale time, a tampered body, or not at all."""
    source = draw(st.sampled_from(SOURCES) | st.text(min_size=1, max_size=12).filter(lambda s: "/" not in s))
    kind = draw(st.sampled_from(["sample", "json", "text", "bytes"]))
    if kind == "sample" and source in RAW:
        raw = RAW[source]()
    elif kind == "sample" and source == "pagerduty":
        raw = pagerduty_body(draw(st.sampled_from(["incident.triggered", "pagey.ping", "service.created"])))
    elif kind == "sample" and source == "grafana":
        raw = json.dumps(sample("grafana_alerting_webhook_firing")["body"]).encode()
    elif kind in ("sample", "json"):
        raw = json.dumps(draw(json_values)).encode()
    elif kind == "text":
        raw = draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")
    else:
        raw = draw(st.binary(max_size=200))
    signing = draw(st.sampled_from(["valid", "wrong key", "stale", "tampered", "none"]))
    headers: dict[str, str] = {}
    if signing != "none" and source in SOURCES:
        at = time.time() - (7200 if signing == "stale" else 0)
        if source == "pagerduty":
            key = "guess" if signing == "wrong key" else SECRETS[source]
            headers = pagerduty_headers(raw, secrets=(key,), delivery=draw(st.text(max_size=10)))
        elif source == "grafana":
            headers = grafana_headers(raw, at=at, secret="guess" if signing == "wrong key" else SECRETS[source])
        else:
            headers = sign(source, raw, at=at, secret="guess" if signing == "wrong key" else None)
    if signing == "tampered":
        raw = raw + b" "
    headers |= draw(st.dictionaries(header_names, header_values, max_size=3)) if draw(st.booleans()) else {}
    encoded = draw(st.booleans())
    # Jira and PagerDuty sign no time of their own (the body's event time is checked): signed "stale", still valid.
    valid = source in SOURCES and (signing == "valid" or (signing == "stale" and source in ("jira", "pagerduty")))
    return source, raw, {k.lower(): v for k, v in headers.items()}, encoded, valid


#: 300 keeps `make test` quick; WEBHOOK_FUZZ_EXAMPLES=5000 runs a deeper fuzz.
FUZZ_EXAMPLES = int(os.environ.get("WEBHOOK_FUZZ_EXAMPLES", "300"))


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])
@given(requests())
def test_fuzz_no_input_gets_a_5xx_and_nothing_unsigned_is_handed_on(webhook, world, case):
    source, raw, headers, encoded, valid = case
    event = request(source, b"", headers)
    event["body"] = base64.b64encode(raw).decode() if encoded else raw.decode("utf-8", "surrogateescape")
    event["isBase64Encoded"] = encoded
    status, answer = invoke(webhook, event)
    assert status < 500, (status, answer)
    handed_on = world.queued() + world.queued("TicketDeadLetterQueue") + world.on_bus()
    if not valid:
        assert status in (400, 401, 404, 413) and handed_on == [], (case, status, answer)
