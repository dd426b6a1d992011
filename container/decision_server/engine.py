"""The decision engine: one llama.cpp context, structured decisions and chat completions.

A decision is one forward pass over the readout prompt; the answer is the final-position
logits of the option letters. A batch sharing one state evaluates the common token prefix
once, snapshots the context state, and scores each question from the restored snapshot —
restoring a whole state also works for recurrent/hybrid models, where a KV tail cannot be
removed. One context means one forward pass at a time: a lock with a short admission wait.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import llama_cpp
import numpy as np
from decision_contract import (
    BatchDecisionResponse,
    BatchTiming,
    Decision,
    DecisionRequest,
    DecisionResult,
    DecisionTiming,
    ModelInfo,
    softmax,
)
from pydantic import ValidationError

from . import model_files
from .errors import BadRequest, Busy, ForbiddenToken, PromptTooLong
from .readout import PROMPT_VERSION, ControlTokens, Prompt, Readout, ReadoutError, longest_common_prefix
from .settings import Settings

log = logging.getLogger("decision_server.engine")


@dataclass
class _Snapshot:
    """A saved context state (llama_state_get_data) and the token count it holds."""

    data: Any
    size: int
    n_tokens: int


class DecisionEngine:
    """Loads the GGUF named by the settings and serves decisions and chat from it.

    `DecisionEngine()` reads the environment; keyword overrides (model_path, n_ctx, threads,
    n_gpu_layers, batch_size, any limit) win over it: `DecisionEngine(model_path=p, threads=2)`.
    """

    def __init__(self, settings: Settings | None = None, **overrides: Any) -> None:
        if settings is None:
            settings = Settings.from_env(**overrides)
        elif overrides:
            settings = Settings.from_env({}, **{**settings.model_dump(), **overrides})
        self.settings = settings
        self.model_file = model_files.resolve(settings)
        started = time.perf_counter()
        self.llm = llama_cpp.Llama(
            model_path=str(self.model_file.path),
            n_ctx=settings.ctx_size,
            n_threads=settings.threads,
            n_threads_batch=settings.threads,
            n_gpu_layers=settings.n_gpu_layers,
            n_batch=settings.batch_size,
            n_ubatch=settings.batch_size,
            flash_attn=settings.use_flash_attn,
            logits_all=False,
            seed=0,
            verbose=False,
        )
        self._n_vocab = self.llm.n_vocab()
        self.model_info = ModelInfo(
            file=self.model_file.name,
            bytes=self.model_file.bytes,
            sha256=self.model_file.sha256,
            context_size=self.llm.n_ctx(),
            threads=settings.threads,
            gpu_layers=settings.n_gpu_layers,
            llama_cpp_python_version=llama_cpp.__version__,
        )
        self.control_tokens = ControlTokens(self._control_token_texts())
        template = self.llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ReadoutError(f"{self.model_file.name} has no tokenizer.chat_template; the readout needs one")
        self.readout = Readout(
            template,
            bos_token=self._token_text_special(self.llm.token_bos()),
            eos_token=self._token_text_special(self.llm.token_eos()),
            tokenize=self.tokenize,
            token_text=lambda token: self.llm.detokenize([token]).decode("utf-8", "replace"),
        )
        self._lock = threading.Lock()
        log.info(
            "loaded %s (%d bytes, sha256 %s) in %.2fs: n_ctx=%d threads=%d gpu_layers=%d",
            self.model_info.file, self.model_info.bytes, self.model_info.sha256,
            time.perf_counter() - started, self.model_info.context_size,
            settings.threads, settings.n_gpu_layers,
        )

    # --- tokens ------------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """Tokens of rendered prompt text, the way llama-cpp-python's chat handler tokenizes
        (special tokens parsed, no BOS added: the template writes its own)."""
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def _token_text_special(self, token: int) -> str:
        return "" if token < 0 else llama_cpp.llama_vocab_get_text(self._vocab(), token).decode("utf-8", "replace")

    def _vocab(self) -> Any:
        return llama_cpp.llama_model_get_vocab(self.llm.model)

    def _control_token_texts(self) -> list[str]:
        vocab = self._vocab()
        control = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
        return [
            llama_cpp.llama_vocab_get_text(vocab, token).decode("utf-8", "replace")
            for token in range(self._n_vocab)
            if llama_cpp.llama_vocab_get_attr(vocab, token) & control
        ]

    def check_control_tokens(self, value: Any, field: str) -> None:
        """Raise ForbiddenToken if any string or key in `value` holds a control-token text."""
        found = self.control_tokens.find(value, field)
        if found is not None:
            raise ForbiddenToken(*found)

    # --- decisions ---------------------------------------------------------------------------

    def decide_one(self, decision: Decision) -> DecisionResult:
        return self._decide([decision], field="decision").results[0]

    def decide(self, decisions: Sequence[Decision]) -> BatchDecisionResponse:
        """Score decisions; several must share one state and are evaluated as a batch."""
        return self._decide(list(decisions), field="decisions")

    def _decide(self, decisions: list[Decision], field: str) -> BatchDecisionResponse:
        started = time.perf_counter()
        self._validate(decisions, field)
        prompts: list[Prompt] = []
        tokenize_seconds: list[float] = []
        for decision in decisions:
            t0 = time.perf_counter()
            prompts.append(self.readout.prompt(decision))
            tokenize_seconds.append(time.perf_counter() - t0)
        self._check_lengths(prompts, field)
        # The shared prefix is the longest common *token* prefix of the full prompts, so every
        # decision sees exactly the tokens it would see alone; at least one token stays per
        # decision so that its final position is evaluated after the snapshot.
        prefix = 0
        if len(prompts) > 1:
            prefix = min(longest_common_prefix([p.tokens for p in prompts]), min(len(p.tokens) for p in prompts) - 1)

        with self._admitted():
            self.llm.reset()
            prefix_seconds = 0.0
            snapshot = None
            if prefix:
                t0 = time.perf_counter()
                self.llm.eval(prompts[0].tokens[:prefix])
                snapshot = self._save()
                prefix_seconds = time.perf_counter() - t0
            results = []
            for index, (decision, prompt) in enumerate(zip(decisions, prompts)):
                t0 = time.perf_counter()
                if snapshot is not None and index > 0:
                    self._restore(snapshot)
                self.llm.eval(prompt.tokens[prefix:])
                logits, mass = self._read_letters(len(decision.options))
                prefill = time.perf_counter() - t0
                results.append(
                    DecisionResult(
                        id=decision.id,
                        option_ids=decision.option_ids,
                        probabilities=softmax(logits, decision.temperature),
                        option_logits=logits,
                        temperature=decision.temperature,
                        input_tokens=len(prompt.tokens),
                        reused_prefix_tokens=prefix,
                        allowed_token_mass=mass,
                        prompt_sha256=prompt.sha256,
                        prompt_version=PROMPT_VERSION,
                        model=self.model_info,
                        timing=DecisionTiming(
                            tokenize_seconds=tokenize_seconds[index],
                            prefill_seconds=prefill,
                            total_seconds=tokenize_seconds[index] + prefill,
                        ),
                    )
                )
        timing = BatchTiming(
            shared_prefix_tokens=prefix,
            shared_prefix_seconds=prefix_seconds,
            total_seconds=time.perf_counter() - started,
        )
        return BatchDecisionResponse(results=results, timing=timing)

    def _validate(self, decisions: list[Decision], field: str) -> None:
        limits = self.settings
        if len(decisions) > limits.max_decisions:
            raise BadRequest.for_field(
                field, f"{len(decisions)} decisions; at most {limits.max_decisions} per request (DECISION_MAX_DECISIONS)"
            )
        try:
            # The contract's own rules (one shared state, unique ids) — one definition.
            DecisionRequest(decisions=decisions)
        except ValidationError as exc:
            raise BadRequest.from_validation(exc) from None
        for index, decision in enumerate(decisions):
            where = field if field == "decision" else f"{field}[{index}]"
            if len(decision.options) > limits.max_options:
                raise BadRequest.for_field(
                    f"{where}.options",
                    f"{len(decision.options)} options; at most {limits.max_options} (DECISION_MAX_OPTIONS)",
                )
            self.check_control_tokens(decision.model_dump(mode="json", exclude={"temperature"}), where)

    def _check_lengths(self, prompts: list[Prompt], field: str) -> None:
        limits = self.settings
        for index, prompt in enumerate(prompts):
            if len(prompt.tokens) > limits.max_decision_tokens:
                where = field if field == "decision" else f"{field}[{index}]"
                raise PromptTooLong(where, len(prompt.tokens), limits.max_decision_tokens, "DECISION_MAX_PROMPT_TOKENS")
        if len(prompts) > 1:
            shared = longest_common_prefix([p.tokens for p in prompts])
            evaluated = shared + sum(len(p.tokens) - shared for p in prompts)
            if evaluated > limits.max_request_tokens:
                raise PromptTooLong(field, evaluated, limits.max_request_tokens, "DECISION_MAX_REQUEST_TOKENS")

    def _read_letters(self, n_options: int) -> tuple[list[float], float]:
        """Letter logits at the final position and the share of next-token mass on them.

        The row is read in place from llama.cpp's output buffer; the one full-vocab temporary
        is the shifted exponent for the vocabulary's logsumexp.
        """
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.llm.ctx, -1), shape=(self._n_vocab,))
        letters = row[self.readout.letter_token_ids[:n_options]].astype(np.float64)
        if not np.all(np.isfinite(letters)):
            raise RuntimeError("the model produced non-finite letter logits")
        peak = float(row.max())
        shifted = row - np.float32(peak)
        np.exp(shifted, out=shifted)
        lse_vocab = peak + math.log(float(shifted.sum(dtype=np.float64)))
        top = float(letters.max())
        lse_letters = top + math.log(float(np.exp(letters - top).sum()))
        return letters.tolist(), min(1.0, math.exp(lse_letters - lse_vocab))

    # --- state snapshot (whole context state: valid for KV, recurrent and hybrid memory) ---------

    def _save(self) -> _Snapshot:
        # The same llama_state_get_data call as Llama.save_state(), without that method's
        # Python-side copy of the whole scores buffer (≈0.25 s here against ≈2 ms for the state).
        ctx = self.llm.ctx
        capacity = llama_cpp.llama_state_get_size(ctx)
        buffer = (ctypes.c_uint8 * capacity)()
        size = llama_cpp.llama_state_get_data(ctx, buffer, capacity)
        if size > capacity:
            raise RuntimeError("llama_state_get_data overflowed its buffer")
        return _Snapshot(buffer, size, self.llm.n_tokens)

    def _restore(self, snapshot: _Snapshot) -> None:
        if llama_cpp.llama_state_set_data(self.llm.ctx, snapshot.data, snapshot.size) != snapshot.size:
            raise RuntimeError("llama_state_set_data did not restore the whole state")
        # input_ids[:n_tokens] still hold the prefix: only later positions were written since.
        self.llm.n_tokens = snapshot.n_tokens

    # --- admission -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _admitted(self) -> Iterator[None]:
        self._acquire()
        try:
            yield
        finally:
            self._lock.release()

    def _acquire(self) -> None:
        wait = self.settings.admission_wait_seconds
        if not self._lock.acquire(timeout=wait):
            raise Busy(f"the model is busy; waited {wait:g}s for it (DECISION_ADMISSION_WAIT_SECONDS)", wait)

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    # --- measurement and warm-up ------------------------------------------------------------------

    def prefill(self, tokens: Sequence[int]) -> float:
        """Seconds to evaluate `tokens` from an empty context: the floor under a decision."""
        with self._admitted():
            self.llm.reset()
            started = time.perf_counter()
            self.llm.eval(list(tokens))
            return time.perf_counter() - started

    def warm_up(self) -> DecisionResult:
        """One real decision; the server reports healthy only after it succeeds."""
        result = self.decide_one(
            Decision(
                id="warm-up",
                state="The service is starting.",
                question="Is the service starting?",
                options=[{"id": "yes", "description": "yes"}, {"id": "no", "description": "no"}],
            )
        )
        if not math.isclose(sum(result.probabilities), 1.0, abs_tol=1e-6):
            raise RuntimeError(f"warm-up decision is not a distribution: {result.probabilities}")
        return result

    # --- chat completions (the DLC's OpenAI-compatible path) ----------------------------------------

    def chat_completion(self, **request: Any) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """`Llama.create_chat_completion` under the engine lock: an OpenAI response dict, or
        (with stream=True) an iterator of chunk dicts that holds the lock until exhausted or closed."""
        for index, message in enumerate(request.get("messages") or []):
            self.check_control_tokens(message, f"messages[{index}]")
        request.setdefault("model", self.model_info.file)
        if request.get("max_tokens") is None:
            request["max_tokens"] = self.settings.chat_max_tokens
        stream = bool(request.get("stream"))
        self._acquire()
        release = True
        try:
            self.llm.reset()
            if not stream:
                return self.llm.create_chat_completion(**request)
            chunks = self._locked(self.llm.create_chat_completion(**request))
            release = False  # from here on the stream owns the lock
            # Start the stream now: errors (an over-long prompt) surface before any HTTP status
            # is sent, and a started generator releases the lock when exhausted, closed or collected.
            first = next(chunks, None)
            return iter(()) if first is None else _prepend(first, chunks)
        except ValueError as exc:
            raise _chat_error(exc) from None
        finally:
            if release:
                self._lock.release()

    def _locked(self, chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        try:
            yield from chunks
        finally:
            self._lock.release()


def _prepend(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    # A generator (unlike itertools.chain) has close(), which ends the stream and frees the lock.
    # Closing it before `rest` was entered must still close `rest` (which holds the lock) at
    # once, not whenever the garbage collector gets to it.
    try:
        yield first
        yield from rest
    finally:
        rest.close()


def _chat_error(exc: ValueError) -> Exception:
    text = str(exc)
    if "exceed context window" in text:
        return BadRequest.for_field("messages", f"{text}; prompts are never truncated")
    return exc
