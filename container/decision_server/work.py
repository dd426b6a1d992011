"""Work: what a request asks of the decode loop (llama-server's tasks), and the streams it needs.

A request becomes one `Work`; the work names the *streams* it needs, each a run of tokens that
one llama sequence must hold, and reads the output at a stream's last token. The scheduler
(scheduler.py) decides when a stream gets a sequence and which of its tokens go into a step.

Here: the base types, the worker-thread call and the measured prefill. The request kinds with
more to them have modules of their own: decisions (decision_work.py) and chat (chat_work.py).
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .llama import LlamaContext
from .prompt_cache import FinalOutput

#: The global prefix cache lives in this sequence; work uses the ids above it.
PREFIX_SEQUENCE = 0


@dataclass(eq=False)
class Stream:
    """Tokens one sequence must hold, how many it holds, and what happens at its last token."""

    work: "Work"
    tokens: list[int]
    start: int  # tokens already present when the stream starts (copied or restored)
    source: int | None  # sequence to copy `start` tokens from (None: nothing to copy)
    wants_output: bool = True  # read logits (and maybe the hidden state) at the last token
    wants_hidden: bool = False
    index: int = 0  # the work's own index for this stream (decision number, …)
    sequence: int = -1
    n_past: int = 0
    started_at: float = 0.0
    cost: int = 0  # KV cells this stream adds
    generating: bool = False  # a chat past its prompt: one sampled token per step
    counted_extra: bool = False  # started beyond its work's reservation
    cached: bool = True  # may start from a cached prompt, and is kept in the cache when done
    final: FinalOutput | None = None  # what its work read at its last token, for the cache

    @property
    def remaining(self) -> int:
        return len(self.tokens) - self.n_past


class Work:
    """A request's unit of work. Subclasses say which streams it needs and read their outputs."""

    def __init__(self) -> None:
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.cancelled = False
        self.arrival = 0
        self.queued_at = time.perf_counter()
        self.reservation = 0  # KV cells guaranteed to this work from admission to completion

    # The scheduler calls these from its worker thread only.
    def first_streams(self) -> list[Stream]:
        raise NotImplementedError

    def next_stream(self) -> Stream | None:
        """A further stream that may start now (e.g. the next question once the stem is done)."""
        return None

    def on_output(self, stream: Stream, ctx: LlamaContext, index: int, hidden: np.ndarray | None) -> bool:
        """Read the output at batch position `index`; True when the stream is finished."""
        raise NotImplementedError

    #: Whether a stream whose prompt is cached whole may be answered from its FinalOutput.
    answers_from_cache = False

    def on_cached_output(self, stream: Stream, final: FinalOutput) -> None:
        """Finish `stream` with the output cached for its very prompt (see answers_from_cache)."""
        raise NotImplementedError

    def on_stream_done(self, stream: Stream) -> None:
        pass

    @property
    def done(self) -> bool:
        raise NotImplementedError

    def finish(self) -> None:
        """All streams are done: resolve the future."""

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def cancel(self) -> None:
        self.cancelled = True


class WorkerCall(Work):
    """A function run on the worker thread (it owns the context)."""

    def __init__(self, function: Callable[[], Any]) -> None:
        super().__init__()
        self.function = function

    def run(self) -> None:
        try:
            self.future.set_result(self.function())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who re-raises it
            self.future.set_exception(exc)


class PrefillWork(Work):
    """Evaluate tokens in a fresh sequence (no prefix reuse) and time it: the floor under a decision."""

    def __init__(self, tokens: Sequence[int]) -> None:
        super().__init__()
        self.stream = Stream(self, list(tokens), start=0, source=None, cost=len(tokens), cached=False)
        self.reservation = len(tokens)
        self._done = False

    def first_streams(self) -> list[Stream]:
        return [self.stream]

    def on_output(self, stream, ctx, index, hidden) -> bool:
        ctx.logits(index)  # the result is there to be read
        self._done = True
        self.future.set_result(time.perf_counter() - stream.started_at)
        return True

    @property
    def done(self) -> bool:
        return self._done
