"""Dependencies on the open-incident table (port `IncidentParents`, domain/dependencies.py): a
slot's row (`parent#...`) lists the paged incidents registered in it (`parents`, a map by incident
key, read with one GetItem); an incident held under a parent is listed on the parent's row
(`held_children`) and names it (`held_under`), so the parent's resolution finds its children by
key, never by a Scan."""

from __future__ import annotations

from ..domain.dependencies import ParentEntry
from ..domain.ports.incidents import IncidentRow
from .incident_table import IncidentTable, plain, read


class IncidentParentStore(IncidentTable):
    def parents(self, slot: str) -> list[ParentEntry]:
        """The paged incidents registered in `slot`, oldest first (one GetItem: no Scan)."""
        raw = self._item(slot)
        entries = plain(raw).get("parents", {}) if raw else {}
        return sorted((ParentEntry.model_validate({**value, "key": key}) for key, value in entries.items()),
                      key=lambda e: (e.opened_at, e.key))

    def register_parent(self, slot: str, entry: ParentEntry) -> None:
        """Register a paged incident in `slot`, and the slot on its own row (its resolution
        takes it off again). Each write is idempotent: a retried event writes the same."""
        self.client.update_item(TableName=self.table_name, Key=self._key(slot),
                                UpdateExpression="SET #p = if_not_exists(#p, :empty)",
                                ExpressionAttributeNames={"#p": "parents"}, ExpressionAttributeValues={":empty": {"M": {}}})
        value = {name: ({"BOOL": v} if isinstance(v, bool) else {"S": v})
                 for name, v in entry.model_dump(exclude={"key"}).items()}
        self.client.update_item(TableName=self.table_name, Key=self._key(slot),
                                UpdateExpression="SET #p.#k = :entry",
                                ExpressionAttributeNames={"#p": "parents", "#k": entry.key},
                                ExpressionAttributeValues={":entry": {"M": value}})
        self.client.update_item(TableName=self.table_name, Key=self._key(entry.key),
                                UpdateExpression="ADD parent_slots :s", ExpressionAttributeValues={":s": {"SS": [slot]}})

    def unregister_parent(self, slot: str, key: str) -> None:
        """Take the incident of `key` (resolved) out of `slot`; nothing when it is not there."""
        self._written_if(
            "update_item", Key=self._key(slot),
            UpdateExpression="REMOVE #p.#k", ConditionExpression="attribute_exists(#p)",
            ExpressionAttributeNames={"#p": "parents", "#k": key})

    def paged(self, key: str, execution_name: str) -> bool:
        """A page went out for the open incident of `key` (by this execution): from now on it may
        hold its dependants. False when it is not open (resolved meanwhile: it holds nothing)."""
        return self._written_if(
            "update_item", Key=self._key(key), UpdateExpression="SET paged_by = :name",
            ConditionExpression="#s = :open", ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":name": {"S": execution_name}, ":open": {"S": "open"}}) is not None

    def link_child(self, parent_key: str, child_key: str) -> bool:
        """List `child_key` on its parent's row, only while the parent is open and paged. The
        child is marked held under the parent first (`held`); the parent's resolution reads this
        list with the write that closes it, so a child linked before it is released by it, and
        one whose link comes after is refused here (its invocation takes the mark off and decides
        it: `unhold`). False: the parent is not open and paged."""
        return self._written_if(
            "update_item", Key=self._key(parent_key),
            UpdateExpression="ADD held_children :c",
            ConditionExpression="#s = :open AND attribute_exists(paged_by)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":c": {"SS": [child_key]}, ":open": {"S": "open"}}) is not None

    def unhold(self, key: str, delivery: str) -> None:
        """Take a dependency hold's mark off the incident that `delivery` opened (its parent
        refused the link): it is decided now, and a retry of the delivery decides it again."""
        self.client.update_item(
            TableName=self.table_name, Key=self._key(key),
            UpdateExpression="SET routed = :no REMOVE held, held_under, held_item, parent_severity",
            ConditionExpression="opened_by = :d", ExpressionAttributeValues={":no": {"BOOL": False}, ":d": {"S": delivery}})

    def held_open(self) -> list[IncidentRow]:
        """The open incidents held under a parent and not routed (nor grouped) since, for the
        sweep (which routes those whose parent is resolved, gone or not paged, and those held past
        the ceiling). A Query of the open-incident index; its rows are read again by key before
        one is routed."""
        return [read(IncidentRow, raw) for raw in self._open_rows(
            FilterExpression="attribute_exists(held_under) AND attribute_not_exists(execution_name) "
                             "AND attribute_not_exists(#g)", names={"#g": "group"})]
