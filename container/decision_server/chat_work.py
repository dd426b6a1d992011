"""Chat work: one OpenAI chat generation in the decode loop, and the chunks it streams.

The request's shape and its SSE framing are chat.py's; the engine (engine.py) renders the
messages with the model's chat template and queues a `ChatWork`. The work evaluates the prompt
like any other stream, then samples one token per step (llama.cpp's sampler chain, as
llama-server builds it) until an end-of-generation token, a stop string or `max_tokens`.
"""

from __future__ import annotations

import codecs
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator

import llama_cpp

from .llama import LlamaModel
from .work import PREFIX_SEQUENCE, Stream, Work


@dataclass
class SamplingOptions:
    """A chat request's sampling parameters, by their OpenAI names (`max_tokens`, `stop`, …)."""

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


def sampler_chain(model: LlamaModel, options: SamplingOptions) -> Any:
    """A llama.cpp sampler chain for `options`: penalties, then greedy or top-k, top-p, min-p,
    temperature and a seeded draw. The caller frees it (ChatWork.finish)."""
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
        self.events = EventQueue()
        self._sampler = sampler_chain(model, options)
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
            self.events.put(EventQueue.END)
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


class EventQueue:
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


def chat_chunks(work: ChatWork) -> Iterator[dict[str, Any]]:
    """The chunks of a streaming chat as the worker produces them. Closing the generator (the
    client went away) cancels the generation."""
    try:
        while True:
            item = work.events.get()
            if item is work.events.END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        if not work.done:
            work.cancel()
