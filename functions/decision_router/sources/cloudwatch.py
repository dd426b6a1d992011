"""CloudWatch `Alarm State Change` (default bus, source aws.cloudwatch): metric, metric-math,
anomaly-detection and composite alarms.

ALARM opens an incident keyed by the alarm ARN; OK resolves it; INSUFFICIENT_DATA is ignored
(the alarm cannot tell, which is no incident). CloudWatch sends no severity: the policy's table
maps the alarm's `severity` tag (sent in `alarmTags` when tag propagation is on).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Literal

from pydantic import Field

from ..severity import SeverityTable
from .events import (
    Envelope,
    Ignored,
    IncidentSource,
    Opened,
    Resolved,
    SourceEvidence,
    SourceModel,
    SourceOutcome,
    build_evidence,
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


AlarmKind = Literal["metric", "metric-math", "anomaly-detection", "composite"]


class AlarmEvidence(SourceEvidence):
    """What an alarm says beside the incident (`evidence.namespace`, ... in a policy rule)."""

    alarm_name: str | None = None
    alarm_kind: AlarmKind | None = None
    namespace: str | None = None
    metric_name: str | None = None
    dimensions: str | None = None


def alarm_kind(config: Configuration) -> AlarmKind:
    if config.alarmRule:
        return "composite"
    expressions = [m.expression or "" for m in config.metrics]
    if any(e.upper().startswith("ANOMALY_DETECTION_BAND") for e in expressions):
        return "anomaly-detection"
    return "metric-math" if any(expressions) else "metric"


def adapt(envelope: Envelope[AlarmDetail], table: SeverityTable) -> list[SourceOutcome]:
    detail = envelope.detail
    # resources[0] is the alarm ARN; the name alone is unique per account and region only.
    key = (envelope.resources[0] if envelope.resources
           else f"arn:aws:cloudwatch:{envelope.region}:{envelope.account}:alarm:{detail.alarmName}")
    state = detail.state
    if state.value == "OK":
        return [Resolved(key, SOURCE, f"alarm {detail.alarmName} is OK: {state.reason}")]
    if state.value == "INSUFFICIENT_DATA":
        return [Ignored(SOURCE, f"alarm {detail.alarmName} has INSUFFICIENT_DATA (no incident): {state.reason}", key)]
    config = detail.configuration
    metrics = [m.metricStat.metric for m in config.metrics if m.metricStat]
    metric = metrics[0] if metrics else None
    tags = {t.key.casefold(): t.value for t in detail.alarmTags}
    label = tags.get("severity")
    kind = alarm_kind(config)
    service = tags.get("service") or _service(metric, detail.alarmName)
    dimensions = ", ".join(f"{k}={v}" for m in metrics for k, v in m.dimensions.items()) or None
    watched = (f"Metric {metric.namespace} {metric.name}" + (f" ({dimensions})" if dimensions else "")
               if metric else None)
    expression = next((f"Expression {m.expression}" for m in config.metrics if m.expression and m.returnData), None)
    triggering = _triggering_alarms(state.reasonData) if kind == "composite" else []
    data = {
        "incident_id": incident_id(key),
        "title": f"CloudWatch alarm {detail.alarmName} is in ALARM",
        "description": text(config.description, state.reason, watched, expression,
                            f"Alarm rule {config.alarmRule}" if config.alarmRule else None,
                            f"Triggered by {', '.join(triggering)}" if triggering else None),
        "service": service,
        "severity": table.severity(label),
        "source": SOURCE,
        "reported_at": state.timestamp,
        "evidence": build_evidence(
            AlarmEvidence, envelope, source_ref=key, source_severity=label, alarm_name=detail.alarmName,
            alarm_kind=kind, namespace=metric.namespace if metric else None,
            metric_name=metric.name if metric else None, dimensions=dimensions),
    }
    return [Opened(key, data)]


def _service(metric: Metric | None, alarm_name: str) -> str:
    """A service name when the alarm carries no `service` tag: the metric's namespace (AWS/EC2),
    else the alarm's name (composite alarms watch no metric)."""
    return metric.namespace if metric else alarm_name[:200]


def _triggering_alarms(reason_data: str | None) -> list[str]:
    """The child alarms a composite alarm names in its reasonData (JSON in a string)."""
    try:
        data = json.loads(reason_data or "{}")
    except ValueError:
        return []
    alarms = data.get("triggeringAlarms", []) if isinstance(data, dict) else []
    return [str(a.get("arn", "")).rsplit(":", 1)[-1] for a in alarms if isinstance(a, dict) and a.get("arn")]


INCIDENT_SOURCE = IncidentSource(SOURCE, "aws.cloudwatch", DETAIL_TYPE, AlarmDetail, adapt)
