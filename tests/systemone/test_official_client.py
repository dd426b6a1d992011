"""The official TypeSafe client (PyPI `typesafe-sdk`), unchanged, against a real local server
on the real embedded model: its base URL pointed at `decision_server_url`, every answer
validated with its own response models."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from typesafe_sdk import (
    AsyncTypeSafeClient,
    Box,
    Choice,
    ChoiceAnswer,
    ListModelsResponse,
    Noul,
    NoulAnswer,
    RetryPolicy,
    Score,
    ScoreAnswer,
    SystemOneResponse,
    TypeSafeClient,
    TypeSafeInternalServerError,
    TypeSafeUnprocessableEntityError,
)
from typesafe_sdk._schemas import models as wire  # the client's models generated from the API's OpenAPI

from tests.conftest import queue_full

pytestmark = pytest.mark.model

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
STATE = "I was charged twice for my subscription this month. Please refund one of the charges."
QUESTIONS = {
    "billing": Noul(instructions="Is this message about billing?", criteria={"true": "It concerns payments or charges"}),
    "tone": Choice(instructions="What is the tone?", criteria={"calm": None, "angry": "An upset or hostile message"}),
    "urgency": Score(instructions="How urgent is this message?", criteria=["Can wait", "This week", "Today"]),
}


def make_client(url: str, **options) -> TypeSafeClient:
    # The client insists on an API key and sends it as a Bearer token; this server ignores it.
    options = {"api_key": "local-test-key", "base_url": url, "timeout": 120.0,
               "retry": RetryPolicy(max_retries=0), **options}
    return TypeSafeClient(**options)


@pytest.fixture
def client(decision_server_url):
    with make_client(decision_server_url) as client:
        yield client


def validated_by_the_clients_models(result: SystemOneResponse) -> dict:
    """The raw body, checked against the client's public answer models and its generated wire schema."""
    raw = result.raw_http_response.json()
    wire.SystemOneResponse.model_validate_json(result.raw_http_response.content, strict=True)
    models = {"noul": NoulAnswer, "choice": ChoiceAnswer, "score": ScoreAnswer}
    for answer in raw["answers"].values():
        models[answer["type"]].model_validate_json(json.dumps(answer))
    return raw


def test_round_trip_with_question_objects(client):
    result = client.system_one(state=STATE, questions=QUESTIONS)
    raw = validated_by_the_clients_models(result)

    assert isinstance(result, SystemOneResponse)
    assert result.model == MODEL_FILE
    assert result.usage.output_tokens == 0 and result.usage.input_tokens > 0
    assert result.request_id == result.raw_http_response.headers["x-request-id"]

    billing = result.nouls["billing"]
    assert isinstance(billing, NoulAnswer) and 0.0 <= billing.noul <= 1.0
    tone = result.choices["tone"]
    assert isinstance(tone, ChoiceAnswer) and tone.choice in {"calm", "angry"}
    assert sum(tone.probabilities.values()) == pytest.approx(1.0)
    urgency = result.scores["urgency"]
    assert isinstance(urgency, ScoreAnswer)
    assert urgency.legend == {0: "Can wait", 1: "This week", 2: "Today"}  # the client's integer keys
    assert urgency.score == pytest.approx(sum(level * p for level, p in urgency.probabilities.items()))
    assert raw["metadata"]["confidence_formula"] == "normalized_peak"

    # What the client put on the wire: its default model alias, a Bearer token, JSON.
    sent = result.raw_http_response.request
    assert json.loads(sent.content)["model"] == "jev-latest"
    assert sent.headers["authorization"] == "Bearer local-test-key"
    assert sent.url.path == "/v1/systemone"


def test_round_trip_with_dict_questions_and_json_state(client):
    result = client.system_one(
        state={"subject": "Refund", "messages": ["Charged twice", "Still waiting"]},
        questions={
            "spam": {"type": "noul", "criteria": {"true": "Unsolicited advertising", "false": "A real request"}},
            "team": {"type": "choice", "instructions": {"task": "route", "to": "team"},
                     "criteria": {"billing": None, "technical": ["bugs", "outages"], "sales": None}},
        },
        model="any-alias",
    )
    validated_by_the_clients_models(result)
    assert result.model == MODEL_FILE
    assert set(result.choices["team"].probabilities) == {"billing", "technical", "sales"}


def test_compressed_bodies_from_the_client(decision_server_url):
    # With zstd available (Python 3.14+, or backports.zstd) the client compresses bodies of
    # 1 KiB or more unless told not to; the server must read them.
    # A long model alias (never shown to the model) takes the body past the client's 1 KiB
    # threshold without lengthening the prompt.
    with make_client(decision_server_url, compression="zstd", model="alias-" + "x" * 1100) as client:
        result = client.system_one(state=STATE, questions={"billing": QUESTIONS["billing"]})
    assert result.raw_http_response.request.headers["content-encoding"] == "zstd"
    validated_by_the_clients_models(result)


def test_the_model_list(client):
    listed = client.models.list()
    assert isinstance(listed, ListModelsResponse)
    (model,) = listed.models
    assert model.name == MODEL_FILE and len(model.release_date) == 10


def test_invalid_questions_raise_the_clients_422_error_with_the_path(client):
    # The client itself accepts one criterion and box questions; the server says why not.
    with pytest.raises(TypeSafeUnprocessableEntityError) as caught:
        client.system_one(state=STATE, questions={
            "one": Choice(criteria={"only": None}),
            "where": Box(instructions="the invoice"),
        })
    error = caught.value
    assert error.status == 422
    assert "questions.one.choice.criteria: a choice question needs 2 to 16 criteria" in str(error)
    assert [entry["loc"] for entry in error.body["detail"]] == [
        ["body", "questions", "one", "choice", "criteria"], ["body", "questions", "where", "box"],
    ]
    assert error.request_id  # errors carry the request id too


def test_busy_is_a_retryable_503_the_client_retries(decision_server_url, embedded_engine):
    question = {"billing": QUESTIONS["billing"]}
    with make_client(decision_server_url) as client, queue_full(embedded_engine):
        with pytest.raises(TypeSafeInternalServerError) as caught:
            client.system_one(state=STATE, questions=question)
    assert caught.value.status == 503 and caught.value.headers["retry-after"] == "1"

    # With its default retry policy the client waits Retry-After and tries again.
    full = queue_full(embedded_engine)
    full.__enter__()
    threading.Timer(1.5, full.__exit__, args=(None, None, None)).start()
    with make_client(decision_server_url, retry=RetryPolicy(max_retries=3)) as client:
        result = client.system_one(state=STATE, questions=question)
    assert int(result.raw_http_response.request.headers["x-typesafe-retry-count"]) >= 1
    validated_by_the_clients_models(result)


def test_the_async_client(decision_server_url):
    async def ask() -> SystemOneResponse:
        async with AsyncTypeSafeClient(api_key="local-test-key", base_url=decision_server_url, timeout=120.0,
                                       retry=RetryPolicy(max_retries=0)) as client:
            return await client.system_one(state=STATE, questions={"urgency": QUESTIONS["urgency"]})

    result = asyncio.run(ask())
    validated_by_the_clients_models(result)
    assert set(result.scores["urgency"].probabilities) == {0, 1, 2}
