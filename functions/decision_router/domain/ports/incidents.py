"""The open incidents as the intakes correlate, group, hold and resolve them (the open-incident
store and the rows it hands over), and what CloudWatch says of an alarm now."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..dependencies import ParentEntry
from ..linking import OpenIncident

#: new: this delivery opens the incident (route it); retry: this delivery opened it but its
#: routing did not finish (route it again; the execution name makes that safe); update: another
#: delivery of an open incident (route nothing); duplicate: this delivery was seen already.
Claim = Literal["new", "retry", "update", "duplicate"]


class IncidentRow(BaseModel):
    """An incident's row, as the incident intake reads it (its other columns are the store's own)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    incident_key: str
    status: Literal["open", "resolved"]
    opened_by: str | None = None
    incident_id: str | None = None
    routed: bool = False
    execution_name: str | None = Field(None, description="The execution that routed it.")
    group: str | None = Field(None, description="The group it leads or was held in (grouping).")
    opens: list[str] = Field(default_factory=list, description="Its recent openings (flapping).")
    held_item: str | None = Field(None, description="The incident a maintenance window or a parent holds, as JSON.")
    resolved_by: str | None = Field(None, description="The delivery that resolved it.")
    held_under: str | None = Field(None, description="The parent incident's key it is held under (dependencies).")
    held_children: list[str] = Field(default_factory=list, description="The incidents held under it (dependencies).")
    parent_slots: list[str] = Field(default_factory=list, description="The slots it is registered in as a parent.")
    paged_by: str | None = Field(None, description="The execution that paged for it: only then does it hold "
                                                   "its dependants (dependencies).")
    held_at: str | None = Field(None, description="When a parent first held it (the hold's ceiling counts from then).")
    parent_severity: str | None = Field(None, description="The severity of the parent it is held under.")
    filed_under: list[str] = Field(default_factory=list, description=(
        "The link index's keys it was filed under when it opened (linking.filing_keys): its resolution "
        "takes it off them."))

    @property
    def held_by_parent(self) -> bool:
        """Held under a parent now: neither routed since (an execution) nor grouped when released."""
        return self.held_under is not None and self.execution_name is None and self.group is None


class GroupRow(BaseModel):
    """A group's row (`group#<rule>#<digest>`): its leader, its members and those still open."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    incident_key: str
    status: Literal["open", "resolved"]
    leader: str
    leader_incident_id: str
    members: list[str] = Field(default_factory=list)
    open_members: list[str] = Field(default_factory=list)
    execution_name: str | None = Field(None, description="The leader's execution (its review closes with the group).")
    leader_severity: str | None = Field(None, description="None on a row written before it was kept.")


class Joined(GroupRow):
    """The group an incident joined (or opened), as it is now; `is_leader`: whether it leads it."""

    is_leader: bool


class Opening(BaseModel):
    """The row an incident opens with (domain/open_incidents.py `opening`): what the store puts."""

    model_config = ConfigDict(frozen=True)

    incident_key: str
    opened_by: str
    incident_id: str
    source: str
    opened_at: str
    opens: list[str] = Field(default_factory=list, description="Its recent openings, this one included (flapping).")
    service: str | None = None
    reported_at: str | None = None
    title: str | None = None
    description: str | None = None
    filed_under: list[str] = Field(default_factory=list)


class NewGroup(BaseModel):
    """The row a group opens with: its first member leads it until `until`."""

    model_config = ConfigDict(frozen=True)

    incident_key: str
    leader: str
    leader_incident_id: str
    leader_severity: str
    opened_at: str
    until: str


# ------------------------------------------------------------------ storage: what the rules write through
class ClaimStorage(Protocol):
    """The incidents' rows as the claim rule (domain/open_incidents.py `claim`) writes them."""

    def get(self, key: str) -> IncidentRow | None: ...

    def put_opening(self, row: Opening) -> bool:
        """Put the row whole, only where there is none for its key or the one there is resolved and
        was opened by another delivery; False when that does not hold."""
        ...

    def touch(self, key: str, delivery: str) -> bool: ...


class GroupStorage(Protocol):
    """The groups' rows as the grouping rules (domain/open_incidents.py) write them."""

    def group(self, group_key: str) -> GroupRow | None: ...

    def open_group(self, group: NewGroup) -> bool:
        """Put the group's row whole, only where there is none, or it is resolved, or its window
        ended by `group.opened_at`; False when that does not hold."""
        ...

    def add_to_group(self, group_key: str, member: str, *, at: str) -> GroupRow | None:
        """Add `member` to the group's members and open members, only while it is open and its window
        has not ended by `at`: the row as it is then (None when that does not hold)."""
        ...

    def drop_open_member(self, group_key: str, member: str) -> GroupRow | None:
        """Take `member` off the group's open members (None: no such group)."""
        ...

    def close_group(self, group_key: str, delivery: str) -> GroupRow | None:
        """Resolve the group, only while it is open with no open members (None when that does not hold)."""
        ...


# ------------------------------------------------------------------ the ports the flows use, by concern
class IncidentRows(Protocol):
    """The incidents' rows: opened, counted, routed, resolved; which execution routes which."""

    def get(self, key: str) -> IncidentRow | None: ...

    def claim(self, key: str, delivery: str, *, incident_id: str, source: str, opens: list[str] | None = None,
              service: str | None = None, reported_at: str | None = None, title: str | None = None,
              description: str | None = None) -> Claim: ...

    def touch(self, key: str, delivery: str) -> bool: ...

    def routed(self, key: str, delivery: str, execution_name: str, *, group: str | None = None) -> None: ...

    def add_member(self, key: str, member: str) -> None: ...

    def resolve(self, key: str, delivery: str, reason: str) -> IncidentRow | None: ...

    def point(self, execution_name: str, key: str) -> None: ...

    def pointed(self, execution_name: str) -> str | None: ...


class IncidentHolds(Protocol):
    """The holds of the noise controls (a maintenance window's, released once it ends)."""

    def held(self, key: str, delivery: str, why: str, **fields: str) -> None: ...

    def release(self, key: str, now: str) -> bool: ...

    def expired_holds(self, now: str) -> list[IncidentRow]: ...

    def released(self, key: str, execution_name: str) -> None: ...


class IncidentGroups(Protocol):
    """The groups of incidents (grouping)."""

    def join_group(self, group_key: str, member: str, *, at: str, until: str, incident_id: str,
                   severity: str) -> Joined: ...

    def lead_group(self, group_key: str, member: str, *, incident_id: str, severity: str) -> None: ...

    def group_routed(self, group_key: str, execution_name: str) -> None: ...

    def leave_group(self, group_key: str, member: str, delivery: str) -> GroupRow | None: ...


class IncidentParents(Protocol):
    """Dependencies (domain/dependencies.py): paged incidents registered in slots, held children linked."""

    def parents(self, slot: str) -> list[ParentEntry]: ...

    def register_parent(self, slot: str, entry: ParentEntry) -> None: ...

    def unregister_parent(self, slot: str, key: str) -> None: ...

    def paged(self, key: str, execution_name: str) -> bool: ...

    def link_child(self, parent_key: str, child_key: str) -> bool: ...

    def unhold(self, key: str, delivery: str) -> None: ...

    def held_open(self) -> list[IncidentRow]: ...


class LinkIndex(Protocol):
    """The link index (domain/linking.py): open incidents filed by name and word, read by key."""

    def file(self, key: str, lookup_keys: Sequence[str], reported_at: str) -> None: ...

    def unfile(self, key: str, lookup_keys: Sequence[str]) -> None: ...

    def filed_under(self, lookup_keys: Sequence[str]) -> dict[str, dict[str, datetime]]: ...

    def open_incidents(self, keys: Sequence[str]) -> list[OpenIncident]: ...


class OpenIncidentStore(IncidentRows, IncidentHolds, IncidentGroups, IncidentParents, LinkIndex, Protocol):
    """Every concern of the open-incident table at once, for a flow that uses most of them."""


#: What CloudWatch says of an alarm now; "missing": no such alarm; "elsewhere": an alarm of
#: another account or region, which cannot be asked about.
AlarmState = Literal["OK", "ALARM", "INSUFFICIENT_DATA", "missing", "elsewhere"]


class AlarmStateReader(Protocol):
    def state_of(self, arn: str) -> AlarmState: ...
