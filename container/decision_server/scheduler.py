"""Continuous batching: every request's tokens go through one decode loop over many sequences.

One worker thread owns the llama.cpp context. Requests become *work* (a decision batch, a chat
generation, a measured prefill) queued in arrival order; the worker admits work while sequence
slots and KV cells allow, and each step packs up to `n_batch` tokens from every active
sequence into ONE decode:

- chat generations add their next token (one each), so a long generation never blocks decisions;
- prefills fill the rest in arrival order, so no request is starved by later ones; on a CPU a
  step ends with the first request whose answer it carries (`finish_first`): there a step costs
  in proportion to its tokens, so packing the next request's prefill behind a finishing one
  gains nothing and delays that answer by the rest of the step;
- a decision's last prompt token asks for the logits at its position (and, when the caller
  wants the hidden state, goes into a step of output tokens only with embeddings on: with
  embeddings on llama.cpp outputs every token of a step, so mixing prefill in would cost a
  vocabulary projection per prefill token).

Prefix reuse, without re-evaluating anything:
- sequence 0 holds the prompt prefix every decision shares (chat template header, the fixed
  system instruction, the start of the user payload), evaluated once at start-up;
- a batch of decisions on one state evaluates its common prefix once in a *stem* sequence,
  then each question's sequence starts as a copy of the stem and evaluates only its suffix; a
  criterion-first decision's stem is its prompt up to the evidence (readout.py).

Across requests (the prompt cache, prompt_cache.py): a finished request's cells are saved to
host memory as a cache entry before its sequence is cleared, and a new stream whose longest
shared token prefix is a cached prompt's (rather than sequence 0's or its own stem's) gets those
cells written back and evaluates only the rest. A decision's entry also keeps what was read at
its last position (`FinalOutput`), so the very same prompt again is answered with the very same
numbers and no forward pass. The KV cache itself holds only sequence 0 and running work, so a
fresh prompt attends over no cached prompt's cells.

Copies share KV cells (no data moves). Recurrent/hybrid models have no cells to share, so their
copies serialise the source sequence's state instead (`copy_by_state`), and their prompt cache
keeps whole sequence states, each serving only prompts that extend it whole (a state cannot be
cut back to a shorter prefix); everything else is the same.

The parts, as llama-server has them: the work types (work.py, decision_work.py, chat_work.py),
the queue they wait in (work_queue.py), the sequences they run in (slots.py), and here the loop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, Callable, Iterator, Sequence

from .errors import Busy, Cancelled, EngineFault, ServerError
from .llama import BatchToken, LlamaContext, LlamaError, LlamaModel
from .prompt_cache import PromptCache
from .slots import Slots
from .work import Stream, Work
from .work_queue import WorkQueue

log = logging.getLogger("decision_server.scheduler")


class Scheduler:
    """The decode loop on its worker thread: admits queued work, starts its streams in free
    sequences, and packs their tokens into one decode per step."""

    def __init__(self, model: LlamaModel, ctx: LlamaContext, *, parallel: int, queue_size: int,
                 copy_by_state: bool, finish_first: bool = False, cache: PromptCache | None = None) -> None:
        self.model, self.ctx = model, ctx
        self.finish_first = finish_first
        self.parallel = parallel
        self._queue = WorkQueue(queue_size)
        self._slots = Slots(ctx, copy_by_state=copy_by_state, cache=cache)
        self._active: list[Work] = []
        self._waiting: list[Stream] = []  # streams of active work, not yet given a sequence
        self.consecutive_failures = 0
        self._thread = threading.Thread(target=self._run, name="decode-loop", daemon=True)
        self._thread.start()

    @property
    def cache(self) -> PromptCache | None:
        """Recent prompts' cells in host memory (None: no cache); only the worker thread changes it."""
        return self._slots.cache

    @property
    def copy_by_state(self) -> bool:
        return self._slots.copy_by_state

    @property
    def queue_size(self) -> int:
        return self._queue.size

    @queue_size.setter
    def queue_size(self, size: int) -> None:  # tests lower it to fill the queue
        self._queue.size = size

    # --- the global prefix -----------------------------------------------------------------------

    @property
    def prefix_tokens(self) -> list[int]:
        return self._slots.prefix_tokens

    def set_prefix(self, tokens: Sequence[int]) -> None:
        """Evaluate the prefix every decision shares once, into sequence 0 (called before serving)."""
        self.call(lambda: self._slots.load_prefix(tokens))

    def reusable(self, tokens: Sequence[int], limit: int | None = None) -> int:
        """How many leading `tokens` (at most `limit`) can be copied from the global prefix; never
        all of them, as the last token must be evaluated for its output."""
        return self._slots.reusable(tokens, limit)

    def clear_cache(self) -> None:
        """Forget every cached prompt (the next requests start cold)."""
        self.call(self._slots.clear_cache)

    def _fits(self, cells: int) -> bool:
        """Whether `cells` more fit the context beside the cells admitted work is promised."""
        return self._committed() + cells <= self.capacity

    @property
    def capacity(self) -> int:
        """KV cells available to work (the context minus the global prefix)."""
        return self.ctx.n_ctx - len(self.prefix_tokens)

    # --- submitting ------------------------------------------------------------------------------

    def submit(self, work: Work) -> Work:
        if work.reservation > self.capacity:
            raise ValueError(f"needs {work.reservation} KV cells; the context has {self.capacity} free for requests")
        self._queue.submit(work)
        return work

    def call(self, function: Callable[[], Any]) -> Any:
        """Run `function` on the worker thread between decode steps (it owns the context)."""
        return self._queue.call(function)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Admit no new work while inside (work already running continues): a maintenance
        hold, and how tests fill the queue deterministically."""
        with self._queue.held():
            yield

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def busy(self) -> bool:
        return bool(len(self._queue) or self._active)

    def stop(self) -> None:
        self._queue.stop()
        self._thread.join(timeout=30)

    # --- the loop --------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            calls = self._queue.take(self._has_work, self._admissible, self._admit)
            if calls is None:
                break
            for call in calls:
                call.run()
            try:
                self._iterate()
            except Exception as exc:  # a fault in the loop itself must not stop the worker
                log.exception("decode loop step failed")
                self._fail_running(EngineFault(f"the model failed: {exc}"))
        for work in list(self._active) + self._queue.remaining():
            work.fail(Busy("the server is stopping", retry_after_seconds=5))

    def _iterate(self) -> None:
        try:
            self._iterate_once()
        finally:
            self._slots.save_finished()

    def _iterate_once(self) -> None:
        self._reap_cancelled()
        self._start_streams()
        if self._slots.running:
            self._step()
            return
        self._finish_done()
        # Nothing holds a sequence, so every waiting stream could have started: work left
        # active now cannot progress (a bug). Fail it rather than spin on it.
        for work in list(self._active):
            self._drop(work, EngineFault(f"{type(work).__name__} stalled"))

    def _has_work(self) -> bool:
        """Admitted work to progress (the queue knows whether its head is to be taken)."""
        return bool(self._slots.running or self._waiting or self._active)

    def _admissible(self, work: Work) -> bool:
        """Whether queued work may be admitted now: a slot for it, and its KV cells."""
        return len(self._active) < self.parallel and self._fits(work.reservation)

    def _admit(self, work: Work) -> None:
        self._active.append(work)
        self._waiting.extend(work.first_streams())

    def _committed(self) -> int:
        """Cells spoken for: admitted work's reservations, which count every cell a work's
        streams may hold beyond the shared prefix, copied, restored or evaluated."""
        return sum(w.reservation for w in self._active) + self._slots.extra_cost

    def _start_streams(self) -> None:
        """Give waiting streams a sequence (copying their prefix) while slots allow. A stem
        restored whole from the prompt cache is ready at once: its questions start in this same
        pass, so that they join this step's decode rather than wait for the next."""
        while self._start_waiting_streams():
            pass

    def _start_waiting_streams(self) -> bool:
        """One pass of `_start_streams`; True when a stem got ready at once (its work may now
        have further streams to start)."""
        ready = False
        for work in self._active:
            stream = work.next_stream() if not work.cancelled else None
            while stream is not None:
                self._waiting.append(stream)
                stream = work.next_stream()
        still_waiting = []
        running = self._slots.running
        working = sum(1 for s in running if s.wants_output)
        for stream in sorted(self._waiting, key=lambda s: (s.work.arrival, s.index)):
            if stream.work not in self._active:
                continue  # its work failed in this loop
            if self._answer_from_cache(stream):
                continue
            # A work's reservation covers its stem and one output stream at a time; any
            # further stream of the same work needs cells of its own.
            extra = stream.wants_output and any(s.work is stream.work and s.wants_output for s in running)
            limited = stream.wants_output and working >= self.parallel
            if not self._slots.has_free or limited or (extra and not self._fits(stream.cost)):
                still_waiting.append(stream)
                continue
            self._slots.start(stream, extra=extra)
            if stream.wants_output:
                working += 1
            elif stream.remaining == 0:
                # a stem whose every token was cached: ready at once
                stream.started_at = time.perf_counter()
                stream.work.on_stream_done(stream)
                ready = True
        self._waiting = still_waiting
        return ready

    def _answer_from_cache(self, stream: Stream) -> bool:
        """Finish `stream` without a sequence when its whole prompt is cached with its output."""
        final = self._slots.cached_answer(stream)
        if final is None:
            return False
        stream.started_at = time.perf_counter()
        try:
            stream.work.on_cached_output(stream, final)
        except ServerError as exc:
            self._drop(stream.work, exc)
        return True

    # --- one step: one decode --------------------------------------------------------------------

    def _step(self) -> None:
        # Streams whose next token is their last and who want its hidden state: a step of
        # output tokens only, with embeddings on.
        embeddings = any(s.wants_hidden and s.remaining == 1 for s in self._slots.running)
        plan = self._plan_step(embeddings)
        if not plan:
            self._finish_done()  # e.g. every question of a batch was answered from the cache
            return
        tokens, outputs = self._batch(plan)
        if not self._decode(tokens, plan, embeddings):
            return
        for stream, take in plan:
            stream.n_past += take
        self._read_outputs(outputs, embeddings)
        self._finish_stems(plan)
        self._finish_done()

    def _plan_step(self, embeddings: bool) -> list[tuple[Stream, int]]:
        """(stream, tokens this step) for the streams this step carries, within `n_batch` tokens."""
        budget = self.ctx.n_batch
        plan: list[tuple[Stream, int]] = []
        # Generating chats first (one token each), then prefill in arrival order.
        order = sorted(self._slots.running, key=lambda s: (not s.generating, s.work.arrival, s.index))
        closing: Work | None = None  # with finish_first, the request whose answer ends this step
        for stream in order:
            if budget == 0:
                break
            if stream.remaining <= 0:
                continue
            if closing is not None and stream.work is not closing:
                break  # later requests' prefill waits for the next step
            if embeddings:
                if stream.remaining == 1 and stream.wants_output:
                    plan.append((stream, 1))
                    budget -= 1
                continue
            take = min(stream.remaining, budget)
            if stream.wants_hidden and take == stream.remaining:
                take -= 1  # hold the last token back for an embeddings step
            if take > 0:
                plan.append((stream, take))
                budget -= take
                if self.finish_first and not stream.generating and stream.wants_output and take == stream.remaining:
                    closing = stream.work  # later streams of other requests are not taken
        return plan

    def _batch(self, plan: list[tuple[Stream, int]]) -> tuple[list[BatchToken], list[tuple[Stream, int]]]:
        """The step's tokens, and (stream, batch position) of each output to read after it."""
        tokens: list[BatchToken] = []
        outputs: list[tuple[Stream, int]] = []
        now = time.perf_counter()
        for stream, take in plan:
            if not stream.started_at:
                stream.started_at = now
            for k in range(take):
                position = stream.n_past + k
                last = position == len(stream.tokens) - 1 and stream.wants_output
                if last:
                    outputs.append((stream, len(tokens)))
                tokens.append(BatchToken(stream.tokens[position], position, stream.sequence, last))
        return tokens, outputs

    def _decode(self, tokens: list[BatchToken], plan: list[tuple[Stream, int]], embeddings: bool) -> bool:
        """Run the step's decode; when the model fails it, fail every work it carried (False)."""
        try:
            self.ctx.decode(tokens, embeddings=embeddings)
        except LlamaError as exc:
            self.consecutive_failures += 1
            involved = {stream.work for stream, _ in plan}
            for work in involved:
                self._drop(work, EngineFault(str(exc)))
            return False
        self.consecutive_failures = 0
        return True

    def _read_outputs(self, outputs: list[tuple[Stream, int]], embeddings: bool) -> None:
        """Hand each output to its work; a stream its work says is finished gives its sequence back."""
        for stream, index in outputs:
            work = stream.work
            hidden = self.ctx.hidden_state(index) if embeddings and stream.wants_hidden else None
            try:
                finished = work.on_output(stream, self.ctx, index, hidden)
            except ServerError as exc:
                self._drop(work, exc)
                continue
            except Exception as exc:
                log.exception("reading the output of %s failed", type(work).__name__)
                self._drop(work, EngineFault(f"reading the model output failed: {exc}"))
                continue
            if finished:
                self._slots.release(stream, keep=True)

    def _finish_stems(self, plan: list[tuple[Stream, int]]) -> None:
        for stream, _ in plan:
            if not stream.wants_output and stream.remaining == 0:
                # a stem: done once its prefix is in; it keeps its sequence for the questions
                stream.work.on_stream_done(stream)

    # --- finishing and failing work --------------------------------------------------------------

    def _finish_done(self) -> None:
        for work in [w for w in self._active if w.done]:
            for stream in [s for s in self._slots.running if s.work is work]:
                self._slots.release(stream, keep=True)
            self._active.remove(work)
            work.finish()

    def _drop(self, work: Work, error: BaseException) -> None:
        for stream in [s for s in self._slots.running if s.work is work]:
            self._slots.release(stream)
        self._waiting = [s for s in self._waiting if s.work is not work]
        if work in self._active:
            self._active.remove(work)
        work.fail(error)

    def _reap_cancelled(self) -> None:
        for work in [w for w in self._active if w.cancelled]:
            self._drop(work, Cancelled("cancelled by the client"))
        self._queue.remove_cancelled()

    def _fail_running(self, error: BaseException) -> None:
        self.consecutive_failures += 1
        for work in list(self._active):
            self._drop(work, error)
