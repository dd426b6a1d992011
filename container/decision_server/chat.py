"""The OpenAI Chat Completions request the server accepts, and its SSE framing.

Generation itself is llama-cpp-python's `create_chat_completion` (see engine.py); this
module only validates the request and frames streamed chunks as llama-server does.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Iterable, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    # The served models are text-only; content parts other than text are rejected by name.
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None

    @field_validator("content")
    @classmethod
    def _flatten_parts(cls, content: str | list[TextPart] | None) -> str | None:
        if isinstance(content, list):
            return "".join(part.text for part in content)
        return content


class ChatCompletionRequest(BaseModel):
    """Fields of OpenAI's request that llama-cpp-python honours; others are rejected by name."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = Field(None, description="Echoed; the server serves one model.")
    max_tokens: int | None = Field(None, ge=1, description="Default: CHAT_DEFAULT_MAX_TOKENS.")
    max_completion_tokens: int | None = Field(None, ge=1, description="OpenAI's newer name for max_tokens.")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repeat_penalty: float | None = Field(None, gt=0)
    n: Literal[1] = 1
    user: str | None = None

    def llama_arguments(self) -> dict[str, Any]:
        """Keyword arguments for `Llama.create_chat_completion` (unset fields keep its defaults)."""
        arguments = self.model_dump(
            exclude_none=True, exclude={"n", "user", "stream_options", "max_completion_tokens", "messages"}
        )
        arguments["messages"] = [m.model_dump(exclude_none=True) for m in self.messages]
        if self.max_tokens is None and self.max_completion_tokens is not None:
            arguments["max_tokens"] = self.max_completion_tokens
        return arguments


def sse_events(chunks: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """Server-sent events in OpenAI's framing, ending with `data: [DONE]`."""
    try:
        for chunk in chunks:
            yield b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:  # release the model promptly if the client went away
            close()
