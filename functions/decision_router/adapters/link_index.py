"""The link index on the open-incident table (port `LinkIndex`, domain/linking.py): a ticket is
linked without listing the open incidents. A row per lookup key (`lookup#name#<service>`,
`lookup#word#<word>`) lists the open incidents filed under it (`file`, by the incident intake once
an incident opens; `unfile` when it resolves, from the keys its row keeps in `filed_under`). The
ticket intake reads the rows of its ticket's keys (`filed_under`) and then the incidents they list
(`open_incidents`), each a BatchGetItem.

Each incident filed is an attribute of its own (`FILED` + incident key -> reported time), and
their count `FILED_COUNT` (at most MAX_FILED): filing or unfiling is then one conditional
UpdateItem whatever the row holds (missing, with room, full): a count kept beside a map could not
be checked and raised in one write. A row that lists no incident any more is deleted (one
DeleteItem more, conditional on its count still being 0), so a resolved incident's words do not
stay behind as keys."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from pydantic import TypeAdapter, ValidationError

from ..domain.linking import MAX_FILED, OpenIncident
from ..items import UtcDatetime
from . import batch_get
from .incident_table import IncidentTable, plain
from .shards import in_parallel

#: The key prefix of a row of the link index, the prefix of each incident's attribute on it, and
#: the attribute counting them.
LOOKUP_ROW = "lookup#"
FILED = "filed#"
FILED_COUNT = "filed_count"
_INSTANT: TypeAdapter[datetime] = TypeAdapter(UtcDatetime)


class LinkIndexStore(IncidentTable):
    def file(self, key: str, lookup_keys: Sequence[str], reported_at: str) -> None:
        """File the open incident of `key` (reported at `reported_at`) under each of `lookup_keys`,
        all at once; a key that lists `MAX_FILED` open incidents already is left as it is (a word
        that many share tells none apart). One UpdateItem a key, whatever its row holds. A key
        that lists the incident already keeps it as it is: a retry files nothing more."""
        in_parallel(lambda lookup: self._file_one(LOOKUP_ROW + lookup, key, reported_at), lookup_keys)

    def _file_one(self, row_key: str, key: str, reported_at: str) -> None:
        self._written_if(
            "update_item", Key=self._key(row_key), UpdateExpression="SET #k = :at ADD #n :one",
            # Listed already (a retry: counted once), or full: nothing to do.
            ConditionExpression="attribute_not_exists(#k) AND (attribute_not_exists(#n) OR #n < :max)",
            ExpressionAttributeNames={"#k": FILED + key, "#n": FILED_COUNT},
            ExpressionAttributeValues={":at": {"S": reported_at}, ":one": {"N": "1"}, ":max": {"N": str(MAX_FILED)}})

    def unfile(self, key: str, lookup_keys: Sequence[str]) -> None:
        """Take the incident of `key` off each of `lookup_keys` (nothing where it is not listed):
        one UpdateItem a key, and a DeleteItem more for a row it leaves listing none."""
        in_parallel(lambda lookup: self._unfile_one(lookup, key), lookup_keys)

    def _unfile_one(self, lookup: str, key: str) -> None:
        try:
            left = self.client.update_item(**unfiling(self.table_name, lookup, key), ReturnValues="UPDATED_NEW")
        except self.client.exceptions.ConditionalCheckFailedException:
            return  # not listed there (or no row): nothing was filed there
        if left.get("Attributes", {}).get(FILED_COUNT, {}).get("N") != "0":
            return  # it lists other open incidents
        self._written_if(
            "delete_item", Key=self._key(LOOKUP_ROW + lookup),
            ConditionExpression="#n = :none", ExpressionAttributeNames={"#n": FILED_COUNT},
            ExpressionAttributeValues={":none": {"N": "0"}})  # conditional: an incident filed there meanwhile keeps the row

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
        incidents = [open_incident_of(plain(raw)) for raw in rows if raw.get("status", {}).get("S") == "open"]
        return sorted((i for i in incidents if i is not None), key=lambda incident: incident.key)

    def _batch_get(self, keys: list[str], *, projection: str | None = None,
                   names: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """The rows of `keys` that exist (only `projection`'s attributes, when given)."""
        return batch_get(self.client, self.table_name, [self._key(key) for key in keys],
                         what="open-incident store", projection=projection, names=names)


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
