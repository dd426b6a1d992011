"""The holds of the noise controls on the open-incident table (port `IncidentHolds`): an opening
held (grouped, flapping, in a maintenance window), and a window's hold released once it ended."""

from __future__ import annotations

from ..domain.ports.incidents import IncidentRow
from .incident_table import IncidentTable, read


class IncidentHoldStore(IncidentTable):
    def held(self, key: str, delivery: str, why: str, **fields: str) -> None:
        """The opening delivery was held by a noise control (grouped, flapping, in a maintenance
        window): nothing to route, so it counts as routed; `why` and `fields` say how."""
        names = {f"#{k}": k for k in fields}
        values = {f":{k}": {"S": v} for k, v in fields.items()}
        sets = "".join(f", #{k} = :{k}" for k in fields)
        extra = {"ExpressionAttributeNames": names} if names else {}
        self.client.update_item(
            TableName=self.table_name, Key=self._key(key),
            UpdateExpression=f"SET routed = :yes, held = :why{sets}", ConditionExpression="opened_by = :d",
            ExpressionAttributeValues={":yes": {"BOOL": True}, ":why": {"S": why}, ":d": {"S": delivery}, **values},
            **extra)

    def release(self, key: str, now: str) -> bool:
        """Take the hold of a maintenance window off the open incident of `key` once its window
        ended (`held_until` at or before `now`) and it is not routed yet: True when the caller should
        route it. The hold stays until `released` names the execution, so a routing that fails is
        retried by the next delivery; two at once start one execution (it is named after the item)."""
        return self._written_if(
            "update_item", Key=self._key(key),
            UpdateExpression="SET released_at = :now",
            ConditionExpression="#s = :open AND held_until <= :now AND attribute_not_exists(execution_name)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":open": {"S": "open"}, ":now": {"S": now}}) is not None

    def expired_holds(self, now: str) -> list[IncidentRow]:
        """The open incidents a maintenance window held whose window ended by `now`, not routed
        yet (the sweep routes them: a source such as CloudWatch sends nothing more while an alarm
        stays in ALARM). A Query of the open-incident index: eventually consistent, which
        `release`'s conditional write makes safe (a row routed meanwhile is not released twice)."""
        return [read(IncidentRow, raw) for raw in self._open_rows(
            FilterExpression="held_until <= :now AND attribute_not_exists(execution_name)",
            values={":now": {"S": now}})]

    def released(self, key: str, execution_name: str) -> None:
        """The incident whose hold was released was routed (by this execution)."""
        self.client.update_item(TableName=self.table_name, Key=self._key(key),
                                UpdateExpression="SET execution_name = :name, held = :why",
                                ExpressionAttributeValues={":name": {"S": execution_name},
                                                           ":why": {"S": "held by a maintenance window until it "
                                                                         "ended; then routed"}})
