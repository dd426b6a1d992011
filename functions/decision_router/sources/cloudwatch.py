"""CloudWatch `Alarm State Change` (default bus, source aws.cloudwatch): metric, metric-math,
anomaly-detection and composite alarms. The same alarms sent through SNS (`cloudwatch_sns`) or
to a Lambda alarm action (`cloudwatch_action`) become the same `Alarm` and the same incident.

ALARM opens an incident keyed by the alarm ARN; OK resolves it; INSUFFICIENT_DATA is ignored
(the alarm cannot tell, which is no incident). CloudWatch sends no severity: the policy's table
maps the alarm's `severity` tag (sent in `alarmTags` when tag propagation is on).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import Field

from ..evidence import AlarmEvidence, AlarmKind
from ..severity import SeverityTable
from .events import (
    Envelope,
    EventBridgeSource,
    Ignored,
    Opened,
    Resolved,
    SourceEvent,
    SourceModel,
    SourceOutcome,
    build_evidence,
    build_incident,
    incident_id,
    text,
)

SOURCE = "aws.cloudwatch"
DETAIL_TYPE = "CloudWatch Alarm State Change"


class AlarmState(SourceModel):
    value: Literal["ALARM", "OK", "INSUFFICIENT_DATA"]
    reason: str = ""
    reasonData: str | None = None
    timestamp: datetime  # CloudWatch writes +0000 (no colon); pydantic reads it


class Metric(SourceModel):
    namespace: str
    name: str
    dimensions: dict[str, str] = {}


class MetricStat(SourceModel):
    metric: Metric


class MetricQuery(SourceModel):
    id: str
    metricStat: MetricStat | None = None
    expression: str | None = None
    label: str | None = None
    returnData: bool = True


class Configuration(SourceModel):
    description: str | None = None
    metrics: list[MetricQuery] = []
    alarmRule: str | None = None  # composite alarms


class AlarmTag(SourceModel):
    key: str
    value: str


class AlarmDetail(SourceModel):
    alarmName: str
    state: AlarmState
    previousState: AlarmState | None = None
    configuration: Configuration = Field(default_factory=Configuration)
    alarmTags: list[AlarmTag] = []


@dataclass(frozen=True)
class WatchedMetric:
    namespace: str
    name: str
    dimensions: dict[str, str]


@dataclass(frozen=True)
class Alarm:
    """One alarm state change as every path tells it (EventBridge, SNS, a Lambda alarm action):
    the shapes differ, the incident does not."""

    arn: str
    name: str
    state: str  # ALARM | OK | INSUFFICIENT_DATA
    reason: str
    changed_at: datetime
    kind: AlarmKind
    description: str | None = None
    metrics: tuple[WatchedMetric, ...] = ()
    expression: str | None = None
    alarm_rule: str | None = None
    triggering: tuple[str, ...] = ()  # a composite alarm's child alarms in ALARM, by name
    tags: tuple[tuple[str, str], ...] = ()

    @property
    def delivery(self) -> str:
        """The state change itself: the same on every path it is sent by, so an alarm notifying
        EventBridge and SNS is one delivery (a late copy by the other path reopens nothing)."""
        return f"{self.arn}#{self.state}@{self.changed_at.isoformat()}"


def alarm_kind(config: Configuration) -> AlarmKind:
    if config.alarmRule:
        return "composite"
    expressions = [m.expression or "" for m in config.metrics]
    return kind_of(expressions, threshold_metric=None)


def kind_of(expressions: list[str], threshold_metric: str | None) -> AlarmKind:
    """A metric alarm's kind from its metric queries' expressions (and its ThresholdMetricId)."""
    if threshold_metric or any(e.upper().startswith("ANOMALY_DETECTION_BAND") for e in expressions):
        return "anomaly-detection"
    return "metric-math" if any(expressions) else "metric"


def from_detail(arn: str, detail: AlarmDetail) -> Alarm:
    """The alarm of an EventBridge detail, or of a Lambda alarm action's alarmData (same shape)."""
    config = detail.configuration
    kind = alarm_kind(config)
    return Alarm(
        arn=arn, name=detail.alarmName, state=detail.state.value, reason=detail.state.reason,
        changed_at=detail.state.timestamp, kind=kind, description=config.description,
        metrics=tuple(WatchedMetric(m.metricStat.metric.namespace, m.metricStat.metric.name,
                                    m.metricStat.metric.dimensions) for m in config.metrics if m.metricStat),
        expression=next((m.expression for m in config.metrics if m.expression and m.returnData), None),
        alarm_rule=config.alarmRule,
        triggering=tuple(_triggering_alarms(detail.state.reasonData)) if kind == "composite" else (),
        tags=tuple((t.key.casefold(), t.value) for t in detail.alarmTags))


def parse_alarm_arn(arn: str) -> tuple[str, str, str] | None:
    """(region, account, alarm name) of `arn:<partition>:cloudwatch:<region>:<account>:alarm:<name>`."""
    parts = arn.split(":", 6)
    if len(parts) != 7 or parts[0] != "arn" or parts[2] != "cloudwatch" or parts[5] != "alarm" or not parts[6]:
        return None
    return parts[3], parts[4], parts[6]


def alarm_outcomes(alarm: Alarm, event: SourceEvent, table: SeverityTable) -> list[SourceOutcome]:
    """ALARM opens (keyed by the alarm ARN), OK resolves, INSUFFICIENT_DATA is ignored with the
    reason; `event`, whichever path told it, names what fails to validate."""
    key, delivery = alarm.arn, alarm.delivery
    if alarm.state == "OK":
        return [Resolved(key, SOURCE, f"alarm {alarm.name} is OK: {alarm.reason}", delivery)]
    if alarm.state == "INSUFFICIENT_DATA":
        return [Ignored(SOURCE, f"alarm {alarm.name} has INSUFFICIENT_DATA (no incident): {alarm.reason}", key,
                        delivery)]
    metric = alarm.metrics[0] if alarm.metrics else None
    tags = dict(alarm.tags)
    label = tags.get("severity")
    service = tags.get("service") or _service(metric, alarm.name)
    dimensions = ", ".join(f"{k}={v}" for m in alarm.metrics for k, v in m.dimensions.items()) or None
    watched = (f"Metric {metric.namespace} {metric.name}" + (f" ({dimensions})" if dimensions else "")
               if metric else None)
    incident = build_incident(
        event, incident_id=incident_id(key),
        title=f"CloudWatch alarm {alarm.name} is in ALARM",
        description=text(alarm.description, alarm.reason, watched,
                         f"Expression {alarm.expression}" if alarm.expression else None,
                         f"Alarm rule {alarm.alarm_rule}" if alarm.alarm_rule else None,
                         f"Triggered by {', '.join(alarm.triggering)}" if alarm.triggering else None),
        service=service,
        severity=table.severity(label),
        source=SOURCE,
        reported_at=alarm.changed_at,
        evidence=build_evidence(
            AlarmEvidence, event, source_ref=key, source_severity=label, alarm_name=alarm.name,
            alarm_kind=alarm.kind, namespace=metric.namespace if metric else None,
            metric_name=metric.name if metric else None, dimensions=dimensions),
    )
    return [Opened(key, incident, delivery)]


def _service(metric: WatchedMetric | None, alarm_name: str) -> str:
    """A service name when the alarm carries no `service` tag: the metric's namespace with its
    dimensions (`AWS/RDS DBInstanceIdentifier=payments-db`), so that alarms of two databases are
    two services (grouping matches on it), else the alarm's name (composite alarms watch no metric)."""
    if metric is None:
        return alarm_name[:200]
    dimensions = ",".join(f"{k}={v}" for k, v in sorted(metric.dimensions.items()))
    return f"{metric.namespace} {dimensions}"[:200] if dimensions else metric.namespace


def _triggering_alarms(reason_data: str | None) -> list[str]:
    """The child alarms a composite alarm names in its reasonData (JSON in a string)."""
    try:
        data = json.loads(reason_data or "{}")
    except ValueError:
        return []
    alarms = data.get("triggeringAlarms", []) if isinstance(data, dict) else []
    return [str(a.get("arn", "")).rsplit(":", 1)[-1] for a in alarms if isinstance(a, dict) and a.get("arn")]


class CloudWatchAlarms(EventBridgeSource[AlarmDetail]):
    """CloudWatch alarms' state changes on EventBridge."""

    name = SOURCE
    event_source = "aws.cloudwatch"
    detail_type = DETAIL_TYPE
    detail = AlarmDetail
    evidence = AlarmEvidence

    def adapt(self, envelope: Envelope[AlarmDetail], table: SeverityTable) -> list[SourceOutcome]:
        detail = envelope.detail
        # resources[0] is the alarm ARN; the name alone is unique per account and region only.
        arn = (envelope.resources[0] if envelope.resources
               else f"arn:aws:cloudwatch:{envelope.region}:{envelope.account}:alarm:{detail.alarmName}")
        return alarm_outcomes(from_detail(arn, detail), envelope, table)


INCIDENT_SOURCE = CloudWatchAlarms()
