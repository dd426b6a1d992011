"""The dependencies' side of the incident intake (domain/dependencies.py): a new incident whose
parent is open and covered is held under it (no page; linked on both rows; audited with the
parent named), and the parent's resolution routes each held child still open, then.

Guarantees, in the order the writes make them:
- a child is linked on its parent's row (a conditional write: only while the parent is open and
  covered) before it is marked held, so the parent's resolution, which reads that list with the
  row it closes, sees every child held under it; a child whose link is refused is not held;
- a released child stays marked held under its parent until an execution routes it, so a
  resolution that fails half way is retried (the same delivery releases again) and nothing held
  is left open with nobody told;
- a child's own resolution closes its row like any other (nothing was routed for it).
"""

from __future__ import annotations

from typing import Callable

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from ..domain.dependencies import Dependencies, ParentEntry, held_reason, hhmm, may_hold
from ..domain.ports import IncidentRow, OpenIncidentStore
from ..domain.why import NoiseTrace
from ..items import Incident
from ..sources.events import Opened
from .noise_holds import WriteAudit, iso

#: Routes a released child again (its delivery: the one that opened it; the parent's incident
#: id), as a new incident is routed after the noise controls: another covered parent holds it
#: again, or it pages.
Reroute = Callable[[Opened, str, str], dict]


class DependencyHolds:
    def __init__(self, store: OpenIncidentStore, *, write_audit: WriteAudit, logger: Logger, metrics: Metrics):
        self.store, self.write_audit, self.logger, self.metrics = store, write_audit, logger, metrics

    def hold(self, opened: Opened, delivery: str, dependencies: Dependencies) -> dict | None:
        """Hold `opened` under its oldest covered parent that may hold it; None when none does."""
        incident = opened.incident
        for candidate in dependencies.candidates(incident):
            for parent in self.store.parents(candidate.slot):
                if parent.key == opened.key or not may_hold(incident.severity, parent.severity, candidate.include_sev1):
                    continue
                if not self.store.link_child(parent.key, opened.key):
                    continue  # resolved since it registered: it holds nothing
                return self._held(opened, delivery, dependencies, parent, candidate.rule)
        return None

    def _held(self, opened: Opened, delivery: str, dependencies: Dependencies, parent: ParentEntry,
              rule: str) -> dict:
        incident = opened.incident
        reason = (f"{held_reason(parent)} ({'a dependency' if rule == 'dependencies' else f'inhibition rule {rule!r}'}):"
                  " it pages nobody while that incident is open; routed when it resolves, if still open")
        self.store.held(opened.key, delivery, reason, held_under=parent.key, held_item=incident.model_dump_json())
        self.cover(opened.key, incident, dependencies)  # a chain: it may hold children of its own
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
        """Register a covered incident (paged, or held under a covered parent) in its slots."""
        slots = dependencies.parent_slots(incident)
        if not slots:
            return
        entry = ParentEntry(key=key, incident_id=incident.incident_id, service=incident.service,
                            severity=incident.severity, opened_at=iso(incident.reported_at))
        for slot in slots:
            self.store.register_parent(slot, entry)

    def release(self, was: IncidentRow, reroute: Reroute) -> list[dict]:
        """A resolved incident: out of its slots first (no new child is held under it), then each
        child held under it that is still open and not routed is routed now (or held again under
        another covered parent)."""
        for slot in was.parent_slots:
            self.store.unregister_parent(slot, was.incident_key)
        results = []
        for child in was.held_children:
            row = self.store.get(child)
            if (row is None or row.status != "open" or row.held_under != was.incident_key or row.execution_name
                    or row.held_item is None or row.opened_by is None):
                continue  # resolved itself, held again elsewhere, or routed already
            opened = Opened(child, Incident.model_validate_json(row.held_item))
            routed = reroute(opened, row.opened_by, was.incident_id or was.incident_key)
            self.metrics.add_metric(name="HeldIncidentsReleased", unit=MetricUnit.Count, value=1)
            results.append({"key": child, "incident_id": opened.incident.incident_id, **routed})
        if results:
            self.logger.info("held children released", extra={"parent": was.incident_key, "released": results})
        return results
