"""The audit table's index of recent rows as template.yaml declares it and as `AuditTrail.recent`
reads it: keyed by `outcome_shard` (no key every automatic route writes), projecting the columns
the console reads alone; the unsharded index of before kept beside it only with
`AuditOutcomeIndex=sharded-and-unsharded`, the console told so (its environment) and allowed to
Query each index it reads; and the console over moto reading the indexes its stack has."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters.review import AuditTrail
from decision_router.config import Settings
from decision_router.domain.records import AUDIT_SHARDS, AuditRow
from local.cloudformation import Stack
from review_console.wiring import Wiring

TABLE_KEYS = {"item_id", "execution_name"}
SHARDED, BOTH = "sharded", "sharded-and-unsharded"


def load(audit_indexes: str | None) -> Stack:
    given = {} if audit_indexes is None else {"AuditOutcomeIndex": audit_indexes}
    return Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", **given})


@pytest.fixture(scope="module", params=[SHARDED, BOTH])
def stack(request) -> Stack:
    return load(request.param)


def index_names(stack: Stack) -> list[str]:
    return [i["IndexName"] for i in stack.resolve(stack.properties("AuditTable"))["GlobalSecondaryIndexes"]]


def console_queries(stack: Stack) -> set[str]:
    statements = [s for policy in stack.resolve(stack.properties("ReviewConsoleFunction"))["Policies"]
                  if isinstance(policy, dict) for s in policy.get("Statement", [])]
    return {resource for s in statements if "dynamodb:Query" in s["Action"]
            for resource in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])}


def index(stack: Stack, name: str | None) -> dict[str, Any]:
    (found,) = [i for i in stack.resolve(stack.properties("AuditTable"))["GlobalSecondaryIndexes"]
                if i["IndexName"] == name]
    return found


def keys(declared: dict[str, Any]) -> list[tuple[str, str]]:
    return [(k["AttributeName"], k["KeyType"]) for k in declared["KeySchema"]]


def test_the_index_of_recent_rows_is_keyed_by_the_outcomes_shard_and_projects_what_the_console_reads(stack):
    recent = index(stack, AuditTrail.RECENT_INDEX)
    assert keys(recent) == [("outcome_shard", "HASH"), ("audited_at", "RANGE")]
    assert recent["Projection"]["ProjectionType"] == "INCLUDE"
    assert recent["Projection"]["NonKeyAttributes"] == list(AuditTrail.RECENT_COLUMNS)
    index_keys = TABLE_KEYS | {"outcome_shard", "audited_at"}
    assert not index_keys & set(AuditTrail.RECENT_COLUMNS)  # keys are projected anyway
    # A row read from the index reads as an AuditRow: every column it requires is there.
    required = {name for name, field in AuditRow.model_fields.items() if field.is_required()}
    assert required <= index_keys | set(AuditTrail.RECENT_COLUMNS)
    assert set(AuditTrail.RECENT_COLUMNS) <= set(AuditRow.model_fields)
    assert {"AttributeName": "outcome_shard", "AttributeType": "S"} in stack.properties("AuditTable")["AttributeDefinitions"]


def test_a_new_stack_has_the_sharded_index_alone_and_the_console_reads_it_alone():
    stack = load(None)  # the parameter's default
    assert stack.template["Parameters"]["AuditOutcomeIndex"]["Default"] == SHARDED
    assert sorted(index_names(stack)) == sorted([AuditTrail.RECENT_INDEX, AuditTrail.LINK_INDEX])
    defined = [d["AttributeName"] for d in stack.resolve(stack.properties("AuditTable"))["AttributeDefinitions"]]
    assert "outcome" not in defined  # only index keys are defined: DynamoDB refuses any other
    assert stack.function_environment("ReviewConsoleFunction")["AUDIT_UNSHARDED_INDEX_NAME"] == ""
    assert f"{stack.get_att('AuditTable', 'Arn')}/index/{AuditTrail.UNSHARDED_INDEX}" not in console_queries(stack)


def test_kept_beside_it_the_unsharded_index_is_read_by_the_console_until_the_backfill():
    stack = load(BOTH)
    assert keys(index(stack, AuditTrail.UNSHARDED_INDEX)) == [("outcome", "HASH"), ("audited_at", "RANGE")]
    assert sorted(index_names(stack)) == sorted([AuditTrail.RECENT_INDEX, AuditTrail.UNSHARDED_INDEX,
                                                 AuditTrail.LINK_INDEX])
    assert {"AttributeName": "outcome", "AttributeType": "S"} in stack.resolve(
        stack.properties("AuditTable"))["AttributeDefinitions"]
    env = stack.function_environment("ReviewConsoleFunction")
    assert env["AUDIT_UNSHARDED_INDEX_NAME"] == AuditTrail.UNSHARDED_INDEX


def test_the_upgrade_to_sharded_drops_one_index_and_nothing_else_of_the_table():
    """DynamoDB takes one index added or removed per table update: from the release that kept both
    (sharded-and-unsharded) to sharded, the update removes the unsharded index alone."""
    before, after = load(BOTH), load(SHARDED)
    assert set(index_names(before)) - set(index_names(after)) == {AuditTrail.UNSHARDED_INDEX}
    assert set(index_names(after)) < set(index_names(before))
    table_before, table_after = (s.resolve(s.properties("AuditTable")) for s in (before, after))
    for unchanged in ("KeySchema", "BillingMode", "TimeToLiveSpecification", "SSESpecification"):
        assert table_before[unchanged] == table_after[unchanged], unchanged


def test_the_console_may_query_every_index_the_audit_trail_reads(stack):
    table = stack.get_att("AuditTable", "Arn")
    read = Settings.from_env(stack.function_environment("ReviewConsoleFunction")).audit_unsharded_index
    for name in filter(None, (AuditTrail.RECENT_INDEX, read, AuditTrail.LINK_INDEX)):
        assert f"{table}/index/{name}" in console_queries(stack), name


def routed(item_id: str, minute: int, *, sharded: bool) -> dict[str, Any]:
    """An automatic route's audit row as DynamoDB holds it, with its shard or from before shards."""
    row = AuditRow(item_id=item_id, execution_name=f"ticket-{item_id}", item_kind="ticket", outcome="auto_routed",
                   outcome_detail="{}", route="auto", route_reason="all thresholds met", policy_name="support-ticket",
                   policy_version="1", decisions="[]", item="{}", decided_at="2026-11-29T12:00:00Z",
                   audited_at=f"2026-11-29T12:{minute:02d}:00Z").columns()
    if not sharded:
        del row["outcome_shard"]
    return {name: {"S": value} for name, value in row.items()}


@pytest.mark.parametrize("audit_indexes", [SHARDED, BOTH])
def test_the_consoles_audit_reads_the_indexes_its_stack_has(audit_indexes):
    """On moto, the console made from its function's environment: on a sharded stack one Query per
    shard and none of an index the table lacks; with both, the old index too, and its rows listed."""
    with mock_aws():
        stack = load(audit_indexes).create(only=["AuditTable"])
        table, dynamodb = stack.ref("AuditTable"), boto3.client("dynamodb")
        for n in range(3):
            dynamodb.put_item(TableName=table, Item=routed(f"T-{n}", n, sharded=True))
        dynamodb.put_item(TableName=table, Item=routed("OLD-1", 0, sharded=False))
        audit = Wiring(Settings.from_env(stack.function_environment("ReviewConsoleFunction"))).audit
        assert isinstance(audit, AuditTrail)
        queried: list[str] = []
        audit.client.meta.events.register(
            "provide-client-params.dynamodb.Query", lambda params, **_: queried.append(params["IndexName"]))
        listed = [row.item_id for row in audit.recent("auto_routed", limit=10)]
    if audit_indexes == SHARDED:
        assert sorted(queried) == [AuditTrail.RECENT_INDEX] * AUDIT_SHARDS
        assert listed == ["T-2", "T-1", "T-0"]  # the row from before shards waits for the backfill
    else:
        assert sorted(queried) == sorted([AuditTrail.RECENT_INDEX] * AUDIT_SHARDS + [AuditTrail.UNSHARDED_INDEX])
        assert listed == ["T-2", "T-1", "T-0", "OLD-1"]
