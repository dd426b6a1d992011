"""The routing workflow (Step Functions): starting an execution for one decision record, and
reading an execution's status and input back (where an answered or corrected item went)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Tracer

from ..domain.records import LABEL_RETENTION_DAYS, DecisionRecord, execution_name
from . import AwsAdapter, expiry

#: Execution statuses that mean the item was not routed by that execution.
ENDED_UNROUTED = {"FAILED", "TIMED_OUT", "ABORTED"}
#: Executions of one item key before giving up (the suffixes -r2 … must fit the name).
MAX_ATTEMPTS = 99

tracer = Tracer()




def execution_input(record: DecisionRecord, audit_retention_days: int,
                    label_retention_days: int = LABEL_RETENTION_DAYS) -> str:
    """An execution's input: the record, with when its audit row expires, `audit_retention_days`
    after the item was decided (0: kept), and when its labelled example expires,
    `label_retention_days` after (always set: the workflow's StoreLabelledExample writes it).
    Counted from `decided_at`, not from now, so the same record always makes the same input (Step
    Functions answers a repeated start as one)."""
    if label_retention_days < 1:
        raise ValueError(f"label_retention_days {label_retention_days!r}: must be 1 or more")
    decided = datetime.fromisoformat(record.decided_at)
    update: dict[str, int] = {"label_expires_at": expiry(label_retention_days, decided)}
    if audit_retention_days:
        update["audit_expires_at"] = expiry(audit_retention_days, decided)
    return record.model_copy(update=update).model_dump_json()


class ExecutionNotRunning(LookupError):
    """The named execution does not exist or no longer waits for anything."""


class WorkflowStarter(AwsAdapter):
    service = "stepfunctions"

    def __init__(self, state_machine_arn: str, client: Any = None, *, audit_retention_days: int = 0,
                 label_retention_days: int = LABEL_RETENTION_DAYS):
        super().__init__(client)
        self.state_machine_arn = state_machine_arn
        self.audit_retention_days, self.label_retention_days = audit_retention_days, label_retention_days

    def _input(self, record: DecisionRecord) -> str:
        return execution_input(record, self.audit_retention_days, self.label_retention_days)

    def execution_arn(self, name: str) -> str:
        return f"{self.state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"

    @tracer.capture_method
    def start(self, record: DecisionRecord) -> tuple[str, bool]:
        """Start the execution named after the item key; (name, False) when the item is already
        routed or being routed (an execution of that name is running or succeeded). An earlier
        execution that FAILED, TIMED_OUT or was ABORTED did not route the item (its record is in
        the workflow DLQ): the item is started again under the next attempt's name, never
        reported as routed. Any other failure propagates, so the item is retried."""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            name = execution_name(record.item_kind, record.item_id, record.item_key, attempt)
            try:
                self.client.start_execution(stateMachineArn=self.state_machine_arn, name=name,
                                            input=self._input(record))
                return name, True
            except self.client.exceptions.ExecutionAlreadyExists:
                status = self.client.describe_execution(executionArn=self.execution_arn(name))["status"]
                if status not in ENDED_UNROUTED:
                    return name, False
        raise RuntimeError(f"{record.item_kind} {record.item_id!r}: {MAX_ATTEMPTS} executions of this item "
                           "ended without routing it; see the workflow DLQ")

    @tracer.capture_method
    def start_named(self, name: str, record: DecisionRecord) -> bool:
        """Start one execution of exactly this name; False when it already exists (whatever its status)."""
        try:
            self.client.start_execution(stateMachineArn=self.state_machine_arn, name=name, input=self._input(record))
        except self.client.exceptions.ExecutionAlreadyExists:
            return False
        return True

    def describe(self, name: str) -> tuple[str, dict[str, Any]]:
        """(status, input) of any execution of the workflow; the input is a decision record, or a
        corrected one (records.CorrectedRecord)."""
        try:
            described = self.client.describe_execution(executionArn=self.execution_arn(name))
        except self.client.exceptions.ExecutionDoesNotExist:
            raise ExecutionNotRunning(f"no routing execution named {name!r}") from None
        return described["status"], json.loads(described["input"])

    def ended(self, name: str) -> tuple[str, Any, Any]:
        """(status, input, output) of the named execution, input and output as JSON values (the
        output None until it ends well); ExecutionNotRunning when there is none."""
        try:
            described = self.client.describe_execution(executionArn=self.execution_arn(name))
        except self.client.exceptions.ExecutionDoesNotExist:
            raise ExecutionNotRunning(f"no routing execution named {name!r}") from None
        output = described.get("output")
        return described["status"], json.loads(described["input"]), json.loads(output) if output else None

    def status(self, name: str) -> str | None:
        """The named execution's status; None when there is none."""
        try:
            return self.client.describe_execution(executionArn=self.execution_arn(name))["status"]
        except self.client.exceptions.ExecutionDoesNotExist:
            return None
