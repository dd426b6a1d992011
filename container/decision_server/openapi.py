"""The OpenAPI document (`/openapi.json`, `/docs`): every body and status the server uses.

Request bodies are read by hand (size limit, strict JSON, one error format), so FastAPI cannot
infer them: routes name their bodies and responses with the helpers below, and `install` adds
the schemas, generated from the same pydantic models the server validates and answers with,
with this deployment's limits filled in (DECISION_MAX_OPTIONS, CHAT_MAX_TOKENS, ...).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from .settings import Settings

JSON = "application/json"
EVENT_STREAM = "text/event-stream"

ERRORS: dict[int, str] = {
    400: "Invalid request: `error.fields` names each wrong field and why. Codes: `validation_error`, "
    "`prompt_too_long` (prompts are never truncated), `forbidden_token` (a field holds a control "
    "token of the model's chat template).",
    403: "`chat_disabled`: chat completions are switched off on this endpoint (DECISION_CHAT=off).",
    413: "`payload_too_large`: the body is over DECISION_MAX_BODY_BYTES.",
    415: "`unsupported_media_type`: the Content-Type is not application/json.",
    422: "Invalid System One request: `error` (this server's format) and `detail` (`loc`/`msg`/`type` "
    "per problem, as the TypeSafe API reports them).",
    500: "`internal_error`: a fault of the server, logged with the request id.",
    503: "`not_ready` (the model is loading) or `busy` (the request queue is full, DECISION_QUEUE_SIZE): "
    "retryable after `Retry-After` seconds; `unhealthy` (the model keeps failing): not retryable here.",
}
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def one_of(*names: str) -> dict[str, Any]:
    return ref(names[0]) if len(names) == 1 else {"oneOf": [ref(name) for name in names]}


def request_body(*names: str) -> dict[str, Any]:
    """`openapi_extra` for a route whose JSON body is one of the named component schemas."""
    return {"requestBody": {"required": True, "content": {JSON: {"schema": one_of(*names)}}}}


def responses(
    ok: Sequence[str],
    *errors: int,
    description: str = "Success.",
    stream: str | None = None,
    unprocessable: str = "ErrorResponse",
    notes: dict[int, str] | None = None,
) -> dict[int | str, dict[str, Any]]:
    """FastAPI `responses=`: 200 with one of the `ok` schemas (and an event stream when given),
    then each error status with its error schema; `notes` replace the standard descriptions."""
    content: dict[str, Any] = {JSON: {"schema": one_of(*ok)}}
    if stream is not None:
        content[EVENT_STREAM] = {"schema": ref(stream)}
    documented: dict[int | str, dict[str, Any]] = {200: {"description": description, "content": content}}
    for status in errors:
        schema = ref(unprocessable if status == 422 else "ErrorResponse")
        text = (notes or {}).get(status, ERRORS[status])
        documented[status] = {"description": text, "content": {JSON: {"schema": schema}}}
        if status == 503:
            documented[status]["headers"] = _RETRY_AFTER
    return documented


def install(app: FastAPI, settings: Settings, request_models: Iterable[type[BaseModel]],
            response_models: Iterable[type[BaseModel]]) -> None:
    """Serve a document whose components are the models' schemas under this server's limits."""
    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = default_openapi()
            models = [(m, "validation") for m in request_models] + [(m, "serialization") for m in response_models]
            _, definitions = models_json_schema(models, ref_template="#/components/schemas/{model}")
            components = document.setdefault("components", {}).setdefault("schemas", {})
            components.update(definitions.get("$defs", {}))
            _apply_limits(components, settings)
            _drop_unreferenced(document)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to replace the document


def _apply_limits(components: dict[str, Any], settings: Settings) -> None:
    """The configured limits, where the models carry only the contract's widest ones."""
    properties = {name: schema["properties"] for name, schema in components.items() if "properties" in schema}
    properties["Decision"]["options"]["maxItems"] = settings.max_options
    _branch(properties["DecisionRequest"]["decisions"], "array")["maxItems"] = settings.max_decisions
    for name in ("max_tokens", "max_completion_tokens"):
        _branch(properties["ChatCompletionRequest"][name], "integer")["maximum"] = settings.chat_max_tokens_cap
    properties["ChoiceQuestion"]["criteria"]["maxProperties"] = settings.max_options
    properties["ScoreQuestion"]["criteria"]["maxItems"] = settings.max_options


def _drop_unreferenced(document: dict[str, Any]) -> None:
    """Leave out component schemas nothing refers to (pydantic keeps union members that are
    hidden from the schema, such as System One's refused box questions)."""
    components = document["components"]["schemas"]
    reached: set[str] = set()
    pending: list[Any] = [document["paths"]]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            target = node.get("$ref")
            if isinstance(target, str) and target.startswith("#/components/schemas/"):
                name = target.rsplit("/", 1)[1]
                if name not in reached:
                    reached.add(name)
                    pending.append(components[name])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    for name in set(components) - reached:
        del components[name]


def _branch(schema: dict[str, Any], json_type: str) -> dict[str, Any]:
    """The `json_type` member of an optional field's `anyOf` (or the schema itself)."""
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == json_type:
            return branch
    raise KeyError(f"no {json_type} branch in {schema}")
