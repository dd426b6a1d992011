"""What the Lambda service does around the project's handlers, done in this process (there is no
Lambda runtime here and moto cannot run our code without Docker).

- `LocalFunction`: a template function with its own freshly executed handler module (a cold
  start) and the environment template.yaml gives it, invoked with a Lambda-shaped context.
- `SqsEventSource`: the SQS event source mapping with ReportBatchItemFailures: receive up to
  BatchSize messages, invoke, delete what succeeded, leave failures for redelivery. The queue's
  RedrivePolicy (moto implements it) moves a message to the DLQ after maxReceiveCount receives.
  Failures become visible again after `redelivery_seconds` (0 for the demo, so a bad ticket
  reaches the DLQ in seconds; in AWS the queue's VisibilityTimeout, 1800 s). `drain` polls with
  several execution environments at once (`LocalFunction.copy`), as Lambda scales a poller.
- `invoke_async`: an asynchronous invoke (how EventBridge calls a function): 1 + the
  EventInvokeConfig's MaximumRetryAttempts tries (after `retry_delays`; Lambda waits about 1 and
  2 minutes), then the OnFailure destination gets Lambda's failure record.

os.environ and stdout belong to the process, so invocations of one function may run at the same
time (each copy has its own module state and metrics), while another function's invocations wait
until they are done (`_ENVIRONMENTS`).

Everything is read from template.yaml (handlers, environments, batch sizes, retry counts,
destinations) through `local.cloudformation.Stack`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import queue
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Sequence, TextIO

from local.cloudformation import Stack, TemplateError
from local.services import patched_environ


@dataclass
class LambdaContext:
    """The context object a Python handler receives (the fields Powertools reads)."""

    function_name: str
    memory_limit_in_mb: int
    invoked_function_arn: str
    timeout_seconds: float
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = ""
    function_version: str = "$LATEST"
    _started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_seconds - (time.monotonic() - self._started)) * 1000))


class _Environments:
    """One function's environment (os.environ, stdout) in this process at a time; any number of
    invocations of that function share it."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._owner: str | None = None
        self._users = 0
        self._applied: contextlib.ExitStack | None = None

    @contextlib.contextmanager
    def of(self, function: LocalFunction) -> Iterator[None]:
        with self._changed:
            while self._owner not in (None, function.logical_id):
                self._changed.wait()
            if self._users == 0:
                self._owner, self._applied = function.logical_id, contextlib.ExitStack()
                self._applied.enter_context(function._runtime())
            self._users += 1
        try:
            yield
        finally:
            with self._changed:
                self._users -= 1
                if self._users == 0 and self._applied is not None:
                    self._applied.close()
                    self._owner, self._applied = None, None
                    self._changed.notify_all()


_ENVIRONMENTS = _Environments()
_COPIES = itertools.count(1)


class LocalFunction:
    """One `AWS::Serverless::Function` of the template, run in this process: one execution
    environment (`copy` makes another)."""

    def __init__(self, stack: Stack, logical_id: str, *, log: TextIO | None = None, env: dict[str, str] | None = None,
                 _copy: int = 0):
        self.stack, self.logical_id, self.log = stack, logical_id, log
        # `env`: variables set on top of the template's (what a local run must tell the function).
        self.env = {**stack.function_environment(logical_id), **(env or {})}
        self.name = stack.physical_name(logical_id)
        globals_ = stack.template.get("Globals", {}).get("Function", {})
        props = stack.properties(logical_id)
        self.timeout = float(stack.resolve(props.get("Timeout", globals_.get("Timeout", 3))))
        self.memory = int(stack.resolve(props.get("MemorySize", globals_.get("MemorySize", 128))))
        handler = props.get("Handler") or globals_.get("Handler")
        if not handler or "." not in handler:
            raise TemplateError(f"{logical_id}: Handler {handler!r} is not module.function")
        module_name, self.handler_name = handler.rsplit(".", 1)
        with _ENVIRONMENTS.of(self):
            self.module = _cold_start(module_name, alias=f"_local_lambda_{logical_id}_{_copy}")
        _own_metrics(self.module)
        self.handler = getattr(self.module, self.handler_name)

    def copy(self) -> LocalFunction:
        """Another execution environment of this function (its own cold start), sharing this one's
        environment variables (one dict: what is set on either applies to both)."""
        twin = LocalFunction(self.stack, self.logical_id, log=self.log, env=self.env, _copy=next(_COPIES))
        twin.env, twin.timeout = self.env, self.timeout
        return twin

    @contextlib.contextmanager
    def _runtime(self) -> Iterator[None]:
        """The function's environment; its stdout and stderr (Powertools JSON logs, EMF metrics,
        warnings: what Lambda sends to CloudWatch Logs) to `log` when given."""
        runtime_env = {"AWS_LAMBDA_FUNCTION_NAME": self.name, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(self.memory)}
        with contextlib.ExitStack() as stack:
            stack.enter_context(patched_environ({**self.env, **runtime_env}))
            if self.log is not None:
                stack.enter_context(contextlib.redirect_stdout(self.log))
                stack.enter_context(contextlib.redirect_stderr(self.log))
            yield

    def context(self) -> LambdaContext:
        arn = f"arn:aws:lambda:{self.stack.region}:{self.stack.account_id}:function:{self.name}"
        return LambdaContext(function_name=self.name, memory_limit_in_mb=self.memory,
                             invoked_function_arn=arn, timeout_seconds=self.timeout)

    def invoke(self, event: dict[str, Any]) -> Any:
        """A synchronous invoke; the handler's exception propagates (a function error)."""
        with _ENVIRONMENTS.of(self):
            return self.handler(event, self.context())

    def event_source(self, event_type: str) -> dict[str, Any]:
        """Properties of the function's only event of this type (SQS, EventBridgeRule, ...)."""
        found = [e["Properties"] for e in self.stack.properties(self.logical_id).get("Events", {}).values()
                 if e["Type"] == event_type]
        if len(found) != 1:
            raise TemplateError(f"{self.logical_id}: expected one {event_type} event, found {len(found)}")
        return found[0]


def _cold_start(module_name: str, *, alias: str) -> Any:
    """Execute the handler module anew under a private name: module-level state (clients,
    cached settings, processors) starts empty, as in a fresh Lambda execution environment,
    and the real module in sys.modules is left alone."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        raise TemplateError(f"handler module {module_name!r} not found (is functions/ on the path?)")
    fresh = importlib.util.spec_from_file_location(alias, spec.origin)
    module = importlib.util.module_from_spec(fresh)
    fresh.loader.exec_module(module)
    return module


def _own_metrics(module: Any) -> None:
    """Give the module's Powertools Metrics their own store: Powertools keeps one per process (one
    Lambda environment), and copies running at once here must not flush each other's metrics.
    The provider stays (the handler's decorator is bound to it); its dicts are its own."""
    from aws_lambda_powertools import Metrics

    for metrics in [value for value in vars(module).values() if isinstance(value, Metrics)]:
        provider = metrics.provider
        fresh: dict[str, dict[str, Any]] = {"metric_set": {}, "dimension_set": dict(provider.dimension_set),
                                            "metadata_set": {}, "default_dimensions": dict(provider.default_dimensions)}
        for name, store in fresh.items():
            setattr(provider, name, store)
            setattr(metrics, name, store)


class FunctionPool:
    """Execution environments of one function (the first is the function itself), lent one
    invocation at a time."""

    def __init__(self, function: LocalFunction, size: int):
        self.functions = [function] + [function.copy() for _ in range(max(0, size - 1))]
        self._free: queue.Queue[LocalFunction] = queue.Queue()
        for each in self.functions:
            self._free.put(each)

    @contextlib.contextmanager
    def borrowed(self) -> Iterator[LocalFunction]:
        function = self._free.get()
        try:
            yield function
        finally:
            self._free.put(function)


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
        except Exception:  # noqa: BLE001 - a function error: the whole batch is retried
            if function.log is not None:
                traceback.print_exc(file=function.log)
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
                name: {"stringValue": a.get("StringValue"), "binaryValue": a.get("BinaryValue"),
                       "stringListValues": [], "binaryListValues": [], "dataType": a["DataType"]}
                for name, a in message.get("MessageAttributes", {}).items()},
            "md5OfBody": message["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": self.function.stack.region,
        }


# --------------------------------------------------------------------------- HTTP API
def http_api_event(method: str, path: str, body: bytes, headers: dict[str, str], *,
                   path_parameters: dict[str, str] | None = None) -> dict[str, Any]:
    """The event API Gateway's HTTP API (payload format 2.0) gives a function for one request."""
    return {
        "version": "2.0", "routeKey": f"{method} {path}", "rawPath": path, "rawQueryString": "",
        "headers": {"content-type": "application/json", **{k.lower(): v for k, v in headers.items()}},
        "pathParameters": path_parameters or {},
        "requestContext": {"accountId": "123456789012", "apiId": "local", "domainName": "localhost",
                           "domainPrefix": "local", "requestId": str(uuid.uuid4()), "routeKey": f"{method} {path}",
                           "stage": "$default", "time": datetime.now(timezone.utc).strftime("%d/%b/%Y:%H:%M:%S +0000"),
                           "timeEpoch": int(time.time() * 1000),
                           "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1",
                                    "userAgent": "local.demo"}},
        "body": body.decode("utf-8"), "isBase64Encoded": False,
    }


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
        except Exception as exc:  # noqa: BLE001 - a function error: Lambda retries the event
            error = exc
            if function.log is not None:
                traceback.print_exc(file=function.log)
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
        "responsePayload": {"errorMessage": message, "errorType": type(error).__name__},
    }
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(record))
    return AsyncResult(ok=False, attempts=tries, error=message, dead_letter_queue_url=url)
