"""What `POST /invocations` refuses before any model is asked: a body that is not a JSON object,
an object of none of the four shapes, a body over the limit sent in chunks (no Content-Length to
check first). The app's lifespan, which loads the model, is never entered, so no model is loaded:
the refusals are the route's and the body reader's own."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from decision_server.app import create_app
from decision_server.settings import Settings

SETTINGS = Settings.from_env({"DECISION_MAX_BODY_BYTES": "4096"})


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(settings=SETTINGS))  # not entered: no lifespan, no model


def error_of(response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, response.text
    return error["message"]


@pytest.mark.parametrize("body", ["[1, 2]", '"a decision"', "3", "null"])
def test_a_body_that_is_not_an_object_is_refused_naming_the_shapes(client, body):
    message = error_of(client.post("/invocations", content=body, headers={"Content-Type": "application/json"}),
                       400, "validation_error")
    assert message.startswith("body: must be a JSON object; accepted bodies: {\"decision\"")


def test_an_object_of_none_of_the_four_shapes_is_refused_naming_its_keys(client):
    message = error_of(client.post("/invocations", json={"prompt": "route this", "options": []}), 400, "validation_error")
    assert "has none of 'decision', 'decisions', 'messages' or 'questions' (keys: options, prompt)" in message


def test_a_chunked_body_over_the_limit_is_refused_as_it_arrives(client):
    def chunks():  # no Content-Length: the reader counts what arrives
        yield b'{"decision": {"state": "'
        for _ in range(SETTINGS.max_body_bytes // 512 + 1):
            yield b"y" * 512
        yield b'"}}'

    error_of(client.post("/invocations", content=chunks(), headers={"Content-Type": "application/json"}),
             413, "payload_too_large")
