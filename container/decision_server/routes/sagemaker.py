"""SageMaker's container surface: `/ping` and `/invocations` (also under
`/endpoints/{name}/invocations`, the runtime API's path, so a real boto3
`sagemaker-runtime` client can be pointed straight at this server)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from decision_contract import DecisionRequest, SingleDecisionResponse

from .. import openapi
from ..bodies import read_json
from ..errors import BadRequest
from ..ggml_backends import LlamaBuild
from ..prompt_cache import PromptCacheStats
from ..runtime import ModelRuntime
from ..systemone.router import answer_invocation
from ..waiting import result_of
from .openai import chat_response

router = APIRouter(tags=["sagemaker"])

ACCEPTED_SHAPES = (
    'accepted bodies: {"decision": {...}} or {"decisions": [...]} (structured decision), '
    'or {"messages": [...], ...} (OpenAI chat completion), '
    'or {"model": ..., "state": ..., "questions": {...}} (TypeSafe System One)'
)
#: SageMaker's own rule for endpoint names (CreateEndpoint's EndpointName).
ENDPOINT_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"


class PingResponse(BaseModel):
    status: str = "ok"
    model: str
    prompt_cache: PromptCacheStats | None = None
    llama_build: LlamaBuild | None = None


_INVOCATION = {
    "description": "The body's keys pick the shape: `decision` or `decisions` (structured decisions), "
    "`messages` (an OpenAI chat completion; `stream: true` answers server-sent events) or "
    "`questions` (TypeSafe System One, whose invalid requests are 422 as that API reports them).",
    "openapi_extra": openapi.request_body("DecisionRequest", "ChatCompletionRequest", "SystemOneRequest"),
    "responses": openapi.responses(
        ["SingleDecisionResponse", "BatchDecisionResponse", "ChatCompletion", "SystemOneResponse"],
        400, 403, 413, 415, 422, 500, 503,
        description="`result` for a `decision`, `results` for `decisions`, a chat completion for "
        "`messages`, `answers` for `questions`.",
        stream="ChatCompletionEvent",
        unprocessable="SystemOneErrorResponse",
    ),
}


def runtime_of(request: Request) -> ModelRuntime:
    return request.app.state.runtime


@router.get(
    "/ping",
    summary="Health: 200 once the model is loaded and warmed up",
    responses=openapi.responses(["PingResponse"], 500, 503),
)
async def ping(request: Request) -> Response:
    engine = runtime_of(request).healthy()
    return JSONResponse(PingResponse(model=engine.model_info.file, prompt_cache=engine.prompt_cache_stats(),
                                     llama_build=engine.llama_build).model_dump())


@router.post("/invocations", summary="Structured decision(s), a chat completion or System One questions", **_INVOCATION)
async def invocations(request: Request) -> Response:
    return await _invoke(request)


@router.post(
    "/endpoints/{endpoint_name}/invocations",
    summary="Same as /invocations, at the SageMaker runtime API's path",
    **_INVOCATION,
)
async def endpoint_invocations(
    request: Request,
    endpoint_name: str = Path(pattern=ENDPOINT_NAME_PATTERN, description="A SageMaker endpoint name (any is served)."),
) -> Response:
    return await _invoke(request)


async def _invoke(request: Request) -> Response:
    runtime = runtime_of(request)
    payload = await read_json(request, runtime.settings.max_body_bytes)
    if not isinstance(payload, dict):
        raise BadRequest.for_field("body", f"must be a JSON object; {ACCEPTED_SHAPES}")
    if "decision" in payload or "decisions" in payload:
        return await decision_response(payload, runtime, request)
    if "messages" in payload:
        return await chat_response(payload, runtime, request)
    if "questions" in payload:
        return await answer_invocation(runtime.require(), payload, request)
    keys = ", ".join(sorted(payload)) or "none"
    raise BadRequest.for_field("body", f"has none of 'decision', 'decisions', 'messages' or 'questions' (keys: {keys}); {ACCEPTED_SHAPES}")


async def decision_response(payload: dict[str, Any], runtime: ModelRuntime, request: Request) -> Response:
    try:
        decision_request = DecisionRequest.model_validate(payload)
    except ValidationError as exc:
        raise BadRequest.from_validation(exc) from None
    engine = runtime.require()
    single = decision_request.decision is not None
    work = await run_in_threadpool(
        engine.submit_decisions, decision_request.items, field="decision" if single else "decisions"
    )
    batch = await result_of(work, request)
    response = SingleDecisionResponse(result=batch.results[0]) if single else batch
    # exclude_none: the hidden state appears only when a decision asked for it
    return Response(response.model_dump_json(exclude_none=True), media_type="application/json")
