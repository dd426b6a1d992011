"""The review SLA on the stack: the console function's sweep runs on a schedule, the breach alarm
reads the very metric and dimension the sweep prints (review_console/sla.py, EMF), for every
shipped policy, and the dashboard shows waiting, at risk and past due for each. The sweep's
escalations page the on-call through the workflow's escalation rule, with the console function
granted its own source on the bus and its own marks in the idempotency table, nothing more."""

from __future__ import annotations

import json

from decision_router.adapters.escalations import KEY_PREFIX
from decision_router.domain.policies import POLICY_DIR
from decision_router.domain.review_sla import SWEEP_SOURCE
from decision_router.review.console import SLA_METRICS
from local.cloudformation import Stack
from tests.infra.test_escalations import rules_for

POLICIES = {p.stem for p in POLICY_DIR.glob("*.json")}


def stack() -> Stack:
    return Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", "OnCallEmail": "oncall@example.com"})


def test_the_console_function_sweeps_the_review_sla_every_five_minutes():
    events = stack().properties("ReviewConsoleFunction")["Events"]
    assert events["ReviewSlaSweep"]["Type"] == "Schedule"
    assert events["ReviewSlaSweep"]["Properties"]["Schedule"] == "rate(5 minutes)"


def test_a_review_past_its_target_in_any_policy_trips_the_breach_alarm():
    template = stack()
    alarm = template.resolve(template.properties("ReviewSlaBreachedAlarm"))
    stats = [m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m]
    assert {(s["Metric"]["Namespace"], s["Metric"]["MetricName"]) for s in stats} == {
        ("DecisionRouter", SLA_METRICS["breached"])}
    assert all([d["Name"] for d in s["Metric"]["Dimensions"]] == ["policy"] for s in stats)
    assert {s["Metric"]["Dimensions"][0]["Value"] for s in stats} == POLICIES
    (total,) = [m for m in alarm["Metrics"] if m.get("ReturnData", True)]
    assert all(f"FILL({s['Id']}, 0)" in total["Expression"] for s in alarm["Metrics"] if "MetricStat" in s)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["AlarmActions"] == [template.ref("AlarmTopic")]


def test_the_dashboard_shows_what_waits_is_at_risk_and_past_due_per_policy():
    template = stack()
    body = json.loads(template.resolve(template.properties("LearningDashboard"))["DashboardBody"])
    shown = {(m[1], m[3]) for w in body["widgets"] for m in w["properties"]["metrics"]
             if isinstance(m[0], str) and m[2:3] == ["policy"] and len(m) == 5}
    assert {(name, policy) for name in SLA_METRICS.values() for policy in POLICIES} <= shown


def test_the_sweeps_escalations_page_the_on_call_through_the_escalation_rule():
    template = stack()
    assert template.template["Mappings"]["Events"]["ReviewSla"]["Source"] == SWEEP_SOURCE
    assert rules_for(template, SWEEP_SOURCE, "Item Escalated") == ["ItemEscalatedRule"]
    (target,) = template.resolve(template.properties("ItemEscalatedRule"))["Targets"]
    assert target["Arn"] == template.ref("EscalationTopic")
    assert target["InputTransformer"]["InputPathsMap"]["source"] == "$.source"  # the page tells whose escalation


def console_statements(template: Stack) -> list[dict]:
    return [statement for policy in template.resolve(template.properties("ReviewConsoleFunction"))["Policies"]
            for statement in policy.get("Statement", [])]


def test_the_console_function_may_put_only_its_own_source_and_write_only_its_own_marks():
    template = stack()
    statements = console_statements(template)
    (put,) = [s for s in statements if "events:PutEvents" in s["Action"]]
    assert put["Resource"] == template.get_att("DecisionBus", "Arn")
    # its source and its one detail-type: never an Incident Reported, which the incident intake routes
    assert put["Condition"] == {"StringEquals": {"events:source": SWEEP_SOURCE, "events:detail-type": "Item Escalated"}}
    idempotency = [s for s in statements if s["Resource"] == template.get_att("IdempotencyTable", "Arn")]
    assert idempotency == [{"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": idempotency[0]["Resource"],
                            "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{KEY_PREFIX}*"]}}}]
    env = template.function_environment("ReviewConsoleFunction")
    assert env["IDEMPOTENCY_TABLE_NAME"] == template.ref("IdempotencyTable")
    assert env["EVENT_BUS_NAME"] == template.ref("DecisionBus")
