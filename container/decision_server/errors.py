"""Errors the server reports, and how each becomes a JSON response.

Every failure is `{"error": {"code", "message", ...}}` (decision_contract.ErrorResponse).
Domain code raises `ServerError` subclasses; the HTTP layer only maps them.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

from pydantic import ValidationError

from decision_contract import ErrorDetail, ErrorResponse

log = logging.getLogger("decision_server")


class ServerError(Exception):
    status = 500
    code = "internal_error"
    retryable = False

    def __init__(self, message: str, *, fields: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields

    def headers(self) -> dict[str, str]:
        return {}

    def response_body(self) -> dict[str, Any]:
        detail = ErrorDetail(code=self.code, message=self.message, retryable=self.retryable, fields=self.fields)
        return ErrorResponse(error=detail, retryable=self.retryable).model_dump(exclude_none=True)


class BadRequest(ServerError):
    status = 400
    code = "validation_error"

    @classmethod
    def for_field(cls, field: str, reason: str) -> "BadRequest":
        return cls(f"{field}: {reason}", fields=[{"field": field, "reason": reason}])

    @classmethod
    def from_validation(
        cls,
        exc: ValidationError,
        prefix: str = "",
        locate: Callable[[tuple[Any, ...], str], tuple[Any, ...]] | None = None,
    ) -> "BadRequest":
        """One field per problem; `locate(loc, error_type)` may rewrite pydantic's locations."""
        fields = []
        for error in exc.errors(include_url=False):
            loc = tuple(error.get("loc", ()))
            if locate is not None:
                loc = locate(loc, error["type"])
            fields.append({"field": _location(prefix, loc), "reason": _reason(error)})
        message = "; ".join(f"{f['field']}: {f['reason']}" for f in fields[:5])
        if len(fields) > 5:
            message += f"; and {len(fields) - 5} more"
        return cls(message, fields=fields)


class ForbiddenToken(BadRequest):
    code = "forbidden_token"

    def __init__(self, field: str, token: str) -> None:
        reason = f"contains the model's control token {token!r}, which could forge chat turns"
        super().__init__(f"{field}: {reason}", fields=[{"field": field, "reason": reason}])


class PromptTooLong(BadRequest):
    code = "prompt_too_long"

    def __init__(self, field: str, tokens: int, limit: int, setting: str) -> None:
        reason = (
            f"the prompt is {tokens} tokens; at most {limit} are allowed ({setting}); "
            "prompts are never truncated, so shorten the input"
        )
        super().__init__(f"{field}: {reason}", fields=[{"field": field, "reason": reason}])


class EngineFault(ServerError):
    """The model failed while evaluating this request (a llama_decode error, non-finite
    logits): a 500 `internal_error`."""


class Cancelled(ServerError):
    """The client went away; its work was dropped (nobody reads this answer)."""

    status = 499
    code = "cancelled"


class ChatDisabled(ServerError):
    """This deployment serves decisions only (DECISION_CHAT=off)."""

    status = 403
    code = "chat_disabled"

    def __init__(self) -> None:
        super().__init__(
            "chat completions are switched off on this endpoint (DECISION_CHAT=off); "
            "send structured decisions or System One questions"
        )


class PayloadTooLarge(ServerError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(ServerError):
    status = 415
    code = "unsupported_media_type"


class NotFound(ServerError):
    status = 404
    code = "not_found"


class MethodNotAllowed(ServerError):
    status = 405
    code = "method_not_allowed"


class Busy(ServerError):
    """The one model context stayed busy past the admission wait."""

    status = 503
    code = "busy"
    retryable = True

    def __init__(self, message: str, retry_after_seconds: float) -> None:
        super().__init__(message)
        self.retry_after = max(1, math.ceil(retry_after_seconds))

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class NotReady(Busy):
    code = "not_ready"


class Unhealthy(ServerError):
    """The model keeps failing: not retryable here, the instance needs replacing."""

    status = 503
    code = "unhealthy"


def _location(prefix: str, loc: tuple[Any, ...]) -> str:
    text = prefix
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "body"


def _reason(error: dict[str, Any]) -> str:
    message = str(error.get("msg", "invalid"))
    # pydantic prefixes messages raised by our own validators with "Value error, ".
    return message.removeprefix("Value error, ")
