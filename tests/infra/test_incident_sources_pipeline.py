"""Native incident sources end to end: the events/ samples are put on the bus they arrive on
(the default bus; PagerDuty's partner bus), the template's own source rules deliver them (moto
delivers to an SQS stand-in for the function), the real incident-intake handler correlates them
in the open-incident table and routes them, and moto executes the real routing workflow.

Endpoint answers come from a botocore Stubber (the model is not what is tested here)."""

from __future__ import annotations

import io
import json
import time
from datetime import datetime

import boto3
import pytest
from moto import mock_aws

from local.cloudformation import Stack
from local.cloudwatch import play_alarm_states
from local.lambdas import LocalFunction, serve_workflow_invokes
from tests.functions.conftest import EVENTS, make_result
from tests.functions.test_intake_handlers import (
    PRIORITY_OPTIONS,
    TEAM_OPTIONS,
    FakeLambdaContext,
    StubbedEndpoint,
    batch_body,
    body,
    make_intake,
)
from tests.infra.conftest import ENDPOINT_NAME, Pipeline

pytestmark = pytest.mark.stack

#: moto cannot create a partner event bus (its name needs the partner's event source): a plain
#: bus stands in for aws.partner/pagerduty.com/acme-router; the events still carry PagerDuty's source.
PAGERDUTY_BUS = "pagerduty-acme-router"
#: Which template rule carries each source's events.
RULES = {"aws.cloudwatch": "CloudWatchAlarmRule", "aws.health": "HealthEventRule",
         "aws.guardduty": "GuardDutyFindingRule", "aws.securityhub": "SecurityHubFindingRule",
         "pagerduty": "PagerDutyRule"}


@pytest.fixture
def pipeline():
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        stack = Stack.load(parameters={"ExistingEndpointName": ENDPOINT_NAME, "PagerDutySource": "true",
                                       "PagerDutyEventBusName": PAGERDUTY_BUS}).create()
        writer = LocalFunction(stack, "ReviewIndexWriterFunction")  # the workflow's RequestReview invokes it
        serve_workflow_invokes(writer)
        yield Pipeline(stack)
        writer.close()


@pytest.fixture
def incidents(pipeline, monkeypatch, letters_policies):
    """The incident intake over a stub endpoint whose letters answer (the shipped heads have tests of their own)."""
    from incident_intake import app

    stub = StubbedEndpoint()
    make_intake(monkeypatch, pipeline.stack, app, "incident", "IncidentIntakeFunction", stub.endpoint)
    return app, stub


def sample(name: str) -> dict:
    return json.loads((EVENTS / f"{name}.json").read_text())


def deliver(pipeline: Pipeline, event: dict) -> dict:
    """Put the event on the bus its source uses; return it as the template's rule delivers it
    (an alarm's state set first, as CloudWatch sets it before it sends the event)."""
    play_alarm_states(event)
    source = "pagerduty" if event["source"].startswith("aws.partner/pagerduty.com/") else event["source"]
    entry = {"Source": event["source"], "DetailType": event["detail-type"], "Detail": json.dumps(event["detail"]),
             "Resources": event.get("resources", []), "Time": datetime.fromisoformat(event["time"])}
    if source == "pagerduty":
        entry["EventBusName"] = PAGERDUTY_BUS
    response = boto3.client("events").put_events(Entries=[entry])
    assert response["FailedEntryCount"] == 0, response
    (delivered,) = pipeline.stack.rule_events(RULES[source], "IncidentIntake")
    return delivered


def settled(pipeline: Pipeline) -> dict[str, str]:
    """Route name -> status, executions and direct routes alike, once no execution runs any more
    (none of these waits for a review)."""
    return pipeline.settled()


def open_row(pipeline: Pipeline, key: str) -> dict:
    table = pipeline.stack.function_environment("IncidentIntakeFunction")["OPEN_INCIDENTS_TABLE_NAME"]
    return pipeline.dynamodb.get_item(TableName=table, Key={"incident_key": {"S": key}})["Item"]


def confident(stub: StubbedEndpoint, team_logits=(0, 0, 0, 6.0), priority_logits=(0, 6.0, 0, 0)) -> None:
    stub.answer(batch_body(make_result("priority", PRIORITY_OPTIONS, list(priority_logits)),
                           make_result("team", TEAM_OPTIONS, list(team_logits))))


def alarm(state: str, minute: int = 0) -> dict:
    event = sample("cloudwatch_alarm_state_change")
    event["detail"]["state"]["value"] = state
    event["detail"]["state"]["timestamp"] = f"2026-11-29T12:{minute:02d}:00.000+0000"
    return event


# ------------------------------------------------------------------------ CloudWatch lifecycle
def test_alarm_routed_once_redelivery_duplicate_ok_resolves(pipeline, incidents):
    app, stub = incidents
    confident(stub)
    event = deliver(pipeline, sample("cloudwatch_alarm_state_change"))
    (routed,) = app.lambda_handler(event, FakeLambdaContext())["outcomes"]
    assert routed["outcome"] == "routed" and routed["target"] == "app-oncall"
    # EventBridge delivers at least once: the same event again routes nothing and calls no model.
    (again,) = app.lambda_handler(event, FakeLambdaContext())["outcomes"]
    assert again["outcome"] == "duplicate"
    assert list(settled(pipeline).values()) == ["SUCCEEDED"]
    (message,) = pipeline.messages(pipeline.destinations["app-oncall"])
    assert message["item"]["evidence"]["namespace"] == "AWS/ApplicationELB"

    ok = deliver(pipeline, alarm("OK"))
    (resolved,) = app.lambda_handler(ok, FakeLambdaContext())["outcomes"]
    assert resolved["outcome"] == "resolved" and resolved["execution_name"] == routed["execution_name"]
    row = open_row(pipeline, routed["key"])
    # The delivery is the alarm's state change (the same whether it came by EventBridge, SNS or an alarm action).
    assert row["status"]["S"] == "resolved" and row["resolved_by"]["S"] == f"{routed['key']}#OK@2026-11-29T12:00:00+00:00"
    (late,) = app.lambda_handler(ok, FakeLambdaContext())["outcomes"]  # the OK re-delivered
    assert late["outcome"] == "ignored" and "no open incident has this key" in late["reason"]
    assert len(settled(pipeline)) == 1 and len(stub.requests) == 1


def test_a_flapping_alarm_is_two_incidents_and_a_late_copy_of_the_first_opens_nothing(pipeline, incidents):
    app, stub = incidents
    confident(stub)
    confident(stub, team_logits=(6.0, 0, 0, 0))
    first = deliver(pipeline, alarm("ALARM", minute=1))
    outcomes = [app.lambda_handler(event, FakeLambdaContext())["outcomes"][0]["outcome"]
                for event in (first, deliver(pipeline, alarm("OK", minute=6)))]
    outcomes += [app.lambda_handler(deliver(pipeline, alarm("ALARM", minute=9)), FakeLambdaContext())["outcomes"][0]["outcome"]]
    assert outcomes == ["routed", "resolved", "routed"]
    executions = settled(pipeline)
    assert sorted(executions.values()) == ["SUCCEEDED", "SUCCEEDED"]  # two incidents, each routed once
    row = open_row(pipeline, first["resources"][0])
    assert row["status"]["S"] == "open" and row["opened_by"]["S"] != first["id"]
    # A late re-delivery of the first ALARM neither reopens nor pages: it counts on the open one.
    (late,) = app.lambda_handler(first, FakeLambdaContext())["outcomes"]
    assert late["outcome"] == "updated" and len(settled(pipeline)) == 2


def test_insufficient_data_is_ignored_counted_and_logged_with_the_reason(pipeline, incidents, capsys, monkeypatch):
    app, stub = incidents
    logs = io.StringIO()
    monkeypatch.setattr(app.logger.registered_handler, "stream", logs)
    (ignored,) = app.lambda_handler(deliver(pipeline, alarm("INSUFFICIENT_DATA")), FakeLambdaContext())["outcomes"]
    assert ignored["outcome"] == "ignored" and "INSUFFICIENT_DATA" in ignored["reason"]
    metrics = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [m["IgnoredEvents"] for m in metrics] == [[1.0]]
    (line,) = [json.loads(line) for line in logs.getvalue().splitlines() if "event ignored" in line]
    assert "INSUFFICIENT_DATA" in line["reason"] and line["outcome"] == "ignored"
    assert stub.requests == [] and settled(pipeline) == {}


def test_a_new_event_of_an_open_incident_updates_it_and_pages_nobody_again(pipeline, incidents):
    app, stub = incidents
    finding = sample("guardduty_finding")
    finding["detail"]["severity"] = 9.1  # CRITICAL -> sev1: P1 and security by rule, no model call
    (first,) = app.lambda_handler(deliver(pipeline, finding), FakeLambdaContext())["outcomes"]
    assert first["outcome"] == "routed" and first["target"] == "security-oncall" and first["escalate"] is True
    finding["detail"]["service"]["count"] = 9  # GuardDuty re-sends the finding as it grows
    (update,) = app.lambda_handler(deliver(pipeline, finding), FakeLambdaContext())["outcomes"]
    assert update["outcome"] == "updated"
    assert open_row(pipeline, first["key"])["updates"]["N"] == "1"
    assert stub.requests == [] and len(settled(pipeline)) == 1
    assert len(pipeline.pages()) == 1  # one P1 page for the finding, not two
    finding["detail"]["service"]["archived"] = True
    (closed,) = app.lambda_handler(deliver(pipeline, finding), FakeLambdaContext())["outcomes"]
    assert closed["outcome"] == "resolved"


# ------------------------------------------------------------------------ every source, its rule
@pytest.mark.parametrize("name, target", [
    ("aws_health_event", "data-oncall"), ("securityhub_findings_imported", "security-oncall"),
    ("pagerduty_incident_trigger", "app-oncall"), ("guardduty_finding", "security-oncall"),
])
def test_each_source_sample_reaches_the_intake_by_its_rule_and_is_routed(pipeline, incidents, name, target):
    app, stub = incidents
    event = sample(name)
    if name == "aws_health_event":
        confident(stub, team_logits=(0, 6.0, 0, 0))
    elif name == "pagerduty_incident_trigger":
        confident(stub)
    elif name == "guardduty_finding":
        stub.answer(body(PRIORITY_OPTIONS, [0, 6.0, 0, 0], decision_id="priority"))  # team by rule
    (routed,) = app.lambda_handler(deliver(pipeline, event), FakeLambdaContext())["outcomes"]
    assert routed["outcome"] == "routed" and routed["target"] == target
    assert list(settled(pipeline).values()) == ["SUCCEEDED"]
    (message,) = pipeline.messages(pipeline.destinations[target])
    assert message["item"]["evidence"]["source_ref"] == routed["key"]
    (audit,) = pipeline.audit(routed["incident_id"])
    assert audit["outcome"] == "auto_routed"


def test_an_unknown_detail_type_is_parked_in_the_incident_dlq_with_the_reason(pipeline, incidents):
    app, stub = incidents
    event = sample("cloudwatch_alarm_state_change")
    event["detail-type"] = "CloudWatch Alarm Configuration Change"
    result = app.lambda_handler(event, FakeLambdaContext())
    assert result["outcome"] == "dead_lettered"
    dlq = pipeline.stack.ref("IncidentDeadLetterQueue")
    (message,) = pipeline.sqs.receive_message(QueueUrl=dlq, MessageAttributeNames=["All"])["Messages"]
    attributes = {k: v["StringValue"] for k, v in message["MessageAttributes"].items()}
    assert attributes["failure_kind"] == "unknown_event" and attributes["event_id"] == event["id"]
    assert "'CloudWatch Alarm Configuration Change' is not an incident event" in attributes["failure_reason"]
    assert json.loads(message["Body"]) == event  # the event itself, untouched
    assert stub.requests == [] and settled(pipeline) == {}


def break_the_workflow(pipeline: Pipeline):
    """The routing state machine gone (StartExecution fails) until the returned call puts it back."""
    definition = pipeline.sfn.describe_state_machine(stateMachineArn=pipeline.state_machine_arn)
    pipeline.sfn.delete_state_machine(stateMachineArn=pipeline.state_machine_arn)
    return lambda: pipeline.sfn.create_state_machine(name=definition["name"], definition=definition["definition"],
                                                     roleArn=definition["roleArn"])


def break_the_team_queues(pipeline: Pipeline):
    """The teams' queues gone (the intake's own delivery fails) until the returned call puts them back."""
    urls = list(pipeline.destinations.values())
    for url in urls:
        pipeline.sqs.delete_queue(QueueUrl=url)
    return lambda: [pipeline.sqs.create_queue(QueueName=url.rsplit("/", 1)[1]) for url in urls]


#: A route that fails, for each way an item is routed: the priority's logits, and how its route is broken.
ROUTE_FAULTS = pytest.mark.parametrize("priority_logits, break_route", [
    ((6.0, 0, 0, 0), break_the_workflow),  # P1 pages: the workflow routes it
    ((0, 6.0, 0, 0), break_the_team_queues),  # P2 pages nobody: the intake delivers it itself
], ids=["workflow", "direct"])


@ROUTE_FAULTS
def test_a_route_that_fails_fails_the_event_and_its_retry_routes_it(pipeline, incidents, priority_logits, break_route):
    """The open-incident row is taken before the route: a failed route must not leave it claimed."""
    app, stub = incidents
    confident(stub, priority_logits=priority_logits)
    event = deliver(pipeline, sample("pagerduty_incident_trigger"))
    mend = break_route(pipeline)
    with pytest.raises(Exception, match="does not exist|StateMachineDoesNotExist"):
        app.lambda_handler(event, FakeLambdaContext())
    mend()
    (retried,) = app.lambda_handler(event, FakeLambdaContext())["outcomes"]  # Lambda's retry
    assert retried["outcome"] == "routed"
    assert open_row(pipeline, "Q2W3E4R5T6Y7U8")["routed"]["BOOL"] is True
    assert list(settled(pipeline).values()) == ["SUCCEEDED"]  # (and no execution thread outlives the test)
    assert len(pipeline.messages(pipeline.destinations["app-oncall"])) == 1  # routed once


def test_resolution_closes_the_review_the_incident_waits_for_and_audits_it(pipeline, incidents):
    app, stub = incidents
    announced = pipeline.observe("Item Routed")
    confident(stub, team_logits=(1.0, 0.9, 0.8, 1.1), priority_logits=(0.2, 0.3, 0.25, 0.1))  # unsure: review
    (opened,) = app.lambda_handler(deliver(pipeline, alarm("ALARM", minute=1)), FakeLambdaContext())["outcomes"]
    assert opened["route"] == "review"
    arn = pipeline.sfn.list_executions(stateMachineArn=pipeline.state_machine_arn)["executions"][0]["executionArn"]
    deadline = time.monotonic() + 30
    while not [e for e in pipeline.sfn.get_execution_history(executionArn=arn)["events"]
               if e["type"] == "TaskSubmitted"] and time.monotonic() < deadline:
        time.sleep(0.1)  # the workflow has put the review request on the review queue
    (resolved,) = app.lambda_handler(deliver(pipeline, alarm("OK", minute=7)), FakeLambdaContext())["outcomes"]
    assert resolved["outcome"] == "resolved" and resolved["review_closed"] is True
    assert pipeline.wait(arn)["status"] == "SUCCEEDED"
    (audit,) = pipeline.audit(opened["incident_id"])
    assert audit["outcome"] == "resolved_at_source"
    # The error names why; moto's interpreter drops SendTaskFailure's Cause (Step Functions keeps it).
    (event,) = pipeline.messages(announced, wait_seconds=10)
    assert (event["detail"]["outcome"], event["detail"]["target"], event["detail"]["answers"]) == ("resolved_at_source", None, None)
    assert json.loads(audit["outcome_detail"])["error"]["Error"] == "IncidentResolved"
    assert pipeline.review_requests() == []  # the review request is gone
    assert {t: m for t, url in pipeline.destinations.items() if (m := pipeline.messages(url))} == {}  # routed nowhere


def test_the_item_routed_event_names_the_source_reference_for_write_back(pipeline, incidents):
    app, stub = incidents
    announced = pipeline.observe("Item Routed")
    confident(stub)
    (routed,) = app.lambda_handler(deliver(pipeline, sample("pagerduty_incident_trigger")), FakeLambdaContext())["outcomes"]
    assert list(settled(pipeline).values()) == ["SUCCEEDED"]
    (event,) = pipeline.messages(announced, wait_seconds=10)
    detail = event["detail"]
    assert detail["reference"] == {"system": "pagerduty", "id": "Q2W3E4R5T6Y7U8",
                                   "url": "https://acme.pagerduty.com/incidents/Q2W3E4R5T6Y7U8"}
    assert (detail["target"], detail["decided_by"], detail["answers"]) == ("app-oncall", "auto",
                                                                           {"priority": "P2", "team": "application"})
    assert detail["item_key"].startswith("incident:pagerduty:Q2W3E4R5T6Y7U8:") and detail["readout"]["team"] in ("letters", "head")
