"""The two local services `make demo` and the end-to-end tests run: the decision container
(`python -m decision_server`, a subprocess in its own process group) and a moto server
(in-process thread, Step Functions execution on), each on a free loopback port.

Both are context managers; leaving the block stops what was started, also on an exception or
Ctrl-C. The container is terminated, then killed after a grace period, and (on Linux) the kernel
sends it SIGTERM if this process dies without cleaning up (SIGKILL, crash). `unwinding_on_signals`
turns SIGTERM and SIGHUP into an exception, so the command lines stop everything on them as on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx

from local.cloudformation import DEFAULT_REGION, REPO_ROOT

LOOPBACK = "127.0.0.1"
# Fake credentials: nothing the demo does may reach a real AWS account.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


class ServiceError(RuntimeError):
    """A local service did not start; the message says what happened and where the log is."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn asking the kernel to SIGTERM the child when this process dies (Linux only).
    libc is resolved here, before the fork, so the child only makes one system call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, signal.SIGTERM)


def exit_description(returncode: int) -> str:
    """"exited with status 2", or "was killed by SIGILL (Illegal instruction)" for a signal."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"was killed by signal {-returncode}"
    return f"was killed by {sig.name} ({signal.strsignal(sig)})"


class DecisionContainer:
    """`python -m decision_server` on a free loopback port, logging to `log_path`; `settings`
    are environment variables for the server only (e.g. {"CHAT_MAX_TOKENS": "8"})."""

    def __init__(self, log_path: Path, *, model: Path | None = None, port: int | None = None,
                 stop_grace_seconds: float = 10.0, settings: dict[str, str] | None = None):
        self.log_path, self.model = log_path, model
        self.settings = dict(settings or {})
        self.port = port or free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.stop_grace_seconds = stop_grace_seconds
        self.process: subprocess.Popen | None = None
        self.started_at: float | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> DecisionContainer:
        env = {**os.environ, **self.settings}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT / "contract"), str(REPO_ROOT / "container"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        if self.model is not None:
            env["SM_LLAMA_CPP_MODEL"] = str(self.model)
        else:
            from decision_server.model_files import embedded_model_path

            # Explicit, so a leftover /opt/ml/model on this machine is never served by surprise.
            env["SM_LLAMA_CPP_MODEL"] = str(embedded_model_path())
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.started_at = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "decision_server", "--host", LOOPBACK, "--port", str(self.port)],
                cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: Ctrl-C reaches us, and we stop it ourselves
                preexec_fn=_die_with_parent(),
            )
        return self

    def wait_ready(self, timeout: float = 300.0, on_wait: Callable[[float], None] | None = None) -> float:
        """Poll `/ping` until 200 (model loaded and warmed up); returns the seconds since start()."""
        assert self.process is not None and self.started_at is not None, "start() first"
        started = self.started_at
        last_report = started
        while True:
            if self.process.poll() is not None:
                raise ServiceError(f"the decision container {exit_description(self.process.returncode)} "
                                   f"before it was ready:\n{self.log_tail()}\n(full log: {self.log_path})")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/ping", timeout=2).status_code == 200:
                    return time.monotonic() - started
            now = time.monotonic()
            if now - started > timeout:
                raise ServiceError(f"the decision container was not ready after {timeout:.0f}s "
                                   f"(log: {self.log_path}):\n{self.log_tail()}")
            if on_wait is not None and now - last_report >= 5:
                on_wait(now - started)
                last_report = now
            time.sleep(0.2)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join("    " + line for line in text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after the grace period; always reaps the child."""
        process, self.process = self.process, None
        if process is None:
            return
        pgid = process.pid  # start_new_session: the child leads its own group
        for sig, wait in ((signal.SIGTERM, self.stop_grace_seconds), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
            try:
                process.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> DecisionContainer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


class MotoServer:
    """moto's ThreadedMotoServer on a free loopback port, reset, with Step Functions executing."""

    def __init__(self) -> None:
        self._server = None
        self.port: int | None = None
        self.url: str | None = None

    def start(self) -> MotoServer:
        import logging

        from moto.server import ThreadedMotoServer

        # werkzeug would print every request to stderr.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address=LOOPBACK, port=0, verbose=False)
        self._server.start()
        self.port = self._server.get_host_and_port()[1]
        self.url = f"http://{LOOPBACK}:{self.port}"
        # moto keeps its state per process: start from nothing, then let Step Functions run definitions.
        httpx.post(f"{self.url}/moto-api/reset", timeout=10).raise_for_status()
        httpx.post(f"{self.url}/moto-api/config", json={"stepfunctions": {"execute_state_machine": True}},
                   timeout=10).raise_for_status()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


@contextlib.contextmanager
def patched_environ(values: dict[str, str | None]) -> Iterator[None]:
    """Set (or, for None, remove) environment variables for the block; restore them after."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        _set_environ(values)
        yield
    finally:
        _set_environ(saved)


def _set_environ(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def local_aws_environ(moto: MotoServer, decision_url: str) -> dict[str, str | None]:
    """boto3 → moto for every service except `sagemaker-runtime` → the local container.
    MOTO_PORT: moto's Step Functions interpreter calls SQS/DynamoDB/EventBridge back on it."""
    return {
        **FAKE_CREDENTIALS,
        "AWS_PROFILE": None,  # a profile from ~/.aws must not swap in real credentials
        "AWS_DEFAULT_REGION": DEFAULT_REGION,
        "AWS_REGION": DEFAULT_REGION,
        "AWS_ENDPOINT_URL": moto.url,
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": decision_url,
        "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": None,
        "MOTO_PORT": str(moto.port),
        "POWERTOOLS_TRACE_DISABLED": "1",  # no X-Ray daemon here
    }


class Terminated(BaseException):
    """SIGTERM/SIGHUP: unwind like Ctrl-C so every `with` block stops what it started."""


def _terminate(signum: int, _frame: object) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def unwinding_on_signals() -> Iterator[None]:
    """For the block: Ctrl-C raises KeyboardInterrupt (even when started in the background, where
    the shell ignores SIGINT), SIGTERM and SIGHUP raise `Terminated`. Python runs signal handlers
    in the main thread only: elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    previous.update({sig: signal.signal(sig, _terminate) for sig in (signal.SIGTERM, signal.SIGHUP)})
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
