"""PagerDuty through its Amazon EventBridge integration: events on a partner event bus, source
`aws.partner/pagerduty.com/<subdomain>-<name>`, detail-type `PagerDuty Webhook`, the detail a
webhook body (`event`, `incident`).

incident.trigger opens an incident keyed by the PagerDuty incident id; incident.resolve resolves
it; the other lifecycle events (acknowledge, assign, escalate, ...) route nothing: they are
ignored with their reason and touch the open incident. The policy's table maps the incident's
priority (P1-P5) when it has one, else its urgency.
"""

from __future__ import annotations

from datetime import datetime

from ..evidence import PagerDutyEvidence
from ..severity import SeverityTable
from .events import (
    Envelope,
    EventBridgeSource,
    Ignored,
    Opened,
    Resolved,
    SourceModel,
    SourceOutcome,
    build_evidence,
    build_incident,
    incident_id,
    text,
)

SOURCE = "pagerduty"
PARTNER_PREFIX = "aws.partner/pagerduty.com/"
DETAIL_TYPE = "PagerDuty Webhook"


class Service(SourceModel):
    id: str | None = None
    name: str | None = None
    summary: str | None = None


class Priority(SourceModel):
    summary: str | None = None
    name: str | None = None


class PdIncident(SourceModel):
    id: str
    incident_number: int | None = None
    title: str
    description: str | None = None
    status: str | None = None
    urgency: str | None = None
    priority: Priority | None = None
    service: Service | None = None
    created_at: datetime
    html_url: str | None = None


class WebhookDetail(SourceModel):
    event: str
    incident: PdIncident


class PagerDutyEvents(EventBridgeSource[WebhookDetail]):
    """PagerDuty V3 webhooks on its EventBridge partner bus."""

    name = SOURCE
    event_source = PARTNER_PREFIX
    detail_type = DETAIL_TYPE
    detail = WebhookDetail
    partner = True
    evidence = PagerDutyEvidence

    def adapt(self, envelope: Envelope[WebhookDetail], table: SeverityTable) -> list[SourceOutcome]:
        detail = envelope.detail
        pd = detail.incident
        key = pd.id
        if detail.event == "incident.resolve":
            return [Resolved(key, SOURCE, f"PagerDuty incident {pd.id} was resolved")]
        if detail.event != "incident.trigger":
            return [Ignored(SOURCE, f"PagerDuty {detail.event} of incident {pd.id}: only a trigger opens and a resolve "
                                    "closes an incident", key)]
        service = (pd.service.name or pd.service.summary) if pd.service else None
        priority = (pd.priority.summary or pd.priority.name) if pd.priority else None
        label = priority or pd.urgency
        incident = build_incident(
            envelope, incident_id=incident_id(key),
            title=pd.title,
            # PagerDuty often repeats the title as the description: the service and urgency add evidence.
            description=text(pd.description if pd.description and pd.description != pd.title else pd.title,
                             f"PagerDuty service {service}" if service else None,
                             f"Urgency {pd.urgency}" if pd.urgency else None,
                             f"Priority {priority}" if priority else None),
            service=service or "pagerduty",
            severity=table.severity(label),
            source=SOURCE,
            reported_at=pd.created_at,
            evidence=build_evidence(
                PagerDutyEvidence, envelope, source_ref=key, source_url=pd.html_url, source_severity=label,
                pagerduty_service=service, urgency=pd.urgency, pagerduty_priority=priority),
        )
        return [Opened(key, incident)]


INCIDENT_SOURCE = PagerDutyEvents()
