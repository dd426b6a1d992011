"""GuardDuty Finding (default bus, source aws.guardduty). A finding opens an incident keyed by
its id; later events of the same finding (GuardDuty re-sends a finding whose count grew) update
it; an archived finding resolves it. The 1.0-10.0 score is banded as GuardDuty documents it and
the policy's table maps the band.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from ..evidence import GuardDutyEvidence
from ..severity import SeverityTable
from .events import (
    Envelope,
    EventBridgeSource,
    Opened,
    Resolved,
    SourceModel,
    SourceOutcome,
    build_evidence,
    build_incident,
    incident_id,
    text,
)

SOURCE = "aws.guardduty"
DETAIL_TYPE = "GuardDuty Finding"
#: GuardDuty's own bands of its score, lowest score of each band first.
BANDS = ((9.0, "CRITICAL"), (7.0, "HIGH"), (4.0, "MEDIUM"), (0.0, "LOW"))


class InstanceDetails(SourceModel):
    instanceId: str | None = None


class AccessKeyDetails(SourceModel):
    accessKeyId: str | None = None
    userName: str | None = None


class Resource(SourceModel):
    resourceType: str
    instanceDetails: InstanceDetails | None = None
    accessKeyDetails: AccessKeyDetails | None = None


class Service(SourceModel):
    archived: bool = False
    count: int = 1


class Finding(SourceModel):
    id: str
    arn: str | None = None
    type: str
    title: str
    description: str
    severity: float = Field(ge=0, le=10)
    createdAt: datetime
    updatedAt: datetime | None = None
    region: str | None = None
    resource: Resource
    service: Service = Field(default_factory=Service)


def band(score: float) -> str:
    return next(name for lowest, name in BANDS if score >= lowest)


class GuardDutyFindings(EventBridgeSource[Finding]):
    """GuardDuty findings on EventBridge."""

    name = SOURCE
    event_source = "aws.guardduty"
    detail_type = DETAIL_TYPE
    detail = Finding
    evidence = GuardDutyEvidence

    def adapt(self, envelope: Envelope[Finding], table: SeverityTable) -> list[SourceOutcome]:
        finding = envelope.detail
        key = finding.id
        if finding.service.archived:
            return [Resolved(key, SOURCE, f"GuardDuty finding {finding.type} was archived")]
        resource = finding.resource
        resource_id = ((resource.instanceDetails.instanceId if resource.instanceDetails else None)
                       or (resource.accessKeyDetails.accessKeyId if resource.accessKeyDetails else None))
        label = band(finding.severity)
        incident = build_incident(
            envelope, incident_id=incident_id(key),
            title=finding.title.strip() or finding.type,
            description=text(finding.description, f"Finding {finding.type}, severity {finding.severity:g} ({label}), "
                             f"seen {finding.service.count} time(s)",
                             f"Resource {resource.resourceType} {resource_id}" if resource_id else None),
            service=f"{resource.resourceType} {resource_id}" if resource_id else resource.resourceType,
            severity=table.severity(label),
            source=SOURCE,
            reported_at=finding.updatedAt or finding.createdAt,
            evidence=build_evidence(
                GuardDutyEvidence, envelope, source_ref=key, source_severity=label, source_score=finding.severity,
                finding_type=finding.type, resource_type=resource.resourceType, resource_id=resource_id),
        )
        return [Opened(key, incident)]


INCIDENT_SOURCE = GuardDutyFindings()
