"""Ticket and incident intake handlers with the `events/` samples, on the template's names over
in-memory fakes of the ports (`tests/fakes/`), and two smoke tests of the same flows on the
template's resources in moto; the endpoint is the real adapter on a botocore Stubber (SageMaker
errors cannot be produced by a local server or moto), so its retries and faults are its own."""

from __future__ import annotations

import io
import json
import re
import shutil
import socket
import threading
import time
from dataclasses import dataclass

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber
from moto import mock_aws

from decision_contract import BatchDecisionResponse, BatchTiming, SingleDecisionResponse
from decision_router.adapters.endpoint import DecisionEndpoint
from decision_router.domain.linking import THRESHOLD, filing_keys
from decision_router.domain.policies import load_policy
from decision_router.domain.records import execution_name
from decision_router.intake.incidents import IncidentIntake
from decision_router.intake.pipeline import Intake
from decision_router.intake.tickets import TicketIntake, ticket_json
from decision_router.items import InvalidItem, parse_item
from local.cloudformation import Stack
from tests.fakes.intake import FakeQueue
from tests.fakes.world import World
from tests.fakes.worlds import FakeWorld, MotoWorld
from tests.functions.conftest import EVENTS, NO_CAPACITY_MESSAGE, make_result

ENDPOINT = "decision-endpoint"
TICKET_OPTIONS = load_policy("support-ticket").questions[0].option_ids
PRIORITY_OPTIONS = load_policy("incident").question("priority").option_ids
TEAM_OPTIONS = load_policy("incident").question("team").option_ids


@dataclass
class FakeLambdaContext:
    """Lambda's context object (no Lambda runtime here); 5 minutes left, like the template's timeout."""

    function_name: str = "decision-router-test"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:decision-router-test"
    aws_request_id: str = "5b2a5d0e-0000-4000-8000-000000000000"
    remaining_ms: int = 300_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@pytest.fixture
def context():
    return FakeLambdaContext()


@pytest.fixture
def world(request):
    """The fakes (inside mock_aws all the same, so a call no fake answers fails at once against an
    empty moto instead of reaching for an account), or, for a test marked `ON_THE_STACK`, also the
    template's resources in moto."""
    with mock_aws():
        yield MotoWorld() if getattr(request, "param", "fakes") == "moto" else FakeWorld()


#: A smoke test: the same flow on the fakes and on the stack in moto (the template's names, the
#: functions' own wiring, the real tables, queues and state machine).
ON_THE_STACK = pytest.mark.parametrize("world", ["fakes", pytest.param("moto", marks=pytest.mark.stack)], indirect=True)
#: What only the real adapters show (their traces).
ONLY_ON_THE_STACK = pytest.mark.parametrize("world", [pytest.param("moto", marks=pytest.mark.stack)], indirect=True)


def body(option_ids, logits, decision_id="queue", mass=0.9) -> bytes:
    return SingleDecisionResponse(result=make_result(decision_id, option_ids, logits, mass=mass)).model_dump_json().encode()


def batch_body(*results) -> bytes:
    timing = BatchTiming(shared_prefix_tokens=80, shared_prefix_seconds=0.01, total_seconds=0.02)
    return BatchDecisionResponse(results=list(results), timing=timing).model_dump_json().encode()


class StubbedEndpoint:
    """A DecisionEndpoint on a real boto3 sagemaker-runtime client whose answers are queued in a Stubber."""

    def __init__(self, max_attempts: int = 4):
        self.client = boto3.client("sagemaker-runtime", region_name="us-east-1")
        self.stubber = Stubber(self.client)
        self.requests: list[dict] = []
        self.client.meta.events.register("before-parameter-build.sagemaker-runtime.InvokeEndpoint",
                                         lambda params, **_: self.requests.append(json.loads(params["Body"])))
        self.endpoint = DecisionEndpoint(ENDPOINT, client=self.client, max_attempts=max_attempts, sleep=lambda s: None)
        self.stubber.activate()

    params = {"EndpointName": ENDPOINT, "Body": ANY, "ContentType": "application/json", "Accept": "application/json"}

    def answer(self, raw: bytes) -> None:
        self.stubber.add_response("invoke_endpoint", {"Body": StreamingBody(io.BytesIO(raw), len(raw)),
                                                      "ContentType": "application/json"}, self.params)

    def model_error(self, original_status: int, message: str = "") -> None:
        message = message or json.dumps({"error": {"code": "busy", "message": "model busy", "retryable": original_status == 503}})
        self.stubber.add_client_error("invoke_endpoint", service_error_code="ModelError", service_message="Received server error",
                                      http_status_code=424, expected_params=self.params,
                                      modeled_fields={"OriginalStatusCode": original_status, "OriginalMessage": message})

    def no_capacity(self) -> None:
        """The endpoint has scaled to zero: SageMaker refuses the request until a copy runs again."""
        self.stubber.add_client_error("invoke_endpoint", service_error_code="ValidationError",
                                      service_message=NO_CAPACITY_MESSAGE, http_status_code=400, expected_params=self.params)

    def throttle(self) -> None:
        self.stubber.add_client_error("invoke_endpoint", service_error_code="ThrottlingException",
                                      service_message="Rate exceeded", http_status_code=400, expected_params=self.params)


def make_intake(monkeypatch, world: World | Stack, app, kind: str, function: str, endpoint,
                env: dict[str, str] | None = None) -> Intake:
    """The handler module's intake over `world`'s parts (a Stack created in moto: its functions' own
    wiring); `env`: settings that replace the function's own (another policy file)."""
    if isinstance(world, Stack):
        world = MotoWorld(world)
    env = {**world.environment(function), **(env or {})}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    intake = Intake(kind, logger=app.logger, metrics=app.metrics, wiring=world.wiring(function, endpoint=endpoint, env=env))
    monkeypatch.setattr(app, "intake", intake)
    if hasattr(app, "incidents"):  # the incident handler's flow holds its intake
        monkeypatch.setattr(app, "incidents", IncidentIntake(intake, logger=app.logger, metrics=app.metrics))
    if hasattr(app, "tickets"):  # so does the ticket handler's
        monkeypatch.setattr(app, "tickets", TicketIntake(intake, logger=app.logger, metrics=app.metrics))
    return intake


def ticket_flow(monkeypatch, world):
    from ticket_intake import app

    stub = StubbedEndpoint()
    make_intake(monkeypatch, world, app, "ticket", "TicketIntakeFunction", stub.endpoint)
    return app, stub


def incident_flow(monkeypatch, world):
    from incident_intake import app

    stub = StubbedEndpoint()
    make_intake(monkeypatch, world, app, "incident", "IncidentIntakeFunction", stub.endpoint)
    return app, stub


@pytest.fixture
def tickets(monkeypatch, world):
    return ticket_flow(monkeypatch, world)


@pytest.fixture
def incidents(monkeypatch, world):
    return incident_flow(monkeypatch, world)


def ticket_execution(ticket: dict) -> str:
    item = parse_item("ticket", ticket)
    return execution_name(item.kind, item.item_id, item.key)


def ticket_event(*tickets: dict) -> dict:
    template = json.loads((EVENTS / "ticket_batch.json").read_text())["Records"][0]
    return {"Records": [dict(template, messageId=f"m-{i}", body=json.dumps(t)) for i, t in enumerate(tickets)]}


def emf(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]


# ----------------------------------------------------------------------------- tickets
@ON_THE_STACK
def test_ticket_batch_sample_malformed_is_dead_lettered_alone_and_rules_skip_the_model(tickets, world, context, capsys):
    app, stub = tickets
    # the letters' answers; the shipped head reads the words alone and decides each itself
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))   # T-1001: confident billing
    stub.answer(body(TICKET_OPTIONS, [1.0, 0.2, 1.1, 0.9, 0]))  # T-1003: unsure
    stub.answer(body(TICKET_OPTIONS, [0, 0, 0, 0, 7.0]))   # T-1005: confident sales
    event = json.loads((EVENTS / "ticket_batch.json").read_text())

    response = app.lambda_handler(event, context)

    # The malformed ticket can never succeed: it is parked in the DLQ at once, with the reason.
    malformed = next(r for r in event["Records"] if "T-1099" in r["body"])
    assert response == {"batchItemFailures": []}
    (parked,) = world.dead_letters()
    assert parked["Body"] == malformed["body"]
    stub.stubber.assert_no_pending_responses()
    assert len(stub.requests) == 3  # T-1006 came from the billing portal: decided by rule, no model call
    assert all("decision" in r and r["decision"]["id"] == "queue" for r in stub.requests)

    records = world.executions()
    assert sorted(r.item_id for r in records.values()) == ["T-1001", "T-1003", "T-1005", "T-1006"]
    assert all(name == execution_name(r.item_kind, r.item_id, r.item_key) for name, r in records.items())
    by_id = {r.item_id: r for r in records.values()}
    assert (by_id["T-1001"].route, by_id["T-1001"].destination.target) == ("auto", "billing")
    assert by_id["T-1001"].destination.queue_url == world.ref("BillingQueue")
    # the letters were unsure of T-1003 (an export failing with error 500); the head is sure of it
    assert (by_id["T-1003"].route, by_id["T-1003"].destination.target) == ("auto", "technical-support")
    assert by_id["T-1003"].decisions[0].readout == "head" and "queue_url" not in by_id["T-1003"].review.model_dump()
    assert by_id["T-1006"].decisions[0].source == "rule" and by_id["T-1006"].decisions[0].rule == "billing-portal-to-billing"
    assert (by_id["T-1005"].route, by_id["T-1005"].destination.target) == ("auto", "sales")

    metrics = emf(capsys)
    assert metrics, "EMF metrics were not printed"
    totals: dict[str, float] = {}
    for blob in metrics:
        assert blob["policy"] == "support-ticket"
        for name in ("Decisions", "AutoRouted", "SentToReview", "RuleHits", "EndpointErrors", "InvalidItems"):
            value = blob.get(name)
            if value is not None:
                totals[name] = totals.get(name, 0) + (sum(value) if isinstance(value, list) else value)
    assert totals == {"Decisions": 4, "AutoRouted": 4, "RuleHits": 1, "EndpointErrors": 0, "InvalidItems": 1}


def test_an_invalid_ticket_is_dead_lettered_at_once_with_the_reason(tickets, world, context, ticket_data):
    """Before: the invalid ticket failed its record, was received 4 times and reached the DLQ with
    nothing saying why. Now it is parked at once, the reason in its message attributes."""
    app, stub = tickets
    bad = dict(ticket_data, ticket_id="T-BAD", channel="fax")

    assert app.lambda_handler(ticket_event(bad), context) == {"batchItemFailures": []}

    (parked,) = world.dead_letters()
    assert json.loads(parked["Body"]) == bad
    attributes = {name: value["StringValue"] for name, value in parked["MessageAttributes"].items()}
    assert attributes["failure_kind"] == "invalid_item" and attributes["item_id"] == "T-BAD"
    assert "channel: Input should be" in attributes["failure_reason"]
    assert attributes["source_message_id"] == "m-0"
    assert stub.requests == [] and world.executions() == {}


def test_malformed_ticket_error_names_the_fields(tickets, context, capsys):
    app, _ = tickets
    bad = json.loads((EVENTS / "ticket_batch.json").read_text())["Records"][3]
    with pytest.raises(InvalidItem) as info:
        app.intake.handle(bad["body"], context)
    assert "customer.tier: Field required" in str(info.value) and "channel: Input should be" in str(info.value)


def test_duplicate_delivery_is_routed_once(tickets, world, context, ticket_data):
    app, stub = tickets
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    event = ticket_event(ticket_data, ticket_data)  # duplicated inside one batch …
    assert app.lambda_handler(event, context) == {"batchItemFailures": []}
    assert app.lambda_handler(event, context) == {"batchItemFailures": []}  # … and redelivered
    assert len(stub.requests) == 1
    assert list(world.executions()) == [ticket_execution(ticket_data)]


def test_already_started_execution_counts_as_routed(tickets, world, context, ticket_data):
    """Idempotency record expired (or lost) but the item was delivered already (its audit row
    claimed and marked delivered): no second route."""
    app, stub = tickets
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    stub.answer(body(TICKET_OPTIONS, [0, 0, 0, 0, 6.0]))  # a different answer the second time
    record, _ = app.intake.router.decision_record(parse_item("ticket", ticket_data), app.intake.policy)
    # routed outside the idempotency store
    assert app.intake.wiring.direct_routes.deliver(record, ticket_execution(ticket_data)).delivered
    summary = app.intake.handle(json.dumps(ticket_data), context)
    assert summary["started"] is False and summary["execution_name"] == ticket_execution(ticket_data)
    (record,) = world.executions().values()
    assert record.destination.target == "billing"  # the first route stands


class InvocationEnded(BaseException):
    """What a Lambda timeout is to the handler: it ends mid-item, no `except Exception` runs."""


def test_a_lock_left_by_an_invocation_that_died_does_not_hold_the_ticket_back(
        tickets, world, context, ticket_data, monkeypatch, caplog):
    """The dead invocation's in-progress record holds until its deadline (minutes, past Lambda's async
    retries): the redelivery decides without the store, and routes the item once."""
    app, stub = tickets

    def dies(*args, **kwargs):
        raise InvocationEnded("Task timed out")

    with monkeypatch.context() as patch:
        patch.setattr(stub.endpoint, "decide", dies)
        with pytest.raises(InvocationEnded):
            app.lambda_handler(ticket_event(ticket_data), context)
    assert world.idempotency_statuses() == ["INPROGRESS"]

    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    assert app.lambda_handler(ticket_event(ticket_data), context) == {"batchItemFailures": []}
    assert list(world.executions()) == [ticket_execution(ticket_data)]
    (warning,) = [r for r in caplog.records if "deciding without it" in r.getMessage()]
    assert warning.reason.startswith("IdempotencyAlreadyInProgressError")
    assert len(stub.requests) == 1  # the dead invocation never reached the endpoint


def test_an_idempotency_store_throttled_past_the_sdk_retries_does_not_hold_the_ticket_back(
        tickets, world, context, ticket_data, monkeypatch):
    def throttled(*args, **kwargs):
        raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "Rate exceeded"}},
                          "PutItem")

    app, stub = tickets
    monkeypatch.setattr(world.idempotency, "_put_record", throttled)
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    assert app.lambda_handler(ticket_event(ticket_data), context) == {"batchItemFailures": []}
    (record,) = world.executions().values()
    assert record.route == "auto" and world.idempotency_statuses() == []


@ONLY_ON_THE_STACK
def test_the_handler_the_judging_the_endpoint_call_and_the_workflow_start_are_traced(
        traces, tickets, world, context, ticket_data):
    app, stub = tickets
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    assert app.lambda_handler(ticket_event(ticket_data), context) == {"batchItemFailures": []}
    assert traces.subsegments == ["## lambda_handler", "## decision_router.intake.pipeline.Intake.observed_record",
                                  "## decision_router.adapters.endpoint.DecisionEndpoint.decide",
                                  "## decision_router.adapters.direct_routes.DirectRoutes.deliver"]
    traces.subsegments.clear()
    assert app.lambda_handler(ticket_event(ticket_data), context) == {"batchItemFailures": []}
    # a duplicate: judged once (the idempotency store answers), no second model call
    assert traces.subsegments == ["## lambda_handler", "## decision_router.adapters.direct_routes.DirectRoutes.deliver"]


@pytest.mark.parametrize(
    "faults, kind, attempts",
    [
        (["503"] * 4, "retryable_model_error", 4),
        (["throttle"] * 4, "throttled", 4),
        (["400"], "model_error", 1),
        (["500"], "model_error", 1),
    ],
    ids=["model-error-503-exhausted", "throttling-exhausted", "model-error-400", "model-error-500"],
)
def test_endpoint_faults_send_the_ticket_to_review(tickets, world, context, ticket_data, faults, kind, attempts):
    app, stub = tickets
    for fault in faults:
        stub.throttle() if fault == "throttle" else stub.model_error(int(fault))
    assert app.lambda_handler(ticket_event(ticket_data), context) == {"batchItemFailures": []}
    stub.stubber.assert_no_pending_responses()
    (record,) = world.executions().values()
    decision = record.decisions[0]
    assert record.route == "review" and decision.source == "endpoint_error" and decision.option_id is None
    assert decision.error.kind == kind and decision.error.attempts == attempts
    assert record.route_reason.startswith(f"queue: endpoint error: {kind}")


def test_a_sampled_automatic_answer_is_held_for_review_as_a_check_once_per_item(tickets, world, context, ticket_data,
                                                                                 monkeypatch, capsys):
    from decision_router.domain.policies import PrecisionCheck, load_policy
    from decision_router.intake import pipeline

    def checking(name, **kwargs):
        policy = load_policy(name, **kwargs)
        return policy.model_copy(update={"precision_check": PrecisionCheck(sample_rate=1.0)})

    monkeypatch.setattr(pipeline, "load_policy", checking)
    app, stub = tickets
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    event = ticket_event(ticket_data)
    assert app.lambda_handler(event, context) == {"batchItemFailures": []}
    assert app.lambda_handler(event, context) == {"batchItemFailures": []}  # redelivered: judged once

    (record,) = world.executions().values()
    assert record.route == "review" and record.destination is None and record.checked == ["queue"]
    assert record.route_reason.startswith("precision check") and record.decisions[0].passed
    assert "queue_url" not in record.review.model_dump() and len(stub.requests) == 1
    sampled = [blob for blob in emf(capsys) if "PrecisionCheckSampled" in blob]
    assert [(b["policy"], b["question"]) for b in sampled] == [("support-ticket", "queue")]


def test_retryable_503_then_success_routes_automatically(tickets, world, context, ticket_data):
    app, stub = tickets
    stub.model_error(503)
    stub.throttle()
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    app.lambda_handler(ticket_event(ticket_data), context)
    (record,) = world.executions().values()
    assert record.route == "auto" and record.decisions[0].source == "model"


def test_container_400_detail_reaches_the_reviewer(tickets, world, context, ticket_data):
    app, stub = tickets
    stub.model_error(400, json.dumps({"error": {"code": "prompt_too_long", "message": "the prompt is 9000 tokens"}}))
    app.lambda_handler(ticket_event(ticket_data), context)
    (record,) = world.executions().values()
    assert record.decisions[0].error.message == "prompt_too_long: the prompt is 9000 tokens"
    assert record.decisions[0].error.status_code == 400


def test_no_retry_when_the_lambda_deadline_is_near(tickets, world, context, ticket_data, monkeypatch):
    app, stub = tickets
    stub.model_error(503)
    stub.endpoint.base_delay = stub.endpoint.max_delay = 8.0
    monkeypatch.setattr("decision_router.adapters.endpoint.random.uniform", lambda low, high: high)  # backoff 8 s
    # 6 s past the reserve: one attempt even on a loaded machine; after the 8 s backoff nothing is left.
    context.remaining_ms = 16_000
    app.lambda_handler(ticket_event(ticket_data), context)
    stub.stubber.assert_no_pending_responses()
    (record,) = world.executions().values()
    assert record.decisions[0].error.attempts == 1 and "no time left" in record.decisions[0].error.message


@pytest.fixture
def silent_server():
    """A TCP server that accepts connections and never answers: a real read timeout."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.server  # a TCP server that never answers
def test_read_timeout_sends_the_ticket_to_review(monkeypatch, world, context, ticket_data, silent_server):
    from ticket_intake import app

    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", silent_server)  # the adapter builds its own client
    endpoint = DecisionEndpoint(ENDPOINT, read_timeout=0.3, connect_timeout=1, max_attempts=2, sleep=lambda s: None)
    make_intake(monkeypatch, world, app, "ticket", "TicketIntakeFunction", endpoint)
    assert app.lambda_handler(ticket_event(ticket_data), context) == {"batchItemFailures": []}
    (record,) = world.executions().values()
    assert record.decisions[0].error.kind == "timeout" and record.decisions[0].error.attempts == 2


@pytest.mark.server  # a TCP server that never answers
def test_a_hanging_endpoint_is_cut_off_at_the_lambda_deadline_and_the_ticket_goes_to_review(
        monkeypatch, world, context, ticket_data, silent_server):
    """The very first call is bounded by the time left, not by the configured read timeout:
    14.5 s left minus the 10 s kept for starting the workflow: the calls wait 4.5 s at most in all
    (one of 4 s; or, when the handler took a while to get there, one of 2 s and one of 1 s)."""
    from ticket_intake import app

    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", silent_server)
    endpoint = DecisionEndpoint(ENDPOINT, read_timeout=30, connect_timeout=1, max_attempts=4, sleep=lambda s: None)
    make_intake(monkeypatch, world, app, "ticket", "TicketIntakeFunction", endpoint)
    context.remaining_ms = 14_500

    started = time.monotonic()
    assert app.lambda_handler(ticket_event(ticket_data), context) == {"batchItemFailures": []}
    assert time.monotonic() - started < 4.5 + 5.0  # the budget (plus the workflow start), not 30 s

    (record,) = world.executions().values()
    assert record.route == "review"
    error = record.decisions[0].error
    assert error.kind == "timeout" and 1 <= error.attempts <= 2
    waited = re.match(r"no answer within (\d+) s", error.message)
    assert waited and int(waited.group(1)) in (1, 2, 4), error.message  # not the configured 30 s
    assert "no time left for another attempt" in error.message


@pytest.mark.server  # a TCP server that never answers
def test_no_endpoint_call_when_the_deadline_has_passed(monkeypatch, world, context, ticket_data, silent_server):
    from ticket_intake import app

    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", silent_server)
    endpoint = DecisionEndpoint(ENDPOINT, read_timeout=30, connect_timeout=1, sleep=lambda s: None)
    make_intake(monkeypatch, world, app, "ticket", "TicketIntakeFunction", endpoint)
    context.remaining_ms = 10_500  # 0.5 s past the reserve: too little for a call

    app.lambda_handler(ticket_event(ticket_data), context)

    (record,) = world.executions().values()
    error = record.decisions[0].error
    assert record.route == "review" and error.kind == "timeout" and error.attempts == 0
    assert "not called" in error.message


def state_machine_gone(*args, **kwargs):
    raise ClientError({"Error": {"Code": "StateMachineDoesNotExist", "Message": "State Machine Does Not Exist"}},
                      "StartExecution")


def test_workflow_start_failure_fails_the_record_for_redelivery(tickets, world, context, ticket_data, monkeypatch):
    app, stub = tickets
    stub.model_error(400)  # no answer: the workflow asks for a review
    event = ticket_event(ticket_data)
    with monkeypatch.context() as patch:
        patch.setattr(world.workflow, "start", state_machine_gone)
        assert app.lambda_handler(event, context) == {"batchItemFailures": [{"itemIdentifier": "m-0"}]}

    assert app.lambda_handler(event, context) == {"batchItemFailures": []}  # redelivery routes it
    assert list(world.workflow.records) == [ticket_execution(ticket_data)]


def test_a_crash_after_the_claim_is_delivered_once_by_the_retry_after_the_lease(tickets, world, context, ticket_data):
    """A crash between the claim and the send: the row stays pending; a retry inside the claimant's
    lease (its invocation's deadline) waits, one after it takes the claim over and delivers once.
    A send that fails with an error hands the claim back: its retry delivers at once."""
    app, stub = tickets
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    event = ticket_event(ticket_data)
    name = ticket_execution(ticket_data)
    world.direct.fail_send = InvocationEnded("Task timed out")
    with pytest.raises(InvocationEnded):
        app.lambda_handler(event, context)
    assert world.audit.rows[("T-1001", name)]["outcome"] == "auto_routed"  # claimed, pending
    assert world.direct.pending and world.queue("BillingQueue").sent == []

    assert app.lambda_handler(event, context) == {"batchItemFailures": [{"itemIdentifier": "m-0"}]}  # held
    lease_ends = world.direct.pending[("T-1001", name)]
    world.direct.clock = lambda: lease_ends + 1
    world.direct.fail_send = ConnectionError("the team queue is unreachable")
    assert app.lambda_handler(event, context) == {"batchItemFailures": [{"itemIdentifier": "m-0"}]}  # taken over, failed
    assert app.lambda_handler(event, context) == {"batchItemFailures": []}  # handed back: delivered at once
    assert app.lambda_handler(event, context) == {"batchItemFailures": []}  # delivered: nothing more
    assert [json.loads(b)["execution_name"] for b, _ in world.queue("BillingQueue").sent] == [name]
    assert [e["execution_name"] for e in world.direct.events] == [name] and not world.direct.pending
    assert world.workflow.records == {}  # no execution of the workflow


# ----------------------------------------------------------------------------- scale to zero
def received_ticket(queue: FakeQueue, ticket: dict | None = None) -> dict:
    """An SQS event with one message of the ticket queue (its receipt handle and receive count),
    as Lambda would deliver it; `ticket` is sent first, else the waiting one is received."""
    message = queue.received(json.dumps(ticket)) if ticket is not None else next(queue.messages(1))
    template = json.loads((EVENTS / "ticket_batch.json").read_text())["Records"][0]
    attributes = dict(template["attributes"], ApproximateReceiveCount=str(queue.receive_count(message["MessageId"])))
    return {"Records": [dict(template, messageId=message["MessageId"], receiptHandle=message["ReceiptHandle"],
                             body=message["Body"], attributes=attributes)]}


def test_a_ticket_waits_while_the_endpoint_wakes_from_zero_then_is_routed(tickets, world, context, ticket_data, capsys):
    """No review while the endpoint scales out from zero: the record fails, the ticket is hidden
    for the wake-up wait (longer at each receive), no decision is kept, and the receive after the
    endpoint woke routes it."""
    app, stub = tickets
    queue = world.queue("TicketQueue")
    stub.no_capacity()
    stub.no_capacity()
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))

    for receive, wait in ((1, 360), (2, 600)):
        event = received_ticket(queue, ticket_data if receive == 1 else None)
        (record,) = event["Records"]
        assert record["attributes"]["ApproximateReceiveCount"] == str(receive)
        assert app.lambda_handler(event, context) == {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
        assert queue.hidden[-1] == (record["receiptHandle"], wait)
        assert world.executions() == {}  # not sent to review
        assert list(queue.messages(1)) == []  # hidden, not deleted
        queue.release({"ReceiptHandle": record["receiptHandle"]})  # time passes

    event = received_ticket(queue)
    assert app.lambda_handler(event, context) == {"batchItemFailures": []}
    stub.stubber.assert_no_pending_responses()
    (routed,) = world.executions().values()
    assert (routed.route, routed.destination.target) == ("auto", "billing")
    waiting = [blob["WaitingForCapacity"] for blob in emf(capsys) if "WaitingForCapacity" in blob]
    assert len(waiting) == 2 and all(blob == 1.0 or blob == [1.0] for blob in waiting)


def test_a_waiting_ticket_that_cannot_be_hidden_still_fails_its_record(tickets, world, context, ticket_data, caplog):
    """If ChangeMessageVisibility fails, the ticket comes back after the queue's own visibility timeout."""
    app, stub = tickets
    stub.no_capacity()
    event = received_ticket(FakeQueue("https://sqs.us-east-1.amazonaws.com/123456789012/another"), ticket_data)
    assert app.lambda_handler(event, context) == {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}
    assert world.executions() == {} and world.queue("TicketQueue").hidden == [(event["Records"][0]["receiptHandle"], 360)]
    assert any(r.getMessage().startswith("could not hide the waiting ticket") for r in caplog.records)


def test_an_incident_goes_to_review_at_once_while_the_endpoint_wakes(incidents, world, context, incident_data):
    """Incidents are urgent: no waiting minutes for the model; a person decides, told why."""
    app, stub = incidents
    stub.no_capacity()
    summary = app.lambda_handler(eventbridge(incident_data), context)
    stub.stubber.assert_no_pending_responses()
    assert summary["route"] == "review"
    (record,) = world.executions().values()
    errors = [d.error for d in record.decisions if d.source == "endpoint_error"]
    assert errors and all(e.kind == "no_capacity" and e.attempts == 1 for e in errors)
    assert "no_capacity" in record.route_reason and "scaled to zero" in record.route_reason


# ----------------------------------------------------------------------------- incidents
@ON_THE_STACK
def test_incident_sample_is_one_batched_request(letters_policies, incidents, world, context):
    app, stub = incidents
    stub.answer(batch_body(make_result("priority", PRIORITY_OPTIONS, [0.5, 6.0, 0, 0]),
                           make_result("team", TEAM_OPTIONS, [0, 0, 0, 6.0])))
    event = json.loads((EVENTS / "incident_reported.json").read_text())
    summary = app.lambda_handler(event, context)
    assert summary["route"] == "auto" and summary["target"] == "app-oncall" and summary["escalate"] is False
    (request,) = stub.requests
    assert [d["id"] for d in request["decisions"]] == ["priority", "team"]
    assert request["decisions"][0]["state"] == request["decisions"][1]["state"]
    (record,) = world.executions().values()
    assert record.destination.queue_url == world.ref("AppOncallQueue")


def test_sev1_rule_sends_only_the_team_question(incidents, world, context, incident_data):
    app, stub = incidents
    stub.answer(body(TEAM_OPTIONS, [0, 7.0, 0, 0], decision_id="team"))
    incident_data["severity"] = "sev1"
    app.lambda_handler(eventbridge(incident_data), context)
    (request,) = stub.requests
    assert request["decision"]["id"] == "team"
    (record,) = world.executions().values()
    assert [d.source for d in record.decisions] == ["rule", "model"]
    assert (record.route, record.destination.target, record.escalate) == ("auto", "data-oncall", True)


def test_rules_decide_everything_without_calling_the_endpoint(incidents, world, context, incident_data):
    app, stub = incidents
    incident_data.update(severity="sev1", source="aws.guardduty")
    app.lambda_handler(eventbridge(incident_data), context)
    assert stub.requests == []
    (record,) = world.executions().values()
    assert record.route == "auto" and record.destination.target == "security-oncall" and record.escalate


def test_incident_endpoint_failure_goes_to_review(incidents, world, context, incident_data):
    app, stub = incidents
    stub.model_error(500)
    summary = app.lambda_handler(eventbridge(incident_data), context)
    assert summary["route"] == "review" and summary["sources"] == {"priority": "endpoint_error", "team": "endpoint_error"}


def test_bad_incident_raises_for_lambda_retry_and_dlq(incidents, context, incident_data):
    app, _ = incidents
    incident_data["severity"] = "critical"
    with pytest.raises(InvalidItem, match="severity: Input should be"):
        app.lambda_handler(eventbridge(incident_data), context)
    # An event of a kind nothing maps is no retry's business: parked in the DLQ at once, with why.
    result = app.lambda_handler(eventbridge(incident_data, detail_type="Incident Resolved"), context)
    assert result["outcome"] == "dead_lettered" and "detail-type 'Incident Resolved'" in result["reason"]


def test_incident_workflow_failure_raises(incidents, world, context, incident_data, monkeypatch):
    app, stub = incidents
    incident_data.update(severity="sev1", source="aws.guardduty")
    monkeypatch.setattr(world.workflow, "start", state_machine_gone)
    with pytest.raises(Exception, match="StateMachineDoesNotExist|does not exist"):
        app.lambda_handler(eventbridge(incident_data), context)


def eventbridge(detail: dict, detail_type: str = "Incident Reported") -> dict:
    event = json.loads((EVENTS / "incident_reported.json").read_text())
    return dict(event, **{"detail-type": detail_type, "detail": detail})


# ----------------------------------------------------------------------------- learned heads
@pytest.fixture
def ticket_policy_with_head(monkeypatch, tmp_path):
    """The shipped policies, with a small head on the ticket queue bound to `HEAD_MODEL`."""
    from decision_router.domain import policies
    from tests.functions.test_heads import MODEL, head_for, install

    for path in policies.POLICY_DIR.glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    shipped = load_policy("support-ticket")
    install(tmp_path, json.loads((tmp_path / "support-ticket.json").read_text()), head_for(shipped, shipped.questions[0]),
            name="support-ticket.json")
    monkeypatch.setattr(policies, "POLICY_DIR", tmp_path)
    return MODEL


def head_body(model, hidden) -> bytes:
    result = make_result("queue", TICKET_OPTIONS, [2.0, 0, 0, 0, 0], mass=0.05)
    result = result.model_copy(update={"model": model, "hidden_state": hidden, "prompt_version": "direct-options-v1"})
    return SingleDecisionResponse(result=result).model_dump_json().encode()


def test_a_head_decides_when_it_fits_the_endpoints_model(ticket_policy_with_head, tickets, world, context, ticket_data, capsys):
    app, stub = tickets
    stub.answer(head_body(ticket_policy_with_head, [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 1.0]))
    app.lambda_handler(ticket_event(ticket_data), context)
    assert stub.requests[0]["decision"]["return_hidden_state"] is True  # asked for every question
    (record,) = world.executions().values()
    decision = record.decisions[0]
    assert decision.readout == "head" and decision.head_version == "test-1" and decision.head_skipped is None
    assert decision.letter_probabilities and decision.head_probabilities == decision.probabilities
    totals = metric_totals(emf(capsys), ("HeadDecisions", "HeadSkipped"))
    assert totals == {"HeadDecisions": 1, "HeadSkipped": 0}


def test_a_head_is_never_applied_to_another_model_and_says_so(ticket_policy_with_head, tickets, world, context, ticket_data,
                                                                capsys, caplog):
    app, stub = tickets
    other = ticket_policy_with_head.model_copy(update={"sha256": "c" * 64})
    stub.answer(head_body(other, [0.0] * 8))
    app.lambda_handler(ticket_event(ticket_data), context)
    (record,) = world.executions().values()
    decision = record.decisions[0]
    assert decision.readout == "letters" and decision.head_skipped.startswith("endpoint model sha256 cccccccccccc…")
    assert any(r.getMessage() == "head not applied; the letters decided" for r in caplog.records)
    totals = metric_totals(emf(capsys), ("HeadDecisions", "HeadSkipped"))
    assert totals == {"HeadDecisions": 0, "HeadSkipped": 1}


def metric_totals(blobs: list[dict], names: tuple[str, ...]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for blob in blobs:
        for name in names:
            value = blob.get(name)
            if value is not None:
                totals[name] = totals.get(name, 0) + (sum(value) if isinstance(value, list) else value)
    return totals


# ----------------------------------------------------------------------------- SNS envelopes
SNS_SAMPLE = json.loads((EVENTS / "ticket_sns_envelope.json").read_text())


def sns_notification(message: str) -> str:
    return json.dumps(dict(json.loads(SNS_SAMPLE["Records"][0]["body"]), Message=message))


def test_the_sns_notification_message_is_the_ticket_and_other_bodies_are_left_alone(ticket_data):
    ticket = json.dumps(ticket_data)
    assert ticket_json(sns_notification(ticket)) == ticket_data
    assert ticket_json(ticket) == ticket_data
    with pytest.raises(InvalidItem, match="invalid ticket \\(no usable id\\): Invalid JSON"):
        ticket_json("not json")
    with pytest.raises(InvalidItem, match="invalid ticket \\(no usable id\\): Message: Invalid JSON"):
        ticket_json(sns_notification("not json"))  # the notification's Message, named
    # Looks like a notification but lacks what SNS always sends: not unwrapped, so it fails as a ticket.
    half = {"Type": "Notification", "TopicArn": "arn:aws:sns:us-east-1:1:t"}
    assert ticket_json(json.dumps(half)) == half


def test_a_ticket_in_an_sns_envelope_is_routed(tickets, world, context):
    app, stub = tickets
    stub.answer(body(TICKET_OPTIONS, [0, 7.0, 0, 0, 0]))  # account-access
    assert app.lambda_handler(SNS_SAMPLE, context) == {"batchItemFailures": []}
    (record,) = world.executions().values()
    assert record.item_id == "T-2001" and record.destination.target == "account-access"


def test_a_bad_ticket_in_an_sns_envelope_is_parked_with_the_reason(tickets, world, context, ticket_data):
    app, _ = tickets
    event = json.loads(json.dumps(SNS_SAMPLE))
    event["Records"][0]["body"] = sns_notification(json.dumps(dict(ticket_data, channel="fax")))
    assert app.lambda_handler(event, context) == {"batchItemFailures": []}
    (parked,) = world.dead_letters()
    assert "channel: Input should be" in parked["MessageAttributes"]["failure_reason"]["StringValue"]
    assert world.executions() == {}


# ----------------------------------------------------------------------------- tickets linked to open incidents
def open_incident(store, key: str, delivery: str, **fields) -> None:
    """Open an incident as the incident intake does: its row claimed, then filed for links."""
    assert store.claim(key, delivery, **fields) == "new"
    store.file(key, filing_keys(fields["service"], fields.get("title"), fields.get("description")), fields["reported_at"])


def test_a_ticket_naming_an_open_incidents_service_is_linked_on_its_record_and_reason(tickets, world, context,
                                                                                     ticket_data, capsys):
    app, stub = tickets
    open_incident(world.open_incidents, "arn:aws:cloudwatch:us-east-1:123456789012:alarm:payments-api-5xx", "e-1", incident_id="INC-PAY",
                source="aws.cloudwatch", service="payments-api", reported_at="2026-11-29T11:55:00.000+00:00")
    stub.answer(body(TICKET_OPTIONS, [0, 0, 6.0, 0, 0]))
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    outage = dict(ticket_data, ticket_id="T-OUT", subject="Checkout fails",
                  body="Paying fails: payments-api answers 503 since a few minutes.")
    unrelated = dict(ticket_data, ticket_id="T-OTHER")

    assert app.lambda_handler(ticket_event(outage, unrelated), context) == {"batchItemFailures": []}

    by_id = {r.item_id: r for r in world.executions().values()}
    linked = by_id["T-OUT"].linked
    assert linked is not None and (linked.incident_id, linked.service) == ("INC-PAY", "payments-api")
    assert linked.incident_key.endswith(":alarm:payments-api-5xx")
    assert by_id["T-OUT"].decisions[0].why.linked == linked.reason()
    assert "linked to incident INC-PAY (payments-api, opened at 2026-11-29T11:55:00Z)" in by_id["T-OUT"].decisions[0].why.line()
    assert by_id["T-OTHER"].linked is None and by_id["T-OTHER"].decisions[0].why.linked is None
    assert any(blob.get("TicketsLinked") for blob in emf(capsys))


def test_a_ticket_naming_a_service_links_to_its_incident_with_the_same_reads_however_many_are_open(
        tickets, world, context, ticket_data):
    """The ticket intake reads the link index by the ticket's own keys: one read of the keys, one of
    the incidents they list, whether 1 or 301 incidents are open (the store's requests, counted)."""
    app, stub = tickets
    store = world.open_incidents
    at = "2026-11-29T11:55:00.000+00:00"
    open_incident(store, "arn:aws:cloudwatch:us-east-1:123456789012:alarm:payments-api-5xx", "e-1", incident_id="INC-PAY",
                  source="aws.cloudwatch", service="payments-api", reported_at=at, description="Card payments fail")

    def reads_for(ticket_id: str) -> dict[str, int]:
        store.calls.clear()
        stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
        ticket = dict(ticket_data, ticket_id=ticket_id, subject="Checkout fails", body="payments-api answers 503.")
        assert app.lambda_handler(ticket_event(ticket), context) == {"batchItemFailures": []}
        (record,) = [r for r in world.executions().values() if r.item_id == ticket_id]
        assert record.linked is not None and record.linked.incident_id == "INC-PAY"
        return dict(store.calls)

    few = reads_for("T-FEW")
    for n in range(300):
        open_incident(store, f"arn:aws:cloudwatch:us-east-1:123456789012:alarm:inventory-{n}", f"e-{n}",
                      incident_id=f"INC-{n}", source="aws.cloudwatch", service=f"inventory-{n}", reported_at=at,
                      title=f"inventory-{n} lag", description="Stock counts lag behind orders")
    assert reads_for("T-MANY") == few == {"filed_under": 1, "open_incidents": 1, "rows_read": 1}


@ON_THE_STACK
def test_a_ticket_describing_an_open_incident_is_linked_with_why_and_routed_as_if_it_were_not(tickets, world, context,
                                                                                                ticket_data):
    """The smoke test of described links: the handler's own open-incident store (the table in moto),
    a ticket in a customer's words during the outage, the same words before it (not linked), and a
    question about the same product during it (not linked); the link changes no route."""
    app, stub = tickets
    open_incident(
        app.tickets.wiring.open_incidents, "arn:aws:cloudwatch:us-east-1:123456789012:alarm:checkout-api-5xx-high", "e-1",
        incident_id="checkout-api-5xx-high", source="aws.cloudwatch", service="checkout-api",
        reported_at="2026-11-29T11:55:00.000+00:00", title="CloudWatch alarm checkout-api-5xx-high is in ALARM",
        description="Checkout API 5xx rate above 5%: customers cannot pay.")
    for _ in range(3):
        stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    words = dict(ticket_data, subject="checkout keeps failing", body="we cannot pay")
    during = dict(words, ticket_id="T-DURING")
    before = dict(words, ticket_id="T-BEFORE", created_at="2026-11-29T09:00:00Z")
    question = dict(ticket_data, ticket_id="T-QUESTION", subject="Checkout currency",
                    body="How do I change the currency shown at checkout to EUR?")

    assert app.lambda_handler(ticket_event(during, before, question), context) == {"batchItemFailures": []}

    by_id = {r.item_id: r for r in world.executions().values()}
    linked = by_id["T-DURING"].linked
    assert linked is not None and linked.incident_id == "checkout-api-5xx-high"
    assert linked.why == (f"the ticket describes it (score 0.60 \u2265 {THRESHOLD:.2f}: 'checkout', 'pay'; trouble: "
                          "'failing') and it was created while it was open")
    assert by_id["T-DURING"].decisions[0].why.linked == linked.reason()
    assert by_id["T-BEFORE"].linked is None and by_id["T-QUESTION"].linked is None
    route = lambda r: (r.route, r.route_reason, r.destination, [(d.question, d.option_id) for d in r.decisions])  # noqa: E731
    assert route(by_id["T-DURING"]) == route(by_id["T-BEFORE"])  # a suggestion: the same route linked or not
    assert by_id["T-DURING"].decisions[0].readout == "head"  # the words decide, linked or not


@pytest.fixture
def ticket_policy_with_aliases(monkeypatch, tmp_path):
    """The shipped policies (and their heads), the ticket policy declaring aliases of checkout-api."""
    from decision_router.domain import policies

    shutil.copytree(policies.POLICY_DIR, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "support-ticket.json"
    path.write_text(json.dumps({**json.loads(path.read_text()),
                                "service_aliases": {"checkout-api": ["payment page"]}}))
    monkeypatch.setattr(policies, "POLICY_DIR", tmp_path)


def test_the_ticket_policys_aliases_link_a_ticket_that_calls_the_service_by_them(ticket_policy_with_aliases, tickets,
                                                                                 world, context, ticket_data):
    app, stub = tickets
    assert app.tickets.intake.policy.service_aliases == {"checkout-api": ["payment page"]}
    open_incident(
        app.tickets.wiring.open_incidents, "arn:aws:cloudwatch:us-east-1:123456789012:alarm:checkout-api-5xx-high", "e-1",
        incident_id="checkout-api-5xx-high", source="aws.cloudwatch", service="checkout-api",
        reported_at="2026-11-29T11:55:00.000+00:00", title="CloudWatch alarm checkout-api-5xx-high is in ALARM")
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))
    aliased = dict(ticket_data, subject="Payment page broken", body="The payment page shows an error.")

    assert app.lambda_handler(ticket_event(aliased), context) == {"batchItemFailures": []}

    (record,) = world.executions().values()
    assert record.linked is not None and record.linked.incident_id == "checkout-api-5xx-high"
    assert "'page', 'payment'; trouble: 'broken'" in record.linked.why


def test_open_incidents_that_cannot_be_read_never_hold_a_ticket_back(tickets, world, context, ticket_data, caplog):
    app, stub = tickets

    class Unreadable:
        def filed_under(self, lookup_keys):
            raise RuntimeError("AccessDeniedException: not authorized to perform dynamodb:BatchGetItem")

    app.tickets.wiring.open_incidents = Unreadable()
    stub.answer(body(TICKET_OPTIONS, [6.0, 0, 0, 0, 0]))

    assert app.lambda_handler(ticket_event(dict(ticket_data, body="payments-api is down")), context) == {
        "batchItemFailures": []}

    (record,) = world.executions().values()
    assert record.linked is None and record.route == "auto"
    (warning,) = [r for r in caplog.records if "open incidents could not be read" in r.getMessage()]
    assert warning.levelname == "WARNING" and warning.getMessage().endswith("the ticket is routed unlinked")
    assert "not authorized to perform dynamodb:BatchGetItem" in warning.reason
