"""What an incident's native source says beside it: its `evidence`, one model per source, which a
policy rule can name (`evidence.namespace`, `evidence.finding_type`, ...).

The models stand on the library's ground floor, beside the items, so that `Incident` is complete
as soon as it is imported: its `evidence` is the `Evidence` union below, which needs none of the
sources. Each source module builds its incidents with its own model from here and names it as its
`evidence` (decision_router.sources; tests/functions/test_source_registry.py holds every source in
the table to a model of this union). A new source with fields of its own adds its model here and
to `Evidence`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from .validation import Url


class SourceEvidence(BaseModel):
    """What every native source's evidence has; each source's model extends it with its own
    fields. Each forbids fields it does not declare, so evidence comes back from JSON as the model
    it was written from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source_ref: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)] = Field(
        description="The source's own id: alarm ARN, Health event ARN, finding id, PagerDuty incident id. "
                    "Also the correlation key.")
    source_url: Url | None = Field(None, description="A link to the item in the source's console, when it sends one.")
    source_severity: str | None = Field(None, description="The source's severity label as mapped by the policy's "
                                                          "source_severity table (e.g. HIGH, P2, issue).")
    source_score: float | None = Field(None, description="A numeric severity the source sent (GuardDuty 1.0-10.0).")


AlarmKind = Literal["metric", "metric-math", "anomaly-detection", "composite"]


class AlarmEvidence(SourceEvidence):
    """What a CloudWatch alarm says beside the incident (`evidence.namespace`, ... in a policy rule)."""

    alarm_name: str | None = None
    alarm_kind: AlarmKind | None = None
    namespace: str | None = None
    metric_name: str | None = None
    dimensions: str | None = None


class HealthEvidence(SourceEvidence):
    """What an AWS Health event says beside the incident (`evidence.health_event_type`, ...)."""

    health_event_type: str | None = None
    health_category: str | None = None
    health_scope: str | None = None
    actionability: str | None = None
    event_region: str | None = None
    affected_entities: str | None = None


class GuardDutyEvidence(SourceEvidence):
    """What a GuardDuty finding says beside the incident (`evidence.finding_type`, ...)."""

    finding_type: str | None = None
    resource_type: str | None = None
    resource_id: str | None = None


class SecurityHubEvidence(SourceEvidence):
    """What a Security Hub finding (ASFF) says beside the incident (`evidence.compliance_status`, ...)."""

    finding_type: str | None = None
    resource_type: str | None = None
    resource_id: str | None = None
    record_state: str | None = None
    workflow_status: str | None = None
    compliance_status: str | None = None


class OcsfEvidence(SourceEvidence):
    """What a Security Hub OCSF finding says beside the incident (`evidence.finding_class`, ...)."""

    finding_class: str = Field(description="The OCSF class: Detection Finding, Compliance Finding, ...")
    finding_type: str | None = None
    resource_type: str | None = None
    resource_id: str | None = None
    finding_status: str | None = None
    compliance_status: str | None = None
    compliance_control: str | None = None
    product: str | None = None


class PagerDutyEvidence(SourceEvidence):
    """What a PagerDuty incident says beside ours (`evidence.urgency`, ...)."""

    pagerduty_service: str | None = None
    urgency: str | None = None
    pagerduty_priority: str | None = None


class GrafanaEvidence(SourceEvidence):
    """What a Grafana alert says beside the incident (`evidence.alertname`, `evidence.labels`, ...)."""

    alertname: str | None = None
    labels: str | None = Field(None, description="The alert's labels, `name=value, ...` (the group's common ones "
                                                 "for a group incident)")
    group_key: str | None = None
    receiver: str | None = None
    alerts: int = Field(1, description="How many alerts the incident stands for (a group incident: all of the POST's)")


#: An incident's evidence: the common fields alone (an `Incident Reported` may carry them), or one
#: native source's model. The order breaks ties (a payload that two models both accept): the
#: common fields first, then the sources in their table's order.
Evidence = Union[SourceEvidence, AlarmEvidence, HealthEvidence, GuardDutyEvidence, SecurityHubEvidence, OcsfEvidence,
                 PagerDutyEvidence, GrafanaEvidence]
