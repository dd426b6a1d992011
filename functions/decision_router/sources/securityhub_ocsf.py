"""Security Hub's OCSF feed (default bus, source aws.securityhub, detail-type "Findings Imported
V2"), which the new Security Hub sends; Security Hub CSPM still sends ASFF ("Security Hub
Findings - Imported", `securityhub`). Their template rules match the detail-type, so each feed
is read by its own module, and both key a finding alike (`securityhub.finding_key`: the finding
ARN, a GuardDuty finding's id): with both feeds on, a finding is one incident (the second import
updates it).

One OCSF finding per event (`detail.findings`, each handled): Detection (class 2004, GuardDuty's
threats), Compliance (2003, CSPM's controls) and the other finding classes (Vulnerability 2002,
...), told apart as evidence. An active finding opens an incident; a finding closed (activity_id
3), suppressed, resolved, archived or deleted (status_id 3-6), or whose compliance check passes,
resolves it. The policy's aws.securityhub table maps the caption of `severity_id` (Informational
... Critical, and Fatal).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from ..evidence import OcsfEvidence
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
from .securityhub import SOURCE, finding_key

DETAIL_TYPE = "Findings Imported V2"
#: OCSF's severity_id captions (the `severity` string is the same caption, when sent).
SEVERITIES = {0: "Unknown", 1: "Informational", 2: "Low", 3: "Medium", 4: "High", 5: "Critical", 6: "Fatal", 99: "Other"}
#: OCSF status_id of a finding that is over: Suppressed, Resolved, Archived, Deleted.
CLOSED_STATUS = {3: "Suppressed", 4: "Resolved", 5: "Archived", 6: "Deleted"}
CLOSE_ACTIVITY = 3
CLASSES = {2002: "Vulnerability Finding", 2003: "Compliance Finding", 2004: "Detection Finding",
           2005: "Incident Finding", 2006: "Data Security Finding", 2007: "Application Security Posture Finding",
           2008: "IAM Analysis Finding"}


class FindingInfo(SourceModel):
    uid: str = Field(min_length=1)
    title: str
    desc: str | None = None
    types: list[str] = []
    modified_time_dt: datetime | None = None
    created_time_dt: datetime | None = None


class Product(SourceModel):
    name: str | None = None
    uid: str | None = None


class Metadata(SourceModel):
    uid: str | None = None
    product: Product | None = None


class Resource(SourceModel):
    type: str | None = None
    uid: str | None = None
    name: str | None = None


class Compliance(SourceModel):
    status: str | None = None
    control: str | None = None
    standards: list[str] = []


class OcsfFinding(SourceModel):
    class_uid: int
    class_name: str | None = None
    activity_id: int = 0
    severity_id: int
    severity: str | None = None
    status_id: int | None = None
    status: str | None = None
    finding_info: FindingInfo
    metadata: Metadata = Field(default_factory=Metadata)
    resources: list[Resource] = []
    compliance: Compliance | None = None
    time_dt: datetime | None = None


class OcsfFindingsDetail(SourceModel):
    findings: list[OcsfFinding] = Field(min_length=1)


def label(finding: OcsfFinding) -> str:
    """The caption of severity_id (Other: the source's own caption, when it sent one)."""
    caption = SEVERITIES.get(finding.severity_id, "Other")
    return finding.severity if caption == "Other" and finding.severity else caption


def closed(finding: OcsfFinding) -> str | None:
    """Why the finding is over, or None while it is active."""
    compliance = finding.compliance.status if finding.compliance else None
    if finding.activity_id == CLOSE_ACTIVITY:
        return "closed (activity Close)"
    if finding.status_id in CLOSED_STATUS:
        return f"status {CLOSED_STATUS[finding.status_id]}"
    if compliance and compliance.casefold().startswith("pass"):
        return f"compliance {compliance}"
    return None


def _one(finding: OcsfFinding, envelope: Envelope[OcsfFindingsDetail], table: SeverityTable) -> SourceOutcome:
    info = finding.finding_info
    key = finding_key(info.uid)
    why = closed(finding)
    if why:
        return Resolved(key, SOURCE, f"Security Hub finding {info.title!r} is over: {why}")
    resource = finding.resources[0] if finding.resources else None
    resource_id = (resource.uid or resource.name) if resource else None
    severity = label(finding)
    finding_class = finding.class_name or CLASSES.get(finding.class_uid, f"class {finding.class_uid}")
    compliance = finding.compliance
    product = finding.metadata.product.name if finding.metadata.product else None
    incident = build_incident(
        envelope, incident_id=incident_id(key),
        title=info.title,
        description=text(info.desc, f"{finding_class}, severity {severity}" + (f", from {product}" if product else ""),
                         f"Types: {', '.join(info.types)}" if info.types else None,
                         f"Resource {resource.type} {resource_id}" if resource and resource_id else None,
                         f"Control {compliance.control}: {compliance.status}" if compliance and compliance.control
                         else None),
        service=(f"{resource.type} {resource_id}" if resource and resource_id else "Security Hub")[:200],
        severity=table.severity(severity),
        source=SOURCE,
        reported_at=info.modified_time_dt or finding.time_dt or info.created_time_dt or envelope.time,
        evidence=build_evidence(
            OcsfEvidence, envelope, source_ref=info.uid, source_severity=severity, finding_class=finding_class,
            finding_type=info.types[0] if info.types else None, resource_type=resource.type if resource else None,
            resource_id=resource_id, finding_status=finding.status, product=product,
            compliance_status=compliance.status if compliance else None,
            compliance_control=compliance.control if compliance else None),
    )
    return Opened(key, incident)


class SecurityHubOcsfFindings(EventBridgeSource[OcsfFindingsDetail]):
    """Security Hub findings in OCSF on EventBridge."""

    name = SOURCE
    event_source = SOURCE
    detail_type = DETAIL_TYPE
    detail = OcsfFindingsDetail
    evidence = OcsfEvidence

    def adapt(self, envelope: Envelope[OcsfFindingsDetail], table: SeverityTable) -> list[SourceOutcome]:
        return [_one(finding, envelope, table) for finding in envelope.detail.findings]


INCIDENT_SOURCE = SecurityHubOcsfFindings()
