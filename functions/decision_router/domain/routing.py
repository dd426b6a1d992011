"""Routing one item: rules → (endpoint for the remaining questions) → thresholds → workflow.

What never gets lost, and how:
- Endpoint failures (after the adapter's retries) do not fail the item: every question the model
  should have answered becomes an `endpoint_error` decision and the item goes to human review
  with the failure as the reason. Work continues even while the endpoint is down.
- Except an endpoint waking from zero instances (`no_capacity`) for a router that waits for
  capacity (tickets): WaitingForCapacity propagates, no decision is kept, and the item is
  decided again when it comes back (SQS redelivers the ticket).
- Failing to start the workflow does fail the item (the exception propagates): SQS redelivers the
  ticket and moves it to the DLQ after maxReceiveCount; EventBridge's async invoke retries the
  incident and then hands it to the function's on-failure destination/DLQ.
- Starting twice is harmless: the execution name is deterministic per item key (source, id,
  payload); an existing execution that runs or succeeded means routed, one that failed, timed
  out or was aborted means not routed, so the item starts again under the next attempt's name.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from decision_contract import Decision, DecisionResult

from ..items import Item
from .failures import NO_CAPACITY, EndpointFailure, WaitingForCapacity
from .heads import Head
from .judging import build_record, error_entry, explain, model_entry, rule_entry
from .model_requests import build_decisions
from .policies import Policy, Question
from .ports import Endpoint, Workflow
from .records import DecisionEntry, DecisionRecord, ShadowAnswer
from .rules import apply_rules
from .shadow import shadow_answer


@dataclass(frozen=True)
class ShadowHead:
    """A candidate head serving in shadow for one question (domain/shadow.py), and its sha256."""

    head: Head
    sha256: str


@dataclass(frozen=True)
class RouteOutcome:
    """What routing one item came to: its decision record and the workflow execution that routes it."""

    record: DecisionRecord
    execution_name: str
    started: bool  # False: an execution for this item already existed
    endpoint_seconds: float | None  # round trip of the endpoint call, None when rules decided everything

    def summary(self) -> dict:
        """What the idempotency store keeps and the logs show."""
        r = self.record
        return {"item_id": r.item_id, "execution_name": self.execution_name, "started": self.started,
                "route": r.route, "route_reason": r.route_reason,
                "target": r.destination.target if r.destination else None, "escalate": r.escalate,
                "sources": {d.question: d.source for d in r.decisions}}


class Router:
    def __init__(self, policy: Policy, endpoint: Endpoint, workflow: Workflow, *,
                 destinations: Mapping[str, str], review_queue_url: str, review_timeout_seconds: int,
                 wait_for_capacity: bool = False):
        self.policy, self.endpoint, self.workflow = policy, endpoint, workflow
        self.wait_for_capacity = wait_for_capacity
        self.destinations = dict(destinations)
        self.review_queue_url, self.review_timeout_seconds = review_queue_url, review_timeout_seconds
        #: question → the candidate head answering beside the head in service (decides nothing).
        self.shadows: dict[str, ShadowHead] = {}

    def judge(self, item: Item, *, deadline: float | None = None) -> tuple[DecisionRecord, float | None]:
        """The item's decision record: rule answers first, the endpoint for the remaining
        questions (one request), each answer judged against its thresholds; and the endpoint's
        round trip in seconds (None when rules answered everything). A question with a shadow
        head gets its answer in the record's `shadow` too (the same request; it decides nothing)."""
        hits = apply_rules(self.policy, item)
        entries: list[DecisionEntry] = [rule_entry(self.policy.question(q), hit) for q, hit in hits.items()]
        pending = [q for q in self.policy.questions if q.id not in hits]
        seconds, state, results = None, None, None
        shadows: dict[str, ShadowAnswer] = {}
        if pending:
            started = time.perf_counter()
            try:
                decisions = [self._with_shadow_signals(d) for d in
                             build_decisions(self.policy, item, [q.id for q in pending])]
                results = self.endpoint.decide(decisions, deadline=deadline)
                state = decisions[0].state  # every question reads the same evidence
                answered = [model_entry(q, results[q.id], state) for q in pending]
                entries += answered
                shadows = self._shadow_answers(pending, answered, results, state)
            except EndpointFailure as failure:
                if failure.kind == NO_CAPACITY and self.wait_for_capacity:
                    raise WaitingForCapacity(failure) from failure
                entries = [e for e in entries if e.source == "rule"] + [error_entry(q, failure) for q in pending]
            seconds = time.perf_counter() - started
        entries = explain(self.policy, item, entries, state, results)
        record = build_record(self.policy, item, entries, destinations=self.destinations,
                              review_queue_url=self.review_queue_url,
                              review_timeout_seconds=self.review_timeout_seconds)
        if shadows:
            record = record.model_copy(update={"shadow": shadows})
        return record, seconds

    def _with_shadow_signals(self, decision: Decision) -> Decision:
        """The question's request, asking for the hidden state too when its shadow head reads it."""
        shadow = self.shadows.get(decision.id)
        if shadow is None or decision.return_hidden_state or not shadow.head.reads_hidden_state:
            return decision
        return decision.model_copy(update={"return_hidden_state": True})

    def _shadow_answers(self, pending: Sequence[Question], answered: Sequence[DecisionEntry],
                        results: Mapping[str, DecisionResult], state: object) -> dict[str, ShadowAnswer]:
        """Each shadow head's answer beside the deciding one; a shadow that fails is left out (it
        must never change what the item gets)."""
        out = {}
        for question, deciding in zip(pending, answered):
            shadow = self.shadows.get(question.id)
            if shadow is None:
                continue
            try:
                answer = shadow_answer(question, shadow.head, shadow.sha256, results[question.id], state, deciding)
            except Exception:  # noqa: BLE001 - the shadow decides nothing; the record says it did not answer
                answer = None
            if answer is not None:
                out[question.id] = answer
        return out

    def route(self, item: Item, *, deadline: float | None = None) -> RouteOutcome:
        record, seconds = self.judge(item, deadline=deadline)
        name, started = self.workflow.start(record)
        return RouteOutcome(record, name, started, seconds)
