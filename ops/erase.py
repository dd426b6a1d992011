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
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TextIO

from ops.command import DONE, Command, aws_session, stack_outputs
from ops.erase_item import EraseError, ItemKey
from ops.erase_labels import KeptLabelsEraser
from ops.erase_queues import HeldQueueEraser
from ops.erase_rows import ItemRows

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
#: The head bucket (stack output), where relearning keeps the labels it has read under LABELS_PREFIX.
HEAD_BUCKET = "HeadBucketName"


COMMAND = Command("ops.erase", __doc__, "erase", (EraseError,), manual=True)


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


class Eraser:
    """Finds and removes one item's rows, table by table (each given by name; an empty name: skipped),
    then its kept labels, then its messages queue by queue."""

    def __init__(self, key: ItemKey, names: Mapping[str, str], *, dynamodb: Any, sqs: Any, stepfunctions: Any,
                 s3: Any = None, dry_run: bool = False):
        self.key, self.names, self.dry_run = key, names, dry_run
        self.notes: list[str] = []
        self.rows = ItemRows(key, dynamodb=dynamodb, stepfunctions=stepfunctions,
                             state_machine=names.get("state-machine", ""), dry_run=dry_run, notes=self.notes)
        self.labels = KeptLabelsEraser(key, s3, dry_run=dry_run, notes=self.notes)
        self.queues = HeldQueueEraser(key, sqs, dry_run=dry_run, notes=self.notes)

    def erase(self) -> Erased:
        erased = Erased(dry_run=self.dry_run, notes=self.notes)
        steps: dict[str, Callable[[str], int]] = {
            "audit": self.rows.audit, "labelled": self.rows.labelled, "resolved": self.rows.resolved,
            "open-incidents": self.rows.open_incidents, "idempotency": self.rows.idempotency,
            "pending-reviews": self.rows.pending_reviews}
        for name, step in steps.items():
            if self.names.get(name):
                erased.rows[name] = step(self.names[name])
        # After the labelled-examples table: a relearning step from now on reads the item no more.
        if self.names.get("head-bucket"):
            erased.rows["kept-labels"], erased.versions["kept-labels"] = self.labels.erase(
                self.names["head-bucket"], self.rows.label_policies)
        else:
            erased.unread["kept-labels"] = ("no --head-bucket: relearning's copy of the labelled examples, the "
                                            "item's among them, keeps a label up to LabelRetentionDays")
        for name in HELD_QUEUES:
            if self.names.get(name):
                erased.rows[name] = self.queues.erase(self.names[name], name)
        for name in HELD_QUEUES:
            if not self.names.get(name):
                erased.unread[name] = (f"no --{name}-url: its messages, the item's text among them, are kept up to "
                                       f"{QUEUE_RETENTION_DAYS} days")
        return erased


def names_of_stack(stack: str, client: Any) -> dict[str, str]:
    """The tables, the queues, the head bucket and the routing state machine of a deployed stack (its outputs)."""
    wanted = {**TABLES, **HELD_QUEUES, "state-machine": "RoutingStateMachineArn",
              "head-bucket": HEAD_BUCKET}
    outputs = stack_outputs(stack, client, wanted.values(), EraseError)
    return {name: outputs[output] for name, output in wanted.items()}


def parser() -> argparse.ArgumentParser:
    p = COMMAND.parser()
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


def names_given(args: argparse.Namespace) -> dict[str, str]:
    """The tables, queues, head bucket and state machine named by the flags (EraseError: none is)."""
    names = {name: getattr(args, f"{name.replace('-', '_')}_table") for name in TABLES}
    names |= {"state-machine": args.state_machine_arn,
              "head-bucket": args.head_bucket}
    names |= {name: getattr(args, f"{name.replace('-', '_')}_url") for name in HELD_QUEUES}
    if not any(names.values()):
        raise EraseError("name the stack (--stack) or at least one table or queue")
    return names


def main(argv: list[str] | None = None, out: TextIO | None = None, session: Any = None) -> int:
    args = parser().parse_args(argv)
    session = aws_session(session)

    def resolve() -> tuple[ItemKey, dict[str, str]]:
        key = ItemKey.parse(args.item)
        return key, names_of_stack(args.stack, session.client("cloudformation")) if args.stack else names_given(args)

    def work(resolved: tuple[ItemKey, dict[str, str]]) -> int:
        key, names = resolved
        erased = Eraser(key, names, dynamodb=session.client("dynamodb"), sqs=session.client("sqs"),
                        stepfunctions=session.client("stepfunctions"), s3=session.client("s3"),
                        dry_run=args.dry_run).erase()
        report = out or sys.stdout
        report.write(f"erase {key}\n")
        erased.report(report)
        return DONE

    return COMMAND.run_resolved(resolve, work)


if __name__ == "__main__":
    raise SystemExit(main())
