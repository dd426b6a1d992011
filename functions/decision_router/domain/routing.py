"""Judging one item: rules → the head over the words alone (questions whose `model` is
when_unsure or never) → (endpoint for the remaining questions) → thresholds → its decision
record, under the policy (and the shadow heads) the caller gives for that item. Starting the
workflow that routes the record is the intake's (decision_router.intake.pipeline).

What never gets lost, and how:
- Endpoint failures (after the adapter's retries) do not fail the item: every question the model
  should have answered becomes an `endpoint_error` decision and the item goes to human review
  with the failure as the reason. Work continues even while the endpoint is down.
- Except an endpoint waking from zero instances (`no_capacity`) for a router that waits for
  capacity (tickets): WaitingForCapacity propagates, no decision is kept, and the item is
  decided again when it comes back (SQS redelivers the ticket).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from decision_contract import DecisionResult

from ..items import Item
from .failures import NO_CAPACITY, EndpointFailure, WaitingForCapacity
from .heads import Head
from .judging import build_record, error_entry, explain, model_entry, rule_entry, words_entry
from .kept_signals import KeptSignals, keep_signals
from .model_requests import build_decisions
from .policies import Policy, Question
from .ports.routing import Endpoint
from .precision import DrawKey
from .records import DecisionEntry, DecisionRecord, ShadowAnswer
from .rules import apply_rules
from .shadow import shadow_answer


@dataclass(frozen=True)
class ShadowHead:
    """A candidate head serving in shadow for one question (domain/shadow.py), and its sha256."""

    head: Head
    sha256: str


def is_direct(record: DecisionRecord) -> bool:
    """Whether the intake delivers this record itself, without an execution of the routing
    workflow: routed without review and without a page (anything that waits for a person or pages
    runs the workflow)."""
    return record.route == "auto" and not record.escalate and record.destination is not None


class Router:
    """Judges items for one function: its endpoint, its destinations and review timeout are fixed;
    the policy and the shadow heads are told per item (the heads in service change without a
    deploy: decision_router.intake.live_heads)."""

    def __init__(self, endpoint: Endpoint, *, destinations: Mapping[str, str],
                 review_timeout_seconds: int, wait_for_capacity: bool = False, check_key: DrawKey | None = None):
        """`check_key`: the stack's key for the precision checks' draw (domain/precision.py); None
        where none is configured (the draw is then a plain hash of what the sender sent)."""
        self.endpoint = endpoint
        self.check_key = check_key
        self.wait_for_capacity = wait_for_capacity
        self.destinations = dict(destinations)
        self.review_timeout_seconds = review_timeout_seconds

    def decision_record(self, item: Item, policy: Policy, *, shadows: Mapping[str, ShadowHead] | None = None,
              deadline: float | None = None) -> tuple[DecisionRecord, float | None]:
        """The item's decision record under `policy`: rule answers first, the endpoint for the
        remaining questions (one request), each answer judged against its thresholds; and the
        endpoint's round trip in seconds (None when rules answered everything). A question with a
        head in `shadows` (question → the candidate answering beside the head in service) gets
        its answer in the record's `shadow` too (the same request; it decides nothing)."""
        shadows = shadows or {}
        hits = apply_rules(policy, item)
        entries: list[DecisionEntry] = [rule_entry(policy.question(q), hit) for q, hit in hits.items()]
        pending = [q for q in policy.questions if q.id not in hits]
        seconds, state, results = None, None, None
        shadowed: dict[str, ShadowAnswer] = {}
        kept: dict[str, KeptSignals] = {}
        words: dict[str, DecisionEntry] = {}
        if pending:
            decisions = {d.id: d for d in build_decisions(policy, item, [q.id for q in pending])}
            state = next(iter(decisions.values())).state  # every question reads the same evidence
            words = {q.id: words_entry(q, state) for q in pending if q.model != "always"}
            # the endpoint only for what the words did not settle: a question that never asks it, or
            # whose letters cannot answer (more options than letters), keeps the head's answer
            settled = [q for q in pending if q.id in words and (words[q.id].passed or q.model == "never" or q.many_options)]
            entries += [words[q.id] for q in settled]
            shadowed.update(_shadow_answers(shadows, settled, [words[q.id] for q in settled], None, state))
            pending = [q for q in pending if q not in settled]
        if pending:
            started = time.perf_counter()
            try:
                asked = [decisions[q.id] for q in pending]  # each asks for the hidden state (model_requests)
                results = self.endpoint.decide(asked, deadline=deadline)
                kept = keep_signals({q.id: decision for q, decision in zip(pending, asked)}, results)
                # a question whose head was unsure of the words is answered by the letters
                answered = [model_entry(q.with_head(None) if q.id in words else q, results[q.id], state)
                            for q in pending]
                entries += answered
                shadowed.update(_shadow_answers(shadows, pending, answered, results, state))
            except EndpointFailure as failure:
                if failure.kind == NO_CAPACITY and self.wait_for_capacity:
                    raise WaitingForCapacity(failure) from failure
                # the rules' and the words' answers stand; the questions left for the endpoint have none
                asked_ids = {q.id for q in pending}
                entries = [e for e in entries if e.question not in asked_ids] + [error_entry(q, failure) for q in pending]
            seconds = time.perf_counter() - started
        entries = explain(policy, item, entries, state, results)
        record = build_record(policy, item, entries, destinations=self.destinations,
                              review_timeout_seconds=self.review_timeout_seconds, check_key=self.check_key)
        if shadowed or kept:
            record = record.model_copy(update={"shadow": shadowed, "signals": kept})
        return record, seconds


def _shadow_answers(shadows: Mapping[str, ShadowHead], pending: Sequence[Question], answered: Sequence[DecisionEntry],
                    results: Mapping[str, DecisionResult] | None, state: object) -> dict[str, ShadowAnswer]:
    """Each shadow head's answer beside the deciding one, to the endpoint's `results` (None: the
    words alone settled these questions); a shadow that fails is left out (it must never change
    what the item gets)."""
    out = {}
    for question, deciding in zip(pending, answered):
        shadow = shadows.get(question.id)
        if shadow is None:
            continue
        try:
            answer = shadow_answer(question, shadow.head, shadow.sha256, None if results is None else results[question.id],
                                   state, deciding)
        except Exception:  # noqa: BLE001 - the shadow decides nothing; the record says it did not answer
            answer = None
        if answer is not None:
            out[question.id] = answer
    return out
