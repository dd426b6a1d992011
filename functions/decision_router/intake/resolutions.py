"""The incident intake's resolutions: a source says an incident is over. Its open-incident row is
closed (an alarm's OK only once CloudWatch confirms it), a group is over when its last open
member is, and a review the incident still waits for is closed with the reason (the workflow
audits it as resolved_at_source).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Protocol

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from ..adapters.review import ReviewTaskGone
from ..domain.ports.incidents import AlarmStateReader, IncidentGroups, IncidentRow, IncidentRows, LinkIndex
from ..domain.ports.routing import Workflow
from ..sources.cloudwatch import parse_alarm_arn
from ..sources.events import Resolved
from .noise_holds import WriteAudit
from .wiring import Wiring


class Ignore(Protocol):
    def __call__(self, source: str, key: str | None, reason: str, *, touched: bool = False) -> dict: ...


class Resolutions:
    def __init__(self, alarm_states: AlarmStateReader, workflow: Workflow, wiring: Wiring, *, rows: IncidentRows,
                 groups: IncidentGroups, link_index: LinkIndex, write_audit: WriteAudit, ignore: Ignore,
                 logger: Logger, metrics: Metrics, release: Callable[[IncidentRow, Any], list[dict]] | None = None):
        """`rows` closes the incident's row, `groups` takes it off its group, `link_index` takes it
        off the keys it was filed under. `ignore` says (and counts) why an event resolves nothing;
        `write_audit` writes the audit row of a group whose last member is resolved. The
        pending-review index (from `wiring`) is read only when a resolved incident's execution still
        runs. `release` (with the policy's dependencies) routes what was held under the resolved
        incident."""
        self.rows, self.groups, self.link_index = rows, groups, link_index
        self.alarm_states, self.workflow, self.wiring = alarm_states, workflow, wiring
        self.release = release
        self.write_audit, self.ignore = write_audit, ignore
        self.logger, self.metrics = logger, metrics

    def _unfile(self, was: IncidentRow) -> None:
        """Take the resolved incident off the link index's keys it was filed under. A failure is
        logged and counted: the entry stays, and ticket intakes skip it (they read only open rows)."""
        try:
            self.link_index.unfile(was.incident_key, was.filed_under)
        except Exception as error:  # noqa: BLE001 - a stale link entry is harmless: never fail a resolution
            self.metrics.add_metric(name="LinkUnfilingFailed", unit=MetricUnit.Count, value=1)
            self.logger.warning("the resolved incident could not be taken off the link index", extra={
                "key": was.incident_key, "reason": f"{type(error).__name__}: {error}"})

    def resolve(self, outcome: Resolved, delivery: str, context: Any = None) -> dict:
        refused = self._unconfirmed(outcome)
        if refused is not None:
            touched = self.rows.touch(outcome.key, delivery)
            return self.ignore(outcome.source, outcome.key, refused, touched=touched)
        was = self.rows.resolve(outcome.key, delivery, outcome.reason)
        if was is None and self.release is not None:
            again = self.rows.get(outcome.key)
            if again is not None and again.resolved_by == delivery and again.held_children:
                # This delivery resolved it and is retried: its release may not have finished.
                released = self.release(again, context)
                return {"outcome": "resolved", "key": outcome.key, "execution_name": again.execution_name,
                        "reason": f"{outcome.reason}; resolved already by this delivery: its held incidents "
                                  f"released again ({len(released)} routed now)", "released": released}
        if was is None:
            return self.ignore(outcome.source, outcome.key, f"{outcome.reason}; no open incident has this key "
                               "(already resolved, or never opened here)")
        self.metrics.add_metric(name="IncidentsResolved", unit=MetricUnit.Count, value=1)
        self._unfile(was)
        name = was.execution_name
        reason = outcome.reason
        group_key = was.group
        if group_key:  # a grouped incident is over when every member is
            group = self.groups.leave_group(group_key, outcome.key, delivery)
            still = group.open_members if group else []
            name = None if still or group is None else group.execution_name
            members = group.members if group else []
            if still:
                reason += f"; its group still has {len(still)} open member(s) and stays open"
            elif len(members) > 1:  # the grouped incident's own audit says who was in it
                reason += f"; the last open member of its group: the group of {len(members)} is resolved"
                self.write_audit(group.leader_incident_id if group else outcome.key, delivery,
                                 "group_resolved", f"every member of {group_key} is resolved",
                                 {"group": group_key, "members": members, "execution_name": name},
                                 json.dumps({"group": group_key, "members": members}))
        closed = self._close_review(name, outcome.reason) if name else False
        held = bool(was.held_under) and not was.execution_name  # (a released child was routed: it paged)
        if held:
            reason += f"; it was held under {was.held_under}: nobody was paged for it, and nothing stays open"
        released = self.release(was, context) if self.release is not None else []
        if released:
            reason += f"; {len(released)} incident(s) held under it and still open: routed now"
        result = {"outcome": "resolved", "key": outcome.key, "reason": reason, "execution_name": name,
                  "review_closed": closed, **({"released": released} if self.release is not None else {}),
                  **({"resolved_held_under": was.held_under} if held else {})}
        self.logger.info("incident resolved", extra=result)
        return result

    def _unconfirmed(self, outcome: Resolved) -> str | None:
        """Why an alarm's "OK" does not resolve its incident (None: it does). CloudWatch is asked
        for the alarm's state now: only CloudWatch can say an alarm is OK, and the message that
        says so may come from whoever can publish to the topic or write to a dead-letter queue.
        An alarm of another account cannot be asked about: its OK is taken as it comes (the bus
        policy says who may put those)."""
        row = self.rows.get(outcome.key) if parse_alarm_arn(outcome.key) is not None else None
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

    def _close_review(self, execution_name: str, reason: str) -> bool:
        """Close the review the incident's execution still waits for; False when it waits for none."""
        if self.workflow.status(execution_name) != "RUNNING":
            return False
        reviews = self.wiring.pending_reviews
        row = reviews.get(execution_name)
        if row is None:  # it waits for no review (or its writer has not put the row yet)
            return False
        try:
            self.wiring.review_tasks.close_resolved(row.task_token, f"resolved at the source: {reason}")
        except ReviewTaskGone:
            return False  # answered or timed out meanwhile: the workflow has its outcome (and removed the row)
        reviews.remove(execution_name, row.task_token)  # the workflow removes it too; either may be first
        self.metrics.add_metric(name="ReviewsClosedResolved", unit=MetricUnit.Count, value=1)
        return True
