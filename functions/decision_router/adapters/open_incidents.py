"""The open-incident store (DynamoDB, keyed by the source's correlation key): which native-source
incidents are open, so a re-delivery is routed once, a new event of an open incident updates it
instead of paging again, and a resolution closes it.

One row per key: status open|resolved, the delivery (EventBridge event id) that opened it,
whether that opening was routed (and by which execution), every delivery seen while open, the
update count and the resolution. A flap (ALARM, OK, ALARM) reopens the row as a new incident.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from . import AwsAdapter

#: new: this delivery opens the incident (route it); retry: this delivery opened it but its
#: routing did not finish (route it again; the execution name makes that safe); update: another
#: delivery of an open incident (route nothing); duplicate: this delivery was seen already.
Claim = Literal["new", "retry", "update", "duplicate"]
#: Conditional writes lost to a concurrent writer before giving up (the event is then retried).
MAX_RACES = 3


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class OpenIncidents(AwsAdapter):
    service = "dynamodb"

    def __init__(self, table_name: str, client: Any = None):
        super().__init__(client)
        self.table_name = table_name

    def get(self, key: str) -> dict[str, Any] | None:
        row = self.client.get_item(TableName=self.table_name, Key={"incident_key": {"S": key}},
                                   ConsistentRead=True).get("Item")
        return row

    def claim(self, key: str, delivery: str, *, incident_id: str, source: str) -> Claim:
        """Open the incident of `key` with this delivery, or say why not."""
        for _ in range(MAX_RACES):
            try:
                self.client.put_item(
                    TableName=self.table_name,
                    Item={"incident_key": {"S": key}, "status": {"S": "open"}, "opened_by": {"S": delivery},
                          "deliveries": {"SS": [delivery]}, "routed": {"BOOL": False}, "updates": {"N": "0"},
                          "incident_id": {"S": incident_id}, "source": {"S": source}, "opened_at": {"S": _now()}},
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
            if row["opened_by"]["S"] == delivery:
                return "retry" if row["status"]["S"] == "open" and not row["routed"]["BOOL"] else "duplicate"
            if row["status"]["S"] == "open":
                return "update" if self.touch(key, delivery) else "duplicate"
        raise RuntimeError(f"open-incident store: {key!r} kept changing under {MAX_RACES} claims; the event is retried")

    def touch(self, key: str, delivery: str) -> bool:
        """Count a new delivery of an open incident; False when the incident is not open or this
        delivery was counted already."""
        try:
            self.client.update_item(
                TableName=self.table_name, Key={"incident_key": {"S": key}},
                UpdateExpression="ADD deliveries :ds SET updates = updates + :one, updated_at = :now, last_delivery = :d",
                ConditionExpression="#s = :open AND NOT contains(deliveries, :d)",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":ds": {"SS": [delivery]}, ":one": {"N": "1"}, ":now": {"S": _now()},
                                           ":d": {"S": delivery}, ":open": {"S": "open"}})
            return True
        except self.client.exceptions.ConditionalCheckFailedException:
            return False

    def routed(self, key: str, delivery: str, execution_name: str) -> None:
        """The opening delivery was routed (by this execution)."""
        self.client.update_item(
            TableName=self.table_name, Key={"incident_key": {"S": key}},
            UpdateExpression="SET routed = :yes, execution_name = :name",
            ConditionExpression="opened_by = :d",
            ExpressionAttributeValues={":yes": {"BOOL": True}, ":name": {"S": execution_name}, ":d": {"S": delivery}})

    def resolve(self, key: str, delivery: str, reason: str) -> dict[str, Any] | None:
        """Close the open incident of `key`; its row as it was (None when nothing was open)."""
        try:
            response = self.client.update_item(
                TableName=self.table_name, Key={"incident_key": {"S": key}},
                UpdateExpression="SET #s = :resolved, resolved_at = :now, resolved_by = :d, resolution = :why",
                ConditionExpression="#s = :open",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":resolved": {"S": "resolved"}, ":open": {"S": "open"}, ":now": {"S": _now()},
                                           ":d": {"S": delivery}, ":why": {"S": reason[:1000]}},
                ReturnValues="ALL_OLD")
        except self.client.exceptions.ConditionalCheckFailedException:
            return None
        return response.get("Attributes")
