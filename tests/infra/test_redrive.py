"""Nothing routed is lost to a failure: a re-sent item whose earlier route failed is routed
again, once, `python -m ops.redrive` re-routes what the dead-letter queues hold,
and an item is one item only for the same source, id and payload.

The real intake handlers (endpoint answers from a botocore Stubber), the template's resources in
moto and the real routing ASL executed by moto; the delivery failure is injected by removing
the destination queue, as an operator's mistake or a wrong URL would. An automatic route that
pages nobody is delivered by the intake itself: its failed delivery fails the ticket (SQS
delivers it again); a route of the workflow that failed leaves its record in the workflow DLQ."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from ops import redrive
from tests.functions.conftest import EVENTS, make_result
from tests.functions.test_intake_handlers import (
    PRIORITY_OPTIONS,
    TEAM_OPTIONS,
    TICKET_OPTIONS,
    FakeLambdaContext,
    StubbedEndpoint,
    batch_body,
    body,
    eventbridge,
    make_intake,
    ticket_event,
)

pytestmark = pytest.mark.stack  # the template's queues, bus and workflow in moto


@pytest.fixture
def tickets(pipeline, monkeypatch):
    from ticket_intake import app

    stub = StubbedEndpoint()
    make_intake(monkeypatch, pipeline.stack, app, "ticket", "TicketIntakeFunction", stub.endpoint)
    return app, stub


@pytest.fixture
def incidents(pipeline, monkeypatch, letters_policies):  # the stub's letters decide
    from incident_intake import app

    stub = StubbedEndpoint()
    make_intake(monkeypatch, pipeline.stack, app, "incident", "IncidentIntakeFunction", stub.endpoint)
    return app, stub


@pytest.fixture
def ticket(ticket_data) -> dict:
    return dict(ticket_data, ticket_id="T-8001")


@pytest.fixture
def ticket_data() -> dict:
    return {"ticket_id": "T-1001", "subject": "Charged twice for my subscription",
            "body": "My card was charged twice this month. Please refund one payment.",
            "customer": {"id": "C-42", "tier": "pro"}, "channel": "email", "created_at": "2026-11-29T12:00:00Z"}


def executions(pipeline) -> dict[str, str]:
    """Route name -> status, for every execution of the routing state machine and every route the
    intake delivered itself."""
    return pipeline.settled()


def break_billing(pipeline) -> str:
    url = pipeline.destinations["billing"]
    pipeline.sqs.delete_queue(QueueUrl=url)
    return url


def mend_billing(pipeline, url: str) -> None:
    assert pipeline.sqs.create_queue(QueueName=url.rsplit("/", 1)[1])["QueueUrl"] == url


def route_ticket_into_the_dead_letter_queue(pipeline) -> list[dict]:
    """T-8001 routed to billing by an execution of the workflow (an automatic route started before
    the intake delivered those itself), its delivery failed: the execution FAILED and the record
    is in the workflow DLQ. The billing queue is back afterwards (the fault was fixed)."""
    url = break_billing(pipeline)
    record = pipeline.record("ticket", "T-8001", route="auto", answers={"queue": "billing"})
    assert pipeline.wait(pipeline.start(record))["status"] == "FAILED"
    mend_billing(pipeline, url)
    return pipeline.messages(pipeline.stack.ref("WorkflowDeadLetterQueue"))


def test_a_resent_item_whose_route_failed_is_routed_again_not_reported_as_routed(pipeline, tickets, ticket):
    """T-8001 decided (billing, confidently): the intake delivers it itself, and its delivery failed."""
    app, stub = tickets
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    url = break_billing(pipeline)
    failed = app.lambda_handler(ticket_event(ticket), FakeLambdaContext())
    assert failed == {"batchItemFailures": [{"itemIdentifier": "m-0"}]}  # not reported as routed: SQS delivers it again
    assert list(executions(pipeline).values()) == ["FAILED"]  # its claim handed back
    mend_billing(pipeline, url)

    # The ticket delivered again after the fault was fixed.
    assert app.lambda_handler(ticket_event(ticket), FakeLambdaContext()) == {"batchItemFailures": []}

    statuses = executions(pipeline)
    assert list(statuses.values()) == ["SUCCEEDED"], statuses  # the same route, delivered this time
    assert list(pipeline.queues_holding("T-8001")) == ["billing"]
    assert len(stub.requests) == 1  # the decision was kept: no second model call for the same payload

    # A third delivery of the same ticket: now it really was routed.
    summary = app.intake.handle(json.dumps(ticket), FakeLambdaContext())
    assert summary["started"] is False and statuses[summary["execution_name"]] == "SUCCEEDED"
    assert pipeline.queues_holding("T-8001") == {}


def test_an_item_whose_workflow_route_failed_is_routed_by_the_intake_when_resent(pipeline, tickets):
    """T-8001's execution FAILED (its record in the workflow DLQ); the same item delivered to the
    intake again, which now delivers an automatic route itself, is routed once, not reported as routed."""
    app, stub = tickets
    (dead_letter,) = route_ticket_into_the_dead_letter_queue(pipeline)
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    summary = app.intake.handle(json.dumps(dead_letter["record"]["item"]), FakeLambdaContext())
    assert summary["started"] is True
    assert summary["execution_name"] == dead_letter["execution_name"] + "-r2"  # the failed route's name is spent
    assert list(pipeline.queues_holding("T-8001")) == ["billing"]


def retention(pipeline) -> list[str]:
    """The stack's LabelRetentionDays, as the operator passes it (moto has no CloudFormation stack to read)."""
    return ["--label-retention-days", pipeline.env["LABEL_RETENTION_DAYS"]]


def test_a_redriven_record_keeps_its_labelled_example_as_long_as_the_stack_says(pipeline):
    """Not the 365 days of a record started without a retention: the stack's LabelRetentionDays,
    counted from the item's decision as the intake's own start counts it."""
    (dead_letter,) = route_ticket_into_the_dead_letter_queue(pipeline)
    dlq = pipeline.stack.ref("WorkflowDeadLetterQueue")
    pipeline.sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(dead_letter))

    assert redrive.main(["workflow", "--dlq-url", dlq, "--state-machine-arn", pipeline.state_machine_arn,
                         "--label-retention-days", "30"]) == 0

    arns = [e["executionArn"] for e in pipeline.sfn.list_executions(stateMachineArn=pipeline.state_machine_arn)["executions"]
            if e["name"] != dead_letter["execution_name"]]
    (started,) = [json.loads(pipeline.sfn.describe_execution(executionArn=arn)["input"]) for arn in arns]
    decided = datetime.fromisoformat(started["decided_at"])
    assert started["label_expires_at"] == int((decided + timedelta(days=30)).timestamp())
    assert dead_letter["record"]["label_expires_at"] != started["label_expires_at"]


def test_redrive_reroutes_the_workflow_dead_letter_queue_as_new_executions(pipeline, capsys):
    dead_letters = route_ticket_into_the_dead_letter_queue(pipeline)
    (dead_letter,) = dead_letters
    dlq = pipeline.stack.ref("WorkflowDeadLetterQueue")
    pipeline.sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(dead_letter))  # put it back for the redrive

    assert redrive.main(["workflow", "--dlq-url", dlq, "--state-machine-arn", pipeline.state_machine_arn, *retention(pipeline)]) == 0

    out = capsys.readouterr().out
    assert "T-8001" in out and "re-routed" in out and dead_letter["execution_name"] in out
    statuses = executions(pipeline)
    assert sorted(statuses.values()) == ["FAILED", "SUCCEEDED"]
    new = next(name for name, status in statuses.items() if status == "SUCCEEDED")
    assert new != dead_letter["execution_name"] and new.startswith(dead_letter["execution_name"])
    assert list(pipeline.queues_holding("T-8001")) == ["billing"]
    assert pipeline.messages(dlq) == []  # taken off the DLQ once re-routed

    assert redrive.main(["workflow", "--dlq-url", dlq, "--state-machine-arn", pipeline.state_machine_arn, *retention(pipeline)]) == 0
    assert "nothing to redrive" in capsys.readouterr().out


def test_redrive_writes_the_missing_audit_row_of_a_routed_item_and_routes_nothing(pipeline, capsys):
    from tests.infra.test_routing_workflow import remove_audit_table

    table = remove_audit_table(pipeline)
    record = pipeline.record("ticket", "T-6006", route="auto", answers={"queue": "sales"})
    record["item"]["subject"] = "Doppelt belastet — ¿reembolso? 二重請求"  # text States.JsonToString may write as is
    assert pipeline.wait(pipeline.start(record))["status"] == "SUCCEEDED"
    assert list(pipeline.queues_holding("T-6006")) == ["sales"]
    pipeline.dynamodb.create_table(**table)
    dlq = pipeline.stack.ref("WorkflowDeadLetterQueue")

    assert redrive.main(["workflow", "--dlq-url", dlq, "--state-machine-arn", pipeline.state_machine_arn, *retention(pipeline),
                         "--audit-table", table["TableName"]]) == 0

    assert "audit row (auto_routed) written" in capsys.readouterr().out
    (audit,) = pipeline.audit("T-6006")
    assert audit["outcome"] == "auto_routed"
    # The JSON-text columns are compared parsed: Step Functions (Java) may write floats and
    # non-ASCII text in other bytes than Python, never other values.
    assert json.loads(audit["decisions"]) == record["decisions"] and json.loads(audit["item"]) == record["item"]
    assert "Doppelt belastet — ¿reembolso? 二重請求" in audit["item"]  # written as is, not \u-escaped
    # The same row the workflow writes: audit another item normally and compare the fields.
    other = pipeline.record("ticket", "T-6008", route="auto", answers={"queue": "sales"})
    assert pipeline.wait(pipeline.start(other))["status"] == "SUCCEEDED"
    (written,) = pipeline.audit("T-6008")
    assert set(audit) == set(written)
    assert json.loads(audit["outcome_detail"]).keys() == json.loads(written["outcome_detail"]).keys()
    assert pipeline.queues_holding("T-6006") == {} and len(executions(pipeline)) == 2  # nothing routed again
    assert pipeline.messages(dlq) == []


def test_redrive_leaves_a_malformed_dead_letter_where_it_is_and_says_why(pipeline, capsys):
    dlq = pipeline.stack.ref("WorkflowDeadLetterQueue")
    pipeline.sqs.send_message(QueueUrl=dlq, MessageBody='{"record": {"item_id": "x"}}')

    assert redrive.main(["workflow", "--dlq-url", dlq, "--state-machine-arn", pipeline.state_machine_arn, *retention(pipeline)]) == 1

    assert "left on the queue" in capsys.readouterr().err
    assert len(pipeline.messages(dlq)) == 1


def test_redrive_returns_dead_lettered_tickets_to_the_ticket_queue(pipeline, ticket, capsys):
    dlq, queue = pipeline.stack.ref("TicketDeadLetterQueue"), pipeline.stack.ref("TicketQueue")
    pipeline.sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(ticket))
    pipeline.sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(dict(ticket, ticket_id="T-BAD", channel="fax")))

    assert redrive.main(["tickets", "--dlq-url", dlq, "--queue-url", queue]) == 1  # one could not be redriven

    assert [m["ticket_id"] for m in pipeline.messages(queue)] == ["T-8001"]
    (still,) = pipeline.messages(dlq)
    assert still["ticket_id"] == "T-BAD"
    assert "channel" in capsys.readouterr().err


def test_a_dead_lettered_ticket_in_an_sns_notification_is_redriven_as_the_intake_reads_it(pipeline, ticket, capsys):
    dlq, queue = pipeline.stack.ref("TicketDeadLetterQueue"), pipeline.stack.ref("TicketQueue")
    wrapped = json.loads(json.loads((EVENTS / "ticket_sns_envelope.json").read_text())["Records"][0]["body"])
    wrapped["Message"] = json.dumps(dict(ticket, ticket_id="T-SNS"))
    pipeline.sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(wrapped))

    assert redrive.main(["tickets", "--dlq-url", dlq, "--queue-url", queue]) == 0

    (back,) = pipeline.messages(queue)
    assert back["Message"] == wrapped["Message"] and not pipeline.messages(dlq)


def test_redrive_puts_dead_lettered_incidents_back_on_the_bus(pipeline, incident_data, capsys):
    dlq = pipeline.stack.ref("IncidentDeadLetterQueue")
    event = eventbridge(incident_data)
    # Lambda's OnFailure record (handler failed) and EventBridge's rule DLQ message (the event itself).
    on_failure = {"version": "1.0", "requestContext": {"condition": "RetriesExhausted", "approximateInvokeCount": 3},
                  "requestPayload": event, "responsePayload": {"errorMessage": "workflow unavailable"}}
    pipeline.sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(on_failure))
    pipeline.sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(dict(event, detail=dict(incident_data, incident_id="INC-2"))))

    assert redrive.main(["incidents", "--dlq-url", dlq, "--bus", pipeline.env["EVENT_BUS_NAME"]]) == 0

    delivered = pipeline.stack.rule_events("IncidentIntakeFunction", "IncidentReported")
    assert sorted(e["detail"]["incident_id"] for e in delivered) == ["INC-2", "INC-2001"]
    assert {e["detail-type"] for e in delivered} == {"Incident Reported"}
    assert pipeline.messages(dlq) == []
    assert "workflow unavailable" in capsys.readouterr().out


def test_the_same_id_from_two_sources_is_two_items(pipeline, incidents, incident_data):
    app, stub = incidents
    for _ in range(2):
        stub.answer(batch_body(make_result("priority", PRIORITY_OPTIONS, [0, 6.0, 0, 0]),
                               make_result("team", TEAM_OPTIONS, [6.0, 0, 0, 0])))
    first = dict(incident_data, incident_id="123", source="cloudwatch")
    second = dict(incident_data, incident_id="123", source="datadog")

    routed = [app.lambda_handler(eventbridge(detail), FakeLambdaContext()) for detail in (first, second)]

    assert [r["started"] for r in routed] == [True, True]
    assert routed[0]["execution_name"] != routed[1]["execution_name"]
    assert sorted(executions(pipeline).values()) == ["SUCCEEDED", "SUCCEEDED"]
    assert len(pipeline.queues_holding("123")["platform-oncall"]) == 2


@pytest.fixture
def incident_data() -> dict:
    return {"incident_id": "INC-2001", "title": "Checkout API error rate above 20%",
            "description": "5xx responses from checkout-api rose to 23% after the deploy.",
            "service": "checkout-api", "severity": "sev2", "source": "cloudwatch",
            "reported_at": "2026-11-29T12:00:00Z"}


# ------------------------------------------------------------------------ raw source events
class LambdaService:
    """Stands in for Lambda's asynchronous invoke (moto cannot run our function): the invoked
    payload goes to the real incident-intake handler, as Lambda would hand it over."""

    def __init__(self, app):
        self.app, self.invoked = app, []

    def invoke(self, FunctionName, InvocationType, Payload):
        assert InvocationType == "Event"
        self.invoked.append(FunctionName)
        self.app.lambda_handler(json.loads(Payload), FakeLambdaContext())
        return {"StatusCode": 202}


def test_redrive_sends_a_parked_source_event_back_once_the_policy_maps_it(pipeline, incidents, tmp_path, capsys,
                                                                           monkeypatch):
    from decision_router.adapters.functions import AsyncFunction
    from decision_router.domain.policies import POLICY_DIR
    from tests.functions.conftest import EVENTS

    app, stub = incidents
    dlq = pipeline.stack.ref("IncidentDeadLetterQueue")
    grafana = json.loads((EVENTS / "grafana_alerting_webhook.json").read_text())
    # A deployment whose policy had no `grafana` table failed on this event: Lambda's on-failure record.
    on_failure = {"version": "1.0", "requestContext": {"condition": "RetriesExhausted", "approximateInvokeCount": 3},
                  "requestPayload": grafana,
                  "responsePayload": {"errorMessage": "the incident policy has no source_severity table for 'grafana'"}}
    pipeline.sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(on_failure))
    unknown = dict(grafana, **{"detail-type": "Grafana Something Else", "id": "unknown-1"})
    pipeline.sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(unknown), MessageAttributes={
        "failure_reason": {"DataType": "String", "StringValue": "not an incident event this intake maps"}})
    raw = json.loads((POLICY_DIR / "incident.json").read_text())  # the letters-only copy the intake loads
    del raw["source_severity"]["grafana"]
    (tmp_path / "before").mkdir()
    broken = tmp_path / "before" / "incident.json"
    broken.write_text(json.dumps(raw))
    lambda_service = LambdaService(app)
    monkeypatch.setattr(AsyncFunction, "_new_client", lambda self: lambda_service)
    function = ["--function", "decision-router-IncidentIntakeFunction"]

    assert redrive.main(["incidents", "--dlq-url", dlq, *function, "--policy", str(broken)]) == 1  # not fixed yet
    err = capsys.readouterr().err
    assert "still not mapped" in err and "no source_severity table for 'grafana'" in err
    assert lambda_service.invoked == []

    stub.answer(body(TEAM_OPTIONS, [0, 0, 0, 6.0], decision_id="team"))  # sev1: P1 by rule
    assert redrive.main(["incidents", "--dlq-url", dlq, *function]) == 1  # the shipped policy maps it
    out, err = capsys.readouterr()
    assert "sent to decision-router-IncidentIntakeFunction again" in out and "redriven 1, left 1" in out
    assert "'Grafana Something Else' is not an incident event" in err  # still unknown: stays, with the reason
    assert lambda_service.invoked == ["decision-router-IncidentIntakeFunction"]
    assert list(executions(pipeline).values()) == ["SUCCEEDED"]  # routed (its second alert joined it)
    (left,) = pipeline.messages(dlq)
    assert left["id"] == "unknown-1"
