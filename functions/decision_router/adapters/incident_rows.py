"""The incidents' rows of the open-incident table (port `IncidentRows`): put when one opens,
counted per delivery, marked routed, resolved; and which incident an execution routes. The claim's
rule (what a put that did not hold means) is domain/open_incidents.py's."""

from __future__ import annotations

from typing import Any

from ..domain import open_incidents as rules
from ..domain.ports.incidents import Claim, IncidentRow, Opening
from . import expiry
from .incident_table import OPEN_MARK, IncidentTable, item_of, open_mark, read

#: The key prefix of a row naming the incident an execution routes (`point`).
EXECUTION_POINTER = "execution#"


class IncidentRowStore(IncidentTable):
    def get(self, key: str) -> IncidentRow | None:
        """The incident of `key` (None: never opened here)."""
        raw = self._item(key)
        return read(IncidentRow, raw) if raw else None

    def put_opening(self, row: Opening) -> bool:
        """Put the incident's row whole (a reopened row loses its expiry and gets its open mark
        back), only where there is none or it is resolved and was opened by another delivery (a
        late copy of the delivery that opened it does not reopen it)."""
        values: dict[str, Any] = {"status": "open", OPEN_MARK: open_mark(row.incident_key),
                                  "deliveries": {row.opened_by}, "routed": False, "updates": 0,
                                  **row.model_dump(exclude_none=True, exclude={"opens", "filed_under"})}
        if row.opens:
            values["opens"] = row.opens
        if row.service:  # what the intake files it under (`file`), so its resolution finds them again
            values["filed_under"] = row.filed_under
        return self._written_if(
            "put_item", Item=item_of(values),
            ConditionExpression="attribute_not_exists(incident_key) OR (#s = :resolved AND opened_by <> :d)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":resolved": {"S": "resolved"}, ":d": {"S": row.opened_by}}) is not None

    def claim(self, key: str, delivery: str, *, incident_id: str, source: str, opens: list[str] | None = None,
              service: str | None = None, reported_at: str | None = None, title: str | None = None,
              description: str | None = None) -> Claim:
        """Open the incident of `key` with this delivery, or say why not (domain/open_incidents.py)."""
        row = rules.opening(key, delivery, incident_id=incident_id, source=source, opened_at=rules.now_iso(),
                            opens=opens, service=service, reported_at=reported_at, title=title,
                            description=description)
        return rules.claim(self, row, delivery)

    def touch(self, key: str, delivery: str) -> bool:
        """Count a new delivery of an open incident; False when the incident is not open or this
        delivery was counted already."""
        return self._written_if(
            "update_item", Key=self._key(key),
            # The mark too: a row opened before the index was kept joins it with its next delivery,
            # and one marked before the index was sharded moves to its shard.
            UpdateExpression="ADD deliveries :ds SET updates = updates + :one, updated_at = :now, "
                             "last_delivery = :d, #m = :mark",
            ConditionExpression="#s = :open AND NOT contains(deliveries, :d)",
            ExpressionAttributeNames={"#s": "status", "#m": OPEN_MARK},
            ExpressionAttributeValues={":ds": {"SS": [delivery]}, ":one": {"N": "1"}, ":now": {"S": rules.now_iso()},
                                       ":d": {"S": delivery}, ":open": {"S": "open"}, ":mark": {"S": open_mark(key)}}) is not None

    def routed(self, key: str, delivery: str, execution_name: str, *, group: str | None = None) -> None:
        """The opening delivery was routed (by this execution), leading `group` when given."""
        values = {":yes": {"BOOL": True}, ":name": {"S": execution_name}, ":d": {"S": delivery}}
        if group:
            values[":g"] = {"S": group}
        self.client.update_item(
            TableName=self.table_name, Key=self._key(key),
            UpdateExpression="SET routed = :yes, execution_name = :name" + (", #g = :g" if group else ""),
            ConditionExpression="opened_by = :d", ExpressionAttributeValues=values,
            **({"ExpressionAttributeNames": {"#g": "group"}} if group else {}))

    def add_member(self, key: str, member: str) -> None:
        """List `member` on the incident it was grouped into."""
        self.client.update_item(TableName=self.table_name, Key=self._key(key),
                                UpdateExpression="ADD members :m", ExpressionAttributeValues={":m": {"SS": [member]}})

    def resolve(self, key: str, delivery: str, reason: str) -> IncidentRow | None:
        """Close the open incident of `key`; its row as it was (None when nothing was open)."""
        response = self._written_if(
            "update_item", Key=self._key(key),
            UpdateExpression="SET #s = :resolved, resolved_at = :now, resolved_by = :d, resolution = :why, "
                             "expires_at = :expires REMOVE #m",
            ConditionExpression="#s = :open",
            ExpressionAttributeNames={"#s": "status", "#m": OPEN_MARK},
            ExpressionAttributeValues={":resolved": {"S": "resolved"}, ":open": {"S": "open"},
                                       ":now": {"S": rules.now_iso()}, ":d": {"S": delivery},
                                       ":why": {"S": reason[:1000]},
                                       ":expires": {"N": str(expiry(self.retention_days))}},
            ReturnValues="ALL_OLD")
        return None if response is None else read(IncidentRow, response["Attributes"])

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
