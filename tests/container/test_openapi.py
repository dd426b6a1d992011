"""The OpenAPI document tells the truth: request bodies as the server validates them (with this
server's limits), every status a route answers, error and response schemas. No model needed:
the app builds its document without loading one."""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs
import pytest
from pydantic import ValidationError

from decision_contract import DecisionRequest
from decision_server.app import create_app
from decision_server.chat import ChatCompletionRequest
from decision_server.errors import BadRequest
from decision_server.settings import Settings
from decision_server.systemone import SystemOneRequestError, parse_request

OPTIONS = [{"id": "a", "description": "A"}, {"id": "b", "description": "B"}]
DECISION = {"id": "d", "state": "s", "question": "q", "options": OPTIONS}
MESSAGES = [{"role": "user", "content": "hi"}]
QUESTION = {"type": "noul", "instructions": "Is it about billing?"}
SYSTEM_ONE = {"model": "m", "state": "s", "questions": {"billing": QUESTION}}


def document(**environment: str) -> dict[str, Any]:
    return create_app(settings=Settings.from_env(environment)).openapi()


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return document()


def body_validator(doc: dict[str, Any], path: str) -> jsonschema_rs.Validator:
    schema = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema_rs.Draft202012Validator({**schema, "components": doc["components"]})


def component(doc: dict[str, Any], name: str) -> jsonschema_rs.Validator:
    return jsonschema_rs.Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": doc["components"]})


def decision_accepted(body: dict[str, Any]) -> bool:
    try:
        DecisionRequest.model_validate(body)
    except ValidationError:
        return False
    return True


def chat_accepted(body: dict[str, Any]) -> bool:
    try:
        ChatCompletionRequest.parse(body, max_tokens=512)
    except BadRequest:
        return False
    return True


def system_one_accepted(body: dict[str, Any]) -> bool:
    try:
        parse_request(body, max_options=16)
    except SystemOneRequestError:
        return False
    return True


# --- request bodies: the schema allows exactly what the server's validation accepts -------------

DECISION_BODIES = [
    {"decision": DECISION},
    {"decisions": [DECISION]},
    {"decision": DECISION, "decisions": None},  # a null counts as absent
    {"decisions": [DECISION], "decision": None},
    {},
    {"decision": None},
    {"decisions": []},
    {"decision": DECISION, "decisions": [DECISION]},
    {"decision": {**DECISION, "state": ""}},
    {"decision": {**DECISION, "state": {}}},
    {"decision": {**DECISION, "state": []}},
    {"decision": {**DECISION, "state": {"k": []}}},
    {"decision": {**DECISION, "state": 3}},
    {"decision": {**DECISION, "options": OPTIONS[:1]}},
    {"decision": {**DECISION, "options": [{"id": f"o{i}", "description": "x"} for i in range(17)]}},
    {"decision": {**DECISION, "id": ""}},
    {"decision": {**DECISION, "temperature": 0}},
    {"decision": {**DECISION, "temperature": "1"}},
    {"decision": {**DECISION, "temperature": True}},
    {"decision": {**DECISION, "temperature": 2}},
    {"decision": {**DECISION, "extra": 1}},
    {"decision": {**DECISION, "layout": "criterion-first"}},
    {"decision": {**DECISION, "layout": "evidence-first"}},
    {"decision": {**DECISION, "layout": "evidence-last"}},
    {"decision": {**DECISION, "layout": None}},
    # Schema-valid, once refused (found by Schemathesis): ids are positional labels, a batch may mix states.
    {"decision": {**DECISION, "options": [OPTIONS[0], OPTIONS[0]]}},
    {"decisions": [DECISION, DECISION]},
    {"decisions": [DECISION, {**DECISION, "id": "e", "state": {"k": 1}}]},
]


@pytest.mark.parametrize("body", DECISION_BODIES, ids=json.dumps)
def test_the_decision_schema_allows_what_the_contract_accepts(doc, body):
    assert component(doc, "DecisionRequest").is_valid(body) == decision_accepted(body)


CHAT_BODIES = [
    {"messages": MESSAGES},
    {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "x"}]},
                  {"role": "assistant", "content": "a", "name": "bot"}, {"role": "tool", "content": "4", "tool_call_id": "c1"},
                  {"role": "developer", "content": ""}]},
    {"messages": []},
    {"messages": [{"role": "tool"}]},  # once a 500: the chat template needs `content`
    {"messages": [{"role": "user"}]},
    {"messages": [{"role": "assistant", "content": None}]},
    {"messages": [{"role": "tool", "content": "4"}]},
    {"messages": [{"role": "tool", "content": "4", "tool_call_id": ""}]},
    {"messages": [{"role": "user", "content": "x", "tool_call_id": "c1"}]},
    {"messages": [{"role": "robot", "content": "x"}]},
    {"messages": [{"content": "x"}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]},
    {"messages": MESSAGES, "max_tokens": 512},
    {"messages": MESSAGES, "max_tokens": 513},
    {"messages": MESSAGES, "max_completion_tokens": 513},
    {"messages": MESSAGES, "max_tokens": 0},
    {"messages": MESSAGES, "max_tokens": 8.0},
    {"messages": MESSAGES, "max_tokens": 8.5},
    {"messages": MESSAGES, "top_k": True},
    {"messages": MESSAGES, "temperature": "0.5"},
    {"messages": MESSAGES, "frequency_penalty": False},
    {"messages": MESSAGES, "n": 1},
    {"messages": MESSAGES, "n": True},
    {"messages": MESSAGES, "n": 2},
    {"messages": MESSAGES, "stop": ["a", "b", "c", "d", "e"]},
    {"messages": MESSAGES, "logit_bias": {}},
]


@pytest.mark.parametrize("body", CHAT_BODIES, ids=json.dumps)
def test_the_chat_schema_allows_what_the_server_accepts(doc, body):
    assert component(doc, "ChatCompletionRequest").is_valid(body) == chat_accepted(body)


SYSTEM_ONE_BODIES = [
    SYSTEM_ONE,
    {**SYSTEM_ONE, "state": {"subject": "x"}},
    {**SYSTEM_ONE, "questions": {"tone": {"type": "choice", "criteria": {"calm": None, "angry": "upset"}}}},
    {**SYSTEM_ONE, "questions": {"urgency": {"type": "score", "criteria": ["low", ["high"]]}}},
    {**SYSTEM_ONE, "questions": {"q": {"type": "noul", "criteria": {"true": "yes"}}}},
    {**SYSTEM_ONE, "state": ""},
    {**SYSTEM_ONE, "state": "   "},
    {**SYSTEM_ONE, "state": "\u001f"},  # blank to str.strip(), though not to every regex's \s
    {**SYSTEM_ONE, "state": "\ufeff"},
    {**SYSTEM_ONE, "state": {}},
    {**SYSTEM_ONE, "state": 4},
    {**SYSTEM_ONE, "questions": {}},
    {**SYSTEM_ONE, "questions": {" ": QUESTION}},
    {**SYSTEM_ONE, "questions": {"\u001f": QUESTION}},
    {**SYSTEM_ONE, "questions": {"tone": {"type": "choice", "criteria": {}}}},
    {**SYSTEM_ONE, "questions": {"tone": {"type": "choice", "criteria": {"calm": None}}}},
    {**SYSTEM_ONE, "questions": {"tone": {"type": "choice", "criteria": {"calm": None, "": None}}}},
    {**SYSTEM_ONE, "questions": {"tone": {"type": "choice", "criteria": {"calm": None, "angry": ""}}}},
    {**SYSTEM_ONE, "questions": {"urgency": {"type": "score", "criteria": ["only"]}}},
    {**SYSTEM_ONE, "questions": {"q": {"type": "noul"}}},
    {**SYSTEM_ONE, "questions": {"q": {"type": "noul", "criteria": {"true": None}}}},
    {**SYSTEM_ONE, "questions": {"q": {"type": "noul", "instructions": None, "criteria": {}}}},
    {**SYSTEM_ONE, "questions": {"pic": {"type": "box"}}},
    {**SYSTEM_ONE, "assets": {}},
    {**SYSTEM_ONE, "assets": {"img": "data:image/png;base64,AAAA"}},
]


@pytest.mark.parametrize("body", SYSTEM_ONE_BODIES, ids=json.dumps)
def test_the_system_one_schema_allows_what_the_server_accepts(doc, body):
    assert component(doc, "SystemOneRequest").is_valid(body) == system_one_accepted(body)


@pytest.mark.parametrize("path", ["/invocations", "/endpoints/{endpoint_name}/invocations"])
def test_an_invocation_body_is_one_of_the_four_shapes(doc, path):
    shapes = body_validator(doc, path)
    for body in ({"decision": DECISION}, {"decisions": [DECISION]}, {"messages": MESSAGES}, SYSTEM_ONE):
        assert shapes.is_valid(body), body
    for body in ({}, [], {"question": "?"}, {"decision": DECISION, "messages": MESSAGES},
                 {"messages": MESSAGES, "questions": SYSTEM_ONE["questions"]}):
        assert not shapes.is_valid(body), body


def test_the_endpoint_name_follows_sagemakers_rule(doc):
    (parameter,) = doc["paths"]["/endpoints/{endpoint_name}/invocations"]["post"]["parameters"]
    name = jsonschema_rs.Draft202012Validator(parameter["schema"])
    assert all(name.is_valid(n) for n in ("decision-router", "a", "A1-b--2", "x" * 63))
    assert not any(name.is_valid(n) for n in ("", "-a", "a-", "a_b", "a.b", "x" * 64))


def test_the_document_describes_the_prompt_layouts(doc):
    schemas = doc["components"]["schemas"]
    layout = schemas["Decision"]["properties"]["layout"]
    assert layout["enum"] == ["evidence-first", "criterion-first"] and layout["default"] == "evidence-first"
    assert "direct-options-v1" in layout["description"] and "criterion-first-v1" in layout["description"]
    version = schemas["DecisionResult"]["properties"]["prompt_version"]["description"]
    assert "direct-options-v1" in version and "criterion-first-v1" in version


def test_the_published_limits_are_this_servers(doc):
    small = document(DECISION_MAX_OPTIONS="4", DECISION_MAX_DECISIONS="3", CHAT_MAX_TOKENS="8")
    for published, options, decisions, tokens in ((doc, 16, 64, 512), (small, 4, 3, 8)):
        schemas = published["components"]["schemas"]
        assert schemas["Decision"]["properties"]["options"]["maxItems"] == options
        assert schemas["ChoiceQuestion"]["properties"]["criteria"]["maxProperties"] == options
        assert schemas["ScoreQuestion"]["properties"]["criteria"]["maxItems"] == options
        assert {"type": "array", "maxItems": decisions}.items() <= _branch(schemas["DecisionRequest"], "decisions", "array").items()
        for name in ("max_tokens", "max_completion_tokens"):
            assert _branch(schemas["ChatCompletionRequest"], name, "integer")["maximum"] == tokens
    assert "CHAT_MAX_TOKENS" in small["info"]["description"] and "8 completion tokens" in small["info"]["description"]


def test_the_document_states_the_token_limits_that_bound_a_requests_time():
    # A request's time is the model's work on its tokens (one found at 20 s had 2,077): the
    # document says how many one request may ask for.
    text = document(DECISION_MAX_PROMPT_TOKENS="1000", DECISION_MAX_REQUEST_TOKENS="1500",
                    SM_LLAMA_CPP_CTX_SIZE="2048")["info"]["description"]
    for limit in ("at most 1000 (DECISION_MAX_PROMPT_TOKENS)", "at most 1500 together (DECISION_MAX_REQUEST_TOKENS",
                  "at most 2048 (SM_LLAMA_CPP_CTX_SIZE"):
        assert limit in text


def _branch(schema: dict[str, Any], name: str, json_type: str) -> dict[str, Any]:
    return next(b for b in schema["properties"][name]["anyOf"] if b.get("type") == json_type)


# --- statuses and response bodies ---------------------------------------------------------------

DOCUMENTED = {
    ("get", "/ping"): ({"200", "500", "503"}, "PingResponse"),
    ("get", "/v1/models"): ({"200", "500", "503"}, "ModelList"),
    ("post", "/invocations"): ({"200", "400", "403", "413", "415", "422", "500", "503"}, None),
    ("post", "/endpoints/{endpoint_name}/invocations"): ({"200", "400", "403", "413", "415", "422", "500", "503"}, None),
    ("post", "/v1/chat/completions"): ({"200", "400", "403", "413", "415", "500", "503"}, "ChatCompletion"),
    ("post", "/v1/systemone"): ({"200", "413", "415", "422", "500", "503"}, "SystemOneResponse"),
}


def test_every_operation_documents_every_status_it_answers(doc):
    operations = {(method, path) for path, item in doc["paths"].items() for method in item}
    assert operations == set(DOCUMENTED)
    for (method, path), (statuses, ok) in DOCUMENTED.items():
        responses = doc["paths"][path][method]["responses"]
        assert set(responses) == statuses, path
        if ok is not None:
            assert responses["200"]["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{ok}"}
        for status in statuses - {"200"}:
            error = "SystemOneErrorResponse" if status == "422" else "ErrorResponse"
            assert responses[status]["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{error}"}
        if "503" in statuses:
            assert "Retry-After" in responses["503"]["headers"]


def test_invocations_answer_any_of_the_four_shapes_or_a_chat_stream(doc):
    ok = doc["paths"]["/invocations"]["post"]["responses"]["200"]["content"]
    assert [s["$ref"].rsplit("/", 1)[1] for s in ok["application/json"]["schema"]["oneOf"]] == [
        "SingleDecisionResponse", "BatchDecisionResponse", "ChatCompletion", "SystemOneResponse"]
    assert ok["text/event-stream"]["schema"] == {"$ref": "#/components/schemas/ChatCompletionEvent"}


def test_chat_disabled_is_a_documented_error_code(doc):
    codes = doc["components"]["schemas"]["ErrorDetail"]["properties"]["code"]["anyOf"][0]["enum"]
    assert "chat_disabled" in codes
    assert "DECISION_CHAT" in doc["paths"]["/v1/chat/completions"]["post"]["responses"]["403"]["description"]


def test_every_reference_resolves_and_nothing_is_left_over(doc):
    text = json.dumps(doc)
    assert "#/$defs/" not in text
    referenced = {ref.rsplit("/", 1)[1] for ref in _refs(doc)}
    assert referenced == set(doc["components"]["schemas"])  # e.g. no refused BoxQuestion


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return ([node["$ref"]] if "$ref" in node else []) + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []
