"""CloudWatch alarms that invoke the incident intake directly as their alarm action (a Lambda
action, no EventBridge, no SNS): `{"source": "aws.cloudwatch", "alarmArn", "accountId", "time",
"region", "alarmData": {alarmName, state, previousState, configuration}}`. `alarmData` is the
EventBridge alarm's detail, so the alarm becomes the same `cloudwatch.Alarm`, on the same key (the
alarm ARN) and the same delivery (its state change): an alarm acting both ways is one incident.

The payload has no detail-type; the intake reads it as an envelope of its own kind
("Lambda Alarm Action") built from its fields (`unwrap`).
"""

from __future__ import annotations

from typing import Any

from ..severity import SeverityTable
from .cloudwatch import SOURCE, AlarmDetail, AlarmEvidence, alarm_outcomes, from_detail
from .events import Envelope, IncidentSource, SourceOutcome

DETAIL_TYPE = "Lambda Alarm Action"


class CloudWatchAlarmActions(IncidentSource[AlarmDetail]):
    """CloudWatch alarms that invoke the intake as their Lambda action."""

    name = SOURCE
    event_source = SOURCE
    detail_type = DETAIL_TYPE
    detail = AlarmDetail
    evidence = AlarmEvidence

    def unwrap(self, payload: Any) -> dict[str, Any] | None:
        """The envelope a Lambda alarm action stands for; None for any other payload."""
        if not (isinstance(payload, dict) and payload.get("source") == SOURCE and "alarmArn" in payload
                and "detail-type" not in payload):
            return None
        data = payload.get("alarmData")
        state = data.get("state") if isinstance(data, dict) else None
        changed = state.get("timestamp") if isinstance(state, dict) else None
        return {"id": f"{payload['alarmArn']}@{changed or payload.get('time')}", "source": SOURCE,
                "detail-type": DETAIL_TYPE, "account": payload.get("accountId", ""), "time": payload.get("time"),
                "region": payload.get("region", ""), "resources": [payload["alarmArn"]],
                "detail": data if isinstance(data, dict) else {}}

    def adapt(self, envelope: Envelope[AlarmDetail], table: SeverityTable) -> list[SourceOutcome]:
        return alarm_outcomes(from_detail(envelope.resources[0], envelope.detail), envelope, table)


INCIDENT_SOURCE = CloudWatchAlarmActions()
