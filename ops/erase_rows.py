"""Erase's tables: one item's rows found (a dry run) or removed, table by table (`ops.erase`).

Each row is matched by the item it holds (its kind, its source and its id read from the row), never
by an id alone; a waiting review's execution is stopped before its row goes, an open incident
leaves its dependency slots and the link index's rows first."""

from __future__ import annotations

import json
from typing import Any, Iterator

from decision_router.adapters.link_index import FILED_COUNT, LOOKUP_ROW, unfiling
from ops.erase_item import ItemKey


def _scan(dynamodb: Any, table: str, **filters: Any) -> Iterator[dict[str, Any]]:
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, **filters):
        yield from page["Items"]


class ItemRows:
    """Finds and removes one item's rows of each table (given by name) that holds its text."""

    def __init__(self, key: ItemKey, *, dynamodb: Any, stepfunctions: Any, state_machine: str, dry_run: bool,
                 notes: list[str]):
        self.key, self.dynamodb, self.stepfunctions, self.dry_run = key, dynamodb, stepfunctions, dry_run
        #: The routing state machine, whose waiting executions of the item are stopped ("": none stopped).
        self.state_machine = state_machine
        self.notes = notes
        #: The policies whose labelled-examples rows of the item were erased (found, on a dry run).
        self.label_policies: set[str] = set()

    def _delete(self, table: str, keys: list[dict[str, Any]]) -> int:
        if not self.dry_run:
            for key in keys:
                self.dynamodb.delete_item(TableName=table, Key=key)
        return len(keys)

    def audit(self, table: str) -> int:
        keys = []
        for page in self.dynamodb.get_paginator("query").paginate(
                TableName=table, KeyConditionExpression="item_id = :i", ExpressionAttributeValues={":i": {"S": self.key.id}}):
            keys += [{"item_id": row["item_id"], "execution_name": row["execution_name"]} for row in page["Items"]
                     if self.key.holds(row.get("item_kind", {}).get("S"), row.get("item", {}).get("S"))]
        return self._delete(table, keys)

    def pending_reviews(self, table: str) -> int:
        """The item's rows of the pending-review index (the record of a review that waits), each
        review's execution stopped first, so nothing answers it after."""
        rows = []
        for row in _scan(self.dynamodb, table):
            record = json.loads(row.get("record", {}).get("S", "{}"))
            if isinstance(record, dict) and self.key.holds(record.get("item_kind"), record.get("item")):
                rows.append(row)
        if not self.dry_run:
            for row in rows:
                self._stop({"execution_name": row["execution_name"]["S"]})
        return self._delete(table, [{"execution_name": row["execution_name"]} for row in rows])

    def labelled(self, table: str) -> int:
        # Every policy's rows: the item is read from each row, whatever its sort key names it by.
        keys = [{"policy_name": row["policy_name"], "item_key": row["item_key"]} for row in _scan(self.dynamodb, table)
                if self.key.holds(row.get("item_kind", {}).get("S"), row.get("item", {}).get("S"))]
        self.label_policies |= {key["policy_name"]["S"] for key in keys}
        return self._delete(table, keys)

    def resolved(self, table: str) -> int:
        keys = []
        for row in _scan(self.dynamodb, table):
            body = json.loads(row.get("body", {}).get("S", "{}"))
            # A resolved row keeps the item's kind, id and source (a row kept before sources were kept
            # names none: it is erased by kind and id).
            same = (body.get("item_kind") == self.key.kind and body.get("item_id") in (self.key.id, str(self.key))
                    and (body.get("item_source") or self.key.source) == self.key.source)
            if same:
                keys.append({"policy": row["policy"], "resolved_key": row["resolved_key"]})
        return self._delete(table, keys)

    def open_incidents(self, table: str) -> int:
        if self.key.kind != "incident":
            return 0
        rows = list(_scan(self.dynamodb, table, FilterExpression="incident_id = :i AND #s = :s",
                          ExpressionAttributeNames={"#s": "source"},
                          ExpressionAttributeValues={":i": {"S": self.key.id}, ":s": {"S": self.key.source}}))
        for row in rows:
            self._leave_slots(table, row)
            self._leave_lookups(table, row)
        return self._delete(table, [{"incident_key": row["incident_key"]} for row in rows])

    def _leave_lookups(self, table: str, row: dict[str, Any]) -> None:
        """The incident off the link index's rows it was filed under (their keys are words of its
        text and its service): each row that listed it alone is deleted, so none of its words is
        left as a key; a row that lists other open incidents keeps them."""
        lookups = [entry["S"] for entry in row.get("filed_under", {}).get("L", []) if "S" in entry]
        if self.dry_run or not lookups:
            return
        key = row["incident_key"]["S"]
        for lookup in lookups:
            slot = {"incident_key": {"S": LOOKUP_ROW + lookup}}
            try:
                self.dynamodb.update_item(**unfiling(table, lookup, key))
            except self.dynamodb.exceptions.ConditionalCheckFailedException:
                pass  # not listed there (a row it was never filed under, being full, is left as it is)
            try:  # a row that lists none now goes (a word of the erased text among its keys)
                self.dynamodb.delete_item(TableName=table, Key=slot, ConditionExpression="#n = :none",
                                          ExpressionAttributeNames={"#n": FILED_COUNT},
                                          ExpressionAttributeValues={":none": {"N": "0"}})
            except self.dynamodb.exceptions.ConditionalCheckFailedException:
                pass  # no such row, or it lists other open incidents

    def _leave_slots(self, table: str, row: dict[str, Any]) -> None:
        """An incident that may hold others (it paged): out of its dependency slots first, so it
        holds nothing new; the incidents it holds stay held under a parent that is gone, which the
        incident intake's sweep (and their next event) decides and routes."""
        key = row["incident_key"]["S"]
        held = row.get("held_children", {}).get("SS", [])
        if row.get("status", {}).get("S") == "open" and held:
            self.notes.append(f"{key} held {len(held)} incident(s) ({', '.join(sorted(held))}): the incident "
                              "intake's sweep decides and routes them within 5 minutes, their parent gone")
        if self.dry_run:
            return
        for slot in row.get("parent_slots", {}).get("SS", []):
            try:
                self.dynamodb.update_item(TableName=table, Key={"incident_key": {"S": slot}},
                                          UpdateExpression="REMOVE #p.#k", ConditionExpression="attribute_exists(#p)",
                                          ExpressionAttributeNames={"#p": "parents", "#k": key})
            except self.dynamodb.exceptions.ConditionalCheckFailedException:
                pass  # the slot is gone already

    def idempotency(self, table: str) -> int:
        keys = []
        for row in _scan(self.dynamodb, table):
            try:
                data = json.loads(row.get("data", {}).get("S", "null"))
            except ValueError:
                continue
            if isinstance(data, dict) and self.key.holds(data.get("item_kind"), data.get("item")):
                keys.append({"id": row["id"]})
        return self._delete(table, keys)


    def _stop(self, body: Any) -> None:
        arn = self.state_machine
        name = body.get("execution_name") if isinstance(body, dict) else None
        if arn and name:
            execution = arn.replace(":stateMachine:", ":execution:") + f":{name}"
            try:
                self.stepfunctions.stop_execution(executionArn=execution, error="ItemErased",
                                                  cause="the item was erased on request")
            except self.stepfunctions.exceptions.ExecutionDoesNotExist:
                pass  # finished or never started: nothing waits for the message

