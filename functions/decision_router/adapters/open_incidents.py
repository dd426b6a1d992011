"""The open-incident store (DynamoDB, keyed by the source's correlation key): which native-source
incidents are open, so a re-delivery is routed once, a new event of an open incident updates it
instead of paging again, and a resolution closes it.

One row per key: status open|resolved, the delivery (EventBridge event id) that opened it,
whether that opening was routed (and by which execution) or held by a noise control (`held`:
grouped, flapping, in a maintenance window), every delivery seen while open, the update count,
the recent openings (`opens`, for flapping) and the resolution; the incident's `service`,
`reported_at`, `title` and `description` (bounded), so a ticket can be linked to it (`open_now`; rows claimed before these were kept
have neither and are never linked). A flap (ALARM, OK, ALARM) reopens
the row as a new incident. A group of incidents (grouping) has a row of its own, keyed
`group#<rule>#<digest>`: its leader (the routed incident), its members and those still open.
A slot of the dependencies (`parent#...`, domain/dependencies.py) has a row of its own too: the
paged incidents registered in it (`parents`, a map by incident key), read with one GetItem; an
incident held under a parent is listed on the parent's row (`held_children`) and names it
(`held_under`), so the parent's resolution finds its children by key, never by a Scan.

Reads on a request path never scan: an incident's row carries `OPEN_MARK` only while it is
open, and the sparse index `OPEN_INDEX` holds those rows alone, so `open_now` and
`expired_holds` read the open incidents however many resolved ones the table keeps. A resolved
row (an incident's or a group's) gets `expires_at` (epoch seconds, `retention_days` on): the
table's TTL removes it then.

The mark's value is the index's partition key, and every write of an open row (its claim, each
delivery, its routing, holds, pages) is a write of the index too: one value would put every open
incident, and an alert storm's writes, on one partition of the index. The mark is `open#<n>`
instead, one of `OPEN_SHARDS` values (`open_mark`, from a hash of the incident key: a row keeps
its shard), and a read queries every shard at once, merged by incident key as one partition
would hand them over. Rows marked before sharding carry `OPEN` alone: the readers query that value
too, and an open row's next delivery (`touch`) moves it to its shard. Open rows have no expiry, so
the value of before is read for as long as any row may carry it (docs/operations/hot-keys.md says
how to see that none does).

A ticket is linked without listing the open incidents: the link index (domain/linking.py) keeps a
row per lookup key (`lookup#name#<service>`, `lookup#word#<word>`) listing the open incidents filed
under it (`file`, by the incident intake once an incident opens; `unfile` when it resolves, from the
keys its row keeps in `filed_under`). The ticket intake reads the rows of its ticket's keys
(`filed_under`) and then the incidents they list (`open_incidents`), each a BatchGetItem.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterator, Sequence, TypeVar

from boto3.dynamodb.types import TypeDeserializer
from pydantic import BaseModel, TypeAdapter, ValidationError

from ..domain.dependencies import ParentEntry
from ..domain.linking import MAX_DESCRIPTION, MAX_FILED, MAX_TITLE, OpenIncident, bounded, filing_keys
from ..domain.ports.incidents import Claim, GroupRow, IncidentRow, Joined
from ..items import UtcDatetime
from . import BATCH_GET_KEYS, AwsAdapter, batch_get, expiry
from .shards import every_shard, in_parallel, shard_of, sharded

Row = TypeVar("Row", bound=BaseModel)
#: Conditional writes lost to a concurrent writer before giving up (the event is then retried).
MAX_RACES = 3
#: The sparse index of the open incidents (template.yaml OpenIncidentsTable): its key, the
#: attribute an incident's row carries while it is open, and the attribute's value before the
#: index was sharded (still read: `OPEN_MARKS`).
OPEN_INDEX = "open-incidents"
OPEN_MARK = "open_mark"
OPEN = "open"
#: Values of the open mark (partitions of the index). Each takes at most 1,000 writes a second, and
#: every write of an open row is one (an alert storm: thousands of deliveries a second); 10 take
#: 10,000 a second. A read queries all 10 and the unsharded value at once: 11 small Queries.
OPEN_SHARDS = 10
#: Every value a read of the open incidents queries: the unsharded one, then each shard's.
OPEN_MARKS = (OPEN, *every_shard(OPEN, OPEN_SHARDS))
#: How long a resolved row is kept by default (the stack's OpenIncidentRetentionDays).
RETENTION_DAYS = 30
#: The key prefix of a row naming the incident an execution routes (`point`).
EXECUTION_POINTER = "execution#"
#: The key prefix of a row of the link index (`lookup#name#<service>`, `lookup#word#<word>`): the
#: open incidents filed under one lookup key (domain/linking.py), each an attribute of its own
#: (`FILED` + incident key -> reported time), and their count `FILED_COUNT` (at most MAX_FILED).
#: Filing or unfiling is then one conditional UpdateItem whatever the row holds (missing, with room,
#: full): a count kept beside a map could not be checked and raised in one write.
LOOKUP_ROW = "lookup#"
FILED = "filed#"
FILED_COUNT = "filed_count"
#: BatchGetItem's most keys a request.
BATCH_KEYS = BATCH_GET_KEYS
_INSTANT: TypeAdapter[datetime] = TypeAdapter(UtcDatetime)


def open_mark(key: str) -> str:
    """The open mark of the incident of `key`: its shard of the open-incident index."""
    return sharded(OPEN, shard_of(key, OPEN_SHARDS))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _read(model: type[Row], raw: dict[str, Any]) -> Row:
    """A row of the table (a DynamoDB item) as the model the store hands over."""
    return model.model_validate(_plain(raw))


def _plain(raw: dict[str, Any]) -> dict[str, Any]:
    """A DynamoDB item as Python values (a string set as a sorted list)."""
    deserializer = TypeDeserializer()
    values = {name: deserializer.deserialize(value) for name, value in raw.items()}
    return {name: sorted(value) if isinstance(value, set) else value for name, value in values.items()}


class OpenIncidents(AwsAdapter):
    service = "dynamodb"

    def __init__(self, table_name: str, client: Any = None, *, retention_days: int = RETENTION_DAYS):
        super().__init__(client)
        self.table_name = table_name
        self.retention_days = retention_days

    def _item(self, key: str) -> dict[str, Any] | None:
        return self.client.get_item(TableName=self.table_name, Key={"incident_key": {"S": key}},
                                    ConsistentRead=True).get("Item")

    def get(self, key: str) -> IncidentRow | None:
        """The incident of `key` (None: never opened here)."""
        raw = self._item(key)
        return _read(IncidentRow, raw) if raw else None

    def claim(self, key: str, delivery: str, *, incident_id: str, source: str, opens: list[str] | None = None,
              service: str | None = None, reported_at: str | None = None, title: str | None = None,
              description: str | None = None) -> Claim:
        """Open the incident of `key` with this delivery, or say why not. `opens`: the times it
        opened recently, this one included (flapping is counted on them); `service`,
        `reported_at`, `title` and `description` (the incident's; the last two cut to MAX_TITLE and
        MAX_DESCRIPTION), kept so a ticket can be linked to it."""
        for _ in range(MAX_RACES):
            try:
                # A reopened row is put whole: its expiry goes, its open mark comes back.
                item = {"incident_key": {"S": key}, "status": {"S": "open"}, OPEN_MARK: {"S": open_mark(key)},
                        "opened_by": {"S": delivery},
                        "deliveries": {"SS": [delivery]}, "routed": {"BOOL": False}, "updates": {"N": "0"},
                        "incident_id": {"S": incident_id}, "source": {"S": source}, "opened_at": {"S": _now()}}
                if opens:
                    item["opens"] = {"L": [{"S": t} for t in opens]}
                if service and reported_at:
                    item["service"], item["reported_at"] = {"S": service}, {"S": reported_at}
                    for name, text, limit in (("title", title, MAX_TITLE), ("description", description, MAX_DESCRIPTION)):
                        kept = bounded(text, limit)
                        if kept:
                            item[name] = {"S": kept}
                    # What the intake files it under (`file`), so its resolution finds them again.
                    item["filed_under"] = {"L": [{"S": k} for k in filing_keys(service, title, description)]}
                self.client.put_item(
                    TableName=self.table_name, Item=item,
                    # A resolved incident reopens (a flap), but not by a late copy of the delivery that opened it.
                    ConditionExpression="attribute_not_exists(incident_key) OR (#s = :resolved AND opened_by <> :d)",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues={":resolved": {"S": "resolved"}, ":d": {"S": delivery}})
                return "new"
            except self.client.exceptions.ConditionalCheckFailedException:
                pass
            row = self.get(key)
            if row is None:
                continue  # removed meanwhile: claim again
            if row.opened_by == delivery:
                return "retry" if row.status == "open" and not row.routed else "duplicate"
            if row.status == "open":
                return "update" if self.touch(key, delivery) else "duplicate"
        raise RuntimeError(f"open-incident store: {key!r} kept changing under {MAX_RACES} claims; the event is retried")

    def _open_rows(self, *, names: dict[str, str] | None = None, values: dict[str, Any] | None = None,
                   **query: Any) -> list[dict[str, Any]]:
        """Every row of the open-incident index (only rows with `OPEN_MARK`): each of its values
        queried at once, the rows by incident key (one row seen under two values while the index
        moves it to its shard: once, as its shard has it)."""
        def marked(mark: str) -> list[dict[str, Any]]:
            return list(self._marked(mark, names=names, values=values, **query))

        by_key = {row["incident_key"]["S"]: row for shard in in_parallel(marked, OPEN_MARKS) for row in shard}
        return [by_key[key] for key in sorted(by_key)]

    def _marked(self, mark: str, *, names: dict[str, str] | None, values: dict[str, Any] | None,
                **query: Any) -> Iterator[dict[str, Any]]:
        """The rows of the open-incident index under one value of the mark, page by page."""
        start = None
        while True:
            page = self.client.query(
                TableName=self.table_name, IndexName=OPEN_INDEX, KeyConditionExpression="#m = :open",
                ExpressionAttributeNames={"#m": OPEN_MARK, **(names or {})},
                ExpressionAttributeValues={":open": {"S": mark}, **(values or {})},
                **query, **({"ExclusiveStartKey": start} if start else {}))
            yield from page.get("Items", [])
            start = page.get("LastEvaluatedKey")
            if not start:
                return

    # ------------------------------------------------------------------ the link index (domain/linking.py)
    def file(self, key: str, lookup_keys: Sequence[str], reported_at: str) -> None:
        """File the open incident of `key` (reported at `reported_at`) under each of `lookup_keys`,
        all at once; a key that lists `MAX_FILED` open incidents already is left as it is (a word
        that many share tells none apart). One UpdateItem a key, whatever its row holds. A key
        that lists the incident already keeps it as it is: a retry files nothing more."""
        in_parallel(lambda lookup: self._file_one(LOOKUP_ROW + lookup, key, reported_at), lookup_keys)

    def _file_one(self, row_key: str, key: str, reported_at: str) -> None:
        try:
            self.client.update_item(
                TableName=self.table_name, Key={"incident_key": {"S": row_key}}, UpdateExpression="SET #k = :at ADD #n :one",
                # Listed already (a retry: counted once), or full: nothing to do.
                ConditionExpression="attribute_not_exists(#k) AND (attribute_not_exists(#n) OR #n < :max)",
                ExpressionAttributeNames={"#k": FILED + key, "#n": FILED_COUNT},
                ExpressionAttributeValues={":at": {"S": reported_at}, ":one": {"N": "1"}, ":max": {"N": str(MAX_FILED)}})
        except self.client.exceptions.ConditionalCheckFailedException:
            pass

    def unfile(self, key: str, lookup_keys: Sequence[str]) -> None:
        """Take the incident of `key` off each of `lookup_keys` (nothing where it is not listed)."""
        def unfile_one(lookup: str) -> None:
            try:
                self.client.update_item(**unfiling(self.table_name, lookup, key))
            except self.client.exceptions.ConditionalCheckFailedException:
                pass  # not listed there (or no row): nothing was filed there
        in_parallel(unfile_one, lookup_keys)

    def filed_under(self, lookup_keys: Sequence[str]) -> dict[str, dict[str, datetime]]:
        """The open incidents each of `lookup_keys` lists (incident key -> reported time), read by
        key (BatchGetItem, eventually consistent); a key nothing was filed under is left out."""
        found: dict[str, dict[str, datetime]] = {}
        # The whole row: its incidents are attributes named by their keys, which no projection can list.
        for raw in self._batch_get([LOOKUP_ROW + lookup for lookup in dict.fromkeys(lookup_keys)]):
            found[raw["incident_key"]["S"][len(LOOKUP_ROW):]] = filed_on(raw)
        return found

    def open_incidents(self, keys: Sequence[str]) -> list[OpenIncident]:
        """The incidents of `keys` that are open and can be linked to, by key (BatchGetItem,
        eventually consistent: one resolved a moment ago may still read open), in key order."""
        names = {"#s": "status", "#src": "source", "#t": "title", "#d": "description"}  # DynamoDB reserves some words
        rows = self._batch_get(list(dict.fromkeys(keys)), names=names, projection=(
            "incident_key, #s, incident_id, service, reported_at, #src, #t, #d"))
        incidents = [open_incident_of(_plain(raw)) for raw in rows if raw.get("status", {}).get("S") == "open"]
        return sorted((i for i in incidents if i is not None), key=lambda incident: incident.key)

    def _batch_get(self, keys: list[str], *, projection: str | None = None,
                   names: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """The rows of `keys` that exist (only `projection`'s attributes, when given)."""
        return batch_get(self.client, self.table_name, [{"incident_key": {"S": key}} for key in keys],
                         what="open-incident store", projection=projection, names=names)

    def open_now(self) -> list[OpenIncident]:
        """Every open incident that can be linked to (its service and reported time kept), for the
        ticket intake: a Query of the open-incident index, which holds the open rows alone (the
        resolved ones, however many, are never read). Rows written before the service was kept
        are left out."""
        incidents = []
        names = {"#src": "source", "#t": "title", "#d": "description"}  # placeholders: DynamoDB reserves some words
        for raw in self._open_rows(FilterExpression="attribute_exists(service)", names=names,
                                   ProjectionExpression="incident_key, incident_id, service, reported_at, #src, #t, #d"):
            incident = open_incident_of(_plain(raw))
            if incident is not None:
                incidents.append(incident)
        return incidents

    def touch(self, key: str, delivery: str) -> bool:
        """Count a new delivery of an open incident; False when the incident is not open or this
        delivery was counted already."""
        try:
            self.client.update_item(
                TableName=self.table_name, Key={"incident_key": {"S": key}},
                # The mark too: a row opened before the index was kept joins it with its next delivery,
                # and one marked before the index was sharded moves to its shard.
                UpdateExpression="ADD deliveries :ds SET updates = updates + :one, updated_at = :now, "
                                 "last_delivery = :d, #m = :mark",
                ConditionExpression="#s = :open AND NOT contains(deliveries, :d)",
                ExpressionAttributeNames={"#s": "status", "#m": OPEN_MARK},
                ExpressionAttributeValues={":ds": {"SS": [delivery]}, ":one": {"N": "1"}, ":now": {"S": _now()},
                                           ":d": {"S": delivery}, ":open": {"S": "open"}, ":mark": {"S": open_mark(key)}})
            return True
        except self.client.exceptions.ConditionalCheckFailedException:
            return False

    def routed(self, key: str, delivery: str, execution_name: str, *, group: str | None = None) -> None:
        """The opening delivery was routed (by this execution), leading `group` when given."""
        values = {":yes": {"BOOL": True}, ":name": {"S": execution_name}, ":d": {"S": delivery}}
        if group:
            values[":g"] = {"S": group}
        self.client.update_item(
            TableName=self.table_name, Key={"incident_key": {"S": key}},
            UpdateExpression="SET routed = :yes, execution_name = :name" + (", #g = :g" if group else ""),
            ConditionExpression="opened_by = :d", ExpressionAttributeValues=values,
            **({"ExpressionAttributeNames": {"#g": "group"}} if group else {}))

    def add_member(self, key: str, member: str) -> None:
        """List `member` on the incident it was grouped into."""
        self.client.update_item(TableName=self.table_name, Key={"incident_key": {"S": key}},
                                UpdateExpression="ADD members :m", ExpressionAttributeValues={":m": {"SS": [member]}})

    def resolve(self, key: str, delivery: str, reason: str) -> IncidentRow | None:
        """Close the open incident of `key`; its row as it was (None when nothing was open)."""
        try:
            response = self.client.update_item(
                TableName=self.table_name, Key={"incident_key": {"S": key}},
                UpdateExpression="SET #s = :resolved, resolved_at = :now, resolved_by = :d, resolution = :why, "
                                 "expires_at = :expires REMOVE #m",
                ConditionExpression="#s = :open",
                ExpressionAttributeNames={"#s": "status", "#m": OPEN_MARK},
                ExpressionAttributeValues={":resolved": {"S": "resolved"}, ":open": {"S": "open"}, ":now": {"S": _now()},
                                           ":d": {"S": delivery}, ":why": {"S": reason[:1000]},
                                           ":expires": {"N": str(expiry(self.retention_days))}},
                ReturnValues="ALL_OLD")
        except self.client.exceptions.ConditionalCheckFailedException:
            return None
        return _read(IncidentRow, response["Attributes"])

    def held(self, key: str, delivery: str, why: str, **fields: str) -> None:
        """The opening delivery was held by a noise control (grouped, flapping, in a maintenance
        window): nothing to route, so it counts as routed; `why` and `fields` say how."""
        names = {f"#{k}": k for k in fields}
        values = {f":{k}": {"S": v} for k, v in fields.items()}
        sets = "".join(f", #{k} = :{k}" for k in fields)
        extra = {"ExpressionAttributeNames": names} if names else {}
        self.client.update_item(
            TableName=self.table_name, Key={"incident_key": {"S": key}},
            UpdateExpression=f"SET routed = :yes, held = :why{sets}", ConditionExpression="opened_by = :d",
            ExpressionAttributeValues={":yes": {"BOOL": True}, ":why": {"S": why}, ":d": {"S": delivery}, **values},
            **extra)

    def release(self, key: str, now: str) -> bool:
        """Take the hold of a maintenance window off the open incident of `key` once its window
        ended (`held_until` at or before `now`) and it is not routed yet: True when the caller should
        route it. The hold stays until `released` names the execution, so a routing that fails is
        retried by the next delivery; two at once start one execution (it is named after the item)."""
        try:
            self.client.update_item(
                TableName=self.table_name, Key={"incident_key": {"S": key}},
                UpdateExpression="SET released_at = :now",
                ConditionExpression="#s = :open AND held_until <= :now AND attribute_not_exists(execution_name)",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":open": {"S": "open"}, ":now": {"S": now}})
            return True
        except self.client.exceptions.ConditionalCheckFailedException:
            return False

    def expired_holds(self, now: str) -> list[IncidentRow]:
        """The open incidents a maintenance window held whose window ended by `now`, not routed
        yet (the sweep routes them: a source such as CloudWatch sends nothing more while an alarm
        stays in ALARM). A Query of the open-incident index: eventually consistent, which
        `release`'s conditional write makes safe (a row routed meanwhile is not released twice)."""
        return [_read(IncidentRow, raw) for raw in self._open_rows(
            FilterExpression="held_until <= :now AND attribute_not_exists(execution_name)",
            values={":now": {"S": now}})]

    def released(self, key: str, execution_name: str) -> None:
        """The incident whose hold was released was routed (by this execution)."""
        self.client.update_item(TableName=self.table_name, Key={"incident_key": {"S": key}},
                                UpdateExpression="SET execution_name = :name, held = :why",
                                ExpressionAttributeValues={":name": {"S": execution_name},
                                                           ":why": {"S": "held by a maintenance window until it "
                                                                         "ended; then routed"}})

    # ------------------------------------------------------------------ groups (grouping)
    def join_group(self, group_key: str, member: str, *, at: str, until: str, incident_id: str,
                   severity: str) -> Joined:
        """Put `member` in the open group of `group_key`, or open the group with it (its leader)
        when there is none, or the last one ended (resolved, or its window `until` passed `at`).
        The group's row as it is now: `is_leader` says whether this member leads it, and
        `leader_severity` how severe its leader is (None on a row written before it was kept)."""
        for _ in range(MAX_RACES):
            try:
                self.client.put_item(
                    TableName=self.table_name,
                    Item={"incident_key": {"S": group_key}, "status": {"S": "open"}, "leader": {"S": member},
                          "leader_incident_id": {"S": incident_id}, "members": {"SS": [member]},
                          "open_members": {"SS": [member]}, "opened_at": {"S": at}, "until": {"S": until},
                          "leader_severity": {"S": severity}},
                    ConditionExpression="attribute_not_exists(incident_key) OR #s = :resolved OR #u <= :at",
                    ExpressionAttributeNames={"#s": "status", "#u": "until"},
                    ExpressionAttributeValues={":resolved": {"S": "resolved"}, ":at": {"S": at}})
                return Joined(incident_key=group_key, status="open", leader=member, leader_incident_id=incident_id,
                              members=[member], open_members=[member], leader_severity=severity, is_leader=True)
            except self.client.exceptions.ConditionalCheckFailedException:
                pass
            try:
                row = self.client.update_item(
                    TableName=self.table_name, Key={"incident_key": {"S": group_key}},
                    UpdateExpression="ADD members :m, open_members :m",
                    ConditionExpression="#s = :open AND #u > :at",
                    ExpressionAttributeNames={"#s": "status", "#u": "until"},
                    ExpressionAttributeValues={":m": {"SS": [member]}, ":open": {"S": "open"}, ":at": {"S": at}},
                    ReturnValues="ALL_NEW")["Attributes"]
            except self.client.exceptions.ConditionalCheckFailedException:
                continue  # it ended meanwhile: open a new one
            # A retried leader (its routing failed) finds its own group: it still leads it.
            group = _read(GroupRow, row)
            return Joined(**group.model_dump(), is_leader=group.leader == member)
        raise RuntimeError(f"open-incident store: group {group_key!r} kept changing; the event is retried")

    def lead_group(self, group_key: str, member: str, *, incident_id: str, severity: str) -> None:
        """Make `member` (already in the group) its leader: it is more severe than the leader
        was, so it is routed, and the group's resolution closes its review."""
        self.client.update_item(
            TableName=self.table_name, Key={"incident_key": {"S": group_key}},
            UpdateExpression="SET leader = :m, leader_incident_id = :id, leader_severity = :sev REMOVE execution_name",
            ExpressionAttributeValues={":m": {"S": member}, ":id": {"S": incident_id}, ":sev": {"S": severity}})

    def group_routed(self, group_key: str, execution_name: str) -> None:
        self.client.update_item(TableName=self.table_name, Key={"incident_key": {"S": group_key}},
                                UpdateExpression="SET execution_name = :name",
                                ExpressionAttributeValues={":name": {"S": execution_name}})

    def leave_group(self, group_key: str, member: str, delivery: str) -> GroupRow | None:
        """Take `member` (resolved) off its group's open members; the group is resolved with its
        last one. The group's row as it is now (None when the group is gone)."""
        try:
            row = self.client.update_item(
                TableName=self.table_name, Key={"incident_key": {"S": group_key}},
                UpdateExpression="DELETE open_members :m", ConditionExpression="attribute_exists(incident_key)",
                ExpressionAttributeValues={":m": {"SS": [member]}}, ReturnValues="ALL_NEW")["Attributes"]
        except self.client.exceptions.ConditionalCheckFailedException:
            return None
        group = _read(GroupRow, row)
        if not group.open_members and group.status == "open":
            try:
                row = self.client.update_item(
                    TableName=self.table_name, Key={"incident_key": {"S": group_key}},
                    UpdateExpression="SET #s = :resolved, resolved_at = :now, resolved_by = :d, expires_at = :expires",
                    ConditionExpression="#s = :open AND attribute_not_exists(open_members)",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues={":resolved": {"S": "resolved"}, ":open": {"S": "open"},
                                               ":now": {"S": _now()}, ":d": {"S": delivery},
                                               ":expires": {"N": str(expiry(self.retention_days))}},
                    ReturnValues="ALL_NEW")["Attributes"]
            except self.client.exceptions.ConditionalCheckFailedException:
                raw = self._item(group_key)  # another member joined, or another resolution won
                return _read(GroupRow, raw) if raw else None
            return _read(GroupRow, row)
        return group

    # ------------------------------------------------------------------ dependencies (domain/dependencies.py)
    def parents(self, slot: str) -> list[ParentEntry]:
        """The paged incidents registered in `slot`, oldest first (one GetItem: no Scan)."""
        raw = self._item(slot)
        entries = _plain(raw).get("parents", {}) if raw else {}
        return sorted((ParentEntry.model_validate({**value, "key": key}) for key, value in entries.items()),
                      key=lambda e: (e.opened_at, e.key))

    def register_parent(self, slot: str, entry: ParentEntry) -> None:
        """Register a paged incident in `slot`, and the slot on its own row (its resolution
        takes it off again). Each write is idempotent: a retried event writes the same."""
        self.client.update_item(TableName=self.table_name, Key={"incident_key": {"S": slot}},
                                UpdateExpression="SET #p = if_not_exists(#p, :empty)",
                                ExpressionAttributeNames={"#p": "parents"}, ExpressionAttributeValues={":empty": {"M": {}}})
        value = {name: ({"BOOL": v} if isinstance(v, bool) else {"S": v})
                 for name, v in entry.model_dump(exclude={"key"}).items()}
        self.client.update_item(TableName=self.table_name, Key={"incident_key": {"S": slot}},
                                UpdateExpression="SET #p.#k = :entry",
                                ExpressionAttributeNames={"#p": "parents", "#k": entry.key},
                                ExpressionAttributeValues={":entry": {"M": value}})
        self.client.update_item(TableName=self.table_name, Key={"incident_key": {"S": entry.key}},
                                UpdateExpression="ADD parent_slots :s", ExpressionAttributeValues={":s": {"SS": [slot]}})

    def unregister_parent(self, slot: str, key: str) -> None:
        """Take the incident of `key` (resolved) out of `slot`; nothing when it is not there."""
        try:
            self.client.update_item(TableName=self.table_name, Key={"incident_key": {"S": slot}},
                                    UpdateExpression="REMOVE #p.#k", ConditionExpression="attribute_exists(#p)",
                                    ExpressionAttributeNames={"#p": "parents", "#k": key})
        except self.client.exceptions.ConditionalCheckFailedException:
            pass

    def paged(self, key: str, execution_name: str) -> bool:
        """A page went out for the open incident of `key` (by this execution): from now on it may
        hold its dependants. False when it is not open (resolved meanwhile: it holds nothing)."""
        try:
            self.client.update_item(
                TableName=self.table_name, Key={"incident_key": {"S": key}}, UpdateExpression="SET paged_by = :name",
                ConditionExpression="#s = :open", ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":name": {"S": execution_name}, ":open": {"S": "open"}})
            return True
        except self.client.exceptions.ConditionalCheckFailedException:
            return False

    def link_child(self, parent_key: str, child_key: str) -> bool:
        """List `child_key` on its parent's row, only while the parent is open and paged. The
        child is marked held under the parent first (`held`); the parent's resolution reads this
        list with the write that closes it, so a child linked before it is released by it, and
        one whose link comes after is refused here (its invocation takes the mark off and decides
        it: `unhold`). False: the parent is not open and paged."""
        try:
            self.client.update_item(
                TableName=self.table_name, Key={"incident_key": {"S": parent_key}},
                UpdateExpression="ADD held_children :c",
                ConditionExpression="#s = :open AND attribute_exists(paged_by)",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":c": {"SS": [child_key]}, ":open": {"S": "open"}})
            return True
        except self.client.exceptions.ConditionalCheckFailedException:
            return False

    def unhold(self, key: str, delivery: str) -> None:
        """Take a dependency hold's mark off the incident that `delivery` opened (its parent
        refused the link): it is decided now, and a retry of the delivery decides it again."""
        self.client.update_item(
            TableName=self.table_name, Key={"incident_key": {"S": key}},
            UpdateExpression="SET routed = :no REMOVE held, held_under, held_item, parent_severity",
            ConditionExpression="opened_by = :d", ExpressionAttributeValues={":no": {"BOOL": False}, ":d": {"S": delivery}})

    def point(self, execution_name: str, key: str) -> None:
        """Remember which incident an execution routes (`execution#<name>` -> its key), for an
        incident that may page later, when its reviewer's answer escalates: the workflow's
        `Item Escalated` names the execution, not the source's key. Expires with the retention."""
        self.client.put_item(TableName=self.table_name, Item={
            "incident_key": {"S": EXECUTION_POINTER + execution_name}, "points_to": {"S": key},
            "expires_at": {"N": str(expiry(self.retention_days))}})

    def pointed(self, execution_name: str) -> str | None:
        """The incident key `point` remembered for the execution (None: none)."""
        raw = self._item(EXECUTION_POINTER + execution_name)
        return raw["points_to"]["S"] if raw and "points_to" in raw else None

    def held_open(self) -> list[IncidentRow]:
        """The open incidents held under a parent and not routed (nor grouped) since, for the
        sweep (which routes those whose parent is resolved, gone or not paged, and those held past
        the ceiling). A Query of the open-incident index; its rows are read again by key before
        one is routed."""
        return [_read(IncidentRow, raw) for raw in self._open_rows(
            FilterExpression="attribute_exists(held_under) AND attribute_not_exists(execution_name) "
                             "AND attribute_not_exists(#g)", names={"#g": "group"})]


def unfiling(table_name: str, lookup: str, key: str) -> dict[str, Any]:
    """The UpdateItem that takes the incident of `key` off the link index's row of `lookup` and
    counts it out; its condition fails where the row does not list it (so it is counted out once)."""
    return {"TableName": table_name, "Key": {"incident_key": {"S": LOOKUP_ROW + lookup}},
            "UpdateExpression": "REMOVE #k ADD #n :minus_one", "ConditionExpression": "attribute_exists(#k)",
            "ExpressionAttributeNames": {"#k": FILED + key, "#n": FILED_COUNT},
            "ExpressionAttributeValues": {":minus_one": {"N": "-1"}}}


def filed_on(row: dict[str, Any]) -> dict[str, datetime]:
    """The open incidents a row of the link index lists (incident key -> reported time), from its
    `FILED` attributes; one whose time is not a time is left out."""
    filed = {name[len(FILED):]: instant_of(value.get("S")) for name, value in row.items() if name.startswith(FILED)}
    return {key: at for key, at in filed.items() if at is not None}


def instant_of(text: str | None) -> datetime | None:
    """A reported time as the link index keeps it (ISO 8601 with a zone); None when it is not one."""
    try:
        return _INSTANT.validate_python(text)
    except ValidationError:
        return None


def open_incident_of(row: dict[str, Any]) -> OpenIncident | None:
    """The open incident a ticket may be linked to, as its row keeps it; None for a row missing its
    id or time (nothing to link to)."""
    try:
        return OpenIncident(key=row["incident_key"], incident_id=row["incident_id"], service=row["service"],
                            opened_at=row["reported_at"], source=row.get("source"), title=row.get("title"),
                            description=row.get("description"))
    except (KeyError, ValidationError):
        return None
