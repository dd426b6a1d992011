"""AWS Health Event (default bus, source aws.health): issue, investigation, scheduledChange and
accountNotification events.

open or upcoming opens an incident keyed by the event ARN; closed resolves it. Health writes its
times in RFC 1123 form ('Fri, 27 Jan 2023 06:02:51 GMT'), which are parsed. Health sends no
severity: the policy's table maps the event's category.
"""

from __future__ import annotations

from typing import Literal

from ..evidence import HealthEvidence
from ..severity import SeverityTable
from .events import (
    Envelope,
    EventBridgeSource,
    HttpTime,
    Opened,
    Resolved,
    SourceModel,
    SourceOutcome,
    build_evidence,
    build_incident,
    incident_id,
    text,
)

SOURCE = "aws.health"
DETAIL_TYPE = "AWS Health Event"
#: Affected entities listed in the description (pages of a large event may list thousands).
MAX_ENTITIES = 20


class Description(SourceModel):
    language: str = ""
    latestDescription: str


class Entity(SourceModel):
    entityValue: str
    status: str | None = None


class HealthDetail(SourceModel):
    eventArn: str
    service: str
    eventTypeCode: str
    eventTypeCategory: str
    eventScopeCode: str | None = None
    statusCode: Literal["open", "closed", "upcoming"] = "open"  # older events carry none: they report an open event
    startTime: HttpTime
    endTime: HttpTime | None = None
    lastUpdatedTime: HttpTime | None = None
    eventRegion: str | None = None
    eventDescription: list[Description] = []
    affectedEntities: list[Entity] = []
    actionability: str | None = None


class HealthEvents(EventBridgeSource[HealthDetail]):
    """AWS Health events on EventBridge."""

    name = SOURCE
    event_source = "aws.health"
    detail_type = DETAIL_TYPE
    detail = HealthDetail
    evidence = HealthEvidence

    def adapt(self, envelope: Envelope[HealthDetail], table: SeverityTable) -> list[SourceOutcome]:
        detail = envelope.detail
        key = detail.eventArn
        if detail.statusCode == "closed":
            return [Resolved(key, SOURCE, f"Health event {detail.eventTypeCode} is closed")]
        english = [d for d in detail.eventDescription if d.language.lower().startswith("en")] or detail.eventDescription
        entities = [e.entityValue + (f" ({e.status})" if e.status else "") for e in detail.affectedEntities]
        shown = ", ".join(entities[:MAX_ENTITIES]) + (f" and {len(entities) - MAX_ENTITIES} more" if len(entities) > MAX_ENTITIES else "")
        region = detail.eventRegion or envelope.region
        incident = build_incident(
            envelope, incident_id=incident_id(key),
            title=f"AWS Health {detail.eventTypeCategory}: {detail.eventTypeCode} ({detail.service}, {region})",
            description=text(english[0].latestDescription if english else None,
                             f"Affected: {shown}" if entities else None,
                             f"Action: {detail.actionability}" if detail.actionability else None,
                             f"Status {detail.statusCode}, starts {detail.startTime.isoformat()}"),
            service=detail.service,
            severity=table.severity(detail.eventTypeCategory),
            source=SOURCE,
            reported_at=detail.lastUpdatedTime or detail.startTime,
            evidence=build_evidence(
                HealthEvidence, envelope, source_ref=key, source_severity=detail.eventTypeCategory,
                health_event_type=detail.eventTypeCode, health_category=detail.eventTypeCategory,
                health_scope=detail.eventScopeCode, actionability=detail.actionability, event_region=region,
                affected_entities=shown or None),
        )
        return [Opened(key, incident)]


INCIDENT_SOURCE = HealthEvents()
