"""The review SLA on the stack: the console function's sweep runs on a schedule, the breach alarm
reads the very metric and dimension the sweep prints (review_console/sla.py, EMF), for every
shipped policy, and the dashboard shows waiting, at risk and past due for each."""

from __future__ import annotations

import json

from decision_router.domain.policies import POLICY_DIR
from decision_router.review.console import SLA_METRICS
from local.cloudformation import Stack

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
