"""Erase one item's text from every table of a stack that holds it (a customer's erasure request).

    python -m ops.erase ITEM [--stack NAME | --audit-table … --labelled-table … --resolved-table …
                              --open-incidents-table … --idempotency-table …
                              --ticket-dlq-url … --incident-dlq-url … --team-dlq-url … --workflow-dlq-url …
                              --escalation-queue-url … --head-bucket …] [--dry-run]

ITEM is the item's full key, `kind:source:id` (`ticket:email:T-1001`,
`incident:cloudwatch:arn:aws:cloudwatch:…`: the id is everything after the second colon), as the
pipeline names an item: the same id from another source is another item and is left alone. Each
row is matched by the item it holds (its kind, its source and its id read from the row), never by
an id alone. What holds an item's text, and what is removed there:

| table / queue | rows of the item |
|---|---|
| audit | every outcome row (`item_id`, then each row's item read) |
| labelled examples | the reviewer's answer kept for training (every policy) |
| resolved items | the rows kept for the console's similar items (every policy, both kinds) |
| open incidents | an incident's row (its id and source; incidents only), out of its dependency slots first |
| idempotency | the record kept a day for a duplicate delivery (not the review SLA's escalation marks: no item text) |
| pending reviews | a waiting review's row of the pending-review index; its execution is stopped first |
| dead-letter, escalation queues | a parked or failed ticket or event, a failed record, an overdue review (14 days) |
| head bucket `labels/` | relearning's kept labels (every policy): rewritten without the item's rows, every version holding them deleted |

The kept labels are rewritten after the labelled-examples table's rows, as a new version (its
`erased_at` set) wherever the object held the item or its policy's table held a row of it, even
with no row to remove, and only while it is the version read (S3 If-Match; If-None-Match where
there is none yet, so a first relearning sync under way meets it too). A relearning sync that
read the object before meets a conflict and starts over (relearning/labels.py), reading the table
after the row is gone: it cannot write the item back.

Each queue is read once, its messages hidden 30 s while it is read: a message that carries the item
is deleted as soon as it is read (on a dry run only counted), every other one made visible again
at once when the read ends. An incident's event is matched as the incident intake reads it (the
incident id its source gives it: a Grafana alert's fingerprint, an alarm's ARN in an SNS message).

Printed: one line per table or queue with the rows removed (or, with --dry-run, found); a `not
read:` line for each queue not named (no URL given), with how long it keeps its messages; and a
note for an open incident that held others (the incident intake's sweep decides them within 5
minutes), for a removed message that carried other incidents too, and for a queue read for longer
than its messages stay hidden (run erase again). Not erasable here:
a Step Functions execution's history keeps its input 90 days (then Step Functions removes it), and
the team queues' messages belong to their consumers. The webhook deliveries and the head history
hold no item text (a delivery's hash and source; a shadow tally's counts).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, TextIO

from botocore.exceptions import ClientError

from decision_router.adapters.head_store import CHANGED_MEANWHILE
from decision_router.adapters.open_incidents import FILED_COUNT, LOOKUP_ROW, unfiling
from decision_router.adapters.queues import new_batches, release_now
from decision_router.domain.kept_labels import LABELS_PREFIX, KeptLabels, labels_key
from decision_router.items import ITEM_MODELS

#: Each table: its stack output and the flag that names it instead.
TABLES = {"audit": "AuditTableName", "labelled": "LabelledExamplesTableName", "resolved": "ResolvedItemsTableName",
          "open-incidents": "OpenIncidentsTableName", "idempotency": "IdempotencyTableName",
          "pending-reviews": "PendingReviewsTableName"}
#: The queues that keep an item's text until their retention ends (14 days), by the name erase
#: gives them (its flag: --NAME-url) and their stack output: a ticket or event parked or failed, a
#: failed execution's record, a team message that failed, a review nobody answered in time.
HELD_QUEUES = {"ticket-dlq": "TicketDeadLetterQueueUrl", "incident-dlq": "IncidentDeadLetterQueueUrl",
               "team-dlq": "TeamDeadLetterQueueUrl", "workflow-dlq": "WorkflowDeadLetterQueueUrl",
               "escalation-queue": "EscalationQueueUrl"}
#: How long those queues keep a message (their MessageRetentionPeriod in
#: template.yaml): a queue erase does not read keeps the item's text this long.
QUEUE_RETENTION_DAYS = 14
#: Seconds a message read by erase stays hidden from other readers while the queue is read.
QUEUE_VISIBILITY = 30
#: The head bucket (stack output), where relearning keeps the labels it has read under LABELS_PREFIX.
HEAD_BUCKET = "HeadBucketName"
#: Rewrites of one kept-labels object tried while relearning writes it meanwhile, before a note says to run erase again.
LABEL_WRITE_ATTEMPTS = 5


class EraseError(ValueError):
    """An item key or a stack that cannot be erased from, in words."""


@dataclass(frozen=True)
class ItemKey:
    kind: str
    source: str
    id: str

    @classmethod
    def parse(cls, text: str) -> ItemKey:
        kind, _, rest = text.partition(":")
        source, _, item_id = rest.partition(":")
        if kind not in ITEM_MODELS:
            raise EraseError(f"ITEM {text!r}: the kind {kind!r} is not one of {', '.join(sorted(ITEM_MODELS))} "
                             f"(expected kind:source:id)")
        if not source or not item_id:
            raise EraseError(f"ITEM {text!r}: expected kind:source:id, e.g. ticket:email:T-1001")
        return cls(kind, source, item_id)

    def __str__(self) -> str:
        return f"{self.kind}:{self.source}:{self.id}"

    def holds(self, kind: Any, item: Any) -> bool:
        """Whether a row's kind and item (a dict, or its JSON text) are this item."""
        if kind != self.kind:
            return False
        if isinstance(item, str):
            try:
                item = json.loads(item)
            except ValueError:
                return False
        if not isinstance(item, Mapping):
            return False
        model = ITEM_MODELS[self.kind]
        return item.get(model.id_field) == self.id and item.get(model.source_field) == self.source


@dataclass
class Erased:
    """Rows removed (or found, on a dry run) per table."""

    dry_run: bool = False
    rows: dict[str, int] = field(default_factory=dict)
    #: What else the erasure did or will cause (an erased parent's held incidents, routed by the sweep).
    notes: list[str] = field(default_factory=list)
    #: The queues not read (no URL given), each with why and how long it keeps the item's text.
    unread: dict[str, str] = field(default_factory=dict)
    #: Object versions removed (or found) per bucket prefix: earlier copies that held the item.
    versions: dict[str, int] = field(default_factory=dict)

    def report(self, out: TextIO) -> None:
        verb = "found (dry run, nothing removed)" if self.dry_run else "removed"
        for table, count in self.rows.items():
            out.write(f"{table}: {count} row(s) {verb}\n")
        for where, count in self.versions.items():
            out.write(f"{where}: {count} earlier version(s) {verb}\n")
        for queue, why in self.unread.items():
            out.write(f"not read: {queue} ({why})\n")
        for note in self.notes:
            out.write(f"note: {note}\n")


def _scan(dynamodb: Any, table: str, **filters: Any) -> Iterator[dict[str, Any]]:
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, **filters):
        yield from page["Items"]


class Eraser:
    """Finds and removes one item's rows, table by table (each given by name; an empty name: skipped)."""

    def __init__(self, key: ItemKey, names: Mapping[str, str], *, dynamodb: Any, sqs: Any, stepfunctions: Any,
                 s3: Any = None, dry_run: bool = False):
        self.key, self.names, self.dry_run = key, names, dry_run
        self.dynamodb, self.sqs, self.stepfunctions, self.s3 = dynamodb, sqs, stepfunctions, s3
        self.notes: list[str] = []
        self._severity: Mapping[str, Any] | None = None
        #: The policies whose labelled-examples rows of the item were erased (found, on a dry run).
        self.label_policies: set[str] = set()

    def erase(self) -> Erased:
        erased = Erased(dry_run=self.dry_run, notes=self.notes)
        steps: dict[str, Callable[[str], int]] = {
            "audit": self.audit, "labelled": self.labelled, "resolved": self.resolved,
            "open-incidents": self.open_incidents, "idempotency": self.idempotency,
            "pending-reviews": self.pending_reviews}
        for name, step in steps.items():
            if self.names.get(name):
                erased.rows[name] = step(self.names[name])
        # After the labelled-examples table: a relearning step from now on reads the item no more.
        if self.names.get("head-bucket"):
            erased.rows["kept-labels"], erased.versions["kept-labels"] = self.kept_labels(self.names["head-bucket"])
        else:
            erased.unread["kept-labels"] = ("no --head-bucket: relearning's copy of the labelled examples, the "
                                            "item's among them, keeps a label up to LabelRetentionDays")
        for name in HELD_QUEUES:
            if self.names.get(name):
                erased.rows[name] = self.held_queue(self.names[name], name)
        for name in HELD_QUEUES:
            if not self.names.get(name):
                erased.unread[name] = (f"no --{name}-url: its messages, the item's text among them, are kept up to "
                                       f"{QUEUE_RETENTION_DAYS} days")
        return erased

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

    def kept_labels(self, bucket: str) -> tuple[int, int]:
        """The item's rows out of each policy's kept labels (written as a new current version, its
        watermark and next full read as they were), then every other version of the object that
        holds the item deleted, so that none is left for the lifecycle rule's day. How many rows,
        how many versions."""
        rows = versions = 0
        # a policy that had a row of the item is rewritten even without an object yet (a first sync under way)
        touched = {labels_key(policy) for policy in self.label_policies}
        for key in sorted(set(self._versions(bucket, LABELS_PREFIX)) | touched):
            found, written = self._rewrite_labels(bucket, key, touch=key in touched)
            rows += found
            # listed after the rewrite: the version it replaced, and any relearning wrote meanwhile
            for version in self._versions(bucket, key).get(key, []):
                if version != written and self._labels_of(bucket, key, version) is not None:
                    versions += 1
                    if not self.dry_run:
                        self.s3.delete_object(Bucket=bucket, Key=key, VersionId=version)
            if written:
                self._check_not_written_back(bucket, key, written)
        return rows, versions

    def _versions(self, bucket: str, prefix: str) -> dict[str, list[str]]:
        """The version ids of each object under `prefix` (delete markers hold nothing)."""
        found: dict[str, list[str]] = {}
        for page in self.s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
            for version in page.get("Versions", []):
                found.setdefault(version["Key"], []).append(version["VersionId"])
        return found

    def _labels_of(self, bucket: str, key: str, version: str) -> KeptLabels | None:
        """One version's kept labels where it holds the item; None where not (or where it does not
        read: a note says so, and it is left)."""
        data = self.s3.get_object(Bucket=bucket, Key=key, VersionId=version)["Body"].read()
        try:
            kept = KeptLabels.load(data, f"{key} (version {version})")
        except ValueError as error:
            self.notes.append(f"kept-labels: {error}: left as it is")
            return None
        return kept if kept.remove(self._holds_row) else None

    def _rewrite_labels(self, bucket: str, key: str, *, touch: bool) -> tuple[int, str | None]:
        """The current version without the item's rows, written as the new current one with its
        `erased_at` now, where it held the item or `touch` (its policy's table held a row of the
        item, which a relearning sync may have read). Written only while it is the version read,
        read again on a conflict (see the module). The rows removed (found, on a dry run) and the
        new version's id (None when nothing was written)."""
        for _ in range(LABEL_WRITE_ATTEMPTS):
            try:
                current = self.s3.get_object(Bucket=bucket, Key=key)
                data, condition = current["Body"].read(), {"IfMatch": current["ETag"]}
            except self.s3.exceptions.NoSuchKey:  # none yet, or a delete marker: its versions are read below
                data, condition = None, {"IfNoneMatch": "*"}
            try:
                kept = KeptLabels.load(data, key) if data is not None else KeptLabels()
            except ValueError:
                return 0, None  # the versions' pass names it in a note
            removed = kept.remove(self._holds_row)
            if self.dry_run or not (removed or touch):
                return removed, None
            kept.erased_at = time.time()
            try:
                return removed, self.s3.put_object(Bucket=bucket, Key=key, Body=kept.dump(), **condition)["VersionId"]
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") not in CHANGED_MEANWHILE:
                    raise
        self.notes.append(f"kept-labels: {key} changed under each of {LABEL_WRITE_ATTEMPTS} rewrites (relearning "
                          "wrote it meanwhile): run erase again")
        return 0, None

    def _check_not_written_back(self, bucket: str, key: str, written: str) -> None:
        """A relearning step that read the labels before the rewrite and writes its copy (the
        item's rows in it) after the versions were read: said in a note (run erase again)."""
        current = self.s3.head_object(Bucket=bucket, Key=key)["VersionId"]
        if current != written and self._labels_of(bucket, key, current) is not None:
            self.notes.append(f"kept-labels: relearning wrote {key} again while erase ran, the item's rows in it: "
                              "run erase again")

    def _holds_row(self, row: Mapping[str, str]) -> bool:
        return self.key.holds(row.get("item_kind"), row.get("item"))

    def held_queue(self, queue_url: str, name: str = "queue") -> int:
        """Delete every message of a dead-letter or escalation queue that carries the item: the
        item itself (a ticket, a record's item, an SNS message's), or an incident's event as the
        incident intake reads it (`incidents_in`); every other message is made visible again.
        A removed message that carried other incidents too (a Grafana POST of several alerts)
        is named in a note: redrive can no longer re-send them."""
        def mine(body: Any) -> bool:
            if not self.carried_by(body):
                return False
            if self.key.kind != "incident":
                return True
            others = sorted(f"{source}:{incident}" for source, incident in self.incidents_in(body)
                            if (source, incident) != (self.key.source, self.key.id))
            if others:
                self.notes.append(f"{name}: a message of {self.key} also carried incident(s) {', '.join(others)}"
                                  + (": it is kept (dry run)" if self.dry_run else
                                     ": it was removed with them (redrive cannot re-send them)"))
            return True

        return self._queue(queue_url, name, mine, lambda body: None)

    def carried_by(self, body: Any) -> bool:
        model = ITEM_MODELS[self.key.kind]
        for value in _mappings(body):
            if value.get(model.id_field) == self.key.id and value.get(model.source_field) == self.key.source:
                return True
            if self.key.kind == "incident" and value.get("source") == self.key.source and self.key.id in _strings(value):
                return True
        return self.key.kind == "incident" and (self.key.source, self.key.id) in self.incidents_in(body)

    def incidents_in(self, body: Any) -> set[tuple[str, str]]:
        """The incidents (source, id) a dead-letter message's event is about, as the incident
        intake reads it (`ops.redrive.dead_event`: the event itself or Lambda's on-failure
        record's `requestPayload`; each SNS record alone; the source's own id: a Grafana alert
        `grafana:<fingerprint>`, a long Security Hub id digested); none when no source reads it."""
        from decision_router.intake.incidents import native_outcomes
        from decision_router.sources import raw_events, read_event
        from decision_router.sources.events import Opened, incident_id
        from ops.redrive import dead_event

        if self._severity is None:
            from decision_router.domain.policies import load_policy

            self._severity = load_policy("incident").source_severity
        event, _ = dead_event({"Body": json.dumps(body)})
        found: set[tuple[str, str]] = set()
        for each in raw_events(event):
            try:
                source, envelope = read_event(each)
                outcomes = native_outcomes(source, envelope, self._severity)
            except Exception:  # noqa: BLE001 - not a source's event, or one it refuses: matched by its fields only
                continue
            for outcome in outcomes:
                if isinstance(outcome, Opened):
                    found.add((outcome.incident.source, outcome.incident.incident_id))
                elif outcome.key is not None:
                    found.add((outcome.source, incident_id(outcome.key)))
        return found

    def _queue(self, queue_url: str, name: str, mine: Callable[[Any], bool],
               before_delete: Callable[[Any], None]) -> int:
        """Read the queue once; a message `mine` picks is deleted at once, while its receipt is
        the latest (`before_delete` first), or only counted on a dry run; all others are made
        visible again at once when the read ends. A read longer than the messages stay hidden
        may have missed some (those read first came back): a note says to run erase again."""
        found = 0
        others: list[str] = []
        started = time.monotonic()
        for batch in new_batches(self.sqs, queue_url, visibility=QUEUE_VISIBILITY):
            for message in batch:
                try:
                    body = json.loads(message["Body"])
                except ValueError:
                    body = None
                if body is None or not mine(body):
                    others.append(message["ReceiptHandle"])
                    continue
                found += 1
                if self.dry_run:
                    others.append(message["ReceiptHandle"])
                    continue
                before_delete(body)
                self.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        release_now(self.sqs, queue_url, others)
        if time.monotonic() - started >= QUEUE_VISIBILITY:
            self.notes.append(f"{name}: read for longer than its messages stay hidden ({QUEUE_VISIBILITY} s): "
                              "some may not have been read; run erase again (a run that finds none is complete)")
        return found

    def _stop(self, body: Any) -> None:
        arn = self.names.get("state-machine", "")
        name = body.get("execution_name") if isinstance(body, dict) else None
        if arn and name:
            execution = arn.replace(":stateMachine:", ":execution:") + f":{name}"
            try:
                self.stepfunctions.stop_execution(executionArn=execution, error="ItemErased",
                                                  cause="the item was erased on request")
            except self.stepfunctions.exceptions.ExecutionDoesNotExist:
                pass  # finished or never started: nothing waits for the message


def _mappings(value: Any) -> Iterator[Mapping[str, Any]]:
    """Every JSON object within `value`, and within the JSON text of its strings (an SNS
    message, a record's item kept as text)."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            value = json.loads(value)
        except ValueError:
            return
    if isinstance(value, Mapping):
        yield value
        for inner in value.values():
            yield from _mappings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _mappings(inner)


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, Mapping):
        return set().union(*(_strings(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value)) if value else set()
    return set()


def names_of_stack(stack: str, client: Any) -> dict[str, str]:
    """The tables, the queues, the head bucket and the routing state machine of a deployed stack (its outputs)."""
    outputs = {o["OutputKey"]: o["OutputValue"] for o in client.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])}
    wanted = {**TABLES, **HELD_QUEUES, "state-machine": "RoutingStateMachineArn",
              "head-bucket": HEAD_BUCKET}
    missing = sorted(output for output in wanted.values() if output not in outputs)
    if missing:
        raise EraseError(f"stack {stack} has no output {', '.join(missing)}")
    return {name: outputs[output] for name, output in wanted.items()}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ops.erase", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("item", help="the item's full key, kind:source:id (e.g. ticket:email:T-1001)")
    p.add_argument("--stack", help="a deployed stack's name: every table, queue and state machine from its outputs")
    for name in TABLES:
        p.add_argument(f"--{name}-table", default="", help=f"the {name} table's name (instead of --stack)")
    for name in HELD_QUEUES:
        p.add_argument(f"--{name}-url", default="", help=f"the {name}'s URL (instead of --stack)")
    p.add_argument("--head-bucket", default="",
                   help="the head bucket, where relearning keeps the labels it has read (instead of --stack)")
    p.add_argument("--state-machine-arn", default="", help="the routing state machine (its waiting executions are stopped)")
    p.add_argument("--dry-run", action="store_true", help="only count the rows, remove nothing")
    return p


def main(argv: list[str] | None = None, out: TextIO | None = None, session: Any = None) -> int:
    out = out or sys.stdout
    args = parser().parse_args(argv)
    if session is None:
        import boto3

        session = boto3.Session()
    try:
        key = ItemKey.parse(args.item)
        if args.stack:
            names = names_of_stack(args.stack, session.client("cloudformation"))
        else:
            names = {name: getattr(args, f"{name.replace('-', '_')}_table") for name in TABLES}
            names |= {"state-machine": args.state_machine_arn,
                      "head-bucket": args.head_bucket}
            names |= {name: getattr(args, f"{name.replace('-', '_')}_url") for name in HELD_QUEUES}
            if not any(names.values()):
                raise EraseError("name the stack (--stack) or at least one table or queue")
    except EraseError as error:
        print(f"erase: {error}", file=sys.stderr)
        return 2
    erased = Eraser(key, names, dynamodb=session.client("dynamodb"), sqs=session.client("sqs"),
                    stepfunctions=session.client("stepfunctions"), s3=session.client("s3"), dry_run=args.dry_run).erase()
    out.write(f"erase {key}\n")
    erased.report(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
