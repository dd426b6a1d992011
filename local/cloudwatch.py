"""CloudWatch, played locally: an alarm's state is set in moto before its event is delivered, as
CloudWatch changes an alarm's state before it tells anyone. The incident intake resolves an alarm's
incident on "OK" only when DescribeAlarms says the alarm is OK, so the local run and the tests
that send alarm events play CloudWatch's part with this."""

from __future__ import annotations

import json
from typing import Any

import boto3

from decision_router.sources.cloudwatch import parse_alarm_arn

ALARM_STATES = ("OK", "ALARM", "INSUFFICIENT_DATA")


def alarm_states_in(event: Any) -> list[tuple[str, str]]:
    """(alarm ARN, state) of each alarm state change `event` reports: an EventBridge alarm
    event, an SNS event or bare notification carrying CloudWatch's alarm message, or a Lambda
    alarm action. Anything else reports none."""
    if not isinstance(event, dict):
        return []
    if event.get("source") == "aws.cloudwatch" and isinstance(event.get("detail"), dict):
        state = (event["detail"].get("state") or {}).get("value")
        arns = event.get("resources") or [event["detail"].get("alarmArn")]
        return [(arns[0], state)] if arns and arns[0] and state in ALARM_STATES else []
    if "alarmArn" in event and isinstance(event.get("alarmData"), dict):
        state = (event["alarmData"].get("state") or {}).get("value")
        return [(event["alarmArn"], state)] if state in ALARM_STATES else []
    records = event.get("Records")
    notifications = [r.get("Sns") for r in records if isinstance(r, dict)] if isinstance(records, list) else [event]
    found = []
    for sns in notifications:
        try:
            message = json.loads(sns.get("Message", "")) if isinstance(sns, dict) else None
        except (TypeError, ValueError):
            continue
        if isinstance(message, dict) and message.get("AlarmArn") and message.get("NewStateValue") in ALARM_STATES:
            found.append((message["AlarmArn"], message["NewStateValue"]))
    return found


def play_alarm_states(event: Any) -> list[tuple[str, str]]:
    """Set each alarm `event` reports to the state it reports (creating it if it is new), in the
    alarm's own region of whatever CloudWatch boto3 reaches (moto here). Returns what was set."""
    played = []
    for arn, state in alarm_states_in(event):
        parsed = parse_alarm_arn(arn)
        if parsed is None:
            continue
        region, _, name = parsed
        cloudwatch = boto3.client("cloudwatch", region_name=region)
        if not cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"]:
            cloudwatch.put_metric_alarm(AlarmName=name, Namespace="Local", MetricName=name, Statistic="Average",
                                        Period=60, EvaluationPeriods=1, Threshold=1,
                                        ComparisonOperator="GreaterThanThreshold")
        cloudwatch.set_alarm_state(AlarmName=name, StateValue=state, StateReason="played by the local run")
        played.append((arn, state))
    return played
