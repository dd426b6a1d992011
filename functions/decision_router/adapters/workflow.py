"""The routing workflow (Step Functions): starting an execution for one decision record, and
reading a pending execution's record back (the review function trusts only that copy)."""

from __future__ import annotations

from typing import Any

from ..records import DecisionRecord, execution_name
from . import AwsAdapter


class ExecutionNotRunning(LookupError):
    """The named execution does not exist or no longer waits for anything."""


class WorkflowStarter(AwsAdapter):
    service = "stepfunctions"

    def __init__(self, state_machine_arn: str, client: Any = None):
        super().__init__(client)
        self.state_machine_arn = state_machine_arn

    def execution_arn(self, name: str) -> str:
        return f"{self.state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"

    def start(self, record: DecisionRecord) -> tuple[str, bool]:
        """Start the execution named after the item; (name, False) when one with other input exists,
        i.e. the item was routed before. (Same name and same input while it runs is accepted by
        Step Functions as the same execution.) Any other failure propagates, so the item is retried."""
        name = execution_name(record.item_kind, record.item_id)
        try:
            self.client.start_execution(stateMachineArn=self.state_machine_arn, name=name,
                                        input=record.model_dump_json())
        except self.client.exceptions.ExecutionAlreadyExists:
            return name, False
        return name, True

    def running_record(self, name: str) -> DecisionRecord:
        """The decision record a running execution was started with (its input, written by the intake)."""
        try:
            described = self.client.describe_execution(executionArn=self.execution_arn(name))
        except self.client.exceptions.ExecutionDoesNotExist:
            raise ExecutionNotRunning(f"no routing execution named {name!r}") from None
        if described["status"] != "RUNNING":
            raise ExecutionNotRunning(f"execution {name!r} is {described['status']}: it waits for no review")
        return DecisionRecord.model_validate_json(described["input"])
