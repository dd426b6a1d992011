"""The OpenAI Chat Completions request the server accepts, the response it documents, and
its SSE framing.

Generation itself is `ChatWork` (chat_work.py), sampled in the scheduler's decode loop beside
decisions; this module only validates the request and frames streamed chunks as llama-server does.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Iterable, Iterator, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    ValidationError,
    field_validator,
)

from decision_contract import StrictModel

from .errors import BadRequest

ROLES = ("system", "developer", "user", "assistant", "tool")


def _integral(value: Any) -> Any:
    # JSON has one number type: 8.0 is the integer 8 (as JSON Schema's "integer" says); 8.5 is not.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: With `strict` models: an integer as JSON means it, integral numbers only (never true/false or
#: "8"). Goes after the field's constraints: `Annotated[int, Field(ge=1), Integral]`.
Integral = BeforeValidator(_integral)


class TextPart(StrictModel):
    type: Literal["text"]
    text: str


def _content_kind(value: Any) -> str | None:
    return "text" if isinstance(value, str) else "parts" if isinstance(value, list) else None


#: Text, or text parts (joined). The served models are text-only: other parts are rejected by name.
Content = Annotated[
    Union[Annotated[str, Tag("text")], Annotated[list[TextPart], Tag("parts")]],
    Discriminator(
        _content_kind, custom_error_type="content_type", custom_error_message="must be text or a list of text parts"
    ),
]


class _Message(StrictModel):
    # Every message needs `content`: the chat template renders it, and the server offers no
    # tool calls (the only case where OpenAI lets an assistant message go without it).
    content: Content

    @field_validator("content")
    @classmethod
    def _flatten_parts(cls, content: Content) -> str:
        if isinstance(content, list):
            return "".join(part.text for part in content)
        return content


class SystemMessage(_Message):
    role: Literal["system"]
    name: str | None = None


class DeveloperMessage(_Message):
    role: Literal["developer"]
    name: str | None = None


class UserMessage(_Message):
    role: Literal["user"]
    name: str | None = None


class AssistantMessage(_Message):
    role: Literal["assistant"]
    name: str | None = None


class ToolMessage(_Message):
    role: Literal["tool"]
    tool_call_id: Annotated[str, StringConstraints(min_length=1)] = Field(
        description="The id of the tool call this message answers."
    )


ChatMessage = Annotated[
    Union[SystemMessage, DeveloperMessage, UserMessage, AssistantMessage, ToolMessage],
    Field(discriminator="role"),
]


class ChatCompletionRequest(StrictModel):
    """Fields of OpenAI's request that llama-cpp-python honours; others are rejected by name."""

    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = Field(None, description="Echoed; the server serves one model.")
    max_tokens: Annotated[int, Field(ge=1), Integral] | None = Field(
        None, description="At most CHAT_MAX_TOKENS. Default: CHAT_DEFAULT_MAX_TOKENS."
    )
    max_completion_tokens: Annotated[int, Field(ge=1), Integral] | None = Field(
        None, description="OpenAI's newer name for max_tokens (used when max_tokens is absent)."
    )
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: Annotated[int, Field(ge=0), Integral] | None = None
    min_p: float | None = Field(None, ge=0, le=1)
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    seed: Annotated[int, Integral] | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repeat_penalty: float | None = Field(None, gt=0)
    n: Annotated[int, Field(ge=1, le=1), Integral] = Field(1, description="Completions per request: only 1.")
    user: str | None = None

    @field_validator("max_tokens", "max_completion_tokens")
    @classmethod
    def _within_the_cap(cls, value: int | None, info: Any) -> int | None:
        # The server passes CHAT_MAX_TOKENS as validation context.
        cap = (info.context or {}).get("max_tokens")
        if value is not None and cap is not None and value > cap:
            raise ValueError(f"{value} is above this server's limit of {cap} completion tokens (CHAT_MAX_TOKENS)")
        return value

    @classmethod
    def parse(cls, payload: Any, max_tokens: int) -> "ChatCompletionRequest":
        """The validated request, or a BadRequest naming every wrong field (`messages[1].content`)."""
        try:
            return cls.model_validate(payload, context={"max_tokens": max_tokens})
        except ValidationError as exc:
            raise BadRequest.from_validation(exc, locate=_message_field) from None

    def llama_arguments(self) -> dict[str, Any]:
        """Keyword arguments for `Llama.create_chat_completion` (unset fields keep its defaults)."""
        arguments = self.model_dump(
            exclude_none=True, exclude={"n", "user", "stream_options", "max_completion_tokens", "messages"}
        )
        arguments["messages"] = [m.model_dump(exclude_none=True) for m in self.messages]
        if self.max_tokens is None and self.max_completion_tokens is not None:
            arguments["max_tokens"] = self.max_completion_tokens
        return arguments


def _message_field(loc: tuple[Any, ...], error_type: str) -> tuple[Any, ...]:
    """pydantic locates a message's fields under its union tags (`messages.0.tool.content.parts.1`);
    callers know `messages[0].content[1]`. A missing or unknown role is the `role` field's fault."""
    if len(loc) < 2 or loc[0] != "messages" or not isinstance(loc[1], int):
        return loc
    if error_type in ("union_tag_invalid", "union_tag_not_found"):
        return (*loc[:2], "role")
    rest = loc[3:] if len(loc) >= 3 and loc[2] in ROLES else loc[2:]
    if rest[:1] == ("content",) and rest[1:2] in (("text",), ("parts",)):
        rest = ("content", *rest[2:])
    return (*loc[:2], *rest)


# --- the response (documented in /openapi.json; llama-cpp-python builds it) -------------------


class ChatCompletionMessage(BaseModel):
    role: Literal["assistant"]
    content: str | None


class ChatCompletionChoice(BaseModel):
    index: int
    message: ChatCompletionMessage
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None = Field(description="`stop` (a stop string or end of turn) or `length` (max_tokens).")


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    """A chat completion (`stream: false`)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatCompletionChoice]
    usage: CompletionUsage


class ChatCompletionEvent(BaseModel):
    """One server-sent event of a streamed completion (`stream: true`)."""

    data: str = Field(
        description="A `chat.completion.chunk` object as JSON; the last event's data is `[DONE]`."
    )


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
