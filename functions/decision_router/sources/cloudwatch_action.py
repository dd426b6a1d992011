"""CloudWatch alarms that invoke the incident intake directly as their alarm action (a Lambda
action, no EventBridge, no SNS): `{"source": "aws.cloudwatch", "alarmArn", "accountId", "time",
"region", "alarmData": {alarmName, state, previousState, configuration}}`. `alarmData` is the
EventBridge alarm's detail, so the alarm becomes the same `cloudwatch.Alarm`, on the same key (the
alarm ARN) and the same delivery (its state change): an alarm acting both ways is one incident.

The payload has no detail-type: it is known by its shape and read as its own model
(`AlarmAction`), its kind named "Lambda Alarm Action".
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..evidence import AlarmEvidence
from ..severity import SeverityTable
from ..validation import describe_errors
from .cloudwatch import SOURCE, AlarmDetail, alarm_outcomes, from_detail
from .events import IncidentSource, InvalidSourceEvent, SourceModel, SourceOutcome

DETAIL_TYPE = "Lambda Alarm Action"


class AlarmAction(SourceModel):
    """What a Lambda alarm action sends (the fields read)."""

    alarmArn: str
    alarmData: AlarmDetail

    @property
    def id(self) -> str:
        """The delivery: the alarm's state change."""
        return f"{self.alarmArn}@{self.alarmData.state.timestamp.isoformat()}"

    @property
    def source(self) -> str:
        return SOURCE

    @property
    def detail_type(self) -> str:
        return DETAIL_TYPE


class CloudWatchAlarmActions(IncidentSource[AlarmAction]):
    """CloudWatch alarms that invoke the intake as their Lambda action."""

    name = SOURCE
    event_source = SOURCE
    detail_type = DETAIL_TYPE
    evidence = AlarmEvidence

    def read(self, payload: Any) -> AlarmAction | None:
        """The alarm action a payload is; None for any other payload (an EventBridge event has a detail-type)."""
        if not (isinstance(payload, dict) and payload.get("source") == SOURCE and "alarmArn" in payload
                and "detail-type" not in payload):
            return None
        try:
            return AlarmAction.model_validate(payload)
        except ValidationError as error:
            raise InvalidSourceEvent(SOURCE, DETAIL_TYPE, describe_errors(error)) from None

    def adapt(self, event: AlarmAction, table: SeverityTable) -> list[SourceOutcome]:
        return alarm_outcomes(from_detail(event.alarmArn, event.alarmData), event, table)


INCIDENT_SOURCE = CloudWatchAlarmActions()
