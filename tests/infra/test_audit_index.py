"""The audit table's index of recent rows as template.yaml declares it and as `AuditTrail.recent`
reads it: keyed by `outcome_shard` (no key every automatic route writes), projecting the columns
the console reads alone, the unsharded index of before kept beside it, and the console's role
allowed to Query each index it reads."""

from __future__ import annotations

from typing import Any

import pytest

from decision_router.adapters.review import AuditTrail
from decision_router.domain.records import AuditRow
from local.cloudformation import Stack

TABLE_KEYS = {"item_id", "execution_name"}


@pytest.fixture(scope="module")
def stack() -> Stack:
    return Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})


def index(stack: Stack, name: str | None) -> dict[str, Any]:
    (found,) = [i for i in stack.properties("AuditTable")["GlobalSecondaryIndexes"] if i["IndexName"] == name]
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


def test_the_unsharded_index_is_kept_beside_it_while_the_reader_reads_it(stack):
    """A stack update adds or removes one index: the unsharded one goes in a later update, with
    the read of it (docs/operations/hot-keys.md)."""
    assert AuditTrail.UNSHARDED_INDEX is not None
    assert keys(index(stack, AuditTrail.UNSHARDED_INDEX)) == [("outcome", "HASH"), ("audited_at", "RANGE")]
    names = [i["IndexName"] for i in stack.properties("AuditTable")["GlobalSecondaryIndexes"]]
    assert sorted(names) == sorted([AuditTrail.RECENT_INDEX, AuditTrail.UNSHARDED_INDEX, AuditTrail.LINK_INDEX])


def test_the_console_may_query_every_index_the_audit_trail_reads(stack):
    statements = [s for policy in stack.resolve(stack.properties("ReviewConsoleFunction"))["Policies"]
                  if isinstance(policy, dict) for s in policy.get("Statement", [])]
    queried = {resource for s in statements if "dynamodb:Query" in s["Action"]
               for resource in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])}
    table = stack.get_att("AuditTable", "Arn")
    for name in (AuditTrail.RECENT_INDEX, AuditTrail.UNSHARDED_INDEX, AuditTrail.LINK_INDEX):
        assert f"{table}/index/{name}" in queried, name
