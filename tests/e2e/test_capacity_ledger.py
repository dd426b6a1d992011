"""What one item costs in AWS calls must not grow with the state the stack holds: every path
(local.capacity) run for one item on the local stack seeded small (10 pending reviews, 10 open
incidents, 100 audit rows, 10 shadowed items) and large (1,000, 5,000, 100,000, 1,000), its calls
counted by service and operation (local.ledger), held equal at both sizes.

The paths whose calls grow today are marked xfail(strict) with the call that grows: once the
code stops it, the case passes, strict xfail turns it red, and the mark must go. Every other
path must be flat. Both worlds are built once for the module (about 6 minutes on 2 cores: the
large one starts a thousand real executions that wait for review)."""

from __future__ import annotations

from typing import Iterator

import pytest

from bench.capacity import Measured, measure
from decision_router.adapters.pending_reviews import LANE_SHARDS
from local.capacity import LARGE, PATHS, SMALL
from review_console.reviews import LISTED_PER_LANE

pytestmark = [pytest.mark.stack, pytest.mark.server, pytest.mark.timeout(3600)]

#: The calls that grow with the state today, by path (none: every path is flat).
GROWS: dict[str, str] = {}


@pytest.fixture(scope="module")
def measured() -> Iterator[Measured]:
    yield measure({"small": SMALL, "large": LARGE}, progress=lambda message: print(message, flush=True))


def flat(path: str):
    if path in GROWS:
        return pytest.param(path, marks=pytest.mark.xfail(strict=True, reason=GROWS[path]))
    return path


@pytest.mark.parametrize("path", [flat(p) for p in PATHS])
def test_calls_per_item_do_not_grow_with_the_state(measured, path):
    small, large = measured.paths["small"][path], measured.paths["large"][path]
    assert large.operations() == small.operations(), f"{path}: {measured.growing().get(path)}"


def test_each_path_took_the_way_it_names(measured):
    for size in ("small", "large"):
        paths = measured.paths[size]
        assert paths["automatic"].outcome == "delivered by the intake, no execution (auto_routed)"
        assert paths["automatic"].count("stepfunctions") == 0 and paths["automatic"].transitions == 0
        assert "succeeded (reviewed)" in paths["review"].outcome
        assert paths["page"].count("sns", "Publish") == 1  # the escalation reached the on-call topic
        assert paths["page"].count("lambda", "Invoke", caller="IncidentIntakeFunction") == 2  # reported, then paged
        assert paths["correction"].count("stepfunctions", "StartExecution") == 1  # the correction (the route was direct)
        assert paths["incident resolved"].count("cloudwatch", "DescribeAlarms") == 1  # the OK confirmed
        assert paths["review"].transitions > 0
        for path, record in paths.items():
            assert record.total() > 0, f"{size} {path}: no call counted"
    # the listing shows what waits, bounded at the large size: the first of each shard of the one
    # lane the seeded reviews are in (one policy, one SLA target)
    assert measured.paths["small"]["console listing"].outcome.startswith(f"{SMALL.pending_reviews - 1} ")
    assert measured.paths["large"]["console listing"].outcome.startswith(f"{LISTED_PER_LANE * LANE_SHARDS} ")


def test_the_ledger_hears_every_dynamodb_request_moto_answered(measured):
    """The client side (the functions' hooks, the workflow's) against the server side (moto's
    DynamoDB): a request of the item the ledger did not hear would make them differ."""
    for size, paths in measured.paths.items():
        for path, record in paths.items():
            assert record.count("dynamodb") == record.dynamodb_requests, f"{size} {path}"
