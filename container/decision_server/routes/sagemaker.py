"""SageMaker's container surface: `/ping` and `/invocations` (also under
`/endpoints/{name}/invocations`, the runtime API's path, so a real boto3
`sagemaker-runtime` client can be pointed straight at this server)."""

from __future__ import annotations

from typing import Any

from decision_contract import DecisionRequest, SingleDecisionResponse
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from ..bodies import read_json
from ..errors import BadRequest
from ..runtime import ModelRuntime
from ..systemone.router import answer_invocation
from .openai import chat_response
from .waiting import result_of

router = APIRouter(tags=["sagemaker"])

ACCEPTED_SHAPES = (
    'accepted bodies: {"decision": {...}} or {"decisions": [...]} (structured decision), '
    'or {"messages": [...], ...} (OpenAI chat completion), '
    'or {"model": ..., "state": ..., "questions": {...}} (TypeSafe System One)'
)

_INVOCATION_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/DecisionRequest"},
                        {"$ref": "#/components/schemas/ChatCompletionRequest"},
                    ]
                }
            }
        },
    }
}


def runtime_of(request: Request) -> ModelRuntime:
    return request.app.state.runtime


@router.get("/ping", summary="Health: 200 once the model is loaded and warmed up")
async def ping(request: Request) -> Response:
    engine = runtime_of(request).healthy()
    return JSONResponse({"status": "ok", "model": engine.model_info.file})


@router.post("/invocations", summary="Structured decision(s) or a chat completion", openapi_extra=_INVOCATION_BODY)
async def invocations(request: Request) -> Response:
    return await _invoke(request)


@router.post(
    "/endpoints/{endpoint_name}/invocations",
    summary="Same as /invocations, at the SageMaker runtime API's path",
    openapi_extra=_INVOCATION_BODY,
)
async def endpoint_invocations(endpoint_name: str, request: Request) -> Response:
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
