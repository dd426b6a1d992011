"""`make backfill-audit-shards` (ops/backfill_audit_shards.py) on the audit table in moto: every
row from before the sharded index given the shard the console reads it under, in parallel scan
segments, a row that changed or went meanwhile left alone and counted, a row without the columns
of its shard named; run again, it writes nothing. After it, the console reading the sharded index
alone lists what it listed reading both."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any, Iterator

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters.review import AuditTrail
from decision_router.domain.records import AuditRow, outcome_shard
from local.cloudformation import Stack
from ops import backfill_audit_shards as backfill

OUTCOMES = ("auto_routed", "reviewed", "timed_out")


@pytest.fixture
def table() -> Iterator[str]:
    """The audit table of a stack upgraded from the release that added the sharded index."""
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint",
                                       "AuditOutcomeIndex": "sharded-and-unsharded"}).create(only=["AuditTable"])
        yield stack.ref("AuditTable")


def row(n: int, *, sharded: bool) -> dict[str, Any]:
    outcome = OUTCOMES[n % len(OUTCOMES)]
    columns = AuditRow(item_id=f"T-{n}", execution_name=f"ticket-T-{n}", item_kind="ticket", outcome=outcome,
                       outcome_detail="{}", route="auto", route_reason="all thresholds met",
                       policy_name="support-ticket", policy_version="1", decisions="[]", item="{}",
                       decided_at="2026-11-29T12:00:00Z", audited_at=f"2026-11-29T12:{n % 60:02d}:{n // 60:02d}Z",
                       ).columns()
    if sharded:
        columns["outcome_shard"] = f"{outcome}#{n % 10}"  # the workflow's random pick, not the hash's
    else:
        del columns["outcome_shard"]
    return {name: {"S": value} for name, value in columns.items()}


def put(table: str, rows: list[dict[str, Any]]) -> None:
    dynamodb = boto3.client("dynamodb")
    for item in rows:
        dynamodb.put_item(TableName=table, Item=item)


def shards(table: str) -> dict[str, str | None]:
    rows = boto3.client("dynamodb").scan(TableName=table)["Items"]
    return {r["item_id"]["S"]: r.get("outcome_shard", {}).get("S") for r in rows}


def listed(table: str, unsharded_index: str | None) -> dict[str, list[str]]:
    trail = AuditTrail(table, boto3.client("dynamodb"), unsharded_index=unsharded_index)
    return {outcome: [r.item_id for r in trail.recent(outcome, limit=200)] for outcome in OUTCOMES}


def run(*args: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    status = backfill.main([*args], out=out, session=boto3.Session())
    return status, out.getvalue().splitlines()


def test_every_row_from_before_gets_its_shard_and_the_sharded_index_alone_lists_them_all(table):
    put(table, [row(n, sharded=n % 4 == 0) for n in range(120)])  # 30 sharded, 90 from before
    before = shards(table)
    both = listed(table, AuditTrail.UNSHARDED_INDEX)
    assert sum(len(ids) for ids in listed(table, None).values()) == 30  # the rows from before are missed

    status, dry = run("--audit-table", table, "--segments", "3", "--dry-run")
    assert (status, dry) == (0, [f"backfill-audit-shards {table}", "scanned: 120 row(s); without outcome_shard: 90",
                                 "outcome_shard would be given (dry run, nothing written): 90 row(s)"])
    assert shards(table) == before

    status, lines = run("--audit-table", table, "--segments", "3")
    assert (status, lines[1:]) == (0, ["scanned: 120 row(s); without outcome_shard: 90",
                                       "outcome_shard given: 90 row(s)",
                                       "every row has its outcome_shard: the stack may drop outcome-audited_at "
                                       "(deploy with AuditOutcomeIndex=sharded)"])
    after = shards(table)
    for n in range(120):
        item_id, outcome = f"T-{n}", OUTCOMES[n % len(OUTCOMES)]
        # a row the workflow sharded keeps its pick; one from before gets the shard the console gave it
        expected = before[item_id] if n % 4 == 0 else outcome_shard(outcome, item_id, f"ticket-T-{n}")
        assert after[item_id] == expected, item_id
    assert listed(table, None) == both  # the old index is no longer needed for any listing

    status, again = run("--audit-table", table)  # idempotent: nothing left to write
    assert (status, again[1:3]) == (0, ["scanned: 120 row(s); without outcome_shard: 0", "outcome_shard given: 0 row(s)"])
    assert shards(table) == after


class RemovedBeforeItsUpdate:
    """The table's client, but a row is removed (erase, the TTL) between the scan and its update."""

    def __init__(self, client: Any, gone: str):
        self.client, self.gone = client, gone

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def update_item(self, **request: Any) -> Any:
        if request["Key"]["item_id"]["S"] == self.gone:
            self.client.delete_item(TableName=request["TableName"], Key=request["Key"])
        return self.client.update_item(**request)


def test_a_row_removed_meanwhile_is_not_written_back_and_one_without_its_outcome_is_named(table):
    put(table, [row(n, sharded=False) for n in range(4)])
    boto3.client("dynamodb").put_item(TableName=table, Item={  # no outcome: no key of either index
        "item_id": {"S": "T-odd"}, "execution_name": {"S": "ticket-T-odd"}, "audited_at": {"S": "2026-11-29T12:00:00Z"}})
    client = RemovedBeforeItsUpdate(boto3.client("dynamodb"), gone="T-2")

    done = backfill.Backfill(table, client, segments=2).run()
    assert (done.scanned, done.lacking, done.given, done.changed_meanwhile) == (5, 5, 3, 1)
    assert done.unshardable == ["T-odd/ticket-T-odd: outcome missing or not text"]
    assert not done.complete
    assert "T-2" not in shards(table)  # not put back by the update
    out = io.StringIO()
    done.report(out)
    assert out.getvalue().splitlines()[2:] == [
        "changed or removed while the scan ran, left as they are: 1 row(s) (run it again)",
        "not given a shard: T-odd/ticket-T-odd: outcome missing or not text"]

    status, lines = run("--audit-table", table)  # the odd row is named again, and the status says so
    assert status == 1 and lines[-1] == "not given a shard: T-odd/ticket-T-odd: outcome missing or not text"


def test_a_stack_names_its_audit_table_and_a_bad_argument_is_refused_with_the_reason(capsys):
    found = SimpleNamespace(describe_stacks=lambda StackName: {"Stacks": [{"Outputs": [
        {"OutputKey": "AuditTableName", "OutputValue": f"{StackName}-AuditTable-1"}]}]})
    assert backfill.table_of_stack("router", found) == "router-AuditTable-1"
    bare = SimpleNamespace(describe_stacks=lambda StackName: {"Stacks": [{"Outputs": []}]})
    with pytest.raises(backfill.BackfillError, match="stack router has no output AuditTableName"):
        backfill.table_of_stack("router", bare)
    assert backfill.AUDIT_TABLE_OUTPUT in Stack.load(parameters={"ExistingEndpointName": "e"}).template["Outputs"]

    session = SimpleNamespace(client=lambda service: object())
    assert backfill.main(["--audit-table", "audit", "--segments", "0"], session=session) == 2
    assert "--segments 0: must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        backfill.main(["--stack", "router", "--audit-table", "audit"], session=session)  # one or the other
