"""Noise controls, as policy data (a policy's `noise`): which native-source incidents join an open
one instead of paging (grouping), which are held because their source keeps opening and resolving
them (flapping), and which are recorded without a page during a maintenance window. Pure code: the
intake (decision_router.intake.incidents, its holds in intake.noise_holds) applies them with the
open-incident store.

Times are the incident's own (`reported_at`, the time its source says it happened), so an alert
raised during a window is the window's even when it is delivered late, and a replayed burst groups
as it happened.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import Field, StringConstraints, field_validator, model_validator

from ..items import Item, field_value
from ..validation import StrictModel
from .conditions import Condition

Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
Minutes = Annotated[int, Field(ge=1, le=7 * 24 * 60)]
def cron_problem(expression: str) -> str | None:
    """Why `expression` is not a 5-field cron expression cronsim reads (minute hour day-of-month
    month day-of-week), or None."""
    try:
        CronSim(expression, datetime(2026, 1, 1, tzinfo=timezone.utc))
    except CronSimError as error:
        return f"cron {expression!r}: {error} (5 fields: minute hour day-of-month month day-of-week)"
    return None


class MaintenanceWindow(StrictModel):
    """A scheduled window: from each time `cron` names for `duration_minutes`, or once from `start`
    to `end`, in `time_zone`. Incidents matching every `when` condition that happen inside it are
    recorded and not paged (`action: suppress`), or decided and sent to review (`action: review`).
    A sev1 is never held unless `include_sev1`."""

    id: Id
    description: Text
    cron: str | None = Field(None, description="5-field cron of each window's start, in time_zone")
    duration_minutes: Minutes | None = None
    start: datetime | None = Field(None, description="a one-off window's start (no offset: in time_zone)")
    end: datetime | None = None
    time_zone: str = "UTC"
    when: list[Condition] = Field(default_factory=list, description="the incidents it holds (every condition)")
    action: Literal["suppress", "review"] = "suppress"
    include_sev1: bool = False

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as Europe/Dublin)") from None
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        problem = cron_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> "MaintenanceWindow":
        if (self.cron is None) == (self.start is None):
            raise ValueError("give either cron (with duration_minutes) or start and end")
        if self.cron is not None and self.duration_minutes is None:
            raise ValueError("a cron window needs duration_minutes")
        if self.start is not None and (self.end is None or self._local(self.end) <= self._local(self.start)):
            raise ValueError("a start/end window needs an end after its start")
        return self

    def _local(self, at: datetime) -> datetime:
        zone = ZoneInfo(self.time_zone)
        return at.replace(tzinfo=zone) if at.tzinfo is None else at.astimezone(zone)

    def active(self, at: datetime) -> bool:
        """Whether `at` (an aware time) falls inside the window."""
        local = self._local(at)
        if self.start is not None and self.end is not None:
            return self._local(self.start) <= local < self._local(self.end)
        assert self.duration_minutes is not None
        start = self._latest_start(local)
        return start is not None and local < start + timedelta(minutes=self.duration_minutes)

    def _latest_start(self, local: datetime) -> datetime | None:
        """A cron window's latest start at or before `local`'s minute (cronsim steps back from
        just after it), in the window's time zone, daylight saving included."""
        assert self.cron is not None
        minute = local.replace(second=0, microsecond=0)
        return next(CronSim(self.cron, minute + timedelta(seconds=1), reverse=True), None)

    def ends(self, at: datetime) -> datetime:
        """When the occurrence of the window that `at` falls in ends (`at` inside it)."""
        if self.end is not None:
            return self._local(self.end)
        assert self.duration_minutes is not None
        start = self._latest_start(self._local(at))
        assert start is not None, "ends() is asked only of a time inside the window"
        return start + timedelta(minutes=self.duration_minutes)

    def holds(self, item: Item) -> bool:
        if getattr(item, "severity", None) == "sev1" and not self.include_sev1:
            return False
        return all(condition.holds(item) for condition in self.when)


def severity_rank(severity: str | None) -> int:
    """1 for sev1 (the most severe) to 4; an unknown severity ranks as the most severe, so that
    a comparison with it never holds a page."""
    return int(severity[3:]) if severity in SEVERITIES else 1


SEVERITIES = ("sev1", "sev2", "sev3", "sev4")


class Grouping(StrictModel):
    """Incidents whose `match` fields are equal, opened within `window_minutes` of the first, are
    one incident: the first is routed (one page), the others join it as members; it is resolved
    when every member is. A member more severe than the group's leader is never held: it is
    routed (it pages) and leads the group from then on. A sev1 is never held unless
    `include_sev1`, so each critical pages."""

    id: Id
    description: Text
    match: list[str] = Field(min_length=1, description="the item fields that must be equal (service, evidence.alertname)")
    window_minutes: Minutes
    sources: list[str] = Field(default_factory=list, description="only incidents of these sources (empty: any)")
    include_sev1: bool = Field(False, description="whether a sev1 may be held as a member of a sev1 leader's group "
                                                   "(by default every sev1 pages)")

    def holds(self, severity: str | None, leader_severity: str | None) -> bool:
        """Whether a member of `severity` is held in a group whose leader has `leader_severity`:
        never when it is more severe than the leader (its page would be lost), nor a sev1 unless
        the rule includes sev1."""
        if severity_rank(severity) < severity_rank(leader_severity):
            return False
        return severity_rank(severity) > 1 or self.include_sev1

    def group_key(self, item: Item) -> str | None:
        """The key of the group the incident belongs to; None when it has no value for a field."""
        if self.sources and getattr(item, "source", None) not in self.sources:
            return None
        values = [field_value(item, field) for field in self.match]
        if any(v is None or v == "" for v in values):
            return None
        digest = hashlib.sha256(json.dumps(values, default=str).encode()).hexdigest()[:24]
        return f"group#{self.id}#{digest}"


class Flapping(StrictModel):
    """An incident of one source key that opens more than `max_opens` times within
    `window_minutes` is flapping: the openings past that are held on it, not paged again."""

    max_opens: int = Field(ge=1, le=100)
    window_minutes: Minutes
    include_sev1: bool = Field(False, description="whether a flapping sev1 is held too (by default each opening "
                                                   "of a sev1 pages)")

    def applies(self, severity: str | None) -> bool:
        return severity_rank(severity) > 1 or self.include_sev1


class NoiseControls(StrictModel):
    grouping: list[Grouping] = Field(default_factory=list, description="first match wins")
    flapping: Flapping | None = None
    maintenance: list[MaintenanceWindow] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.grouping or self.flapping or self.maintenance)

    def fields(self) -> list[tuple[str, str]]:
        """(where, field) of every field the controls name, for the policy's validation."""
        named = [(f"noise.grouping {g.id!r} match", f) for g in self.grouping for f in g.match]
        named += [(f"noise.maintenance {w.id!r} when", c.field) for w in self.maintenance for c in w.when]
        return named

    def window(self, item: Item, at: datetime) -> MaintenanceWindow | None:
        """The window that holds `item`, which happened `at` (the hold lasts until `ends(at)`)."""
        return next((w for w in self.maintenance if w.holds(item) and w.active(at)), None)

    def group(self, item: Item) -> tuple[Grouping, str] | None:
        for rule in self.grouping:
            key = rule.group_key(item)
            if key is not None:
                return rule, key
        return None


def aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def recent(times: list[str], at: datetime, minutes: int) -> list[str]:
    """The ISO times of `times` within `minutes` before `at` (flapping's window)."""
    since = aware(at) - timedelta(minutes=minutes)
    return [t for t in times if aware(datetime.fromisoformat(t)) > since]
