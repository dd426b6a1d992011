"""The faults `make soak` injects, each drawn per call from a seed and what the call is about
(its item, its attempt), not from call order, so concurrent runs of one seed draw the same faults:

- `FaultProxy`: a loopback HTTP proxy in front of the decision container: 503 busy with
  Retry-After, no answer within the read timeout, a slow answer; or, for a share of the calls,
  a replay of the container's latest real answer to the same question (volume on 2 cores).
- `AwsFaults`: AWS calls throttled at botocore's HTTP send, below the SDK's retries, in this
  process (moto's workflow tasks) and, through each function's `aws_hook`, in the functions'
  own processes; and invocations that die right after they started an execution.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

import httpx

from local.lambda_worker import InvocationDied, patched_botocore_send
from local.lambdas import FunctionError, LocalFunction
from local.services import LOOPBACK

#: The intakes' read timeout here: a timeout fault then costs seconds, not the template's 70 s.
READ_TIMEOUT_SECONDS = 4.0
SLOW_SECONDS = 1.5
RETRY_AFTER_SECONDS = 1
#: A throttle outage outlasts the SDK's retries (standard mode, its default: 3 attempts within ~3 s).
OUTAGE_SECONDS = 5.0
#: The share of the throttled calls that begin an outage.
OUTAGE_SHARE = 1 / 20


class Draws:
    """Seeded uniform draws keyed by what a call is about and how often it was made, not by call
    order: concurrent runs of a seed draw the same fault for the same call."""

    def __init__(self, seed: int):
        self.seed = seed
        self.lock = threading.Lock()
        self.seen: Counter[tuple[str, ...]] = Counter()

    def uniform(self, *key: str) -> float:
        with self.lock:
            self.seen[key] += 1
            nth = self.seen[key]
        digest = hashlib.blake2b(repr((self.seed, key, nth)).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2 ** 64


# ----------------------------------------------------------------------------------- endpoint faults
class FaultProxy(ThreadingHTTPServer):
    """Loopback HTTP proxy in front of the decision container; per call, seeded: 503 busy with
    Retry-After, a hang past the read timeout, a slow answer; else the container (or, for the
    stub share, a replay of its latest real answer to the same question)."""

    daemon_threads = True

    def __init__(self, upstream: str, *, rate: float, stub_share: float, seed: int,
                 restart: tuple[int, Callable[[], None]] | None = None):
        """`restart`: after this many endpoint calls, call this."""
        super().__init__((LOOPBACK, 0), _ProxyHandler)
        self.upstream, self.rate, self.stub_share = upstream, rate, stub_share
        self.draws = Draws(seed)
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.latest: dict[tuple[str, tuple[str, ...], bool], dict[str, Any]] = {}  # question -> last real result
        self.client = httpx.Client(timeout=120)
        self.restart, self.calls = restart, 0  # `restart` returns at once (it signals the container's keeper)
        self.down = threading.Event()  # set while the container restarts: no call is answered, stub or real

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.server_address[1]}"

    def plan(self, body: bytes) -> tuple[str, float]:
        call = hashlib.sha256(body).hexdigest()
        roll, stub = self.draws.uniform("endpoint", call), self.draws.uniform("stub", call)
        with self.lock:
            self.calls += 1
            if self.restart and self.calls == self.restart[0]:
                self.restart[1]()
        if roll < self.rate:
            return "busy", 0.0
        if roll < 2 * self.rate:
            return "timeout", READ_TIMEOUT_SECONDS + 0.5
        if roll < 3 * self.rate:
            return "slow", SLOW_SECONDS
        return ("stub" if stub < self.stub_share else "real"), 0.0

    def forward(self, path: str, body: bytes, content_type: str) -> httpx.Response:
        """POST to the container; a kept-alive connection the container has closed meanwhile is
        retried once on a new one (that is the proxy's connection, not a fault)."""
        for attempt in (1, 2):
            try:
                return self.client.post(self.upstream + path, content=body, headers={"content-type": content_type})
            except (httpx.RemoteProtocolError, httpx.ReadError):
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def replay(self, body: bytes) -> bytes | None:
        """The latest real answers to these questions, under this request's decision ids."""
        try:
            request = json.loads(body)
        except ValueError:
            return None
        decisions = request.get("decisions") or [request.get("decision")]
        results = []
        for decision in decisions:
            latest = self.latest.get(_question_key(decision))
            if latest is None:
                return None
            results.append({**latest, "id": decision["id"]})
        if "decision" in request and request["decision"] is not None:
            return json.dumps({"result": results[0]}).encode()
        return json.dumps({"results": results, "timing": {"shared_prefix_tokens": 0, "shared_prefix_seconds": 0.0,
                                                          "total_seconds": 0.0, "batch_size": len(results)}}).encode()

    def remember(self, body: bytes, answer: bytes) -> None:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            request, data = json.loads(body), json.loads(answer)
            decisions = request.get("decisions") or [request["decision"]]
            results = data.get("results") or [data["result"]]
            with self.lock:
                for decision, result in zip(decisions, results):
                    self.latest[_question_key(decision)] = result


def _question_key(decision: dict[str, Any]) -> tuple[str, tuple[str, ...], bool]:
    return (decision["question"], tuple(o["id"] for o in decision["options"]), bool(decision.get("return_hidden_state")))


class _ProxyHandler(BaseHTTPRequestHandler):
    server: FaultProxy
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK wait

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        upstream = self.server.client.get(self.server.upstream + self.path)
        self._answer(upstream.status_code, upstream.content, upstream.headers.get("content-type", "application/json"))

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        fault, seconds = self.server.plan(body) if self.path.endswith("/invocations") else ("real", 0.0)
        self.server.counts[fault] += 1
        if fault == "busy":
            error = {"error": {"code": "busy", "message": "the model context stayed busy (soak fault)", "retryable": True}}
            self._answer(503, json.dumps(error).encode(), headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            return
        time.sleep(seconds)
        if fault == "timeout":  # the client gave up before this: the container is spared the work
            self._answer(504, b'{"error": {"code": "timeout", "message": "soak fault"}}')
            return
        if fault == "stub" and not self.server.down.is_set() and (replayed := self.server.replay(body)) is not None:
            self._answer(200, replayed)
            return
        if fault == "stub" and not self.server.down.is_set():  # while it restarts, the call is "container down"
            self.server.counts["stub"] -= 1
            self.server.counts["real, nothing to replay yet"] += 1
        try:
            if self.server.down.is_set():
                raise httpx.ConnectError("the container is restarting")
            upstream = self.server.forward(self.path, body, self.headers.get("content-type", "application/json"))
        except httpx.TransportError as error:  # the container is restarting: no instance answers
            self.server.counts["container down"] += 1
            down = {"error": {"code": "unavailable", "retryable": True,
                              "message": f"the model container is not answering (restarting): {type(error).__name__}"}}
            self._answer(503, json.dumps(down).encode(), headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            return
        if upstream.status_code == 200:
            self.server.remember(body, upstream.content)
        self._answer(upstream.status_code, upstream.content, headers={
            k: v for k, v in upstream.headers.items() if k.lower() == "retry-after"})

    def _answer(self, status: int, body: bytes, content_type: str = "application/json",
                headers: dict[str, str] | None = None) -> None:
        with contextlib.suppress(OSError):  # the client may have timed out and gone
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)


# ----------------------------------------------------------------------------------- AWS faults
class AwsFaults:
    """Throttles AWS calls at botocore's HTTP send, below the SDK's retries: a throttled request
    is retried by the caller's client as in AWS (the functions' boto3 clients; the workflow's
    DynamoDB task, whose client moto builds without retries, by the state's Retry). Seeded per
    call (`Draws`); at `outage_share` of the throttled calls the throttle lasts OUTAGE_SECONDS for
    that API."""

    THROTTLED = {("states", "StartExecution"): "ThrottlingException",
                 ("dynamodb", "PutItem"): "ProvisionedThroughputExceededException",
                 ("dynamodb", "UpdateItem"): "ProvisionedThroughputExceededException",
                 ("dynamodb", "GetItem"): "ProvisionedThroughputExceededException",
                 ("dynamodb", "DeleteItem"): "ProvisionedThroughputExceededException"}

    def __init__(self, rate: float, seed: int, tables: dict[str, str], outage_share: float = OUTAGE_SHARE):
        """`tables`: the DynamoDB tables to throttle, by table name -> what the counts call it."""
        self.rate, self.draws, self.tables, self.outage_share = rate, Draws(seed), tables, outage_share
        self.counts: Counter[str] = Counter()
        self.outages: dict[tuple[str, str, str], float] = {}  # API -> until (monotonic)
        self.lock = threading.Lock()
        self.active = False  # while `installed`: the functions' processes ask here too

    def fault(self, service: str, operation: str, body: bytes) -> str | None:
        """The error code to answer this request with, or None to send it."""
        code = self.THROTTLED.get((service, operation))
        if code is None or not self.active:
            return None
        data = _json(body)
        table = str(data.get("TableName", ""))
        if service == "dynamodb" and table not in self.tables:
            return None
        api = (service, operation, self.tables.get(table, ""))
        now = time.monotonic()
        roll = self.draws.uniform(*api, _subject(data))
        with self.lock:
            if self.outages.get(api, 0.0) > now:
                self.counts[f"{' '.join(filter(None, api))} {code} (outage)"] += 1
                return code
            if roll < self.rate * self.outage_share:
                self.outages[api] = now + OUTAGE_SECONDS
                self.counts[f"{' '.join(filter(None, api))} outages of {OUTAGE_SECONDS:g}s"] += 1
            if roll < self.rate:
                self.counts[f"{' '.join(filter(None, api))} {code}"] += 1
                return code
        return None

    def dies_after(self, service: str, operation: str) -> bool:
        """Whether the invocation that made this (successful) call dies right after it: one drawn
        to die (`wrap`) does so after the first execution it started, mid-batch."""
        if (service, operation) != ("states", "StartExecution") or not getattr(_invocation, "dies", False):
            return False
        _invocation.dies = False
        with self.lock:
            self.counts["invocation died after StartExecution"] += 1
        return True

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The faults on in this process's botocore (moto's workflow tasks call AWS from here)."""
        undo = patched_botocore_send(self.fault, self.dies_after)
        self.active = True
        try:
            yield
        finally:
            self.active = False
            undo()

    def wrap(self, function: LocalFunction) -> None:
        """The faults on in the function's own process (its AWS calls are decided here, through
        `aws_hook`), and drawn per invocation: whether it dies (at `rate` of the invocations,
        keyed by the batch's messages or the event: a redelivery draws anew); one that dies fails
        as Lambda reports it (a function error)."""
        function.aws_hook = self
        invoke = function.invoke

        def invoked(event: dict[str, Any]) -> Any:
            delivery = [r.get("messageId", "") for r in event.get("Records", [])] or [str(event.get("id", ""))]
            # Thread-local: the function's AWS calls are decided in the thread that invokes it.
            _invocation.dies = self.draws.uniform("dies", function.logical_id, *delivery) < self.rate
            try:
                return invoke(event)
            except InvocationDied as died:
                raise RuntimeError(f"Task timed out: {died}") from None
            except FunctionError as error:
                if error.error_type != InvocationDied.__name__:
                    raise
                raise RuntimeError(f"Task timed out: {error}") from None
            finally:
                _invocation.dies = False

        function.invoke = invoked  # type: ignore[method-assign]


_invocation = threading.local()


def _json(body: bytes) -> dict[str, Any]:
    with contextlib.suppress(ValueError):
        data = json.loads(body or b"{}")
        if isinstance(data, dict):
            return data
    return {}


def _subject(data: dict[str, Any]) -> str:
    """What a request is about, stable across runs: the execution's name, the item's key."""
    if "name" in data:
        return str(data["name"])
    record = data.get("Item") or data.get("Key") or {}
    for key in ("id", "item_id"):
        if isinstance(record.get(key), dict):
            return str(next(iter(record[key].values())))
    return ""
