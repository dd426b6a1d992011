"""Where a review-side flow test runs (the review console, the review function): the template's
names over the in-memory fakes of tests/fakes/console.py (the fast tier), or the template's
resources in moto with the real routing workflow executing (the smoke tests, marked `stack`).
Both are intake worlds too (tests/fakes/worlds.py), so an intake can put an item in review, and
both answer the same questions afterwards (an execution's status, what reached a queue, the audit
row, the labelled example), so a test reads alike on either.

    world = ConsoleWorld()                       # nothing created; stray AWS calls hit an empty moto
    (name,) = world.pending(record)              # started, and its review requested
    invoke = world.console_function()            # the console function over this world's parts
    ...
    world.finished(name)                         # "SUCCEEDED", once the workflow went on
    world.delivered("BillingQueue")              # the messages that reached the team's queue

In the fake world nothing runs by itself: `PlayedWorkflow` takes the routing workflow's steps
whenever the world is asked a question, as far as the workflow would have gone by then.
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
from decision_router.adapters.workflow import ExecutionNotRunning, WorkflowStarter, execution_input
from decision_router.config import Settings
from decision_router.domain.policies import load_policy
from decision_router.domain.precision import CheckCounts
from decision_router.domain.records import AuditRow, DecisionRecord
from decision_router.review.completion import PendingReview
from decision_router.review.pending import pending_row
from local.cloudformation import Stack
from local.lambdas import LocalFunction, serve_workflow_invokes
from tests.fakes.console import (
    Clock,
    FakeAuditTrail,
    FakeBus,
    FakeLabelledExamples,
    FakePendingReviews,
    FakePrecisionTally,
    FakeResolvedItems,
    FakeReviewTasks,
    FakeSlaEscalations,
    FakeUsedProofs,
    entered_time,
)
from tests.fakes.intake import Execution, FakeQueue, RecordingWorkflow
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


def delivered(url: str) -> list[dict[str, Any]]:
    """The queue's messages (their JSON bodies), taken off it."""
    sqs = boto3.client("sqs")
    found = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        for message in batch:
            found.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return found


# ------------------------------------------------------------------------------ the fake routing workflow
class NotPlayed(AssertionError):
    """A step of the routing workflow the fake world does not play: run the test on the stack."""


def _compact(value: Any) -> str:
    """JSON text as States.JsonToString writes it."""
    return json.dumps(value, separators=(",", ":"))


class PlayedWorkflow(RecordingWorkflow):
    """The routing workflow (statemachine/routing.asl.json) played over the fakes: started as the
    intakes start it (`start`, RecordingWorkflow's rules for names used before) and as the console
    starts a correction (`start_named`); read as the console reads it (`describe`, ConsoleWorkflow's
    answers). `play` takes each running execution as far as
    the workflow would by now:

    - an automatic route: delivered to its destination, audited `auto_routed`, SUCCEEDED;
    - a review: its row put in the pending-review index (as the index writer puts it) under a task
      token the review tasks issue; once the token is answered, the row is removed and the answer
      checked (this execution, a reviewer, one of the record's own choices), then delivered, its
      labelled example stored, audited `reviewed`, SUCCEEDED;
    - a correction: its answer checked and carried out as a review's.

    Each row and message is written field for field as the state that writes it in AWS. What it
    does not play raises NotPlayed: an escalation (no bus here), a review closed or timed out, an
    answer the workflow would refuse (dead-lettered), an unknown route. The Item Routed
    announcement is not put (no bus: nothing here can read it). The smoke tests, run on both
    worlds, hold what it plays to the real workflow in moto."""

    def __init__(self, state_machine_arn: str, *, pending_reviews: FakePendingReviews, review_timeout_seconds: int,
                 tasks: FakeReviewTasks, audit: FakeAuditTrail, examples: FakeLabelledExamples,
                 queue_at: Callable[[str], FakeQueue], clock: Clock = time.time,
                 audit_retention_days: int = 0) -> None:
        super().__init__(audit_retention_days=audit_retention_days)
        self.state_machine_arn, self.review_timeout_seconds = state_machine_arn, review_timeout_seconds
        self.pending_reviews, self.tasks, self.audit, self.examples = pending_reviews, tasks, audit, examples
        self.queue_at, self.clock = queue_at, clock
        self.tokens: dict[str, str] = {}  # execution name -> the task token its review waits on

    # -------------------------------------------------------------------- the review side's port (Executions)
    def start_named(self, name: str, record: DecisionRecord) -> bool:
        """Start one execution of exactly this name; False when one exists (whatever its status)."""
        if name in self.executions:
            return False
        given = execution_input(record, self.audit_retention_days)
        self.executions[name] = Execution(name, type(record).model_validate_json(given), given)
        return True

    def describe(self, name: str) -> tuple[str, dict[str, Any]]:
        if name not in self.executions:
            raise ExecutionNotRunning(f"no routing execution named {name!r}")
        execution = self.executions[name]
        return execution.status, json.loads(execution.input)

    def execution_arn(self, name: str) -> str:
        return f"{self.state_machine_arn.replace(':stateMachine:', ':execution:')}:{name}"

    # -------------------------------------------------------------------- the workflow's steps
    def play(self) -> None:
        """Each running execution taken as far as the workflow would take it by now."""
        for execution in list(self.executions.values()):
            if execution.status == "RUNNING":
                self._step(execution, json.loads(execution.input))

    def _step(self, execution: Execution, given: dict[str, Any]) -> None:
        route = given.get("route")
        if route == "auto":
            self._carry_out(execution, given, given["destination"], given["escalate"],
                            {"status": "auto_routed", "target": given["destination"]["target"],
                             "escalated": given["escalate"], "reviewer": None})
        elif route == "correction":
            self._answered(execution, given, given["correction"])
        elif route == "review":
            self._review(execution, given)
        else:
            raise NotPlayed(f"{execution.name}: route {route!r} is dead-lettered by the workflow")

    def _review(self, execution: Execution, given: dict[str, Any]) -> None:
        if given["escalate"]:
            raise NotPlayed(f"{execution.name}: an escalation before the review (PutItemEscalatedBeforeReview)")
        token = self.tokens.get(execution.name)
        if token is None:  # RequestReview: the index writer puts the review's row
            token = self.tokens[execution.name] = self.tasks.issue()
            self.request_review(execution.record, execution.name, token)
        if token in self.tasks.answered:
            self.pending_reviews.remove(execution.name)  # ForgetPendingReview
            self._answered(execution, given, json.loads(self.tasks.answered[token].model_dump_json()))
        elif token in self.tasks.closed or token in self.tasks.timed_out:
            self.pending_reviews.remove(execution.name)
            raise NotPlayed(f"{execution.name}: a review closed at its source or timed out")

    def request_review(self, record: DecisionRecord, execution_name: str, task_token: str) -> None:
        """The row the index writer (functions/review_index_writer) puts for RequestReview's invoke."""
        review = PendingReview(task_token=task_token, execution_name=execution_name,
                               requested_at=entered_time(self.clock()), record=record)
        self.pending_reviews.put(pending_row(review, load_policy(record.policy.name),
                                             review_timeout_seconds=self.review_timeout_seconds))

    def _answered(self, execution: Execution, given: dict[str, Any], answer: dict[str, Any]) -> None:
        """CheckReviewAnswer* and LookUpReviewChoice, then the route the chosen answer names."""
        accepted = (answer.get("execution_name") == execution.name and isinstance(answer.get("reviewer"), str)
                    and answer["reviewer"] != "" and answer.get("choice") in given["review"]["choices"]
                    and isinstance(answer.get("reviewer_id"), str) and isinstance(answer.get("identity_signature"), str))
        if not accepted:
            raise NotPlayed(f"{execution.name}: the workflow refuses this answer (RejectReviewAnswer): {answer}")
        chosen = json.loads(answer["choice"])
        escalates = chosen["escalate"] and not (given["route"] == "review" and given["escalate"])
        outcome = {"status": "reviewed", "target": chosen["destination"]["target"], "escalated": chosen["escalate"],
                   "reviewer": answer["reviewer"], "answers": chosen["answers"], "review": answer}
        self._carry_out(execution, given, chosen["destination"], escalates, outcome, answer=answer,
                        answers=chosen["answers"])

    def _carry_out(self, execution: Execution, given: dict[str, Any], destination: dict[str, Any], escalates: bool,
                   outcome: dict[str, Any], *, answer: dict[str, Any] | None = None,
                   answers: dict[str, str] | None = None) -> None:
        """DeliverToDestination, StoreLabelledExample (an answered item), WriteAuditRecord: SUCCEEDED."""
        if escalates:
            raise NotPlayed(f"{execution.name}: an escalation (PutItemEscalated)")
        name = execution.name
        self.queue_at(destination["queue_url"]).send(json.dumps({
            "item_kind": given["item_kind"], "item_id": given["item_id"], "item": given["item"],
            "target": destination["target"], "route": given["route"], "route_reason": given["route_reason"],
            "policy": given["policy"], "decisions": given["decisions"], "execution_name": name}))
        if answer is not None:
            self.examples.put({
                "policy_name": given["policy"]["name"], "item_key": given["item_key"], "item_id": given["item_id"],
                "policy_version": given["policy"]["version"], "item_kind": given["item_kind"],
                "item": _compact(given["item"]), "answers": _compact(answers), "reviewer": answer["reviewer"],
                "reviewer_id": answer["reviewer_id"], "identity_signature": answer["identity_signature"],
                "model_decisions": _compact(given["decisions"]), "route_reason": given["route_reason"],
                "execution_name": name, "labelled_at": entered_time(self.clock())})
        self.audit.write(AuditRow(
            item_id=given["item_id"], execution_name=name, item_kind=given["item_kind"], outcome=outcome["status"],
            outcome_detail=_compact(outcome), route=given["route"], route_reason=given["route_reason"],
            policy_name=given["policy"]["name"], policy_version=given["policy"]["version"],
            decisions=_compact(given["decisions"]), item=_compact(given["item"]), decided_at=given["decided_at"],
            audited_at=entered_time(self.clock()), execution_arn=self.execution_arn(name),
            linked_incident=_compact(given.get("linked"))))  # a record without `linked`: audited as not linked
        if isinstance(given.get("audit_expires_at"), int):  # the workflow's SetExpiry
            self.audit.expires[(given["item_id"], name)] = given["audit_expires_at"]
        execution.status = "SUCCEEDED"


class _Questions:
    """What both worlds answer alike, from what each answers its own way (`start`, `status`,
    `depth`, `wait_for`)."""

    def pending(self, *records: DecisionRecord) -> list[str]:
        """Each record's execution started, once the workflow requested every review (its row is
        in the pending-review index)."""
        names = [self.start(record) for record in records]
        self.wait_for(lambda: {n for n in names} <= {r["execution_name"] for r in self.review_requests()},
                      "the review requests")
        return names

    def review_requests(self) -> list[dict[str, Any]]:
        """The reviews waiting, as the index writer put them (task_token, execution_name,
        requested_at, record as JSON), oldest first."""
        raise NotImplementedError

    def pending_message(self) -> dict[str, Any]:
        """The one review waiting (its row, as `review_requests` gives it)."""
        (request,) = self.review_requests()
        return request

    def finished(self, name: str) -> str:
        """The execution's status once it ended."""
        return self.wait_for(lambda: self.status(name) != "RUNNING" and self.status(name), f"execution {name}")


class ConsoleWorld(_Questions, FakeWorld):
    """The template's names (nothing is created) over the fakes of the review side, beside the
    intake's: one review queue, review tasks, audit table, labelled examples and resolved items,
    the decision bus and the review SLA's escalation marks, and the routing workflow played over
    them (`PlayedWorkflow`, in place of the intake world's RecordingWorkflow)."""

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
                                       tasks=self.tasks, audit=self.audit,
                                       examples=self.examples, queue_at=self._queue_at,
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

    def precision_counts(self, policy: str, question: str, option: str | None = None) -> CheckCounts:
        """The live precision's tally of a question (or one of its options)."""
        return self.precision.counts(policy, question, option)


class MotoConsoleWorld(_Questions, MotoWorld):
    """The template's resources created in moto (inside mock_aws with Step Functions executing),
    the functions wired from their environments as in the account: the routing workflow runs in
    moto's threads, so each question that waits polls."""

    def __init__(self) -> None:
        super().__init__()
        self.audit = AuditTrail(self.ref("AuditTable"))
        self.signing_key = SigningKey.from_secret(self.ref("SigningKeySecret"))
        self.sts = StsStandIn()  # STS as the review function's proofs meet it (moto's checks no signature)
        # The workflow's RequestReview invokes the index writer: here, in this process.
        serve_workflow_invokes(LocalFunction(self.template, "ReviewIndexWriterFunction"))

    def console_function(self) -> Callable[[dict], dict]:
        """The console function, cold-started with the template's environment: event -> response."""
        return LocalFunction(self.template, "ReviewConsoleFunction").invoke

    def review_function(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The review function cold-started on its environment (also os.environ: ops tools read it)."""
        from review import app

        for name, value in self.environment("ReviewCompletionFunction").items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(app, "WIRING", app.Wiring())
        self.sts.attach(app.WIRING.caller_identity.client)  # the client it made, answered with a signature check

    # -------------------------------------------------------------------- the workflow
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

    def precision_counts(self, policy: str, question: str, option: str | None = None) -> CheckCounts:
        return PrecisionTally(self.ref("HeadHistoryTable")).counts(policy, question, option)


@contextlib.contextmanager
def console_world(kind: str) -> Iterator[ConsoleWorld]:
    """The world of a test's `world` fixture: "moto" (the stack), else the fakes, inside mock_aws
    all the same, so a call no fake answers fails at once against an empty moto."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield MotoConsoleWorld() if kind == "moto" else ConsoleWorld()
