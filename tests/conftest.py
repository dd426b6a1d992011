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
import socket
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
# process, a server, the model) fails the test that does it without the mark that keeps it out of
# the fast tier. The guard wraps each costly entry point once per session and asks which test runs.
_running: pytest.Item | None = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """The test whose setup, call or teardown runs now (module fixtures are set up for the first)."""
    global _running
    _running = item
    try:
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


def pytest_configure(config: pytest.Config) -> None:
    import multiprocessing.process
    import subprocess

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
