"""CloudWatch alarms that notify an SNS topic (most existing alarms do): the incident intake is
subscribed to the topic (template.yaml, `AlarmTopic`) and receives `{"Records": [{"EventSource":
"aws:sns", "Sns": {"Message": "<the alarm as a JSON string>", ...}}]}`; an HTTPS or SQS
subscriber gets the bare notification, which is read the same. The notification is read once
(`AlarmNotification`, the one SNS model of sources.sns), its Message parsed as the alarm message.

The alarm message has its own shape (AWS's "Schema of Amazon SNS notifications when alarms change
state"): metric alarms carry `Trigger` (one metric, or `Metrics[]` for metric math and anomaly
detection, with `ThresholdMetricId`), composite alarms `AlarmRule` and `TriggeringChildren`
(documented as strings, delivered as objects {Arn, State}). Times are written `+0000`.

It becomes the same `cloudwatch.Alarm` as the EventBridge event: same key (the alarm ARN), same
delivery (the state change), so an alarm that notifies both ways opens one incident; OK resolves,
INSUFFICIENT_DATA is ignored with its reason. SNS carries no alarm tags: the policy's
aws.cloudwatch table gives its default severity.

This is the incident intake's one SNS source, so it reads every notification the intake gets: one
that lacks what SNS always sends is refused naming the field (`MessageId`), a message that is no
alarm (no JSON object with AlarmName and NewStateValue) is an UnknownEvent, an alarm message
with a bad field names it (`Message.AlarmArn`); the intake parks each with its reason.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ValidationError

from ..evidence import AlarmEvidence
from ..severity import SeverityTable
from ..validation import describe_errors
from .cloudwatch import SOURCE, Alarm, WatchedMetric, alarm_outcomes, kind_of
from .events import IncidentSource, InvalidSourceEvent, SourceModel, SourceOutcome, UnknownEvent
from .sns import SnsNotification, carried, faults_the_notification

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


#: What makes a message an alarm's: a JSON object without them is another SNS message.
ALARM_FIELDS = ("AlarmName", "NewStateValue")


class AlarmNotification(SnsNotification[AlarmMessage]):
    """A CloudWatch alarm's SNS notification, its Message read once as the alarm message."""

    @property
    def id(self) -> str:
        """The delivery: the notification (its alarm's state change is the outcome's delivery)."""
        return self.MessageId

    @property
    def source(self) -> str:
        return SOURCE

    @property
    def detail_type(self) -> str:
        return DETAIL_TYPE


def _no_alarm(error: ValidationError) -> bool:
    """Whether the Message is no alarm message at all (no JSON object, or one without AlarmName or
    NewStateValue), rather than an alarm message with a bad field."""
    return any(e["loc"] == ("Message",) or (e["loc"] in [("Message", f) for f in ALARM_FIELDS] and e["type"] == "missing")
               for e in error.errors(include_url=False))


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


class CloudWatchAlarmsBySns(IncidentSource[AlarmNotification]):
    """CloudWatch alarms' SNS notifications."""

    name = SOURCE
    event_source = SOURCE
    detail_type = DETAIL_TYPE
    evidence = AlarmEvidence

    def read(self, payload: Any) -> AlarmNotification | None:
        """The alarm notification a payload carries; None when it carries no SNS notification."""
        raw = carried(payload)
        if raw is None:
            return None
        try:
            return AlarmNotification.model_validate(raw)
        except ValidationError as error:
            if faults_the_notification(error):
                raise InvalidSourceEvent("aws:sns", "Notification", describe_errors(error)) from None
            if _no_alarm(error):
                raise UnknownEvent(
                    f"SNS message {raw.get('MessageId')!r} on topic {raw.get('TopicArn')!r} is not a CloudWatch alarm "
                    f"notification (its Message is no JSON object with {' and '.join(ALARM_FIELDS)}); the incident "
                    "intake maps no other SNS message") from None
            raise InvalidSourceEvent(SOURCE, DETAIL_TYPE, describe_errors(error)) from None

    def adapt(self, event: AlarmNotification, table: SeverityTable) -> list[SourceOutcome]:
        return alarm_outcomes(to_alarm(event.Message), event, table)


INCIDENT_SOURCE = CloudWatchAlarmsBySns()
