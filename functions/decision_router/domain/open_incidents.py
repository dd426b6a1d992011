"""The rules of the open incidents, over stores that only keep rows (domain/ports/incidents.py):
what a claim that lost its conditional write means, and how a group is joined and left.

- `opening`: the row an incident opens with (its title and description bounded, the link index's
  keys it is filed under, so its resolution finds them again).
- `claim`: open the incident of a key with a delivery, or say why not. The store's conditional put
  holds for a new key, or a resolved one reopened by another delivery (a flap); when it does not,
  the row as it is now decides (`after_lost_claim`): the opening delivery again (`retry` until it
  is routed, then `duplicate`), another delivery of an open incident (`update`, counted once by
  `touch`), or the row changed meanwhile (claim again, at most `MAX_RACES` times).
- `join_group`, `leave_group`: a group of incidents (grouping) opens with its first member (its
  leader) and closes with its last open member; each step is one conditional write, and a write
  lost to a concurrent one is taken again from the row as it is then.

The stores are the DynamoDB adapters and their in-memory fakes: each keeps the storage semantics
(which conditional write holds), and the rules here are the only copy of what follows from them.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal

from .linking import MAX_DESCRIPTION, MAX_TITLE, bounded, filing_keys
from .ports.incidents import Claim, ClaimStorage, GroupRow, GroupStorage, Joined, NewGroup, Opening

#: Conditional writes lost to a concurrent writer before giving up (the event is then retried).
MAX_RACES = 3

#: What a claim whose put did not hold does next: answer (a Claim), count the delivery on the open
#: incident (`touch`), or claim again (`again`: the row was removed, or resolved, meanwhile).
AfterLostClaim = Claim | Literal["touch", "again"]


class StoreRaced(RuntimeError):
    """A row kept changing under `MAX_RACES` conditional writes: the event is retried."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def opening(key: str, delivery: str, *, incident_id: str, source: str, opened_at: str,
            opens: list[str] | None = None, service: str | None = None, reported_at: str | None = None,
            title: str | None = None, description: str | None = None) -> Opening:
    """The row the incident of `key` opens with. Its service and reported time are kept only
    together (a ticket is linked to neither alone), and then its title and description cut to
    MAX_TITLE and MAX_DESCRIPTION, and the link index's keys it is filed under."""
    row = Opening(incident_key=key, opened_by=delivery, incident_id=incident_id, source=source,
                  opened_at=opened_at, opens=list(opens or []))
    if not (service and reported_at):
        return row
    return row.model_copy(update={
        "service": service, "reported_at": reported_at, "title": bounded(title, MAX_TITLE),
        "description": bounded(description, MAX_DESCRIPTION), "filed_under": filing_keys(service, title, description)})


def after_lost_claim(row_status: Literal["open", "resolved"] | None, opened_by: str | None, routed: bool,
                     delivery: str) -> AfterLostClaim:
    """What a claim by `delivery` does once its put did not hold, from the row as it is now (its
    status, None when it is gone; the delivery that opened it; whether that one was routed)."""
    if row_status is None:
        return "again"  # removed meanwhile
    if opened_by == delivery:
        return "retry" if row_status == "open" and not routed else "duplicate"
    if row_status == "open":
        return "touch"
    return "again"  # resolved meanwhile by another delivery: it reopens


def claim(store: ClaimStorage, row: Opening, delivery: str) -> Claim:
    """Open the incident of `row` with `delivery`, or say why not (module docstring)."""
    for _ in range(MAX_RACES):
        if store.put_opening(row):
            return "new"
        now = store.get(row.incident_key)
        step = after_lost_claim(now.status if now else None, now.opened_by if now else None,
                                now.routed if now else False, delivery)
        if step == "again":
            continue
        if step == "touch":
            return "update" if store.touch(row.incident_key, delivery) else "duplicate"
        return step
    raise StoreRaced(f"open-incident store: {row.incident_key!r} kept changing under {MAX_RACES} claims; "
                     "the event is retried")


def join_group(store: GroupStorage, group: NewGroup) -> Joined:
    """Put `group.leader` in the open group of `group.incident_key`, or open the group with it (its
    leader) when there is none, or the last one ended (resolved, or its window passed `opened_at`).
    The group as it is now: `is_leader` says whether this member leads it (a retried leader, whose
    routing failed, finds its own group and still leads it)."""
    member = group.leader
    for _ in range(MAX_RACES):
        if store.open_group(group):
            return Joined(incident_key=group.incident_key, status="open", leader=member,
                          leader_incident_id=group.leader_incident_id, members=[member], open_members=[member],
                          leader_severity=group.leader_severity, is_leader=True)
        joined = store.add_to_group(group.incident_key, member, at=group.opened_at)
        if joined is not None:
            return Joined(**joined.model_dump(), is_leader=joined.leader == member)
        # it ended meanwhile: open a new one
    raise StoreRaced(f"open-incident store: group {group.incident_key!r} kept changing; the event is retried")


def leave_group(store: GroupStorage, group_key: str, member: str, delivery: str) -> GroupRow | None:
    """Take `member` (resolved) off its group's open members; the group is resolved with its last
    one. The group as it is now (None when it is gone)."""
    group = store.drop_open_member(group_key, member)
    if group is None or group.open_members or group.status != "open":
        return group
    closed = store.close_group(group_key, delivery)
    # Not closed: another member joined, or another resolution won; the row as it is then.
    return closed if closed is not None else store.group(group_key)
