"""The template's functions on this machine, each execution environment a process of its own
(there is no Lambda runtime here, and moto cannot run our code without Docker).

- `LocalFunction`: one `AWS::Serverless::Function` of template.yaml in one execution
  environment: a worker process (`local.lambda_worker`) that was given the function's environment
  (its own os.environ, module state and stdout, as Lambda gives each environment) and
  cold-started the handler module. An invocation sends the event as JSON and gets the JSON result
  back, or the handler's exception as `FunctionError` (its type, message and traceback). What the
  function writes to stdout and stderr goes to `log` (CloudWatch Logs, in AWS). An invocation
  past the template's Timeout is ended as Lambda ends it: the process is killed, the next
  invocation cold-starts a new one. `copy` makes another execution environment of the function.
- `FunctionPool`: several execution environments of one function, lent one invocation at a time.

Why processes: this process runs the moto server, whose Step Functions interpreter executes the
routing workflow in its threads and builds a boto3 client per task, reading os.environ as it does.
A function environment applied to this process's os.environ around an invocation could vanish
while the interpreter read it (a workflow once failed with States.Runtime
'POWERTOOLS_METRICS_NAMESPACE'). Here it never changes.

The workflow invokes one function, the pending-review index's writer (`lambda:invoke` with its
task token): `serve_workflow_invokes` has moto's interpreter run that invoke on a LocalFunction (or
a pool of them) in place of moto's Lambda, which would run the code in Docker. The Invoke request
is still built and validated by a boto3 client, as moto's interpreter would send it.

Workers are forked from a server process that imported the heavy libraries once
(`lambda_worker.PRELOAD`), so a cold start costs the handler's own imports. They stop on `close`,
when the parent process exits, or when it dies (their connection closes; the kernel signals them).

Under moto's in-process mock (`mock_aws`, which exists only in the process that started it) a
function cannot reach AWS from another process: there it runs in this process instead, its
environment applied around each invocation, one invocation in the process at a time.

Everything is read from template.yaml (handlers, environments, timeouts, memory) through
`local.cloudformation.Stack`; `local.event_sources` is what calls the functions.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import itertools
import json
import multiprocessing
import os
import queue
import sys
import threading
import time
import weakref
from typing import Any, Iterator, Protocol, TextIO

from local.cloudformation import Stack, TemplateError
from local.lambda_worker import PRELOAD, LambdaContext, error_of, serve
from local.services import patched_environ

__all__ = ["AwsCallHook", "FunctionError", "FunctionPool", "LambdaContext", "LocalFunction"]

#: How long past its Timeout an invocation may take before it is ended (this machine is shared).
TIMEOUT_GRACE_SECONDS = 2.0
#: How long a cold start may take (Lambda's init phase has 10 s; two busy cores need more).
COLD_START_SECONDS = 120.0
STOP_SECONDS = 5.0

_COPIES = itertools.count(1)
_LOG_LOCK = threading.Lock()  # every function's output goes to the log whole, one chunk at a time
_IN_PROCESS = threading.RLock()  # in-process functions (under mock_aws) swap os.environ: one at a time
_context: Any = None


class FunctionError(Exception):
    """The handler raised (or the invocation was ended): what Lambda reports as a function error.
    str() is the exception's message; `error_type` its class name, `remote_traceback` its trace."""

    def __init__(self, error_type: str, message: str, remote_traceback: str = ""):
        super().__init__(message)
        self.error_type, self.remote_traceback = error_type, remote_traceback


class AwsCallHook(Protocol):
    """Called, in this process, for each AWS request a function's invocation sends (the soak's faults)."""

    def fault(self, service: str, operation: str, body: bytes) -> str | None:
        """An error code to answer the request with instead of sending it."""

    def dies_after(self, service: str, operation: str) -> bool:
        """Whether the invocation dies right after this successful call."""


def error_type(error: BaseException) -> str:
    """The type name Lambda reports for a function error."""
    return error.error_type if isinstance(error, FunctionError) else type(error).__name__


def _multiprocessing() -> Any:
    """The forkserver context: forking this process (threads: moto, HTTP servers) is unsafe."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _in_process_mock_active() -> bool:
    models = sys.modules.get("moto.core.models")
    return bool(models is not None and getattr(models.MockAWS, "_nested_count", 0) > 0)


class LocalFunction:
    """One `AWS::Serverless::Function` of the template in one execution environment (`copy`
    makes another). `env`: variables set on top of the template's (what a local run must tell the
    function); it may change until an invocation, which sends it along. `overrides`: module
    attributes set in the environment before the cold start ("package.module.NAME": value, for
    tests). `aws_hook`: see `AwsCallHook`."""

    def __init__(self, stack: Stack, logical_id: str, *, log: TextIO | None = None, env: dict[str, str] | None = None,
                 overrides: dict[str, Any] | None = None, wait: bool = True):
        self.stack, self.logical_id, self.log = stack, logical_id, log
        self.env = {**stack.function_environment(logical_id), **(env or {})}
        self.overrides = dict(overrides or {})
        self.name = stack.physical_name(logical_id)
        globals_ = stack.template.get("Globals", {}).get("Function", {})
        props = stack.properties(logical_id)
        self.timeout = float(stack.resolve(props.get("Timeout", globals_.get("Timeout", 3))))
        self.memory = int(stack.resolve(props.get("MemorySize", globals_.get("MemorySize", 128))))
        # A container-image function names its handler in ImageConfig.Command (the image's CMD).
        command = props.get("ImageConfig", {}).get("Command") or [None]
        handler = props.get("Handler") or command[0] or globals_.get("Handler")
        if not handler or "." not in handler:
            raise TemplateError(f"{logical_id}: Handler {handler!r} is not module.function")
        self.module_name, self.handler_name = handler.rsplit(".", 1)
        self.aws_hook: AwsCallHook | None = None
        self._lock = threading.Lock()  # an execution environment serves one invocation at a time
        self._environment: _Environment = (_InProcess(self) if _in_process_mock_active() else _ParentEnd(self))
        self._finalizer = weakref.finalize(self, self._environment.stop)
        if wait:
            self.wait_ready()

    @property
    def pid(self) -> int | None:
        """The execution environment's process; None when it runs in this one (or is stopped)."""
        process = getattr(self._environment, "process", None)
        return process.pid if process is not None else None

    def wait_ready(self) -> LocalFunction:
        """Wait for the cold start; its exception (a bad setting, an import error) is raised here."""
        self._environment.ready()
        return self

    def copy(self, *, wait: bool = True) -> LocalFunction:
        """Another execution environment of this function (its own cold start), sharing this one's
        environment variables (one dict: what is set on either applies to both)."""
        twin = LocalFunction(self.stack, self.logical_id, log=self.log, env=self.env, overrides=self.overrides, wait=False)
        twin.env, twin.timeout, twin.aws_hook = self.env, self.timeout, self.aws_hook
        return twin.wait_ready() if wait else twin

    def runtime_env(self) -> dict[str, str]:
        """The environment variables the function sees: the template's, `env`, Lambda's own."""
        return {**self.env, "AWS_LAMBDA_FUNCTION_NAME": self.name, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(self.memory)}

    def context(self) -> LambdaContext:
        arn = f"arn:aws:lambda:{self.stack.region}:{self.stack.account_id}:function:{self.name}"
        return LambdaContext(function_name=self.name, memory_limit_in_mb=self.memory,
                             invoked_function_arn=arn, timeout_seconds=self.timeout)

    def invoke(self, event: dict[str, Any]) -> Any:
        """A synchronous invoke: the handler's result, or its exception (a function error, also
        written to the log as the Lambda runtime writes it)."""
        with self._lock:
            try:
                return self._environment.invoke(event)
            except FunctionError as error:
                self.write_output([("stderr", error.remote_traceback or f"{error.error_type}: {error}\n")])
                raise

    def write_output(self, chunks: list[tuple[str, str]]) -> None:
        """What the function wrote, to `log`, or else to this process's stdout and stderr."""
        if not chunks:
            return
        with _LOG_LOCK:
            for stream, text in chunks:
                target = self.log if self.log is not None else (sys.stderr if stream == "stderr" else sys.stdout)
                target.write(text)
            (self.log or sys.stdout).flush()

    def close(self) -> None:
        """Stop the execution environment (a later invoke would start a new one)."""
        self._finalizer()

    def event_source(self, event_type: str) -> dict[str, Any]:
        """Properties of the function's only event of this type (SQS, EventBridgeRule, ...)."""
        found = [e["Properties"] for e in self.stack.properties(self.logical_id).get("Events", {}).values()
                 if e["Type"] == event_type]
        if event_type == "SQS":  # a plain function's SQS event source is an EventSourceMapping of its own
            found += [{**props, "Queue": props["EventSourceArn"]} for mapping in self.stack.of_type(
                "AWS::Lambda::EventSourceMapping") if (props := self.stack.properties(mapping)).get("FunctionName")
                == {"Ref": self.logical_id}]
        if len(found) != 1:
            raise TemplateError(f"{self.logical_id}: expected one {event_type} event, found {len(found)}")
        return found[0]


class _Environment(Protocol):
    def ready(self) -> None: ...
    def invoke(self, event: dict[str, Any]) -> Any: ...
    def stop(self) -> None: ...


class _ParentEnd:
    """The execution environment as a worker process, held by the parent's end of their pipe (the
    worker's end is local.lambda_worker._WorkerEnd); started again after it was ended."""

    def __init__(self, function: LocalFunction):
        # Not the function itself: its finalizer must not keep it alive.
        self.function = weakref.proxy(function)
        self.process: Any = None
        self.connection: Any = None
        self.init_error: FunctionError | None = None
        self._start()

    def _start(self) -> None:
        function = self.function
        self.init_error = None
        # This process's sys.path too: pytest puts the import roots there, not in PYTHONPATH.
        setup = {"environ": dict(os.environ), "env": function.runtime_env(), "overrides": function.overrides,
                 "module": function.module_name, "handler": function.handler_name, "sys_path": list(sys.path)}
        context = _multiprocessing()
        self.connection, child = context.Pipe()
        self.process = context.Process(target=serve, args=(child, setup), daemon=True,
                                       name=f"lambda-{function.logical_id}")
        self.process.start()
        child.close()  # ours is the only other end: the worker sees EOF when we go
        self._ready = False

    def ready(self) -> None:
        if self._ready:
            return
        if not self.connection.poll(COLD_START_SECONDS):
            self.stop(kill=True)
            raise FunctionError("Runtime.InitTimeout", f"{self.function.logical_id}: no cold start in {COLD_START_SECONDS:.0f}s")
        try:
            _, output, error = self.connection.recv()
        except EOFError:
            raise FunctionError("Runtime.ExitError", f"{self.function.logical_id}: the runtime exited during its "
                                f"cold start ({self._exit()})") from None
        self.function.write_output(output)
        self._ready = True
        if error is not None:
            self.init_error = FunctionError(error["type"], error["message"], error["traceback"])
            raise self.init_error

    def invoke(self, event: dict[str, Any]) -> Any:
        if self.process is None:  # ended by a timeout or a crash: a new cold start
            self._start()
        self.ready()
        if self.init_error is not None:
            raise self.init_error
        function = self.function
        context = function.context()
        request = {"event": json.dumps(event), "env": function.runtime_env(), "relay_aws": function.aws_hook is not None,
                   "context": {"function_name": context.function_name, "memory_limit_in_mb": context.memory_limit_in_mb,
                               "invoked_function_arn": context.invoked_function_arn,
                               "timeout_seconds": context.timeout_seconds, "aws_request_id": context.aws_request_id}}
        self.connection.send(("invoke", request))
        deadline = time.monotonic() + function.timeout + TIMEOUT_GRACE_SECONDS
        while True:
            if not self.connection.poll(max(0.0, deadline - time.monotonic())):
                self.stop(kill=True)  # as Lambda ends a timed-out environment
                raise FunctionError("Sandbox.Timedout", f"RequestId: {context.aws_request_id} Error: Task timed out "
                                    f"after {function.timeout:.2f} seconds")
            try:
                message = self.connection.recv()
            except EOFError:
                why = self._exit()
                self.stop(kill=True)
                raise FunctionError("Runtime.ExitError", f"RequestId: {context.aws_request_id} Error: Runtime exited "
                                    f"({why})") from None
            if message[0] == "ask":  # the worker waits for the hook's answer
                _, method, args = message
                self.connection.send(("answer", getattr(function.aws_hook, method)(*args)))
                continue
            _, output, result, error = message
            function.write_output(output)
            if error is not None:
                raise FunctionError(error["type"], error["message"], error["traceback"])
            return json.loads(result)

    def _exit(self) -> str:
        from local.services import exit_description

        self.process.join(1)
        code = self.process.exitcode
        return exit_description(code) if code is not None else "still running"

    def stop(self, *, kill: bool = False) -> None:
        """Ask the worker to stop (what it wrote last goes to the log); SIGKILL when it does not."""
        process, connection, self.process = self.process, self.connection, None
        if process is None:
            return
        with contextlib.suppress(OSError, EOFError):
            if kill:
                process.kill()
            else:
                connection.send(("stop",))
                if connection.poll(STOP_SECONDS):
                    message = connection.recv()
                    # The function may be gone (a finalizer at exit) and the log closed.
                    with contextlib.suppress(ReferenceError, ValueError):
                        self.function.write_output(message[1] if message[0] == "stopped" else [])
        process.join(STOP_SECONDS)
        if process.is_alive():
            process.kill()
            process.join(STOP_SECONDS)
        connection.close()


class _InProcess:
    """The execution environment in this process (under moto's in-process mock): the handler
    module executed anew under a private name, the environment applied around each invocation."""

    def __init__(self, function: LocalFunction):
        self.function = weakref.proxy(function)
        with self.applied():
            self.module = _cold_start(function.module_name, alias=f"_local_lambda_{function.logical_id}_{next(_COPIES)}")
            for path, value in function.overrides.items():  # on this environment's own copy of the handler module
                module_name, _, attribute = path.rpartition(".")
                setattr(self.module if module_name == function.module_name else importlib.import_module(module_name),
                        attribute, value)
        _own_metrics(self.module)
        self.handler = getattr(self.module, function.handler_name)

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The function's environment; its stdout and stderr to `log` when given."""
        with _IN_PROCESS, contextlib.ExitStack() as stack:
            stack.enter_context(patched_environ(self.function.runtime_env()))
            if self.function.log is not None:
                stack.enter_context(contextlib.redirect_stdout(self.function.log))
                stack.enter_context(contextlib.redirect_stderr(self.function.log))
            yield

    def ready(self) -> None:
        pass

    def invoke(self, event: dict[str, Any]) -> Any:
        with self.applied():
            try:
                return self.handler(event, self.function.context())
            except Exception as exc:
                error = error_of(exc)
                raise FunctionError(error["type"], error["message"], error["traceback"]) from exc

    def stop(self) -> None:
        pass


def _cold_start(module_name: str, *, alias: str) -> Any:
    """Execute the handler module anew under a private name: module-level state (clients,
    cached settings, processors) starts empty, and the real module in sys.modules is left alone."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        raise TemplateError(f"handler module {module_name!r} not found (is functions/ on the path?)")
    fresh = importlib.util.spec_from_file_location(alias, spec.origin)
    module = importlib.util.module_from_spec(fresh)
    fresh.loader.exec_module(module)
    return module


def _own_metrics(module: Any) -> None:
    """Give the module's Powertools Metrics their own store: Powertools keeps one per process, and
    two functions in this one must not flush each other's metrics."""
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
    invocation at a time. The copies cold-start together."""

    def __init__(self, function: LocalFunction, size: int):
        self.functions = [function] + [function.copy(wait=False) for _ in range(max(0, size - 1))]
        for each in self.functions:
            each.wait_ready()
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

    def close(self) -> None:
        for function in self.functions:
            function.close()


# ------------------------------------------------------------- the workflow's Lambda tasks
#: The functions moto's Step Functions interpreter may invoke here, by the FunctionName the
#: template gives the workflow (the function's ARN or name): each `lambda:invoke` task runs one.
_WORKFLOW_TARGETS: dict[str, FunctionPool | LocalFunction] = {}


def serve_workflow_invokes(function: LocalFunction, pool: FunctionPool | None = None) -> None:
    """Let the routing workflow's `lambda:invoke` tasks run `function` (or its pool) in this
    process's moto: moto's Lambda would run the code in Docker, which the local run has not.
    Replaced by the next deployment that serves a function of the same name."""
    target = pool if pool is not None else function
    for key in (function.name, function.stack.get_att(function.logical_id, "Arn")):
        _WORKFLOW_TARGETS[key] = target
    _patch_moto_lambda_tasks()


def _invoke_served(parameters: dict[str, Any], region: str, state_credentials: Any) -> dict[str, Any]:
    """moto's `lambda_eval_utils._invoke_lambda_function`, for a served function: the Invoke request
    is built (and validated) by a boto3 client as moto's would be, and answered before it is sent
    by the local function: its result, or its exception as a function error ('Unhandled', with
    Lambda's errorType and errorMessage)."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
    from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for

    target = _WORKFLOW_TARGETS.get(str(parameters.get("FunctionName")))
    if target is None:
        return _MOTO_INVOKE(parameters=parameters, region=region, state_credentials=state_credentials)
    client = boto_client_for(region=region, service="lambda", state_credentials=state_credentials)
    client.meta.events.register_first("before-send.lambda.Invoke", functools.partial(_answer_invoke, target))
    response = client.invoke(**parameters)
    response["Payload"] = lambda_eval_utils._from_payload(response["Payload"])
    return response


def _answer_invoke(target: FunctionPool | LocalFunction, request: Any, **_: Any) -> Any:
    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse

    event = json.loads(request.body or b"{}")
    headers = {"Content-Type": "application/json"}
    try:
        if isinstance(target, FunctionPool):
            with target.borrowed() as function:
                result = function.invoke(event)
        else:
            result = target.invoke(event)
    except FunctionError as error:
        headers["X-Amz-Function-Error"] = "Unhandled"
        result = {"errorType": error.error_type, "errorMessage": str(error)}
    body = json.dumps(result).encode("utf-8")
    return AWSResponse(request.url, 200, headers, MockRawResponse(body))


_MOTO_INVOKE: Any = None


def _patch_moto_lambda_tasks() -> None:
    global _MOTO_INVOKE
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    if _MOTO_INVOKE is None:
        _MOTO_INVOKE = lambda_eval_utils._invoke_lambda_function
        lambda_eval_utils._invoke_lambda_function = _invoke_served
