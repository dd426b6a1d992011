"""`POST /v1/systemone` (and the System One shape of `POST /invocations`).

All questions of a request go to the engine as one shared-state batch, so the state is
evaluated once. Invalid requests are 422 with every problem and its field path; a busy
model is the engine's 503 + Retry-After, which System One clients retry by themselves.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from .. import openapi
from ..bodies import read_body
from ..errors import BadRequest, ServerError, UnsupportedMediaType
from ..request_ids import request_id_var
from ..waiting import result_of
from .mapping import DEFAULT_CONFIDENCE_FORMULA, to_decisions, to_response
from .models import SystemOneResponse
from .parsing import SystemOneRequestError, decode_body, load_json, parse_request

#: The header typesafe-sdk reads for `response.request_id` (it raises without one).
REQUEST_ID_HEADER = "x-typesafe-request-id"

router = APIRouter(tags=["System One"])


async def answer(engine: Any, data: Any, http_request: Request) -> SystemOneResponse:
    """Answer a decoded System One body with `engine` (a DecisionEngine).

    Raises SystemOneRequestError (422) for anything wrong with the request, including the
    engine's own limits (prompt tokens) and control tokens, re-addressed to System One fields.
    A request is bounded by its body size and tokens, not by a question count: many questions
    are scored as one shared-state batch in as many parallel chunks as the engine runs.
    """
    request = parse_request(data, max_options=engine.settings.max_options)
    decisions = to_decisions(request)
    try:
        work = await run_in_threadpool(engine.submit_decisions, decisions, field="decisions", count_limit=False)
    except BadRequest as error:
        raise _readdressed(error, list(request.questions)) from None
    batch = await result_of(work, http_request)
    return to_response(request, batch, DEFAULT_CONFIDENCE_FORMULA)


def model_listing(engine: Any) -> dict[str, Any]:
    """The `models` list that typesafe-sdk's `client.models.list()` reads from `GET /v1/models`
    (merged into the OpenAI-style listing there; each client ignores the other's keys)."""
    info = engine.model_info
    written = datetime.fromtimestamp(engine.model_file.path.stat().st_mtime, tz=timezone.utc)
    return {"models": [{
        "name": info.file,
        "description": (
            f"{info.file}: structured decisions (SemIf direct-options readout; noul, choice and score), "
            "uncalibrated probabilities; release_date is the GGUF file's date. Any requested model "
            "name is answered by this model."
        ),
        "release_date": written.date().isoformat(),
    }]}


async def answer_invocation(engine: Any, data: Any, request: Request) -> Response:
    """The `/invocations` hook: a JSON body with `questions` is a System One request."""
    return Response((await answer(engine, data, request)).model_dump_json(), media_type="application/json")


@router.post(
    "/v1/systemone",
    summary="TypeSafe System One: noul, choice and score questions about one state",
    description="Body: JSON, optionally zstd-compressed (`Content-Encoding: zstd`). Invalid requests "
    "are 422 with every problem located (`detail`), as the TypeSafe API reports them.",
    # The body is read by hand (encoding, limits, 422s); the app publishes its schema.
    openapi_extra=openapi.request_body("SystemOneRequest"),
    responses=openapi.responses(
        ["SystemOneResponse"], 413, 415, 422, 500, 503,
        unprocessable="SystemOneErrorResponse",
        notes={
            413: "`payload_too_large`: the body, or the decompressed body, is over DECISION_MAX_BODY_BYTES.",
            415: "`unsupported_media_type`: not JSON, or a Content-Encoding other than zstd.",
        },
    ),
)
async def system_one(request: Request) -> Response:
    headers = {REQUEST_ID_HEADER: request_id_var.get()}
    try:
        runtime = request.app.state.runtime
        max_bytes = runtime.settings.max_body_bytes
        _require_json(request.headers.get("content-type"))
        raw = await read_body(request, max_bytes)
        data = load_json(decode_body(raw, request.headers.get("content-encoding"), max_bytes))
        result = await answer(runtime.require(), data, request)
    except ServerError as error:
        # Rendered here so that errors, too, carry the request id the client reads.
        return JSONResponse(error.response_body(), status_code=error.status, headers={**error.headers(), **headers})
    return Response(result.model_dump_json(), media_type="application/json", headers=headers)


def _require_json(content_type: str | None) -> None:
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type == "multipart/form-data":
        raise UnsupportedMediaType(
            "multipart bodies carry image assets, which need a vision-language model; "
            "this decision model reads text only: send application/json"
        )
    if media_type != "application/json":
        raise UnsupportedMediaType(f"Content-Type must be application/json, got {content_type or 'none'!r}")


_DECISION_FIELD = re.compile(r"^decisions?(?:\[(\d+)\])?(.*)$")


def _readdressed(error: BadRequest, names: list[str]) -> SystemOneRequestError:
    """The engine names decisions (`decisions[2].state`); System One callers know questions."""
    problems = []
    for field in error.fields or [{"field": "decisions", "reason": error.message}]:
        match = _DECISION_FIELD.match(field["field"])
        if match is None:
            loc: list[Any] = ["body"]
        elif match.group(2).startswith(".state"):
            loc = ["body", "state"]
        elif match.group(1) is not None:
            loc = ["body", "questions", names[int(match.group(1))]]
        elif len(names) == 1:
            loc = ["body", "questions", names[0]]
        else:
            loc = ["body", "questions"]
        problems.append({"loc": loc, "msg": field["reason"], "type": error.code})
    readdressed = SystemOneRequestError(problems)
    readdressed.code = error.code
    return readdressed
