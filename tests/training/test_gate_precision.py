"""The gate's precision criterion (training/gate.py `_less_sure`) reads confidence bounds by the
fitter's own definition, never the point estimate; and the relearning job reports the question's
live precision (its sampled checks, read from the head history table in moto) beside each verdict."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters.head_store import HeadStore
from decision_router.adapters.precision_tally import PrecisionTally
from decision_router.domain.policies import load_policy
from decision_router.domain.precision_bound import precision_lower_bound
from local.cloudformation import Stack
from relearning.job import Relearning
from training import gate

PRIORITY = load_policy("incident").question("priority")  # max_auto_error 0.05: target 95 %


def scores(right: int, n: int) -> dict:
    wrong = n - right
    return {"auto_routed_error": wrong / n if n else 0.0,
            "auto_routed_lower_bound": precision_lower_bound(right, n) if n else None,
            "auto_routed_upper_bound": 1.0 - (precision_lower_bound(wrong, n) or 0.0) if n else None}


def test_a_candidate_shown_under_the_target_is_refused_though_few_labels_cannot_show_it_over():
    assert gate._less_sure(PRIORITY, scores(0, 0), scores(13, 13)) is None  # 13 of 13: cannot show 95 %, shows nothing worse
    assert gate._less_sure(PRIORITY, scores(0, 0), scores(12, 13)) is None  # 92 % on 13: a point estimate, not a showing
    refused = gate._less_sure(PRIORITY, scores(0, 0), scores(30, 40))
    assert refused.startswith("its automatic answers show under") and "under the target 95.0%" in refused
    assert gate._less_sure(PRIORITY, scores(0, 0), scores(0, 0)) is None  # routes nothing: promises nothing


def test_a_candidate_less_sure_than_the_head_in_service_is_refused():
    refused = gate._less_sure(PRIORITY, scores(100, 100), scores(19, 20))
    assert refused and "less than the head in service's" in refused and "wrong 5.0% of the time" in refused
    assert gate._less_sure(PRIORITY, scores(19, 20), scores(100, 100)) is None
    # past the target, the head in service's bound asks no more than the target
    assert gate._less_sure(PRIORITY, scores(2000, 2000), scores(300, 300)) is None


def test_the_relearning_job_reports_the_live_precision_beside_the_verdict():
    with mock_aws():
        stack = Stack.load().create(only=["HeadHistoryTable"])
        table = stack.ref("HeadHistoryTable")
        tally = PrecisionTally(table, client=boto3.client("dynamodb"))
        for n in range(60):
            tally.add("incident", "priority", "P3", checked=1, right=int(n != 0))
        tally.add("incident", "priority", "P1", checked=1, right=1)
        job = Relearning(HeadStore("bucket", "/heads", table), labels=None, endpoint=lambda probe: None)
        live = job.live_precision(load_policy("incident"), PRIORITY)
        assert (live["checked"], live["right"], live["target"]) == (61, 60, pytest.approx(0.95))
        assert live["lower_bound"] == pytest.approx(precision_lower_bound(60, 61)) and live["below_target"] is True
        assert live["summary"].startswith("60 of 61 checked automatic answers right")
        # per option only where the checks could show the target: P3's 60, not P1's one
        assert list(live["options"]) == ["P3"] and live["options"]["P3"]["right"] == 59
        gone = Relearning(HeadStore("bucket", "/heads", "no-such-table"), labels=None, endpoint=lambda probe: None)
        assert gone.live_precision(load_policy("incident"), PRIORITY)["unavailable"].startswith("ResourceNotFoundException")
