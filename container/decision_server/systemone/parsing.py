"""Reading a System One request body: content encoding, strict JSON, validation into
`SystemOneRequest`, and problems reported the way the TypeSafe API reports them
(FastAPI-style `{"loc": [...], "msg": ..., "type": ...}` entries)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..bodies import parse_json
from ..errors import BadRequest, PayloadTooLarge, ServerError, UnsupportedMediaType
from .models import SystemOneRequest

try:  # The client compresses bodies >= 1 KiB with zstd when it can (Python 3.14+, or backports.zstd).
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the Python version
    try:
        from backports import zstd  # type: ignore[no-redef]
    except ImportError:
        zstd = None  # type: ignore[assignment]

SUPPORTED_ENCODINGS = ("identity", "zstd") if zstd is not None else ("identity",)


class SystemOneRequestError(ServerError):
    """Invalid System One request: 422, listing every problem with its field path.

    The body is the container's error (`error.fields` with `field`/`reason`) plus the TypeSafe
    API's `detail` list (`loc`/`msg`/`type`), which System One clients know how to read.
    """

    status = 422
    code = "validation_error"

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        self.problems = problems
        fields = [{"field": _path(p["loc"]) or "body", "reason": p["msg"]} for p in problems]
        super().__init__(summary(problems), fields=fields)

    def response_body(self) -> dict[str, Any]:
        return {**super().response_body(), "detail": self.problems}


def summary(problems: list[dict[str, Any]]) -> str:
    """One line naming every problem with its field path, e.g. `questions.tone.choice.criteria: ...`."""
    parts = []
    for problem in problems:
        path = _path(problem["loc"])
        parts.append(f"{path}: {problem['msg']}" if path else problem["msg"])
    return "; ".join(parts)


def _path(loc: list[Any]) -> str:
    return ".".join(str(part) for part in loc if part != "body")


def decode_body(raw: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    """The body as JSON bytes, decompressed (bounded by `max_bytes`) if the client compressed it."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return raw
    if encoding != "zstd" or zstd is None:
        raise UnsupportedMediaType(
            f"Content-Encoding {encoding!r} is not supported; send {' or '.join(SUPPORTED_ENCODINGS)} "
            "(typesafe-sdk: TypeSafeClient(compression=False) sends uncompressed bodies)"
        )
    decompressor = zstd.ZstdDecompressor()
    try:
        body = decompressor.decompress(raw, max_length=max_bytes + 1)
    except zstd.ZstdError as error:
        raise SystemOneRequestError([_problem(["body"], f"invalid zstd data: {error}", "zstd_invalid")]) from None
    if len(body) > max_bytes:
        raise PayloadTooLarge(f"the decompressed body exceeds {max_bytes} bytes (DECISION_MAX_BODY_BYTES)")
    if not decompressor.eof:
        raise SystemOneRequestError([_problem(["body"], "the zstd frame is incomplete (truncated body)", "zstd_invalid")])
    return body


def load_json(body: bytes) -> Any:
    """The container's strict JSON reading (no NaN/Infinity, no repeated keys), as a 422."""
    try:
        return parse_json(body)
    except BadRequest as error:
        raise SystemOneRequestError([_problem(["body"], error.message.removeprefix("body: "), "json_invalid")]) from None


def parse_request(data: Any, *, max_options: int) -> SystemOneRequest:
    """Validate a decoded body; every problem is reported at once, with its field path."""
    try:
        return SystemOneRequest.model_validate(data, context={"max_options": max_options})
    except ValidationError as error:
        raise SystemOneRequestError(problems_from(error)) from None


def problems_from(error: ValidationError) -> list[dict[str, Any]]:
    return [
        _problem(["body", *problem["loc"]], _message(problem), problem["type"])
        for problem in error.errors(include_url=False, include_input=False, include_context=False)
    ]


def _message(problem: Any) -> str:
    message = problem["msg"]
    # pydantic prefixes our own ValueErrors; the reason reads better without it.
    return message.removeprefix("Value error, ")


def _problem(loc: list[Any], msg: str, kind: str) -> dict[str, Any]:
    return {"loc": loc, "msg": msg, "type": kind}
