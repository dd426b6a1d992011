"""Reading a request body as strict JSON: media type, size cap, and JSON that Python's
parser would otherwise accept (NaN/Infinity, numbers that overflow to infinity, integers too
long for int(), duplicate keys) rejected with a 4xx."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from starlette.requests import Request

from .errors import BadRequest, PayloadTooLarge, UnsupportedMediaType


class _JsonProblem(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _JsonProblem(f"{name} is not valid JSON (numbers must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as inf and would reach the prompt as 'Infinity'
        raise _JsonProblem(f"number {text} is out of range (numbers must be finite)")
    return value


def _bounded_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # past sys.get_int_max_str_digits() (4300 by default)
        digits = len(text.lstrip("-"))
        raise _JsonProblem(f"integer with {digits} digits is too long "
                           f"(at most {sys.get_int_max_str_digits()} digits)") from None


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _JsonProblem(f"duplicate key {key!r} in one object")
        result[key] = value
    return result


def parse_json(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest.for_field("body", f"is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        raise BadRequest.for_field("body", "is empty; send a JSON object")
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                          parse_int=_bounded_int, object_pairs_hook=_no_duplicate_keys)
    except _JsonProblem as exc:
        raise BadRequest.for_field("body", str(exc)) from None
    except json.JSONDecodeError as exc:
        raise BadRequest.for_field(
            "body", f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise BadRequest.for_field("body", "is nested too deeply to parse") from None


async def read_json(request: Request, max_bytes: int) -> Any:
    """The parsed JSON body; 415 for another media type, 413 past `max_bytes`."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise UnsupportedMediaType(
            f"Content-Type must be application/json (got {content_type or 'no Content-Type'})"
        )
    return parse_json(await read_body(request, max_bytes))


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The raw body, refused with 413 past `max_bytes` (declared or streamed) before it is all read."""
    too_large = PayloadTooLarge(
        f"request body exceeds {max_bytes} bytes (DECISION_MAX_BODY_BYTES)"
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:  # also catches chunked bodies with no Content-Length
            raise too_large
    return bytes(body)
