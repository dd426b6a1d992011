"""The noise controls' side of the incident intake: an incident that flaps, falls in a maintenance
window that suppresses, or joins an open incident of its group is recorded and held, not paged
(its open-incident row says why, an audit row of its own outcome keeps the reason, a metric counts
it); a hold whose window has ended is routed then, once.

Which incident is held is the policy's to say (`domain/noise.py`); the incident intake
(`intake/incidents.py`) asks here once it has claimed the incident's row.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Protocol

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from ..domain.noise import NoiseControls, aware
from ..domain.ports.incidents import IncidentHolds, IncidentRows, Joined
from ..domain.why import NoiseTrace
from ..items import Incident
from ..sources.events import Opened

#: The metric counting each outcome of a noise control.
HELD_METRICS = {"grouped": "IncidentsGrouped", "flapping": "IncidentsFlapping", "suppressed": "IncidentsSuppressed"}


def iso(at: datetime) -> str:
    """One form for every time the store compares as text (UTC, milliseconds)."""
    return aware(at).astimezone(timezone.utc).isoformat(timespec="milliseconds")


class Route(Protocol):
    def __call__(self, incident: Incident, context: Any, /) -> dict: ...


class WriteAudit(Protocol):
    def __call__(self, item_id: str, delivery: str, outcome: str, reason: str, detail: dict, item: str) -> None: ...


class NoiseHolds:
    def __init__(self, *, rows: IncidentRows, holds: IncidentHolds, route: Route, write_audit: WriteAudit,
                 logger: Logger, metrics: Metrics):
        """`holds` records and releases the holds, `rows` lists a grouped incident on its leader's
        row; `route` hands a released incident to the routing workflow; `write_audit` writes the
        intake's own audit rows (nothing was routed, so no workflow audits a held incident)."""
        self.rows, self.holds, self.route, self.write_audit = rows, holds, route, write_audit
        self.logger, self.metrics = logger, metrics

    def held(self, opened: Opened, delivery: str, opens: list[str] | None,
             noise: NoiseControls) -> dict | None:
        """Flapping, or a maintenance window that suppresses: the incident is recorded (its row,
        an audit row of its own outcome) and not routed. None when neither holds it."""
        incident = opened.incident
        if (noise.flapping is not None and opens is not None and len(opens) > noise.flapping.max_opens
                and noise.flapping.applies(incident.severity)):
            reason = (f"flapping: opened {len(opens)} times in {noise.flapping.window_minutes} min (more than "
                      f"{noise.flapping.max_opens}); held as one flapping incident, paged once, not again")
            self.holds.held(opened.key, delivery, reason, flapping="true")
            return self._record(opened, delivery, "flapping", reason, {"opens": opens}, NoiseTrace(
                flapping_opens=len(opens), flapping_max=noise.flapping.max_opens, held="flapping"))
        window = noise.window(incident, incident.reported_at)
        if window is not None and window.action == "suppress":
            until = window.ends(incident.reported_at)
            reason = (f"maintenance window {window.id!r} ({window.description}): recorded, not paged while the "
                      f"window lasts (until {iso(until)}); a delivery after that routes it if it is still open")
            self.holds.held(opened.key, delivery, reason, window=window.id, held_until=iso(until),
                            held_item=incident.model_dump_json())
            return self._record(opened, delivery, "suppressed", reason, {"window": window.id}, NoiseTrace(
                window=window.id, window_action=window.action, held="suppressed"))
        return None

    def grouped(self, opened: Opened, delivery: str, rule: str, group_key: str, joined: Joined) -> dict:
        """An incident held in the group of an open incident (the caller has checked that its
        severity may be held: a more severe one is routed and leads the group)."""
        reason = (f"grouped by {rule!r} into open incident {joined.leader_incident_id} "
                  f"({len(joined.members)} member(s)): it pages nobody again")
        self.holds.held(opened.key, delivery, reason, group=group_key)
        self.rows.add_member(joined.leader, opened.key)
        return self._record(opened, delivery, "grouped", reason, {
            "group": group_key, "leader": joined.leader, "leader_incident_id": joined.leader_incident_id,
            "members": joined.members, "leader_execution_name": joined.execution_name},
            NoiseTrace(grouping=rule, group_leader=joined.leader_incident_id, held="grouped"))

    def release(self, opened: Opened, delivery: str, now: datetime, context: Any) -> dict | None:
        """A later delivery of an incident a maintenance window held, once the window is over:
        routed now (it pages as it would have), once; None when there is no such hold."""
        if not self.holds.release(opened.key, iso(now)):
            return None
        summary = self.route(opened.incident, context)
        self.holds.released(opened.key, summary["execution_name"])
        reason = "its maintenance window ended while it was still open: routed now"
        self.logger.info("held incident released", extra={"key": opened.key, "delivery": delivery})
        self.metrics.add_metric(name="IncidentsReleased", unit=MetricUnit.Count, value=1)
        return {**summary, "outcome": "routed", "reason": reason}

    def sweep(self, now: datetime, context: Any) -> dict:
        """Route every open incident whose maintenance window has ended (the template's schedule
        calls this every few minutes), so a hold never outlasts its window by more than that."""
        results = []
        for row in self.holds.expired_holds(iso(now)):
            if row.held_item is None:
                continue  # held by no window: nothing to route here
            opened = Opened(row.incident_key, Incident.model_validate_json(row.held_item))
            released = self.release(opened, "sweep", now, context)
            if released is not None:
                results.append({"key": opened.key, "incident_id": opened.incident.incident_id, **released})
        return {"outcome": "swept", "reason": f"{len(results)} incident(s) held by a window that ended: routed",
                "outcomes": results}

    def _record(self, opened: Opened, delivery: str, outcome: str, reason: str, detail: dict,
                trace: NoiseTrace) -> dict:
        """An incident a noise control held: counted, logged, and audited with its own outcome (one
        row per delivery, named after it, so a retried event writes the same row) and its reason
        (`why`: the noise control that held it)."""
        self.write_audit(opened.incident.incident_id, delivery, outcome, reason,
                         {**detail, "why": trace.model_dump(mode="json", exclude_none=True)},
                         opened.incident.model_dump_json())
        self.metrics.add_metric(name=HELD_METRICS[outcome], unit=MetricUnit.Count, value=1)
        result = {"outcome": outcome, "reason": reason, **detail}
        self.logger.info("incident held by a noise control", extra={"key": opened.key, **result})
        return result
