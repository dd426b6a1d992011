"""`make demo POLICY=events/many-options/policy.json ITEMS=events/many-options/tickets.jsonl`: a
question of 150 intents (CLINC150, fitted by make fit-history on the embedded model) through the
whole local pipeline: the ticket intake applies the sample policy, the endpoint is asked its
signals decision, the head answers, the workflow delivers to the answer's queue or holds it for
review, and the review function answers a held one (it resolves the record's policy by name, as
deployed, from the policies folder the demo installs the sample into)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from decision_router.domain.policies import load_policy
from local.cloudformation import REPO_ROOT

from .test_demo_pipeline import DemoProcess, demo_env

SAMPLE = REPO_ROOT / "events/many-options"


def test_the_sample_policy_routes_to_150_intents_through_the_stacks_queues():
    policy = load_policy(SAMPLE / "policy.json", known_targets=["billing", "account-access", "technical-support",
                                                                "product-help", "sales"])
    question = policy.questions[0]
    assert len(question.options) == 150 and question.many_options and question.learned_head.reads_hidden_state
    report = json.loads((SAMPLE / "report.json").read_text())
    assert (report["n_train"], report["options"]) == (900, 150)
    assert len((SAMPLE / "tickets.jsonl").read_text().splitlines()) == 8


@pytest.mark.model
@pytest.mark.stack
@pytest.mark.server  # `python -m local.demo`, with its container and moto server
def test_a_150_option_question_routes_through_the_whole_pipeline_in_the_demo(tmp_path):
    report_file = tmp_path / "report.jsonl"
    demo = DemoProcess("--policy", str(SAMPLE / "policy.json"), "--items", str(SAMPLE / "tickets.jsonl"),
                       "--report", str(report_file), "--log-dir", str(tmp_path / "logs"))
    try:
        assert demo.finish() == 0, demo.output
    finally:
        demo.kill()
    assert "the ticket intake applies events/many-options/policy.json" in demo.output
    policy = load_policy(SAMPLE / "policy.json")
    question = policy.questions[0]
    lines = [json.loads(line) for line in report_file.read_text().splitlines()]
    assert [line["item_id"] for line in lines] == [f"CL-{i:03d}" for i in range(1, 9)]
    outcomes = {line["outcome"] for line in lines}
    # Both outcomes, with a wide margin: the head's confidence (min_confidence 0.94) is 0.99 or
    # more for CL-002, CL-004 and CL-005 and 0.67 or less for CL-006, CL-007 and CL-008 (measured
    # alone and batched together; the batch moved none by more than 0.03). CL-001 and CL-003 sit
    # near the threshold (0.953, 0.950), which is why neither is named here: each line is held
    # to its own recorded confidence and threshold instead.
    assert outcomes <= {"routed", "review"} and "routed" in outcomes and "review" in outcomes, lines
    for line in lines:
        decision = line["decisions"][question.id]
        assert decision["readout"] == "head" and decision["answer"] in question.option_ids
        assert decision["head_version"] == question.learned_head.version
        checks = decision["why"]["checks"]
        assert checks and all(c["passed"] == (c["value"] >= c["threshold"]) for c in checks), checks
        assert decision["auto"] == all(c["passed"] for c in checks) == (line["outcome"] == "routed"), line
        if line["outcome"] == "routed":  # delivered to the queue of the head's answer
            assert decision["auto"] and line["target"] == policy.target(decision["answer"]), line
    assert "through the review function (label=" in demo.output and "wrote audit 'reviewed'" in demo.output


@pytest.mark.server  # runs a script or a command as a process
def test_a_policy_whose_targets_the_stack_lacks_is_refused_before_anything_starts(tmp_path):
    raw = json.loads((SAMPLE / "policy.json").read_text())
    raw["questions"][0]["options"][7]["target"] = "nowhere"
    raw["questions"][0]["head"]["file"] = str(SAMPLE / raw["questions"][0]["head"]["file"])
    (tmp_path / "policy.json").write_text(json.dumps(raw))
    result = subprocess.run([sys.executable, "-m", "local.demo", "--policy", str(tmp_path / "policy.json"),
                             "--items", str(SAMPLE / "tickets.jsonl")], cwd=REPO_ROOT, env=demo_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "unknown target(s) nowhere" in result.stderr and "decision container starting" not in result.stdout
