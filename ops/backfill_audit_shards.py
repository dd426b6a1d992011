"""Give every audit row that has no `outcome_shard` its shard, so the sharded index lists it.

    python -m ops.backfill_audit_shards (--stack NAME | --audit-table NAME) [--segments N] [--dry-run]

Rows written before the audit table had its index of recent rows by shard
(`outcome_shard-audited_at`) carry no `outcome_shard`: only the old index by outcome alone
(`outcome-audited_at`) lists them, and the console reads both while the stack keeps the old one
(`AuditOutcomeIndex=sharded-and-unsharded`). This scan (page by page, in parallel segments) sets
each such row's shard, the one the console gives it when it reads the row (`AuditRow`: a hash of
the row's key), with a conditional update: a row that got a shard meanwhile, changed its outcome
or was removed (erase, the TTL) is left as it is and counted. Run it again at any time: a row that
has its shard is never written, so a second run finds nothing to do. Once it reports no row left,
the stack may drop the old index (deploy with `AuditOutcomeIndex=sharded`).

Printed: the rows scanned, those without a shard, the shards set (or, with --dry-run, those that
would be), the rows gone or changed meanwhile, and each row that cannot be given a shard (a column
of its key or its outcome missing or not text), named by its key. Exit status 1 while such a row
or a row changed meanwhile is left (run it again), 2 on a bad argument, else 0.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterator, TextIO

from decision_router.domain.records import outcome_shard
from ops.command import DONE, WORK_LEFT, Command, CommandError, aws_session, stack_outputs

#: The audit table's stack output.
AUDIT_TABLE_OUTPUT = "AuditTableName"
#: The columns a row's shard is made of (its key and its outcome).
SHARD_COLUMNS = ("item_id", "execution_name", "outcome")
#: Parallel scan segments by default: a table of millions of rows is read in minutes, not hours.
DEFAULT_SEGMENTS = 4


class BackfillError(CommandError):
    """A bad argument or stack; the message says which and why."""


COMMAND = Command("ops.backfill_audit_shards", __doc__, "backfill-audit-shards", (BackfillError,), manual=True)


@dataclass
class Backfilled:
    """What one run did (or, on a dry run, would do)."""

    dry_run: bool = False
    scanned: int = 0
    lacking: int = 0
    given: int = 0
    changed_meanwhile: int = 0
    #: Each row that cannot be given a shard: its key as far as it reads, and why.
    unshardable: list[str] = field(default_factory=list)

    def add(self, other: "Backfilled") -> None:
        self.scanned += other.scanned
        self.lacking += other.lacking
        self.given += other.given
        self.changed_meanwhile += other.changed_meanwhile
        self.unshardable += other.unshardable

    @property
    def complete(self) -> bool:
        """Every row that lacked a shard has one now (nothing left for another run)."""
        return not self.unshardable and not self.changed_meanwhile

    def report(self, out: TextIO) -> None:
        out.write(f"scanned: {self.scanned} row(s); without outcome_shard: {self.lacking}\n")
        verb = "would be given (dry run, nothing written)" if self.dry_run else "given"
        out.write(f"outcome_shard {verb}: {self.given} row(s)\n")
        if self.changed_meanwhile:
            out.write(f"changed or removed while the scan ran, left as they are: {self.changed_meanwhile} row(s) "
                      "(run it again)\n")
        for why in sorted(self.unshardable):
            out.write(f"not given a shard: {why}\n")
        if self.dry_run:
            return
        if self.complete:
            out.write("every row has its outcome_shard: the stack may drop outcome-audited_at "
                      "(deploy with AuditOutcomeIndex=sharded)\n")


def _text(row: dict[str, Any], column: str) -> str | None:
    value = row.get(column, {})
    return value.get("S") if isinstance(value, dict) else None


class Backfill:
    """One table's backfill: `run` scans `segments` parts of it at once and sets each row's shard."""

    def __init__(self, table: str, dynamodb: Any, *, segments: int = DEFAULT_SEGMENTS, dry_run: bool = False):
        if segments < 1:
            raise BackfillError(f"--segments {segments}: must be at least 1")
        self.table, self.dynamodb, self.segments, self.dry_run = table, dynamodb, segments, dry_run

    def run(self) -> Backfilled:
        done = Backfilled(dry_run=self.dry_run)
        with ThreadPoolExecutor(max_workers=self.segments) as pool:
            for part in pool.map(self._segment, range(self.segments)):
                done.add(part)
        return done

    def _rows_without_shard(self, segment: int) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """Each page of one segment: the rows it read, and those without a shard (key and outcome only)."""
        pages = self.dynamodb.get_paginator("scan").paginate(
            TableName=self.table, Segment=segment, TotalSegments=self.segments,
            FilterExpression="attribute_not_exists(outcome_shard)",
            ProjectionExpression="#i, #e, #o", ExpressionAttributeNames={"#i": "item_id", "#e": "execution_name",
                                                                         "#o": "outcome"})
        for page in pages:
            yield page["ScannedCount"], page["Items"]

    def _segment(self, segment: int) -> Backfilled:
        done = Backfilled(dry_run=self.dry_run)
        for scanned, rows in self._rows_without_shard(segment):
            done.scanned += scanned
            for row in rows:
                done.lacking += 1
                self._give_shard(row, done)
        return done

    def _give_shard(self, row: dict[str, Any], done: Backfilled) -> None:
        item_id, name, outcome = (_text(row, column) for column in SHARD_COLUMNS)
        if item_id is None or name is None or outcome is None:
            missing = [column for column, value in zip(SHARD_COLUMNS, (item_id, name, outcome)) if value is None]
            done.unshardable.append(f"{item_id}/{name}: {', '.join(missing)} missing or not text")
            return
        if self.dry_run:
            done.given += 1
            return
        try:
            self.dynamodb.update_item(
                TableName=self.table, Key={"item_id": {"S": item_id}, "execution_name": {"S": name}},
                UpdateExpression="SET outcome_shard = :shard",
                # Only a row that is still there, still of this outcome and still without a shard.
                ConditionExpression="attribute_exists(item_id) AND attribute_not_exists(outcome_shard) AND outcome = :o",
                ExpressionAttributeValues={":shard": {"S": outcome_shard(outcome, item_id, name)}, ":o": {"S": outcome}})
        except self.dynamodb.exceptions.ConditionalCheckFailedException:
            done.changed_meanwhile += 1
            return
        done.given += 1


def table_of_stack(stack: str, cloudformation: Any) -> str:
    """The audit table of a deployed stack (its output AuditTableName)."""
    return stack_outputs(stack, cloudformation, [AUDIT_TABLE_OUTPUT], BackfillError)[AUDIT_TABLE_OUTPUT]


def parser() -> argparse.ArgumentParser:
    p = COMMAND.parser()
    named = p.add_mutually_exclusive_group(required=True)
    named.add_argument("--stack", help="a deployed stack's name: its audit table from its outputs")
    named.add_argument("--audit-table", help="the audit table's name (instead of --stack)")
    p.add_argument("--segments", type=int, default=DEFAULT_SEGMENTS,
                   help=f"parallel scan segments (default {DEFAULT_SEGMENTS})")
    p.add_argument("--dry-run", action="store_true", help="only count the rows, write nothing")
    return p


def main(argv: list[str] | None = None, out: TextIO | None = None, session: Any = None) -> int:
    args = parser().parse_args(argv)
    session = aws_session(session)

    def resolve() -> Backfill:
        table = table_of_stack(args.stack, session.client("cloudformation")) if args.stack else args.audit_table
        return Backfill(table, session.client("dynamodb"), segments=args.segments, dry_run=args.dry_run)

    def work(backfill: Backfill) -> int:
        report = out or sys.stdout
        report.write(f"backfill-audit-shards {backfill.table}\n")
        done = backfill.run()
        done.report(report)
        return DONE if done.complete else WORK_LEFT

    return COMMAND.run_resolved(resolve, work)


if __name__ == "__main__":
    raise SystemExit(main())
