"""Security Hub Findings - Imported (default bus, source aws.securityhub): the ASFF feed, which
Security Hub CSPM still sends (the OCSF feed of the new Security Hub is `securityhub_ocsf`); one
finding per event (a list, each handled). An active finding opens an incident keyed by the
finding `Id` (`finding_key`: the key both feeds share); a
new import of the same finding updates it; one that is archived, resolved, suppressed or whose
compliance check now passes resolves it. The policy's table maps `Severity.Label`.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from ..evidence import SecurityHubEvidence
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

SOURCE = "aws.securityhub"
DETAIL_TYPE = "Security Hub Findings - Imported"
#: What Security Hub says of a finding that is over.
CLOSED_WORKFLOW = {"RESOLVED", "SUPPRESSED"}


class FindingSeverity(SourceModel):
    Label: str | None = None
    Normalized: int | None = None


class FindingWorkflow(SourceModel):
    Status: str = "NEW"


class FindingCompliance(SourceModel):
    Status: str | None = None


class FindingResource(SourceModel):
    Type: str
    Id: str


class Finding(SourceModel):
    Id: str
    Title: str
    Description: str
    Types: list[str] = []
    Severity: FindingSeverity = Field(default_factory=FindingSeverity)
    Workflow: FindingWorkflow = Field(default_factory=FindingWorkflow)
    RecordState: str = "ACTIVE"
    Compliance: FindingCompliance | None = None
    Resources: list[FindingResource] = []
    ProductArn: str | None = None
    UpdatedAt: datetime


class FindingsDetail(SourceModel):
    findings: list[Finding] = Field(min_length=1)


def label(severity: FindingSeverity) -> str | None:
    """Severity.Label, or the label of the (older) Normalized score as Security Hub bands it."""
    if severity.Label:
        return severity.Label
    if severity.Normalized is None:
        return None
    n = severity.Normalized
    return "INFORMATIONAL" if n == 0 else "LOW" if n < 40 else "MEDIUM" if n < 70 else "HIGH" if n < 90 else "CRITICAL"


def finding_key(uid: str) -> str:
    """The open-incident key of a finding, shared by every feed that carries it: ASFF's `Id` and
    OCSF's `finding_info.uid` are the same finding ARN when both Security Hub feeds are on, so
    both imports are one incident. A GuardDuty finding is keyed by its id (the end of its ARN), as
    GuardDuty's own events key it, so the finding is one incident whichever way it comes."""
    if uid.startswith("arn:") and ":guardduty:" in uid and "/finding/" in uid:
        return uid.rsplit("/finding/", 1)[1]
    return uid


def _one(finding: Finding, envelope: Envelope[FindingsDetail], table: SeverityTable) -> SourceOutcome:
    key = finding_key(finding.Id)
    compliance = finding.Compliance.Status if finding.Compliance else None
    if finding.RecordState == "ARCHIVED" or finding.Workflow.Status in CLOSED_WORKFLOW or compliance == "PASSED":
        why = (f"record state {finding.RecordState}, workflow {finding.Workflow.Status}"
               + (f", compliance {compliance}" if compliance else ""))
        return Resolved(key, SOURCE, f"Security Hub finding {finding.Title!r} is over: {why}")
    resource = finding.Resources[0] if finding.Resources else None
    severity = label(finding.Severity)
    incident = build_incident(
        envelope, incident_id=incident_id(key),
        title=finding.Title,
        description=text(finding.Description, f"Severity {severity}" if severity else None,
                         f"Types: {', '.join(finding.Types)}" if finding.Types else None,
                         f"Resource {resource.Type} {resource.Id}" if resource else None,
                         f"Compliance {compliance}" if compliance else None),
        service=(f"{resource.Type} {resource.Id}" if resource else "Security Hub")[:200],
        severity=table.severity(severity),
        source=SOURCE,
        reported_at=finding.UpdatedAt,
        evidence=build_evidence(
            SecurityHubEvidence, envelope, source_ref=finding.Id, source_severity=severity,
            finding_type=finding.Types[0] if finding.Types else None,
            resource_type=resource.Type if resource else None, resource_id=resource.Id if resource else None,
            record_state=finding.RecordState, workflow_status=finding.Workflow.Status, compliance_status=compliance),
    )
    return Opened(key, incident)


class SecurityHubFindings(EventBridgeSource[FindingsDetail]):
    """Security Hub findings (ASFF) on EventBridge."""

    name = SOURCE
    event_source = "aws.securityhub"
    detail_type = DETAIL_TYPE
    detail = FindingsDetail
    evidence = SecurityHubEvidence

    def adapt(self, envelope: Envelope[FindingsDetail], table: SeverityTable) -> list[SourceOutcome]:
        return [_one(finding, envelope, table) for finding in envelope.detail.findings]


INCIDENT_SOURCE = SecurityHubFindings()
