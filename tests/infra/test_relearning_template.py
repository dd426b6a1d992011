"""template.yaml's relearning and head-store resources, read as the local stack reads them: the
alarms watch the metrics the code emits, the schedules start the workflow for the shipped
policies, the dashboard is valid JSON, and relearning is off without its image."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from decision_router.domain.policies import POLICY_DIR, load_policy
from decision_router.intake.live_heads import HEAD_LOAD_FAILED
from decision_router.review.console import SLA_METRICS
from decision_router.review.precision_checks import BELOW_TARGET
from local.cloudformation import Stack
from local.relearning import LOCAL_PARAMETERS

EMITTED = {HEAD_LOAD_FAILED, "CorrectionsOfAutomaticRoutes", "RelearningRefusalsInARow", "ReviewerAgreement",
           "LabelsSinceRelearning", "LabelsAskedOfEndpoint", "RelearningPromoted", "RelearningRefused", "QuestionAutoRouted",
           "QuestionSentToReview", "ShadowItems", "ShadowAgreed", "ShadowPrecision", "ServicePrecision",
           BELOW_TARGET, "LivePrecision", "LivePrecisionLowerBound", *SLA_METRICS.values()}
REPO = Path(__file__).resolve().parents[2]
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
    for alarm in ("HeadLoadFailedAlarm", "CorrectionsAlarm", "RelearningRefusalsAlarm", "PrecisionBelowTargetAlarm"):
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
    # the labels a run asked of the endpoint again (relearning/collecting.py), for every shipped policy
    asked = {m[3] for w in body["widgets"] for m in w["properties"]["metrics"] if m[:2] == ["DecisionRouter", "LabelsAskedOfEndpoint"]}
    assert asked == {p for p, _ in QUESTIONS}
    assert re.fullmatch(r"[\w-]+-learning", stack.resolve(stack.properties("LearningDashboard")["DashboardName"]))


def test_only_the_relearning_workflow_may_put_a_step_on_the_relearning_queue():
    """A step message names the run whose candidates the function promotes: nobody else may send one."""
    stack = Stack.load(parameters=LOCAL_PARAMETERS)
    policy = stack.resolve(stack.properties("RelearningQueuePolicy"))
    assert policy["Queues"] == [stack.ref("RelearningQueue")]
    (deny,) = policy["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*" and deny["Action"] == "sqs:SendMessage"
    assert deny["Resource"] == stack.get_att("RelearningQueue", "Arn")
    assert deny["Condition"] == {"ArnNotEquals": {"aws:PrincipalArn": stack.get_att("RelearningStateMachineRole", "Arn")},
                                 # binds principals that are no AWS service (test_resource_policies.py)
                                 "Null": {"aws:PrincipalArn": "false"},
                                 "BoolIfExists": {"aws:PrincipalIsAWSService": "false"}}
    # the workflow's own role is the one that sends (SAM's policy template on the state machine)
    sends = stack.properties("RelearningStateMachine")["Policies"]
    assert {"SQSSendMessagePolicy": {"QueueName": stack.get_att("RelearningQueue", "QueueName")}} in \
        [stack.resolve(p) for p in sends]
    assert "RelearningQueuePolicy" not in Stack.load().resources


def test_the_function_checks_a_token_before_a_step_and_announces_every_promotion():
    stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", **LOCAL_PARAMETERS})
    statements = stack.resolve(stack.properties("RelearningFunctionRole"))["Policies"][0]["PolicyDocument"]["Statement"]
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {"states:SendTaskHeartbeat", "states:SendTaskSuccess", "states:SendTaskFailure", "sns:Publish"} <= actions
    (publish,) = [s for s in statements if s["Action"] == "sns:Publish"]
    assert publish["Resource"] == stack.ref("RelearningPromotionTopic")
    env = stack.function_environment("RelearningFunction")
    assert env["RELEARNING_TOPIC_ARN"] == stack.ref("RelearningPromotionTopic")
    assert env["RELEARNING_MAX_REVIEWER_SHARE"] == "0.5"
    assert (env["RELEARNING_SHADOW_ITEMS"], env["RELEARNING_SHADOW_CHECK_SECONDS"]) == ("200", "900")
    assert stack.resolve(stack.template["Outputs"]["RelearningPromotionTopicArn"]["Value"]) == \
        stack.ref("RelearningPromotionTopic")


def test_a_person_approves_each_promotion_unless_the_stack_says_auto():
    """No relearned head decides before a person has read its verdict, unless RelearningApproval=auto
    is given (the one switch, docs/learning/relearning.md); make learn passes it (local/learn.py)."""
    spec = Stack.load().template["Parameters"]["RelearningApproval"]
    assert spec["Default"] == "manual" and spec["AllowedValues"] == ["auto", "manual"]
    stack = Stack.load(parameters=LOCAL_PARAMETERS)
    props = stack.resolve(stack.properties("RelearningStateMachine"))
    assert props["DefinitionSubstitutions"]["RelearningApproval"] == "manual"


@pytest.mark.parametrize("approval", ["auto", "manual"])
def test_manual_approval_waits_for_a_person_before_the_promote_step(approval):
    stack = Stack.load(parameters={**LOCAL_PARAMETERS, "RelearningApproval": approval})
    props = stack.resolve(stack.properties("RelearningStateMachine"))
    assert props["DefinitionSubstitutions"]["RelearningApproval"] == approval
    states = json.loads((REPO / props["DefinitionUri"]).read_text())["States"]
    # the gate's candidates serve in shadow first; only a shadow judged promotable reaches approval
    assert {"Variable": "$.fit.promotable", "BooleanEquals": True, "Next": "ShadowCandidates"} in \
        states["AnyCandidatePassed"]["Choices"]
    assert states["ShadowCandidates"]["Next"] == "WaitForShadowedItems"
    assert {"Variable": "$.shadow_judged.ready", "BooleanEquals": False, "Next": "WaitForShadowedItems"} in \
        states["ShadowJudged"]["Choices"]
    assert states["WaitForShadowedItems"]["Next"] == "JudgeShadow" and states["JudgeShadow"]["Next"] == "ShadowJudged"
    assert {"Variable": "$.shadow_judged.promotable", "BooleanEquals": True, "Next": "ApprovalMode"} in \
        states["ShadowJudged"]["Choices"] and states["EveryShadowRefused"]["Type"] == "Succeed"
    assert states["ApprovalMode"]["Result"] == "${RelearningApproval}"
    (manual,) = states["ApprovalNeeded"]["Choices"]
    assert manual == {"Variable": "$.approval", "StringEquals": "manual", "Next": "AnnounceApproval"}
    assert states["ApprovalNeeded"]["Default"] == "PromoteHeads"
    # The notice on the topic names the run, never its task token (any subscriber reads a topic);
    # the token waits on the approval queue, which only the relearning workflow may send to.
    notice = states["AnnounceApproval"]
    assert notice["Resource"] == "arn:aws:states:::sns:publish" and notice["Next"] == "AwaitApproval"
    assert notice["Parameters"]["TopicArn"] == "${RelearningTopicArn}"
    assert props["DefinitionSubstitutions"]["RelearningTopicArn"] == stack.ref("RelearningPromotionTopic")
    assert "$$.Task.Token" not in json.dumps(notice) and notice["Parameters"]["Message"]["run.$"] == "$$.Execution.Name"
    assert not any("Task.Token" in json.dumps(state) for state in states.values()
                   if "sns:publish" in state.get("Resource", ""))
    wait = states["AwaitApproval"]
    assert wait["Resource"] == "arn:aws:states:::sqs:sendMessage.waitForTaskToken" and wait["Next"] == "PromoteHeads"
    assert wait["Parameters"]["QueueUrl"] == "${ApprovalQueueUrl}"
    assert props["DefinitionSubstitutions"]["ApprovalQueueUrl"] == stack.ref("ApprovalQueue")
    assert wait["Parameters"]["MessageBody"]["task_token.$"] == "$$.Task.Token"
    assert {"States.Timeout", "RelearningNotApproved"} <= set(wait["Catch"][0]["ErrorEquals"])
    assert wait["Catch"][0]["Next"] == "NotApproved" and states["NotApproved"]["Type"] == "Succeed"
    # each step message names its execution (the run `fit` and `promote` act on)
    for name, state in states.items():
        if state.get("Resource") == "arn:aws:states:::sqs:sendMessage.waitForTaskToken":
            assert state["Parameters"]["MessageBody"]["execution.$"] == "$$.Execution.Name", name
