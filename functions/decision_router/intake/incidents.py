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
- paged: the workflow paged for an open incident after its review (its `Item Escalated`): it holds
  its dependants from now on;
- grouped / flapping / suppressed: a new incident held by the policy's noise controls (it joins an
  open incident of its group; its source keeps opening it; a maintenance window holds it): its row
  records it, an audit row of that outcome says why, nobody is paged. A window whose action is
  `review` routes the incident to review instead (outcome routed, with the window named);
- held: a new incident of a service whose parent (the policy's `dependencies`) has an open
  incident that paged: held under it (`dependency_holds.py`), decided and routed when the parent
  resolves, or when the hold must end sooner (the parent gone or not paged, the ceiling, a rise in
  severity: the next event of it, or the sweep);
- dead_lettered: an event of a kind no adapter maps, or one missing what the mapping needs:
  parked in the incident DLQ at once with the precise reason (retrying cannot help).
A failure to reach the store or start the workflow raises, so Lambda retries the event and then
hands it to the on-failure destination (the same DLQ) with the error: nothing is dropped.

This module reads each event and correlates it (claims the incident's row, groups it); what the
noise controls hold is `noise_holds.py`'s, what a resolution closes is `resolutions.py`'s.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import Any, Callable, Mapping, cast

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from ..domain.linking import filing_keys
from ..domain.noise import recent
from ..domain.ports.incidents import IncidentRow, OpenIncidentStore
from ..domain.records import AuditRow, RecordTooLarge, json_text
from ..domain.why import NoiseTrace
from ..items import Incident
from ..severity import SeverityTable
from ..sources import IncidentSource, raw_events, read_event, unknown
from ..sources.events import Opened, Resolved, SourceEvent, SourceEventError, SourceOutcome
from ..sources.sns import carried
from .dependency_holds import DependencyHolds, Release
from .noise_holds import NoiseHolds, iso
from .pipeline import Intake
from .resolutions import Resolutions

OWN_DETAIL_TYPE = "Incident Reported"
#: The routing workflow's page (its `source`: the template's Events.Workflow.Source, which only the
#: workflow's role may put on the bus): an incident paged by its reviewer's answer covers from then on.
PAGED = ("decision-router", "Item Escalated")
#: The schedule's event (EventBridge Scheduler's and a rule's `Scheduled Event`): sweep the holds.
SWEEP = ("aws.events", "Scheduled Event")


def native_outcomes(source: IncidentSource[Any] | None, event: SourceEvent,
                    tables: Mapping[str, SeverityTable]) -> list[SourceOutcome]:
    """What a native source's event (read by `sources.read_event`) means, one outcome per finding
    it carries; UnknownEvent when no source maps it, InvalidSourceEvent when an incident it opens
    is out of bounds (an empty title)."""
    if source is None:
        raise unknown(event, OWN_DETAIL_TYPE)
    table = tables.get(source.name)
    if table is None:
        raise LookupError(f"the incident policy has no source_severity table for {source.name!r}")
    return source.adapt(event, table)


class IncidentIntake:
    """The incident intake function's flow: reads, correlates, routes or parks each event."""

    def __init__(self, intake: Intake, *, logger: Logger, metrics: Metrics, clock: Callable[[], datetime] | None = None):
        """Its parts come from the intake's wiring (the function's composition root); `clock`
        gives the delivery's time (a maintenance window's hold ends with its window)."""
        self.intake, self.logger, self.metrics = intake, logger, metrics
        self.wiring = intake.wiring
        self.clock = clock or (lambda: datetime.now(timezone.utc))

    @property
    def store(self) -> OpenIncidentStore:
        store = self.wiring.open_incidents
        if store is None:  # the incident intake cannot correlate without it
            self.wiring.settings.require("open_incidents_table")
        return cast(OpenIncidentStore, store)

    # Each service takes only the concerns of the store it uses; the one store serves them all.
    @cached_property
    def holds(self) -> NoiseHolds:
        store = self.store
        return NoiseHolds(rows=store, holds=store, route=self.intake.route, write_audit=self._write_audit,
                          logger=self.logger, metrics=self.metrics)

    @cached_property
    def dependency_holds(self) -> DependencyHolds:
        store = self.store
        return DependencyHolds(rows=store, holds=store, parents=store, write_audit=self._write_audit,
                               logger=self.logger, metrics=self.metrics)

    @cached_property
    def resolutions(self) -> Resolutions:
        dependencies = not self.intake.policy.dependencies.empty
        store = self.store
        return Resolutions(self.wiring.alarm_states, self.wiring.workflow, self.wiring, rows=store, groups=store,
                           link_index=store, write_audit=self._write_audit, ignore=self._ignore, logger=self.logger,
                           metrics=self.metrics,
                           release=self._release_children if dependencies else None)

    def handle(self, event: dict, context: Any = None) -> dict:
        """One invocation: an EventBridge event, a Lambda alarm action, or an SNS event (each of
        its records handled alone, their results under `records`)."""
        deliveries = raw_events(event)
        if len(deliveries) > 1:
            return {"records": [self._handle_one(delivery, context) for delivery in deliveries]}
        return self._handle_one(deliveries[0], context)

    def _handle_one(self, event: Any, context: Any) -> dict:
        try:
            read = read_event(event)
        except SourceEventError as error:
            return self.park(event, error)
        if read[0] is None:  # no native source's: the schedule's, our own, or one nobody maps (parked below)
            envelope = read[1]
            if (envelope.source, envelope.detail_type) == SWEEP:
                return self.sweep_holds(context)
            if (envelope.source, envelope.detail_type) == PAGED:
                return self.paged_by_workflow(envelope.detail)
            if envelope.detail_type == OWN_DETAIL_TYPE:
                try:
                    summary = self.intake.handle(envelope.detail, context)
                except RecordTooLarge as error:
                    return self.park(event, error)
                return {**summary, "outcome": "routed" if summary["started"] else "duplicate"}
        source, native = read
        try:
            outcomes = native_outcomes(source, native, self.intake.policy.source_severity)
        except SourceEventError as error:
            return self.park(event, error)
        try:
            results = [self._apply(outcome, outcome.delivery or native.id, context) for outcome in outcomes]
        except RecordTooLarge as error:  # no retry makes it smaller
            return self.park(event, error)
        return {"event_id": native.id, "source": native.source, "detail_type": native.detail_type,
                "outcomes": results}

    def _apply(self, outcome: SourceOutcome, delivery: str, context: Any) -> dict:
        if isinstance(outcome, Opened):
            return self._open(outcome, delivery, context)
        if isinstance(outcome, Resolved):
            return self.resolutions.resolve(outcome, delivery, context)
        touched = outcome.key is not None and self.store.touch(outcome.key, delivery)
        return self._ignore(outcome.source, outcome.key, outcome.reason, touched=touched)

    def _open(self, opened: Opened, delivery: str, context: Any) -> dict:
        incident = opened.incident
        noise = self.intake.policy.noise
        at = iso(incident.reported_at)
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
                                 opens=opens, service=incident.service, reported_at=at,
                                 title=incident.title, description=incident.description)
        if claim in ("new", "retry"):
            self._file_for_links(opened.key, incident, at)
        base = {"key": opened.key, "incident_id": incident.incident_id}
        now = self.clock()
        if claim in ("duplicate", "update") and noise.maintenance:
            released = self.holds.release(opened, delivery, now, context)
            if released is not None:
                self._paged(opened.key, opened.incident, released)
                return {**base, **released}
        if claim == "duplicate":
            self.metrics.add_metric(name="AlreadyRouted", unit=MetricUnit.Count, value=1)
            self.logger.info("re-delivered event of an incident already routed", extra={**base, "delivery": delivery})
            return {**base, "outcome": "duplicate", "reason": f"event {delivery} was handled already"}
        if claim == "update" and not self.intake.policy.dependencies.empty:
            released = self._recheck_hold(opened, now, context)
            if released is not None:
                return {**base, **released}
        if claim == "update":
            self.metrics.add_metric(name="IncidentUpdates", unit=MetricUnit.Count, value=1)
            reason = "the incident is open: this event updates it and pages nobody again"
            self.logger.info("open incident updated", extra={**base, "delivery": delivery})
            return {**base, "outcome": "updated", "reason": reason}
        held = self.holds.held(opened, delivery, opens, noise)
        if held is not None:
            return {**base, **held}
        return self._decide(opened, delivery, context, opens)

    def _file_for_links(self, key: str, incident: Incident, at: str) -> None:
        """File the opened incident in the link index under its service's name and salient words,
        so a ticket finds it by key (domain/linking.py). A link is a hint: a failure is logged and
        counted, and the incident goes on (it is then linked to no ticket)."""
        try:
            self.store.file(key, filing_keys(incident.service, incident.title, incident.description), at)
        except Exception as error:  # noqa: BLE001 - never hold an incident back for a ticket's hint
            self.metrics.add_metric(name="LinkFilingFailed", unit=MetricUnit.Count, value=1)
            self.logger.warning("the incident could not be filed for links; no ticket is linked to it", extra={
                "key": key, "incident_id": incident.incident_id, "reason": f"{type(error).__name__}: {error}"})

    def _reroute(self, context: Any):
        return lambda opened, delivery, release: self._decide(opened, delivery, context, None, release=release)

    def _release_children(self, was: IncidentRow, context: Any) -> list[dict]:
        """The resolved incident's held children still open: each decided now (or held again)."""
        return self.dependency_holds.release(was, self._reroute(context))

    def _recheck_hold(self, opened: Opened, now: datetime, context: Any) -> dict | None:
        """A new event of an open incident that is held: decided now when its hold must end."""
        row = self.store.get(opened.key)
        if row is None:
            return None
        return self.dependency_holds.recheck(row, opened.incident, now, self.intake.policy.dependencies,
                                             self._reroute(context))

    def _decide(self, opened: Opened, delivery: str, context: Any, opens: list[str] | None, *,
                release: Release | None = None) -> dict:
        """A new incident past flapping and maintenance holds (or a held child whose hold ended):
        held under a paged parent, grouped, or routed."""
        incident = opened.incident
        noise, dependencies = self.intake.policy.noise, self.intake.policy.dependencies
        at = iso(incident.reported_at)
        base = {"key": opened.key, "incident_id": incident.incident_id}
        if not dependencies.empty and (release is None or release.may_hold_again):
            held_under = self.dependency_holds.hold(opened, delivery, dependencies, self.clock(),
                                                    held_since=release.held_since if release else None)
            if held_under is not None:
                return {**base, **held_under}
        window = noise.window(incident, incident.reported_at)
        review = (f"maintenance window {window.id!r} ({window.description}): decided, and sent to review instead "
                  "of paging" if window is not None else None)
        group = noise.group(incident)
        joined, took_over_from = None, None
        if group is not None and window is None:
            rule, group_key = group
            joined = self.store.join_group(group_key, opened.key, at=at, incident_id=incident.incident_id,
                                           until=iso(incident.reported_at + timedelta(minutes=rule.window_minutes)),
                                           severity=incident.severity)
            if not joined.is_leader:
                if rule.holds(incident.severity, joined.leader_severity):
                    return {**base, **self.holds.grouped(opened, delivery, rule.id, group_key, joined)}
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
            flapping_max=noise.flapping.max_opens if opens is not None and noise.flapping is not None else None,
            released_after=release.parent if release is not None else None,
            hold_ended=release.why if release is not None else None)
        summary = self.intake.route(incident, context, review_reason=review,
                                    noise=trace if trace != NoiseTrace() else None)
        self.store.routed(opened.key, delivery, summary["execution_name"],
                          group=group[1] if joined is not None and group is not None else None)
        if joined is not None and group is not None:
            self.store.group_routed(group[1], summary["execution_name"])
        self._paged(opened.key, incident, summary)
        result = {**summary, **base, "outcome": "routed" if summary["started"] else "duplicate"}
        if release is not None:
            result["released_after"] = release.parent
            result["reason"] = f"held under {release.parent}; {release.why}: decided and routed now"
        if window is not None:
            result["window"] = window.id
        if took_over_from is not None:
            result["reason"] = (f"more severe ({incident.severity}) than the leader {took_over_from} of its group "
                                "under noise.grouping: paged, and leads the group from now on")
        return result

    def sweep_holds(self, context: Any = None) -> dict:
        """The template's schedule: route every open incident whose maintenance window has ended,
        and every held child whose hold must end (its parent resolved, gone or not paged, or the
        hold's ceiling reached)."""
        now = self.clock()
        swept = self.holds.sweep(now, context)
        for result in swept["outcomes"]:
            row = self.store.get(result["key"])
            if row is not None and row.held_item is not None:
                self._paged(result["key"], Incident.model_validate_json(row.held_item), result)
        dependencies = self.intake.policy.dependencies
        if dependencies.empty:
            return swept
        released = self.dependency_holds.sweep(now, dependencies, self._reroute(context))
        return {**swept, "reason": f"{swept['reason']}; {len(released)} held incident(s) whose hold ended: decided",
                "outcomes": swept["outcomes"] + released}

    def _paged(self, key: str, incident: Incident, summary: dict) -> None:
        """A routed incident: when its record pages (escalates), it is marked paged and may hold
        its dependants from now on; one that went to a team queue holds nothing, and one that
        waits in review holds nothing until its reviewer's answer pages (`paged_by_workflow`)."""
        dependencies = self.intake.policy.dependencies
        name = summary.get("execution_name")
        if dependencies.empty or not name or not dependencies.parent_slots(incident):
            return  # it can hold nothing, whatever it pages
        if summary.get("escalate"):
            if self.store.paged(key, name):
                self.dependency_holds.cover(key, incident, dependencies)
        elif summary.get("route") == "review":
            self.store.point(name, key)  # its page, if its reviewer's answer sends one, names the execution

    def paged_by_workflow(self, detail: dict) -> dict:
        """The workflow paged for an item (`Item Escalated`: a reviewer's answer that escalates):
        an incident still open under that execution is marked paged and may hold its dependants
        from now on. Anything else (a ticket, an incident routed by another execution, resolved
        since, or one that can hold nothing) is ignored, with the reason."""
        dependencies = self.intake.policy.dependencies
        name, item = detail.get("execution_name"), detail.get("item")
        if detail.get("item_kind") != "incident" or not isinstance(name, str) or not isinstance(item, dict):
            return self._ignore(PAGED[0], None, "an Item Escalated event names no incident and execution: nothing to cover")
        key = self.store.pointed(name) if not dependencies.empty else None
        row = self.store.get(key) if key else None
        if key is None or row is None or row.status != "open" or row.execution_name != name:
            return self._ignore(PAGED[0], key, f"execution {name} paged for no open incident that may hold others")
        if not self.store.paged(key, name):
            return self._ignore(PAGED[0], key, f"incident {key} resolved meanwhile: it holds nothing")
        try:
            incident = Incident.model_validate(item)
        except ValidationError as error:  # the workflow carries the item as the intake routed it
            return self._ignore(PAGED[0], key, f"the escalated item is not an incident: {error.error_count()} error(s)")
        self.dependency_holds.cover(key, incident, dependencies)
        self.metrics.add_metric(name="IncidentsPagedByReview", unit=MetricUnit.Count, value=1)
        result = {"outcome": "paged", "key": key, "execution_name": name,
                  "reason": "its reviewer's answer paged: it holds its dependants while it is open"}
        self.logger.info("incident paged by its review", extra=result)
        return result

    def _write_audit(self, item_id: str, delivery: str, outcome: str, reason: str, detail: dict, item: str) -> None:
        """An audit row the intake writes itself (nothing was routed: no workflow audits it), one
        per delivery and outcome, named after them, so a retried event writes the same row."""
        policy = self.intake.policy
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        self.wiring.audit.write(AuditRow(
            item_id=item_id, item_kind="incident",
            execution_name=f"{outcome}-{hashlib.sha256(delivery.encode()).hexdigest()[:16]}",
            outcome=outcome, outcome_detail=json_text({"status": outcome, "reason": reason, **detail}),
            route="held", route_reason=reason, policy_name=policy.name, policy_version=policy.version,
            decisions="[]", item=item, decided_at=now, audited_at=now))

    def _ignore(self, source: str, key: str | None, reason: str, *, touched: bool = False) -> dict:
        self.metrics.add_metric(name="IgnoredEvents", unit=MetricUnit.Count, value=1)
        result = {"outcome": "ignored", "source": source, "key": key, "reason": reason, "touched_open_incident": touched}
        self.logger.info("event ignored", extra=result)
        return result

    def park(self, event: Any, error: SourceEventError | RecordTooLarge) -> dict:
        """An event no retry can map: into the incident DLQ at once, the reason in its attributes
        (a failure to park raises, so Lambda retries and its on-failure destination keeps it)."""
        sns = carried(event)  # as it came: an event parked for a bad notification is parked too
        event_id = (sns.get("MessageId") if sns is not None
                    else event.get("id") or event.get("alarmArn") if isinstance(event, dict) else None)
        self.wiring.dead_letters.send(json.dumps(event), {
            "failure_kind": error.failure_kind, "failure_reason": str(error), "event_id": str(event_id or ""),
            "source": ("aws:sns" if sns is not None else str(event.get("source", "")) if isinstance(event, dict)
                       else "")})
        self.metrics.add_metric(name="DeadLetteredEvents", unit=MetricUnit.Count, value=1)
        self.logger.warning("event parked in the incident DLQ", extra={"event_id": event_id, "reason": str(error)})
        return {"outcome": "dead_lettered", "event_id": event_id, "reason": str(error)}
