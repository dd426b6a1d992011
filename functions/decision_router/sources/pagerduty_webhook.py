"""PagerDuty Webhooks V3, as the webhook API forwards them once verified (signature, replay): on
the decision bus, source `decision-router.webhooks`, detail-type `PagerDuty Webhook`, the detail
PagerDuty's body unchanged, `{"event": {id, event_type, resource_type, occurred_at, data}}`.
The webhook API answers `pagey.ping` and the non-incident event types itself and forwards none
of them; one that comes anyway is ignored with its reason.

incident.triggered and incident.reopened open an incident keyed by the PagerDuty incident id
(`data.id`, the key of the partner-bus source `pagerduty` too: one PagerDuty incident is one
incident whichever way it comes); incident.resolved resolves it; the other incident.* events
(acknowledged, escalated, priority_updated, ...) are counted on the open incident and ignored
with their reason. The policy's `pagerduty` table maps the priority (P1-P5), else the urgency.

The webhook API's half: `X-PagerDuty-Signature: v1=<hex>[,v1=<hex>...]`, lowercase-hex
HMAC-SHA256 of the raw body; several entries while a secret is rotated, any one matching is
enough. PagerDuty signs no time, so the time checked is the event's own `occurred_at` (PagerDuty
retries for about 20 minutes: it may be up to EVENT_WINDOW_SECONDS old), and each delivery is
recorded by its `X-Webhook-Id` (repeated on retries) and its signature. `pagey.ping` and every
event whose `resource_type` is not `incident` are acknowledged and not forwarded (`WEBHOOK`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from ..severity import SeverityTable
from .events import (
    Envelope,
    EventBridgeSource,
    Ignored,
    InvalidSourceEvent,
    Opened,
    Resolved,
    SourceModel,
    SourceOutcome,
    build_evidence,
    build_incident,
    incident_id,
    text,
)
from .pagerduty import SOURCE, PagerDutyEvidence, Priority, Service
from .webhook import FORWARDED_SOURCE, IncidentWebhook, Unauthorized, check_time, header, hex_signatures, hmac_sha256, parse_time, same

DETAIL_TYPE = "PagerDuty Webhook"
#: How old a PagerDuty event's `occurred_at` may be: PagerDuty retries for about 20 minutes.
EVENT_WINDOW_SECONDS = 3600

PAGERDUTY_SIGNATURE = "X-PagerDuty-Signature"
PAGERDUTY_DELIVERY = "X-Webhook-Id"

OPENING = {"incident.triggered", "incident.reopened"}
RESOLVING = {"incident.resolved"}


class IncidentData(SourceModel):
    """`event.data` of an incident.* event (other resource types carry other data: all optional here)."""

    id: str | None = None
    type: str | None = None
    title: str | None = None
    number: int | None = None
    status: str | None = None
    incident_key: str | None = None
    urgency: str | None = None
    priority: Priority | None = None  # the references of PagerDuty's API, as on the partner bus
    service: Service | None = None
    created_at: datetime | None = None
    html_url: str | None = None
    resolve_reason: Any = None


class WebhookEvent(SourceModel):
    id: str
    event_type: str
    resource_type: str
    occurred_at: datetime
    data: IncidentData


class WebhookBody(SourceModel):
    event: WebhookEvent


def _required(envelope: Envelope[Any], **fields: Any) -> None:
    missing = [f"detail.event.data.{name}: Field required for an incident event" for name, v in fields.items() if not v]
    if missing:
        raise InvalidSourceEvent(envelope.source, envelope.detail_type, missing)


class PagerDutyWebhookEvents(EventBridgeSource[WebhookBody]):
    """PagerDuty V3 webhooks by HTTPS, forwarded to the bus."""

    name = SOURCE
    event_source = FORWARDED_SOURCE
    detail_type = DETAIL_TYPE
    detail = WebhookBody
    evidence = PagerDutyEvidence

    def adapt(self, envelope: Envelope[WebhookBody], table: SeverityTable) -> list[SourceOutcome]:
        event = envelope.detail.event
        pd = event.data
        if event.resource_type != "incident":
            return [Ignored(SOURCE, f"PagerDuty {event.event_type} ({event.resource_type}) is no incident event")]
        _required(envelope, id=pd.id)
        key = str(pd.id)
        if event.event_type in RESOLVING:
            return [Resolved(key, SOURCE, f"PagerDuty incident {key} was resolved"
                             + (f" ({pd.resolve_reason})" if isinstance(pd.resolve_reason, str) else ""))]
        if event.event_type not in OPENING:
            return [Ignored(SOURCE, f"PagerDuty {event.event_type} of incident {key}: counted on the open incident; "
                                    "only triggered or reopened opens and resolved resolves one", key)]
        _required(envelope, title=pd.title)
        service = pd.service.summary if pd.service else None
        priority = pd.priority.summary if pd.priority else None
        label = priority or pd.urgency
        incident = build_incident(
            envelope, incident_id=incident_id(key),
            title=pd.title,
            description=text(pd.title, f"PagerDuty service {service}" if service else None,
                             f"Urgency {pd.urgency}" if pd.urgency else None,
                             f"Priority {priority}" if priority else None,
                             "Reopened in PagerDuty" if event.event_type == "incident.reopened" else None),
            service=service or "pagerduty",
            severity=table.severity(label),
            source=SOURCE,
            reported_at=pd.created_at or event.occurred_at,
            evidence=build_evidence(
                PagerDutyEvidence, envelope, source_ref=key, source_url=pd.html_url, source_severity=label,
                pagerduty_service=service, urgency=pd.urgency, pagerduty_priority=priority),
        )
        return [Opened(key, incident)]


INCIDENT_SOURCE = PagerDutyWebhookEvents()


# ------------------------------------------------------------------ the webhook API's half
def _event(payload: Any) -> Mapping[str, Any]:
    event = payload.get("event") if isinstance(payload, Mapping) else None
    return event if isinstance(event, Mapping) else {}


class PagerDutyWebhook(IncidentWebhook):
    """PagerDuty's V3 webhook subscription, forwarded to the bus."""

    name = SOURCE
    detail_type = DETAIL_TYPE
    delivery_header = PAGERDUTY_DELIVERY

    def verify(self, headers: Mapping[str, str], body: bytes, payload: Any, key: bytes, now: datetime,
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

    def sign(self, body: bytes, key: bytes, at: float) -> dict[str, str]:
        return {PAGERDUTY_SIGNATURE: "v1=" + hmac_sha256(key, body).hexdigest()}

    def skipped(self, payload: Any) -> str | None:
        """PagerDuty's ping and its non-incident events are acknowledged, not forwarded."""
        event = _event(payload)
        kind, resource = str(event.get("event_type", "")), str(event.get("resource_type", ""))
        if kind == "pagey.ping":
            return "PagerDuty ping (pagey.ping): acknowledged"
        if resource != "incident":
            return f"PagerDuty {kind or '(no event_type)'} on {resource or '(no resource_type)'}: only incident events are forwarded"
        return None


WEBHOOK = PagerDutyWebhook()
