"""Escalations reach a person: every event the routing workflow emits has a rule on the bus
delivering it to the on-call topic, the stack refuses to deploy without an on-call endpoint, and
waiting escalations and reviews raise alarms. The rules are read from template.yaml, the emitted
events from the substituted ASL, so a new event type without a rule fails here."""

from __future__ import annotations

import json

import pytest

from local.cloudformation import Stack

EXISTING = {"ExistingEndpointName": "decision-endpoint"}
#: What the workflow emits that pages; `Item Routed` announces every outcome and must page nobody.
PAGES = {"Item Escalated", "Review Overdue"}
ANNOUNCEMENT = "Item Routed"


def emitted_events(stack: Stack) -> set[tuple[str, str]]:
    """(source, detail-type) of every events:putEvents entry in the routing workflow."""
    asl = json.loads(stack.state_machine_definition("RoutingStateMachine"))
    found = set()
    for state in asl["States"].values():
        if state.get("Resource", "").startswith("arn:aws:states:::events:putEvents"):
            for entry in state["Parameters"]["Entries"]:
                assert entry["EventBusName"] == stack.ref("DecisionBus")
                found.add((entry["Source"], entry["DetailType"]))
    return found


def rules_for(stack: Stack, source: str, detail_type: str) -> list[str]:
    """Enabled rules on the decision bus whose pattern matches events of this source and type."""
    matching = []
    for rule in stack.of_type("AWS::Events::Rule"):
        props = stack.resolve(stack.properties(rule))
        pattern = props["EventPattern"]
        if props.get("EventBusName") != stack.ref("DecisionBus") or props.get("State", "ENABLED") != "ENABLED":
            continue
        if set(pattern) - {"source", "detail-type"}:
            continue  # a pattern on the detail could miss some events of the type
        if source in pattern.get("source", [source]) and detail_type in pattern.get("detail-type", [detail_type]):
            matching.append(rule)
    return matching


def test_the_workflow_emits_item_escalated_and_review_overdue():
    stack = Stack.load(parameters=EXISTING)
    assert {t for _, t in emitted_events(stack)} == PAGES | {ANNOUNCEMENT}


def test_the_announcement_of_every_outcome_pages_nobody():
    stack = Stack.load(parameters=EXISTING | {"ZendeskSubdomain": "acme", "ZendeskApiSecretName": "zendesk-api"})
    topics = {stack.ref(t) for t in stack.of_type("AWS::SNS::Topic")}
    announcing = [rule for rule in stack.of_type("AWS::Events::Rule")
                  if ANNOUNCEMENT in stack.resolve(stack.properties(rule))["EventPattern"].get("detail-type", [])]
    assert announcing == ["ZendeskWriteBackRule"]
    for rule in announcing:
        assert not {t["Arn"] for t in stack.resolve(stack.properties(rule))["Targets"]} & topics, rule


def test_every_event_the_workflow_emits_has_a_rule_delivering_it_to_the_on_call_topic():
    stack = Stack.load(parameters=EXISTING)
    topics = {stack.ref(t): t for t in stack.of_type("AWS::SNS::Topic")}
    queues = {stack.get_att(q, "Arn"): q for q in stack.of_type("AWS::SQS::Queue")}
    for source, detail_type in emitted_events(stack):
        if detail_type not in PAGES:
            continue
        rules = rules_for(stack, source, detail_type)
        assert rules, f"no rule on the decision bus delivers {detail_type!r} from {source!r}"
        for rule in rules:
            targets = stack.resolve(stack.properties(rule))["Targets"]
            assert targets, rule
            for target in targets:
                assert topics.get(target["Arn"]) == "EscalationTopic", (rule, target["Arn"])
                # A page that cannot be delivered is kept, and alarms.
                assert queues[target["DeadLetterConfig"]["Arn"]] == "NotificationDeadLetterQueue"
                assert target["RetryPolicy"]["MaximumRetryAttempts"] >= 3


@pytest.fixture
def on_call(pipeline):
    return pipeline.pages


@pytest.mark.stack
def test_a_p1_pages_the_on_call_with_who_and_where_but_no_customer_text(pipeline, on_call):
    record = pipeline.record("incident", "INC-11", route="auto", escalate=True,
                             answers={"priority": "P1", "team": "platform"})

    execution = pipeline.wait(pipeline.start(record))

    assert execution["status"] == "SUCCEEDED"
    (page,) = on_call()
    assert page["summary"] == f"Item Escalated: {execution['name']}"
    assert (page["item_kind"], page["item_id"], page["target"]) == ("incident", "INC-11", "platform-oncall")
    assert page["execution_name"] == execution["name"] and page["policy"] == "incident"
    text = json.dumps(page)
    assert record["item"]["title"] not in text and record["item"]["description"] not in text


@pytest.mark.stack
def test_an_escalation_before_review_pages_without_a_target(pipeline, on_call):
    record = pipeline.record("incident", "INC-12", route="review", escalate=True,
                             answers={"priority": "P1", "team": "data"})
    pipeline.start(record)
    pipeline.review_requests(wait_seconds=10)

    (page,) = on_call()
    assert page["item_id"] == "INC-12" and page["summary"].startswith("Item Escalated: incident-INC-12-")
    assert page["target"] is None  # a JSON null, as the event has it


@pytest.mark.stack
def test_an_overdue_review_pages_the_on_call(pipeline, on_call):
    record = pipeline.record("ticket", "T-13", route="review", answers={"queue": "sales"}, timeout_seconds=1)

    execution = pipeline.wait(pipeline.start(record), timeout=30)
    assert execution["status"] == "SUCCEEDED"

    (page,) = on_call()
    assert page["summary"] == f"Review Overdue: {execution['name']} (waiting in the escalation queue)"
    assert (page["item_kind"], page["item_id"]) == ("ticket", "T-13")
    assert record["item"]["subject"] not in json.dumps(page)


def deploys(parameters: dict) -> bool:
    """Whether the template's Rules assertions hold for these parameters (CloudFormation refuses
    the stack otherwise)."""
    stack = Stack.load(parameters={**EXISTING, **parameters})
    for rule in stack.template.get("Rules", {}).values():
        if "RuleCondition" in rule and not stack.resolve(rule["RuleCondition"]):
            continue
        if not all(stack.resolve(assertion["Assert"]) for assertion in rule["Assertions"]):
            return False
    return True


def subscriptions(parameters: dict) -> dict[str, set[tuple[str, str]]]:
    """topic logical id -> {(protocol, endpoint)} of the subscriptions the stack creates."""
    stack = Stack.load(parameters={**EXISTING, **parameters})
    found: dict[str, set[tuple[str, str]]] = {}
    topics = {stack.ref(t): t for t in stack.of_type("AWS::SNS::Topic")}
    for logical_id in stack.of_type("AWS::SNS::Subscription"):
        props = stack.resolve(stack.properties(logical_id))
        found.setdefault(topics[props["TopicArn"]], set()).add((props["Protocol"], props["Endpoint"]))
    return found


def test_a_stack_whose_escalations_reach_nobody_is_refused():
    assert not deploys({})
    assert deploys({"OnCallEmail": "oncall@example.com"})
    assert deploys({"OnCallWebhookUrl": "https://pager.example.com/hook"})


def test_the_on_call_gets_escalations_and_alarms_by_default():
    email = subscriptions({"OnCallEmail": "oncall@example.com"})
    # IncidentAlarmTopic is a way in, not a notification: only the incident intake is subscribed.
    assert {protocol for protocol, _ in email.pop("IncidentAlarmTopic")} == {"lambda"}
    assert email == {"EscalationTopic": {("email", "oncall@example.com")},
                     "AlarmTopic": {("email", "oncall@example.com")}}
    both = subscriptions({"OnCallEmail": "oncall@example.com", "AlarmEmail": "ops@example.com",
                          "OnCallWebhookUrl": "https://pager.example.com/hook"})
    both.pop("IncidentAlarmTopic")
    assert both == {"EscalationTopic": {("email", "oncall@example.com"), ("https", "https://pager.example.com/hook")},
                    "AlarmTopic": {("email", "ops@example.com"), ("https", "https://pager.example.com/hook")}}


@pytest.mark.parametrize("queue, threshold", [("EscalationQueue", "EscalationAgeAlarmSeconds"),
                                              ("NotificationDeadLetterQueue", None)])
def test_waiting_escalations_and_undelivered_pages_alarm(queue, threshold):
    """(Waiting reviews: tests/infra/test_alarms.py, from the pending-review index.)"""
    stack = Stack.load(parameters=EXISTING)
    alarms = []
    for alarm in stack.of_type("AWS::CloudWatch::Alarm"):
        props = stack.resolve(stack.properties(alarm))
        if props.get("Dimensions") == [{"Name": "QueueName", "Value": stack.get_att(queue, "QueueName")}]:
            alarms.append(props)
    metric = "ApproximateAgeOfOldestMessage" if threshold else "ApproximateNumberOfMessagesVisible"
    (props,) = [a for a in alarms if a["MetricName"] == metric]
    assert props["AlarmActions"] == [stack.ref("AlarmTopic")]
    if threshold:
        assert props["Threshold"] == stack.parameters[threshold]
