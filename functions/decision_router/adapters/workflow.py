"""The routing workflow (Step Functions): starting an execution for one decision record, and
reading a pending execution's record back (the review function trusts only that copy)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Tracer

from ..domain.records import DecisionRecord, execution_name
from . import AwsAdapter, expiry

#: Execution statuses that mean the item was not routed by that execution.
ENDED_UNROUTED = {"FAILED", "TIMED_OUT", "ABORTED"}
#: Executions of one item key before giving up (the suffixes -r2 … must fit the name).
MAX_ATTEMPTS = 99

tracer = Tracer()


def execution_input(record: DecisionRecord, audit_retention_days: int) -> str:
    """An execution's input: the record, with when its audit row expires, `audit_retention_days`
    after the item was decided (0: kept). Counted from `decided_at`, not from now, so the same
    record always makes the same input (Step Functions answers a repeated start as one)."""
    if audit_retention_days:
        decided = datetime.fromisoformat(record.decided_at)
        record = record.model_copy(update={"audit_expires_at": expiry(audit_retention_days, decided)})
    return record.model_dump_json()


class ExecutionNotRunning(LookupError):
    """The named execution does not exist or no longer waits for anything."""


#: A review's task token is read from the history's newest events (a page of this many), never
#: more than this many in all.
REVIEW_HISTORY_PAGE = 20
REVIEW_HISTORY_EVENTS = 200


def _review_token(parameters: Any, execution_name: str) -> str | None:
    """The task token a RequestReview's parameters carry in their message, when the message names
    this execution (Step Functions records the parameters as sent: the message body is JSON, as
    an object or, written as a string, as text)."""
    try:
        sent = json.loads(parameters) if isinstance(parameters, str) else None
        body = sent.get("MessageBody") if isinstance(sent, dict) else None
        if isinstance(body, str):
            body = json.loads(body)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("execution_name") != execution_name:
        return None
    token = body.get("task_token")
    return token if isinstance(token, str) and token else None


class WorkflowStarter(AwsAdapter):
    service = "stepfunctions"

    def __init__(self, state_machine_arn: str, client: Any = None, *, audit_retention_days: int = 0):
        super().__init__(client)
        self.state_machine_arn = state_machine_arn
        self.audit_retention_days = audit_retention_days

    def _input(self, record: DecisionRecord) -> str:
        return execution_input(record, self.audit_retention_days)

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

    def review_task_token(self, name: str) -> str | None:
        """The task token of the latest review request the execution sent (RequestReview: SQS
        sendMessage.waitForTaskToken, whose message names the execution and carries the token), read
        from its history, newest first; None when it sent none. ExecutionNotRunning: no such execution.
        A waiting review's request is among the history's last few events: one page, seldom two."""
        arn = self.execution_arn(name)
        latest: tuple[int, str | None] | None = None
        try:
            pages = self.client.get_paginator("get_execution_history").paginate(
                executionArn=arn, reverseOrder=True, includeExecutionData=True,
                PaginationConfig={"PageSize": REVIEW_HISTORY_PAGE, "MaxItems": REVIEW_HISTORY_EVENTS})
            for page in pages:
                for event in page["events"]:
                    if event.get("type") != "TaskScheduled":
                        continue
                    details = event.get("taskScheduledEventDetails") or {}
                    if (details.get("resourceType"), details.get("resource")) != ("sqs", "sendMessage.waitForTaskToken"):
                        continue
                    if latest is None or event["id"] > latest[0]:
                        latest = (event["id"], _review_token(details.get("parameters"), name))
                if latest is not None:
                    break  # newest first: nothing older can be the waiting request
        except self.client.exceptions.ExecutionDoesNotExist:
            raise ExecutionNotRunning(f"no routing execution named {name!r}") from None
        return latest[1] if latest else None

    def running_record(self, name: str) -> DecisionRecord:
        """The decision record a running execution was started with (its input, written by the intake)."""
        try:
            described = self.client.describe_execution(executionArn=self.execution_arn(name))
        except self.client.exceptions.ExecutionDoesNotExist:
            raise ExecutionNotRunning(f"no routing execution named {name!r}") from None
        if described["status"] != "RUNNING":
            raise ExecutionNotRunning(f"execution {name!r} is {described['status']}: it waits for no review")
        return DecisionRecord.model_validate_json(described["input"])
