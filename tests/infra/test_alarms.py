"""Every failure someone must act on raises an alarm that notifies: Lambda errors and throttles,
tickets and reviews waiting too long, and the functions' own metrics (EndpointErrors, SentToReview). The
custom-metric alarms are checked against the metrics the real handler prints (EMF), so a
renamed metric or dimension cannot leave an alarm watching nothing."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from local.cloudformation import Stack
from local.lambdas import LocalFunction
from review_console.sla import OLDEST_AGE_METRIC

FUNCTIONS = Stack.load(parameters={"ExistingEndpointName": "e"}).of_type("AWS::Serverless::Function")  # every one


@pytest.fixture(scope="module")
def stack() -> Stack:
    return Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", "OnCallEmail": "oncall@example.com"})


def alarms(stack: Stack) -> dict[str, dict]:
    return {a: stack.resolve(stack.properties(a)) for a in stack.of_type("AWS::CloudWatch::Alarm")}


def metric_stats(alarm: dict) -> list[dict]:
    """(Namespace, MetricName, Dimensions) of every metric an alarm reads, single or metric math."""
    if "MetricName" in alarm:
        return [{"Namespace": alarm["Namespace"], "MetricName": alarm["MetricName"],
                 "Dimensions": alarm.get("Dimensions", [])}]
    return [m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m]


def test_every_alarm_notifies_the_alarm_topic(stack):
    for name, alarm in alarms(stack).items():
        assert alarm["AlarmActions"] == [stack.ref("AlarmTopic")], name


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("metric", ["Errors", "Throttles"])
def test_every_function_alarms_on_errors_and_throttles(stack, function, metric):
    name = stack.ref(function)
    watching = [a for a, alarm in alarms(stack).items()
                if any(m["Namespace"] == "AWS/Lambda" and m["MetricName"] == metric
                       and m["Dimensions"] == [{"Name": "FunctionName", "Value": name}] for m in metric_stats(alarm))]
    assert watching, f"no alarm on {function} {metric}"


def test_tickets_waiting_too_long_alarm(stack):
    queue = stack.get_att("TicketQueue", "QueueName")
    (alarm,) = [a for a in alarms(stack).values() if a.get("MetricName") == "ApproximateAgeOfOldestMessage"
                and a["Dimensions"] == [{"Name": "QueueName", "Value": queue}]]
    assert alarm["Threshold"] == stack.parameters["TicketAgeAlarmSeconds"]


def test_reviews_waiting_too_long_alarm_reads_the_sla_sweeps_oldest_age(stack):
    """Reviews wait in the pending-review index, not a queue: the alarm reads the age the console
    function's sweep emits (its namespace, its metric, no dimension; tests/functions checks the
    EMF it prints), notifies past ReviewAgeAlarmSeconds, and says so when the sweep stops."""
    namespace = stack.function_environment("ReviewConsoleFunction")["POWERTOOLS_METRICS_NAMESPACE"]
    (alarm,) = [a for a in alarms(stack).values() if a.get("MetricName") == OLDEST_AGE_METRIC]
    assert alarm["Namespace"] == namespace and not alarm.get("Dimensions")
    assert alarm["Threshold"] == stack.parameters["ReviewAgeAlarmSeconds"]
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold" and alarm["Statistic"] == "Maximum"
    # a sweep every 5 minutes: one over the threshold alarms; three missed in a row are not "none waits"
    assert (alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (300, 3, 1)
    assert alarm["TreatMissingData"] == "missing"
    assert alarm["InsufficientDataActions"] == [stack.ref("AlarmTopic")]
    assert "ReviewQueue" not in stack.template["Resources"], "the review queue is gone: reviews wait as index rows"


class _AccessDenied(BaseHTTPRequestHandler):
    """What SageMaker answers when the function's role may not invoke the endpoint."""

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # http.server names its handlers so
        self.rfile.read(int(self.headers["Content-Length"]))
        raw = json.dumps({"message": "User is not authorized to perform: sagemaker:InvokeEndpoint"}).encode()
        self.send_response(400)
        self.send_header("x-amzn-ErrorType", "AccessDeniedException")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def access_denied_endpoint(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AccessDenied)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", f"http://127.0.0.1:{server.server_address[1]}")
    yield
    server.shutdown()
    server.server_close()


def emitted_metrics(log: str) -> list[tuple[str, str, frozenset, float]]:
    """(namespace, metric, dimensions, value) from the EMF blobs a function printed."""
    found = []
    for line in log.splitlines():
        if '"_aws"' not in line:
            continue
        blob = json.loads(line)
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                dimensions = frozenset((d, blob[d]) for d in dimension_set)
                for metric in directive["Metrics"]:
                    values = blob[metric["Name"]]
                    found.append((directive["Namespace"], metric["Name"], dimensions,
                                  sum(values) if isinstance(values, list) else values))
    return found


@pytest.mark.stack
@pytest.mark.server  # the endpoint that denies access is an HTTP server
@pytest.mark.parametrize("function, item", [
    ("TicketIntakeFunction", {"Records": [{"messageId": "m-1", "receiptHandle": "r", "body": json.dumps({
        "ticket_id": "T-1", "subject": "Charged twice", "body": "Refund one", "customer": {"id": "C-1", "tier": "pro"},
        "channel": "email", "created_at": "2026-11-29T12:00:00Z"}), "attributes": {
        "ApproximateReceiveCount": "1", "SentTimestamp": "1796000000000", "SenderId": "x",
        "ApproximateFirstReceiveTimestamp": "1796000000000"}, "messageAttributes": {}, "md5OfBody": "x",
        "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tickets", "awsRegion": "us-east-1"}]}),
    ("IncidentIntakeFunction", {"version": "0", "id": "e-1", "detail-type": "Incident Reported", "source": "monitoring",
                                "account": "123456789012", "time": "2026-11-29T12:00:00Z", "region": "us-east-1",
                                "resources": [], "detail": {
        "incident_id": "INC-1", "title": "Checkout down", "description": "5xx at 100%", "service": "checkout-api",
        "severity": "sev2", "source": "cloudwatch", "reported_at": "2026-11-29T12:00:00Z"}}),
], ids=["tickets", "incidents"])
def test_an_endpoint_that_denies_access_trips_the_endpoint_error_alarms(pipeline, access_denied_endpoint, function, item):
    """Every item goes to review 'silently' when the role may not invoke the endpoint: the real
    handler's EndpointErrors and SentToReview metrics are exactly what the alarms read."""
    log = io.StringIO()
    LocalFunction(pipeline.stack, function, log=log).invoke(item)

    emitted = emitted_metrics(log.getvalue())
    stack = pipeline.stack
    for metric in ("EndpointErrors", "SentToReview"):
        watching = [(name, m) for name, alarm in alarms(stack).items() for m in metric_stats(alarm)
                    if m["Namespace"] == "DecisionRouter" and m["MetricName"] == metric]
        assert watching, f"no alarm reads {metric}"
        ours = [m for _, m in watching
                if frozenset((d["Name"], d["Value"]) for d in m["Dimensions"]) in {e[2] for e in emitted if e[1] == metric}]
        assert ours, f"no {metric} alarm reads the dimensions {function} emits: {[e for e in emitted if e[1] == metric]}"
        assert sum(e[3] for e in emitted if e[1] == metric) == 1
