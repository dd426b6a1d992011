"""Server settings, read from the environment once at start-up.

The `SM_LLAMA_CPP_*` names are the llama.cpp DLC's, so users switch images without
relearning; decision limits have variables of their own. An invalid value stops
start-up with a message that names the variable.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, InitSettingsSource, SettingsConfigDict

from decision_contract import MAX_OPTIONS, MIN_OPTIONS


def _default_threads() -> int:
    """The CPUs available to the process (cgroup/affinity aware), not the host's count."""
    return max(1, len(os.sched_getaffinity(0)))


class SettingsError(ValueError):
    """A setting is invalid; the message names the environment variable."""


class Settings(BaseSettings):
    """Each field is read from the first of its aliases that is set (the environment variable
    first; other names are the AWS SemIf sample's and the field's own, for keyword overrides)."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True, populate_by_name=True, case_sensitive=True,
                                      env_ignore_empty=True)

    # --- the DLC's surface --------------------------------------------------------------
    model: Path | None = Field(
        None, validation_alias=AliasChoices("SM_LLAMA_CPP_MODEL", "model", "model_path"),
        description="SM_LLAMA_CPP_MODEL: explicit GGUF path (wins over the directory).",
    )
    model_dir: Path = Field(
        Path("/opt/ml/model"), validation_alias=AliasChoices("SM_LLAMA_CPP_MODEL_DIR", "model_dir"),
        description="SM_LLAMA_CPP_MODEL_DIR: searched for the single *.gguf up to two levels deep (a split model "
        "counts once, by its first shard). Several: start-up error listing them. Directory present but no "
        "GGUF: start-up error. Directory absent: the embedded model.",
    )
    ctx_size: int = Field(
        8192, ge=64, validation_alias=AliasChoices("SM_LLAMA_CPP_CTX_SIZE", "ctx_size", "n_ctx"),
        description="SM_LLAMA_CPP_CTX_SIZE: llama context size (n_ctx): KV cells shared by all parallel sequences; "
        "must be at least DECISION_MAX_PROMPT_TOKENS.",
    )
    threads: int = Field(
        default_factory=_default_threads, ge=1,
        validation_alias=AliasChoices("SM_LLAMA_CPP_THREADS", "SEMIF_THREADS", "threads", "n_threads"),
        description="SM_LLAMA_CPP_THREADS: n_threads and n_threads_batch, CPU threads for prefill and generation.",
    )
    n_gpu_layers: int = Field(
        0, ge=-1, validation_alias=AliasChoices("SM_LLAMA_CPP_N_GPU_LAYERS", "SEMIF_N_GPU_LAYERS", "n_gpu_layers"),
        description="SM_LLAMA_CPP_N_GPU_LAYERS: n_gpu_layers, layers offloaded to the GPU (-1 or 999: all; CUDA "
        "image). Start-up stops when offload is asked for and the llama.cpp build has no GPU backend.",
    )
    batch_size: int = Field(
        512, ge=1, validation_alias=AliasChoices("SM_LLAMA_CPP_BATCH_SIZE", "batch_size", "n_batch"),
        description="SM_LLAMA_CPP_BATCH_SIZE: n_batch (= n_ubatch): tokens per decode step, shared by all sequences.",
    )
    flash_attn: Literal["auto", "on", "off"] = Field(
        "auto", validation_alias=AliasChoices("SM_LLAMA_CPP_FLASH_ATTN", "flash_attn"),
        description="SM_LLAMA_CPP_FLASH_ATTN: flash attention (on|off|auto, as llama-server's --flash-attn); "
        "auto lets llama.cpp turn it on wherever the device has the kernels (CPU and GPU). It matters for "
        "batches: it skips the KV cells of the other sequences, so a batch of 8 on one state costs 1.04x the "
        "ideal on 2 CPU threads (1.09x with it off).",
    )

    @field_validator("flash_attn", "decision_chat", mode="before")
    @classmethod
    def _on_off_flag(cls, value: Any) -> Any:
        # The DLC turns SM_LLAMA_CPP_FLASH_ATTN=true into a bare --flash-attn flag: accept
        # true/false for every on/off switch.
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, str):
            value = value.strip().lower()
            return {"true": "on", "false": "off"}.get(value, value)
        return value

    @property
    def chat_enabled(self) -> bool:
        return self.decision_chat == "on"

    port: int = Field(
        8080, ge=1, le=65535, validation_alias=AliasChoices("SM_LLAMA_CPP_PORT", "SEMIF_PORT", "port"),
        description="SM_LLAMA_CPP_PORT: HTTP port (--port overrides).",
    )

    # --- decision limits -----------------------------------------------------------------
    max_options: int = Field(
        MAX_OPTIONS, ge=MIN_OPTIONS, le=MAX_OPTIONS,
        validation_alias=AliasChoices("DECISION_MAX_OPTIONS", "max_options"),
        description="DECISION_MAX_OPTIONS: options per decision (2 to 16; the letters A…P allow at most 16).",
    )
    max_decisions: int = Field(
        64, ge=1, le=1024,
        validation_alias=AliasChoices("DECISION_MAX_DECISIONS", "SEMIF_MAX_SHARED_DECISIONS", "max_decisions"),
        description="DECISION_MAX_DECISIONS: decisions per request (a batch larger than the parallel "
        "sequences is scored in chunks; its tokens are bounded by DECISION_MAX_REQUEST_TOKENS).",
    )
    max_body_bytes: int = Field(
        256 * 1024, ge=1024, le=6 * 1024 * 1024,
        validation_alias=AliasChoices("DECISION_MAX_BODY_BYTES", "SEMIF_MAX_BODY_BYTES", "max_body_bytes"),
        description="DECISION_MAX_BODY_BYTES: request body size (SageMaker itself caps at 6 MiB).",
    )
    max_decision_tokens: int = Field(
        4096, ge=16,
        validation_alias=AliasChoices("DECISION_MAX_PROMPT_TOKENS", "SEMIF_MAX_TOKENS", "max_decision_tokens"),
        description="DECISION_MAX_PROMPT_TOKENS: prompt tokens of one decision.",
    )
    max_request_tokens: int = Field(
        32768, ge=16,
        validation_alias=AliasChoices("DECISION_MAX_REQUEST_TOKENS", "SEMIF_MAX_REQUEST_TOKENS", "max_request_tokens"),
        description="DECISION_MAX_REQUEST_TOKENS: tokens one request makes the model evaluate "
        "(a batch's shared prefix counts once).",
    )
    parallel_sequences: int = Field(
        8, ge=1, le=120,
        validation_alias=AliasChoices("DECISION_PARALLEL_SEQUENCES", "parallel_sequences"),
        description="DECISION_PARALLEL_SEQUENCES: sequences evaluated together in one forward pass "
        "(decisions and chat generations of concurrent requests); 1 is the serial engine.",
    )
    queue_size: int = Field(
        64, ge=1, le=10_000,
        validation_alias=AliasChoices("DECISION_QUEUE_SIZE", "SEMIF_MAX_IN_FLIGHT", "queue_size"),
        description="DECISION_QUEUE_SIZE: requests waiting for a sequence; past it, 503 busy with Retry-After.",
    )
    sequence_copy: Literal["auto", "cells", "state"] = Field(
        "auto", validation_alias=AliasChoices("DECISION_SEQUENCE_COPY", "sequence_copy"),
        description="DECISION_SEQUENCE_COPY: how a shared prefix reaches another sequence: cells (KV cells "
        "shared, no copy), state (the sequence's state serialised; recurrent/hybrid models), auto (state "
        "for recurrent/hybrid models, else cells).",
    )
    prompt_cache_mib: float = Field(
        512, ge=0, validation_alias=AliasChoices("DECISION_PROMPT_CACHE_MIB", "prompt_cache_mib"),
        description="DECISION_PROMPT_CACHE_MIB: host memory for the KV cells of recent prompts, so that a "
        "request sharing a cached prompt's leading tokens has those cells written back into the KV cache "
        "and evaluates only the rest, and the very same decision again is answered without a forward "
        "pass (least recently used evicted first); 0 switches the cache off. Cached prompts do not stay "
        "in the KV cache, so they do not slow fresh prompts. A cell costs 2 x layers x KV width x 2 "
        "bytes: about 23 KB on the embedded model (512 MiB is about 70 prompts of 300 tokens), 128 KB on an "
        "8B Llama with 8 KV heads (about 13 such prompts).",
    )
    cpu_variant: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.]+$", validation_alias=AliasChoices("DECISION_CPU_VARIANT", "cpu_variant"),
        description="DECISION_CPU_VARIANT: the llama.cpp CPU backend variant to load (haswell, icelake, "
        "zen4, sapphirerapids, ...; /ping's llama_build.cpu_variants_available lists this build's). Unset: the "
        "best variant this CPU supports, by ggml's own score, AMX left out (see the llama.cpp build). Set it "
        "for a side-by-side benchmark, to try AMX, or to step around a variant that misbehaves; a variant "
        "this CPU cannot run stops start-up with a message.",
    )
    unhealthy_after_failures: int = Field(
        3, ge=1, validation_alias=AliasChoices("DECISION_UNHEALTHY_AFTER_FAILURES", "unhealthy_after_failures"),
        description="DECISION_UNHEALTHY_AFTER_FAILURES: failed forward passes in a row after which /ping "
        "answers 503, so that SageMaker replaces the instance.",
    )
    # --- chat (the DLC's OpenAI-compatible path) ------------------------------------------
    decision_chat: Literal["on", "off"] = Field(
        "on", validation_alias=AliasChoices("DECISION_CHAT", "decision_chat"),
        description="DECISION_CHAT: chat completions on this endpoint (on|off); off answers /v1/chat/completions "
        "and messages bodies 403 chat_disabled.",
    )
    chat_max_tokens: int = Field(
        512, ge=1, validation_alias=AliasChoices("CHAT_DEFAULT_MAX_TOKENS", "chat_max_tokens"),
        description="CHAT_DEFAULT_MAX_TOKENS: completion tokens when a chat request gives no max_tokens "
        "(unset: 512, or CHAT_MAX_TOKENS when that is lower); above CHAT_MAX_TOKENS is a start-up error.",
    )
    chat_max_tokens_cap: int = Field(
        512, ge=1, validation_alias=AliasChoices("CHAT_MAX_TOKENS", "chat_max_tokens_cap"),
        description="CHAT_MAX_TOKENS: most completion tokens a chat request may ask for (max_tokens, "
        "max_completion_tokens); more is a 400 naming the setting; published as the schema's maximum.",
    )
    log_level: str = Field(
        "INFO", pattern="^(DEBUG|INFO|WARNING|ERROR|CRITICAL)$",
        validation_alias=AliasChoices("LOG_LEVEL", "log_level"),
        description="LOG_LEVEL: Python logging level.",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_chat_budget_follows_a_lower_cap(cls, data: Any) -> Any:
        if not isinstance(data, dict) or _given(data, "chat_max_tokens") is not None:
            return data
        cap = _given(data, "chat_max_tokens_cap")
        try:
            default = min(int(cap), cls.model_fields["chat_max_tokens"].default)
        except (TypeError, ValueError):
            return data  # unset, or invalid: the field's own validation names CHAT_MAX_TOKENS
        return {**data, "chat_max_tokens": default}

    @model_validator(mode="after")
    def _limits_fit_context(self) -> "Settings":
        if self.max_decision_tokens > self.ctx_size:
            raise ValueError(
                f"DECISION_MAX_PROMPT_TOKENS ({self.max_decision_tokens}) exceeds "
                f"SM_LLAMA_CPP_CTX_SIZE ({self.ctx_size}); a decision must fit in the context"
            )
        if self.max_request_tokens < self.max_decision_tokens:
            raise ValueError(
                f"DECISION_MAX_REQUEST_TOKENS ({self.max_request_tokens}) is below "
                f"DECISION_MAX_PROMPT_TOKENS ({self.max_decision_tokens})"
            )
        if self.chat_max_tokens > self.chat_max_tokens_cap:
            raise ValueError(
                f"CHAT_DEFAULT_MAX_TOKENS ({self.chat_max_tokens}) exceeds CHAT_MAX_TOKENS "
                f"({self.chat_max_tokens_cap}); the default must be a budget a request may ask for"
            )
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from the process environment, or from `environ` alone; keyword overrides win."""
        overrides = {key: value for key, value in overrides.items() if value is not None}
        overridden = [_field_for(key) for key in overrides]  # SettingsError on an unknown name
        try:
            if environ is None:
                return cls(**overrides)
            names = {alias for field in cls.model_fields.values() for alias in _aliases(field)}
            values: dict[str, Any] = {k: v for k, v in environ.items() if k in names and v != ""}
            for name in overridden:
                # An override replaces whatever the environment gave for the same field.
                for alias in _aliases(cls.model_fields[name]):
                    values.pop(alias, None)
            # The values given as the one source: never read together with the process environment.
            given = InitSettingsSource(cls, init_kwargs={**values, **overrides})
            return cls(_build_sources=((given,), {}))
        except ValidationError as exc:
            raise SettingsError(_describe(exc, _given_as(os.environ if environ is None else environ, overrides))) from None

    @classmethod
    def ignored_variables(cls, environ: Mapping[str, str] | None = None) -> list[str]:
        """`SM_LLAMA_CPP_*` (llama-server flags in the DLC) and `SEMIF_*` (the AWS SemIf sample's
        settings) variables this server has no equivalent for; they are warned about at start."""
        environ = os.environ if environ is None else environ
        known = {alias for field in cls.model_fields.values() for alias in _aliases(field)}
        return sorted(k for k in environ if k.startswith(("SM_LLAMA_CPP_", "SEMIF_")) and k not in known)

    def env_documentation(self) -> list[tuple[str, str, str]]:
        """(variable, default, description) for every setting: the configuration reference's source."""
        rows = []
        for field in type(self).model_fields.values():
            default = field.get_default(call_default_factory=True)
            rows.append((_aliases(field)[0], str(default), field.description or ""))
        return rows


def _aliases(field: Any) -> list[str]:
    return list(field.validation_alias.choices)


def _given(data: Mapping[str, Any], field: str) -> Any:
    """The value given for `field` under any of its names, or None."""
    return next((data[alias] for alias in _aliases(Settings.model_fields[field]) if alias in data), None)


def _field_for(key: str) -> str:
    for name, field in Settings.model_fields.items():
        if key == name or key in _aliases(field):
            return name
    raise SettingsError(f"unknown setting {key!r}")


def _given_as(environ: Mapping[str, str], overrides: Mapping[str, Any]) -> dict[str, str]:
    """field → the name its value was given under (an override's key, else the first of its
    aliases that the environment sets, as validation reads them): what an error should name."""
    given = {name: next((a for a in _aliases(field) if environ.get(a)), "") for name, field in Settings.model_fields.items()}
    given.update({_field_for(key): key for key in overrides})
    return {name: label for name, label in given.items() if label}


def _describe(exc: ValidationError, given: Mapping[str, str]) -> str:
    problems = []
    for error in exc.errors():
        loc = error.get("loc") or ()
        variable = given.get(_field_for(str(loc[0])), str(loc[0])) if loc and loc[0] != "__root__" else "settings"
        got = f" (got {error['input']!r})" if loc and "input" in error else ""
        problems.append(f"{variable}: {error['msg'].removeprefix('Value error, ')}{got}")
    return "invalid settings: " + "; ".join(problems)
