"""Starts the routing workflow (Step Functions) for one decision record."""

from __future__ import annotations

from typing import Any

from ..records import DecisionRecord, execution_name
from . import AwsAdapter


class WorkflowStarter(AwsAdapter):
    service = "stepfunctions"

    def __init__(self, state_machine_arn: str, client: Any = None):
        super().__init__(client)
        self.state_machine_arn = state_machine_arn

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
