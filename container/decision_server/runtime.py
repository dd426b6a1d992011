"""The served engine's life cycle: load in the background, warm up, then report ready.

SageMaker expects port 8080 to accept connections almost at once and `/ping` to answer
within 2 s, so loading never blocks the listener: `/ping` is 503 until the model is loaded
AND a warm-up decision succeeded.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from .engine import DecisionEngine
from .errors import NotReady, Unhealthy
from .settings import Settings

log = logging.getLogger("decision_server.runtime")


class ModelRuntime:
    def __init__(self, settings: Settings, engine: DecisionEngine | None = None) -> None:
        self.settings = settings
        self.engine = engine
        self.error: str | None = None
        self.started_at = time.time()
        self.on_failure: Callable[[str], None] | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._load, name="model-loader", daemon=True)
            self._thread.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def require(self) -> DecisionEngine:
        """The engine, or 503 `not_ready` (retryable) while it is loading or warming up."""
        if not self._ready.is_set() or self.engine is None:
            reason = f"model failed to load: {self.error}" if self.error else "the model is loading"
            raise NotReady(reason, retry_after_seconds=5)
        return self.engine

    def healthy(self) -> DecisionEngine:
        """`/ping`: the engine while it serves; 503 `unhealthy` once the model has failed
        DECISION_UNHEALTHY_AFTER_FAILURES decodes in a row (a lost GPU, say), so that SageMaker
        replaces the instance instead of routing every request to a broken model."""
        engine = self.require()
        failures = engine.scheduler.consecutive_failures
        if failures >= self.settings.unhealthy_after_failures:
            raise Unhealthy(
                f"the model failed {failures} forward passes in a row (DECISION_UNHEALTHY_AFTER_FAILURES="
                f"{self.settings.unhealthy_after_failures})"
            )
        return engine

    def _load(self) -> None:
        try:
            if self.engine is None:
                self.engine = DecisionEngine(self.settings)
            result = self.engine.warm_up()
            log.info("warm-up decision succeeded in %.3fs; ready", result.timing.total_seconds)
            self._ready.set()
        except Exception as exc:  # a start-up fault: report it and let the process stop
            self.error = f"{type(exc).__name__}: {exc}"
            log.critical("model start-up failed: %s", self.error, exc_info=True)
            if self.on_failure is not None:
                self.on_failure(self.error)
