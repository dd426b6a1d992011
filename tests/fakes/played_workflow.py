"""The routing workflow (statemachine/routing.asl.json) played in Python over the fakes of its
ports, for the fake review world (tests/fakes/console_worlds.py). Each row, message and event it
writes is written field for field as the state that writes it in AWS; test_contract_workflow.py
holds them equal to what moto's execution of the real definition writes for the same records
(review, page and correction), so this is no second opinion on the workflow, only a faster one.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any, Callable

from decision_router.adapters.workflow import ExecutionNotRunning, execution_input
from decision_router.domain.policies import load_policy
from decision_router.domain.records import AuditRow, DecisionRecord
from decision_router.review.completion import PendingReview
from decision_router.review.pending import pending_row
from tests.fakes.console import (
    Clock,
    FakeAuditTrail,
    FakeBus,
    FakeLabelledExamples,
    FakePendingReviews,
    FakeReviewTasks,
    entered_time,
)
from tests.fakes.intake import Execution, FakeQueue, RecordingWorkflow

#: The detail types the workflow puts on the decision bus (PutItemEscalated*, PutItemRouted).
ESCALATED, ROUTED = "Item Escalated", "Item Routed"
#: StoreLabelledExample's label_shard: the policy and one of this many shards, at random.
LABEL_SHARDS = 8


class NotPlayed(AssertionError):
    """A step of the routing workflow the fake world does not play: run the test on the stack."""


def _compact(value: Any) -> str:
    """JSON text as States.JsonToString writes it."""
    return json.dumps(value, separators=(",", ":"))


class PlayedWorkflow(RecordingWorkflow):
    """The routing workflow played over the fakes: started as the intakes start it (`start`,
    RecordingWorkflow's rules for names used before) and as the console starts a correction
    (`start_named`); read as the console reads it (`describe`, ConsoleWorkflow's answers). `play`
    takes each running execution as far as the workflow would by now:

    - an automatic route: delivered to its destination, paged (`Item Escalated`) where it
      escalates, audited `auto_routed`, announced (`Item Routed`), SUCCEEDED;
    - a review: paged first where the record escalates already (target null), then its row put in
      the pending-review index (as the index writer puts it) under a task token the review tasks
      issue; once the token is answered, the row is removed and the answer checked (this
      execution, a reviewer, one of the record's own choices), then delivered, paged where the
      answer escalates and the record did not, its labelled example stored, audited `reviewed`,
      announced, SUCCEEDED;
    - a correction: its answer checked and carried out as a review's.

    What it does not play raises NotPlayed: a review closed or timed out, an answer the workflow
    would refuse (dead-lettered), an unknown route, a put or send that fails."""

    def __init__(self, state_machine_arn: str, *, pending_reviews: FakePendingReviews, review_timeout_seconds: int,
                 tasks: FakeReviewTasks, audit: FakeAuditTrail, examples: FakeLabelledExamples, bus: FakeBus,
                 event_source: str, queue_at: Callable[[str], FakeQueue], clock: Clock = time.time,
                 audit_retention_days: int = 0) -> None:
        super().__init__(audit_retention_days=audit_retention_days)
        self.state_machine_arn, self.review_timeout_seconds = state_machine_arn, review_timeout_seconds
        self.pending_reviews, self.tasks, self.audit, self.examples = pending_reviews, tasks, audit, examples
        self.bus, self.event_source, self.queue_at, self.clock = bus, event_source, queue_at, clock
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
        token = self.tokens.get(execution.name)
        if token is None:
            if given["escalate"]:  # PutItemEscalatedBeforeReview: the destination awaits the reviewer
                self._escalated(execution.name, given, target=None)
            token = self.tokens[execution.name] = self.tasks.issue()  # RequestReview: the index writer puts the row
            self.request_review(execution.record, execution.name, token)
        if token in self.tasks.answered:
            self.pending_reviews.remove(execution.name)  # ForgetAnsweredReview
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
        # CheckEscalation: a review that paged before it was requested does not page again.
        escalates = chosen["escalate"] and not (given["route"] == "review" and given["escalate"])
        outcome = {"status": "reviewed", "target": chosen["destination"]["target"], "escalated": chosen["escalate"],
                   "reviewer": answer["reviewer"], "answers": chosen["answers"], "review": answer}
        self._carry_out(execution, given, chosen["destination"], escalates, outcome, answer=answer,
                        answers=chosen["answers"])

    def _carry_out(self, execution: Execution, given: dict[str, Any], destination: dict[str, Any], escalates: bool,
                   outcome: dict[str, Any], *, answer: dict[str, Any] | None = None,
                   answers: dict[str, str] | None = None) -> None:
        """DeliverToDestination, PutItemEscalated (where it escalates), StoreLabelledExample (an
        answered item), WriteAuditRecord, PutItemRouted: SUCCEEDED."""
        name = execution.name
        self.queue_at(destination["queue_url"]).send(json.dumps({
            "item_kind": given["item_kind"], "item_id": given["item_id"], "item": given["item"],
            "target": destination["target"], "route": given["route"], "route_reason": given["route_reason"],
            "policy": given["policy"], "decisions": given["decisions"], "execution_name": name}))
        if escalates:
            self._escalated(name, given, target=destination["target"])
        if answer is not None and answers is not None:
            self.examples.put(self._labelled_example(name, given, answer, answers))
        self.audit.write(AuditRow(
            item_id=given["item_id"], execution_name=name, item_kind=given["item_kind"], outcome=outcome["status"],
            outcome_detail=_compact(outcome), route=given["route"], route_reason=given["route_reason"],
            policy_name=given["policy"]["name"], policy_version=given["policy"]["version"],
            decisions=_compact(given["decisions"]), item=_compact(given["item"]), decided_at=given["decided_at"],
            audited_at=entered_time(self.clock()), execution_arn=self.execution_arn(name),
            linked_incident=_compact(given.get("linked"))))  # a record without `linked`: audited as not linked
        if isinstance(given.get("audit_expires_at"), int):  # the workflow's SetExpiry
            self.audit.expires[(given["item_id"], name)] = given["audit_expires_at"]
        if "announce" in given:  # CheckAnnouncement: a record from before announcements is not announced
            self._routed(name, given, outcome)
        execution.status = "SUCCEEDED"

    def _labelled_example(self, name: str, given: dict[str, Any], answer: dict[str, Any],
                          answers: dict[str, str]) -> dict[str, str]:
        """StoreLabelledExample's string columns (its TTL, `expires_at`, is a number: no column here)."""
        return {
            "policy_name": given["policy"]["name"], "item_key": given["item_key"], "item_id": given["item_id"],
            "policy_version": given["policy"]["version"], "item_kind": given["item_kind"],
            "item": _compact(given["item"]), "answers": _compact(answers), "reviewer": answer["reviewer"],
            "reviewer_id": answer["reviewer_id"], "identity_signature": answer["identity_signature"],
            "model_decisions": _compact(given["decisions"]), "route_reason": given["route_reason"],
            "execution_name": name, "labelled_at": entered_time(self.clock()),
            "label_shard": f"{given['policy']['name']}#{random.randrange(LABEL_SHARDS)}",
            "signals": _compact(given["signals"])}

    def _escalated(self, name: str, given: dict[str, Any], *, target: str | None) -> None:
        """PutItemEscalated (target: the destination's) or PutItemEscalatedBeforeReview (null)."""
        self.bus.put(self.event_source, ESCALATED, {
            "item_kind": given["item_kind"], "item_id": given["item_id"], "item": given["item"], "target": target,
            "route": given["route"], "policy": given["policy"], "decisions": given["decisions"], "execution_name": name})

    def _routed(self, name: str, given: dict[str, Any], outcome: dict[str, Any]) -> None:
        """PutItemRouted: the audited outcome; an automatic route's answers are the decided ones
        (UseDecidedAnswers)."""
        announce = given["announce"]
        answers = announce["answers"] if outcome["status"] == "auto_routed" else outcome["answers"]
        self.bus.put(self.event_source, ROUTED, {
            "item_kind": given["item_kind"], "item_id": given["item_id"], "item_key": given["item_key"],
            "reference": announce["reference"], "outcome": outcome["status"], "target": outcome["target"],
            "escalated": outcome["escalated"], "decided_by": given["route"], "reviewer": outcome["reviewer"],
            "answers": answers, "suggested": announce["answers"], "confidence": announce["confidence"],
            "readout": announce["readout"], "policy": given["policy"], "execution_name": name})
