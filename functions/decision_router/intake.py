"""The intake flow shared by the ticket (SQS) and incident (EventBridge) functions:
parse → idempotent route → log and metrics. Built lazily on the first item, so importing a
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
from .items import ITEM_MODELS, InvalidItem, Item, parse_item
from .policies import load_policy
from .service import Outcome, Router

#: Time kept back from the Lambda deadline to start the workflow after the endpoint answered.
RESERVED_SECONDS = 10.0
#: Duplicates are also stopped for 90 days by the execution name; this avoids a second model call.
IDEMPOTENCY_TTL = int(timedelta(days=1).total_seconds())


class Intake:
    def __init__(self, kind: str, *, logger: Logger, metrics: Metrics, settings: Settings | None = None,
                 endpoint: Any = None, workflow: Any = None):
        self.kind, self.logger, self.metrics = kind, logger, metrics
        self._settings, self._endpoint, self._workflow = settings, endpoint, workflow
        self.idempotency = IdempotencyConfig(event_key_jmespath=ITEM_MODELS[kind].id_field,
                                             raise_on_no_idempotency_key=True,
                                             expires_after_seconds=IDEMPOTENCY_TTL)

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
    def _route_once(self):
        store = DynamoDBPersistenceLayer(table_name=self.settings.idempotency_table)

        def route(item: Item, deadline: float | None) -> dict:
            outcome = self.router.route(item, deadline=deadline)
            self._observe(outcome)
            return outcome.summary()

        # The key is the item id alone: a redelivered or duplicated item is routed once.
        return idempotent_function(route, data_keyword_argument="item", persistence_store=store,
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
        summary = self._route_once(item=item, deadline=deadline)
        self.logger.info("item routed" if summary["started"] else "item already routed", extra=summary)
        return summary

    def _observe(self, outcome: Outcome) -> None:
        add = self.metrics.add_metric
        record = outcome.record
        add(name="Decisions", unit=MetricUnit.Count, value=1)
        add(name="AutoRouted" if record.route == "auto" else "SentToReview", unit=MetricUnit.Count, value=1)
        add(name="RuleHits", unit=MetricUnit.Count, value=sum(d.source == "rule" for d in record.decisions))
        errors = [d for d in record.decisions if d.source == "endpoint_error"]
        add(name="EndpointErrors", unit=MetricUnit.Count, value=1 if errors else 0)
        if errors:
            self.logger.warning("endpoint failed; item sent to review", extra={
                "item_id": record.item_id, "error": errors[0].error.model_dump()})
        if outcome.endpoint_seconds is not None:
            add(name="DecisionLatency", unit=MetricUnit.Milliseconds, value=outcome.endpoint_seconds * 1000)
        if not outcome.started:
            add(name="AlreadyRouted", unit=MetricUnit.Count, value=1)
