"""Where a review-side flow test runs (the review console, the review function): the template's
names over the in-memory fakes of tests/fakes/console.py (the fast tier, `FakeConsoleWorld`), or
the template's resources in moto with the real routing workflow executing (the smoke tests, marked
`stack`, `MotoConsoleWorld`). Each extends the intake world of its own kind (tests/fakes/worlds.py),
so an intake can put an item in review, and both answer the `ReviewWorld` protocol
(tests/fakes/world.py): an execution's status, what reached a queue, the audit row, the labelled
example, so a test reads alike on either. The two share the functions here, never each other.

    world = FakeConsoleWorld()                   # nothing created; stray AWS calls hit an empty moto
    (name,) = world.pending(record)              # started, and its review requested
    invoke = world.console_function()            # the console function over this world's parts
    ...
    world.finished(name)                         # "SUCCEEDED", once the workflow went on
    world.delivered("BillingQueue")              # the messages that reached the team's queue

In the fake world nothing runs by itself: `PlayedWorkflow` (tests/fakes/played_workflow.py) takes
the routing workflow's steps whenever the world is asked a question, as far as the workflow would
have gone by then.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Callable, Iterator

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters.caller_identity import StsCallerIdentity
from decision_router.adapters.precision_tally import PrecisionTally
from decision_router.adapters.review import AuditTrail
from decision_router.adapters.signing_key import SigningKey
from decision_router.adapters.similar_items import ResolvedItems
from decision_router.adapters.workflow import WorkflowStarter
from decision_router.config import Settings
from decision_router.domain.precision import CheckCounts
from decision_router.domain.records import DecisionRecord
from local.cloudformation import Stack
from local.lambdas import LocalFunction, serve_workflow_invokes
from tests.fakes.console import (
    FakeAuditTrail,
    FakeBus,
    FakeLabelledExamples,
    FakePrecisionTally,
    FakeResolvedItems,
    FakeReviewTasks,
    FakeSlaEscalations,
    FakeUsedProofs,
)
from tests.fakes.played_workflow import PlayedWorkflow
from tests.fakes.world import ReviewWorld
from tests.fakes.worlds import FakeWorld, MotoWorld
from tests.functions.sts_stand_in import StsStandIn

#: How long the moto world waits for the workflow (moto runs it in its own threads).
WAIT_SECONDS = 30.0


# ------------------------------------------------------------------------------ a stack in moto
# Over any stack in moto (the moto world's, or a local run's behind a moto server: tests/e2e/).
def wait_for(predicate: Callable[[], Any], what: str, timeout: float = WAIT_SECONDS) -> Any:
    """The predicate's first true value, asked every 0.2 s (moto runs the workflow in its threads)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def start(stack: Stack, record: DecisionRecord) -> str:
    """The record's routing execution started, as the intakes start it (with their audit
    retention); its name."""
    days = int(stack.function_environment("TicketIntakeFunction")["AUDIT_RETENTION_DAYS"])
    name, started = WorkflowStarter(stack.ref("RoutingStateMachine"), audit_retention_days=days).start(record)
    assert started, name
    return name


def status(stack: Stack, name: str) -> str:
    arn = stack.ref("RoutingStateMachine").replace(":stateMachine:", ":execution:") + ":" + name
    return boto3.client("stepfunctions").describe_execution(executionArn=arn)["status"]


def depth(url: str) -> int:
    """The messages on the queue, hidden or not."""
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])
    return sum(int(v) for v in attributes["Attributes"].values())


def waiting_reviews(stack: Stack) -> int:
    """The rows of the stack's pending-review index: the reviews its workflow waits for."""
    pages = boto3.client("dynamodb").get_paginator("scan").paginate(
        TableName=stack.ref("PendingReviewsTable"), Select="COUNT", ConsistentRead=True)
    return sum(page["Count"] for page in pages)


def workflow_event_source(stack: Stack) -> str:
    """The `source` of the events the routing workflow puts (its definition's EventSource)."""
    return stack.resolve(stack.properties("RoutingStateMachine"))["DefinitionSubstitutions"]["EventSource"]


def delivered(url: str) -> list[dict[str, Any]]:
    """The queue's messages (their JSON bodies), taken off it."""
    sqs = boto3.client("sqs")
    found = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        for message in batch:
            found.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return found


# ------------------------------------------------------------------------------ what both worlds answer alike
def requested(world: ReviewWorld, *records: DecisionRecord) -> list[str]:
    """Each record's execution started, once the workflow requested every review (its row is in
    the pending-review index)."""
    names = [world.start(record) for record in records]
    world.wait_for(lambda: set(names) <= {r["execution_name"] for r in world.review_requests()}, "the review requests")
    return names


def ended(world: ReviewWorld, name: str) -> str:
    """The execution's status once it ended."""
    return world.wait_for(lambda: world.status(name) != "RUNNING" and world.status(name), f"execution {name}")


def only_request(world: ReviewWorld) -> dict[str, Any]:
    """The one review waiting (its row, as `review_requests` gives it)."""
    (request,) = world.review_requests()
    return request


class FakeConsoleWorld(FakeWorld):
    """The template's names (nothing is created) over the fakes of the review side, beside the
    intake's: one review queue, review tasks, audit table, labelled examples and resolved items,
    the decision bus and the review SLA's escalation marks, and the routing workflow played over
    them (`PlayedWorkflow`, in place of the intake world's RecordingWorkflow)."""

    workflow: PlayedWorkflow

    def __init__(self) -> None:
        super().__init__()
        self.tasks = FakeReviewTasks()
        self.audit = FakeAuditTrail(retention_days=self.audit_retention_days)
        self.examples = FakeLabelledExamples()
        self.resolved_items = FakeResolvedItems()
        self.precision = FakePrecisionTally()
        self.bus = FakeBus()
        self.escalations = FakeSlaEscalations(review_timeout_seconds=int(
            self.environment("ReviewConsoleFunction")["REVIEW_TIMEOUT_SECONDS"]))
        self.used_proofs = FakeUsedProofs()
        self.sts = StsStandIn()  # STS as the review function's proofs meet it (moto's checks no signature)
        # SigningKeySecret is not created in this world: the functions get its key as bytes.
        self.signing_key = SigningKey(b"decision-router-test-signing-key-0123456789")
        self.workflow = PlayedWorkflow(self.ref("RoutingStateMachine"), pending_reviews=self.pending_reviews,
                                       review_timeout_seconds=int(
                                           self.environment("ReviewConsoleFunction")["REVIEW_TIMEOUT_SECONDS"]),
                                       tasks=self.tasks, audit=self.audit, examples=self.examples, bus=self.bus,
                                       event_source=workflow_event_source(self.template), queue_at=self._queue_at,
                                       audit_retention_days=self.audit_retention_days)

    # -------------------------------------------------------------------- the functions, over this world's parts
    def console_function(self) -> Callable[[dict], dict]:
        """The console function, cold-started with the template's environment (in this process,
        under mock_aws), its wiring made of this world's fakes: event -> response."""
        from review_console.wiring import Wiring

        wiring = Wiring(Settings.from_env(self.environment("ReviewConsoleFunction")), pending_reviews=self.pending_reviews,
                        workflow=self.workflow, audit=self.audit, examples=self.examples, tasks=self.tasks,
                        resolved_items=self.resolved_items, precision_tally=self.precision,
                        signing_key=self.signing_key, bus=self.bus, escalations=self.escalations)
        return LocalFunction(self.template, "ReviewConsoleFunction", overrides={"review_console.app.WIRING": wiring}).invoke

    def review_function(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The review function (review.app) wired with this world's fakes; its STS client (at its
        region's endpoint, as the function makes it) answered by the signature-checking `sts`."""
        from review import app
        from review.wiring import Wiring

        identity = StsCallerIdentity()
        self.sts.attach(identity.client)
        monkeypatch.setattr(app, "WIRING", Wiring(
            Settings.from_env(self.environment("ReviewCompletionFunction")), pending_reviews=self.pending_reviews,
            tasks=self.tasks, used_proofs=self.used_proofs, resolved_items=self.resolved_items,
            precision_tally=self.precision, signing_key=self.signing_key, caller_identity=identity))

    # -------------------------------------------------------------------- the workflow
    pending, pending_message, finished = requested, only_request, ended

    def start(self, record: DecisionRecord) -> str:
        name, started = self.workflow.start(record)
        assert started, name
        return name

    def status(self, name: str) -> str | None:
        self.workflow.play()
        return self.workflow.status(name)

    def wait_for(self, predicate: Callable[[], Any], what: str) -> Any:
        """The predicate's value once the workflow played what it could (nothing runs later here)."""
        self.workflow.play()
        if value := predicate():
            return value
        raise AssertionError(f"waited in vain for {what}: the workflow played all it could")

    # -------------------------------------------------------------------- queues and tables
    def depth(self, logical_id: str) -> int:
        """The messages on the queue, hidden or not."""
        self.workflow.play()
        return len(self.queue(logical_id).waiting)

    def delivered(self, logical_id: str) -> list[dict[str, Any]]:
        """The queue's messages (their JSON bodies), taken off it."""
        self.workflow.play()
        queue = self.queue(logical_id)
        found = []
        for message in queue.messages(limit=1000):
            found.append(json.loads(message["Body"]))
            queue.delete(message)
        return found

    def review_requests(self) -> list[dict[str, Any]]:
        self.workflow.play()
        rows = sorted((row for _, row in self.pending_reviews.rows.values()), key=lambda row: row.requested_at)
        return [{"task_token": row.task_token, "execution_name": row.execution_name,
                 "requested_at": row.requested_at, "record": json.loads(row.record.model_dump_json())} for row in rows]

    def audit_columns(self, item_id: str, execution_name: str) -> dict[str, str]:
        """The audit row's columns (KeyError: no row)."""
        self.workflow.play()
        return dict(self.audit.rows[(item_id, execution_name)])

    def audit_expiry(self, item_id: str, execution_name: str) -> int | None:
        """The audit row's TTL attribute (epoch seconds; None: kept)."""
        self.workflow.play()
        return self.audit.expires.get((item_id, execution_name))

    def labelled_example(self, policy: str, item_id: str) -> dict[str, str]:
        """The labelled example of the one item of this id (KeyError: none)."""
        self.workflow.play()
        rows = [row for (name, _), row in self.examples.rows.items() if name == policy and row["item_id"] == item_id]
        if len(rows) != 1:
            raise KeyError(f"{len(rows)} labelled examples of {policy}/{item_id}")
        return dict(rows[0])

    def labelled_examples(self) -> list[dict[str, str]]:
        self.workflow.play()
        return list(self.examples.scan())

    def put_labelled_example(self, columns: dict[str, str]) -> None:
        self.examples.put(columns)

    def workflow_events(self) -> list[tuple[str, dict[str, Any]]]:
        """The events the routing workflow put on the decision bus (detail type, detail), in order,
        taken off it (what others put there stays)."""
        self.workflow.play()
        source = self.workflow.event_source
        found = [(detail_type, detail) for put_by, detail_type, detail in self.bus.events if put_by == source]
        self.bus.events[:] = [event for event in self.bus.events if event[0] != source]
        return found

    def precision_counts(self, policy: str, question: str, option: str | None = None) -> CheckCounts:
        """The live precision's tally of a question (or one of its options)."""
        return self.precision.counts(policy, question, option)


class MotoConsoleWorld(MotoWorld):
    """The template's resources created in moto (inside mock_aws with Step Functions executing),
    the functions wired from their environments as in the account: the routing workflow runs in
    moto's threads, so each question that waits polls."""

    def __init__(self) -> None:
        super().__init__()
        self.audit = AuditTrail(self.ref("AuditTable"))
        self.resolved_items = ResolvedItems(self.ref("ResolvedItemsTable"))  # what the functions keep there
        self.signing_key = SigningKey.from_secret(self.ref("SigningKeySecret"))
        self.sts = StsStandIn()  # STS as the review function's proofs meet it (moto's checks no signature)
        # The workflow's RequestReview invokes the index writer: here, in this process.
        serve_workflow_invokes(LocalFunction(self.template, "ReviewIndexWriterFunction"))
        # A queue that receives what the workflow puts on the decision bus, as a rule of the bus would.
        self._workflow_events = self.template.observe_bus(
            "DecisionBus", {"source": [workflow_event_source(self.template)]}, "workflow-events")

    def console_function(self) -> Callable[[dict], dict]:
        """The console function, cold-started with the template's environment: event -> response."""
        return LocalFunction(self.template, "ReviewConsoleFunction").invoke

    def review_function(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The review function cold-started on its environment (also os.environ: ops tools read it)."""
        from review import app

        for name, value in self.environment("ReviewCompletionFunction").items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(app, "WIRING", app.Wiring())
        identity = app.WIRING.caller_identity
        assert isinstance(identity, StsCallerIdentity), identity
        self.sts.attach(identity.client)  # the client it made, answered with a signature check

    # -------------------------------------------------------------------- the workflow
    pending, pending_message, finished = requested, only_request, ended

    def start(self, record: DecisionRecord) -> str:
        return start(self.template, record)

    def status(self, name: str) -> str | None:
        return status(self.template, name)

    def wait_for(self, predicate: Callable[[], Any], what: str) -> Any:
        return wait_for(predicate, what)

    # -------------------------------------------------------------------- queues and tables
    def depth(self, logical_id: str) -> int:
        return depth(self.ref(logical_id))

    def delivered(self, logical_id: str) -> list[dict[str, Any]]:
        return delivered(self.ref(logical_id))

    def review_requests(self) -> list[dict[str, Any]]:
        rows = boto3.client("dynamodb").scan(TableName=self.ref("PendingReviewsTable"), ConsistentRead=True)["Items"]
        found = [{"task_token": row["task_token"]["S"], "execution_name": row["execution_name"]["S"],
                  "requested_at": row["requested_at"]["S"], "record": json.loads(row["record"]["S"])} for row in rows]
        return sorted(found, key=lambda request: request["requested_at"])

    def _get(self, table: str, key: dict[str, str]) -> dict[str, str]:
        item = boto3.client("dynamodb").get_item(TableName=self.ref(table),
                                                 Key={k: {"S": v} for k, v in key.items()})["Item"]
        return {name: value["S"] for name, value in item.items() if "S" in value}  # the TTL number is no column

    def audit_columns(self, item_id: str, execution_name: str) -> dict[str, str]:
        return self._get("AuditTable", {"item_id": item_id, "execution_name": execution_name})

    def audit_expiry(self, item_id: str, execution_name: str) -> int | None:
        item = boto3.client("dynamodb").get_item(TableName=self.ref("AuditTable"), Key={
            "item_id": {"S": item_id}, "execution_name": {"S": execution_name}})["Item"]
        return int(item["expires_at"]["N"]) if "expires_at" in item else None

    def labelled_example(self, policy: str, item_id: str) -> dict[str, str]:
        """The labelled example of the one item of this id (the table is keyed by item key)."""
        (row,) = [row for row in self.labelled_examples() if row["policy_name"] == policy and row["item_id"] == item_id]
        return row

    def labelled_examples(self) -> list[dict[str, str]]:
        rows = boto3.client("dynamodb").scan(TableName=self.ref("LabelledExamplesTable"))["Items"]
        return [{k: v["S"] for k, v in row.items() if "S" in v} for row in rows]

    def put_labelled_example(self, columns: dict[str, str]) -> None:
        boto3.client("dynamodb").put_item(TableName=self.ref("LabelledExamplesTable"),
                                          Item={name: {"S": value} for name, value in columns.items()})

    def workflow_events(self) -> list[tuple[str, dict[str, Any]]]:
        """Delivered by EventBridge to a queue one by one: in the order received (one execution's
        puts, awaited in turn, arrive in the order put)."""
        return [(event["detail-type"], event["detail"]) for event in delivered(self._workflow_events)]

    def precision_counts(self, policy: str, question: str, option: str | None = None) -> CheckCounts:
        return PrecisionTally(self.ref("HeadHistoryTable")).counts(policy, question, option)


@contextlib.contextmanager
def console_world(kind: str) -> Iterator[ReviewWorld]:
    """The world of a test's `world` fixture: "moto" (the stack), else the fakes, inside mock_aws
    all the same, so a call no fake answers fails at once against an empty moto."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        world: ReviewWorld = MotoConsoleWorld() if kind == "moto" else FakeConsoleWorld()
        yield world
