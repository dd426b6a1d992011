"""In-memory fakes of the ports the intake flows use (the ticket intake over SQS, the incident
intake over EventBridge), each behaving as its adapter does over AWS; `test_contract_intake.py`
runs the same behaviours against each fake and its adapter.

- `FakeOpenIncidents`: the open-incident store (`adapters/open_incidents.py` `OpenIncidents`),
  its rows kept as the DynamoDB items would be, as plain Python values.

A conditional write the adapter loses raises botocore's ConditionalCheckFailedException, which
the flows let through (the event is retried); the fakes raise `ConditionFailed`, a `ClientError`
with the same error code, so `except ClientError` and a check of the code treat both alike.
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any, Mapping

from botocore.exceptions import ClientError
from pydantic import ValidationError

from decision_router.adapters.open_incidents import MAX_RACES
from decision_router.domain.linking import OpenIncident
from decision_router.domain.ports import Claim, GroupRow, IncidentRow, Joined

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


# --------------------------------------------------------------------------- the open-incident store
class FakeOpenIncidents:
    """The open-incident store (port `OpenIncidentStore`) in memory, with the adapter's conditional
    writes. `rows` holds one dict per key, as the DynamoDB item would be: its attribute names, a
    string set as a `set`, a number as an `int`, a list as a `list`; a test may read it, or put a
    row there as an older writer would have left it. An update with no condition writes a row that
    is not there, as DynamoDB's UpdateItem does."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def _row(self, key: str) -> dict[str, Any]:
        """The row of `key` for an unconditional update (made when missing, as UpdateItem does)."""
        return self.rows.setdefault(key, {"incident_key": key})

    def get(self, key: str) -> IncidentRow | None:
        row = self.rows.get(key)
        return IncidentRow.model_validate(_plain(row)) if row is not None else None

    def claim(self, key: str, delivery: str, *, incident_id: str, source: str, opens: list[str] | None = None,
              service: str | None = None, reported_at: str | None = None) -> Claim:
        for _ in range(MAX_RACES):
            existing = self.rows.get(key)
            # A resolved incident reopens (a flap), but not by a late copy of the delivery that opened it.
            if existing is None or (existing.get("status") == "resolved" and existing.get("opened_by") != delivery):
                item: dict[str, Any] = {"incident_key": key, "status": "open", "opened_by": delivery,
                                        "deliveries": {delivery}, "routed": False, "updates": 0,
                                        "incident_id": incident_id, "source": source, "opened_at": _now()}
                if opens:
                    item["opens"] = list(opens)
                if service and reported_at:
                    item["service"], item["reported_at"] = service, reported_at
                self.rows[key] = item  # a put replaces the whole item
                return "new"
            row = self.get(key)
            if row is None:
                continue
            if row.opened_by == delivery:
                return "retry" if row.status == "open" and not row.routed else "duplicate"
            if row.status == "open":
                return "update" if self.touch(key, delivery) else "duplicate"
        raise RuntimeError(f"open-incident store: {key!r} kept changing under {MAX_RACES} claims; the event is retried")

    def open_now(self) -> list[OpenIncident]:
        incidents = []
        for row in self.rows.values():
            if row.get("status") != "open" or "service" not in row:
                continue  # resolved, a group's row, or a row written before the service was kept
            try:
                incidents.append(OpenIncident(key=row["incident_key"], incident_id=row["incident_id"],
                                              service=row["service"], opened_at=row["reported_at"]))
            except (KeyError, ValidationError):
                continue
        return incidents

    def touch(self, key: str, delivery: str) -> bool:
        row = self.rows.get(key)
        if row is None or row.get("status") != "open" or delivery in row.get("deliveries", set()):
            return False
        if not isinstance(row.get("updates"), int):
            raise _validation("The provided expression refers to an attribute that does not exist in the item",
                              "UpdateItem")
        row["deliveries"] = row.get("deliveries", set()) | {delivery}
        row.update(updates=row["updates"] + 1, updated_at=_now(), last_delivery=delivery)
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
        row.update(status="resolved", resolved_at=_now(), resolved_by=delivery, resolution=reason[:1000])
        return was

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
        return [IncidentRow.model_validate(_plain(row)) for row in self.rows.values() if self._expired_hold(row, now)]

    def released(self, key: str, execution_name: str) -> None:
        self._row(key).update(execution_name=execution_name,
                              held="held by a maintenance window until it ended; then routed")

    # ------------------------------------------------------------------ groups (grouping)
    def join_group(self, group_key: str, member: str, *, at: str, until: str, incident_id: str,
                   severity: str) -> Joined:
        for _ in range(MAX_RACES):
            row = self.rows.get(group_key)
            if (row is None or row.get("status") == "resolved"
                    or (isinstance(row.get("until"), str) and row["until"] <= at)):
                self.rows[group_key] = {"incident_key": group_key, "status": "open", "leader": member,
                                        "leader_incident_id": incident_id, "members": {member},
                                        "open_members": {member}, "opened_at": at, "until": until,
                                        "leader_severity": severity}
                return Joined(incident_key=group_key, status="open", leader=member, leader_incident_id=incident_id,
                              members=[member], open_members=[member], leader_severity=severity, is_leader=True)
            if not (row.get("status") == "open" and isinstance(row.get("until"), str) and row["until"] > at):
                continue  # it ended meanwhile: open a new one
            row["members"] = row.get("members", set()) | {member}
            row["open_members"] = row.get("open_members", set()) | {member}
            group = GroupRow.model_validate(_plain(row))
            return Joined(**group.model_dump(), is_leader=group.leader == member)
        raise RuntimeError(f"open-incident store: group {group_key!r} kept changing; the event is retried")

    def lead_group(self, group_key: str, member: str, *, incident_id: str, severity: str) -> None:
        row = self._row(group_key)
        row.update(leader=member, leader_incident_id=incident_id, leader_severity=severity)
        row.pop("execution_name", None)

    def group_routed(self, group_key: str, execution_name: str) -> None:
        self._row(group_key)["execution_name"] = execution_name

    def leave_group(self, group_key: str, member: str, delivery: str) -> GroupRow | None:
        row = self.rows.get(group_key)
        if row is None:
            return None
        still = row.get("open_members", set()) - {member}
        if still:
            row["open_members"] = still
        else:
            row.pop("open_members", None)  # DynamoDB keeps no empty set: the attribute goes
        group = GroupRow.model_validate(_plain(row))
        if not group.open_members and group.status == "open":
            row.update(status="resolved", resolved_at=_now(), resolved_by=delivery)
            return GroupRow.model_validate(_plain(row))
        return group
