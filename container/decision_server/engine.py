"""The decision engine: the served model, structured decisions and chat completions.

A decision is one forward pass over the readout prompt; the answer is the final-position
logits of the option letters (and, when asked, the hidden state those logits are computed
from). Requests of every kind go through the scheduler's decode loop, which evaluates many
sequences in one forward pass (see scheduler.py); this module checks requests and turns them
into work (decision_work.py, chat_work.py), which reads the outputs into results.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Iterator, Sequence

import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from pydantic import ValidationError

from decision_contract import BatchDecisionResponse, Decision, DecisionRequest, DecisionResult, ModelInfo

from . import model_files
from .chat_work import ChatWork, SamplingOptions, chat_chunks
from .decision_work import DecisionWork
from .errors import BadRequest, ForbiddenToken, PromptTooLong
from .llama import LlamaContext, LlamaModel, init_backend
from .prompt_cache import MIB, PromptCache, PromptCacheStats
from .readout import PROBE, PROBE_STATES, ControlTokens, Prompt, Readout, ReadoutError, longest_common_prefix
from .scheduler import Scheduler
from .settings import Settings
from .work import PrefillWork

log = logging.getLogger("decision_server.engine")


class GpuUnavailable(RuntimeError):
    """GPU offload was asked for, but this llama.cpp build has no GPU backend."""


def require_gpu_backend(settings: Settings) -> None:
    """Refuse GPU offload on a build without a GPU backend: llama.cpp would silently run on the
    CPU, many times slower than the endpoint was sized for."""
    init_backend(settings.cpu_variant)  # before llama.cpp is asked anything (ggml_backends.py says why)
    if settings.n_gpu_layers != 0 and not llama_cpp.llama_supports_gpu_offload():
        raise GpuUnavailable(
            f"SM_LLAMA_CPP_N_GPU_LAYERS={settings.n_gpu_layers} asks for GPU offload, but this llama.cpp "
            "build has no GPU backend; use the CUDA image, or set SM_LLAMA_CPP_N_GPU_LAYERS=0"
        )


class DecisionEngine:
    """Loads the GGUF named by the settings and serves decisions and chat from it.

    `DecisionEngine()` reads the environment; keyword overrides (model_path, n_ctx, threads,
    n_gpu_layers, batch_size, parallel_sequences, any limit) win over it.

    Its role, as llama-server's `server_context` beside its `server_queue`: it owns what the
    requests are checked and rendered against (the model, its context, the chat template, the
    readout prompt and its control tokens, the limits) and turns a checked request into work
    (`DecisionWork`, `ChatWork`, `PrefillWork`) that the `Scheduler` runs. It forwards nothing:
    the queue's state (`busy`, `held()`, `consecutive_failures`) and its prompt cache
    (`clear_cache()`) are read on `engine.scheduler`, the one place they live.
    """

    def __init__(self, settings: Settings | None = None, **overrides: Any) -> None:
        if settings is None:
            settings = Settings.from_env(**overrides)
        elif overrides:
            settings = Settings.from_env({}, **{**settings.model_dump(), **overrides})
        self.settings = settings
        #: Which llama.cpp build and CPU kernels compute here (/ping and the benchmark report it).
        self.llama_build = init_backend(settings.cpu_variant)
        require_gpu_backend(settings)
        self.model_file = model_files.resolve(settings)
        started = time.perf_counter()
        self.model = LlamaModel(self.model_file.path, n_gpu_layers=settings.n_gpu_layers)
        #: How a shared prefix reaches another sequence (the log says which path runs).
        self.sequence_copy = settings.sequence_copy
        if self.sequence_copy == "auto":
            self.sequence_copy = "state" if self.model.recurrent else "cells"
        work_sequences = 2 * settings.parallel_sequences
        self.prompt_cache_off = self._prompt_cache_off(settings)
        self.ctx = LlamaContext(
            self.model,
            n_ctx=settings.ctx_size,
            n_batch=settings.batch_size,
            # sequence 0 is the shared prefix; each active request may hold a stem besides its
            # output sequences (cached prompts live in host memory, not in sequences)
            n_seq_max=1 + work_sequences,
            threads=settings.threads,
            flash_attn=settings.flash_attn,
        )
        self.model_info = ModelInfo(
            file=self.model_file.name,
            bytes=self.model_file.bytes,
            sha256=self.model_file.sha256,
            context_size=self.ctx.n_ctx,
            threads=settings.threads,
            gpu_layers=settings.n_gpu_layers,
            llama_cpp_python_version=llama_cpp.__version__,
            hidden_size=self.model.n_embd,
        )
        self.control_tokens = ControlTokens(self.model.control_token_texts())
        template = self.model.chat_template
        if not template:
            raise ReadoutError(f"{self.model_file.name} has no tokenizer.chat_template; the readout needs one")
        self._bos = self.model.token_text(self.model.bos_token)
        self._eos = self.model.token_text(self.model.eos_token)
        self.readout = Readout(
            template, bos_token=self._bos, eos_token=self._eos, tokenize=self.tokenize,
            token_text=lambda token: self.model.piece(token).decode("utf-8", "replace"),
        )
        self._chat_formatter = Jinja2ChatFormatter(
            template=template, eos_token=self._eos, bos_token=self._bos, add_generation_prompt=True
        )
        self.scheduler = Scheduler(
            self.model, self.ctx, parallel=settings.parallel_sequences, queue_size=settings.queue_size,
            copy_by_state=self.sequence_copy == "state",
            # On a GPU a step's cost grows far slower than its tokens, so packing pays; not on a CPU.
            finish_first=settings.n_gpu_layers == 0,
            cache=None if self.prompt_cache_off else PromptCache(
                int(settings.prompt_cache_mib * MIB), whole_only=self.sequence_copy == "state"),
        )
        self.scheduler.set_prefix(self._shared_prompt_prefix())
        build = self.llama_build
        log.info("llama.cpp CPU backend %s (%s; of %d variants: %s), features %s; backends %s",
                 build.cpu_variant, "chosen for this CPU" if build.chosen_by == "score" else "DECISION_CPU_VARIANT",
                 len(build.cpu_variants_available), ", ".join(build.cpu_variants_available) or "linked in",
                 " ".join(build.cpu_features), ", ".join(build.backends))
        log.info(
            "loaded %s (%d bytes, sha256 %s) in %.2fs: n_ctx=%d threads=%d gpu_layers=%d parallel=%d "
            "sequence copy=%s (%s memory) shared prefix=%d tokens prompt cache=%s",
            self.model_info.file, self.model_info.bytes, self.model_info.sha256, time.perf_counter() - started,
            self.model_info.context_size, settings.threads, settings.n_gpu_layers, settings.parallel_sequences,
            self.sequence_copy, "recurrent/hybrid" if self.model.recurrent else "KV",
            len(self.scheduler.prefix_tokens),
            self.prompt_cache_off or f"{settings.prompt_cache_mib:g} MiB of host memory" + (
                f", whole prompts only ({self._state_copy_reason()}: a state cannot be cut back to a "
                "shorter prefix)" if self.sequence_copy == "state" else ""),
        )

    def _state_copy_reason(self) -> str:
        return "recurrent/hybrid memory" if self.model.recurrent else "DECISION_SEQUENCE_COPY=state"

    def _prompt_cache_off(self, settings: Settings) -> str | None:
        """Why there is no prompt cache (for the start-up log), or None."""
        if settings.prompt_cache_mib == 0:
            return "off (DECISION_PROMPT_CACHE_MIB=0)"
        return None

    def close(self) -> None:
        self.scheduler.stop()
        self.ctx.close()
        self.model.close()

    def _shared_prompt_prefix(self) -> list[int]:
        """The tokens every decision prompt starts with: prompts whose states differ from their
        first character on (text, object, array) share exactly the template header, the
        instruction and the start of the payload."""
        prompts = [self.readout.prompt(PROBE.model_copy(update={"state": state})).tokens for state in PROBE_STATES]
        return prompts[0][: longest_common_prefix(prompts)]

    # --- tokens ------------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """Tokens of rendered prompt text, special tokens parsed, no BOS added (the template writes its own)."""
        return self.model.tokenize(text)

    def check_control_tokens(self, value: Any, field: str) -> None:
        """Raise ForbiddenToken if any string or key in `value` holds a control-token text."""
        found = self.control_tokens.find(value, field)
        if found is not None:
            raise ForbiddenToken(*found)

    # --- decisions ---------------------------------------------------------------------------

    def decide_one(self, decision: Decision) -> DecisionResult:
        return self.submit_decisions([decision], field="decision").future.result().results[0]

    def decide(self, decisions: Sequence[Decision]) -> BatchDecisionResponse:
        """Score decisions as one batch; the prompt prefix they share (a common state) is evaluated once."""
        return self.submit_decisions(list(decisions), field="decisions").future.result()

    def submit_decisions(self, decisions: list[Decision], *, field: str, count_limit: bool = True) -> "DecisionWork":
        """Validate and queue decisions; the work's future resolves to a BatchDecisionResponse.

        `count_limit=False` bounds the batch by its tokens only (System One requests)."""
        started = time.perf_counter()
        self._validate(decisions, field, count_limit)
        prompts: list[Prompt] = []
        tokenize_seconds: list[float] = []
        for decision in decisions:
            t0 = time.perf_counter()
            prompts.append(self.readout.prompt(decision))
            tokenize_seconds.append(time.perf_counter() - t0)
        work = DecisionWork(self, decisions, prompts, tokenize_seconds, started)
        self._check_lengths(prompts, work, field)
        self.scheduler.submit(work)
        return work

    def _validate(self, decisions: list[Decision], field: str, count_limit: bool) -> None:
        limits = self.settings
        if count_limit and len(decisions) > limits.max_decisions:
            raise BadRequest.for_field(
                field, f"{len(decisions)} decisions; at most {limits.max_decisions} per request (DECISION_MAX_DECISIONS)"
            )
        try:
            # The contract's own rules (exactly one shape): one definition.
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
            self.check_control_tokens(
                decision.model_dump(mode="json", exclude={"temperature", "return_hidden_state"}), where
            )

    def _check_lengths(self, prompts: list[Prompt], work: "DecisionWork", field: str) -> None:
        limits = self.settings
        for index, prompt in enumerate(prompts):
            if len(prompt.tokens) > limits.max_decision_tokens:
                where = field if field == "decision" else f"{field}[{index}]"
                raise PromptTooLong(where, len(prompt.tokens), limits.max_decision_tokens, "DECISION_MAX_PROMPT_TOKENS")
        if len(prompts) > 1:
            shared = work.shared_prefix
            evaluated = shared + sum(len(p.tokens) - shared for p in prompts)
            if evaluated > limits.max_request_tokens:
                raise PromptTooLong(field, evaluated, limits.max_request_tokens, "DECISION_MAX_REQUEST_TOKENS")
        if work.reservation > self.scheduler.capacity:
            raise PromptTooLong(field, work.reservation, self.scheduler.capacity,
                                "SM_LLAMA_CPP_CTX_SIZE, less the shared prompt prefix")

    # --- measurement and warm-up ------------------------------------------------------------------

    def prefill(self, tokens: Sequence[int]) -> float:
        """Seconds to evaluate `tokens` in a fresh sequence, no prefix reused: the floor under a decision.

        Not a forwarder: like `decide` and `submit_chat`, it turns a request (here the benchmark's
        tokens) into work for the scheduler and waits for it."""
        return self.scheduler.submit(PrefillWork(tokens)).future.result()

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

    def prompt_cache_stats(self) -> PromptCacheStats:
        cache = self.scheduler.cache
        if cache is None:
            return PromptCacheStats(enabled=False, budget_mib=0)
        stats = cache.stats
        return PromptCacheStats(
            enabled=True, whole_prompts_only=cache.whole_only, budget_mib=round(cache.budget / MIB, 3),
            mib=round(cache.nbytes / MIB, 3),
            prompts=len(cache), lookups=stats.lookups, hits=stats.hits,
            hit_rate=stats.hits / stats.lookups if stats.lookups else 0.0, prompt_tokens=stats.prompt_tokens,
            reused_tokens=stats.reused_tokens, evictions=stats.evictions, restore_failures=stats.restore_failures,
        )

    # --- chat completions (the DLC's OpenAI-compatible path) ----------------------------------------

    def submit_chat(self, **request: Any) -> ChatWork:
        """Queue a chat generation. Non-streaming: the future resolves to the OpenAI response;
        streaming: read chunks with `chat_chunks(work)`."""
        messages = request.get("messages") or []
        for index, message in enumerate(messages):
            self.check_control_tokens(message, f"messages[{index}]")
        try:
            rendered = self._chat_formatter(messages=messages)
        except Exception as exc:  # noqa: BLE001 - the template's own complaint about these messages
            raise BadRequest.for_field("messages", f"the model's chat template rejected them: {exc}") from None
        prompt = self.tokenize(rendered.prompt)
        max_tokens = request.get("max_tokens") or self.settings.chat_max_tokens
        stop = request.get("stop") or []
        options = SamplingOptions(
            max_tokens=max_tokens,
            stop=[stop] if isinstance(stop, str) else list(stop),
            **{k: request[k] for k in ("temperature", "top_p", "top_k", "min_p", "repeat_penalty",
                                       "presence_penalty", "frequency_penalty", "seed")
               if request.get(k) is not None},
        )
        needed = len(prompt) + max_tokens
        if needed > self.scheduler.capacity:
            raise BadRequest.for_field(
                "messages",
                f"the prompt ({len(prompt)} tokens) plus max_tokens ({max_tokens}) needs {needed} tokens; "
                f"the context holds {self.scheduler.capacity} (SM_LLAMA_CPP_CTX_SIZE); prompts are never truncated",
            )
        work = ChatWork(self.model, prompt, self.scheduler.reusable(prompt), options,
                        model_name=request.get("model") or self.model_info.file, stream=bool(request.get("stream")))
        self.scheduler.submit(work)
        return work

    def chat_completion(self, **request: Any) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """An OpenAI chat completion dict, or (stream=True) an iterator of chunk dicts; closing
        the iterator early cancels the generation and frees its sequence."""
        work = self.submit_chat(**request)
        if request.get("stream"):
            return chat_chunks(work)
        return work.future.result()
