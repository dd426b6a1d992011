"""An alert storm against one model context: 20 incidents arrive at once. Incident intake runs
at most the template's reserved concurrency at a time (Lambda queues the other asynchronous
invokes and retries the throttled ones), and the endpoint adapter's retries, honouring the
container's Retry-After, absorb the "busy" 503s, so next to no incident goes to review as busy.

The endpoint is a local HTTP stub standing in for a slow decision endpoint (a SageMaker endpoint
cannot run here, and the real embedded model on 2 shared cores would make the timing depend on
the machine). It behaves as the decision container does when boto3's sagemaker-runtime client
reaches it directly (AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME, as in `make demo`): one model context,
a request waits for it at most ADMISSION_WAIT_SECONDS (DECISION_ADMISSION_WAIT_SECONDS) and is
then refused with 503 `busy`, `"retryable": true` and `Retry-After`.

What is tried is the endpoint and its adapter: the intake's other ports (the open incidents, the
idempotency store, the workflow) are the in-memory fakes of tests/fakes/worlds.py on the
template's names."""

from __future__ import annotations

import json
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aws_lambda_powertools import Logger, Metrics
from moto import mock_aws

from decision_contract import BatchDecisionResponse, BatchTiming
from decision_router.adapters.endpoint import DecisionEndpoint
from decision_router.config import Settings
from decision_router.intake.pipeline import Intake
from local.cloudformation import Stack
from tests.fakes.worlds import FakeWorld
from tests.functions.conftest import make_result
from tests.functions.test_intake_handlers import ENDPOINT, FakeLambdaContext

pytestmark = pytest.mark.server  # a slow endpoint served over HTTP

INCIDENTS = 20
SERVICE_SECONDS = 0.4  # one batched decision (priority + team) on the model context
ADMISSION_WAIT_SECONDS = 2.0  # the container's default DECISION_ADMISSION_WAIT_SECONDS
RETRY_AFTER = str(math.ceil(ADMISSION_WAIT_SECONDS))  # what the container's Busy error sends


class SlowDecisionEndpoint(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.context = threading.Lock()  # the one model context
        self.busy_answers = 0
        self.decided = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: SlowDecisionEndpoint

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # http.server names its handlers so
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not self.server.context.acquire(timeout=ADMISSION_WAIT_SECONDS):
            self.server.busy_answers += 1
            self._send(503, {"error": {"code": "busy", "retryable": True, "message":
                                       f"the model is busy; waited {ADMISSION_WAIT_SECONDS:g}s for it"}},
                       {"Retry-After": RETRY_AFTER})
            return
        try:
            threading.Event().wait(SERVICE_SECONDS)
            results = [make_result(d["id"], [o["id"] for o in d["options"]], [3.0] + [0.0] * (len(d["options"]) - 1))
                       for d in request["decisions"]]
            self.server.decided += 1
        finally:
            self.server.context.release()
        timing = BatchTiming(shared_prefix_tokens=50, shared_prefix_seconds=0.1, total_seconds=SERVICE_SECONDS)
        self._send(200, json.loads(BatchDecisionResponse(results=results, timing=timing).model_dump_json()), {})

    def _send(self, status: int, body: dict, headers: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def slow_endpoint(monkeypatch):
    server = SlowDecisionEndpoint()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", server.url)
    yield server
    server.shutdown()
    server.server_close()


def incident_concurrency(stack: Stack) -> int:
    """How many incident-intake invocations Lambda runs at once: the reserved concurrency, or
    (none set) as many as arrive."""
    reserved = stack.properties("IncidentIntakeFunction").get("ReservedConcurrentExecutions")
    return int(stack.resolve(reserved)) if reserved is not None else INCIDENTS


def test_an_alert_storm_is_absorbed_not_sent_to_review_as_busy(slow_endpoint, incident_data):
    with mock_aws():  # a call no fake answers fails at once against an empty moto
        world = FakeWorld()
        settings = Settings.from_env(world.environment("IncidentIntakeFunction"))
        concurrency = incident_concurrency(world.template)
        assert concurrency < INCIDENTS, "incident intake needs a concurrency cap"

        def invoke(n: int) -> dict:
            # One Lambda execution environment: its own intake and endpoint client.
            endpoint = DecisionEndpoint(ENDPOINT, read_timeout=settings.endpoint_read_timeout_seconds,
                                        max_attempts=settings.endpoint_max_attempts)
            intake = Intake("incident", logger=Logger(service="incident-intake"), metrics=Metrics(),
                            wiring=world.wiring("IncidentIntakeFunction", endpoint=endpoint))
            return intake.handle(dict(incident_data, incident_id=f"INC-{n:03d}"), FakeLambdaContext())

        try:
            with ThreadPoolExecutor(max_workers=concurrency) as lambda_service:
                summaries = list(lambda_service.map(invoke, range(INCIDENTS)))
        finally:  # Powertools keeps metrics and dimensions per process: leave none to other tests
            Metrics().clear_metrics()
            Metrics().clear_default_dimensions()

    endpoint_errors = [s for s in summaries if "endpoint_error" in s["sources"].values()]
    assert len(summaries) == INCIDENTS and all(s["started"] for s in summaries)
    assert len(endpoint_errors) / INCIDENTS < 0.05, (
        f"{len(endpoint_errors)} of {INCIDENTS} incidents went to review because the endpoint was busy "
        f"({slow_endpoint.busy_answers} busy answers, {slow_endpoint.decided} decided)")
    assert slow_endpoint.decided == INCIDENTS
