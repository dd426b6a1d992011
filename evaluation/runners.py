"""Where decisions are scored: a running decision container over HTTP, or the engine in-process.

Both answer the same two calls, so the evaluation and the decode comparison never know which
one they talk to:
- `decide(decisions)`: one request (a shared-state batch when there are several) → results
  and the client's wall time;
- `generate(messages, max_tokens)`: a greedy chat completion → text and wall time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from pydantic import ValidationError

from decision_contract import (
    BatchDecisionResponse,
    Decision,
    DecisionResult,
    ErrorResponse,
    ModelInfo,
    SingleDecisionResponse,
)

#: SageMaker's own limit is 60 s per invocation; wait a little longer than that.
HTTP_TIMEOUT_SECONDS = 70.0
#: Retries of a 503 "busy" answer (the container asks callers to come back).
BUSY_RETRIES = 5


class RunFailure(RuntimeError):
    """The decision or completion could not be obtained; the message says why."""


@dataclass(frozen=True)
class Scored:
    results: list[DecisionResult]
    #: Client-side wall time of the whole request.
    seconds: float


@dataclass(frozen=True)
class Generated:
    text: str
    seconds: float
    completion_tokens: int | None


class Runner(Protocol):
    description: str

    def decide(self, decisions: list[Decision]) -> Scored: ...

    def generate(self, messages: list[dict[str, str]], max_tokens: int) -> Generated: ...

    def model_info(self) -> ModelInfo: ...

    def close(self) -> None: ...


def _completion(body: dict[str, Any], seconds: float) -> Generated:
    try:
        text = body["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        raise RunFailure(f"chat completion without choices[0].message.content: {str(body)[:200]}") from None
    return Generated(text=text, seconds=seconds, completion_tokens=(body.get("usage") or {}).get("completion_tokens"))


class HttpRunner:
    """A decision container at `url` (e.g. http://127.0.0.1:8080), through its real HTTP API."""

    def __init__(self, url: str, timeout: float = HTTP_TIMEOUT_SECONDS) -> None:
        self.url = url.rstrip("/")
        self.description = f"decision container at {self.url} (POST /invocations)"
        self._client = httpx.Client(base_url=self.url, timeout=timeout)

    def _post(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        for attempt in range(BUSY_RETRIES + 1):
            start = time.perf_counter()
            try:
                response = self._client.post(path, json=body)
            except httpx.HTTPError as exc:
                raise RunFailure(f"POST {self.url}{path}: {type(exc).__name__}: {exc}") from None
            seconds = time.perf_counter() - start
            if response.status_code == 503 and attempt < BUSY_RETRIES:
                time.sleep(float(response.headers.get("Retry-After", "1") or 1))
                continue
            try:
                payload = response.json()
            except ValueError:
                raise RunFailure(f"POST {path}: HTTP {response.status_code}, body is not JSON: {response.text[:200]!r}") from None
            if response.status_code != 200:
                try:
                    error = ErrorResponse.model_validate(payload).error
                    raise RunFailure(f"HTTP {response.status_code} {error.code}: {error.message}")
                except ValidationError:
                    raise RunFailure(f"HTTP {response.status_code}: {str(payload)[:200]}") from None
            return payload, seconds
        raise AssertionError("unreachable")

    def decide(self, decisions: list[Decision]) -> Scored:
        if len(decisions) == 1:
            payload, seconds = self._post("/invocations", {"decision": decisions[0].model_dump(mode="json")})
            return Scored([SingleDecisionResponse.model_validate(payload).result], seconds)
        payload, seconds = self._post("/invocations", {"decisions": [d.model_dump(mode="json") for d in decisions]})
        return Scored(BatchDecisionResponse.model_validate(payload).results, seconds)

    def generate(self, messages: list[dict[str, str]], max_tokens: int) -> Generated:
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
        payload, seconds = self._post("/v1/chat/completions", body)
        return _completion(payload, seconds)

    def model_info(self) -> ModelInfo:
        """The served model, as `GET /v1/models` describes it."""
        try:
            response = self._client.get("/v1/models")
            return ModelInfo.model_validate(response.json()["data"][0]["meta"])
        except (httpx.HTTPError, ValueError, KeyError, IndexError, ValidationError) as exc:
            raise RunFailure(f"GET {self.url}/v1/models: {type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        self._client.close()


class EngineRunner:
    """The decision engine loaded in this process (no HTTP in between)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.description = "in-process DecisionEngine"

    @classmethod
    def load(cls, **overrides: Any) -> "EngineRunner":
        """Load the engine from the SM_LLAMA_CPP_* environment (keyword overrides such as
        model_path, threads, n_ctx win): the embedded model when nothing names another GGUF."""
        from decision_server.engine import DecisionEngine

        return cls(DecisionEngine(**{k: v for k, v in overrides.items() if v is not None}))

    def decide(self, decisions: list[Decision]) -> Scored:
        start = time.perf_counter()
        try:
            if len(decisions) == 1:
                results = [self.engine.decide_one(decisions[0])]
            else:
                results = self.engine.decide(decisions).results
        except Exception as exc:  # noqa: BLE001 - the engine's errors name the problem (prompt too long, busy, …)
            raise RunFailure(f"{type(exc).__name__}: {exc}") from None
        return Scored(results, time.perf_counter() - start)

    def model_info(self) -> ModelInfo:
        return self.engine.model_info

    def generate(self, messages: list[dict[str, str]], max_tokens: int) -> Generated:
        start = time.perf_counter()
        try:
            body = self.engine.chat_completion(messages=messages, max_tokens=max_tokens, temperature=0.0)
        except Exception as exc:  # noqa: BLE001 - as above: a failed generation is reported, not fatal
            raise RunFailure(f"{type(exc).__name__}: {exc}") from None
        return _completion(body, time.perf_counter() - start)

    def close(self) -> None:
        pass
