"""The soak, short: `python -m local.soak` (what `make soak` runs) with 300 seeded inputs through
the real decision container (embedded model, behind the fault proxy, restarted mid-run), the moto
server and the real handlers and workflow in several execution environments at once, every fault
injected at its default rate. It must exit 0 (nothing lost, nothing delivered twice under two item
keys, every dead letter with its reason), every fault must really have happened, and its last line
must add up."""

from __future__ import annotations

import ast
import random
import re
import subprocess
import sys

import pytest

from local.cloudformation import REPO_ROOT
from local.faults import AwsFaults, Draws
from local.items import classify
from local.soak import build_inputs

LAST_LINE = re.compile(r"soak: (\d+) inputs; routed (\d+), review (\d+), resolved (\d+), ignored (\d+), "
                       r"dead-lettered (\d+); lost (\d+); duplicated (\d+); ([\d.]+) items/s")


def test_inputs_are_seeded_and_hold_every_kind():
    first, again, other = (build_inputs(300, random.Random(seed)) for seed in (7, 7, 8))
    assert first == again and first != other
    items = [classify(f"soak:{n}", text, n) for n, text in enumerate(first, start=1)]
    vias = {item.via for item in items}
    assert {"own", "event", "sns", "webhook:zendesk", "webhook:jira"} <= vias
    assert {"ticket", "incident"} <= {item.kind for item in items}
    assert any(item.rejected for item in items), "a line that is not JSON"
    assert len(set(first)) < len(first), "the same message or event id twice"
    assert any('"SOAK-BAD-' in text for text in first), "tickets and incidents that fail validation"


def test_fault_draws_follow_the_call_not_the_order_of_calls():
    calls = [("endpoint", f"body-{i % 7}") for i in range(40)]  # repeats: a call's second attempt draws anew
    forward, backward = Draws(7), Draws(7)
    drawn = [forward.uniform(*call) for call in calls]
    # Another interleaving of the same calls: each call's n-th attempt still draws the same number.
    by_call: dict[tuple[str, str], list[float]] = {}
    for call in reversed(calls):
        by_call.setdefault(call, []).append(backward.uniform(*call))
    again = {call: iter(values) for call, values in by_call.items()}
    assert drawn == [next(again[call]) for call in calls]
    assert drawn != [Draws(8).uniform(*call) for call in calls]


@pytest.mark.stack
@pytest.mark.server  # the moto server: botocore's HTTP send is where the throttle is injected
def test_an_injected_throttle_is_retried_by_the_sdk_as_in_aws():
    import boto3
    from botocore.config import Config

    from local.services import MotoServer

    with MotoServer() as moto:
        dynamodb = boto3.client("dynamodb", endpoint_url=moto.url, region_name="us-east-1",
                                aws_access_key_id="testing", aws_secret_access_key="testing",
                                config=Config(retries={"mode": "standard", "max_attempts": 10}))
        dynamodb.create_table(TableName="idempotency", BillingMode="PAY_PER_REQUEST",
                              KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                              AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}])
        faults = AwsFaults(0.3, seed=3, tables={"idempotency": "idempotency"}, outage_share=0)
        with faults.installed():
            for i in range(10):
                dynamodb.put_item(TableName="idempotency", Item={"id": {"S": f"key-{i}"}})
        assert dynamodb.scan(TableName="idempotency")["Count"] == 10  # every put landed after the SDK's retries
        throttled = sum(count for kind, count in faults.counts.items() if "ProvisionedThroughputExceeded" in kind)
        assert throttled >= 2, faults.counts


@pytest.mark.model
@pytest.mark.server
@pytest.mark.stack
def test_short_soak_loses_nothing(tmp_path):
    n = 300
    run = subprocess.run([sys.executable, "-m", "local.soak", "--n", str(n), "--seed", "11", "--faults", "0.1",
                          "--log-dir", str(tmp_path), "--report", str(tmp_path / "report.jsonl")],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    lines = run.stdout.strip().splitlines()
    found = LAST_LINE.fullmatch(lines[-1])
    assert found, lines[-1]
    inputs, routed, review, resolved, ignored, dead, lost, duplicated = map(int, found.groups()[:8])
    assert inputs == n and routed + review + resolved + ignored + dead == n
    assert lost == 0 and duplicated == 0
    assert dead > 0, "the invalid inputs are dead-lettered, with their reasons"
    endpoint = ast.literal_eval(next(x for x in lines if x.startswith("endpoint calls: ")).split(": ", 1)[1])
    assert {"busy", "timeout", "slow", "real"} <= set(endpoint), endpoint
    aws = ast.literal_eval(next(x for x in lines if x.startswith("AWS faults injected: ")).split(": ", 1)[1])
    assert any("StartExecution ThrottlingException" in k for k in aws), aws
    assert any("idempotency" in k for k in aws) and any("audit" in k for k in aws), aws
    assert "container down" in endpoint and any(x.startswith("container restarted once") for x in lines), endpoint
    assert len((tmp_path / "report.jsonl").read_text().splitlines()) == n
    # the run's reviews worked at half pace: by SLA no more breaches than oldest first, and no P1
    sla = next(x for x in lines if x.startswith("review sla: "))
    assert "P1 breached by SLA 0" in sla and not any(x.startswith("PROBLEM") for x in lines), sla
