"""How events reach the local functions, as the Lambda service and its triggers deliver them.

- `SqsEventSource`: the SQS event source mapping with ReportBatchItemFailures: receive up to
  BatchSize messages, invoke, delete what succeeded, leave failures for redelivery. The queue's
  RedrivePolicy (moto implements it) moves a message to the DLQ after maxReceiveCount receives.
  Failures become visible again after `redelivery_seconds` (0 for the demo, so a bad ticket
  reaches the DLQ in seconds; in AWS the queue's VisibilityTimeout, 1800 s). `drain` polls with
  several execution environments at once (`LocalFunction.copy`), as Lambda scales a poller.
- `invoke_async`: an asynchronous invoke (how EventBridge calls a function): 1 + the
  EventInvokeConfig's MaximumRetryAttempts tries (after `retry_delays`; Lambda waits about 1 and
  2 minutes), then the OnFailure destination gets Lambda's failure record.
- `http_event`: what API Gateway's HTTP API gives a function for one request (a console or
  webhook route; text, or bytes that are not UTF-8 as base64, as API Gateway passes them).

Batch sizes, retry counts and destinations are read from template.yaml.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Sequence
from urllib.parse import parse_qsl

from local.cloudformation import Stack, TemplateError
from local.lambdas import LocalFunction, error_type
from local.services import LOOPBACK


def queue_url_for_arn(stack: Stack, arn: str) -> str:
    """The URL of the template queue with this ARN."""
    for logical_id in stack.of_type("AWS::SQS::Queue"):
        if stack.get_att(logical_id, "Arn") == arn:
            return stack.ref(logical_id)
    raise TemplateError(f"no queue in the template has ARN {arn}")


def queue_logical_id(stack: Stack, url: str) -> str | None:
    for logical_id in stack.of_type("AWS::SQS::Queue"):
        if stack.ref(logical_id) == url:
            return logical_id
    return None


# --------------------------------------------------------------------------- SQS event source
@dataclass
class BatchReport:
    messages: int
    failed: int
    seconds: float


class SqsEventSource:
    """The function's SQS event (queue, BatchSize, ReportBatchItemFailures) polled by hand."""

    def __init__(self, function: LocalFunction, sqs: Any):
        self.function, self.sqs = function, sqs
        props = function.event_source("SQS")
        stack = function.stack
        self.queue_arn = stack.resolve(props["Queue"])
        self.queue_url = queue_url_for_arn(stack, self.queue_arn)
        self.batch_size = min(10, int(stack.resolve(props.get("BatchSize", 10))))
        self.partial = "ReportBatchItemFailures" in props.get("FunctionResponseTypes", [])

    def poll_once(self, function: LocalFunction | None = None, redelivery_seconds: int = 0) -> BatchReport | None:
        """One batch: receive, invoke (`function`: one of this function's copies), settle. None when
        the queue had nothing visible. A failed message is visible again after `redelivery_seconds`."""
        function = function or self.function
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=self.batch_size, AttributeNames=["All"],
            MessageAttributeNames=["All"]).get("Messages", [])
        if not messages:
            return None
        started = time.monotonic()
        event = {"Records": [self._record(m) for m in messages]}
        try:
            response = function.invoke(event) or {}
            failed_ids = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])} if self.partial else set()
        except Exception:  # noqa: BLE001 - a function error (in the function's log): the whole batch is retried
            failed_ids = {m["MessageId"] for m in messages}
        for message in messages:
            if message["MessageId"] in failed_ids:
                self.sqs.change_message_visibility(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"],
                                                   VisibilityTimeout=redelivery_seconds)
            else:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return BatchReport(len(messages), len(failed_ids), time.monotonic() - started)

    def in_queue(self) -> int:
        """Messages visible or in flight (received, or waiting to be visible again)."""
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def drain(self, functions: Sequence[LocalFunction], *, redelivery_seconds: int = 0,
              on_batch: Callable[[BatchReport], None] = lambda _: None) -> None:
        """Poll with one thread per execution environment until the queue holds nothing, visible
        or waiting to be redelivered (the DLQ takes what failed maxReceiveCount times)."""
        busy = [0]
        lock = threading.Lock()

        def poller(function: LocalFunction) -> None:
            while True:
                with lock:
                    busy[0] += 1
                try:
                    report = self.poll_once(function, redelivery_seconds)
                finally:
                    with lock:
                        busy[0] -= 1
                if report is not None:
                    on_batch(report)
                    continue
                with lock:
                    done = busy[0] == 0 and self.in_queue() == 0
                if done:
                    return
                time.sleep(0.2)

        threads = [threading.Thread(target=poller, args=(f,), name=f"sqs-poller-{i}", daemon=True)
                   for i, f in enumerate(functions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        """A Lambda SQS record from a ReceiveMessage result."""
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message.get("Attributes", {}),
            "messageAttributes": {
                name: {"stringValue": a.get("StringValue"), "binaryValue": _base64(a.get("BinaryValue")),
                       "stringListValues": [], "binaryListValues": [], "dataType": a["DataType"]}
                for name, a in message.get("MessageAttributes", {}).items()},
            "md5OfBody": message["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": self.function.stack.region,
        }


def _base64(value: bytes | None) -> str | None:
    """A binary attribute as Lambda's SQS event carries it (the event is JSON)."""
    return None if value is None else base64.b64encode(value).decode("ascii")


# --------------------------------------------------------------------------- HTTP API
def claim_text(value: Any) -> str:
    """API Gateway hands every claim to the function as text; a list as '[a b]'."""
    if isinstance(value, list):
        return "[" + " ".join(str(v) for v in value) + "]"
    return str(value)


def http_event(method: str, path: str, *, route_key: str = "$default", query: str = "",
               headers: dict[str, str] | None = None, body: str | bytes | None = None,
               path_parameters: dict[str, str] | None = None, claims: dict[str, Any] | None = None) -> dict[str, Any]:
    """An HTTP API payload 2.0 event as API Gateway sends it to a Lambda integration."""
    now = datetime.now(timezone.utc)
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    context: dict[str, Any] = {
        "accountId": "123456789012", "apiId": "local", "domainName": "127.0.0.1", "domainPrefix": "local",
        "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": LOOPBACK,
                 "userAgent": headers.get("user-agent", "")},
        "requestId": str(uuid.uuid4()), "routeKey": route_key, "stage": "$default",
        "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"), "timeEpoch": int(now.timestamp() * 1000),
    }
    if claims is not None:
        context["authorizer"] = {"jwt": {"claims": {k: claim_text(v) for k, v in claims.items()}, "scopes": None}}
    event: dict[str, Any] = {
        "version": "2.0", "routeKey": route_key, "rawPath": path, "rawQueryString": query,
        "headers": headers, "requestContext": context, "isBase64Encoded": False,
    }
    if query:
        event["queryStringParameters"] = dict(parse_qsl(query, keep_blank_values=True))
    if path_parameters:
        event["pathParameters"] = path_parameters
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:  # as API Gateway passes a body it does not take for text
            body, event["isBase64Encoded"] = base64.b64encode(body).decode(), True
    if body is not None:
        event["body"] = body
    return event


# --------------------------------------------------------------------------- async invoke
@dataclass
class AsyncResult:
    ok: bool
    attempts: int
    response: Any = None
    error: str | None = None
    dead_letter_queue_url: str | None = None


def invoke_async(function: LocalFunction, event: dict[str, Any], sqs: Any,
                 retry_delays: Sequence[float] = ()) -> AsyncResult:
    """Invoke as Lambda does for EventBridge: retry (the k-th retry after `retry_delays[k-1]`
    seconds, the last delay for any further one), then hand the event to OnFailure."""
    config = function.stack.resolve(function.stack.properties(function.logical_id).get("EventInvokeConfig", {}))
    tries = 1 + int(config.get("MaximumRetryAttempts", 2))
    error: BaseException | None = None
    for attempt in range(1, tries + 1):
        if attempt > 1 and retry_delays:
            time.sleep(retry_delays[min(attempt - 2, len(retry_delays) - 1)])
        try:
            return AsyncResult(ok=True, attempts=attempt, response=function.invoke(event))
        except Exception as exc:  # noqa: BLE001 - a function error (in the function's log): Lambda retries the event
            error = exc
    assert error is not None
    message = str(error)
    destination = config.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
    if not destination:
        return AsyncResult(ok=False, attempts=tries, error=message)
    url = queue_url_for_arn(function.stack, destination)
    # Lambda's documented invocation record for an OnFailure destination.
    record = {
        "version": "1.0",
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "requestContext": {"requestId": str(uuid.uuid4()), "functionArn": function.context().invoked_function_arn + ":$LATEST",
                           "condition": "RetriesExhausted", "approximateInvokeCount": tries},
        "requestPayload": event,
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "responsePayload": {"errorMessage": message, "errorType": error_type(error)},
    }
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(record))
    return AsyncResult(ok=False, attempts=tries, error=message, dead_letter_queue_url=url)
