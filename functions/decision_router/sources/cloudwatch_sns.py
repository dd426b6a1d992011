"""CloudWatch alarms that notify an SNS topic (most existing alarms do): the incident intake is
subscribed to the topic (template.yaml, `AlarmTopic`) and receives `{"Records": [{"EventSource":
"aws:sns", "Sns": {"Message": "<the alarm as a JSON string>", ...}}]}`; an HTTPS or SQS
subscriber gets the bare notification, which is read the same.

The alarm message has its own shape (AWS's "Schema of Amazon SNS notifications when alarms change
state"): metric alarms carry `Trigger` (one metric, or `Metrics[]` for metric math and anomaly
detection, with `ThresholdMetricId`), composite alarms `AlarmRule` and `TriggeringChildren`
(documented as strings, delivered as objects {Arn, State}). `Region` is a display name ("EU
(Ireland)"): the region is read from `AlarmArn`. Times are written `+0000`.

It becomes the same `cloudwatch.Alarm` as the EventBridge event: same key (the alarm ARN), same
delivery (the state change), so an alarm that notifies both ways opens one incident; OK resolves,
INSUFFICIENT_DATA is ignored with its reason. SNS carries no alarm tags: the policy's
aws.cloudwatch table gives its default severity. An SNS message that is no alarm is parked with
the reason (decision_router.sources.read_event).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

from ..severity import SeverityTable
from .cloudwatch import SOURCE, Alarm, AlarmEvidence, WatchedMetric, alarm_outcomes, kind_of
from .events import Envelope, IncidentSource, SourceModel, SourceOutcome
from .sns import notification

DETAIL_TYPE = "Alarm SNS Notification"


class SnsDimension(SourceModel):
    name: str
    value: str


class SnsMetric(SourceModel):
    MetricName: str
    Namespace: str
    Dimensions: list[SnsDimension] = []


class SnsMetricStat(SourceModel):
    Metric: SnsMetric


class SnsMetricQuery(SourceModel):
    Id: str
    Expression: str | None = None
    Label: str | None = None
    ReturnData: bool = True
    MetricStat: SnsMetricStat | None = None


class AlarmTrigger(SourceModel):
    MetricName: str | None = None  # a single-metric alarm; metric math and anomaly alarms use Metrics
    Namespace: str | None = None
    Dimensions: list[SnsDimension] = []
    Metrics: list[SnsMetricQuery] = []
    ThresholdMetricId: str | None = None
    ComparisonOperator: str | None = None


class ChildState(SourceModel):
    Value: str | None = None


class Child(SourceModel):
    Arn: str
    State: ChildState | None = None


def _child(value: Any) -> Any:
    """A child as the docs type it (an ARN string) or as SNS delivers it ({Arn, State})."""
    return {"Arn": value} if isinstance(value, str) else value


class AlarmMessage(SourceModel):
    AlarmName: str
    AlarmDescription: str | None = None
    AWSAccountId: str = ""
    NewStateValue: Literal["ALARM", "OK", "INSUFFICIENT_DATA"]
    NewStateReason: str = ""
    StateChangeTime: datetime
    AlarmArn: str
    Trigger: AlarmTrigger | None = None
    AlarmRule: str | None = None
    TriggeringChildren: list[Annotated[Child, BeforeValidator(_child)]] = []


def _alarm_message(text: str) -> dict[str, Any] | None:
    try:
        message = json.loads(text)
    except ValueError:
        return None
    if isinstance(message, dict) and {"AlarmName", "NewStateValue"} <= message.keys():
        return message
    return None


def region_of(arn: str) -> str:
    """arn:aws:cloudwatch:<region>:<account>:alarm:<name> → <region> ('' when not an ARN)."""
    parts = arn.split(":")
    return parts[3] if len(parts) > 5 and parts[0] == "arn" else ""


def to_alarm(message: AlarmMessage) -> Alarm:
    trigger = message.Trigger
    if message.AlarmRule is not None:
        children = tuple(c.Arn.rsplit(":", 1)[-1] for c in message.TriggeringChildren
                         if c.State is None or c.State.Value in (None, "ALARM"))
        return Alarm(message.AlarmArn, message.AlarmName, message.NewStateValue, message.NewStateReason,
                     message.StateChangeTime, "composite", message.AlarmDescription, alarm_rule=message.AlarmRule,
                     triggering=children)
    metrics: tuple[WatchedMetric, ...] = ()
    expression = None
    kind = kind_of([], None)
    if trigger is not None:
        if trigger.MetricName and trigger.Namespace:
            metrics = (WatchedMetric(trigger.Namespace, trigger.MetricName,
                                     {d.name: d.value for d in trigger.Dimensions}),)
        metrics += tuple(WatchedMetric(q.MetricStat.Metric.Namespace, q.MetricStat.Metric.MetricName,
                                       {d.name: d.value for d in q.MetricStat.Metric.Dimensions})
                         for q in trigger.Metrics if q.MetricStat)
        expression = next((q.Expression for q in trigger.Metrics if q.Expression and q.ReturnData), None)
        kind = kind_of([q.Expression or "" for q in trigger.Metrics], trigger.ThresholdMetricId)
    return Alarm(message.AlarmArn, message.AlarmName, message.NewStateValue, message.NewStateReason,
                 message.StateChangeTime, kind, message.AlarmDescription, metrics, expression)


class CloudWatchAlarmsBySns(IncidentSource[AlarmMessage]):
    """CloudWatch alarms' SNS notifications."""

    name = SOURCE
    event_source = SOURCE
    detail_type = DETAIL_TYPE
    detail = AlarmMessage
    evidence = AlarmEvidence

    def unwrap(self, payload: Any) -> dict[str, Any] | None:
        """The envelope an SNS alarm notification stands for; None when the payload is no SNS
        notification or its Message is no alarm."""
        sns = notification(payload)
        message = _alarm_message(sns.Message) if sns is not None else None
        if sns is None or message is None:
            return None
        arn = str(message.get("AlarmArn", ""))
        return {"id": sns.MessageId, "source": SOURCE, "detail-type": DETAIL_TYPE,
                "account": str(message.get("AWSAccountId", "")), "time": sns.Timestamp or message.get("StateChangeTime"),
                "region": region_of(arn), "resources": [arn] if arn else [], "detail": message}

    def adapt(self, envelope: Envelope[AlarmMessage], table: SeverityTable) -> list[SourceOutcome]:
        return alarm_outcomes(to_alarm(envelope.detail), envelope, table)


INCIDENT_SOURCE = CloudWatchAlarmsBySns()
