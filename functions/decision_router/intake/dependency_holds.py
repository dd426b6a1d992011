"""The dependencies' side of the incident intake (domain/dependencies.py): a new incident whose
parent is open and paged is held under it (no page; linked on both rows; audited with the parent
named); the hold ends when the parent resolves, when the parent is gone or was never paged, when
the child would page past its parent, or at the policy's ceiling, and the child is decided and
routed then.

Guarantees, in the order the writes make them:
- a child is marked held under its parent, then linked on the parent's row by a write that holds
  only while the parent is open and paged; the parent's resolution reads that list with the write
  that closes it, so a linked child is released by it, and a child whose link comes after is
  refused and decided at once (its mark taken off). An invocation that dies between the two
  writes leaves a mark the sweep finds: no child stays held under a parent that resolved;
- a paged incident registers in its slots, a held one never does: holds never chain or loop;
- a released child stays marked held under its parent until an execution routes it, so a
  resolution or a sweep that fails half way is retried and nothing held is left open with nobody
  told; the intake's sweep routes any hold that outlives its parent, its page or its ceiling;
- a child's own resolution closes its row like any other (nothing was routed for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from ..domain.dependencies import Dependencies, ParentEntry, held_reason, hhmm, may_hold
from ..domain.ports.incidents import IncidentHolds, IncidentParents, IncidentRow, IncidentRows
from ..domain.why import NoiseTrace
from ..items import Incident
from ..sources.events import Opened
from .noise_holds import WriteAudit, iso


@dataclass(frozen=True)
class Release:
    """Why a held child is decided now: the parent it was held under (its incident id), in words,
    and whether another paged parent may hold it again (not past the ceiling, nor when it would
    page past its parent)."""

    parent: str
    why: str
    may_hold_again: bool = True
    held_since: str | None = None


#: Routes a released child again (its delivery: the one that opened it), as a new incident is
#: routed after the noise controls: another paged parent holds it again, or it is decided.
Reroute = Callable[[Opened, str, Release], dict]


def hold_ended(row: IncidentRow, parent: IncidentRow | None, now: datetime, dependencies: Dependencies,
               severity: str | None = None) -> Release | None:
    """Why the hold of the open child `row` must end now (None: it holds): its parent resolved,
    is gone or was not paged; it has been held `hold_minutes`; or (`severity`, a new event's) it
    is now more severe than its parent, or newly a sev1."""
    parent_id = (parent.incident_id if parent is not None else None) or str(row.held_under)
    since = row.held_at
    if parent is None:
        return Release(parent_id, "its parent incident is gone (erased, or expired)", held_since=since)
    if parent.status != "open":
        return Release(parent_id, "its parent resolved while it was still open", held_since=since)
    if parent.paged_by is None:
        return Release(parent_id, "its parent was never paged, so it covers nothing", held_since=since)
    if since is not None and dependencies.ceiling_passed(since, now):
        return Release(parent_id, f"held {dependencies.hold_minutes} min, the ceiling of a hold "
                                  "(dependencies.hold_minutes)", may_hold_again=False, held_since=since)
    held = Incident.model_validate_json(row.held_item) if row.held_item else None
    if severity is not None and held is not None and severity != held.severity and not may_hold(
            severity, row.parent_severity, include_sev1=held.severity == "sev1"):
        return Release(parent_id, f"its severity rose to {severity}, past what its parent "
                                  f"({row.parent_severity}) may hold", may_hold_again=False, held_since=since)
    return None


class DependencyHolds:
    def __init__(self, *, rows: IncidentRows, holds: IncidentHolds, parents: IncidentParents, write_audit: WriteAudit,
                 logger: Logger, metrics: Metrics):
        """`parents` keeps the slots and the children linked under a parent, `holds` marks a child
        held, `rows` reads the incidents' rows (a parent's, a child's)."""
        self.rows, self.holds, self.parents = rows, holds, parents
        self.write_audit, self.logger, self.metrics = write_audit, logger, metrics

    def hold(self, opened: Opened, delivery: str, dependencies: Dependencies, now: datetime,
             held_since: str | None = None) -> dict | None:
        """Hold `opened` under its oldest paged parent that may hold it; None when none does (or
        when it was first held `held_since` more than the ceiling ago)."""
        incident = opened.incident
        if held_since is not None and dependencies.ceiling_passed(held_since, now):
            return None
        for candidate in dependencies.candidates(incident):
            for parent in self.parents.parents(candidate.slot):
                if (parent.key == opened.key or not candidate.may_be_held_by(parent)
                        or not may_hold(incident.severity, parent.severity, candidate.include_sev1)):
                    continue
                rule = candidate.rule
                reason = (f"{held_reason(parent)} ({'a dependency' if rule == 'dependencies' else f'inhibition rule {rule!r}'}"
                          "), paged for it: it pages nobody while that incident is open; decided and routed when "
                          f"it resolves, or after {dependencies.hold_minutes} min at most")
                # Marked first, then linked only while the parent is open and paged: a resolution
                # either lists the child (and releases it) or comes first and refuses the link.
                self.holds.held(opened.key, delivery, reason, held_under=parent.key,
                                held_item=incident.model_dump_json(), held_at=held_since or iso(now),
                                parent_severity=parent.severity)
                if not self.parents.link_child(parent.key, opened.key):
                    self.parents.unhold(opened.key, delivery)  # resolved since it registered: it holds nothing
                    continue
                return self._held(opened, delivery, parent, rule, reason)
        return None

    def _held(self, opened: Opened, delivery: str, parent: ParentEntry, rule: str, reason: str) -> dict:
        incident = opened.incident
        trace = NoiseTrace(held="held", held_under=parent.incident_id, parent_service=parent.service,
                           parent_opened=hhmm(parent.opened_at))
        detail = {"held_under": parent.key, "parent_incident_id": parent.incident_id, "parent_service": parent.service,
                  "rule": rule}
        self.write_audit(incident.incident_id, delivery, "held", reason,
                         {**detail, "why": trace.model_dump(mode="json", exclude_none=True)},
                         incident.model_dump_json())
        self.metrics.add_metric(name="IncidentsHeldUnderParent", unit=MetricUnit.Count, value=1)
        result = {"outcome": "held", "reason": reason, **detail}
        self.logger.info("incident held under its parent", extra={"key": opened.key, **result})
        return result

    def cover(self, key: str, incident: Incident, dependencies: Dependencies) -> None:
        """Register a paged incident in its slots: it may hold its dependants from now on."""
        for slot in dependencies.parent_slots(incident):
            self.parents.register_parent(slot.slot, ParentEntry(
                key=key, incident_id=incident.incident_id, service=incident.service, severity=incident.severity,
                opened_at=iso(incident.reported_at), two_sided=slot.two_sided))

    def release(self, was: IncidentRow, reroute: Reroute) -> list[dict]:
        """A resolved incident: out of its slots first (no new child is held under it), then each
        child held under it that is still open and not routed is decided now (or held again under
        another paged parent)."""
        for slot in was.parent_slots:
            self.parents.unregister_parent(slot, was.incident_key)
        results = []
        for child in was.held_children:
            row = self.rows.get(child)
            if (row is None or row.status != "open" or row.held_under != was.incident_key or not row.held_by_parent
                    or row.held_item is None or row.opened_by is None):
                continue  # resolved itself, held again elsewhere, or routed already
            why = Release(was.incident_id or was.incident_key, "its parent resolved while it was still open",
                          held_since=row.held_at)
            results.append(self._release(row, Incident.model_validate_json(row.held_item), why, reroute))
        if results:
            self.logger.info("held children released", extra={"parent": was.incident_key, "released": results})
        return results

    def recheck(self, row: IncidentRow, incident: Incident, now: datetime, dependencies: Dependencies,
                reroute: Reroute) -> dict | None:
        """A new event of an open incident: when it is held and its hold must end (its parent
        resolved, is gone or not paged, the ceiling passed, or it is now too severe to hold), it is
        decided now, as this event describes it; None when it is not held or still may be."""
        if not row.held_by_parent or row.held_under is None or row.opened_by is None:
            return None
        why = hold_ended(row, self.rows.get(row.held_under), now, dependencies, severity=incident.severity)
        if why is None:
            return None
        return self._release(row, incident, why, reroute)

    def sweep(self, now: datetime, dependencies: Dependencies, reroute: Reroute) -> list[dict]:
        """Every open hold whose parent resolved, is gone or is not paged, or that reached the
        ceiling: decided and routed now (the template's schedule, every few minutes)."""
        results = []
        for row in self.parents.held_open():
            if not row.held_by_parent or row.held_under is None or row.held_item is None or row.opened_by is None:
                continue
            why = hold_ended(row, self.rows.get(row.held_under), now, dependencies)
            if why is not None:
                results.append(self._release(row, Incident.model_validate_json(row.held_item), why, reroute))
        return results

    def _release(self, row: IncidentRow, incident: Incident, why: Release, reroute: Reroute) -> dict:
        assert row.opened_by is not None
        routed = reroute(Opened(row.incident_key, incident), row.opened_by, why)
        self.metrics.add_metric(name="HeldIncidentsReleased", unit=MetricUnit.Count, value=1)
        # Whatever became of it (routed, held again, grouped), it says whose hold ended.
        return {"key": row.incident_key, "incident_id": incident.incident_id, **routed, "released_after": why.parent}
