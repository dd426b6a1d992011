"""The groups of incidents on the open-incident table (port `IncidentGroups`, grouping): a group's
row, keyed `group#<rule>#<digest>`, keeps its leader (the routed incident), its members and those
still open. Each write is one conditional write (port `GroupStorage`); how a group is joined and
left is domain/open_incidents.py's."""

from __future__ import annotations

from ..domain import open_incidents as rules
from ..domain.ports.incidents import GroupRow, Joined, NewGroup
from . import expiry
from .incident_table import IncidentTable, item_of, read


class IncidentGroupStore(IncidentTable):
    # ------------------------------------------------------------------ storage (GroupStorage)
    def group(self, group_key: str) -> GroupRow | None:
        raw = self._item(group_key)
        return read(GroupRow, raw) if raw else None

    def open_group(self, group: NewGroup) -> bool:
        values = {"status": "open", **group.model_dump(), "members": {group.leader}, "open_members": {group.leader}}
        return self._written_if(
            "put_item", Item=item_of(values),
            ConditionExpression="attribute_not_exists(incident_key) OR #s = :resolved OR #u <= :at",
            ExpressionAttributeNames={"#s": "status", "#u": "until"},
            ExpressionAttributeValues={":resolved": {"S": "resolved"}, ":at": {"S": group.opened_at}}) is not None

    def add_to_group(self, group_key: str, member: str, *, at: str) -> GroupRow | None:
        row = self._written_if(
            "update_item", Key=self._key(group_key),
            UpdateExpression="ADD members :m, open_members :m",
            ConditionExpression="#s = :open AND #u > :at",
            ExpressionAttributeNames={"#s": "status", "#u": "until"},
            ExpressionAttributeValues={":m": {"SS": [member]}, ":open": {"S": "open"}, ":at": {"S": at}},
            ReturnValues="ALL_NEW")
        return None if row is None else read(GroupRow, row["Attributes"])

    def drop_open_member(self, group_key: str, member: str) -> GroupRow | None:
        row = self._written_if(
            "update_item", Key=self._key(group_key),
            UpdateExpression="DELETE open_members :m", ConditionExpression="attribute_exists(incident_key)",
            ExpressionAttributeValues={":m": {"SS": [member]}}, ReturnValues="ALL_NEW")
        return None if row is None else read(GroupRow, row["Attributes"])

    def close_group(self, group_key: str, delivery: str) -> GroupRow | None:
        """Resolved: it expires after the retention."""
        row = self._written_if(
            "update_item", Key=self._key(group_key),
            UpdateExpression="SET #s = :resolved, resolved_at = :now, resolved_by = :d, expires_at = :expires",
            ConditionExpression="#s = :open AND attribute_not_exists(open_members)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":resolved": {"S": "resolved"}, ":open": {"S": "open"},
                                       ":now": {"S": rules.now_iso()}, ":d": {"S": delivery},
                                       ":expires": {"N": str(expiry(self.retention_days))}},
            ReturnValues="ALL_NEW")
        return None if row is None else read(GroupRow, row["Attributes"])

    # ------------------------------------------------------------------ the port (IncidentGroups)
    def join_group(self, group_key: str, member: str, *, at: str, until: str, incident_id: str,
                   severity: str) -> Joined:
        """Put `member` in the open group of `group_key`, or open the group with it (its leader)
        when there is none, or the last one ended (domain/open_incidents.py `join_group`)."""
        return rules.join_group(self, NewGroup(incident_key=group_key, leader=member, leader_incident_id=incident_id,
                                               leader_severity=severity, opened_at=at, until=until))

    def lead_group(self, group_key: str, member: str, *, incident_id: str, severity: str) -> None:
        """Make `member` (already in the group) its leader: it is more severe than the leader
        was, so it is routed, and the group's resolution closes its review."""
        self.client.update_item(
            TableName=self.table_name, Key=self._key(group_key),
            UpdateExpression="SET leader = :m, leader_incident_id = :id, leader_severity = :sev REMOVE execution_name",
            ExpressionAttributeValues={":m": {"S": member}, ":id": {"S": incident_id}, ":sev": {"S": severity}})

    def group_routed(self, group_key: str, execution_name: str) -> None:
        self.client.update_item(TableName=self.table_name, Key=self._key(group_key),
                                UpdateExpression="SET execution_name = :name",
                                ExpressionAttributeValues={":name": {"S": execution_name}})

    def leave_group(self, group_key: str, member: str, delivery: str) -> GroupRow | None:
        """Take `member` (resolved) off its group's open members; the group is resolved with its
        last one (domain/open_incidents.py `leave_group`)."""
        return rules.leave_group(self, group_key, member, delivery)
