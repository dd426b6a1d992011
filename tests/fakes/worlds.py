"""Where an intake flow test runs: the template's names over in-memory fakes of the ports (the
fast tier, `FakeWorld`), or the template's resources in moto (the smoke tests, marked `stack`,
`MotoWorld`). The two are siblings: each answers the `World` protocol (tests/fakes/world.py) its
own way, sharing only what this module's functions read from the template, so a test reads alike
on either.

    world = FakeWorld()                          # nothing created; stray AWS calls hit an empty moto
    wiring = world.wiring("TicketIntakeFunction", endpoint=stub)
    ...
    world.executions()                           # execution name -> DecisionRecord started
"""

from __future__ import annotations

import functools
from typing import Any

import boto3

from decision_router.adapters.signing_key import SigningKey
from decision_router.adapters.similar_items import ResolvedItems
from decision_router.config import Settings
from decision_router.domain.ports.routing import Endpoint
from decision_router.domain.records import AuditRow, DecisionRecord
from decision_router.intake.wiring import Wiring
from local.cloudformation import Stack
from tests.fakes.console import FakeAuditTrail, FakePendingReviews, FakeResolvedItems, FakeReviewTasks
from tests.fakes.intake import (
    FakeAlarmStates,
    FakeDirectRoutes,
    FakeOpenIncidents,
    FakeQueue,
    InMemoryIdempotency,
    RecordingWorkflow,
)
from tests.functions.sts_stand_in import TEST_REVIEWER_PRINCIPALS

ENDPOINT_NAME = "decision-endpoint"
#: What the fake world's functions are not given: no head store (the shipped heads decide, and no
#: shadow is counted), as a stack deployed without one.
NOT_GIVEN = ("HEAD_STORE_BUCKET", "HEAD_HISTORY_TABLE_NAME")
PARAMETERS = {"ExistingEndpointName": ENDPOINT_NAME, "ReviewerPrincipals": TEST_REVIEWER_PRINCIPALS}
DEAD_LETTER_QUEUE = "TicketDeadLetterQueue"


@functools.cache
def fake_template() -> Stack:
    """The template every fake world reads, loaded once: a fake world creates nothing in it, so
    nothing changes it (a test of the stack's resources uses MotoWorld, which loads its own)."""
    return Stack.load(parameters=PARAMETERS)


@functools.cache
def _fake_environment(function: str) -> tuple[tuple[str, str], ...]:
    return tuple((name, "" if name in NOT_GIVEN else value)
                 for name, value in fake_template().function_environment(function).items())


def audit_retention_days(environment: dict[str, str]) -> int:
    """How long the template keeps audit rows, as the intakes' adapters are told it."""
    return int(environment["AUDIT_RETENTION_DAYS"])


class FakeWorld:
    """The template's names (placeholders: nothing is created) over in-memory fakes of the ports."""

    def __init__(self) -> None:
        self.template = fake_template()
        self.audit_retention_days = audit_retention_days(self.environment("TicketIntakeFunction"))
        incidents = int(self.environment("IncidentIntakeFunction")["OPEN_INCIDENT_RETENTION_DAYS"])
        self.workflow: RecordingWorkflow = RecordingWorkflow(audit_retention_days=self.audit_retention_days)
        self.open_incidents = FakeOpenIncidents(retention_days=incidents)
        self.idempotency = InMemoryIdempotency()
        self.alarm_states = FakeAlarmStates()
        self.audit = FakeAuditTrail(retention_days=self.audit_retention_days)
        self.pending_reviews = FakePendingReviews()
        self.review_tasks = FakeReviewTasks()
        self.resolved_items: FakeResolvedItems | ResolvedItems = FakeResolvedItems()
        # The stack's head signing key (HeadSigningKeySecret): the precision checks' draw is keyed with it.
        self.head_signing_key = SigningKey(b"decision-router-test-head-signing-key-0123456789")
        self._queues: dict[str, FakeQueue] = {}
        self.direct = FakeDirectRoutes(self.audit, self._queue_at, retention_days=self.audit_retention_days)

    def ref(self, logical_id: str) -> str:
        return self.template.ref(logical_id)

    def environment(self, function: str) -> dict[str, str]:
        """The function's environment as the template gives it, less what this world has no fake of
        (a fresh dict each call: a test may change what it is given)."""
        return dict(_fake_environment(function))

    def queue(self, logical_id: str) -> FakeQueue:
        """The fake of one of the template's queues (one per queue, made on first use)."""
        return self._queue_at(self.ref(logical_id))

    def _queue_at(self, url: str) -> FakeQueue:
        return self._queues.setdefault(url, FakeQueue(url))

    def wiring(self, function: str, *, endpoint: Endpoint, env: dict[str, str] | None = None) -> Wiring:
        settings = Settings.from_env(env if env is not None else self.environment(function))
        return Wiring(settings, endpoint=endpoint, workflow=self.workflow, open_incidents=self.open_incidents,
                      dead_letters=self._queue_at(settings.dead_letter_queue_url),
                      ticket_queue=self._queue_at(settings.ticket_queue_url) if settings.ticket_queue_url else None,
                      alarm_states=self.alarm_states, idempotency_store=self.idempotency, audit=self.audit,
                      pending_reviews=self.pending_reviews, review_tasks=self.review_tasks, resolved_items=self.resolved_items,
                      head_signing_key=self.head_signing_key, direct_routes=self.direct)

    # ------------------------------------------------------------------ what became of the items
    def executions(self) -> dict[str, DecisionRecord]:
        """Execution name -> the decision record it was started with; an automatic route the intake
        delivered itself, under the name its execution would have (`delivered_directly` tells them apart)."""
        return {**self.workflow.records, **self.delivered_directly()}

    def delivered_directly(self) -> dict[str, DecisionRecord]:
        """Execution name -> the record of each automatic route the intake delivered itself."""
        return dict(self.direct.records)

    def dead_letters(self, logical_id: str = DEAD_LETTER_QUEUE) -> list[dict[str, Any]]:
        """The queue's messages (body and attributes, as SQS hands them over), taken off it."""
        queue = self.queue(logical_id)
        found = [{"Body": body, "MessageAttributes": {name: {"DataType": "String", "StringValue": value}
                                                      for name, value in attributes.items()}}
                 for body, attributes in queue.sent]
        queue.sent.clear()
        return found

    def idempotency_statuses(self) -> list[str]:
        return [item["status"] for item in self.idempotency.items.values()]


class MotoWorld:
    """The template's resources created in moto (inside mock_aws), wired as the functions wire
    them: only the endpoint is given."""

    def __init__(self, stack: Stack | None = None) -> None:
        """`stack`: one a test created in moto already (else the whole template is created here:
        its own, for the fake worlds' template is shared and never created)."""
        if stack is None:
            stack = Stack.load(parameters=PARAMETERS)
            stack.create()
        self.template = stack
        self.audit_retention_days = audit_retention_days(self.environment("TicketIntakeFunction"))

    def ref(self, logical_id: str) -> str:
        return self.template.ref(logical_id)

    def environment(self, function: str) -> dict[str, str]:
        return self.template.function_environment(function)

    def wiring(self, function: str, *, endpoint: Endpoint, env: dict[str, str] | None = None) -> Wiring:
        return Wiring(Settings.from_env(env if env is not None else self.environment(function)), endpoint=endpoint)

    # ------------------------------------------------------------------ what became of the items
    def executions(self) -> dict[str, DecisionRecord]:
        sfn = boto3.client("stepfunctions")
        found = {}
        for execution in sfn.list_executions(stateMachineArn=self.ref("RoutingStateMachine"))["executions"]:
            described = sfn.describe_execution(executionArn=execution["executionArn"])
            found[execution["name"]] = DecisionRecord.model_validate_json(described["input"])
        return {**found, **self.delivered_directly()}

    def delivered_directly(self) -> dict[str, DecisionRecord]:
        """Read back from the audit table: each row the intake wrote as it delivered a route itself."""
        table = self.environment("TicketIntakeFunction")["AUDIT_TABLE_NAME"]
        found = {}
        for raw in boto3.client("dynamodb").scan(TableName=table)["Items"]:
            row = AuditRow.model_validate({k: v["S"] for k, v in raw.items() if "S" in v})
            record = row.routed_record()
            if record is not None and "delivery_pending_until" not in raw:
                found[row.execution_name] = record
        return found

    def dead_letters(self, logical_id: str = DEAD_LETTER_QUEUE) -> list[dict[str, Any]]:
        sqs, url = boto3.client("sqs"), self.ref(logical_id)
        found = []
        while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get("Messages"):
            for message in batch:
                found.append(message)
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return found

    def idempotency_statuses(self) -> list[str]:
        table = self.environment("TicketIntakeFunction")["IDEMPOTENCY_TABLE_NAME"]
        return [row["status"]["S"] for row in boto3.client("dynamodb").scan(TableName=table)["Items"]]
