"""The audit row has one model (`AuditRow`): the state machine's audit write fills exactly its
columns, each a string, and a row the model refuses is refused with the field named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest
from moto import mock_aws
from pydantic import ValidationError

from decision_router.adapters.review import AuditTrail, Unreadable
from decision_router.adapters.shards import shard_of, sharded
from decision_router.domain.records import AUDIT_SHARDS, AuditRow, outcome_shard

STATE_MACHINES = Path(__file__).resolve().parents[2] / "statemachine"


def _states(definition: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every state, inside Parallel branches and Map iterators too."""
    for name, state in definition.get("States", {}).items():
        yield name, state
        for branch in state.get("Branches", []):
            yield from _states(branch)
        for key in ("Iterator", "ItemProcessor"):
            if key in state:
                yield from _states(state[key])


def _built_item(definition: dict[str, Any], path: str) -> dict[str, Any]:
    """The item a put takes from its state (`Item.$`): the Pass state that builds it, and each
    Pass state that adds one attribute to it (`ResultPath` `<path>.<column>`)."""
    field = path.removeprefix("$.")
    item: dict[str, Any] = {}
    for _, state in _states(definition):
        if state.get("Type") != "Pass":
            continue
        if isinstance(state.get("Parameters", {}).get(field), dict) and "ResultPath" not in state:
            item.update(state["Parameters"][field])
        elif str(state.get("ResultPath", "")).startswith(path + "."):
            item[state["ResultPath"].removeprefix(path + ".")] = state["Parameters"]
    return item


def _audit_writes() -> list[tuple[str, str, dict[str, Any]]]:
    writes = []
    for path in sorted(STATE_MACHINES.glob("*.asl.json")):
        definition = json.loads(path.read_text(encoding="utf-8"))
        for name, state in _states(definition):
            parameters = state.get("Parameters") or state.get("Arguments") or {}
            if "dynamodb:putItem" in str(state.get("Resource", "")) and parameters.get("TableName") == "${AuditTableName}":
                item = parameters["Item"] if "Item" in parameters else _built_item(definition, parameters["Item.$"])
                writes.append((path.name, name, item))
    return writes


def test_the_workflow_writes_the_audit_row_the_model_defines():
    writes = _audit_writes()
    assert writes, "no state writes the audit table"
    fields = set(AuditRow.model_fields)
    required = {name for name, field in AuditRow.model_fields.items() if field.is_required()}
    for machine, state, item in writes:
        # The TTL attribute is a number, never a column of the model (the reads keep strings only).
        expiry = item.pop("expires_at", None)
        assert expiry is None or set(expiry) == {"N.$"}, (machine, state, expiry)
        assert required <= set(item) <= fields, (machine, state, sorted(set(item) ^ fields))
        assert "linked_incident_id" in item, (machine, state, "the link index's key")
        # The index of recent rows: the outcome and one of AUDIT_SHARDS shards, at random.
        assert item["outcome_shard"] == {"S.$": "States.Format('{}#{}', $.outcome.status, "
                                                f"States.MathRandom(0, {AUDIT_SHARDS - 1}))"}, (machine, state)
        assert item["outcome"] == {"S.$": "$.outcome.status"}, (machine, state)
        for column, value in item.items():
            assert set(value) <= {"S", "S.$"} and len(value) == 1, (machine, state, column, value)


def _row(**change: Any) -> dict[str, Any]:
    row = {name: f"{name}-value" for name in AuditRow.model_fields}
    row["outcome_detail"] = json.dumps({"status": "auto_routed", "target": "billing"})
    row["outcome_shard"] = "outcome-value#3"
    return {**row, **change}


def test_a_row_reads_back_its_columns_and_its_detail():
    row = AuditRow.model_validate(_row())
    assert row.columns() == _row()
    assert row.detail() == {"status": "auto_routed", "target": "billing"}
    held = AuditRow.model_validate(_row(execution_arn=None))
    assert "execution_arn" not in held.columns()


def test_a_row_the_code_writes_is_given_its_outcomes_shard_from_its_key():
    """The same shard for the same row in every process (a retry's put is the same row), the
    outcome's own, spread over every shard (adapters/shards.py's `shard_of` on the row's key)."""
    without = _row(outcome="auto_routed", outcome_shard=None)
    shard = AuditRow.model_validate(without).outcome_shard
    assert shard == sharded("auto_routed", shard_of(f"{without['item_id']}/{without['execution_name']}", AUDIT_SHARDS))
    assert AuditRow.model_validate(without).columns()["outcome_shard"] == shard
    spread = {outcome_shard("auto_routed", f"T-{n}", f"ticket-T-{n}") for n in range(200)}
    assert spread == {f"auto_routed#{n}" for n in range(AUDIT_SHARDS)}
    kept = AuditRow.model_validate(_row(outcome="auto_routed", outcome_shard="auto_routed#7"))
    assert kept.outcome_shard == "auto_routed#7"  # the workflow's pick is kept as written


@pytest.mark.parametrize("shard", ["reviewed#2", "auto_routed", "auto_routed#", "auto_routed#x", "auto_routed#01"])
def test_a_shard_that_is_not_its_outcomes_is_refused_naming_the_field(shard):
    with pytest.raises(ValidationError, match="outcome_shard") as refused:
        AuditRow.model_validate(_row(outcome="auto_routed", outcome_shard=shard))
    assert "'auto_routed#<n>'" in str(refused.value)


@pytest.mark.parametrize(("change", "field"), [
    ({"outcome": 3}, "outcome"),  # every column is a string, as DynamoDB holds it
    ({"routed_by": "x"}, "routed_by"),  # no column the workflow does not write
    ({"item_id": None}, "item_id"),
])
def test_a_row_not_of_the_model_is_refused_naming_the_field(change, field):
    with pytest.raises(ValidationError) as refused:
        AuditRow.model_validate(_row(**change))
    assert field in str(refused.value)


def test_an_outcome_detail_that_is_no_object_is_refused():
    with pytest.raises(ValueError, match="outcome_detail is not a JSON object"):
        AuditRow.model_validate(_row(outcome_detail="[1]")).detail()


@mock_aws
def test_the_audit_trail_reads_rows_as_the_model_and_names_one_it_cannot_read():
    """AuditTrail (moto) hands rows over as AuditRow; a row the model refuses comes back as
    Unreadable with its key and the field named, so the console leaves it out and logs why."""
    boto3.client("dynamodb").create_table(
        TableName="audit", BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "item_id", "AttributeType": "S"},
                              {"AttributeName": "execution_name", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "item_id", "KeyType": "HASH"}, {"AttributeName": "execution_name", "KeyType": "RANGE"}])
    trail = AuditTrail("audit")
    assert trail.write(AuditRow.model_validate(_row()))
    boto3.client("dynamodb").put_item(TableName="audit", Item={
        **{k: {"S": v} for k, v in _row(execution_name="e-2").items()}, "routed_by": {"S": "someone"}})
    bad, good = trail.of_item(_row()["item_id"])  # in execution-name order
    assert good == AuditRow.model_validate(_row())
    assert isinstance(bad, Unreadable) and bad.execution_name == "e-2" and "routed_by" in bad.problem
