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
  then each question's sequence starts as a copy of the stem and evaluates only its suffix.

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
"""

from __future__ import annotations

import codecs
import concurrent.futures
import contextlib
import itertools
import logging
import math
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import llama_cpp
import numpy as np

from .errors import Busy, Cancelled, EngineFault, ServerError
from .llama import BatchToken, LlamaContext, LlamaError, LlamaModel
from .prompt_cache import FinalOutput, PromptCache, common_prefix

log = logging.getLogger("decision_server.scheduler")

#: The global prefix cache lives in this sequence; work uses the ids above it.
PREFIX_SEQUENCE = 0


# --- streams: one llama sequence being filled ------------------------------------------------------


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


# --- the scheduler ---------------------------------------------------------------------------------


class Scheduler:
    def __init__(self, model: LlamaModel, ctx: LlamaContext, *, parallel: int, queue_size: int,
                 copy_by_state: bool, finish_first: bool = False, cache: PromptCache | None = None) -> None:
        self.model, self.ctx = model, ctx
        #: Recent prompts' cells in host memory (None: no cache); only the worker thread changes it.
        self.cache = cache
        self.finish_first = finish_first
        self.parallel = parallel
        self.queue_size = queue_size
        self.copy_by_state = copy_by_state
        self.prefix_tokens: list[int] = []
        self._cond = threading.Condition()
        self._queue: deque[Work] = deque()
        self._active: list[Work] = []
        self._running: list[Stream] = []  # streams holding a sequence, arrival order
        self._waiting: list[Stream] = []  # streams of active work, not yet given a sequence
        self._free_sequences = list(range(ctx.n_seq_max - 1, PREFIX_SEQUENCE, -1))
        self._arrivals = itertools.count(1)
        self._holds = 0
        self._stopping = False
        self._extra_cost = 0  # cells of streams beyond each work's reservation
        self._unsaved: list[Stream] = []  # finished streams to save to the cache once answers are out
        self.consecutive_failures = 0
        self._thread = threading.Thread(target=self._run, name="decode-loop", daemon=True)
        self._thread.start()

    # --- the global prefix -----------------------------------------------------------------------

    def set_prefix(self, tokens: Sequence[int]) -> None:
        """Evaluate the prefix every decision shares once, into sequence 0 (called before serving)."""
        def load() -> None:
            self._clear_cache()  # entries were built on the old prefix
            self.ctx.remove_sequence(PREFIX_SEQUENCE)
            for offset in range(0, len(tokens), self.ctx.n_batch):
                chunk = tokens[offset:offset + self.ctx.n_batch]
                self.ctx.decode([BatchToken(t, offset + i, PREFIX_SEQUENCE, False) for i, t in enumerate(chunk)])
            self.prefix_tokens = list(tokens)
        self.call(load)

    def reusable(self, tokens: Sequence[int], limit: int | None = None) -> int:
        """How many leading `tokens` (at most `limit`) can be copied from the global prefix; never
        all of them, as the last token must be evaluated for its output."""
        prefix = self.prefix_tokens
        limit = min(len(prefix), len(tokens) - 1, len(tokens) if limit is None else limit)
        n = 0
        while n < limit and prefix[n] == tokens[n]:
            n += 1
        if self.copy_by_state and n != len(prefix):
            return 0  # a serialised state is all of sequence 0 or nothing
        return n

    def clear_cache(self) -> None:
        """Forget every cached prompt (the next requests start cold)."""
        self.call(self._clear_cache)

    def _clear_cache(self) -> None:
        if self.cache is not None:
            self.cache.clear()

    def _free(self, sequence: int) -> None:
        self.ctx.remove_sequence(sequence)
        self._free_sequences.append(sequence)

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
        with self._cond:
            if len(self._queue) >= self.queue_size:
                raise Busy(f"the request queue is full ({self.queue_size} waiting; DECISION_QUEUE_SIZE)",
                           retry_after_seconds=1)
            work.arrival = next(self._arrivals)
            self._queue.append(work)
            self._cond.notify()
        return work

    def call(self, function: Callable[[], Any]) -> Any:
        """Run `function` on the worker thread between decode steps (it owns the context)."""
        work = _Call(function)
        with self._cond:
            self._queue.appendleft(work)
            self._cond.notify()
        return work.future.result()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Admit no new work while inside (work already running continues): a maintenance
        hold, and how tests fill the queue deterministically."""
        with self._cond:
            self._holds += 1
        try:
            yield
        finally:
            with self._cond:
                self._holds -= 1
                self._cond.notify()

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def busy(self) -> bool:
        return bool(self._queue or self._active)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=30)

    # --- the loop --------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._has_work():
                    self._cond.wait()
                if self._stopping:
                    break
                calls = self._admit()
            for call in calls:
                call.run()
            try:
                self._iterate()
            except Exception as exc:  # a fault in the loop itself must not stop the worker
                log.exception("decode loop step failed")
                self._fail_running(EngineFault(f"the model failed: {exc}"))
        for work in list(self._active) + list(self._queue):
            work.fail(Busy("the server is stopping", retry_after_seconds=5))

    def _iterate(self) -> None:
        try:
            self._iterate_once()
        finally:
            self._save_finished()

    def _iterate_once(self) -> None:
        self._reap_cancelled()
        self._start_streams()
        if self._running:
            self._step()
            return
        self._finish_done()
        # Nothing holds a sequence, so every waiting stream could have started: work left
        # active now cannot progress (a bug). Fail it rather than spin on it.
        for work in list(self._active):
            self._drop(work, EngineFault(f"{type(work).__name__} stalled"))

    def _has_work(self) -> bool:
        if self._running or self._waiting:
            return True
        if self._queue and (self._holds == 0 or isinstance(self._queue[0], _Call)):
            return True
        return bool(self._active)

    def _admit(self) -> list["_Call"]:
        """Move queued work to active, in arrival order, while slots and KV cells allow."""
        calls = []
        while self._queue:
            head = self._queue[0]
            if isinstance(head, _Call):
                calls.append(self._queue.popleft())
                continue
            if self._holds or len(self._active) >= self.parallel:
                break
            if not self._fits(head.reservation):
                break  # the head waits for cells; later work waits behind it (no overtaking)
            self._queue.popleft()
            if head.cancelled:
                head.fail(Cancelled("cancelled before it started"))
                continue
            self._active.append(head)
            self._waiting.extend(head.first_streams())
        return calls

    def _committed(self) -> int:
        """Cells spoken for: admitted work's reservations, which count every cell a work's
        streams may hold beyond the shared prefix, copied, restored or evaluated."""
        return sum(w.reservation for w in self._active) + self._extra_cost

    def _start_streams(self) -> None:
        """Give waiting streams a sequence (copying their prefix) while slots allow."""
        for work in self._active:
            stream = work.next_stream() if not work.cancelled else None
            while stream is not None:
                self._waiting.append(stream)
                stream = work.next_stream()
        still_waiting = []
        working = sum(1 for s in self._running if s.wants_output)
        for stream in sorted(self._waiting, key=lambda s: (s.work.arrival, s.index)):
            if stream.work not in self._active:
                continue  # its work failed in this loop
            if self._answer_from_cache(stream):
                continue
            # A work's reservation covers its stem and one output stream at a time; any
            # further stream of the same work needs cells of its own.
            extra = stream.wants_output and any(s.work is stream.work and s.wants_output for s in self._running)
            limited = stream.wants_output and working >= self.parallel
            if not self._free_sequences or limited or (extra and not self._fits(stream.cost)):
                still_waiting.append(stream)
                continue
            stream.sequence = self._free_sequences.pop()
            self._fill(stream)
            if extra:
                self._extra_cost += stream.cost
                stream.counted_extra = True
            self._running.append(stream)
            if stream.wants_output:
                working += 1
            elif stream.remaining == 0:
                # a stem whose every token was cached: ready at once
                stream.started_at = time.perf_counter()
                stream.work.on_stream_done(stream)
        self._waiting = still_waiting

    def _answer_from_cache(self, stream: Stream) -> bool:
        """Finish `stream` without a sequence when its whole prompt is cached with its output."""
        cache = self.cache
        if cache is None or not (stream.cached and stream.wants_output and stream.work.answers_from_cache):
            return False
        entry = cache.answered(stream.tokens, with_hidden=stream.wants_hidden)
        if entry is None or entry.final is None:
            return False
        cache.touch(entry)
        cache.record(len(stream.tokens), len(stream.tokens) - stream.start)
        stream.start = stream.n_past = len(stream.tokens)
        stream.started_at = time.perf_counter()
        try:
            stream.work.on_cached_output(stream, entry.final)
        except ServerError as exc:
            self._drop(stream.work, exc)
        return True

    def _fill(self, stream: Stream) -> None:
        """Put the longest prefix of the stream's tokens held anywhere into its sequence: a
        cached prompt's cells, restored, where one shares more than the source its work gave
        (sequence 0, or its stem: the cache is not asked then, as a restored copy of the stem's
        cells would hold them twice); else the source's cells, shared. A stream that reads an
        output evaluates its last token at least."""
        cache = self.cache
        if cache is not None and stream.cached and stream.source in (None, PREFIX_SEQUENCE):
            given = stream.start
            limit = len(stream.tokens) - (1 if stream.wants_output else 0)
            entry, n = cache.longest(np.asarray(stream.tokens, dtype=np.int32), limit)
            if entry is not None and n > given:
                assert entry.state is not None  # longest() returns only entries with cells
                if self.ctx.load_sequence(stream.sequence, entry.state, n, prefix_source=PREFIX_SEQUENCE):
                    cache.touch(entry)
                    cache.record(len(stream.tokens), n - given)
                    stream.start = stream.n_past = n
                    return
                cache.stats.restore_failures += 1  # no run of free cells that long: evaluate it
            cache.record(len(stream.tokens), 0)
        if stream.source is not None:
            self.ctx.copy_sequence(stream.source, stream.sequence, stream.start, by_state=self.copy_by_state)
        stream.n_past = stream.start

    def _step(self) -> None:
        budget = self.ctx.n_batch
        # Streams whose next token is their last and who want its hidden state: a step of
        # output tokens only, with embeddings on.
        finals = [s for s in self._running if s.wants_hidden and s.remaining == 1]
        embeddings = bool(finals)
        plan: list[tuple[Stream, int]] = []  # (stream, tokens this step)
        # Generating chats first (one token each), then prefill in arrival order.
        order = sorted(self._running, key=lambda s: (not s.generating, s.work.arrival, s.index))
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
        if not plan:
            self._finish_done()  # e.g. every question of a batch was answered from the cache
            return
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
        try:
            self.ctx.decode(tokens, embeddings=embeddings)
        except LlamaError as exc:
            self.consecutive_failures += 1
            involved = {stream.work for stream, _ in plan}
            for work in involved:
                self._drop(work, EngineFault(str(exc)))
            return
        self.consecutive_failures = 0
        for stream, take in plan:
            stream.n_past += take
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
                self._release(stream, keep=True)
        for stream, _ in plan:
            if not stream.wants_output and stream.remaining == 0:
                # a stem: done once its prefix is in; it keeps its sequence for the questions
                stream.work.on_stream_done(stream)
        self._finish_done()

    def _finish_done(self) -> None:
        for work in [w for w in self._active if w.done]:
            for stream in [s for s in self._running if s.work is work]:
                self._release(stream, keep=True)
            self._active.remove(work)
            work.finish()

    def _release(self, stream: Stream, *, keep: bool = False) -> None:
        """Give back a stream's sequence; `keep` (it finished) offers it to the prompt cache
        first, once the answers of this step are out (`_save_finished`, at the end of each
        iteration of the loop)."""
        if stream in self._running:
            self._running.remove(stream)
            if keep and stream.cached and self.cache is not None:
                self._unsaved.append(stream)
            else:
                self._free(stream.sequence)
            if stream.counted_extra:
                self._extra_cost -= stream.cost
        stream.n_past = len(stream.tokens)

    def _save_finished(self) -> None:
        """Save the streams finished since the last call to the cache, and free their sequences.
        Called after their requests were answered: saving a prompt's cells takes 1 to 3 ms, which
        no answer should wait for."""
        while self._unsaved:
            stream = self._unsaved.pop(0)
            self._save(stream)
            self._free(stream.sequence)

    def _save(self, stream: Stream) -> None:
        """Offer a finished stream's prompt to the cache: its cells beyond the instruction prefix
        sequence 0 holds are serialised (unless an entry already serves the prompt), with the
        output read at its last token."""
        assert self.cache is not None
        tokens = stream.tokens[:stream.n_past]
        # A serialised state is the whole sequence's; KV cells are saved from past the shared prefix.
        shared = 0 if self.copy_by_state else common_prefix(
            np.asarray(self.prefix_tokens, dtype=np.int32), np.asarray(tokens, dtype=np.int32), len(tokens))
        # A question of a batch keeps only its output: its state's cells are the stem's, which the
        # batch keeps once (saving each question's copy of them cost 1 % of a batch of 8).
        from_stem = stream.source not in (None, PREFIX_SEQUENCE)
        try:
            self.cache.insert(tokens, shared, None if from_stem else lambda: self.ctx.save_sequence(
                stream.sequence, shared), final=stream.final)
        except LlamaError as exc:  # a cache that cannot save only costs a later evaluation
            log.warning("could not cache a prompt of %d tokens: %s", len(tokens), exc)

    def _drop(self, work: Work, error: BaseException) -> None:
        for stream in [s for s in self._running if s.work is work]:
            self._release(stream)
        self._waiting = [s for s in self._waiting if s.work is not work]
        if work in self._active:
            self._active.remove(work)
        work.fail(error)

    def _reap_cancelled(self) -> None:
        for work in [w for w in self._active if w.cancelled]:
            self._drop(work, Cancelled("cancelled by the client"))
        with self._cond:
            for work in [w for w in self._queue if w.cancelled]:
                self._queue.remove(work)
                work.fail(Cancelled("cancelled before it started"))

    def _fail_running(self, error: BaseException) -> None:
        self.consecutive_failures += 1
        for work in list(self._active):
            self._drop(work, error)


class _Call(Work):
    """A function run on the worker thread (it owns the context)."""

    def __init__(self, function: Callable[[], Any]) -> None:
        super().__init__()
        self.function = function

    def run(self) -> None:
        try:
            self.future.set_result(self.function())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who re-raises it
            self.future.set_exception(exc)


# --- work: a measured prefill -------------------------------------------------------------------------


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


# --- work: a chat generation ---------------------------------------------------------------------------


@dataclass
class SamplingOptions:
    max_tokens: int
    temperature: float = 0.2
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)


def _sampler(model: LlamaModel, options: SamplingOptions) -> Any:
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())

    def add(sampler: Any) -> None:
        llama_cpp.llama_sampler_chain_add(chain, sampler)

    if options.repeat_penalty != 1.0 or options.presence_penalty or options.frequency_penalty:
        # This llama.cpp build takes the vocabulary size first (n_vocab, last_n, repeat, freq, present).
        add(llama_cpp.llama_sampler_init_penalties(model.n_vocab, 64, options.repeat_penalty,
                                                   options.frequency_penalty, options.presence_penalty))
    if options.temperature <= 0:
        add(llama_cpp.llama_sampler_init_greedy())
        return chain
    if options.top_k > 0:
        add(llama_cpp.llama_sampler_init_top_k(options.top_k))
    add(llama_cpp.llama_sampler_init_top_p(options.top_p, 1))
    add(llama_cpp.llama_sampler_init_min_p(options.min_p, 1))
    add(llama_cpp.llama_sampler_init_temp(options.temperature))
    seed = options.seed if options.seed is not None else llama_cpp.LLAMA_DEFAULT_SEED
    add(llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))
    return chain


class ChatWork(Work):
    """One chat generation: its prompt, then one sampled token per step until a stop."""

    def __init__(self, model: LlamaModel, prompt: list[int], reuse: int, options: SamplingOptions,
                 *, model_name: str, stream: bool) -> None:
        super().__init__()
        self.model, self.options, self.model_name = model, options, model_name
        self.prompt_tokens = len(prompt)
        source = PREFIX_SEQUENCE if reuse else None
        self.stream = Stream(self, list(prompt), start=reuse, source=source, cost=len(prompt) - reuse)
        self.reservation = len(prompt) - reuse + options.max_tokens
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.streaming = stream
        self.events: "queue_type" = _EventQueue()
        self._sampler = _sampler(model, options)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.text = ""
        self._sent = 0
        self.completion_tokens = 0
        self.finish_reason: str | None = None
        if stream:
            self.events.put(self._chunk({"role": "assistant", "content": ""}, None))

    def first_streams(self) -> list[Stream]:
        return [self.stream]

    def on_output(self, stream, ctx, index, hidden) -> bool:
        stream.generating = True
        token = llama_cpp.llama_sampler_sample(self._sampler, ctx.ctx, index)
        if self.model.is_end_of_generation(token):
            return self._end("stop")
        self.completion_tokens += 1
        self.text += self._decoder.decode(self.model.piece(token))
        stop_at = self._stop_position()
        if stop_at is not None:
            self.text = self.text[:stop_at]
            return self._end("stop")
        if self.completion_tokens >= self.options.max_tokens:
            self.text += self._decoder.decode(b"", final=True)
            return self._end("length")
        self._emit(self._safe_length())
        stream.tokens.append(token)  # fed back next step
        return False

    def _stop_position(self) -> int | None:
        found = [self.text.find(s) for s in self.options.stop if s and s in self.text]
        return min(found) if found else None

    def _safe_length(self) -> int:
        """Text that cannot be the start of a stop string (held back until it is known)."""
        keep = 0
        for stop in self.options.stop:
            for n in range(min(len(stop) - 1, len(self.text)), 0, -1):
                if self.text.endswith(stop[:n]):
                    keep = max(keep, n)
                    break
        return len(self.text) - keep

    def _emit(self, upto: int) -> None:
        if self.streaming and upto > self._sent:
            self.events.put(self._chunk({"content": self.text[self._sent:upto]}, None))
            self._sent = upto

    def _end(self, reason: str) -> bool:
        self.finish_reason = reason
        self._emit(len(self.text))
        return True

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def finish(self) -> None:
        llama_cpp.llama_sampler_free(self._sampler)
        usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                 "total_tokens": self.prompt_tokens + self.completion_tokens}
        if self.streaming:
            self.events.put(self._chunk({}, self.finish_reason))
            self.events.put(_EventQueue.END)
            self.future.set_result(usage)
            return
        self.future.set_result({
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.text},
                         "logprobs": None, "finish_reason": self.finish_reason}],
            "usage": usage,
        })

    def fail(self, error: BaseException) -> None:
        super().fail(error)
        self.events.put(error)

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model_name,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}


class _EventQueue:
    """Chunks from the worker to the HTTP stream; an exception or END closes it."""

    END = object()

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._ready = threading.Condition()

    def put(self, item: Any) -> None:
        with self._ready:
            self._items.append(item)
            self._ready.notify()

    def get(self) -> Any:
        with self._ready:
            while not self._items:
                self._ready.wait()
            return self._items.popleft()


queue_type = _EventQueue


def read_final_output(row: np.ndarray, letter_ids: Sequence[int], hidden: np.ndarray | None) -> FinalOutput:
    """The letter logits at a position (every option letter's), the log-sum-exp of the whole
    vocabulary's and its argmax. The one full-vocabulary temporary is the shifted exponent."""
    letters = row[list(letter_ids)].astype(np.float64)
    argmax = int(row.argmax())
    peak = float(row[argmax])
    shifted = row - np.float32(peak)
    np.exp(shifted, out=shifted)
    lse_vocab = peak + math.log(float(shifted.sum(dtype=np.float64)))
    return FinalOutput(letters, lse_vocab, argmax, hidden)


def letter_readout(final: FinalOutput, n_options: int) -> tuple[list[float], float]:
    """The first `n_options` letters' logits and the share of next-token mass on them."""
    letters = final.letter_logits[:n_options]
    if not np.all(np.isfinite(letters)):
        raise EngineFault("the model produced non-finite letter logits")
    top = float(letters.max())
    lse_letters = top + math.log(float(np.exp(letters - top).sum()))
    return letters.tolist(), min(1.0, math.exp(lse_letters - final.lse_vocab))
