"""The FastAPI application: routers, request ids, and every failure as a JSON error."""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from decision_contract import BatchDecisionResponse, DecisionRequest, ErrorResponse, SingleDecisionResponse

from . import openapi
from .chat import ChatCompletion, ChatCompletionEvent, ChatCompletionRequest
from .engine import DecisionEngine
from .errors import BadRequest, MethodNotAllowed, NotFound, ServerError
from .request_ids import REQUEST_ID_HEADER, SAFE_REQUEST_ID, request_id_var
from .routes import openai, sagemaker
from .runtime import ModelRuntime
from .settings import Settings
from .systemone import SystemOneErrorResponse, SystemOneRequest, SystemOneResponse
from .systemone import router as systemone

log = logging.getLogger("decision_server")

def create_app(engine: DecisionEngine | None = None, settings: Settings | None = None) -> FastAPI:
    """The server app. With no engine, the model named by `settings` (default: the
    environment) loads in the background; `/ping` is 503 until it is loaded and warmed up."""
    settings = settings or (engine.settings if engine is not None else Settings.from_env())
    runtime = ModelRuntime(settings, engine)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime.start()
        yield

    app = FastAPI(
        title="Decision Router decision container",
        description=(
            "Structured decisions (SemIf direct-options readout), TypeSafe System One questions and "
            "OpenAI chat on llama.cpp. Every error is `ErrorResponse` (System One's 422 adds `detail`). "
            f"This server: bodies up to {settings.max_body_bytes} bytes (DECISION_MAX_BODY_BYTES); chat "
            + (f"on, at most {settings.chat_max_tokens_cap} completion tokens (CHAT_MAX_TOKENS)."
               if settings.chat_enabled else "switched off (DECISION_CHAT=off): chat requests are 403.")
            # A request's time is the model's work on its tokens: these limits bound it.
            + f" A request takes time in proportion to the tokens the model evaluates: a decision's "
            f"prompt at most {settings.max_decision_tokens} (DECISION_MAX_PROMPT_TOKENS), a request's "
            f"decisions or System One questions at most {settings.max_request_tokens} together "
            f"(DECISION_MAX_REQUEST_TOKENS; a shared prefix counts once), a chat's prompt and completion "
            f"at most {settings.ctx_size} (SM_LLAMA_CPP_CTX_SIZE, less the shared prompt prefix); "
            "more is refused with a 400 (422 for System One), never truncated."
        ),
        version="1.0.0",
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    app.state.settings = settings

    @app.middleware("http")
    async def request_id(request: Request, call_next: Any) -> Response:
        incoming = request.headers.get(REQUEST_ID_HEADER, "")
        rid = incoming if SAFE_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        token = request_id_var.set(rid)
        try:
            try:
                response = await call_next(request)
            except Exception:
                # A real fault: logged whole with the request id; the caller gets the id only.
                log.exception("internal error in request %s (%s %s)", rid, request.method, request.url.path)
                response = _error_response(ServerError(f"internal error; request id {rid}"))
            response.headers[REQUEST_ID_HEADER] = rid
            # SageMaker pings every few seconds: keep those out of the INFO log.
            level = logging.DEBUG if request.url.path == "/ping" and response.status_code == 200 else logging.INFO
            log.log(level, "%s %s -> %d", request.method, request.url.path, response.status_code)
            return response
        finally:
            request_id_var.reset(token)

    _install_error_handlers(app)
    app.include_router(sagemaker.router)
    app.include_router(openai.router)
    app.include_router(systemone.router)
    openapi.install(
        app,
        settings,
        request_models=[DecisionRequest, ChatCompletionRequest, SystemOneRequest],
        response_models=[
            SingleDecisionResponse, BatchDecisionResponse, ChatCompletion, ChatCompletionEvent,
            SystemOneResponse, sagemaker.PingResponse, openai.ModelList, ErrorResponse, SystemOneErrorResponse,
        ],
    )
    return app


def _error_response(error: ServerError) -> JSONResponse:
    headers = {**error.headers(), REQUEST_ID_HEADER: request_id_var.get()}
    return JSONResponse(error.response_body(), status_code=error.status, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServerError)
    async def server_error(request: Request, exc: ServerError) -> JSONResponse:
        if exc.status >= 500 and not exc.retryable:
            log.error("request %s failed: %s", request_id_var.get(), exc.message)
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = [
            {"field": ".".join(str(p) for p in e.get("loc", ())), "reason": str(e.get("msg"))}
            for e in exc.errors()
        ]
        return _error_response(BadRequest("; ".join(f"{f['field']}: {f['reason']}" for f in fields), fields=fields))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return _error_response(NotFound(f"no route {request.method} {request.url.path}"))
        if exc.status_code == 405:
            error = MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}")
            response = _error_response(error)
            if exc.headers and "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
            return response
        error = ServerError(str(exc.detail))
        error.status = exc.status_code
        error.code = "http_error"
        return _error_response(error)
