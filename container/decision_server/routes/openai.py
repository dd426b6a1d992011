"""llama-server's OpenAI-compatible surface: `/v1/chat/completions` and `/v1/models`."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from decision_contract import ModelInfo

from .. import openapi
from ..bodies import read_json
from ..chat import ChatCompletionRequest, sse_events
from ..engine import chat_chunks
from ..errors import BadRequest, ChatDisabled
from ..runtime import ModelRuntime
from ..systemone.router import model_listing
from ..waiting import result_of

router = APIRouter(prefix="/v1", tags=["openai"])


class ModelCard(BaseModel):
    id: str = Field(description="The served GGUF file.")
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "llamacpp"
    meta: ModelInfo


class SystemOneModel(BaseModel):
    name: str
    description: str
    release_date: str = Field(description="ISO date of the GGUF file.")


class ModelList(BaseModel):
    """OpenAI's model list (`data`), and the `models` list TypeSafe's `client.models.list()` reads."""

    object: Literal["list"] = "list"
    data: list[ModelCard]
    models: list[SystemOneModel]


@router.post(
    "/chat/completions",
    summary="OpenAI Chat Completions (stream: true gives SSE)",
    openapi_extra=openapi.request_body("ChatCompletionRequest"),
    responses=openapi.responses(["ChatCompletion"], 400, 403, 413, 415, 500, 503, stream="ChatCompletionEvent"),
)
async def chat_completions(request: Request) -> Response:
    runtime: ModelRuntime = request.app.state.runtime
    if not runtime.settings.chat_enabled:
        raise ChatDisabled()  # before reading a body this route would never use
    payload = await read_json(request, runtime.settings.max_body_bytes)
    return await chat_response(payload, runtime, request)


@router.get(
    "/models",
    summary="The one served model, as llama-server lists it",
    responses=openapi.responses(["ModelList"], 500, 503),
)
async def models(request: Request) -> Response:
    runtime: ModelRuntime = request.app.state.runtime
    engine = runtime.require()
    info = engine.model_info
    listing = ModelList(
        data=[ModelCard(id=info.file, created=int(runtime.started_at), meta=info)],
        **model_listing(engine),  # typesafe-sdk's models.list() reads "models"
    )
    return JSONResponse(listing.model_dump(mode="json"))


async def chat_response(payload: Any, runtime: ModelRuntime, request: Request) -> Response:
    if not runtime.settings.chat_enabled:
        raise ChatDisabled()
    if not isinstance(payload, dict):
        raise BadRequest.for_field("body", "must be a JSON object with 'messages'")
    chat_request = ChatCompletionRequest.parse(payload, max_tokens=runtime.settings.chat_max_tokens_cap)
    engine = runtime.require()
    work = await run_in_threadpool(lambda: engine.submit_chat(**chat_request.llama_arguments()))
    if chat_request.stream:
        # Starlette stops iterating when the client disconnects; closing the chunks cancels the generation.
        return StreamingResponse(
            sse_events(chat_chunks(work)), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
    return JSONResponse(await result_of(work, request))
