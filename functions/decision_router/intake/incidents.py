"""The incident intake's flow over every event it takes: our own `Incident Reported`, and the
native sources' events (decision_router.sources) correlated in the open-incident store. Each
event is validated once (as its source's envelope), each incident it opens once, and the
incident is routed as that value.

What becomes of an event, always one of these (the handler returns it, logs it, counts it):
- routed: a new incident, decided and handed to the routing workflow;
- duplicate: a re-delivery of an event already routed (nothing routed again);
- updated: a new event of an incident still open (it is counted on the incident; nobody is paged again);
- resolved: the source says the incident is over; its open-incident row is closed, and a review
  it still waits for is closed too (the workflow audits it as resolved_at_source);
- ignored: nothing to route (INSUFFICIENT_DATA, an acknowledgement, a resolution of nothing open), with the reason;
- dead_lettered: an event of a kind no adapter maps, or one missing what the mapping needs:
  parked in the incident DLQ at once with the precise reason (retrying cannot help).
A failure to reach the store or start the workflow raises, so Lambda retries the event and then
hands it to the on-failure destination (the same DLQ) with the error: nothing is dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from ..config import Settings
from ..domain.items import Incident
from ..severity import SeverityTable
from ..sources import IncidentSource, read_event, unknown
from ..sources.events import Envelope, Ignored, InvalidSourceEvent, Opened, Resolved, SourceEventError
from ..validation import describe_errors
from .pipeline import Intake

OWN_DETAIL_TYPE = "Incident Reported"
#: Pending reviews looked through for the resolved incident's (the review queue is a queue, not
#: an index: past this many, the review stays open and the resolution says so).
MAX_REVIEWS_SCANNED = 100


@dataclass(frozen=True)
class IncidentOpened:
    """A native source's event opens this incident (validated), correlated by `key`."""

    key: str
    incident: Incident


IncidentOutcome = IncidentOpened | Resolved | Ignored


def native_outcomes(source: IncidentSource[Any] | None, envelope: Envelope[Any],
                    tables: Mapping[str, SeverityTable]) -> list[IncidentOutcome]:
    """What a native source's event (read by `sources.read_event`) means, one outcome per finding
    it carries; UnknownEvent when no source maps it, InvalidSourceEvent when an incident it opens
    is out of bounds (an empty title)."""
    if source is None:
        raise unknown(envelope, OWN_DETAIL_TYPE)
    table = tables.get(source.name)
    if table is None:
        raise LookupError(f"the incident policy has no source_severity table for {source.name!r}")
    return [_opened(outcome, envelope) if isinstance(outcome, Opened) else outcome
            for outcome in source.adapt(envelope, table)]


def _opened(opened: Opened, envelope: Envelope[Any]) -> IncidentOpened:
    try:
        return IncidentOpened(opened.key, Incident.model_validate(opened.incident))
    except ValidationError as error:
        raise InvalidSourceEvent(envelope.source, envelope.detail_type,
                                 [f"incident.{line}" for line in describe_errors(error)]) from None


class IncidentIntake:
    def __init__(self, intake: Intake, *, logger: Logger, metrics: Metrics, settings: Settings | None = None,
                 store: Any = None, dead_letters: Any = None):
        """`settings`, `store` and `dead_letters` replace what the environment would give (tests)."""
        self.intake, self.logger, self.metrics = intake, logger, metrics
        self._settings, self._store, self._dead_letters = settings, store, dead_letters
        self._reviews: Any = None
        self._tasks: Any = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.from_env()
        return self._settings

    @property
    def store(self) -> Any:
        if self._store is None:
            from ..adapters.open_incidents import OpenIncidents

            self._store = OpenIncidents(self.settings.require("open_incidents_table").open_incidents_table)
        return self._store

    @property
    def dead_letters(self) -> Any:
        if self._dead_letters is None:
            from ..adapters.queues import Queue

            self._dead_letters = Queue(self.settings.require("dead_letter_queue_url").dead_letter_queue_url)
        return self._dead_letters

    def handle(self, event: dict, context: Any = None) -> dict:
        try:
            source, envelope = read_event(event)
        except SourceEventError as error:
            return self.park(event, error)
        if source is None and envelope.detail_type == OWN_DETAIL_TYPE:
            summary = self.intake.handle(envelope.detail, context)
            return {**summary, "outcome": "routed" if summary["started"] else "duplicate"}
        try:
            outcomes = native_outcomes(source, envelope, self.intake.router.policy.source_severity)
        except SourceEventError as error:
            return self.park(event, error)
        results = [self._apply(outcome, envelope.id, context) for outcome in outcomes]
        return {"event_id": envelope.id, "source": envelope.source, "detail_type": envelope.detail_type,
                "outcomes": results}

    def _apply(self, outcome: IncidentOutcome, delivery: str, context: Any) -> dict:
        if isinstance(outcome, IncidentOpened):
            return self._open(outcome, delivery, context)
        if isinstance(outcome, Resolved):
            was = self.store.resolve(outcome.key, delivery, outcome.reason)
            if was is None:
                return self._ignore(outcome.source, outcome.key, f"{outcome.reason}; no open incident has this key "
                                    "(already resolved, or never opened here)")
            self.metrics.add_metric(name="IncidentsResolved", unit=MetricUnit.Count, value=1)
            name = was.get("execution_name", {}).get("S")
            result = {"outcome": "resolved", "key": outcome.key, "reason": outcome.reason, "execution_name": name,
                      "review_closed": bool(name) and self._close_review(name, outcome.reason)}
            self.logger.info("incident resolved", extra=result)
            return result
        touched = outcome.key is not None and self.store.touch(outcome.key, delivery)
        return self._ignore(outcome.source, outcome.key, outcome.reason, touched=touched)

    def _open(self, opened: IncidentOpened, delivery: str, context: Any) -> dict:
        incident = opened.incident
        claim = self.store.claim(opened.key, delivery, incident_id=incident.incident_id, source=incident.source)
        base = {"key": opened.key, "incident_id": incident.incident_id}
        if claim == "duplicate":
            self.metrics.add_metric(name="AlreadyRouted", unit=MetricUnit.Count, value=1)
            self.logger.info("re-delivered event of an incident already routed", extra={**base, "delivery": delivery})
            return {**base, "outcome": "duplicate", "reason": f"event {delivery} was handled already"}
        if claim == "update":
            self.metrics.add_metric(name="IncidentUpdates", unit=MetricUnit.Count, value=1)
            reason = "the incident is open: this event updates it and pages nobody again"
            self.logger.info("open incident updated", extra={**base, "delivery": delivery})
            return {**base, "outcome": "updated", "reason": reason}
        summary = self.intake.route(incident, context)
        self.store.routed(opened.key, delivery, summary["execution_name"])
        return {**summary, **base, "outcome": "routed" if summary["started"] else "duplicate"}

    def _close_review(self, execution_name: str, reason: str) -> bool:
        """Close the review the incident's execution still waits for; False when it waits for none."""
        from ..adapters.review import ReviewQueue, ReviewTaskGone, ReviewTasks

        if self.intake.router.workflow.status(execution_name) != "RUNNING":
            return False
        if self._reviews is None:
            self._reviews = ReviewQueue(self.settings.require("review_queue_url").review_queue_url)
            self._tasks = ReviewTasks()
        for queued in self._reviews.pending(limit=MAX_REVIEWS_SCANNED).reviews:
            if queued.review.execution_name != execution_name:
                continue
            try:
                self._tasks.close_resolved(queued.review.task_token, f"resolved at the source: {reason}")
            except ReviewTaskGone:
                return False  # answered or timed out meanwhile: the workflow has its outcome
            self._reviews.remove(queued.receipt_handle)
            self.metrics.add_metric(name="ReviewsClosedResolved", unit=MetricUnit.Count, value=1)
            return True
        self.logger.warning("resolved incident's review not found among the pending ones; it stays open",
                            extra={"execution_name": execution_name, "scanned": MAX_REVIEWS_SCANNED})
        return False

    def _ignore(self, source: str, key: str | None, reason: str, *, touched: bool = False) -> dict:
        self.metrics.add_metric(name="IgnoredEvents", unit=MetricUnit.Count, value=1)
        result = {"outcome": "ignored", "source": source, "key": key, "reason": reason, "touched_open_incident": touched}
        self.logger.info("event ignored", extra=result)
        return result

    def park(self, event: Any, error: SourceEventError) -> dict:
        """An event no retry can map: into the incident DLQ at once, the reason in its attributes
        (a failure to park raises, so Lambda retries and its on-failure destination keeps it)."""
        event_id = event.get("id") if isinstance(event, dict) else None
        self.dead_letters.send(json.dumps(event), {
            "failure_kind": error.failure_kind, "failure_reason": str(error), "event_id": str(event_id or ""),
            "source": str(event.get("source", "")) if isinstance(event, dict) else ""})
        self.metrics.add_metric(name="DeadLetteredEvents", unit=MetricUnit.Count, value=1)
        self.logger.warning("event parked in the incident DLQ", extra={"event_id": event_id, "reason": str(error)})
        return {"outcome": "dead_lettered", "event_id": event_id, "reason": str(error)}
