"""The queue of work waiting for the decode loop (llama-server's task queue).

Work waits here in arrival order until the scheduler admits it; calls to run on the worker
thread (`WorkerCall`) go to the head and run between decode steps, holds or not. The queue's
condition is what the worker sleeps on, so every change that may give it something to do
notifies it. Whether the head *fits* (sequence slots, KV cells) is the scheduler's to say.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections import deque
from typing import Any, Callable, Iterator

from .errors import Busy, Cancelled
from .work import Work, WorkerCall


class WorkQueue:
    """Queued work and worker calls, in the order the worker takes them; thread-safe."""

    def __init__(self, size: int) -> None:
        self.size = size  # at most this much work waits (DECISION_QUEUE_SIZE)
        self._ready = threading.Condition()
        self._items: deque[Work] = deque()
        self._arrivals = itertools.count(1)
        self._holds = 0
        self._stopping = False

    def __len__(self) -> int:
        return len(self._items)

    def submit(self, work: Work) -> None:
        with self._ready:
            if len(self._items) >= self.size:
                raise Busy(f"the request queue is full ({self.size} waiting; DECISION_QUEUE_SIZE)",
                           retry_after_seconds=1)
            work.arrival = next(self._arrivals)
            self._items.append(work)
            self._ready.notify()

    def call(self, function: Callable[[], Any]) -> Any:
        """Run `function` on the worker thread between decode steps, ahead of queued work."""
        work = WorkerCall(function)
        with self._ready:
            self._items.appendleft(work)
            self._ready.notify()
        return work.future.result()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Admit no new work while inside (calls still run)."""
        with self._ready:
            self._holds += 1
        try:
            yield
        finally:
            with self._ready:
                self._holds -= 1
                self._ready.notify()

    def stop(self) -> None:
        with self._ready:
            self._stopping = True
            self._ready.notify()

    def take(self, busy: Callable[[], bool], fits: Callable[[Work], bool],
             admit: Callable[[Work], None]) -> list[WorkerCall] | None:
        """Wait until there is something to do (`busy()`: admitted work to progress, or a head
        to take), then take the calls and admissible work at the head: calls are returned, to run
        outside the lock; work is handed to `admit` in arrival order while no hold is on and
        `fits(head)`. The head that does not fit stops admission (no overtaking). None once the
        queue is stopping."""
        with self._ready:
            while not self._stopping and not (busy() or self._head_ready()):
                self._ready.wait()
            if self._stopping:
                return None
            calls = []
            while self._items:
                head = self._items[0]
                if isinstance(head, WorkerCall):
                    calls.append(self._items.popleft())
                    continue
                if self._holds or not fits(head):
                    break
                self._items.popleft()
                if head.cancelled:
                    head.fail(Cancelled("cancelled before it started"))
                    continue
                admit(head)
            return calls

    def _head_ready(self) -> bool:
        return bool(self._items) and (self._holds == 0 or isinstance(self._items[0], WorkerCall))

    def remove_cancelled(self) -> None:
        """Fail the queued work whose client has gone, so it holds no place in the queue."""
        with self._ready:
            for work in [w for w in self._items if w.cancelled]:
                self._items.remove(work)
                work.fail(Cancelled("cancelled before it started"))

    def remaining(self) -> list[Work]:
        """What is still queued (the worker fails it when stopping)."""
        return list(self._items)
