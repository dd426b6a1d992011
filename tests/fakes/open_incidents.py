"""The open-incident table in memory (`FakeOpenIncidents`, port `OpenIncidentStore`), one store per
concern as the adapters split it (adapters/open_incidents.py): the incidents' rows, the holds, the
groups, the parents and the link index. Each keeps the rows as the DynamoDB items would be (their
attribute names, a string set as a `set`, a number as an `int`, a list as a `list`), and each
write holds where the adapter's (conditional) write holds; the rules over them (a claim that lost
its put, joining and leaving a group) are the domain's (domain/open_incidents.py), the same code
the adapters run. tests/fakes/test_contract_intake.py and test_contract_link_index.py hold each
store to its adapter over moto.

A conditional write the adapter loses raises botocore's ConditionalCheckFailedException where the
flows let it through; the fakes raise `ConditionFailed` (tests/fakes/intake.py), a `ClientError`
with the same error code. An update with no condition writes a row that is not there, as
DynamoDB's UpdateItem does. An open row carries its shard's mark (`open_mark`); the open-incident
index is every row with a mark, whatever its value, by key."""

from __future__ import annotations

import copy
import math
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from botocore.exceptions import ClientError

from decision_router.adapters import expiry
from decision_router.adapters.incident_rows import EXECUTION_POINTER
from decision_router.adapters.incident_table import BATCH_KEYS, OPEN_MARK, RETENTION_DAYS, open_mark
from decision_router.adapters.link_index import FILED, FILED_COUNT, LOOKUP_ROW, instant_of, open_incident_of
from decision_router.domain import open_incidents as rules
from decision_router.domain.dependencies import ParentEntry
from decision_router.domain.linking import MAX_FILED, OpenIncident
from decision_router.domain.ports.incidents import Claim, GroupRow, IncidentRow, Joined, NewGroup, Opening

__all__ = ["ConditionFailed", "FakeOpenIncidents"]


class ConditionFailed(ClientError):
    """A conditional write that did not hold: what DynamoDB answers with ConditionalCheckFailedException."""

    CODE = "ConditionalCheckFailedException"

    def __init__(self, operation: str):
        super().__init__({"Error": {"Code": self.CODE, "Message": "The conditional request failed"}}, operation)


def _validation(message: str, operation: str) -> ClientError:
    """DynamoDB's refusal of an update expression that cannot apply to the item."""
    return ClientError({"Error": {"Code": "ValidationException", "Message": message}}, operation)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _plain(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as the adapter reads an item: a string set as a sorted list."""
    return {name: sorted(value) if isinstance(value, set) else copy.deepcopy(value) for name, value in row.items()}


class _FakeTable:
    """The rows of the table (shared by every store of a `FakeOpenIncidents`)."""

    def __init__(self, *, retention_days: int = RETENTION_DAYS) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.retention_days = retention_days
        #: Requests as the adapter would make them, by method (the link index's reads and writes).
        self.calls: Counter[str] = Counter()

    def _open_rows(self) -> list[dict[str, Any]]:
        """The rows of the open-incident index, by key (as the adapter's Query of every shard)."""
        return [row for _, row in sorted(self.rows.items()) if OPEN_MARK in row]

    def _row(self, key: str) -> dict[str, Any]:
        """The row of `key` for an unconditional update (made when missing, as UpdateItem does)."""
        return self.rows.setdefault(key, {"incident_key": key})


class FakeIncidentRows(_FakeTable):
    """adapters/incident_rows.py `IncidentRowStore`."""

    def get(self, key: str) -> IncidentRow | None:
        row = self.rows.get(key)
        return IncidentRow.model_validate(_plain(row)) if row is not None else None

    def put_opening(self, row: Opening) -> bool:
        existing = self.rows.get(row.incident_key)
        if existing is not None and not (existing.get("status") == "resolved"
                                          and existing.get("opened_by") != row.opened_by):
            return False
        item: dict[str, Any] = {"status": "open", OPEN_MARK: open_mark(row.incident_key),
                                "deliveries": {row.opened_by}, "routed": False, "updates": 0,
                                **row.model_dump(exclude_none=True, exclude={"opens", "filed_under"})}
        if row.opens:
            item["opens"] = list(row.opens)
        if row.service:
            item["filed_under"] = list(row.filed_under)
        self.rows[row.incident_key] = item  # a put replaces the whole item
        return True

    def claim(self, key: str, delivery: str, *, incident_id: str, source: str, opens: list[str] | None = None,
              service: str | None = None, reported_at: str | None = None, title: str | None = None,
              description: str | None = None) -> Claim:
        row = rules.opening(key, delivery, incident_id=incident_id, source=source, opened_at=_now(), opens=opens,
                            service=service, reported_at=reported_at, title=title, description=description)
        return rules.claim(self, row, delivery)

    def touch(self, key: str, delivery: str) -> bool:
        row = self.rows.get(key)
        if row is None or row.get("status") != "open" or delivery in row.get("deliveries", set()):
            return False
        if not isinstance(row.get("updates"), int):
            raise _validation("The provided expression refers to an attribute that does not exist in the item",
                              "UpdateItem")
        row["deliveries"] = row.get("deliveries", set()) | {delivery}
        row.update(updates=row["updates"] + 1, updated_at=_now(), last_delivery=delivery, **{OPEN_MARK: open_mark(key)})
        return True

    def routed(self, key: str, delivery: str, execution_name: str, *, group: str | None = None) -> None:
        row = self.rows.get(key)
        if row is None or row.get("opened_by") != delivery:
            raise ConditionFailed("UpdateItem")
        row.update(routed=True, execution_name=execution_name)
        if group:
            row["group"] = group

    def add_member(self, key: str, member: str) -> None:
        row = self._row(key)
        row["members"] = row.get("members", set()) | {member}

    def resolve(self, key: str, delivery: str, reason: str) -> IncidentRow | None:
        row = self.rows.get(key)
        if row is None or row.get("status") != "open":
            return None
        was = IncidentRow.model_validate(_plain(row))
        row.update(status="resolved", resolved_at=_now(), resolved_by=delivery, resolution=reason[:1000],
                   expires_at=expiry(self.retention_days))
        row.pop(OPEN_MARK, None)
        return was

    def point(self, execution_name: str, key: str) -> None:
        self.rows[EXECUTION_POINTER + execution_name] = {"incident_key": EXECUTION_POINTER + execution_name,
                                                         "points_to": key, "expires_at": expiry(self.retention_days)}

    def pointed(self, execution_name: str) -> str | None:
        return self.rows.get(EXECUTION_POINTER + execution_name, {}).get("points_to")


class FakeIncidentHolds(_FakeTable):
    """adapters/incident_holds.py `IncidentHoldStore`."""

    def held(self, key: str, delivery: str, why: str, **fields: str) -> None:
        row = self.rows.get(key)
        if row is None or row.get("opened_by") != delivery:
            raise ConditionFailed("UpdateItem")
        row.update(routed=True, held=why, **fields)

    def _expired_hold(self, row: Mapping[str, Any], now: str) -> bool:
        return (row.get("status") == "open" and isinstance(row.get("held_until"), str) and row["held_until"] <= now
                and "execution_name" not in row)

    def release(self, key: str, now: str) -> bool:
        row = self.rows.get(key)
        if row is None or not self._expired_hold(row, now):
            return False
        row["released_at"] = now
        return True

    def expired_holds(self, now: str) -> list[IncidentRow]:
        # The index's rows alone, as the adapter's Query reads them.
        return [IncidentRow.model_validate(_plain(row)) for row in self._open_rows() if self._expired_hold(row, now)]

    def released(self, key: str, execution_name: str) -> None:
        self._row(key).update(execution_name=execution_name,
                              held="held by a maintenance window until it ended; then routed")


class FakeIncidentGroups(_FakeTable):
    """adapters/incident_groups.py `IncidentGroupStore`."""

    def group(self, group_key: str) -> GroupRow | None:
        row = self.rows.get(group_key)
        return GroupRow.model_validate(_plain(row)) if row is not None else None

    def open_group(self, group: NewGroup) -> bool:
        row = self.rows.get(group.incident_key)
        if not (row is None or row.get("status") == "resolved"
                or (isinstance(row.get("until"), str) and row["until"] <= group.opened_at)):
            return False
        self.rows[group.incident_key] = {"status": "open", **group.model_dump(), "members": {group.leader},
                                         "open_members": {group.leader}}
        return True

    def add_to_group(self, group_key: str, member: str, *, at: str) -> GroupRow | None:
        row = self.rows.get(group_key)
        if row is None or not (row.get("status") == "open" and isinstance(row.get("until"), str) and row["until"] > at):
            return None
        row["members"] = row.get("members", set()) | {member}
        row["open_members"] = row.get("open_members", set()) | {member}
        return GroupRow.model_validate(_plain(row))

    def drop_open_member(self, group_key: str, member: str) -> GroupRow | None:
        row = self.rows.get(group_key)
        if row is None:
            return None
        still = row.get("open_members", set()) - {member}
        if still:
            row["open_members"] = still
        else:
            row.pop("open_members", None)  # DynamoDB keeps no empty set: the attribute goes
        return GroupRow.model_validate(_plain(row))

    def close_group(self, group_key: str, delivery: str) -> GroupRow | None:
        row = self.rows.get(group_key)
        if row is None or row.get("status") != "open" or "open_members" in row:
            return None
        row.update(status="resolved", resolved_at=_now(), resolved_by=delivery, expires_at=expiry(self.retention_days))
        return GroupRow.model_validate(_plain(row))

    def join_group(self, group_key: str, member: str, *, at: str, until: str, incident_id: str,
                   severity: str) -> Joined:
        return rules.join_group(self, NewGroup(incident_key=group_key, leader=member, leader_incident_id=incident_id,
                                               leader_severity=severity, opened_at=at, until=until))

    def lead_group(self, group_key: str, member: str, *, incident_id: str, severity: str) -> None:
        row = self._row(group_key)
        row.update(leader=member, leader_incident_id=incident_id, leader_severity=severity)
        row.pop("execution_name", None)

    def group_routed(self, group_key: str, execution_name: str) -> None:
        self._row(group_key)["execution_name"] = execution_name

    def leave_group(self, group_key: str, member: str, delivery: str) -> GroupRow | None:
        return rules.leave_group(self, group_key, member, delivery)


class FakeIncidentParents(_FakeTable):
    """adapters/incident_parents.py `IncidentParentStore`."""

    def parents(self, slot: str) -> list[ParentEntry]:
        entries = self.rows.get(slot, {}).get("parents", {})
        return sorted((ParentEntry.model_validate({**value, "key": key}) for key, value in entries.items()),
                      key=lambda e: (e.opened_at, e.key))

    def register_parent(self, slot: str, entry: ParentEntry) -> None:
        self._row(slot).setdefault("parents", {})[entry.key] = entry.model_dump(exclude={"key"})
        row = self._row(entry.key)
        row["parent_slots"] = row.get("parent_slots", set()) | {slot}

    def unregister_parent(self, slot: str, key: str) -> None:
        self.rows.get(slot, {}).get("parents", {}).pop(key, None)

    def paged(self, key: str, execution_name: str) -> bool:
        row = self.rows.get(key)
        if row is None or row.get("status") != "open":
            return False
        row["paged_by"] = execution_name
        return True

    def link_child(self, parent_key: str, child_key: str) -> bool:
        row = self.rows.get(parent_key)
        if row is None or row.get("status") != "open" or "paged_by" not in row:
            return False
        row["held_children"] = row.get("held_children", set()) | {child_key}
        return True

    def unhold(self, key: str, delivery: str) -> None:
        row = self.rows.get(key)
        if row is None or row.get("opened_by") != delivery:
            raise ConditionFailed("UpdateItem")
        row["routed"] = False
        for name in ("held", "held_under", "held_item", "parent_severity"):
            row.pop(name, None)

    def held_open(self) -> list[IncidentRow]:
        return [IncidentRow.model_validate(_plain(row)) for row in self._open_rows()
                if "held_under" in row and "execution_name" not in row and "group" not in row]


class FakeLinkIndex(_FakeTable):
    """adapters/link_index.py `LinkIndexStore`: a row per lookup key (`LOOKUP_ROW` + key), each
    incident filed an attribute `FILED` + incident key -> reported time, and their count
    `FILED_COUNT`; `calls` counts the requests the adapter makes (one a key written, one a
    BATCH_KEYS keys read, a delete for a row left listing none)."""

    def file(self, key: str, lookup_keys: Sequence[str], reported_at: str) -> None:
        self.calls["file"] += 1
        for lookup in lookup_keys:
            row = self.rows.get(LOOKUP_ROW + lookup, {})
            if FILED + key not in row and row.get(FILED_COUNT, 0) < MAX_FILED:
                row = self._row(LOOKUP_ROW + lookup)
                row[FILED + key] = reported_at
                row[FILED_COUNT] = row.get(FILED_COUNT, 0) + 1

    def unfile(self, key: str, lookup_keys: Sequence[str]) -> None:
        self.calls["unfile"] += 1
        for lookup in lookup_keys:
            row = self.rows.get(LOOKUP_ROW + lookup, {})
            if row.pop(FILED + key, None) is None:
                continue
            row[FILED_COUNT] -= 1
            if row[FILED_COUNT] == 0:
                self.calls["unfile_delete"] += 1
                del self.rows[LOOKUP_ROW + lookup]

    def filed_under(self, lookup_keys: Sequence[str]) -> dict[str, dict[str, datetime]]:
        """As the adapter's BatchGetItem of the lookup rows (`calls` counts one per BATCH_KEYS keys)."""
        unique = list(dict.fromkeys(lookup_keys))
        self.calls["filed_under"] += math.ceil(len(unique) / BATCH_KEYS)
        found = {}
        for lookup in unique:
            row = self.rows.get(LOOKUP_ROW + lookup)
            if row is not None:
                filed = {name[len(FILED):]: instant_of(text) for name, text in row.items() if name.startswith(FILED)}
                found[lookup] = {key: at for key, at in filed.items() if at is not None}
        return found

    def open_incidents(self, keys: Sequence[str]) -> list[OpenIncident]:
        """As the adapter's BatchGetItem of the incidents' rows (`calls` counts one per BATCH_KEYS keys;
        `rows_read` counts the rows read)."""
        unique = list(dict.fromkeys(keys))
        self.calls["open_incidents"] += math.ceil(len(unique) / BATCH_KEYS)
        self.calls["rows_read"] += len(unique)
        rows = [self.rows[key] for key in sorted(unique) if key in self.rows]
        incidents = [open_incident_of(_plain(row)) for row in rows if row.get("status") == "open"]
        return [incident for incident in incidents if incident is not None]


class FakeOpenIncidents(FakeIncidentRows, FakeIncidentHolds, FakeIncidentGroups, FakeIncidentParents, FakeLinkIndex):
    """Every store of the open-incident table over one dict of rows (port `OpenIncidentStore`)."""
