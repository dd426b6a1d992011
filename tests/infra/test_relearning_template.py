"""template.yaml's relearning and head-store resources, read as the local stack reads them: the
alarms watch the metrics the code emits, the schedules start the workflow for the shipped
policies, the dashboard is valid JSON, and relearning is off without its image."""

from __future__ import annotations

import json
import re

from decision_router.domain.policies import POLICY_DIR, load_policy
from decision_router.intake.live_heads import HEAD_LOAD_FAILED
from local.cloudformation import Stack
from local.relearning import LOCAL_PARAMETERS

EMITTED = {HEAD_LOAD_FAILED, "CorrectionsOfAutomaticRoutes", "RelearningRefusalsInARow", "ReviewerAgreement",
           "LabelsSinceRelearning", "RelearningPromoted", "RelearningRefused", "QuestionAutoRouted",
           "QuestionSentToReview"}
QUESTIONS = {(p.stem, q.id) for p in POLICY_DIR.glob("*.json") for q in load_policy(p.stem).questions}


def test_relearning_needs_its_image_and_the_head_store_is_always_there():
    off = Stack.load()
    assert "RelearningStateMachine" not in off.resources and "HeadBucket" in off.resources
    on = Stack.load(parameters=LOCAL_PARAMETERS)
    assert {"RelearningStateMachine", "RelearningFunction", "RelearningQueue"} <= set(on.resources)
    assert on.properties("HeadBucket")["VersioningConfiguration"] == {"Status": "Enabled"}
    queue = on.resolve(on.properties("RelearningQueue"))
    assert queue["RedrivePolicy"]["maxReceiveCount"] == 1 and queue["VisibilityTimeout"] >= 6 * 900


def test_the_alarms_watch_every_question_with_the_dimensions_the_code_emits():
    stack = Stack.load(parameters=LOCAL_PARAMETERS)
    for alarm in ("HeadLoadFailedAlarm", "CorrectionsAlarm", "RelearningRefusalsAlarm"):
        stats = [m["MetricStat"]["Metric"] for m in stack.properties(alarm)["Metrics"] if "MetricStat" in m]
        assert {m["MetricName"] for m in stats} <= EMITTED
        assert {(d[0]["Value"], d[1]["Value"]) for d in (m["Dimensions"] for m in stats)} == QUESTIONS
        assert all([d["Name"] for d in m["Dimensions"]] == ["policy", "question"] for m in stats)


def test_the_schedules_start_the_workflow_for_each_shipped_policy_and_the_dashboard_is_json():
    stack = Stack.load(parameters=LOCAL_PARAMETERS)
    schedules = [stack.resolve(stack.properties(s)) for s in stack.of_type("AWS::Scheduler::Schedule")]
    inputs = sorted((json.loads(s["Target"]["Input"])["policy"], json.loads(s["Target"]["Input"])["trigger"])
                    for s in schedules)
    assert inputs == sorted((p, t) for p in {p for p, _ in QUESTIONS} for t in ("labels", "schedule"))
    body = json.loads(stack.resolve(stack.properties("LearningDashboard")["DashboardBody"]))
    names = {m[1] for w in body["widgets"] for m in w["properties"]["metrics"] if isinstance(m[0], str)}
    assert names <= EMITTED and "${" not in json.dumps(body)
    assert re.fullmatch(r"[\w-]+-learning", stack.resolve(stack.properties("LearningDashboard")["DashboardName"]))
