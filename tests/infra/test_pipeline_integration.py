"""Handlers -> workflow, end to end inside one process: the real intake handlers with the
`events/` samples, the real decision server on the embedded model (boto3 `sagemaker-runtime`
pointed at it), the template's resources in moto, the real ASL executed by moto, and the real
review function completing whatever went to review.

The embedded model is tiny and decides weakly, so these tests never expect particular answers:
each item is followed through its own decision record (auto -> its destination; review -> the
reviewer's choice), and the assertion is that every valid item ends in exactly one queue with
exactly one audit record -- nothing lost, nothing routed twice."""

from __future__ import annotations

import json
import time
from pathlib import Path

import boto3
import pytest

from decision_router.domain.policies import load_policy
from decision_router.domain.records import execution_name
from decision_router.intake.incidents import IncidentIntake
from decision_router.intake.pipeline import Intake
from decision_router.intake.tickets import TicketIntake
from decision_router.items import InvalidItem, parse_item
from incident_intake import app as incident_app
from review import app as review_app
from tests.functions.sts_stand_in import ALICE, StsStandIn
from ticket_intake import app as ticket_app

pytestmark = [pytest.mark.model, pytest.mark.stack]

EVENTS = Path(__file__).resolve().parents[2] / "events"


@pytest.fixture
def wire(pipeline, monkeypatch, decision_server_url):
    """Give the process a function's environment from template.yaml (endpoint -> local server)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", decision_server_url)
    # Handlers keep their AWS clients at module level: start each test with fresh ones.
    ticket_intake = Intake("ticket", logger=ticket_app.logger, metrics=ticket_app.metrics)
    monkeypatch.setattr(ticket_app, "intake", ticket_intake)
    monkeypatch.setattr(ticket_app, "tickets", TicketIntake(ticket_intake, logger=ticket_app.logger,
                                                            metrics=ticket_app.metrics))
    incident_intake = Intake("incident", logger=incident_app.logger, metrics=incident_app.metrics)
    monkeypatch.setattr(incident_app, "intake", incident_intake)
    monkeypatch.setattr(incident_app, "incidents", IncidentIntake(incident_intake, logger=incident_app.logger,
                                                                  metrics=incident_app.metrics))
    monkeypatch.setattr(review_app, "WIRING", review_app.Wiring())  # a cold start on this environment

    def use(function: str) -> None:
        for name, value in pipeline.stack.function_environment(function).items():
            monkeypatch.setenv(name, value)

    return use


def settle(pipeline, kind: str, item_ids: list[str], wire, lambda_context) -> dict[str, str]:
    """Complete every pending review (the reviewer accepts the suggestion), wait for every
    route (an execution, or an automatic route the intake delivered itself); returns item id ->
    the target it was finally routed to."""
    records = {}
    for name, route in pipeline.routes().items():
        record = route.record.model_dump(mode="json")
        if record["item_kind"] == kind and record["item_id"] in item_ids:
            assert name == execution_name(kind, record["item_id"], record["item_key"])
            assert record["item_id"] not in records, f"{record['item_id']} routed twice"
            records[record["item_id"]] = (name, record)
    assert sorted(records) == sorted(item_ids), "one route per item"
    awaiting = {i for i, (_, record) in records.items() if record["route"] == "review"}
    reviews: dict[str, dict] = {}
    deadline = time.monotonic() + 30
    while awaiting - set(reviews) and time.monotonic() < deadline:
        for message in pipeline.review_requests(wait_seconds=1):
            reviews[message["record"]["item_id"]] = message
    assert set(reviews) == awaiting, "every item sent to review has a pending review message"

    wire("ReviewCompletionFunction")
    StsStandIn().attach(review_app.WIRING.caller_identity.client)  # STS, checking the proofs' signatures
    targets = {}
    for item_id, (_, record) in records.items():
        policy = load_policy(record["policy"]["name"])
        if record["route"] == "review":
            answers = {d["question"]: d["option_id"] or policy.question(d["question"]).option_ids[0]
                       for d in record["decisions"]}
            for question in policy.questions:  # a question the record did not ask (none today) still needs an answer
                answers.setdefault(question.id, question.option_ids[0])
            output = review_app.lambda_handler(ALICE.prove({"task_token": reviews[item_id]["task_token"],
                                                            "execution_name": reviews[item_id]["execution_name"],
                                                            "answers": answers}, lambda_context.function_name),
                                               lambda_context)
            targets[item_id] = output["destination"]["target"]
        else:
            targets[item_id] = record["destination"]["target"]
    statuses = pipeline.settled()
    for item_id, (name, _) in records.items():
        assert statuses[name] == "SUCCEEDED", item_id
    return targets


def assert_routed_once_and_audited(pipeline, targets: dict[str, str], kind: str) -> None:
    routed = pipeline.routed()
    assert {item: {t: len(m) for t, m in held.items()} for item, held in routed.items()} == {
        item: {target: 1} for item, target in targets.items()}
    for item_id, target in targets.items():
        (audit,) = pipeline.audit(item_id)
        assert audit["item_kind"] == kind
        assert json.loads(audit["outcome_detail"])["target"] == target
        if audit["outcome"] == "reviewed":
            assert pipeline.labelled_example(audit["policy_name"], item_id)["reviewer"] == "alice@example.com"
        else:
            assert audit["outcome"] == "auto_routed"
        for decision in json.loads(audit["decisions"]):
            assert decision["source"] in ("rule", "model", "endpoint_error")
            if decision["source"] == "model":  # real model metadata reached the audit trail
                assert len(decision["model"]["sha256"]) == 64 and decision["probabilities"]


def test_ticket_batch_sample_is_routed_end_to_end(pipeline, wire, lambda_context):
    event = json.loads((EVENTS / "ticket_batch.json").read_text())
    valid, malformed = [], []
    for record in event["Records"]:
        try:
            valid.append(parse_item("ticket", record["body"]).ticket_id)
        except InvalidItem:
            malformed.append(record["messageId"])
    assert valid and malformed, "the sample holds good tickets and a malformed one"
    wire("TicketIntakeFunction")

    response = ticket_app.lambda_handler(event, lambda_context)

    # The malformed ticket can never succeed: it is parked in the ticket DLQ at once, with the reason.
    assert response["batchItemFailures"] == []
    (parked,) = pipeline.messages(pipeline.stack.ref("TicketDeadLetterQueue"))
    assert parked["ticket_id"] in {json.loads(r["body"]).get("ticket_id") for r in event["Records"]
                                   if r["messageId"] in malformed}
    targets = settle(pipeline, "ticket", valid, wire, lambda_context)
    assert_routed_once_and_audited(pipeline, targets, "ticket")

    # A redelivered batch routes nothing twice.
    wire("TicketIntakeFunction")
    ticket_app.lambda_handler(event, lambda_context)
    assert pipeline.routed() == {}
    assert all(len(pipeline.audit(i)) == 1 for i in valid)


def test_incident_from_the_bus_is_routed_and_sev1_escalates(pipeline, wire, lambda_context):
    sample = json.loads((EVENTS / "incident_reported.json").read_text())
    sev1 = dict(sample["detail"], incident_id="INC-9001", severity="sev1")
    # Publish on the template's bus: its rule (pattern from template.yaml) delivers to the function.
    entries = [{"EventBusName": pipeline.env["EVENT_BUS_NAME"], "Source": sample["source"],
                "DetailType": sample["detail-type"], "Detail": json.dumps(detail)}
               for detail in (sample["detail"], sev1)]
    entries.append(dict(entries[0], DetailType="Incident Resolved"))  # not for this function
    assert boto3.client("events").put_events(Entries=entries)["FailedEntryCount"] == 0
    delivered = pipeline.stack.rule_events("IncidentIntakeFunction", "IncidentReported")
    assert sorted(e["detail"]["incident_id"] for e in delivered) == ["INC-2001", "INC-9001"]
    wire("IncidentIntakeFunction")

    for event in delivered:
        incident_app.lambda_handler(event, lambda_context)

    targets = settle(pipeline, "incident", ["INC-2001", "INC-9001"], wire, lambda_context)
    assert_routed_once_and_audited(pipeline, targets, "incident")
    (audit,) = pipeline.audit("INC-9001")
    priority = next(d for d in json.loads(audit["decisions"]) if d["question"] == "priority")
    assert (priority["source"], priority["option_id"]) == ("rule", "P1")  # the model never set it
    escalated = {page["item_id"] for page in pipeline.pages()}  # paged through the template's rule
    assert "INC-9001" in escalated
