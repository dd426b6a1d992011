"""Contract tests of the intake flows' fakes (tests/fakes/intake.py): every behaviour here runs
against the fake and against the adapter it stands for, over moto (only the template's resources
the adapter needs) or, for the endpoint, over botocore's Stubber playing the container. A fake
that drifts from its adapter fails here, so the flow tests on the fakes may trust them.

A conditional write the adapter loses raises botocore's ConditionalCheckFailedException; the fake
raises `ConditionFailed`, a ClientError of the same code: `refused()` accepts exactly that.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import time
import warnings
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

import boto3
import pytest
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyItemNotFoundError,
    IdempotencyValidationError,
)
from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber
from moto import mock_aws

import decision_contract as wire
from decision_router.adapters import queues
from decision_router.adapters.alarm_states import AlarmStates
from decision_router.adapters.endpoint import NO_CAPACITY_MESSAGE, DecisionEndpoint
from decision_router.adapters.incident_table import OPEN, OPEN_MARK, OPEN_MARKS, OPEN_SHARDS, open_mark
from decision_router.adapters.open_incidents import OpenIncidents
from decision_router.adapters.queues import MAX_ATTRIBUTE_CHARS, Queue
from decision_router.adapters.workflow import WorkflowStarter
from decision_router.domain.dependencies import ParentEntry
from decision_router.domain.failures import EndpointFailure
from decision_router.domain.linking import MAX_DESCRIPTION
from decision_router.domain.policies import load_policy
from decision_router.domain.ports.incidents import NewGroup, Opening
from decision_router.domain.records import DecisionRecord, execution_name
from decision_router.domain.routing import Router
from decision_router.items import parse_item
from local.cloudformation import DEFAULT_ACCOUNT_ID, DEFAULT_REGION, Stack
from tests.fakes.intake import (
    ConditionFailed,
    FakeAlarmStates,
    FakeEndpoint,
    FakeOpenIncidents,
    FakeQueue,
    InMemoryIdempotency,
    RecordingWorkflow,
    UnansweredDecision,
    default_hidden,
)

ENDPOINT = "decision-endpoint"
SIDES = ["fake", "moto"]


@functools.cache
def moto_session() -> boto3.Session:
    """One boto3 session for every moto of this module: a new one loads botocore's models again,
    most of a test's time. Made here, after moto is imported, so its requests reach moto."""
    return boto3.Session()


@contextlib.contextmanager
def created(*logical_ids: str) -> Iterator[Stack]:
    """A fresh moto (nothing executes in Step Functions) with only these resources of template.yaml."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": False}}):
        boto3.DEFAULT_SESSION = moto_session()  # moto gives the one before back when it stops
        yield Stack.load(parameters={"ExistingEndpointName": ENDPOINT}).create(only=logical_ids)


@contextlib.contextmanager
def refused() -> Iterator[None]:
    """A conditional write that did not hold: the adapter's ConditionalCheckFailedException, the fake's ConditionFailed."""
    with pytest.raises(ClientError) as info:
        yield
    assert info.value.response["Error"]["Code"] == ConditionFailed.CODE


# =========================================================================== the open-incident store
def open_incident_stores(side: str) -> Iterator[FakeOpenIncidents | OpenIncidents]:
    """The open-incident store of one side: the fake, or the adapter over the template's table in moto."""
    if side == "fake":
        yield FakeOpenIncidents()
        return
    with created("OpenIncidentsTable") as stack:
        yield OpenIncidents(stack.ref("OpenIncidentsTable"))


@pytest.fixture(params=SIDES)
def store(request) -> Iterator[FakeOpenIncidents | OpenIncidents]:
    yield from open_incident_stores(request.param)


def rows(store: FakeOpenIncidents | OpenIncidents) -> dict[str, dict[str, Any]]:
    """Every row, as Python values (a string set as a set), by key."""
    if isinstance(store, FakeOpenIncidents):
        return copy.deepcopy(store.rows)
    deserializer = TypeDeserializer()
    items = boto3.client("dynamodb").scan(TableName=store.table_name, ConsistentRead=True)["Items"]
    return {item["incident_key"]["S"]: {k: deserializer.deserialize(v) for k, v in item.items()} for item in items}


KEY = "arn:aws:cloudwatch:us-east-1:123456789012:alarm:checkout-5xx"
T0, T1, T2, T3 = (f"2026-11-29T12:0{m}:00.000+00:00" for m in (0, 1, 2, 3))


def claim(store, delivery: str, key: str = KEY, **extra: Any) -> str:
    return store.claim(key, delivery, incident_id="INC-" + key.rsplit(":", 1)[-1], source="cloudwatch", **extra)


def opening(delivery: str, key: str = KEY) -> Opening:
    return Opening(incident_key=key, opened_by=delivery, incident_id="INC-1", source="cloudwatch", opened_at=T0)


def test_an_opening_is_put_only_where_no_row_is_or_a_resolved_one_another_delivery_opened(store):
    """The storage the claim rule (domain/open_incidents.py) writes through: one conditional put."""
    assert store.put_opening(opening("d1")) is True
    assert store.put_opening(opening("d2")) is False  # open: never replaced
    assert rows(store)[KEY]["opened_by"] == "d1"
    store.resolve(KEY, "ok-1", "over")
    assert store.put_opening(opening("d1")) is False  # a late copy of the delivery that opened it
    assert rows(store)[KEY]["status"] == "resolved"
    assert store.put_opening(opening("d2")) is True  # a flap: the row put whole
    row = rows(store)[KEY]
    assert (row["status"], row["opened_by"], row[OPEN_MARK]) == ("open", "d2", open_mark(KEY))
    assert not {"resolved_by", "expires_at"} & set(row)


def test_the_opening_delivery_claims_a_new_incident_and_is_told_retry_until_it_is_routed(store):
    """A retry of the opening delivery whose routing failed is routed again (the execution name keeps it once)."""
    assert claim(store, "d1", opens=[T0], service="checkout-api", reported_at=T0) == "new"
    assert claim(store, "d1") == "retry"
    row = rows(store)[KEY]
    assert {k: row[k] for k in ("status", "opened_by", "deliveries", "routed", "updates", "incident_id", "source",
                                "opens", "service", "reported_at")} == {
        "status": "open", "opened_by": "d1", "deliveries": {"d1"}, "routed": False, "updates": 0,
        "incident_id": "INC-checkout-5xx", "source": "cloudwatch", "opens": [T0], "service": "checkout-api", "reported_at": T0}
    assert datetime.fromisoformat(row["opened_at"]) > datetime.now(timezone.utc) - timedelta(minutes=1)


def test_a_service_without_its_time_is_not_kept_and_no_opens_are_written_when_none_are_given(store):
    claim(store, "d1", service="checkout-api")
    assert not {"service", "reported_at", "opens"} & set(rows(store)[KEY])


def test_the_opening_delivery_once_routed_is_a_duplicate(store):
    claim(store, "d1")
    store.routed(KEY, "d1", "exec-1")
    assert claim(store, "d1") == "duplicate"
    assert store.get(KEY).model_dump(include={"routed", "execution_name", "group"}) == {
        "routed": True, "execution_name": "exec-1", "group": None}


def test_another_delivery_of_an_open_incident_updates_it_once(store):
    claim(store, "d1")
    assert claim(store, "d2") == "update"
    assert claim(store, "d2") == "duplicate"  # counted already
    row = rows(store)[KEY]
    assert (row["deliveries"], row["updates"], row["last_delivery"]) == ({"d1", "d2"}, 1, "d2")


def test_touch_counts_a_new_delivery_of_an_open_incident_only(store):
    assert store.touch(KEY, "d0") is False and rows(store) == {}  # nothing open: nothing written
    claim(store, "d1")
    assert store.touch(KEY, "d2") is True
    assert store.touch(KEY, "d2") is False  # twice: counted once
    assert store.touch(KEY, "d1") is False  # the opening delivery is counted already
    store.resolve(KEY, "d3", "ok")
    assert store.touch(KEY, "d4") is False
    assert rows(store)[KEY]["updates"] == 1


def test_a_resolved_incident_reopens_by_another_delivery_as_a_new_incident(store):
    """A flap (ALARM, OK, ALARM): the row is put anew, nothing of the old incident kept but its key."""
    claim(store, "d1", opens=[T0])
    store.routed(KEY, "d1", "exec-1")
    store.resolve(KEY, "ok-1", "alarm is OK")
    assert claim(store, "d2", opens=[T0, T2]) == "new"
    row = rows(store)[KEY]
    assert (row["status"], row["opened_by"], row["routed"], row["opens"], row["deliveries"]) == (
        "open", "d2", False, [T0, T2], {"d2"})
    assert not {"execution_name", "resolved_at", "resolved_by", "resolution"} & set(row)


def test_a_late_copy_of_the_delivery_that_opened_a_resolved_incident_does_not_reopen_it(store):
    claim(store, "d1")
    store.routed(KEY, "d1", "exec-1")
    store.resolve(KEY, "ok-1", "alarm is OK")
    assert claim(store, "d1") == "duplicate"
    assert store.get(KEY).status == "resolved"


def test_an_incident_resolved_before_its_routing_finished_is_not_routed_by_its_retry(store):
    claim(store, "d1")
    store.resolve(KEY, "ok-1", "alarm is OK")
    assert claim(store, "d1") == "duplicate"


def test_only_the_opening_delivery_marks_the_incident_routed(store):
    claim(store, "d1")
    with refused():
        store.routed(KEY, "d2", "exec-2")
    with refused():
        store.routed("never-opened", "d1", "exec-1")
    assert store.get(KEY).routed is False and "never-opened" not in rows(store)
    store.routed(KEY, "d1", "exec-1", group="group#by-service#abc")
    assert store.get(KEY).model_dump(include={"routed", "execution_name", "group"}) == {
        "routed": True, "execution_name": "exec-1", "group": "group#by-service#abc"}


def test_only_the_opening_delivery_records_a_hold_and_the_hold_counts_as_routed(store):
    claim(store, "d1")
    with refused():
        store.held(KEY, "d2", "flapping")
    store.held(KEY, "d1", "in a window", window="deploys", held_until=T2, held_item='{"incident_id": "INC-1"}')
    row = rows(store)[KEY]
    assert {k: row[k] for k in ("routed", "held", "window", "held_until", "held_item")} == {
        "routed": True, "held": "in a window", "window": "deploys", "held_until": T2,
        "held_item": '{"incident_id": "INC-1"}'}
    assert claim(store, "d1") == "duplicate"


def test_resolve_closes_only_an_open_incident_and_hands_back_its_row_as_it_was(store):
    assert store.resolve(KEY, "ok-0", "nothing open") is None and rows(store) == {}
    claim(store, "d1")
    store.routed(KEY, "d1", "exec-1")
    was = store.resolve(KEY, "ok-1", "x" * 1200)
    assert (was.status, was.opened_by, was.execution_name) == ("open", "d1", "exec-1")
    row = rows(store)[KEY]
    assert (row["status"], row["resolved_by"], row["resolution"]) == ("resolved", "ok-1", "x" * 1000)
    assert store.resolve(KEY, "ok-2", "again") is None
    assert rows(store)[KEY]["resolved_by"] == "ok-1"


def test_a_hold_is_released_once_its_window_ended_until_an_execution_is_named(store):
    claim(store, "d1")
    store.held(KEY, "d1", "in a window", held_until=T2)
    assert store.release(KEY, T1) is False
    assert store.release(KEY, T2) is True and rows(store)[KEY]["released_at"] == T2
    assert store.release(KEY, T3) is True  # not routed yet: a second try starts the same execution
    store.released(KEY, "exec-1")
    assert store.release(KEY, T3) is False
    row = rows(store)[KEY]
    assert (row["execution_name"], row["held"]) == ("exec-1", "held by a maintenance window until it ended; then routed")


def test_nothing_is_released_that_no_window_holds_or_that_is_resolved(store):
    claim(store, "d1")
    assert store.release(KEY, T3) is False  # held by no window
    store.held(KEY, "d1", "in a window", held_until=T1)
    store.resolve(KEY, "ok-1", "alarm is OK")
    assert store.release(KEY, T3) is False
    assert store.release("never-opened", T3) is False and "never-opened" not in rows(store)


def test_expired_holds_are_the_open_unrouted_incidents_whose_window_ended(store):
    def hold(key: str, until: str) -> None:
        claim(store, "d1", key=key)
        store.held(key, "d1", "in a window", held_until=until, held_item=f'{{"key": "{key}"}}')

    hold("ended", T1)
    hold("ends-now", T2)
    hold("later", T3)
    hold("routed", T1)
    store.released("routed", "exec-1")
    hold("resolved", T1)
    store.resolve("resolved", "ok-1", "over")
    claim(store, "d1", key="not-held")
    found = {row.incident_key: row.held_item for row in store.expired_holds(T2)}
    assert found == {"ended": '{"key": "ended"}', "ends-now": '{"key": "ends-now"}'}


def held_in_a_window(store, key: str, until: str = T1, **extra: Any) -> None:
    """Open the incident of `key` and hold it in a maintenance window ending at `until`."""
    claim(store, "d1", key=key, **extra)
    store.held(key, "d1", "in a window", held_until=until, held_item=f'{{"key": "{key}"}}')


def test_the_open_incident_index_holds_the_open_incidents_alone_and_no_group(store):
    for key in ("open-a", "open-b", "no-service", "resolved"):
        held_in_a_window(store, key, service="checkout-api" if key != "no-service" else None, reported_at=T0)
    store.resolve("resolved", "ok", "over")
    store.join_group("group#by-service#abc", "open-a", at=T0, until=T1, incident_id="INC-a", severity="sev2")
    assert [row.incident_key for row in store.expired_holds(T2)] == ["no-service", "open-a", "open-b"]
    assert OPEN_MARK not in rows(store)["group#by-service#abc"] and OPEN_MARK not in rows(store)["resolved"]


def test_the_incidents_title_and_description_are_kept_bounded_and_read_back_by_key(store):
    claim(store, "d1", key="described", service="checkout-api", reported_at=T0,
          title="CloudWatch alarm checkout-api-5xx-high is in ALARM", description="customers cannot pay " * 100)
    claim(store, "d1", key="plain", service="orders-db", reported_at=T0, title="  ", description=None)
    found = {i.key: i for i in store.open_incidents(["described", "plain"])}
    assert found["described"].title == "CloudWatch alarm checkout-api-5xx-high is in ALARM"
    kept = found["described"].description
    assert kept is not None and len(kept) <= MAX_DESCRIPTION and kept.startswith("customers cannot pay")
    assert kept.split()[-1] in {"customers", "cannot", "pay"}  # cut at a word's end
    assert (found["plain"].title, found["plain"].description) == (None, None)
    assert not {"title", "description"} & set(rows(store)["plain"])


def test_a_resolved_incident_leaves_the_open_index_and_expires_after_its_retention(store):
    held_in_a_window(store, "a", service="checkout-api", reported_at=T0)
    assert rows(store)["a"][OPEN_MARK] == open_mark("a") and "expires_at" not in rows(store)["a"]
    before = time.time()
    store.resolve("a", "ok-1", "over")
    row = rows(store)["a"]
    assert OPEN_MARK not in row and store.expired_holds(T2) == []
    days = store.retention_days * 86_400
    assert before + days - 1 <= int(row["expires_at"]) <= time.time() + days
    claim(store, "d2", key="a", service="checkout-api", reported_at=T1)  # a flap reopens it, whole
    assert OPEN_MARK in rows(store)["a"] and not {"expires_at", "held_until"} & set(rows(store)["a"])
    store.held("a", "d2", "in a window", held_until=T1)
    assert [row.incident_key for row in store.expired_holds(T2)] == ["a"]


def test_open_rows_are_marked_with_their_keys_shard_and_every_shard_is_read(store):
    """The open-incident index is spread over OPEN_SHARDS values of the mark, one per row by its
    key's hash; the readers hand over the rows of all of them, by key, as one partition would."""
    keys = [f"svc-{n:02d}" for n in range(40)]
    for key in reversed(keys):
        claim(store, "d1", key=key, service="checkout-api", reported_at=T0)
        store.held(key, "d1", "held under a parent", held_under="parent-key", held_until=T1)
    marks = {key: row[OPEN_MARK] for key, row in rows(store).items()}
    assert marks == {key: open_mark(key) for key in keys}
    assert len(set(marks.values())) > OPEN_SHARDS // 2 and set(marks.values()) <= set(OPEN_MARKS) - {OPEN}
    assert [row.incident_key for row in store.expired_holds(T2)] == keys
    assert [row.incident_key for row in store.held_open()] == keys


def mark_as_before_sharding(store, key: str) -> None:
    """Give an open row the mark of before the index was sharded (one value for every open row)."""
    if isinstance(store, FakeOpenIncidents):
        store.rows[key][OPEN_MARK] = OPEN
    else:
        boto3.client("dynamodb").update_item(TableName=store.table_name, Key={"incident_key": {"S": key}},
                                             UpdateExpression="SET #m = :open", ExpressionAttributeNames={"#m": OPEN_MARK},
                                             ExpressionAttributeValues={":open": {"S": OPEN}})


def test_an_open_row_marked_before_sharding_is_read_and_moves_to_its_shard_with_its_next_delivery(store):
    held_in_a_window(store, "old", service="checkout-api", reported_at=T0)
    held_in_a_window(store, "new", service="payments", reported_at=T0)
    mark_as_before_sharding(store, "old")
    assert rows(store)["old"][OPEN_MARK] == OPEN
    assert [row.incident_key for row in store.expired_holds(T2)] == ["new", "old"]
    assert claim(store, "d2", key="old") == "update"
    assert rows(store)["old"][OPEN_MARK] == open_mark("old")
    assert [row.incident_key for row in store.expired_holds(T2)] == ["new", "old"]  # once, from its shard
    store.resolve("old", "ok-1", "over")
    assert OPEN_MARK not in rows(store)["old"] and [row.incident_key for row in store.expired_holds(T2)] == ["new"]


def test_an_open_row_from_before_the_index_is_listed_from_its_next_delivery_on(store):
    claim(store, "d1", key="old", service="checkout-api", reported_at=T0)
    store.held("old", "d1", "held under a parent", held_under="parent-key")
    if isinstance(store, FakeOpenIncidents):
        del store.rows["old"][OPEN_MARK]
    else:
        boto3.client("dynamodb").update_item(TableName=store.table_name, Key={"incident_key": {"S": "old"}},
                                             UpdateExpression="REMOVE #m", ExpressionAttributeNames={"#m": OPEN_MARK})
    assert store.held_open() == []  # not in the index: an older writer's row
    assert claim(store, "d2", key="old") == "update"
    assert [row.incident_key for row in store.held_open()] == ["old"]


def test_a_resolved_group_expires_after_its_retention(store):
    store.join_group("group#g#1", "a", at=T0, until=T3, incident_id="INC-a", severity="sev2")
    store.leave_group("group#g#1", "a", "ok-1")
    assert int(rows(store)["group#g#1"]["expires_at"]) > time.time() + store.retention_days * 86_400 - 60


GROUP = "group#by-service#abc"


def join(store, member: str, at: str = T0, until: str = T2, severity: str = "sev3"):
    return store.join_group(GROUP, member, at=at, until=until, incident_id=f"INC-{member}", severity=severity)


def new_group(leader: str, at: str, until: str) -> NewGroup:
    return NewGroup(incident_key=GROUP, leader=leader, leader_incident_id=f"INC-{leader}", leader_severity="sev3",
                    opened_at=at, until=until)


def test_a_group_is_put_where_none_is_open_and_joined_only_within_its_window(store):
    """The storage the grouping rules (domain/open_incidents.py) write through: conditional writes."""
    assert store.open_group(new_group("a", T0, T2)) is True
    assert store.open_group(new_group("b", T1, T3)) is False  # open, its window not ended
    joined = store.add_to_group(GROUP, "b", at=T1)
    assert joined is not None and (joined.leader, joined.members, joined.open_members) == ("a", ["a", "b"], ["a", "b"])
    assert store.add_to_group(GROUP, "c", at=T2) is None  # its window ended at T2
    assert store.add_to_group("group#none", "c", at=T0) is None and "group#none" not in rows(store)
    assert store.open_group(new_group("c", T2, T3)) is True  # ended: put anew
    assert store.group(GROUP).members == ["c"] and store.group("group#none") is None


def test_a_group_is_closed_only_while_open_with_no_open_member(store):
    store.open_group(new_group("a", T0, T2))
    store.add_to_group(GROUP, "b", at=T0)
    assert store.close_group(GROUP, "ok-a") is None  # open members left
    assert store.drop_open_member(GROUP, "a").open_members == ["b"]
    assert store.drop_open_member(GROUP, "b").open_members == [] and "open_members" not in rows(store)[GROUP]
    closed = store.close_group(GROUP, "ok-b")
    assert closed is not None and (closed.status, rows(store)[GROUP]["resolved_by"]) == ("resolved", "ok-b")
    assert store.close_group(GROUP, "ok-again") is None and rows(store)[GROUP]["resolved_by"] == "ok-b"
    assert store.drop_open_member("group#none", "a") is None and "group#none" not in rows(store)


def test_the_first_incident_leads_a_new_group_and_the_next_ones_join_it(store):
    first = join(store, "a", severity="sev2")
    assert first.model_dump() == {
        "incident_key": GROUP, "status": "open", "leader": "a", "leader_incident_id": "INC-a", "members": ["a"],
        "open_members": ["a"], "execution_name": None, "leader_severity": "sev2", "is_leader": True}
    store.group_routed(GROUP, "exec-a")
    second = join(store, "b", at=T1)
    assert (second.is_leader, second.leader, second.leader_incident_id, second.leader_severity) == (
        False, "a", "INC-a", "sev2")
    assert (second.members, second.open_members, second.execution_name) == (["a", "b"], ["a", "b"], "exec-a")
    again = join(store, "a", at=T1)  # a retried leader finds its own group
    assert again.is_leader and again.members == ["a", "b"]
    row = rows(store)[GROUP]
    assert (row["opened_at"], row["until"], row["members"]) == (T0, T2, {"a", "b"})


def test_a_group_whose_window_has_passed_is_opened_anew_by_the_next_incident(store):
    join(store, "a")
    joined = join(store, "b", at=T2, until=T3)  # `until` is not after `at`: the window is over
    assert (joined.is_leader, joined.members, joined.open_members) == (True, ["b"], ["b"])
    assert rows(store)[GROUP]["until"] == T3


def test_a_group_row_without_a_window_is_never_joined_and_the_event_is_retried(store):
    """A row an unconditional update wrote (no status, no `until`): neither the put nor the join holds."""
    store.group_routed(GROUP, "exec-a")
    with pytest.raises(RuntimeError, match="kept changing"):
        join(store, "a")
    assert rows(store)[GROUP] == {"incident_key": GROUP, "execution_name": "exec-a"}


def test_a_member_leaving_keeps_the_group_open_and_the_last_one_resolves_it(store):
    join(store, "a")
    join(store, "b", at=T1)
    store.group_routed(GROUP, "exec-a")
    left = store.leave_group(GROUP, "a", "ok-a")
    assert (left.status, left.open_members, left.members, left.execution_name) == ("open", ["b"], ["a", "b"], "exec-a")
    last = store.leave_group(GROUP, "b", "ok-b")
    assert (last.status, last.open_members, last.members, last.execution_name) == ("resolved", [], ["a", "b"], "exec-a")
    row = rows(store)[GROUP]
    assert "open_members" not in row and row["resolved_by"] == "ok-b"  # DynamoDB keeps no empty set
    assert store.leave_group("group#gone", "a", "ok") is None


def test_a_resolved_group_is_opened_anew_by_the_next_incident(store):
    join(store, "a")
    store.leave_group(GROUP, "a", "ok-a")
    joined = join(store, "c", at=T1)
    assert (joined.is_leader, joined.status, joined.members) == (True, "open", ["c"])


def test_a_more_severe_member_takes_the_lead_and_the_old_leaders_execution_is_forgotten(store):
    join(store, "a", severity="sev3")
    store.group_routed(GROUP, "exec-a")
    join(store, "b", at=T1, severity="sev1")
    store.lead_group(GROUP, "b", incident_id="INC-b", severity="sev1")
    row = rows(store)[GROUP]
    assert (row["leader"], row["leader_incident_id"], row["leader_severity"]) == ("b", "INC-b", "sev1")
    assert "execution_name" not in row
    store.group_routed(GROUP, "exec-b")
    assert join(store, "c", at=T1).execution_name == "exec-b"


def test_a_grouped_incident_is_listed_on_its_leaders_row(store):
    claim(store, "d1", key="a")
    store.add_member("a", "b")
    store.add_member("a", "c")
    store.add_member("a", "b")
    assert rows(store)["a"]["members"] == {"b", "c"}


def parent(key: str, opened_at: str = T0, severity: str = "sev2") -> ParentEntry:
    return ParentEntry(key=key, incident_id="INC-" + key, service="orders-db", severity=severity, opened_at=opened_at)


def test_a_slot_lists_the_parents_registered_in_it_oldest_first_until_each_is_taken_out(store):
    assert store.parents("parent#service#orders-db") == []
    claim(store, "d1", key="p2")
    claim(store, "d1", key="p1")
    store.register_parent("parent#service#orders-db", parent("p2", T1))
    store.register_parent("parent#service#orders-db", parent("p1", T0, "sev1"))
    store.register_parent("parent#service#orders-db", parent("p1", T0, "sev1"))  # a retry writes the same
    store.register_parent("parent#inhibit#r#abc", parent("p1", T0, "sev1").model_copy(update={"two_sided": True}))
    assert store.parents("parent#service#orders-db") == [parent("p1", T0, "sev1"), parent("p2", T1)]
    assert [p.two_sided for p in store.parents("parent#inhibit#r#abc")] == [True]  # read back as it was written
    assert store.get("p1").parent_slots == ["parent#inhibit#r#abc", "parent#service#orders-db"]
    store.unregister_parent("parent#service#orders-db", "p1")
    store.unregister_parent("parent#service#orders-db", "p1")  # gone already: nothing
    store.unregister_parent("parent#service#nothing", "p1")  # no such slot: nothing
    assert store.parents("parent#service#orders-db") == [parent("p2", T1)]
    assert "parent#service#nothing" not in rows(store)


def hold(store, parent_key: str, child_key: str, delivery: str = "d1", at: str = T1) -> bool:
    """The intake's two writes: the child marked held under the parent, then linked on its row."""
    store.held(child_key, delivery, f"held under {parent_key}", held_under=parent_key, held_item="{}", held_at=at,
               parent_severity="sev2")
    if store.link_child(parent_key, child_key):
        return True
    store.unhold(child_key, delivery)
    return False


HOLD_MARK = ("held", "held_under", "held_item", "parent_severity")


def test_a_child_is_linked_only_to_an_open_parent_that_paged(store):
    claim(store, "d1", key="routed")
    store.routed("routed", "d1", "exec-routed")  # routed, but it paged nobody: it holds nothing
    claim(store, "d1", key="c1")
    assert not hold(store, "routed", "c1")
    found = rows(store)
    assert found["c1"]["routed"] is False and not set(HOLD_MARK) & set(found["c1"])  # the mark is off again
    assert "held_children" not in found["routed"]
    assert store.paged("routed", "exec-routed")
    assert hold(store, "routed", "c1") and hold(store, "routed", "c1")  # a retry writes the same
    claim(store, "d1", key="c2")
    assert hold(store, "routed", "c2")
    found = rows(store)
    assert found["routed"]["held_children"] == {"c1", "c2"} and found["routed"]["paged_by"] == "exec-routed"
    assert {k: found["c1"][k] for k in ("routed", *HOLD_MARK, "held_at")} == {
        "routed": True, "held": "held under routed", "held_under": "routed", "held_item": "{}",
        "parent_severity": "sev2", "held_at": T1}
    claim(store, "d1", key="window")
    store.held("window", "d1", "a window", window="w", held_until=T2, held_item="{}")
    claim(store, "d1", key="c3")
    assert not hold(store, "window", "c3")  # a window's hold pages nobody: it holds nothing
    assert not hold(store, "c1", "c3")  # nor does a held incident
    assert not hold(store, "missing", "c3")
    assert not store.paged("missing", "exec-missing")
    store.resolve("routed", "ok", "over")
    assert not store.paged("routed", "exec-late")
    assert not hold(store, "routed", "c3")
    was = store.get("routed")
    assert was.held_children == ["c1", "c2"] and was.resolved_by == "ok" and was.paged_by == "exec-routed"


def test_a_mark_is_taken_off_only_by_the_delivery_that_opened_the_incident(store):
    claim(store, "d1", key="c")
    store.held("c", "d1", "held under p", held_under="p", held_item="{}", held_at=T1, parent_severity="sev2")
    with refused():
        store.unhold("c", "d9")
    with refused():
        store.unhold("missing", "d1")
    assert rows(store)["c"]["held_under"] == "p"


def test_an_execution_points_to_the_incident_it_routes_until_the_row_expires(store):
    assert store.pointed("exec-a") is None
    store.point("exec-a", KEY)
    store.point("exec-a", KEY)  # a retry writes the same
    assert store.pointed("exec-a") == KEY
    row = rows(store)["execution#exec-a"]
    assert set(row) == {"incident_key", "points_to", "expires_at"} and row["points_to"] == KEY
    assert store.held_open() == [] and store.get(KEY) is None  # no incident's row, and not open


def test_the_open_holds_are_listed_until_routed_or_resolved(store):
    claim(store, "d1", key="p")
    store.paged("p", "exec-p")
    for child in ("c1", "c2", "c3", "c4"):
        claim(store, "d1", key=child)
        hold(store, "p", child)
    store.released("c2", "exec-c2")  # routed since (it carries its execution)
    store.resolve("c3", "ok", "over")
    store.held("c4", "d1", "grouped", group=GROUP)  # released since, and grouped
    assert [row.incident_key for row in store.held_open()] == ["c1"]
    (row,) = store.held_open()
    assert (row.held_under, row.held_at, row.parent_severity) == ("p", T1, "sev2")


def test_the_dependency_writes_leave_the_rows_dynamodb_holds():
    def life(store) -> None:
        claim(store, "d1", key="p")
        store.routed("p", "d1", "exec-p")
        store.paged("p", "exec-p")
        store.register_parent("parent#service#orders-db", parent("p"))
        store.register_parent("parent#inhibit#r#abc", parent("p").model_copy(update={"two_sided": True}))
        claim(store, "d1", key="c")
        hold(store, "p", "c")
        store.resolve("p", "ok", "over")
        store.unregister_parent("parent#service#orders-db", "p")

    fake = FakeOpenIncidents()
    life(fake)
    with created("OpenIncidentsTable") as stack:
        adapter = OpenIncidents(stack.ref("OpenIncidentsTable"))
        life(adapter)
        held = rows(adapter)
    drop = ("opened_at", "resolved_at", "expires_at")  # clock readings: the two lives run seconds apart
    assert ({k: {n: v for n, v in r.items() if n not in drop} for k, r in rows(fake).items()}
            == {k: {n: v for n, v in r.items() if n not in drop} for k, r in held.items()})


def test_the_unconditional_updates_write_a_row_that_is_not_there(store):
    """UpdateItem without a condition writes the item when missing: so does the fake."""
    store.add_member("x", "m")
    store.released("y", "exec-y")
    store.group_routed("z", "exec-z")
    found = rows(store)
    assert found["x"] == {"incident_key": "x", "members": {"m"}}
    assert found["y"] == {"incident_key": "y", "execution_name": "exec-y",
                          "held": "held by a maintenance window until it ended; then routed"}
    assert found["z"] == {"incident_key": "z", "execution_name": "exec-z"}


def scripted_store_life(store) -> None:
    """Every write of the store in one life: incidents opened, updated, held, released, resolved,
    reopened; a group led, joined, taken over and resolved."""
    claim(store, "d1", key="a", opens=[T0], service="checkout-api", reported_at=T0)
    claim(store, "d2", key="a")
    store.routed("a", "d1", "exec-a", group=GROUP)
    store.join_group(GROUP, "a", at=T0, until=T2, incident_id="INC-a", severity="sev3")
    store.group_routed(GROUP, "exec-a")
    claim(store, "d1", key="b", service="payments", reported_at=T1)
    store.join_group(GROUP, "b", at=T1, until=T3, incident_id="INC-b", severity="sev3")
    store.held("b", "d1", "grouped", group=GROUP)
    store.add_member("a", "b")
    claim(store, "d1", key="c", opens=[T0, T1, T2])
    store.join_group(GROUP, "c", at=T1, until=T3, incident_id="INC-c", severity="sev1")
    store.lead_group(GROUP, "c", incident_id="INC-c", severity="sev1")
    store.routed("c", "d1", "exec-c", group=GROUP)
    store.group_routed(GROUP, "exec-c")
    claim(store, "d1", key="w")
    store.held("w", "d1", "window", window="deploys", held_until=T2, held_item="{}")
    store.release("w", T2)
    store.released("w", "exec-w")
    for key in ("a", "b", "c"):
        store.resolve(key, f"ok-{key}", f"{key} is OK")
        store.leave_group(GROUP, key, f"ok-{key}")
    claim(store, "d9", key="a", opens=[T3])
    store.touch("a", "d10")


def test_the_fake_leaves_the_rows_dynamodb_holds_after_the_same_writes():
    """Beyond what each behaviour reads back: every attribute of every row, as DynamoDB keeps them."""
    fake = FakeOpenIncidents()
    scripted_store_life(fake)
    with created("OpenIncidentsTable") as stack:
        adapter = OpenIncidents(stack.ref("OpenIncidentsTable"))
        scripted_store_life(adapter)
        held = rows(adapter)

    def stamped(found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The times the store writes itself (now, and the expiry counted from now), as one mark each."""
        recent = datetime.now(timezone.utc) - timedelta(minutes=1)
        return {key: {name: "<now>" if name in ("opened_at", "updated_at", "resolved_at")
                      and datetime.fromisoformat(value) > recent else "<expiry>" if name == "expires_at" else value
                      for name, value in row.items()}
                for key, row in found.items()}

    assert set(held) == {"a", "b", "c", "w", GROUP}
    assert stamped(rows(fake)) == stamped(held)


# =========================================================================== the decision endpoint
#: The container's model, as it reports itself (a hidden state of hidden_size values).
CONTAINER_MODEL = wire.ModelInfo(file="model.gguf", bytes=1, sha256="a" * 64, context_size=4096, threads=2, gpu_layers=0,
                                 llama_cpp_python_version="0.3", hidden_size=4)


class ContainerStub:
    """DecisionEndpoint on a real sagemaker-runtime client; a Stubber answers each request as the
    container does (routes/sagemaker.py, decision_work.py): one result per decision asked, the
    letters' softmax at the decision's temperature, the hidden state only when asked, JSON
    without nulls. `fail(kind)` answers every attempt with the SageMaker error of that kind."""

    def __init__(self) -> None:
        self.client = boto3.client("sagemaker-runtime", region_name="us-east-1")
        self.stubber = Stubber(self.client)
        self.answers: dict[str, tuple[list[float], list[float] | None]] = {}
        self.fault: Callable[[], None] | None = None
        self.requests: list[list[wire.Decision]] = []
        self.client.meta.events.register("provide-client-params.sagemaker-runtime.InvokeEndpoint", self._respond)
        self.endpoint = DecisionEndpoint(ENDPOINT, client=self.client, sleep=lambda seconds: None)
        self.stubber.activate()

    params = {"EndpointName": ENDPOINT, "Body": ANY, "ContentType": "application/json", "Accept": "application/json"}

    def answer(self, question: str, logits: list[float], hidden_state: list[float] | None = None) -> None:
        self.answers[question] = (logits, hidden_state)

    def _respond(self, params: dict, **_: Any) -> None:
        request = wire.DecisionRequest.model_validate_json(params["Body"])
        self.requests.append(request.items)
        if self.fault is not None:
            self.fault()
            return
        results = []
        for decision in request.items:
            logits, hidden = self.answers[decision.id]
            results.append(wire.DecisionResult(
                id=decision.id, option_ids=decision.option_ids, probabilities=wire.softmax(logits, decision.temperature),
                option_logits=logits, temperature=decision.temperature, input_tokens=57, reused_prefix_tokens=12,
                allowed_token_mass=0.97, prompt_sha256="c" * 64, prompt_version="direct-options-v1",
                model=CONTAINER_MODEL, answer_token_ids=list(range(len(logits))), full_vocab_argmax_id=7,
                timing=wire.DecisionTiming(tokenize_seconds=0.001, prefill_seconds=0.02, total_seconds=0.021),
                forward_seconds=0.02, total_seconds=0.021,
                hidden_state=(hidden if hidden is not None else default_hidden(decision, CONTAINER_MODEL.hidden_size))
                if decision.return_hidden_state else None))
        response = (wire.SingleDecisionResponse(result=results[0]) if request.decision is not None else wire.BatchDecisionResponse(
            results=results, timing=wire.BatchTiming(shared_prefix_tokens=12, shared_prefix_seconds=0.01,
                                                     total_seconds=0.03, batch_size=len(results))))
        raw = response.model_dump_json(exclude_none=True).encode()
        self.stubber.add_response("invoke_endpoint", {"Body": StreamingBody(io.BytesIO(raw), len(raw)),
                                                      "ContentType": "application/json"}, self.params)

    def fail(self, kind: str) -> None:
        def model_error(status: int) -> Callable[[], None]:
            message = json.dumps({"error": {"code": "busy", "message": "model busy", "retryable": status == 503}})
            return lambda: self.stubber.add_client_error(
                "invoke_endpoint", service_error_code="ModelError", service_message="Received server error",
                http_status_code=424, expected_params=self.params,
                modeled_fields={"OriginalStatusCode": status, "OriginalMessage": message})

        def error(code: str, message: str, status: int) -> Callable[[], None]:
            return lambda: self.stubber.add_client_error("invoke_endpoint", service_error_code=code,
                                                         service_message=message, http_status_code=status,
                                                         expected_params=self.params)

        self.fault = {"retryable_model_error": model_error(503), "model_error": model_error(400),
                      "throttled": error("ThrottlingException", "Rate exceeded", 400),
                      "unavailable": error("ServiceUnavailable", "try later", 503),
                      "no_capacity": error("ValidationError", NO_CAPACITY_MESSAGE, 400)}[kind]


class Side:
    """One side of the endpoint's contract: give answers, make it fail, ask it, see what it was asked."""

    def __init__(self, kind: str):
        self.kind = kind
        self.fake = FakeEndpoint(model=CONTAINER_MODEL, prompt_version="direct-options-v1")
        self.stub = ContainerStub() if kind == "stubbed" else None

    def answer(self, question: str, logits: list[float], hidden_state: list[float] | None = None) -> None:
        if self.stub is not None:
            self.stub.answer(question, logits, hidden_state)
        else:
            self.fake.answer(question, logits, hidden_state=hidden_state)

    def fail(self, kind: str) -> None:
        if self.stub is not None:
            self.stub.fail(kind)
        else:
            self.fake.fail(kind)

    def decide(self, decisions: list[wire.Decision], deadline: float | None = None) -> dict[str, wire.DecisionResult]:
        return (self.stub.endpoint if self.stub is not None else self.fake).decide(decisions, deadline=deadline)

    @property
    def asked(self) -> list[list[str]]:
        """The decision ids of each request that reached the endpoint (the adapter's retries of a
        request, the same body again, counted once: the fake raises what they end with)."""
        if self.stub is None:
            return [[d.id for d in request] for request in self.fake.requests]
        asked: list[list[wire.Decision]] = []
        for request in self.stub.requests:
            if not asked or request != asked[-1]:
                asked.append(request)
        return [[d.id for d in request] for request in asked]


@pytest.fixture(params=["fake", "stubbed"])
def endpoint(request) -> Side:
    return Side(request.param)


def decision(question: str, options: int = 3, *, temperature: float = 1.0, hidden: bool = False) -> wire.Decision:
    return wire.Decision(id=question, state={"subject": "Charged twice", "channel": "email"}, question=f"Which {question}?",
                         options=[wire.DecisionOption(id=f"{question}-{i}", description=f"option {i}") for i in range(options)],
                         temperature=temperature, return_hidden_state=hidden)


def assert_answers(result: wire.DecisionResult, asked: wire.Decision, logits: list[float]) -> None:
    assert isinstance(result, wire.DecisionResult)
    assert (result.id, result.option_ids, result.option_logits, result.temperature) == (
        asked.id, asked.option_ids, logits, asked.temperature)
    assert result.probabilities == pytest.approx(wire.softmax(logits, asked.temperature))
    assert 0 < result.allowed_token_mass <= 1 and result.model.sha256 and result.prompt_sha256


def test_one_decision_is_answered_by_its_id_with_its_options_logits(endpoint):
    asked = decision("queue", 5)
    endpoint.answer("queue", [3.0, 0.5, 0.0, -1.0, 0.2])
    results = endpoint.decide([asked])
    assert list(results) == ["queue"]
    assert_answers(results["queue"], asked, [3.0, 0.5, 0.0, -1.0, 0.2])
    assert results["queue"].hidden_state is None  # not asked for
    assert endpoint.asked == [["queue"]]


def test_a_batch_is_answered_decision_by_decision_at_each_ones_temperature(endpoint):
    asked = [decision("priority", 4, temperature=2.0), decision("team", 3)]
    endpoint.answer("priority", [1.0, 2.0, 0.0, 0.0])
    endpoint.answer("team", [0.0, 0.0, 4.0])
    results = endpoint.decide(asked)
    assert sorted(results) == ["priority", "team"]
    assert_answers(results["priority"], asked[0], [1.0, 2.0, 0.0, 0.0])
    assert_answers(results["team"], asked[1], [0.0, 0.0, 4.0])
    assert results["priority"].probabilities != pytest.approx(wire.softmax([1.0, 2.0, 0.0, 0.0]))
    assert endpoint.asked == [["priority", "team"]]


def test_the_hidden_state_comes_only_with_the_decision_that_asks_for_it(endpoint):
    asked = [decision("queue", 2, hidden=True), decision("tier", 2)]
    endpoint.answer("queue", [1.0, 0.0], hidden_state=[0.1, -0.2, 0.3, 0.0])
    endpoint.answer("tier", [0.0, 1.0], hidden_state=[0.5, 0.5, 0.5, 0.5])
    results = endpoint.decide(asked)
    assert results["queue"].hidden_state == [0.1, -0.2, 0.3, 0.0]
    assert len(results["queue"].hidden_state) == results["queue"].model.hidden_size
    assert results["tier"].hidden_state is None


def test_nothing_to_decide_calls_nothing(endpoint):
    assert endpoint.decide([]) == {} and endpoint.asked == []


def test_too_little_time_before_the_deadline_fails_without_calling_the_endpoint(endpoint):
    endpoint.answer("queue", [1.0, 0.0, 0.0])
    with pytest.raises(EndpointFailure) as info:
        endpoint.decide([decision("queue")], deadline=time.monotonic() + 0.5)
    assert (info.value.kind, info.value.attempts) == ("timeout", 0) and endpoint.asked == []


@pytest.mark.parametrize("kind, retryable, attempts", [
    ("retryable_model_error", True, 4), ("throttled", True, 4), ("unavailable", True, 4),
    ("model_error", False, 1), ("no_capacity", False, 1)])
def test_a_fault_fails_as_the_adapter_fails_once_its_retries_are_spent(endpoint, kind, retryable, attempts):
    """The item then goes to review with the failure as its reason (no_capacity: a ticket waits)."""
    endpoint.fail(kind)
    with pytest.raises(EndpointFailure) as info:
        endpoint.decide([decision("queue")])
    failure = info.value
    assert (failure.kind, failure.retryable, failure.attempts) == (kind, retryable, attempts)
    assert failure.describe().kind == kind and endpoint.asked == [["queue"]]


def test_the_fake_fails_as_often_as_told_then_answers_again():
    fake = FakeEndpoint({"queue": [1.0, 0.0, 0.0]}).fail("throttled", times=2)
    for _ in range(2):
        with pytest.raises(EndpointFailure):
            fake.decide([decision("queue")])
    assert fake.decide([decision("queue")])["queue"].option_logits == [1.0, 0.0, 0.0]
    fake.fail("model_error")
    with pytest.raises(EndpointFailure):
        fake.decide([decision("queue")])
    fake.recover()
    assert list(fake.decide([decision("queue")])) == ["queue"] and len(fake.requests) == 5


def test_the_fake_answers_an_item_by_the_state_fields_given_for_it():
    fake = FakeEndpoint({"queue": [0.0, 0.0, 1.0]})
    fake.answer("queue", [5.0, 0.0, 0.0], where={"subject": "Charged twice"})
    other = decision("queue").model_copy(update={"state": {"subject": "Cannot log in"}})
    assert fake.decide([decision("queue")])["queue"].option_logits == [5.0, 0.0, 0.0]
    assert fake.decide([other])["queue"].option_logits == [0.0, 0.0, 1.0]


def test_the_fake_says_what_answer_is_missing_instead_of_sending_the_item_to_review():
    """A test that forgot an answer fails loudly: an EndpointFailure would route the item to review."""
    fake = FakeEndpoint({"queue": [1.0, 0.0, 0.0]}, model=CONTAINER_MODEL)
    with pytest.raises(UnansweredDecision, match="'team'"):
        fake.decide([decision("team")])
    with pytest.raises(UnansweredDecision, match="2 logits; the decision has 3 options"):
        FakeEndpoint({"queue": [1.0, 0.0]}).decide([decision("queue")])
    with pytest.raises(ValueError, match="hidden_size is 4"):
        fake.answer("queue", [1.0, 0.0, 0.0], hidden_state=[0.0] * 3)
    shared = FakeEndpoint({"queue": [1.0, 0.0, 0.0]}, model=CONTAINER_MODEL, hidden_state=[1.0] * 4)
    assert shared.decide([decision("queue", hidden=True)])["queue"].hidden_state == [1.0] * 4


def test_a_hidden_state_asked_for_and_not_given_is_the_items_own(endpoint):
    """The container returns a hidden state whenever asked; the fake and the stub give one of the
    model's width, the same for the same item and another for another item."""
    endpoint.answer("queue", [1.0, 0.0, 0.0])
    asked = decision("queue", hidden=True)
    other = asked.model_copy(update={"state": {"subject": "Cannot log in"}})
    first, again, another = (endpoint.decide([d])["queue"].hidden_state for d in (asked, asked, other))
    assert first is not None and len(first) == CONTAINER_MODEL.hidden_size
    assert first == again and first != another


# =========================================================================== the routing workflow
@pytest.fixture(params=SIDES)
def workflow(request) -> Iterator[RecordingWorkflow | WorkflowStarter]:
    if request.param == "fake":
        yield RecordingWorkflow()
        return
    with created("RoutingStateMachine") as stack:
        yield WorkflowStarter(stack.ref("RoutingStateMachine"))


def end(workflow, name: str, status: str) -> None:
    """The named execution ended so (moto runs nothing: its record of the execution is set)."""
    if isinstance(workflow, RecordingWorkflow):
        workflow.end(name, status)
        return
    from moto.stepfunctions.models import stepfunctions_backends

    machine = stepfunctions_backends[DEFAULT_ACCOUNT_ID][DEFAULT_REGION].describe_state_machine(workflow.state_machine_arn)
    next(e for e in machine.executions if e.name == name).status = status


def started(workflow) -> dict[str, DecisionRecord]:
    """Each execution's record, by name."""
    if isinstance(workflow, RecordingWorkflow):
        return workflow.records
    sfn = boto3.client("stepfunctions")
    found = {}
    for execution in sfn.list_executions(stateMachineArn=workflow.state_machine_arn)["executions"]:
        described = sfn.describe_execution(executionArn=execution["executionArn"])
        found[execution["name"]] = DecisionRecord.model_validate_json(described["input"])
    return found


@pytest.fixture(scope="module")
def record() -> DecisionRecord:
    """A ticket's record, decided by the policy's rule (no endpoint)."""
    policy = load_policy("support-ticket")
    ticket = parse_item("ticket", {
        "ticket_id": "T-1006", "subject": "Invoice with a wrong VAT number", "body": "Please reissue the invoice.",
        "customer": {"id": "C-5120", "tier": "pro"}, "channel": "billing-portal", "created_at": "2026-11-29T11:30:00Z"})
    router = Router(FakeEndpoint(),
                    destinations={t: f"https://sqs/{t}" for t in map(policy.target, policy.question("queue").option_ids)},
                    review_timeout_seconds=3600)
    return router.decision_record(ticket, policy)[0]


def test_a_record_starts_the_execution_named_after_its_item(workflow, record):
    name = execution_name(record.item_kind, record.item_id, record.item_key)
    assert workflow.start(record) == (name, True)
    assert workflow.status(name) == "RUNNING"
    assert started(workflow) == {name: record}
    assert workflow.status("ticket-never-started") is None


def test_the_same_record_again_is_answered_by_the_running_execution_and_starts_nothing(workflow, record):
    """Step Functions takes the same name and input of a running execution as the same start."""
    first = workflow.start(record)
    assert workflow.start(record) == first
    assert list(started(workflow)) == [first[0]]


def test_another_record_of_the_same_item_is_already_routed_and_the_first_stands(workflow, record):
    name, _ = workflow.start(record)
    other = record.model_copy(update={"route": "review", "route_reason": "a window", "destination": None})
    assert workflow.start(other) == (name, False)
    assert started(workflow) == {name: record}


def test_an_item_whose_execution_succeeded_is_not_started_again(workflow, record):
    name, _ = workflow.start(record)
    end(workflow, name, "SUCCEEDED")
    assert workflow.start(record) == (name, False)
    assert workflow.status(name) == "SUCCEEDED" and list(started(workflow)) == [name]


@pytest.mark.parametrize("status", ["FAILED", "TIMED_OUT", "ABORTED"])
def test_an_item_whose_execution_ended_unrouted_starts_under_the_next_attempts_name(workflow, record, status):
    name, _ = workflow.start(record)
    end(workflow, name, status)
    retry = execution_name(record.item_kind, record.item_id, record.item_key, 2)
    assert workflow.start(record) == (retry, True)
    assert workflow.start(record) == (retry, True)  # the retry runs: the same start again
    assert sorted(started(workflow)) == sorted([name, retry]) and workflow.status(name) == status


# =========================================================================== queues
@pytest.fixture(params=SIDES)
def queue(request, monkeypatch) -> Iterator[FakeQueue | Queue]:
    if request.param == "fake":
        yield FakeQueue()
        return
    # moto waits out a long poll on an empty queue: the adapter polls without waiting here
    monkeypatch.setattr(queues, "POLL_SECONDS", 0)
    with created("TicketDeadLetterQueue") as stack:
        yield Queue(stack.ref("TicketDeadLetterQueue"))


def attributes(message: dict) -> dict[str, str]:
    return {name: value["StringValue"] for name, value in message.get("MessageAttributes", {}).items()}


def test_a_message_is_sent_with_its_attributes_trimmed_and_the_empty_ones_left_out(queue):
    queue.send('{"ticket_id": "T-1"}', {"failure_kind": "invalid_item", "item_id": "", "failure_reason": "r" * 2500})
    queue.send('{"ticket_id": "T-2"}')
    queue.send('{"ticket_id": "T-3"}', {"item_id": ""})
    received = {m["Body"]: attributes(m) for m in queue.messages(10)}
    assert received == {'{"ticket_id": "T-1"}': {"failure_kind": "invalid_item", "failure_reason": "r" * MAX_ATTRIBUTE_CHARS},
                        '{"ticket_id": "T-2"}': {}, '{"ticket_id": "T-3"}': {}}


def test_each_message_is_received_once_then_hidden_until_released(queue):
    for n in range(3):
        queue.send(f"m{n}")
    first = list(queue.messages(2))
    assert len(first) == 2 and len({m["MessageId"] for m in first}) == 2
    rest = list(queue.messages(10))
    assert sorted(m["Body"] for m in rest) == sorted({"m0", "m1", "m2"} - {m["Body"] for m in first})
    assert list(queue.messages(10)) == []  # all received: hidden
    queue.release(first[0])
    assert [m["Body"] for m in queue.messages(10)] == [first[0]["Body"]]


def test_a_deleted_message_is_gone_and_a_hidden_one_stays_hidden(queue):
    queue.send("delete me")
    queue.send("hide me")
    received = {m["Body"]: m for m in queue.messages(10)}
    queue.delete(received["delete me"])
    queue.hide(received["hide me"]["ReceiptHandle"], 600)
    assert list(queue.messages(10)) == []
    queue.hide(received["hide me"]["ReceiptHandle"], 0)  # visible again at once
    assert [m["Body"] for m in queue.messages(10)] == ["hide me"]


def test_a_receipt_handle_the_queue_never_gave_is_refused(queue):
    with pytest.raises(ClientError) as info:
        queue.hide("not-a-receipt-handle", 360)
    assert info.value.response["Error"]["Code"] == "ReceiptHandleIsInvalid"


def test_the_fake_hands_a_received_message_to_the_intake_and_keeps_what_it_hid():
    """The ticket intake hides the record Lambda received: `received` is that message."""
    fake = FakeQueue()
    message = fake.received('{"ticket_id": "T-1"}')
    assert list(fake.messages(10)) == []  # in flight with the intake
    fake.hide(message["ReceiptHandle"], 360)
    assert fake.hidden == [(message["ReceiptHandle"], 360)] and fake.sent == [('{"ticket_id": "T-1"}', {})]


# =========================================================================== CloudWatch alarms
class AlarmSide:
    def __init__(self, kind: str):
        self.kind = kind
        self.reader = FakeAlarmStates() if kind == "fake" else AlarmStates()

    def given(self, arn: str, state: str) -> None:
        if isinstance(self.reader, FakeAlarmStates):
            self.reader.set(arn, state)
            return
        _, _, _, region, _, _, name = arn.split(":", 6)
        cloudwatch = boto3.client("cloudwatch", region_name=region)
        cloudwatch.put_metric_alarm(AlarmName=name, MetricName="5xx", Namespace="Checkout", Statistic="Sum",
                                    Period=60, EvaluationPeriods=1, Threshold=1.0,
                                    ComparisonOperator="GreaterThanThreshold")
        cloudwatch.set_alarm_state(AlarmName=name, StateValue=state, StateReason="test")


@pytest.fixture(params=SIDES)
def alarms(request) -> Iterator[AlarmSide]:
    if request.param == "fake":
        yield AlarmSide("fake")
        return
    with created():
        yield AlarmSide("moto")


def alarm(name: str, region: str = "us-east-1", account: str = DEFAULT_ACCOUNT_ID) -> str:
    return f"arn:aws:cloudwatch:{region}:{account}:alarm:{name}"


@pytest.mark.parametrize("state", ["OK", "ALARM", "INSUFFICIENT_DATA"])
def test_an_alarm_is_in_the_state_cloudwatch_gives_it(alarms, state):
    alarms.given(alarm("checkout-5xx"), state)
    assert alarms.reader.state_of(alarm("checkout-5xx")) == state


def test_an_alarm_is_known_in_its_own_region(alarms):
    alarms.given(alarm("checkout-5xx", "eu-west-1"), "ALARM")
    assert alarms.reader.state_of(alarm("checkout-5xx", "eu-west-1")) == "ALARM"
    assert alarms.reader.state_of(alarm("checkout-5xx")) == "missing"


def test_an_alarm_never_made_or_a_key_that_names_no_alarm_is_missing(alarms):
    alarms.given(alarm("checkout-5xx"), "OK")
    assert alarms.reader.state_of(alarm("never-made")) == "missing"
    assert alarms.reader.state_of("arn:aws:sns:us-east-1:123456789012:alarm-topic") == "missing"
    assert alarms.reader.state_of("INC-2001") == "missing"


def test_an_alarm_of_another_account_cannot_be_asked_about(alarms):
    alarms.given(alarm("checkout-5xx"), "ALARM")
    assert alarms.reader.state_of(alarm("checkout-5xx", account="210987654321")) == "elsewhere"


# =========================================================================== the idempotency store
@pytest.fixture(params=SIDES)
def persistence(request) -> Iterator[InMemoryIdempotency | DynamoDBPersistenceLayer]:
    if request.param == "fake":
        yield InMemoryIdempotency()
        return
    with created("IdempotencyTable") as stack:
        # its client from the module's session (moto_session), not a new session of its own
        yield DynamoDBPersistenceLayer(table_name=stack.ref("IdempotencyTable"), boto3_client=boto3.client("dynamodb"))


class LambdaContext:
    def __init__(self, remaining_ms: int):
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class InvocationEnded(BaseException):
    """What a Lambda timeout is to the function: it ends mid-call, no `except Exception` runs."""


class Judge:
    """A function made idempotent by Powertools over a persistence layer, as Intake.observed_record is."""

    def __init__(self, persistence, *, expires: int = 3600, remaining_ms: int | None = 60_000, **config: Any):
        self.calls = 0
        self.fail_with: BaseException | None = None
        self.config = IdempotencyConfig(raise_on_no_idempotency_key=True, expires_after_seconds=expires, **config)
        if remaining_ms is not None:
            self.config.register_lambda_context(LambdaContext(remaining_ms))
        self.once = idempotent_function(self.judge, data_keyword_argument="item_key", config=self.config,
                                        persistence_store=persistence)

    def judge(self, item_key: Any) -> dict:
        self.calls += 1
        if self.fail_with is not None:
            raise self.fail_with
        return {"decided": self.calls}

    def __call__(self, key: Any) -> dict:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Powertools warns when it has no Lambda context (its deadline)
            return self.once(item_key=key)


def statuses(persistence) -> list[str]:
    if isinstance(persistence, InMemoryIdempotency):
        return [item["status"] for item in persistence.items.values()]
    return [item["status"]["S"] for item in boto3.client("dynamodb").scan(TableName=persistence.table_name)["Items"]]


def test_a_key_is_decided_once_and_its_duplicates_answered_from_the_store(persistence):
    judge = Judge(persistence)
    assert judge("ticket#1") == {"decided": 1}
    assert judge("ticket#1") == {"decided": 1}
    assert judge("ticket#2") == {"decided": 2}
    assert judge.calls == 2 and statuses(persistence) == ["COMPLETED", "COMPLETED"]


def test_a_failed_decision_is_forgotten_so_the_retry_decides_again(persistence):
    judge = Judge(persistence)
    judge.fail_with = RuntimeError("endpoint down")
    with pytest.raises(RuntimeError):
        judge("ticket#1")
    assert statuses(persistence) == []
    judge.fail_with = None
    assert judge("ticket#1") == {"decided": 2}


def test_a_key_in_progress_is_refused_while_its_invocation_may_still_run(persistence):
    judge = Judge(persistence, remaining_ms=60_000)
    judge.fail_with = InvocationEnded()
    with pytest.raises(InvocationEnded):
        judge("ticket#1")
    assert statuses(persistence) == ["INPROGRESS"]
    judge.fail_with = None
    with pytest.raises(IdempotencyAlreadyInProgressError):
        judge("ticket#1")
    assert judge.calls == 1


def test_a_key_in_progress_without_a_deadline_is_refused_until_the_record_expires(persistence):
    judge = Judge(persistence, remaining_ms=None)
    judge.fail_with = InvocationEnded()
    with pytest.raises(InvocationEnded):
        judge("ticket#1")
    judge.fail_with = None
    with pytest.raises(IdempotencyAlreadyInProgressError):
        judge("ticket#1")


def test_a_key_in_progress_past_its_invocations_deadline_is_taken_over(persistence):
    judge = Judge(persistence, remaining_ms=0)  # Lambda killed it at its deadline
    judge.fail_with = InvocationEnded()
    with pytest.raises(InvocationEnded):
        judge("ticket#1")
    time.sleep(0.005)  # the in-progress expiry is in milliseconds: let one pass
    judge.fail_with = None
    assert judge("ticket#1") == {"decided": 2}
    assert statuses(persistence) == ["COMPLETED"]


def test_an_expired_record_is_decided_anew(persistence):
    judge = Judge(persistence, expires=-60)  # kept until a minute ago
    assert judge("ticket#1") == {"decided": 1}
    assert judge("ticket#1") == {"decided": 2}
    assert statuses(persistence) == ["EXPIRED"]  # the one record, written as its expiry says


def test_the_same_key_with_another_payload_is_refused_when_payloads_are_validated(persistence):
    judge = Judge(persistence, event_key_jmespath="id", payload_validation_jmespath="body")
    assert judge({"id": "ticket#1", "body": "charged twice"}) == {"decided": 1}
    assert judge({"id": "ticket#1", "body": "charged twice"}) == {"decided": 1}
    with pytest.raises(IdempotencyValidationError):
        judge({"id": "ticket#1", "body": "something else"})


def test_a_key_never_stored_is_not_found(persistence):
    with pytest.raises(IdempotencyItemNotFoundError):
        persistence._get_record("idempotency#nothing")
