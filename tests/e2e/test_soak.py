"""The soak, short: `python -m local.soak` (what `make soak` runs) with a few dozen seeded inputs
through the real decision container (embedded model, behind the fault proxy), the moto server and
the real handlers and workflow, every fault injected at its default rate. It must exit 0 (nothing
lost, nothing delivered twice, every dead letter with its reason), every fault must really have
happened, and its last line must add up."""

from __future__ import annotations

import ast
import random
import re
import subprocess
import sys

import pytest

from local.cloudformation import REPO_ROOT
from local.demo import classify
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


@pytest.mark.model
@pytest.mark.server
@pytest.mark.stack
def test_short_soak_loses_nothing(tmp_path):
    n = 40
    run = subprocess.run([sys.executable, "-m", "local.soak", "--n", str(n), "--seed", "11", "--faults", "0.1",
                          "--log-dir", str(tmp_path), "--report", str(tmp_path / "report.jsonl")],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=400)
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
    assert any("StartExecution ThrottlingException" in k for k in aws) and any("dynamodb" in k for k in aws), aws
    assert len((tmp_path / "report.jsonl").read_text().splitlines()) == n
