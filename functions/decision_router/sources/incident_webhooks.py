"""The incident webhooks the webhook API verifies and forwards: PagerDuty Webhooks V3 and Grafana
alerting. They are incidents, not tickets: a verified body is put unchanged on the decision bus
as one event (source FORWARDED_SOURCE, detail-type PAGERDUTY_DETAIL_TYPE or GRAFANA_DETAIL_TYPE),
which the template's IncidentWebhookRule delivers to the incident intake. How the incident side
maps them is its own sources' business; this module only decides who sent them and what is
worth forwarding.

PagerDuty V3: `X-PagerDuty-Signature: v1=<hex>[,v1=<hex>...]`, lowercase-hex HMAC-SHA256 of the
raw body; several entries while a secret is rotated, any one matching is enough. PagerDuty signs
no time, so the time checked is the event's own `occurred_at` (PagerDuty retries for about 20
minutes: it may be up to EVENT_WINDOW_SECONDS old), and each delivery is recorded by its
`X-Webhook-Id` (repeated on retries) and its signature. `pagey.ping` and every event whose
`resource_type` is not `incident` are acknowledged and not forwarded.

Grafana alerting (12.0+, HMAC signing configured on the webhook contact point):
`X-Grafana-Alerting-Signature`, lowercase-hex HMAC-SHA256 of the body, or of
"<unix seconds>:<body>" when Grafana is set to send the time in TIMESTAMP (then that time is
checked like any other). Without the time header, deliveries are told apart by their signature
alone (a replay inside the delivery record's lifetime is acknowledged and not forwarded).
An unsigned Grafana request is refused like any other: configure the HMAC secret.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from .webhook import IncidentWebhook, Unauthorized, check_time, header, hex_signatures, hmac_sha256, parse_time, same, unix_time

#: How old a PagerDuty event's `occurred_at` may be: PagerDuty retries for about 20 minutes.
EVENT_WINDOW_SECONDS = 3600

PAGERDUTY = "pagerduty"
PAGERDUTY_SIGNATURE = "X-PagerDuty-Signature"
PAGERDUTY_DELIVERY = "X-Webhook-Id"
PAGERDUTY_DETAIL_TYPE = "PagerDuty Webhook"

GRAFANA = "grafana"
GRAFANA_SIGNATURE = "X-Grafana-Alerting-Signature"
GRAFANA_TIMESTAMP = "X-Grafana-Alerting-Signature-Timestamp"
GRAFANA_DETAIL_TYPE = "Grafana Alerting Webhook"


def _event(payload: Any) -> Mapping[str, Any]:
    event = payload.get("event") if isinstance(payload, Mapping) else None
    return event if isinstance(event, Mapping) else {}


def verify_pagerduty(headers: Mapping[str, str], body: bytes, payload: Any, key: bytes, now: datetime,
                     max_skew: int) -> bytes:
    given = hex_signatures(header(headers, PAGERDUTY_SIGNATURE), "v1=")
    expected = hmac_sha256(key, body).hexdigest()
    # Every entry is compared (no early exit): the time taken says nothing about which one matched.
    matches = [same(expected, signature) for signature in given]
    if not any(matches):
        raise Unauthorized(f"no v1= entry of {PAGERDUTY_SIGNATURE} matches the body")
    occurred = _event(payload).get("occurred_at")
    if not isinstance(occurred, str):
        raise Unauthorized("the signed PagerDuty body carries no event.occurred_at: replay cannot be ruled out")
    check_time(parse_time(occurred, "event.occurred_at"), now, max_skew, max_age=max(max_skew, EVENT_WINDOW_SECONDS))
    return body


def sign_pagerduty(body: bytes, key: bytes, at: float) -> dict[str, str]:
    return {PAGERDUTY_SIGNATURE: "v1=" + hmac_sha256(key, body).hexdigest()}


def pagerduty_skipped(payload: Any) -> str | None:
    """PagerDuty's ping and its non-incident events are acknowledged, not forwarded."""
    event = _event(payload)
    kind, resource = str(event.get("event_type", "")), str(event.get("resource_type", ""))
    if kind == "pagey.ping":
        return "PagerDuty ping (pagey.ping): acknowledged"
    if resource != "incident":
        return f"PagerDuty {kind or '(no event_type)'} on {resource or '(no resource_type)'}: only incident events are forwarded"
    return None


def verify_grafana(headers: Mapping[str, str], body: bytes, payload: Any, key: bytes, now: datetime,
                   max_skew: int) -> bytes:
    signature = header(headers, GRAFANA_SIGNATURE)
    lowered = {k.lower(): v for k, v in headers.items()}
    stamp = str(lowered.get(GRAFANA_TIMESTAMP.lower(), "")).strip()
    signed = stamp.encode() + b":" + body if stamp else body
    if not same(hmac_sha256(key, signed).hexdigest(), signature):
        raise Unauthorized(f"{GRAFANA_SIGNATURE} does not match the body")
    if stamp:
        if not stamp.isdigit():
            raise Unauthorized(f"{GRAFANA_TIMESTAMP} is not unix seconds")
        check_time(unix_time(stamp, GRAFANA_TIMESTAMP), now, max_skew)
    return signed


def sign_grafana(body: bytes, key: bytes, at: float) -> dict[str, str]:
    """As Grafana signs with a timestamp header configured (the demo's and tests' senders)."""
    stamp = str(int(at))
    return {GRAFANA_SIGNATURE: hmac_sha256(key, stamp.encode() + b":" + body).hexdigest(), GRAFANA_TIMESTAMP: stamp}


def grafana_skipped(payload: Any) -> str | None:
    """A notification without alerts is nothing to route."""
    alerts = payload.get("alerts") if isinstance(payload, Mapping) else None
    if not isinstance(alerts, list) or not alerts:
        return "Grafana notification without alerts: nothing to forward"
    return None


PAGERDUTY_WEBHOOK = IncidentWebhook(PAGERDUTY, verify_pagerduty, sign_pagerduty, PAGERDUTY_DETAIL_TYPE,
                                    pagerduty_skipped, delivery_header=PAGERDUTY_DELIVERY)
GRAFANA_WEBHOOK = IncidentWebhook(GRAFANA, verify_grafana, sign_grafana, GRAFANA_DETAIL_TYPE, grafana_skipped)
