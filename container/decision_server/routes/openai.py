"""llama-server's OpenAI-compatible surface: `/v1/chat/completions` and `/v1/models`."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from ..bodies import read_json
from ..chat import ChatCompletionRequest, sse_events
from ..engine import chat_chunks
from ..errors import BadRequest
from ..runtime import ModelRuntime
from ..systemone.router import model_listing
from .waiting import result_of

router = APIRouter(prefix="/v1", tags=["openai"])

_CHAT_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletionRequest"}}},
    }
}


@router.post("/chat/completions", summary="OpenAI Chat Completions (stream: true gives SSE)", openapi_extra=_CHAT_BODY)
async def chat_completions(request: Request) -> Response:
    runtime: ModelRuntime = request.app.state.runtime
    payload = await read_json(request, runtime.settings.max_body_bytes)
    return await chat_response(payload, runtime, request)


@router.get("/models", summary="The one served model, as llama-server lists it")
async def models(request: Request) -> Response:
    runtime: ModelRuntime = request.app.state.runtime
    engine = runtime.require()
    info = engine.model_info
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {
                    "id": info.file,
                    "object": "model",
                    "created": int(runtime.started_at),
                    "owned_by": "llamacpp",
                    "meta": info.model_dump(),
                }
            ],
            **model_listing(engine),  # typesafe-sdk's models.list() reads "models"
        }
    )


async def chat_response(payload: Any, runtime: ModelRuntime, request: Request) -> Response:
    if not isinstance(payload, dict):
        raise BadRequest.for_field("body", "must be a JSON object with 'messages'")
    try:
        chat_request = ChatCompletionRequest.model_validate(payload)
    except ValidationError as exc:
        raise BadRequest.from_validation(exc) from None
    engine = runtime.require()
    work = await run_in_threadpool(lambda: engine.submit_chat(**chat_request.llama_arguments()))
    if chat_request.stream:
        # Starlette stops iterating when the client disconnects; closing the chunks cancels the generation.
        return StreamingResponse(
            sse_events(chat_chunks(work)), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
    return JSONResponse(await result_of(work, request))
