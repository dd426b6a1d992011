"""The intake flow shared by the ticket (SQS) and incident (EventBridge) functions:
parse → judge once per item key → deliver it or start the workflow → log and metrics. An item is validated
once, and its decision record travels as one `DecisionRecord` from the judge to the workflow
(the idempotency store keeps its JSON and gives the same record back for a duplicate). Its parts are built once,
on the first item (`Intake.parts`), so importing a handler creates no AWS client and a broken
policy/config fails loudly at the first invoke.

The router judges each item under the policy it is told for that item (the shipped policy with
the heads in service, `live_heads`); `Intake.route` alone routes it. An automatic route that pages
nobody is delivered here without an execution (`DirectRoutes`: the audit row's conditional put
claims it, so it is delivered once; a retry finds it delivered, or takes over a claim whose
invocation has ended). Anything that waits for a person or pages starts the workflow:
- Failing to start it fails the item (the exception propagates): SQS redelivers the ticket and
  moves it to the DLQ after maxReceiveCount; EventBridge's async invoke retries the incident and
  then hands it to the function's on-failure destination/DLQ.
- Starting twice is harmless: the execution name is deterministic per item key (source, id,
  payload); an existing execution that runs or succeeded means routed, one that failed, timed
  out or was aborted means not routed, so the item starts again under the next attempt's name."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Mapping

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
)
from aws_lambda_powertools.utilities.idempotency.serialization.base import BaseIdempotencySerializer

from ..adapters.shadow_tally import ShadowTally
from ..adapters.workflow import MAX_ATTEMPTS
from ..domain.linking import LinkedIncident
from ..domain.policies import Policy, load_policy
from ..domain.ports.outcomes import ResolvedItemStore
from ..domain.precision import DrawKeyUnavailable
from ..domain.records import DecisionRecord, RecordTooLarge, check_size, execution_name, with_signals_that_fit
from ..domain.routing import Router, ShadowHead, is_direct
from ..domain.similar import ROUTER
from ..domain.why import NoiseTrace, Why
from ..items import InvalidItem, Item, parse_item
from ..question_metrics import question_metric
from .live_heads import LiveHeads, live_heads
from .resolved_items import remember_resolved
from .wiring import Wiring

#: Time kept back from the Lambda deadline to start the workflow after the endpoint answered.
RESERVED_SECONDS = 10.0
#: How long a decision is kept for a duplicate of the same item (no second model call).
IDEMPOTENCY_TTL = int(timedelta(days=1).total_seconds())
#: Whether an item waits while a scaled-to-zero endpoint wakes (minutes) instead of going to review:
#: tickets wait (SQS receives them again; review is not flooded after every idle period), incidents
#: are urgent and go to review at once, the reason saying the endpoint is waking up (so does any
#: other kind, as for every endpoint failure).
WAITS_FOR_CAPACITY = {"ticket": True, "incident": False}
#: What the intake needs from the environment (docs: the configuration reference, "Function environment").
REQUIRED_SETTINGS = ("endpoint_name", "state_machine_arn", "idempotency_table", "destination_queues",
                     "policy_name")

@dataclass(frozen=True)
class RouteOutcome:
    """What routing one item came to: its decision record and the workflow execution that routes it."""

    record: DecisionRecord
    execution_name: str
    started: bool  # False: an execution for this item already existed

    def summary(self) -> dict:
        """What the handler returns and the logs show."""
        r = self.record
        return {"item_id": r.item_id, "execution_name": self.execution_name, "started": self.started,
                "route": r.route, "route_reason": r.route_reason,
                "target": r.destination.target if r.destination else None, "escalate": r.escalate,
                "sources": {d.question: d.source for d in r.decisions}}


class StoredRecord(BaseIdempotencySerializer):
    """How the idempotency store keeps a decision record: its JSON, validated back for a duplicate."""

    def to_dict(self, data: DecisionRecord) -> dict:
        return data.model_dump(mode="json")

    def from_dict(self, data: dict) -> DecisionRecord:
        return DecisionRecord.model_validate(data)


def with_reason(record: DecisionRecord, **why: Any) -> DecisionRecord:
    """The record with `why`'s fields set on each decision's reason."""
    return record.model_copy(update={"decisions": [
        d.model_copy(update={"why": (d.why or Why()).model_copy(update=why)}) for d in record.decisions]})


# One Tracer configuration per process (Powertools shares it): the handler's, which patches boto3.
tracer = Tracer()


@dataclass(frozen=True)
class IntakeParts:
    """What an Intake works with, built once from its settings (`Intake.parts`)."""

    #: The shipped policy, checked against the settings (its heads: the shipped ones).
    policy: Policy
    router: Router
    #: Intake.observed_record, once per item key (Powertools idempotency on DynamoDB).
    record_once: Callable[..., DecisionRecord]
    #: The heads in service from the head store (None: the shipped heads decide).
    live: LiveHeads | None = None
    #: Where the shadow heads' answers are counted (None: no head store, no shadow).
    tally: ShadowTally | None = None
    #: Where an item the router routes on its own is kept for the console's similar items (None: nowhere).
    resolved_items: ResolvedItemStore | None = None


class Intake:
    def __init__(self, kind: str, *, logger: Logger, metrics: Metrics, wiring: Wiring | None = None):
        """`wiring`: the function's composition root, whose parts this intake and the flows over it
        (the ticket and incident intakes) work with; by default, all made from the environment."""
        self.kind, self.logger, self.metrics = kind, logger, metrics
        self.wiring = wiring or Wiring()
        # The key is Item.key (kind, source, id, payload hash), passed as the function's data.
        self.idempotency = IdempotencyConfig(raise_on_no_idempotency_key=True, expires_after_seconds=IDEMPOTENCY_TTL)
        self._parts: IntakeParts | None = None

    @property
    def parts(self) -> IntakeParts:
        """The router and the idempotent `record_once`, built (and validated) on first use."""
        if self._parts is None:
            self._parts = self._build()
        return self._parts

    @property
    def router(self) -> Router:
        return self.parts.router

    @property
    def policy(self) -> Policy:
        """The policy this intake applies: its questions, rules, noise controls and severity tables
        (the heads in service, which alone change without a deploy, are read per item by `observed_record`)."""
        return self.parts.policy

    def _build(self) -> IntakeParts:
        s = self.wiring.settings.require(*REQUIRED_SETTINGS)
        policy = load_policy(s.policy_name, known_targets=s.destination_queues)
        if policy.item_kind != self.kind:
            raise RuntimeError(f"POLICY_NAME={s.policy_name!r} decides {policy.item_kind}s; this function takes {self.kind}s")
        self.metrics.set_default_dimensions(policy=policy.name)
        for warning in policy.warnings:  # it loads, but likely is not what was meant
            self.logger.warning("policy warning", extra={"policy": policy.name, "warning": warning})
        router = Router(self.wiring.endpoint, destinations=s.destination_queues,
                        review_timeout_seconds=s.review_timeout_seconds,
                        wait_for_capacity=WAITS_FOR_CAPACITY.get(self.kind, False), check_key=self._check_key)
        # Only the decision is kept per key: whether the item was routed is the workflow's to say,
        # so a re-sent item whose execution failed is routed again (WorkflowStarter.start).
        record_once = idempotent_function(self.observed_record, data_keyword_argument="item_key", config=self.idempotency,
                                         persistence_store=self.wiring.idempotency_store,
                                         output_serializer=StoredRecord())
        live = live_heads(policy, self.wiring.head_store, s, self.logger,
                          head_key=self.wiring.head_signing_key if self.wiring.head_store is not None else None)
        tally = self.wiring.shadow_tally if live is not None else None
        return IntakeParts(policy, router, record_once, live, tally, self.wiring.resolved_items)

    def _check_key(self) -> bytes | None:
        """The precision checks' draw key (domain/precision.py): the stack's head signing key, which
        the routing functions read anyway; None where the stack configured none (a local run). A key
        that cannot be read samples no item (logged, `PrecisionCheckKeyUnavailable`): the item is
        routed as its thresholds say, never held by a draw its sender could compute."""
        key = self.wiring.head_signing_key
        if key is None:
            return None
        try:
            return key.material
        except Exception as error:  # a check missed, never an item
            self.metrics.add_metric(name="PrecisionCheckKeyUnavailable", unit=MetricUnit.Count, value=1)
            self.logger.error("precision check draw key unreadable; this item is not sampled",
                              extra={"reason": f"{type(error).__name__}: {error}"})
            raise DrawKeyUnavailable(str(error)) from error

    @tracer.capture_method(capture_response=False)  # the record holds the item's text: not for traces
    def observed_record(self, item_key: str, item: Item, deadline: float | None) -> DecisionRecord:
        """The item's decision record, observed in logs and metrics; `item_key` is the
        idempotency key."""
        live = self.parts.live
        # A head promoted since, and a candidate serving in shadow, are picked up here.
        policy, shadows = (live.policy(), live.shadows()) if live is not None else (self.parts.policy, {})
        record, seconds = self.router.decision_record(item, policy, shadows=shadows, deadline=deadline)
        self._observe_decision(record, seconds)
        self._count_shadow(record, shadows)
        return record

    def _count_shadow(self, record: DecisionRecord, shadows: Mapping[str, ShadowHead]) -> None:
        """Each shadow head's answer counted once per item (this runs inside the once-per-key
        judgement), with its agreement; a question whose shadow could not answer is counted apart.
        A tally that cannot be written is logged: the item is routed all the same."""
        tally = self.parts.tally
        policy = record.policy.name
        model_answered = {d.question for d in record.decisions if d.source == "model"}
        for question in sorted(set(shadows) & model_answered - set(record.shadow)):
            question_metric("ShadowNotAnswered", policy, question)
        for question, answer in record.shadow.items():
            question_metric("ShadowItems", policy, question)
            question_metric("ShadowAgreed", policy, question, float(answer.agrees))
            if tally is None:
                continue
            try:
                tally.add(policy, question, answer.sha256, items=1, agreed=int(answer.agrees))
            except Exception as error:  # noqa: BLE001 - the shadow decides nothing; the item goes on
                question_metric("ShadowTallyFailed", policy, question)
                self.logger.error("shadow answer not counted", extra={
                    "item_id": record.item_id, "question": question, "reason": f"{type(error).__name__}: {error}"})

    def register(self, context: Any) -> None:
        self.idempotency.register_lambda_context(context)

    def handle(self, raw: Any, context: Any = None) -> dict:
        """Validate and route one item; raises on a bad item or when the workflow cannot start."""
        try:
            item = parse_item(self.kind, raw)
        except InvalidItem as error:
            self.invalid(error)
            raise
        return self.route(item, context)

    def invalid(self, error: InvalidItem) -> None:
        """Count and log an item that failed validation."""
        self.metrics.add_metric(name="InvalidItems", unit=MetricUnit.Count, value=1)
        self.logger.error("invalid item", extra={"item_kind": self.kind, "item_id": error.item_id,
                                                 "errors": error.errors})

    def route(self, item: Item, context: Any = None, *, review_reason: str | None = None,
              noise: NoiseTrace | None = None, linked: LinkedIncident | None = None) -> dict:
        """Route one validated item; raises when the workflow cannot start (RecordTooLarge: never
        can, the caller parks the item). With `review_reason`
        (a maintenance window's) it is decided as usual and sent to review, paging nobody. `noise`
        (the noise controls the incident met) joins each decision's reason; `linked` (the open
        incident a ticket describes) goes on the record and, in one line, into each reason."""
        if item.kind != self.kind:
            raise TypeError(f"this intake routes {self.kind}s, got a {item.kind}")
        deadline = None
        if context is not None and hasattr(context, "get_remaining_time_in_millis"):
            deadline = time.monotonic() + context.get_remaining_time_in_millis() / 1000 - RESERVED_SECONDS
        parts = self.parts  # built (and validated) before an idempotency record is taken
        record = self._record_once(parts, item, deadline)
        if review_reason is not None:
            record = record.model_copy(update={"route": "review", "route_reason": review_reason,
                                               "destination": None, "escalate": False})
        if noise is not None:
            record = with_reason(record, noise=noise)
        if linked is not None:
            record = with_reason(record, linked=linked.reason()).model_copy(update={"linked": linked})
        record = with_signals_that_fit(record)  # the signals only where they become a labelled example
        try:
            check_size(record)  # StartExecution would refuse it, on every retry alike
        except RecordTooLarge as error:
            self.metrics.add_metric(name="RecordsTooLarge", unit=MetricUnit.Count, value=1)
            self.logger.error("record too large to route", extra={"item_id": item.item_id, "reason": str(error)})
            raise
        name, started = self._deliver(record, context)
        summary = RouteOutcome(record, name, started).summary()
        if started and record.route == "auto":
            answers = {d.question: d.option_id for d in record.decisions if d.option_id is not None}
            remember_resolved(record, answers, ROUTER, parts.resolved_items, self.logger, policy=parts.policy)
        if not started:
            self.metrics.add_metric(name="AlreadyRouted", unit=MetricUnit.Count, value=1)
        self.logger.info("item routed" if started else "item already routed", extra=summary)
        return summary

    def _deliver(self, record: DecisionRecord, context: Any) -> tuple[str, bool]:
        """(name, started): an automatic route that pages nobody is delivered here, without an
        execution (`DirectRoutes`: its audit row claimed, its message and its event), under the name
        its execution would have; anything that waits for a person or pages starts the workflow."""
        if not is_direct(record):
            return self.wiring.workflow.start(record)
        holds_until = None  # the claim's lease: this invocation's own end
        if context is not None and hasattr(context, "get_remaining_time_in_millis"):
            holds_until = time.time() + context.get_remaining_time_in_millis() / 1000
        for attempt in range(1, MAX_ATTEMPTS + 1):  # past the names whose route failed, as Workflow.start
            name = execution_name(record.item_kind, record.item_id, record.item_key, attempt)
            delivery = self.wiring.direct_routes.deliver(record, name, holds_until=holds_until)
            if not delivery.ended_unrouted:
                break
        else:
            raise RuntimeError(f"{record.item_kind} {record.item_id!r}: {MAX_ATTEMPTS} routes of this item failed; "
                               "see the workflow DLQ")
        if delivery.announce_error is not None:
            self.metrics.add_metric(name="AnnouncementsFailed", unit=MetricUnit.Count, value=1)
            self.logger.error("item routed but not announced (no Item Routed event)",
                              extra={"item_id": record.item_id, "reason": delivery.announce_error})
        if delivery.mark_error is not None:
            self.metrics.add_metric(name="DeliveriesNotMarked", unit=MetricUnit.Count, value=1)
            self.logger.error("item routed but its claim not marked delivered",
                              extra={"item_id": record.item_id, "reason": delivery.mark_error})
        return name, delivery.delivered

    def _record_once(self, parts: IntakeParts, item: Item, deadline: float | None) -> DecisionRecord:
        """The item's decision, once per item key; decided without the idempotency store when the
        store cannot be used. The store saves a second model call for a duplicate; routing stays once
        per item without it (the execution is named after the item key). A lock left by an invocation
        that died (it holds until that invocation's deadline, past Lambda's async retries) or a store
        throttled beyond the SDK's retries would otherwise hold a valid item back until its DLQ."""
        try:
            return parts.record_once(item_key=item.key, item=item, deadline=deadline)
        except (IdempotencyAlreadyInProgressError, IdempotencyPersistenceLayerError) as error:
            self.metrics.add_metric(name="DecidedWithoutIdempotency", unit=MetricUnit.Count, value=1)
            self.logger.warning("idempotency store unusable; deciding without it (routing stays once per item)",
                                extra={"item_id": item.item_id, "reason": f"{type(error).__name__}: {error}"})
            return self.observed_record(item.key, item, deadline)

    def _observe_decision(self, record: DecisionRecord, endpoint_seconds: float | None) -> None:
        add = self.metrics.add_metric
        add(name="Decisions", unit=MetricUnit.Count, value=1)
        add(name="AutoRouted" if record.route == "auto" else "SentToReview", unit=MetricUnit.Count, value=1)
        add(name="RuleHits", unit=MetricUnit.Count, value=sum(d.source == "rule" for d in record.decisions))
        errors = [d for d in record.decisions if d.source == "endpoint_error"]
        add(name="EndpointErrors", unit=MetricUnit.Count, value=1 if errors else 0)
        if errors:
            failure = errors[0].error
            self.logger.warning("endpoint failed; item sent to review", extra={
                "item_id": record.item_id, "error": failure.model_dump() if failure else None})
        if endpoint_seconds is not None:
            add(name="DecisionLatency", unit=MetricUnit.Milliseconds, value=endpoint_seconds * 1000)
        add(name="HeadDecisions", unit=MetricUnit.Count, value=sum(d.readout == "head" for d in record.decisions))
        for decision in record.decisions:
            if decision.source == "model":  # the share each question routes without a person
                question_metric("QuestionAutoRouted" if decision.passed else "QuestionSentToReview",
                                record.policy.name, decision.question)
            if decision.tier == "words":  # answered without the endpoint (a question's model: when_unsure, never)
                question_metric("WordsAutoRouted" if decision.passed else "WordsSentToReview",
                                record.policy.name, decision.question)
            elif decision.tier == "endpoint":
                question_metric("EndpointAutoRouted" if decision.passed else "EndpointSentToReview",
                                record.policy.name, decision.question)
            if decision.check:  # held for review to check the automatic answer (domain/precision.py)
                question_metric("PrecisionCheckSampled", record.policy.name, decision.question)
        skipped = [d for d in record.decisions if d.head_skipped]
        add(name="HeadSkipped", unit=MetricUnit.Count, value=len(skipped))
        for decision in skipped:
            # never a head on the wrong model: the letters decided (a question with more options
            # than letters has none: it goes to review); refit the head for this model
            message = ("head not applied; the letters decided" if decision.option_id is not None
                       else "head not applied; the letters cannot answer this question, sent to review")
            self.logger.warning(message, extra={
                "item_id": record.item_id, "question": decision.question, "reason": decision.head_skipped})
