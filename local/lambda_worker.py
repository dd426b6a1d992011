"""One Lambda execution environment as a process of its own: the child side of `local.lambdas`.

`serve` runs in a process the parent started for one function: it applies the environment
template.yaml gives that function (the whole os.environ, nothing of the parent's but what the
parent passed), imports the handler module (the cold start), then answers invocations one at a
time over its `multiprocessing` connection until told to stop or the parent goes away.

The protocol, one tuple a message:

    parent -> worker   ("invoke", request)      request: event (JSON text), context fields, env
                       ("answer", value)        the parent's answer to an "ask"
                       ("stop",)
    worker -> parent   ("ready", output, error) after the cold start; error as below, or None
                       ("ask", method, args)    during an invocation: a call to the parent's
                                                AWS-call hook (soak faults), answered at once
                       ("result", output, result, error)   result: JSON text, or None
                       ("stopped", output)

`output` is what the function wrote to stdout and stderr since the last message, as
[(stream, text), ...] in order (the parent writes it to the function's log: CloudWatch Logs, in
AWS). `error` is {"type", "message", "traceback"} of the exception the handler raised.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import io
import json
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

#: Imported once by the process the workers are forked from, so a worker's cold start executes only
#: the handler module (which reads its environment: Powertools' Logger and Metrics, the processors).
#: None of these reads the environment on import or keeps a client; each worker gets them as freshly
#: imported. The library's modules are those the handlers import (a missing one is skipped).
PRELOAD = ["boto3", "botocore.endpoint", "botocore.awsrequest", "httpx", "pydantic", "pydantic_settings",
           "aws_lambda_powertools", "aws_lambda_powertools.logging", "aws_lambda_powertools.metrics",
           "aws_lambda_powertools.tracing", "aws_lambda_powertools.utilities.batch",
           "aws_lambda_powertools.utilities.parser", "aws_lambda_powertools.utilities.typing",
           "decision_router.config", "decision_router.intake.pipeline", "decision_router.intake.tickets",
           "decision_router.intake.incidents", "decision_router.intake.webhooks", "decision_router.review.completion",
           "decision_router.review.console", "decision_router.adapters.review", "decision_router.adapters.workflow"]


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


class InvocationDied(BaseException):
    """The invocation ended mid-way (a timeout, the runtime gone): no handler catches it."""


def error_of(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}


# ------------------------------------------------------------------------------ botocore hook
def patched_botocore_send(fault: Callable[[str, str, bytes], str | None],
                          dies_after: Callable[[str, str], bool]) -> Callable[[], None]:
    """Put a hook on botocore's HTTP send in this process, below the SDK's retries: `fault`
    names an error code to answer a request with instead of sending it; `dies_after` says
    whether the invocation dies right after a successful call. Returns what undoes it."""
    from botocore.awsrequest import AWSResponse
    from botocore.endpoint import Endpoint

    original = Endpoint._send

    def send(endpoint: Any, request: Any) -> Any:
        service = endpoint._endpoint_prefix
        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else str(target)).rpartition(".")[2]
        body = request.body if isinstance(request.body, bytes) else str(request.body or "").encode()
        code = fault(service, operation, body)
        if code is not None:
            error = json.dumps({"__type": code, "message": "Rate exceeded (soak fault)"}).encode()
            return AWSResponse(request.url, 400, {"Content-Type": "application/x-amz-json-1.0",
                                                  "x-amzn-RequestId": str(uuid.uuid4())}, _Raw(error))
        response = original(endpoint, request)
        if response.status_code == 200 and dies_after(service, operation):
            raise InvocationDied("the invocation ended after it started an execution")
        return response

    Endpoint._send = send  # type: ignore[method-assign]
    return lambda: setattr(Endpoint, "_send", original)


class _Raw:
    """The body of an injected HTTP response, as botocore reads one."""

    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


# ------------------------------------------------------------------------------ the worker
class _Output(io.TextIOBase):
    """sys.stdout / sys.stderr of the worker: kept until the next message to the parent."""

    def __init__(self, name: str, chunks: list[tuple[str, str]], lock: threading.Lock):
        self.name, self._chunks, self._lock = name, chunks, lock

    @property
    def encoding(self) -> str:
        return "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            self._chunks.append((self.name, text))
        return len(text)


class _WorkerEnd:
    """The worker's end of the pipe to the parent (whose end is local.lambdas._ParentEnd): the
    output written since the last message, and the parent's answers to its asks."""

    def __init__(self, connection: Any):
        self.connection = connection
        self.chunks: list[tuple[str, str]] = []
        self.chunks_lock = threading.Lock()
        self.ask_lock = threading.Lock()
        self.relaying = False  # the parent's AWS-call hook applies to this invocation

    def output(self) -> list[tuple[str, str]]:
        with self.chunks_lock:
            taken, self.chunks[:] = list(self.chunks), []
        return taken

    def ask(self, method: str, *args: Any, default: Any = None) -> Any:
        """Call the parent's hook (one call at a time: the handler may call AWS from threads).
        Only while an invocation runs: the parent answers in its invocation loop, and a thread
        the handler left running must not read the connection the next invocation arrives on."""
        with self.ask_lock:
            if not self.relaying:
                return default
            self.connection.send(("ask", method, args))
            kind, value = self.connection.recv()
        assert kind == "answer", kind
        return value

    def end_relaying(self) -> None:
        with self.ask_lock:  # after an ask in flight is answered
            self.relaying = False

    def fault(self, service: str, operation: str, body: bytes) -> str | None:
        return self.ask("fault", service, operation, body)

    def dies_after(self, service: str, operation: str) -> bool:
        return bool(self.ask("dies_after", service, operation, default=False))


def serve(connection: Any, setup: dict[str, Any]) -> None:
    """The worker's main: environment, cold start, then invocations until "stop" or EOF."""
    # Ctrl-C in the terminal reaches the whole process group: the parent stops us itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    sys.path[:] = setup.get("sys_path") or sys.path
    worker = _WorkerEnd(connection)
    lock = worker.chunks_lock
    sys.stdout = _Output("stdout", worker.chunks, lock)
    sys.stderr = _Output("stderr", worker.chunks, lock)
    base_env: dict[str, str] = setup["environ"]
    function_env: dict[str, str] = setup["env"]
    _apply_environ(base_env, function_env)
    try:
        for path, value in setup.get("overrides", {}).items():
            module_name, _, attribute = path.rpartition(".")
            setattr(importlib.import_module(module_name), attribute, value)
        patched_botocore_send(worker.fault, worker.dies_after)
        handler = getattr(importlib.import_module(setup["module"]), setup["handler"])
    except BaseException as exc:  # noqa: BLE001 - an init error: the parent raises it
        connection.send(("ready", worker.output(), error_of(exc)))
        return
    connection.send(("ready", worker.output(), None))
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if message[0] == "stop":
            connection.send(("stopped", worker.output()))
            return
        request = message[1]
        if request.get("env") is not None and request["env"] != function_env:
            function_env = request["env"]
            _apply_environ(base_env, function_env)
        connection.send(("result", *_invoke(worker, handler, request)))


def _invoke(worker: _WorkerEnd, handler: Callable[..., Any], request: dict[str, Any]) -> tuple[Any, ...]:
    context = LambdaContext(**request["context"])
    worker.relaying = bool(request.get("relay_aws"))
    try:
        result = handler(json.loads(request["event"]), context)
        try:
            answer = json.dumps(result)
        except (TypeError, ValueError) as exc:
            return worker.output(), None, {"type": "Runtime.MarshalError", "message": f"Unable to marshal response: {exc}",
                                           "traceback": ""}
        return worker.output(), answer, None
    except BaseException as exc:  # noqa: BLE001 - a function error, reported as Lambda reports it
        return worker.output(), None, error_of(exc)
    finally:
        worker.end_relaying()


def _apply_environ(base: dict[str, str], function_env: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(base)
    os.environ.update(function_env)


def _die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the process we were forked from dies (Linux); the closed
    connection ends us too, between invocations."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
