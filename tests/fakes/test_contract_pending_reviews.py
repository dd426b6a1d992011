"""The pending-review index's fake (tests/fakes/console.py `FakePendingReviews`) held to its adapter
(`adapters.pending_reviews.PendingReviewTable`) over moto, on template.yaml's own table created
alone; and the rows the index writer builds (review/pending.py) and puts (functions/review_index_writer)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters import pending_reviews as pending_reviews_adapter
from decision_router.adapters.pending_reviews import LANE_INDEX, MARGIN_SECONDS, PendingReviewTable
from decision_router.config import Settings
from decision_router.domain.policies import load_policy
from decision_router.domain.ports.review import PendingReviewRow
from decision_router.review.completion import InvalidReview, PendingReview
from decision_router.review.console import PendingSummary
from decision_router.review.pending import NO_TARGET, as_pending, moved_on, pending_row, policy_lanes
from local.cloudformation import Stack
from review_index_writer.app import Wiring, index_review
from tests.fakes.console import FakePendingReviews
from tests.functions.conftest import ALL_TARGETS, unsure_ticket

DESTINATIONS = {target: f"https://sqs.us-east-1.amazonaws.com/123456789012/{target}" for target in ALL_TARGETS}
AWS = boto3.Session(region_name="us-east-1")
REQUESTED = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
TIMEOUT = 3600


def review(name: str, *, token: str | None = None, minutes_later: int = 0, tier: str = "pro") -> PendingReview:
    record = unsure_ticket(f"T-{name}", destinations=DESTINATIONS)
    record = record.model_copy(update={"item": {**record.item, "customer": {"id": "C-9", "tier": tier}}})
    requested = (REQUESTED + timedelta(minutes=minutes_later)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return PendingReview(task_token=token or f"token-{name}", execution_name=name, requested_at=requested, record=record)


def row(name: str, **given: Any) -> PendingReviewRow:
    return pending_row(review(name, **given), load_policy("support-ticket"), review_timeout_seconds=TIMEOUT)


@pytest.fixture(params=["fake", "moto"])
def index(request) -> Iterator[Any]:
    if request.param == "fake":
        yield FakePendingReviews()
        return
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})
        stack.create(client=AWS.client, only=["PendingReviewsTable"])
        yield PendingReviewTable(stack.ref("PendingReviewsTable"), AWS.client("dynamodb"), review_timeout_seconds=TIMEOUT)


def test_a_review_has_one_row_read_back_by_its_execution_name(index):
    first = row("ex-1")
    assert index.put(first) is True
    assert index.put(first.model_copy(update={"task_token": "a-retry's-token"})) is False  # the first row stays
    assert index.get("ex-1") == first
    assert index.get("ex-unknown") is None


def test_a_listing_reads_each_lane_in_due_order_at_most_limit_per_shard_and_merges_them(index):
    tickets = load_policy("support-ticket")
    rows = [row(f"ex-{n}", minutes_later=n, tier=tier) for n, tier in enumerate(["pro", "enterprise", "pro", "free", "pro"])]
    for one in reversed(rows):
        index.put(one)
    lanes = policy_lanes(tickets)
    listed = index.listing(lanes, limit=100)
    assert [r.execution_name for r in listed] == [r.execution_name for r in sorted(rows, key=lambda r: r.due_at)]
    assert {r.summary for r in listed} == {r.summary for r in rows}  # what the console lists, no token
    assert index.listing(["support-ticket#240m"], limit=100)[0].execution_name == "ex-0"  # only the lanes asked
    assert index.listing(["incident#15m"], limit=100) == []
    # A bounded read: no more than `limit` of any shard of any lane, however many wait.
    per_shard = index.listing(lanes, limit=1)
    assert 0 < len(per_shard) <= len(lanes) * pending_reviews_adapter.LANE_SHARDS


def test_a_row_is_removed_only_with_its_token_and_only_once(index):
    index.put(row("ex-1"))
    assert index.remove("ex-1", "another-token") is False and index.get("ex-1") is not None
    assert index.remove("ex-1", "token-ex-1") is True
    assert index.get("ex-1") is None and index.listing(policy_lanes(load_policy("support-ticket")), 10) == []
    assert index.remove("ex-1", "token-ex-1") is False  # a second answer finds no row
    index.put(row("ex-2"))
    assert index.remove("ex-2") is True and index.remove("ex-2") is False  # the workflow's delete: any token


def test_the_table_keeps_the_row_past_the_review_timeout_and_lists_only_the_listings_columns():
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}).create(
            client=AWS.client, only=["PendingReviewsTable"])
        dynamodb, table = AWS.client("dynamodb"), stack.ref("PendingReviewsTable")
        PendingReviewTable(table, dynamodb, review_timeout_seconds=TIMEOUT).put(row("ex-1"))
        stored = dynamodb.get_item(TableName=table, Key={"execution_name": {"S": "ex-1"}})["Item"]
        assert int(stored["expires_at"]["N"]) == int(REQUESTED.timestamp()) + TIMEOUT + MARGIN_SECONDS
        (listed,) = dynamodb.query(TableName=table, IndexName=LANE_INDEX, KeyConditionExpression="lane = :l",
                                   ExpressionAttributeValues={":l": stored["lane"]})["Items"]
        assert set(listed) == {"execution_name", "lane", "due_at", "requested_at", "summary"}


# ------------------------------------------------------------------------------ the rows the writer builds
def test_a_row_is_due_at_its_sla_target_in_the_lane_of_its_policy_and_target():
    policy = load_policy("support-ticket")
    asked = review("ex-pro", tier="pro")  # one record: it carries the moment it was decided
    pro = pending_row(asked, policy, review_timeout_seconds=TIMEOUT)
    enterprise = row("ex-ent", tier="enterprise")
    assert (pro.lane, pro.due_at) == ("support-ticket#240m", "2026-11-29T16:00:00.000Z")
    assert (enterprise.lane, enterprise.due_at) == ("support-ticket#60m", "2026-11-29T13:00:00.000Z")
    assert {pro.lane, enterprise.lane} <= set(policy_lanes(policy))
    assert as_pending(pro) == asked
    later = moved_on(PendingSummary.model_validate_json(pro.summary), policy, REQUESTED + timedelta(minutes=200))
    assert later.age_seconds == 200 * 60 and later.sla is not None and later.sla.risk == "at_risk"


def test_a_policy_without_a_review_sla_is_due_when_the_review_times_out():
    policy = load_policy("support-ticket").model_copy(update={"review_sla": None})
    built = pending_row(review("ex-1"), policy, review_timeout_seconds=TIMEOUT)
    assert (built.lane, built.due_at) == (f"support-ticket#{NO_TARGET}", "2026-11-29T13:00:00.000Z")
    assert policy_lanes(policy) == [f"support-ticket#{NO_TARGET}"]


def test_the_writer_puts_the_requests_row_once_and_names_a_bad_field():
    index = FakePendingReviews()
    wiring = Wiring(Settings.from_env({"PENDING_REVIEWS_TABLE_NAME": "t", "REVIEW_TIMEOUT_SECONDS": str(TIMEOUT)}),
                    index=index)
    request = review("ex-1").model_dump(mode="json")
    assert index_review(request, wiring)["written"] is True
    assert index_review(request, wiring)["written"] is False  # the state's retry: the row stays one
    assert index.get("ex-1") == row("ex-1")
    with pytest.raises(InvalidReview, match="task_token"):
        index_review({**request, "task_token": ""}, wiring)
