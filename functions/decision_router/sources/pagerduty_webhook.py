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
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..severity import SeverityTable
from .events import (
    Envelope,
    Ignored,
    IncidentSource,
    InvalidSourceEvent,
    Opened,
    Resolved,
    SourceModel,
    SourceOutcome,
    build_evidence,
    incident_id,
    text,
)
from .pagerduty import SOURCE, PagerDutyEvidence, Priority, Service

EVENT_SOURCE = "decision-router.webhooks"
DETAIL_TYPE = "PagerDuty Webhook"
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


def adapt(envelope: Envelope[WebhookBody], table: SeverityTable) -> list[SourceOutcome]:
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
    data = {
        "incident_id": incident_id(key),
        "title": pd.title,
        "description": text(pd.title, f"PagerDuty service {service}" if service else None,
                            f"Urgency {pd.urgency}" if pd.urgency else None,
                            f"Priority {priority}" if priority else None,
                            "Reopened in PagerDuty" if event.event_type == "incident.reopened" else None),
        "service": service or "pagerduty",
        "severity": table.severity(label),
        "source": SOURCE,
        "reported_at": pd.created_at or event.occurred_at,
        "evidence": build_evidence(
            PagerDutyEvidence, envelope, source_ref=key, source_url=pd.html_url, source_severity=label,
            pagerduty_service=service, urgency=pd.urgency, pagerduty_priority=priority),
    }
    return [Opened(key, data)]


INCIDENT_SOURCE = IncidentSource(SOURCE, EVENT_SOURCE, DETAIL_TYPE, WebhookBody, adapt)
