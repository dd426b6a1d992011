"""Shared fixtures: the real embedded model, loaded once, and a live decision server.

`embedded_engine`: a `decision_server.engine.DecisionEngine` on the embedded SmolLM2 GGUF.
`decision_server_url`: `http://127.0.0.1:PORT` of a real uvicorn server running the real app
over that engine on a free loopback port; stopped at the end of the session.
"""

from __future__ import annotations

import os

# Before any test module creates a boto3 client: fake credentials (no test may reach a real
# account), a region, and the Powertools settings the handlers read at import.
os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                   "POWERTOOLS_TRACE_DISABLED": "1"})
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "DecisionRouter")

import contextlib
import functools
import socket
import sys
import threading
import time
from typing import Iterator

import httpx
import pytest

#: Fixtures that load the embedded model: a test using one must be marked `model`.
MODEL_FIXTURES = {"embedded_engine", "decision_server_url"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make unit` deselects by marks: a test that loads the model without the mark would slip in."""
    unmarked = [item.nodeid for item in items
                if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("model") is None]
    if unmarked:
        raise pytest.UsageError("these tests load the embedded model; mark them @pytest.mark.model: " + ", ".join(unmarked))


# ------------------------------------------------------------------------------ the tiers' guard
# `make unit` is fast by rule, not by habit: what makes a test slow (the whole stack in moto, a
# process, a server, the model, a real-sized fit) fails the test that does it without the mark that
# keeps it out of the fast tier. The guard wraps each costly entry point once per session and asks
# which test runs; the comparison classifier's fit is wrapped around each unmarked test instead.
_running: pytest.Item | None = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """The test whose setup, call or teardown runs now (module fixtures are set up for the first);
    a test without the `fit` mark runs with the comparison classifier's fit guarded."""
    global _running
    _running = item
    try:
        with pytest.MonkeyPatch.context() as monkeypatch:
            if item.get_closest_marker("fit") is None:
                guard_the_baseline_fit(monkeypatch)
            return (yield)
    finally:
        _running = None


def _guarded(what: str, marks: tuple[str, ...], original, *, when=lambda *args, **kwargs: True):
    def guard(*args, **kwargs):
        item = _running
        if item is not None and when(*args, **kwargs) and not any(item.get_closest_marker(m) for m in marks):
            pytest.fail(f"{item.nodeid} {what} without @pytest.mark.{marks[0]}: mark it, or use the fakes "
                        f"(tests/fakes/) or Stack.create(only=...) to stay in the fast tier", pytrace=False)
        return original(*args, **kwargs)
    return guard


class _EachPathOnce(list):
    """A loader's search paths: boto3 appends its own data folder on every Session it makes."""

    def append(self, path) -> None:
        if path not in self:
            super().append(path)


def share_botocore_data() -> None:
    """One botocore loader for every session: each new session (a test's, moto's default one, an
    adapter's) would otherwise parse the bundled JSON again (endpoints, each service's model:
    megabytes, a tenth of a second a client). The data is botocore's own, read-only, the same for all."""
    import botocore.session

    make_loader = botocore.session.create_loader
    loaders: dict = {}

    def shared_loader(search_path_string=None):
        if search_path_string not in loaders:
            loader = make_loader(search_path_string)
            loader._search_paths = _EachPathOnce(loader.search_paths)
            loaders[search_path_string] = loader
        return loaders[search_path_string]

    botocore.session.create_loader = shared_loader


def validate_each_head_once() -> None:
    """A head file's bytes validated once a session: the shipped policies are loaded hundreds of
    times, each load validating its heads (megabytes of JSON), and a `Head` is frozen. Bytes not
    seen before, or that failed, go through the whole check (`read_head`) every time."""
    import hashlib

    from decision_router.domain import heads

    check = heads.read_head
    valid: dict[str, object] = {}  # the bytes' sha256 -> the Head read from them

    @functools.wraps(check)
    def read_head(data: bytes, sha256: str, *args, **kwargs):
        digest = hashlib.sha256(data).hexdigest()
        if digest == sha256 and digest in valid:
            return valid[digest]
        valid[digest] = head = check(data, sha256, *args, **kwargs)
        return head

    heads.read_head = read_head


def share_moto_kms_placeholder_key() -> None:
    """moto gives every KMS key an RSA private key, a symmetric one too, which never signs (each
    DynamoDB table with default encryption makes one: tens of milliseconds of key generation
    a table). The symmetric keys share one; an asymmetric key still gets its own."""
    from moto.kms import models

    make = models.generate_private_key
    placeholder = functools.cache(lambda: make("SYMMETRIC_DEFAULT"))

    def generate_private_key(key_spec: str):
        return placeholder() if key_spec == "SYMMETRIC_DEFAULT" else make(key_spec)

    models.generate_private_key = generate_private_key


def pytest_configure(config: pytest.Config) -> None:
    import multiprocessing.process
    import subprocess

    share_botocore_data()
    validate_each_head_once()
    share_moto_kms_placeholder_key()

    from local.cloudformation import Stack

    process_marks = ("server", "sam", "browser")  # SAM's CLI and Chromium are processes too
    guards = [
        (Stack, "create", "builds the whole stack in moto", ("stack",),
         lambda self, client=None, only=None: only is None),
        (subprocess.Popen, "__init__", "starts a process", process_marks, None),
        (multiprocessing.process.BaseProcess, "start", "starts a process", process_marks, None),
    ]
    with contextlib.suppress(ImportError):  # without llama-cpp-python nothing can load the model
        from decision_server.llama import LlamaModel
        guards.append((LlamaModel, "__init__", "loads the model", ("model",), None))
    import uvicorn
    from moto.server import ThreadedMotoServer

    # The decision server over the embedded model is the `model` fixtures' own (decision_server_url).
    guards += [(uvicorn.Server, "run", "starts a server", ("server", "model"), None),
               (ThreadedMotoServer, "start", "starts a server", ("server",), None)]
    for owner, name, what, marks, when in guards:
        original = getattr(owner, name)
        setattr(owner, name, _guarded(what, marks, original, **({"when": when} if when else {})))


#: The most training rows an unmarked test may fit the comparison classifier (TF-IDF + logistic
#: regression) on: past this a fit takes seconds, and the fast tier has none to spare.
UNMARKED_BASELINE_ROWS = 300


def guard_the_baseline_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """`training.learn.baseline_probabilities`, wherever a module holds it by name, fails the
    running test when asked to fit on more than UNMARKED_BASELINE_ROWS rows without the `fit` mark."""
    from training import learn

    original = getattr(learn.baseline_probabilities, "unguarded", learn.baseline_probabilities)

    @functools.wraps(original)
    def guarded(s, train, *args, **kwargs):
        item = _running  # read at the call: a module that took this by name keeps it past its test
        if item is not None and item.get_closest_marker("fit") is None and len(train) > UNMARKED_BASELINE_ROWS:
            pytest.fail(f"{item.nodeid} fits the comparison classifier (training.learn.baseline_probabilities) on "
                        f"{len(train)} training rows without @pytest.mark.fit: mark it, or fit on at most "
                        f"{UNMARKED_BASELINE_ROWS} rows to stay in the fast tier", pytrace=False)
        return original(s, train, *args, **kwargs)

    guarded.unguarded = original  # type: ignore[attr-defined]
    for module in modules_holding(original):
        monkeypatch.setattr(module, "baseline_probabilities", guarded)


_modules_read: set[str] = set()
_holders: dict[str, object] = {}  # name -> the module of that name that held it when read


def modules_holding(original) -> list:
    """The modules whose `baseline_probabilities` is `original` or a guard of it. Each module name
    is read once (there are thousands, and this runs before every test); one imported during an
    unmarked test took the guard itself, which asks which test runs at each call."""
    for name in sys.modules.keys() - _modules_read:
        _modules_read.add(name)
        held = getattr(sys.modules.get(name), "__dict__", {}).get("baseline_probabilities")
        if held is not None and getattr(held, "unguarded", held) is original:
            _holders[name] = sys.modules[name]
    return [module for name, module in _holders.items() if sys.modules.get(name) is module]


_one_blas_thread: list = []


def pytest_collection_finish(session: pytest.Session) -> None:
    """One BLAS thread in this process, once the test modules have loaded numpy and scipy: the
    tests' matrices are small, and a BLAS thread pool on two shared cores spends more waiting for
    its threads than computing (a novelty fit four times slower). The fitter and the functions run
    one BLAS thread themselves (training.head_fit.fit, decision_router.sentences)."""
    from threadpoolctl import threadpool_limits

    _one_blas_thread.append(threadpool_limits(limits=1, user_api="blas"))


@pytest.fixture(scope="session")
def embedded_engine():
    from decision_server.engine import DecisionEngine
    from decision_server.model_files import embedded_model_path

    # Explicit path: the tests must use the embedded model even where /opt/ml/model exists.
    return DecisionEngine(model_path=embedded_model_path())


@pytest.fixture(scope="session")
def decision_server_url(embedded_engine) -> Iterator[str]:
    import uvicorn

    from decision_server.app import create_app

    app = create_app(engine=embedded_engine)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # a free port, held open so no other process can take it
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="decision-server", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/ping", timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            pytest.fail(f"decision server did not become healthy at {url}")
        time.sleep(0.1)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@contextlib.contextmanager
def queue_full(engine) -> Iterator[None]:
    """The engine admits nothing new and its queue (size 1 here) holds one waiting request, so
    the next request is refused as busy; on exit the held request runs to completion."""
    from decision_contract import Decision

    queue_size = engine.scheduler.queue_size
    with engine.scheduler.held():
        engine.scheduler.queue_size = 1
        try:
            waiting = engine.submit_decisions([Decision(
                id="queued", state="A request that waits its turn.", question="Is it waiting?",
                options=[{"id": "yes", "description": "yes"}, {"id": "no", "description": "no"}])], field="decision")
            yield
        finally:
            engine.scheduler.queue_size = queue_size
    waiting.future.result(timeout=120)


@pytest.fixture
def letters_policies(monkeypatch, tmp_path):
    """The shipped policies without their heads, where the intake loads them from: for tests whose
    stub endpoint answers through the letters."""
    import json

    from decision_router.domain import policies

    for path in policies.POLICY_DIR.glob("*.json"):
        raw = json.loads(path.read_text())
        for question in raw["questions"]:
            question.pop("head", None)
        (tmp_path / path.name).write_text(json.dumps(raw))
    monkeypatch.setattr(policies, "POLICY_DIR", tmp_path)
