"""The intake flow shared by the ticket (SQS) and incident (EventBridge) functions:
parse → decide once per item key → start the workflow → log and metrics. Built lazily on the first item, so importing a
handler creates no AWS client and a broken policy/config fails loudly at the first invoke."""

from __future__ import annotations

import time
from datetime import timedelta
from functools import cached_property
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

from .config import Settings
from .items import InvalidItem, Item, parse_item
from .policies import load_policy
from .records import DecisionRecord
from .router import Outcome, Router

#: Time kept back from the Lambda deadline to start the workflow after the endpoint answered.
RESERVED_SECONDS = 10.0
#: How long a decision is kept for a duplicate of the same item (no second model call).
IDEMPOTENCY_TTL = int(timedelta(days=1).total_seconds())


class Intake:
    def __init__(self, kind: str, *, logger: Logger, metrics: Metrics, settings: Settings | None = None,
                 endpoint: Any = None, workflow: Any = None):
        self.kind, self.logger, self.metrics = kind, logger, metrics
        self._settings, self._endpoint, self._workflow = settings, endpoint, workflow
        # The key is Item.key (kind, source, id, payload hash), passed as the function's data.
        self.idempotency = IdempotencyConfig(raise_on_no_idempotency_key=True, expires_after_seconds=IDEMPOTENCY_TTL)

    @cached_property
    def settings(self) -> Settings:
        return (self._settings or Settings.from_env()).require(
            "endpoint_name", "state_machine_arn", "idempotency_table", "destination_queues",
            "review_queue_url", "policy_name")

    @cached_property
    def router(self) -> Router:
        from .adapters.endpoint import DecisionEndpoint
        from .adapters.workflow import WorkflowStarter

        s = self.settings
        policy = load_policy(s.policy_name, known_targets=s.destination_queues)
        if policy.item_kind != self.kind:
            raise RuntimeError(f"POLICY_NAME={s.policy_name!r} decides {policy.item_kind}s; this function takes {self.kind}s")
        self.metrics.set_default_dimensions(policy=policy.name)
        endpoint = self._endpoint or DecisionEndpoint(s.endpoint_name, read_timeout=s.endpoint_read_timeout_seconds,
                                                      max_attempts=s.endpoint_max_attempts)
        return Router(policy, endpoint, self._workflow or WorkflowStarter(s.state_machine_arn),
                      destinations=s.destination_queues, review_queue_url=s.review_queue_url,
                      review_timeout_seconds=s.review_timeout_seconds)

    @cached_property
    def _decide_once(self):
        """Decide an item once per key (a duplicate reuses the stored record, no second model call).
        Only the decision is cached: whether the item was routed is the workflow's to say, so a
        re-sent item whose execution failed is routed again (WorkflowStarter.start)."""
        store = DynamoDBPersistenceLayer(table_name=self.settings.idempotency_table)

        def decide(item_key: str, item: Item, deadline: float | None) -> dict:
            record, seconds = self.router.decide(item, deadline=deadline)
            self._observe_decision(record, seconds)
            return record.model_dump(mode="json")

        return idempotent_function(decide, data_keyword_argument="item_key", persistence_store=store,
                                   config=self.idempotency)

    def register(self, context: Any) -> None:
        self.idempotency.register_lambda_context(context)

    def handle(self, raw: Any, context: Any = None) -> dict:
        """Validate and route one item; raises on a bad item or when the workflow cannot start."""
        try:
            item = parse_item(self.kind, raw)
        except InvalidItem as error:
            self.metrics.add_metric(name="InvalidItems", unit=MetricUnit.Count, value=1)
            self.logger.error("invalid item", extra={"item_kind": self.kind, "item_id": error.item_id,
                                                     "errors": error.errors})
            raise
        deadline = None
        if context is not None and hasattr(context, "get_remaining_time_in_millis"):
            deadline = time.monotonic() + context.get_remaining_time_in_millis() / 1000 - RESERVED_SECONDS
        self.router  # noqa: B018 - build (and validate) before the idempotency record is taken
        record = DecisionRecord.model_validate(self._decide_once(item_key=item.key, item=item, deadline=deadline))
        name, started = self.router.workflow.start(record)
        summary = Outcome(record, name, started, None).summary()
        if not started:
            self.metrics.add_metric(name="AlreadyRouted", unit=MetricUnit.Count, value=1)
        self.logger.info("item routed" if started else "item already routed", extra=summary)
        return summary

    def _observe_decision(self, record: DecisionRecord, endpoint_seconds: float | None) -> None:
        add = self.metrics.add_metric
        add(name="Decisions", unit=MetricUnit.Count, value=1)
        add(name="AutoRouted" if record.route == "auto" else "SentToReview", unit=MetricUnit.Count, value=1)
        add(name="RuleHits", unit=MetricUnit.Count, value=sum(d.source == "rule" for d in record.decisions))
        errors = [d for d in record.decisions if d.source == "endpoint_error"]
        add(name="EndpointErrors", unit=MetricUnit.Count, value=1 if errors else 0)
        if errors:
            self.logger.warning("endpoint failed; item sent to review", extra={
                "item_id": record.item_id, "error": errors[0].error.model_dump()})
        if endpoint_seconds is not None:
            add(name="DecisionLatency", unit=MetricUnit.Milliseconds, value=endpoint_seconds * 1000)
        add(name="HeadDecisions", unit=MetricUnit.Count, value=sum(d.readout == "head" for d in record.decisions))
        skipped = [d for d in record.decisions if d.head_skipped]
        add(name="HeadSkipped", unit=MetricUnit.Count, value=len(skipped))
        for decision in skipped:
            # never a head on the wrong model: the letters decided; refit the head for this model
            self.logger.warning("head not applied; the letters decided", extra={
                "item_id": record.item_id, "question": decision.question, "reason": decision.head_skipped})
