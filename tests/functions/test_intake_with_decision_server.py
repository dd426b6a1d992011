"""The intake handlers against the real decision container (embedded SmolLM2 GGUF behind the
real HTTP server), reached through boto3's sagemaker-runtime client exactly as in AWS
(AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME points it at the local server; moto serves the rest).

The tiny model's answers are not asserted (they are weak); what is asserted is that its real
output is calibrated, judged and routed consistently."""

from __future__ import annotations

import json
import math

import boto3
import pytest
from moto import mock_aws

from decision_router.config import Settings
from decision_router.domain.records import DecisionRecord
from decision_router.intake.incidents import IncidentIntake
from decision_router.intake.pipeline import Intake
from decision_router.intake.tickets import TicketIntake
from decision_router.intake.wiring import Wiring
from local.cloudformation import Stack
from local.settling import routes
from tests.functions.conftest import EVENTS

pytestmark = [pytest.mark.model, pytest.mark.stack]
ENDPOINT = "decision-endpoint"


@pytest.fixture
def stack(monkeypatch, decision_server_url):
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", decision_server_url)
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": ENDPOINT})
        stack.create()
        yield stack


def use_intake(monkeypatch, stack, app, kind, function):
    env = stack.function_environment(function)
    intake = Intake(kind, logger=app.logger, metrics=app.metrics, wiring=Wiring(Settings.from_env(env)))
    monkeypatch.setattr(app, "intake", intake)
    if hasattr(app, "incidents"):  # the incident handler's flow holds its intake
        monkeypatch.setattr(app, "incidents", IncidentIntake(intake, logger=app.logger, metrics=app.metrics))
    if hasattr(app, "tickets"):  # so does the ticket handler's
        monkeypatch.setattr(app, "tickets", TicketIntake(intake, logger=app.logger, metrics=app.metrics))


def records(stack) -> dict[str, DecisionRecord]:
    """Item id -> the record it was routed with: an execution's input, or the audit row of an
    automatic route the intake delivered itself."""
    found = routes(boto3.client("dynamodb"), stack.ref("AuditTable"), boto3.client("stepfunctions"),
                   stack.ref("RoutingStateMachine"))
    return {route.record.item_id: route.record for route in found.values()}


def assert_consistent(record: DecisionRecord, embedded_sha256: str) -> None:
    for decision in record.decisions:
        if decision.source != "model":
            continue
        probabilities = list(decision.probabilities.values())
        assert math.isclose(sum(probabilities), 1.0, rel_tol=1e-9)
        assert decision.option_id == max(decision.probabilities, key=decision.probabilities.get)
        assert 0.0 < decision.allowed_token_mass <= 1.0
        assert decision.model.sha256 == embedded_sha256 and len(decision.prompt_sha256) == 64
        assert decision.passed == (not decision.reasons)
    assert (record.route == "auto") == all(d.passed for d in record.decisions)
    assert (record.destination is not None) == (record.route == "auto")


def test_ticket_batch_through_the_real_container(monkeypatch, stack, embedded_engine):
    from tests.fakes.worlds import MotoWorld
    from tests.functions.test_intake_handlers import FakeLambdaContext
    from ticket_intake import app

    use_intake(monkeypatch, stack, app, "ticket", "TicketIntakeFunction")
    event = json.loads((EVENTS / "ticket_batch.json").read_text())
    response = app.lambda_handler(event, FakeLambdaContext())
    malformed = next(r for r in event["Records"] if "T-1099" in r["body"])
    assert response == {"batchItemFailures": []}  # the malformed ticket is parked in the DLQ at once, alone
    (parked,) = MotoWorld(stack).dead_letters()
    assert parked["Body"] == malformed["body"]

    found = records(stack)
    assert set(found) == {"T-1001", "T-1003", "T-1006", "T-1005"}
    sha = embedded_engine.model_info.sha256
    for item_id in ("T-1001", "T-1003", "T-1005"):
        assert found[item_id].decisions[0].source == "model"  # the container answered, no endpoint_error
        assert_consistent(found[item_id], sha)
    assert found["T-1006"].decisions[0].source == "rule"


def test_incident_batch_through_the_real_container(monkeypatch, stack, embedded_engine):
    from incident_intake import app
    from tests.functions.test_intake_handlers import FakeLambdaContext

    use_intake(monkeypatch, stack, app, "incident", "IncidentIntakeFunction")
    summary = app.lambda_handler(json.loads((EVENTS / "incident_reported.json").read_text()), FakeLambdaContext())
    assert summary["sources"] == {"priority": "model", "team": "model"}
    record = records(stack)["INC-2001"]
    assert_consistent(record, embedded_engine.model_info.sha256)
    priority, team = record.decisions
    assert set(priority.probabilities) == {"P1", "P2", "P3", "P4"}
    assert set(team.probabilities) == {"platform", "data", "security", "application"}


def test_a_150_option_ticket_question_routes_through_the_real_container(monkeypatch, stack, embedded_engine, tmp_path):
    """The endpoint is asked the signals decision (two options, inside the 16-letter contract) and
    the head answers from the real model's hidden state and the ticket's words."""
    from tests.functions.many_options import install
    from tests.functions.test_intake_handlers import FakeLambdaContext
    from ticket_intake import app

    model = embedded_engine.model_info
    policy = install(tmp_path, 150, model_sha256=model.sha256, hidden_size=model.hidden_size)
    env = dict(stack.function_environment("TicketIntakeFunction"), POLICY_NAME=str(policy))
    intake = Intake("ticket", logger=app.logger, metrics=app.metrics, wiring=Wiring(Settings.from_env(env)))
    monkeypatch.setattr(app, "intake", intake)
    monkeypatch.setattr(app, "tickets", TicketIntake(intake, logger=app.logger, metrics=app.metrics))
    event = json.loads((EVENTS / "ticket_batch.json").read_text())
    ticket = json.loads(event["Records"][0]["body"])
    ticket.update(ticket_id="T-150", subject="intent137 again", body="Please handle intent137 for my account.")
    event["Records"] = [dict(event["Records"][0], body=json.dumps(ticket))]
    assert app.lambda_handler(event, FakeLambdaContext()) == {"batchItemFailures": []}
    record = records(stack)["T-150"]
    (decision,) = record.decisions
    assert (decision.source, decision.readout, decision.option_id) == ("model", "head", "intent137")
    assert decision.model.sha256 == model.sha256 and decision.letter_probabilities is None
    assert len(decision.probabilities) == 150 and record.route == "auto"
    assert record.destination.target == "technical-support"  # intent137: targets cycle over the five ticket queues
    assert len(record.review.choices) == 150
