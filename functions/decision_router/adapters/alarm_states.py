"""CloudWatch's word on an alarm's state: an "OK" resolves an alarm's incident only when
CloudWatch itself says the alarm is OK now, so an OK written by anyone else (a publisher on the
alarm topic, a message put in a dead-letter queue and redriven) cannot close a real incident."""

from __future__ import annotations

from typing import Any, Callable

import boto3

from ..domain.ports.incidents import AlarmState
from ..sources.cloudwatch import parse_alarm_arn
from . import AwsAdapter


def alarm_state(arn: str, account: Callable[[], str],
                described: Callable[[str, str], AlarmState | None]) -> AlarmState:
    """The state of the alarm `arn` names: "missing" for an ARN that names no alarm or an alarm
    CloudWatch does not know (`described` by region and name: None), "elsewhere" for an alarm of
    another account than this one (`account`, asked only when needed: it cannot be asked about)."""
    parsed = parse_alarm_arn(arn)
    if parsed is None:
        return "missing"
    region, owner, name = parsed
    if owner != account():
        return "elsewhere"
    return described(region, name) or "missing"


class AlarmStates(AwsAdapter):
    """DescribeAlarms in the alarm's own region (one client per region, made on first use)."""

    service = "cloudwatch"

    def __init__(self, client: Any = None, sts: Any = None):
        super().__init__(client)
        self._regional: dict[str, Any] = {}
        self._sts, self._account = sts, ""

    @property
    def account(self) -> str:
        """This account (STS GetCallerIdentity needs no permission), asked once."""
        if not self._account:
            self._account = str((self._sts or boto3.client("sts")).get_caller_identity()["Account"])
        return self._account

    def _in(self, region: str) -> Any:
        if self._client is not None:
            return self._client
        if region not in self._regional:
            self._regional[region] = boto3.client(self.service, region_name=region)
        return self._regional[region]

    def state_of(self, arn: str) -> AlarmState:
        return alarm_state(arn, lambda: self.account, self._described)

    def _described(self, region: str, name: str) -> AlarmState | None:
        found = self._in(region).describe_alarms(AlarmNames=[name], AlarmTypes=["MetricAlarm", "CompositeAlarm"])
        alarms = found.get("MetricAlarms", []) + found.get("CompositeAlarms", [])
        return alarms[0]["StateValue"] if alarms else None
