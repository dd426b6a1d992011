"""A ledger of the AWS calls one item costs on the local stack: by path, caller, service and operation.

    with CallLedger() as ledger:
        ledger.watch(pipeline.functions)                  # every AWS call the functions send
        producer = ledger.client("sqs", "ticket source")  # a client whose calls are counted
        with ledger.measuring("automatic"):               # only calls inside a window count
            ...
        ledger.paths["automatic"].calls                   # Counter of (caller, service, operation)

Who is heard, and how:

- the functions (each execution environment a process of its own, `local.lambdas`): the
  parent's AWS-call hook (`LocalFunction.aws_hook`), which the worker asks before botocore sends
  each request (below the SDK's retries: a retried request is counted again, as AWS bills it);
  each invocation is counted too, with its local wall time (as GB-seconds at the template's memory:
  for reference only, moto being far slower than AWS);
- the routing workflow: a botocore `before-call` hook on boto3's default session, which moto's
  Step Functions interpreter makes a client from for every Task state it runs (the calls of
  any other code on that session are not its, and are left out);
- the platform's own calls that the local run plays by hand (a source sending a ticket, Lambda's
  SQS poller): clients made by `client`, each with a `before-call` hook naming its caller;
- what is billed without an API call here (an API Gateway request, an EventBridge rule's SNS
  delivery): `note`.

Also per window: the Step Functions state transitions of every execution the item started (its
`GetExecutionHistory`, read once the path settled: each state entered is one), and the
DynamoDB request units of every DynamoDB request moto answered (`DynamoCapacity`: sizes of the
items each request read or wrote, by the on-demand rules). Calls outside a window (seeding,
warming up, the run's own checks) are not counted; the run's checks use clients made before
the ledger, which it does not hear.
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator
from urllib.parse import parse_qs

if TYPE_CHECKING:
    from local.lambdas import LocalFunction

#: botocore's endpoint prefix → the service's name (what the functions' hook is told).
SERVICE_OF_PREFIX = {"states": "stepfunctions", "runtime.sagemaker": "sagemaker-runtime", "monitoring": "cloudwatch"}
#: The one operation a function calls on a REST-protocol service (whose request names none).
REST_OPERATION = {"sagemaker-runtime": "InvokeEndpoint", "s3": "GetObject"}
#: Who the routing workflow's calls are attributed to.
WORKFLOW = "workflow (Step Functions)"
#: The module whose frames mark a call as the workflow's (moto's Step Functions interpreter).
INTERPRETER = "moto.stepfunctions"
#: Lambda bills duration by the millisecond.
BILLED_MS = 1.0


@dataclass
class PathLedger:
    """What one path of one item cost."""

    calls: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (caller, service, operation)
    invocations: Counter[str] = field(default_factory=Counter)  # function → invocations
    gb_seconds: dict[str, float] = field(default_factory=dict)  # function → GB-s (local wall time)
    executions: list[str] = field(default_factory=list)  # ARNs of the executions it started
    waiting: list[str] = field(default_factory=list)  # those still waiting for a person at the end
    transitions: int = 0
    read_units: float = 0.0
    write_units: float = 0.0
    dynamodb_requests: int = 0  # as moto answered them (a check on `calls`)
    keys: dict[tuple[str, str, str, str], float] = field(default_factory=dict)  # (table, index, key, read|write) → units
    memory_mb: dict[str, int] = field(default_factory=dict)  # function → its memory

    def total(self, service: str | None = None) -> int:
        return sum(n for (_, s, _), n in self.calls.items() if service is None or s == service)


def operation_of(service: str, operation: str, body: bytes) -> str:
    """The operation a function's request names: its JSON target, a query protocol's `Action`,
    or the one operation the functions call on a REST service."""
    if operation:
        return operation
    if body[:7] == b"Action=":
        return parse_qs(body.decode("utf-8", "replace")).get("Action", ["?"])[0]
    return REST_OPERATION.get(service, "request")


def started_execution(body: bytes) -> str | None:
    """The ARN of the execution a StartExecution request body starts."""
    try:
        request = json.loads(body)
        return f"{request['stateMachineArn'].replace(':stateMachine:', ':execution:')}:{request['name']}"
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _unwatch(function: LocalFunction) -> None:
    function.aws_hook = None
    function.__dict__.pop("invoke", None)  # the class's own invoke again


class _FunctionHook:
    """A function's AWS-call hook (`local.lambdas.AwsCallHook`): counts, never faults."""

    def __init__(self, ledger: CallLedger, caller: str):
        self.ledger, self.caller = ledger, caller

    def fault(self, service: str, operation: str, body: bytes) -> str | None:
        service = SERVICE_OF_PREFIX.get(service, service)
        operation = operation_of(service, operation, body)
        self.ledger.count(self.caller, service, operation)
        if (service, operation) == ("stepfunctions", "StartExecution"):
            self.ledger.started(started_execution(body))
        return None

    def dies_after(self, service: str, operation: str) -> bool:
        return False


class CallLedger:
    """The ledger; a context manager (its hooks are on inside the block). Thread-safe."""

    def __init__(self) -> None:
        self.paths: dict[str, PathLedger] = {}
        self._current: PathLedger | None = None
        self.executions: list[str] = []  # every execution a function started, in or out of a window
        self._lock = threading.Lock()
        self._undo: list[Any] = []
        self.capacity = DynamoCapacity(self)

    # ------------------------------------------------------------------ windows
    @contextmanager
    def measuring(self, path: str) -> Iterator[PathLedger]:
        """Count what happens in the block as `path`'s (a path measured twice adds up)."""
        with self._lock:
            if self._current is not None:
                raise RuntimeError("one measuring window at a time")
            self._current = self.paths.setdefault(path, PathLedger())
            ledger = self._current
        try:
            yield ledger
        finally:
            with self._lock:
                self._current = None

    def count(self, caller: str, service: str, operation: str, n: int = 1) -> None:
        with self._lock:
            if self._current is not None:
                self._current.calls[(caller, service, operation)] += n

    note = count  # what is billed without an API call here (an API Gateway request, a rule's delivery)

    def started(self, execution_arn: str | None) -> None:
        with self._lock:
            if execution_arn and execution_arn not in self.executions:
                self.executions.append(execution_arn)
            if self._current is not None and execution_arn and execution_arn not in self._current.executions:
                self._current.executions.append(execution_arn)

    def _invoked(self, function: LocalFunction, seconds: float) -> None:
        billed = math.ceil(seconds * 1000 / BILLED_MS) * BILLED_MS / 1000
        with self._lock:
            if self._current is not None:
                self._current.invocations[function.logical_id] += 1
                self._current.memory_mb[function.logical_id] = function.memory
                name = function.logical_id
                self._current.gb_seconds[name] = self._current.gb_seconds.get(name, 0.0) + function.memory / 1024 * billed
                self._current.calls[(function.logical_id, "lambda", "Invoke")] += 1

    def _capacity(self, uses: list[Use]) -> None:
        with self._lock:
            if self._current is None:
                return
            self._current.dynamodb_requests += 1
            for use in uses:
                if use.kind == "read":
                    self._current.read_units += use.units
                else:
                    self._current.write_units += use.units
                name = (use.table, use.index, use.key, use.kind)
                self._current.keys[name] = self._current.keys.get(name, 0.0) + use.units

    # ------------------------------------------------------------------ who is heard
    def client(self, service: str, caller: str) -> Any:
        """A new boto3 client whose calls count as `caller`'s."""
        import boto3

        made = boto3.client(service)
        made.meta.events.register("before-call", lambda model, **_: self.count(caller, model.service_model.service_name,
                                                                              model.name))
        return made

    def watch(self, functions: Iterable[LocalFunction]) -> None:
        """Count each function's AWS calls (its hook) and invocations, as its own."""
        for function in functions:
            if function.aws_hook is not None:
                raise RuntimeError(f"{function.logical_id} has an AWS-call hook already")
            function.aws_hook = _FunctionHook(self, function.logical_id)
            original = function.invoke

            def invoke(event: dict[str, Any], _function: LocalFunction = function, _original: Any = original) -> Any:
                started = time.perf_counter()
                try:
                    return _original(event)
                finally:
                    self._invoked(_function, time.perf_counter() - started)

            function.invoke = invoke  # type: ignore[method-assign]
            self._undo.append(lambda f=function: _unwatch(f))

    def _workflow_call(self, model: Any, **_: Any) -> None:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_globals.get("__name__", "").startswith(INTERPRETER):
                self.count(WORKFLOW, model.service_model.service_name, model.name)
                return
            frame = frame.f_back  # type: ignore[assignment]

    # ------------------------------------------------------------------ state transitions
    def count_transitions(self, sfn: Any, path: PathLedger) -> None:
        """Each execution's states entered so far (its history, read with `sfn`, a client the ledger
        does not hear); one still running (waiting for a person) is listed in `path.waiting`."""
        for arn in path.executions:
            path.transitions += sum(1 for page in sfn.get_paginator("get_execution_history").paginate(executionArn=arn)
                                    for event in page["events"] if event["type"].endswith("StateEntered"))
            if sfn.describe_execution(executionArn=arn)["status"] == "RUNNING":
                path.waiting.append(arn)

    # ------------------------------------------------------------------ on and off
    def __enter__(self) -> CallLedger:
        import boto3

        events = boto3._get_default_session().events
        events.register("before-call", self._workflow_call, unique_id="capacity-ledger-workflow")
        self._undo.append(lambda: events.unregister("before-call", unique_id="capacity-ledger-workflow"))
        self._undo.append(self.capacity.install())
        return self

    def __exit__(self, *exc_info: Any) -> None:
        while self._undo:
            self._undo.pop()()


# ---------------------------------------------------------------------------------- DynamoDB
def attribute_size(value: dict[str, Any]) -> int:
    """Bytes of one DynamoDB attribute value, by the documented item-size rules."""
    (kind, data), = value.items()
    if kind == "S":
        return len(data.encode("utf-8"))
    if kind == "N":
        digits = len(str(data).lstrip("-").replace(".", "").strip("0")) or 1
        return 1 + math.ceil(digits / 2)
    if kind == "B":
        return math.ceil(len(data) * 3 / 4) if isinstance(data, str) else len(data)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(attribute_size({kind[0]: v}) for v in data)
    if kind == "L":
        return 3 + sum(1 + attribute_size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + attribute_size(v) for k, v in data.items())
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def item_size(item: dict[str, Any]) -> int:
    return sum(len(name.encode("utf-8")) + attribute_size(value) for name, value in item.items())


def read_units(size: int, consistent: bool) -> float:
    """Read request units for `size` bytes read: 4 KB a unit, half for an eventually consistent read."""
    return max(1, math.ceil(size / 4096)) * (1.0 if consistent else 0.5)


def write_units(size: int) -> float:
    return float(max(1, math.ceil(size / 1024)))


class DynamoCapacity:
    """The request units of each DynamoDB request moto's server answers, from the sizes of the items
    it read (a Query or Scan: the whole items behind those returned, scaled by ScannedCount/Count,
    since a projection or filter does not reduce what is read) or wrote (an update or delete: the
    item as it stands after, or stood before; each global secondary index the item is in is
    written too). Transactions cost twice. Each use is kept by its partition key (`Use.key`), so
    a key every item reads or writes (one partition, whatever the table's size) can be found."""

    def __init__(self, ledger: CallLedger):
        self.ledger = ledger

    def install(self) -> Any:
        from moto.dynamodb.responses import DynamoHandler

        original = DynamoHandler.call_action
        capacity = self

        def call_action(handler: Any) -> Any:
            raw = handler.body  # the request's JSON (moto's call_action swaps in its parsed parameters)
            body = json.loads(raw or "{}") if isinstance(raw, (str, bytes)) else dict(raw or {})
            action = handler.headers.get("X-Amz-Target", "").rpartition(".")[2]
            before = capacity._stored(handler, body) if action == "DeleteItem" else None
            response = original(handler)
            try:
                uses = capacity.uses(handler, action, body, response, before)
            except (ValueError, KeyError, TypeError, AttributeError):  # a request moto refused: nothing read or written
                uses = []
            capacity.ledger._capacity(uses)
            return response

        DynamoHandler.call_action = call_action  # type: ignore[method-assign]
        return lambda: setattr(DynamoHandler, "call_action", original)

    @staticmethod
    def _table(handler: Any, name: str) -> Any:
        from moto.dynamodb.models import dynamodb_backends

        return dynamodb_backends[handler.current_account][handler.region].get_table(name)

    def _stored(self, handler: Any, body: dict[str, Any], key: dict[str, Any] | None = None) -> Any:
        """The item of `key` (the request's Key) as the table holds it now, or None."""
        from moto.dynamodb.models import dynamodb_backends

        backend = dynamodb_backends[handler.current_account][handler.region]
        try:
            return backend.get_item(body["TableName"], key or body["Key"])
        except Exception:  # noqa: BLE001 - the table or key is gone: nothing more is read
            return None

    def uses(self, handler: Any, action: str, body: dict[str, Any], response: Any,
             before: Any) -> list[Use]:
        _, _, raw = response
        answer = json.loads(raw) if raw else {}
        if "__type" in answer and "ConditionalCheckFailed" not in answer["__type"]:
            return []  # refused before anything was read or written
        if action == "TransactWriteItems":
            return [Use(t["TableName"], "", "", "write", 2 * write_units(item_size(t.get("Item", t.get("Key", {})))))
                    for t in (next(iter(each.values())) for each in body["TransactItems"])]
        if action == "BatchWriteItem":
            return [Use(name, "", "", "write", write_units(item_size(r["PutRequest"]["Item"])) if "PutRequest" in r else 1.0)
                    for name, requests in body["RequestItems"].items() for r in requests]
        if action == "BatchGetItem":
            return [Use(name, "", key_value(key[self._table(handler, name).hash_key_attr]), "read",
                        read_units(0, bool(asked.get("ConsistentRead"))))
                    for name, asked in body["RequestItems"].items() for key in asked["Keys"]]
        if "TableName" not in body:
            return []
        table = self._table(handler, body["TableName"])
        consistent = bool(body.get("ConsistentRead"))
        if action == "GetItem":
            return [Use(table.name, "", key_value(body["Key"][table.hash_key_attr]), "read",
                        read_units(item_size(answer.get("Item", {})), consistent))]
        if action in ("Query", "Scan"):
            return [self._query_use(handler, table, body, answer)]
        if action == "PutItem":
            return self._write_uses(table, body["Item"], item_size(body["Item"]))
        if action in ("UpdateItem", "DeleteItem"):
            stored = self._stored(handler, body) if action == "UpdateItem" else before
            item = plain_item(stored)
            return self._write_uses(table, item or body["Key"], stored.size() if stored is not None else 0)
        return []

    @staticmethod
    def _write_uses(table: Any, item: dict[str, Any], size: int) -> list[Use]:
        units = write_units(size)
        uses = [Use(table.name, "", key_value(item.get(table.hash_key_attr, {"S": "?"})), "write", units)]
        for index in table.global_indexes:
            hash_attr = next(k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH")
            if hash_attr in item:
                uses.append(Use(table.name, index.name, key_value(item[hash_attr]), "write", units))
        return uses

    def _query_use(self, handler: Any, table: Any, body: dict[str, Any], answer: dict[str, Any]) -> Use:
        keys = [k["AttributeName"] for k in table.schema]
        size = 0
        for returned in answer.get("Items", []):
            whole = self._stored(handler, body, {k: returned[k] for k in keys}) if all(k in returned for k in keys) else None
            size += whole.size() if whole is not None else item_size(returned)
        count, scanned = answer.get("Count", 0), answer.get("ScannedCount", 0)
        if count and scanned > count:
            size = int(size * scanned / count)
        index = body.get("IndexName", "")
        return Use(table.name, index, partition_of(table, body), "read", read_units(size, bool(body.get("ConsistentRead"))))


@dataclass(frozen=True)
class Use:
    """Request units one request spent on one partition key of a table or index."""

    table: str
    index: str
    key: str
    kind: str  # read | write
    units: float


def key_value(value: dict[str, Any]) -> str:
    (_, data), = value.items()
    return str(data)


def plain_item(stored: Any) -> dict[str, Any]:
    """A moto item's attributes as DynamoDB JSON (the scalar ones a key can be made of)."""
    if stored is None:
        return {}
    return {name: {attribute.type: attribute.value} for name, attribute in stored.attrs.items()
            if attribute.type in ("S", "N", "B")}


def partition_of(table: Any, body: dict[str, Any]) -> str:
    """The partition key value a Query names (a Scan reads every partition: "*")."""
    condition = body.get("KeyConditionExpression")
    if not condition:
        return "*"
    index = next((i for i in table.global_indexes + table.indexes if i.name == body.get("IndexName")), None)
    schema = index.schema if index is not None else table.schema
    hash_attr = next(k["AttributeName"] for k in schema if k["KeyType"] == "HASH")
    names = body.get("ExpressionAttributeNames", {})
    for name, placeholder in re.findall(r"([#\w]+)\s*=\s*(:\w+)", condition):
        if names.get(name, name) == hash_attr:
            return key_value(body["ExpressionAttributeValues"][placeholder])
    return "?"
