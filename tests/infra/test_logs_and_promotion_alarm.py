"""template.yaml keeps no log forever and lets no promotion pass unseen: every function has its own
log group with LogRetentionDays, both workflows log (without execution data) to their own
group, and a promotion of any question notifies the alarm topic, on the metric the relearning
job emits."""

from __future__ import annotations

import pytest

from decision_router.domain.policies import POLICY_DIR, load_policy
from local.cloudformation import FUNCTION_TYPES, Stack
from local.relearning import LOCAL_PARAMETERS

#: What CloudWatch Logs accepts as RetentionInDays.
CLOUDWATCH_RETENTIONS = [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557,
                         2922, 3288, 3653]
QUESTIONS = {(p.stem, q.id) for p in POLICY_DIR.glob("*.json") for q in load_policy(p.stem).questions}


@pytest.fixture(scope="module", params=[{}, LOCAL_PARAMETERS], ids=["without-relearning", "with-relearning"])
def stack(request) -> Stack:
    return Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", **request.param})


def log_groups(stack: Stack) -> dict[str, dict]:
    return {g: stack.resolve(stack.properties(g)) for g in stack.of_type("AWS::Logs::LogGroup")}


def test_the_retention_parameter_offers_what_cloudwatch_accepts_and_defaults_to_90_days():
    spec = Stack.load().template["Parameters"]["LogRetentionDays"]
    assert spec["Type"] == "Number" and spec["Default"] == 90
    assert [int(v) for v in spec["AllowedValues"]] == CLOUDWATCH_RETENTIONS


def test_every_function_has_its_log_group_kept_log_retention_days(stack):
    functions = stack.of_type(*FUNCTION_TYPES)
    assert len(functions) >= 5
    names = {props["LogGroupName"]: props for props in log_groups(stack).values()}
    for function in functions:
        group = names.get(f"/aws/lambda/{stack.ref(function)}")
        assert group is not None, f"{function} has no log group: Lambda would make one that keeps logs forever"


def test_every_log_group_follows_the_parameter():
    stack = Stack.load(parameters={**LOCAL_PARAMETERS, "LogRetentionDays": "14"})
    assert log_groups(stack) and all(props["RetentionInDays"] == "14" for props in log_groups(stack).values())


def test_every_state_machine_logs_without_execution_data_to_its_own_group(stack):
    machines = stack.of_type("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
    assert ("RelearningStateMachine" in machines) == ("RelearningFunction" in stack.resources)
    destinations = []
    for machine in machines:
        props = stack.resolve(stack.properties(machine))
        logging = props.get("Logging")
        assert logging, f"{machine} does not log"
        assert logging["Level"] in ("ALL", "ERROR") and logging["IncludeExecutionData"] is False, machine
        (destination,) = logging["Destinations"]
        destinations.append(destination["CloudWatchLogsLogGroup"]["LogGroupArn"])
        statements = [s for p in props["Policies"] if isinstance(p, dict) and "Statement" in p for s in p["Statement"]]
        assert any("logs:CreateLogDelivery" in s["Action"] for s in statements), f"{machine} may not deliver logs"
    assert len(set(destinations)) == len(machines)
    assert set(destinations) <= {stack.get_att(g, "Arn") for g in stack.of_type("AWS::Logs::LogGroup")}


def test_a_promotion_of_any_question_notifies_the_alarm_topic():
    stack = Stack.load(parameters={**LOCAL_PARAMETERS, "OnCallEmail": "oncall@example.com"})
    alarm = stack.resolve(stack.properties("RelearningPromotedAlarm"))
    stats = [m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m]
    # the metric and dimensions relearning/promotion.py emits on a promotion (question_metric: policy, question)
    assert {s["Metric"]["MetricName"] for s in stats} == {"RelearningPromoted"}
    assert {s["Metric"]["Namespace"] for s in stats} == {"DecisionRouter"}
    assert all([d["Name"] for d in s["Metric"]["Dimensions"]] == ["policy", "question"] for s in stats)
    assert {tuple(d["Value"] for d in s["Metric"]["Dimensions"]) for s in stats} == QUESTIONS
    assert all(s["Stat"] == "Sum" for s in stats)
    (total,) = [m for m in alarm["Metrics"] if m.get("ReturnData", True)]
    assert all(f"FILL({s['Id']}, 0)" in total["Expression"] for s in alarm["Metrics"] if "MetricStat" in s)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == [stack.ref("AlarmTopic")]
    assert "RelearningPromotedAlarm" not in Stack.load().resources  # no relearning, no promotion to tell

