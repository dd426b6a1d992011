"""The open-incident store (adapters/open_incidents.py) against moto: a claim keeps the incident's
service and reported time, `open_incidents` reads the open ones back by key as domain objects;
rows from before (no service), resolved ones and group rows are left out. The open-incident index
is sharded: its readers (`expired_holds`, `held_open`) query every shard and the value of before
sharding, page by page."""

from __future__ import annotations

from datetime import datetime, timezone

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters.incident_table import OPEN, OPEN_INDEX, OPEN_MARK, OPEN_MARKS, open_mark
from decision_router.adapters.open_incidents import OpenIncidents
from decision_router.domain.linking import OpenIncident

TABLE = "open-incidents"
#: A maintenance window's end, and a time after it (the index's readers list the holds it ended).
WINDOW_END, AFTER = "2026-11-29T13:00:00.000+00:00", "2026-11-29T14:00:00.000+00:00"


@pytest.fixture
def store():
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                            KeySchema=[{"AttributeName": "incident_key", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "incident_key", "AttributeType": "S"},
                                                  {"AttributeName": OPEN_MARK, "AttributeType": "S"}],
                            GlobalSecondaryIndexes=[{"IndexName": OPEN_INDEX, "Projection": {"ProjectionType": "ALL"},
                                                     "KeySchema": [{"AttributeName": OPEN_MARK, "KeyType": "HASH"},
                                                                   {"AttributeName": "incident_key", "KeyType": "RANGE"}]}])
        yield OpenIncidents(TABLE, client=client)


def test_a_claim_keeps_the_service_and_open_incidents_returns_domain_objects(store):
    assert store.claim("arn:alarm:payments", "d1", incident_id="INC-1", source="aws.cloudwatch",
                       service="payments-api", reported_at="2026-11-29T12:00:00.000+00:00") == "new"
    row = store._item("arn:alarm:payments")  # the store's own columns, as DynamoDB holds them
    assert row["service"] == {"S": "payments-api"} and row["reported_at"] == {"S": "2026-11-29T12:00:00.000+00:00"}
    read = store.get("arn:alarm:payments")
    assert (read.incident_key, read.status, read.opened_by, read.routed) == ("arn:alarm:payments", "open", "d1", False)
    assert store.open_incidents(["arn:alarm:payments"]) == [OpenIncident(
        key="arn:alarm:payments", incident_id="INC-1", service="payments-api",
        opened_at=datetime(2026, 11, 29, 12, tzinfo=timezone.utc), source="aws.cloudwatch")]


def test_resolved_old_and_group_rows_are_not_read_as_open_incidents(store):
    store.claim("k-open", "d1", incident_id="INC-1", source="s", service="orders-db",
                reported_at="2026-11-29T12:00:00.000+00:00")
    store.claim("k-resolved", "d2", incident_id="INC-2", source="s", service="payments-api",
                reported_at="2026-11-29T12:00:00.000+00:00")
    store.resolve("k-resolved", "d3", "alarm OK")
    store.claim("k-old", "d4", incident_id="INC-3", source="s")  # a row as claimed before the service was kept
    store.join_group("group#rule#abc", "k-open", at="2026-11-29T12:00:00.000+00:00",
                     until="2026-11-29T12:30:00.000+00:00", incident_id="INC-1", severity="sev2")
    keys = ["k-open", "k-resolved", "k-old", "group#rule#abc"]
    assert [i.incident_id for i in store.open_incidents(keys)] == ["INC-1"]


def test_the_index_readers_read_every_page(store):
    for n in range(30):
        store.claim(f"k-{n}", f"d-{n}", incident_id=f"INC-{n}", source="s", service=f"svc-{n}",
                    reported_at="2026-11-29T12:00:00.000+00:00")
        store.held(f"k-{n}", f"d-{n}", "in a window", held_until=WINDOW_END)
    original = store.client.query
    pages = []

    def small_pages(**kwargs):
        pages.append(kwargs.get("ExclusiveStartKey"))
        return original(**{**kwargs, "Limit": 2})

    store.client.query = small_pages
    assert sorted(row.incident_id for row in store.expired_holds(AFTER)) == sorted(f"INC-{n}" for n in range(30))
    assert any(start is not None for start in pages)  # a shard read on past its first page


def test_the_open_incidents_spread_over_the_shards_and_every_read_counts_them_all(store):
    """Each open row's mark is its key's shard; a read queries every shard and the value of before
    sharding, and counts as many open incidents as a single unsharded partition held."""
    keys = [f"arn:alarm:svc-{n}" for n in range(60)]
    for n, key in enumerate(keys):
        store.claim(key, f"d-{n}", incident_id=f"INC-{n}", source="s", service=f"svc-{n}",
                    reported_at="2026-11-29T12:00:00.000+00:00")
        store.held(key, f"d-{n}", "in a window", held_until=WINDOW_END)
    # Two rows as a stack kept them before sharding: every open row under the one value OPEN.
    for key in ("arn:alarm:legacy-a", "arn:alarm:legacy-b"):
        store.client.put_item(TableName=TABLE, Item={
            "incident_key": {"S": key}, "status": {"S": "open"}, OPEN_MARK: {"S": OPEN}, "opened_by": {"S": "d-0"},
            "deliveries": {"SS": ["d-0"]}, "routed": {"BOOL": False}, "updates": {"N": "0"}, "incident_id": {"S": key},
            "source": {"S": "s"}, "service": {"S": "svc-legacy"}, "reported_at": {"S": "2026-11-29T11:00:00.000+00:00"},
            "held_until": {"S": WINDOW_END}})
    per_mark = {mark: store.client.query(TableName=TABLE, IndexName=OPEN_INDEX, KeyConditionExpression="#m = :m",
                                         ExpressionAttributeNames={"#m": OPEN_MARK},
                                         ExpressionAttributeValues={":m": {"S": mark}}, Select="COUNT")["Count"]
                for mark in OPEN_MARKS}
    assert sum(1 for count in per_mark.values() if count) > 2  # the writes landed on many index partitions
    assert per_mark[OPEN] == 2 and sum(per_mark.values()) == len(keys) + 2
    assert all(store._item(key)[OPEN_MARK] == {"S": open_mark(key)} for key in keys)

    asked = []
    original = store.client.query
    store.client.query = lambda **kwargs: asked.append(kwargs["ExpressionAttributeValues"][":open"]["S"]) or original(**kwargs)
    found = [row.incident_key for row in store.expired_holds(AFTER)]
    assert sorted(asked) == sorted(OPEN_MARKS)  # one Query per shard, and the value of before
    assert found == sorted([*keys, "arn:alarm:legacy-a", "arn:alarm:legacy-b"])  # by key, each once
