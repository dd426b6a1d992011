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
- grouped / flapping / suppressed: a new incident held by the policy's noise controls (it joins an
  open incident of its group; its source keeps opening it; a maintenance window holds it): its row
  records it, an audit row of that outcome says why, nobody is paged. A window whose action is
  `review` routes the incident to review instead (outcome routed, with the window named);
- dead_lettered: an event of a kind no adapter maps, or one missing what the mapping needs:
  parked in the incident DLQ at once with the precise reason (retrying cannot help).
A failure to reach the store or start the workflow raises, so Lambda retries the event and then
hands it to the on-failure destination (the same DLQ) with the error: nothing is dropped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from ..adapters.open_incidents import Joined
from ..config import Settings
from ..domain.items import Incident
from ..domain.noise import aware, recent
from ..domain.records import AuditRow
from ..domain.why import NoiseTrace
from ..severity import SeverityTable
from ..sources import IncidentSource, raw_events, read_event, unknown
from ..sources.cloudwatch import parse_alarm_arn
from ..sources.events import Envelope, Ignored, InvalidSourceEvent, Opened, Resolved, SourceEventError
from ..sources.sns import notification
from ..validation import describe_errors
from .pipeline import Intake

OWN_DETAIL_TYPE = "Incident Reported"
#: The schedule's event (EventBridge Scheduler's and a rule's `Scheduled Event`): sweep the holds.
SWEEP = ("aws.events", "Scheduled Event")
#: Pending reviews looked through for the resolved incident's (the review queue is a queue, not
#: an index: past this many, the review stays open and the resolution says so).
MAX_REVIEWS_SCANNED = 100
#: The metric counting each outcome of a noise control.
HELD_METRICS = {"grouped": "IncidentsGrouped", "flapping": "IncidentsFlapping", "suppressed": "IncidentsSuppressed"}


def _iso(at: datetime) -> str:
    """One form for every time the store compares as text (UTC, milliseconds)."""
    return aware(at).astimezone(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class IncidentOpened:
    """A native source's event opens this incident (validated), correlated by `key`."""

    key: str
    incident: Incident
    delivery: str | None = None


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
        return IncidentOpened(opened.key, Incident.model_validate(opened.incident), opened.delivery)
    except ValidationError as error:
        raise InvalidSourceEvent(envelope.source, envelope.detail_type,
                                 [f"incident.{line}" for line in describe_errors(error)]) from None


class IncidentIntake:
    def __init__(self, intake: Intake, *, logger: Logger, metrics: Metrics, settings: Settings | None = None,
                 store: Any = None, dead_letters: Any = None, clock: Callable[[], datetime] | None = None,
                 alarm_states: Any = None):
        """`settings`, `store` and `dead_letters` replace what the environment would give (tests);
        `clock` gives the delivery's time (a maintenance window's hold ends with its window)."""
        self.intake, self.logger, self.metrics = intake, logger, metrics
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self._settings, self._store, self._dead_letters = settings, store, dead_letters
        self._alarm_states = alarm_states
        self._reviews: Any = None
        self._tasks: Any = None
        self._audit: Any = None

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
    def alarm_states(self) -> Any:
        if self._alarm_states is None:
            from ..adapters.alarm_states import AlarmStates

            self._alarm_states = AlarmStates()
        return self._alarm_states

    @property
    def dead_letters(self) -> Any:
        if self._dead_letters is None:
            from ..adapters.queues import Queue

            self._dead_letters = Queue(self.settings.require("dead_letter_queue_url").dead_letter_queue_url)
        return self._dead_letters

    def handle(self, event: dict, context: Any = None) -> dict:
        """One invocation: an EventBridge event, a Lambda alarm action, or an SNS event (each of
        its records handled alone, their results under `records`)."""
        deliveries = raw_events(event)
        if len(deliveries) > 1:
            return {"records": [self._handle_one(delivery, context) for delivery in deliveries]}
        return self._handle_one(deliveries[0], context)

    def _handle_one(self, event: Any, context: Any) -> dict:
        try:
            source, envelope = read_event(event)
        except SourceEventError as error:
            return self.park(event, error)
        if source is None and (envelope.source, envelope.detail_type) == SWEEP:
            return self.sweep_holds(context)
        if source is None and envelope.detail_type == OWN_DETAIL_TYPE:
            summary = self.intake.handle(envelope.detail, context)
            return {**summary, "outcome": "routed" if summary["started"] else "duplicate"}
        try:
            outcomes = native_outcomes(source, envelope, self.intake.router.policy.source_severity)
        except SourceEventError as error:
            return self.park(event, error)
        results = [self._apply(outcome, outcome.delivery or envelope.id, context) for outcome in outcomes]
        return {"event_id": envelope.id, "source": envelope.source, "detail_type": envelope.detail_type,
                "outcomes": results}

    def _apply(self, outcome: IncidentOutcome, delivery: str, context: Any) -> dict:
        if isinstance(outcome, IncidentOpened):
            return self._open(outcome, delivery, context)
        if isinstance(outcome, Resolved):
            refused = self._unconfirmed(outcome)
            if refused is not None:
                touched = self.store.touch(outcome.key, delivery)
                return self._ignore(outcome.source, outcome.key, refused, touched=touched)
            was = self.store.resolve(outcome.key, delivery, outcome.reason)
            if was is None:
                return self._ignore(outcome.source, outcome.key, f"{outcome.reason}; no open incident has this key "
                                    "(already resolved, or never opened here)")
            self.metrics.add_metric(name="IncidentsResolved", unit=MetricUnit.Count, value=1)
            name = was.execution_name
            reason = outcome.reason
            group_key = was.group
            if group_key:  # a grouped incident is over when every member is
                group = self.store.leave_group(group_key, outcome.key, delivery)
                still = group.open_members if group else []
                name = None if still or group is None else group.execution_name
                members = group.members if group else []
                if still:
                    reason += f"; its group still has {len(still)} open member(s) and stays open"
                elif len(members) > 1:  # the grouped incident's own audit says who was in it
                    reason += f"; the last open member of its group: the group of {len(members)} is resolved"
                    self._write_audit(group.leader_incident_id if group else outcome.key, delivery,
                                      "group_resolved", f"every member of {group_key} is resolved",
                                      {"group": group_key, "members": members, "execution_name": name},
                                      json.dumps({"group": group_key, "members": members}))
            result = {"outcome": "resolved", "key": outcome.key, "reason": reason, "execution_name": name,
                      "review_closed": bool(name) and self._close_review(name, outcome.reason)}
            self.logger.info("incident resolved", extra=result)
            return result
        touched = outcome.key is not None and self.store.touch(outcome.key, delivery)
        return self._ignore(outcome.source, outcome.key, outcome.reason, touched=touched)

    def _unconfirmed(self, outcome: Resolved) -> str | None:
        """Why an alarm's "OK" does not resolve its incident (None: it does). CloudWatch is asked
        for the alarm's state now: only CloudWatch can say an alarm is OK, and the message that
        says so may come from whoever can publish to the topic or write to a dead-letter queue.
        An alarm of another account cannot be asked about: its OK is taken as it comes (the bus
        policy says who may put those)."""
        row = self.store.get(outcome.key) if parse_alarm_arn(outcome.key) is not None else None
        if row is None or row.status != "open":
            return None  # no alarm, or nothing open to resolve (said as such below)
        state = self.alarm_states.state_of(outcome.key)
        if state in ("OK", "elsewhere"):
            return None
        self.metrics.add_metric(name="UnconfirmedResolutions", unit=MetricUnit.Count, value=1)
        now = ("there is no such alarm" if state == "missing" else f"the alarm is {state} now")
        self.logger.warning("an alarm's OK that CloudWatch does not confirm; the incident stays open",
                            extra={"key": outcome.key, "cloudwatch_state": state})
        return (f"{outcome.reason}; not resolved: CloudWatch says {now}, and an OK resolves an alarm's "
                "incident only when CloudWatch confirms it")

    def _open(self, opened: IncidentOpened, delivery: str, context: Any) -> dict:
        incident = opened.incident
        noise = self.intake.router.policy.noise
        at = _iso(incident.reported_at)
        opens = None
        if noise.flapping is not None:  # the recent openings of this key, this one included
            row = self.store.get(opened.key)
            earlier = row.opens if row else []
            if row is not None and row.status == "resolved":
                opens = recent(earlier, incident.reported_at, noise.flapping.window_minutes) + [at]
            elif row is not None and row.opened_by == delivery and earlier:
                opens = earlier  # this delivery opened it and is retried: its count stands
            else:
                opens = [at]
        claim = self.store.claim(opened.key, delivery, incident_id=incident.incident_id, source=incident.source,
                                 opens=opens, service=incident.service, reported_at=at)
        base = {"key": opened.key, "incident_id": incident.incident_id}
        now = self.clock()
        if claim in ("duplicate", "update") and noise.maintenance:
            released = self._release_hold(opened, delivery, now, context)
            if released is not None:
                return {**base, **released}
        if claim == "duplicate":
            self.metrics.add_metric(name="AlreadyRouted", unit=MetricUnit.Count, value=1)
            self.logger.info("re-delivered event of an incident already routed", extra={**base, "delivery": delivery})
            return {**base, "outcome": "duplicate", "reason": f"event {delivery} was handled already"}
        if claim == "update":
            self.metrics.add_metric(name="IncidentUpdates", unit=MetricUnit.Count, value=1)
            reason = "the incident is open: this event updates it and pages nobody again"
            self.logger.info("open incident updated", extra={**base, "delivery": delivery})
            return {**base, "outcome": "updated", "reason": reason}
        held = self._held_by_noise(opened, delivery, opens)
        if held is not None:
            return {**base, **held}
        window = noise.window(incident, incident.reported_at)
        review = (f"maintenance window {window.id!r} ({window.description}): decided, and sent to review instead "
                  "of paging" if window is not None else None)
        group = noise.group(incident)
        joined, took_over_from = None, None
        if group is not None and window is None:
            rule, group_key = group
            joined = self.store.join_group(group_key, opened.key, at=at, incident_id=incident.incident_id,
                                           until=_iso(incident.reported_at + timedelta(minutes=rule.window_minutes)),
                                           severity=incident.severity)
            if not joined.is_leader:
                if rule.holds(incident.severity, joined.leader_severity):
                    return {**base, **self._grouped(opened, delivery, rule.id, group_key, joined)}
                # Holding it would lose its page: it is routed, and leads the group from now on.
                self.store.lead_group(group_key, opened.key, incident_id=incident.incident_id,
                                      severity=incident.severity)
                took_over_from = joined.leader_incident_id
                self.logger.info("incident more severe than its group's leader: routed, and now leads the group",
                                 extra={**base, "group": group_key, "was_led_by": joined.leader_incident_id,
                                        "leader_severity": joined.leader_severity})
        trace = NoiseTrace(
            grouping=group[0].id if joined is not None and group is not None else None,
            group_leader=(incident.incident_id if joined is not None and (joined.is_leader or took_over_from)
                          else None),
            took_over_from=took_over_from, window=window.id if window is not None else None,
            window_action=window.action if window is not None else None,
            flapping_opens=len(opens) if opens is not None and noise.flapping is not None else None,
            flapping_max=noise.flapping.max_opens if opens is not None and noise.flapping is not None else None)
        summary = self.intake.route(incident, context, review_reason=review,
                                    noise=trace if trace != NoiseTrace() else None)
        self.store.routed(opened.key, delivery, summary["execution_name"],
                          group=group[1] if joined is not None and group is not None else None)
        if joined is not None and group is not None:
            self.store.group_routed(group[1], summary["execution_name"])
        result = {**summary, **base, "outcome": "routed" if summary["started"] else "duplicate"}
        if window is not None:
            result["window"] = window.id
        if took_over_from is not None:
            result["reason"] = (f"more severe ({incident.severity}) than the leader {took_over_from} of its group "
                                "under noise.grouping: paged, and leads the group from now on")
        return result

    def sweep_holds(self, context: Any = None) -> dict:
        """Route every open incident whose maintenance window has ended (the template's schedule
        calls this every few minutes), so a hold never outlasts its window by more than that."""
        now = self.clock()
        results = []
        for row in self.store.expired_holds(_iso(now)):
            if row.held_item is None:
                continue  # held by no window: nothing to route here
            opened = IncidentOpened(row.incident_key, Incident.model_validate_json(row.held_item))
            released = self._release_hold(opened, "sweep", now, context)
            if released is not None:
                results.append({"key": opened.key, "incident_id": opened.incident.incident_id, **released})
        return {"outcome": "swept", "reason": f"{len(results)} incident(s) held by a window that ended: routed",
                "outcomes": results}

    def _release_hold(self, opened: IncidentOpened, delivery: str, now: datetime, context: Any) -> dict | None:
        """A later delivery of an incident a maintenance window held, once the window is over:
        routed now (it pages as it would have), once; None when there is no such hold."""
        if not self.store.release(opened.key, _iso(now)):
            return None
        summary = self.intake.route(opened.incident, context)
        self.store.released(opened.key, summary["execution_name"])
        reason = "its maintenance window ended while it was still open: routed now"
        self.logger.info("held incident released", extra={"key": opened.key, "delivery": delivery})
        self.metrics.add_metric(name="IncidentsReleased", unit=MetricUnit.Count, value=1)
        return {**summary, "outcome": "routed", "reason": reason}

    def _held_by_noise(self, opened: IncidentOpened, delivery: str, opens: list[str] | None) -> dict | None:
        """Flapping, or a maintenance window that suppresses: the incident is recorded (its row,
        an audit row of its own outcome) and not routed. None when neither holds it."""
        incident = opened.incident
        noise = self.intake.router.policy.noise
        if (noise.flapping is not None and opens is not None and len(opens) > noise.flapping.max_opens
                and noise.flapping.applies(incident.severity)):
            reason = (f"flapping: opened {len(opens)} times in {noise.flapping.window_minutes} min (more than "
                      f"{noise.flapping.max_opens}); held as one flapping incident, paged once, not again")
            self.store.held(opened.key, delivery, reason, flapping="true")
            return self._record_held(opened, delivery, "flapping", reason, {"opens": opens}, NoiseTrace(
                flapping_opens=len(opens), flapping_max=noise.flapping.max_opens, held="flapping"))
        window = noise.window(incident, incident.reported_at)
        if window is not None and window.action == "suppress":
            until = window.ends(incident.reported_at)
            reason = (f"maintenance window {window.id!r} ({window.description}): recorded, not paged while the "
                      f"window lasts (until {_iso(until)}); a delivery after that routes it if it is still open")
            self.store.held(opened.key, delivery, reason, window=window.id, held_until=_iso(until),
                            held_item=incident.model_dump_json())
            return self._record_held(opened, delivery, "suppressed", reason, {"window": window.id}, NoiseTrace(
                window=window.id, window_action=window.action, held="suppressed"))
        return None

    def _grouped(self, opened: IncidentOpened, delivery: str, rule: str, group_key: str, joined: Joined) -> dict:
        reason = (f"grouped by {rule!r} into open incident {joined.leader_incident_id} "
                  f"({len(joined.members)} member(s)): it pages nobody again")
        self.store.held(opened.key, delivery, reason, group=group_key)
        self.store.add_member(joined.leader, opened.key)
        return self._record_held(opened, delivery, "grouped", reason, {
            "group": group_key, "leader": joined.leader, "leader_incident_id": joined.leader_incident_id,
            "members": joined.members, "leader_execution_name": joined.execution_name},
            NoiseTrace(grouping=rule, group_leader=joined.leader_incident_id, held="grouped"))

    def _record_held(self, opened: IncidentOpened, delivery: str, outcome: str, reason: str, detail: dict,
                     trace: NoiseTrace) -> dict:
        """An incident a noise control held: counted, logged, and audited with its own outcome (one
        row per delivery, named after it, so a retried event writes the same row) and its reason
        (`why`: the noise control that held it)."""
        self._write_audit(opened.incident.incident_id, delivery, outcome, reason,
                          {**detail, "why": trace.model_dump(mode="json", exclude_none=True)},
                          opened.incident.model_dump_json())
        self.metrics.add_metric(name=HELD_METRICS[outcome], unit=MetricUnit.Count, value=1)
        result = {"outcome": outcome, "reason": reason, **detail}
        self.logger.info("incident held by a noise control", extra={"key": opened.key, **result})
        return result

    def _write_audit(self, item_id: str, delivery: str, outcome: str, reason: str, detail: dict, item: str) -> None:
        """An audit row the intake writes itself (nothing was routed: no workflow audits it)."""
        from ..adapters.review import AuditTrail

        if self._audit is None:
            self._audit = AuditTrail(self.settings.require("audit_table").audit_table)
        policy = self.intake.router.policy
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        self._audit.write(AuditRow(
            item_id=item_id, item_kind="incident",
            execution_name=f"{outcome}-{hashlib.sha256(delivery.encode()).hexdigest()[:16]}",
            outcome=outcome, outcome_detail=json.dumps({"status": outcome, "reason": reason, **detail}),
            route="held", route_reason=reason, policy_name=policy.name, policy_version=policy.version,
            decisions="[]", item=item, decided_at=now, audited_at=now))

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
        sns = notification(event)
        event_id = (sns.get("MessageId") if sns is not None
                    else event.get("id") or event.get("alarmArn") if isinstance(event, dict) else None)
        self.dead_letters.send(json.dumps(event), {
            "failure_kind": error.failure_kind, "failure_reason": str(error), "event_id": str(event_id or ""),
            "source": ("aws:sns" if sns is not None else str(event.get("source", "")) if isinstance(event, dict)
                       else "")})
        self.metrics.add_metric(name="DeadLetteredEvents", unit=MetricUnit.Count, value=1)
        self.logger.warning("event parked in the incident DLQ", extra={"event_id": event_id, "reason": str(error)})
        return {"outcome": "dead_lettered", "event_id": event_id, "reason": str(error)}
