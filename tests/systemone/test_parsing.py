"""Reading System One request bodies: every problem named with its field path."""

from __future__ import annotations

import json

import pytest

from decision_server.errors import PayloadTooLarge, UnsupportedMediaType
from decision_server.systemone import SystemOneRequestError, decode_body, load_json, parse_request
from decision_server.systemone.parsing import zstd


def problems(body: object, *, max_options: int = 16) -> dict[str, str]:
    """{dotted field path: message} of the request's problems (fails if there are none)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(SystemOneRequestError) as caught:
        parse_request(load_json(raw), max_options=max_options)
    error = caught.value
    assert error.status == 422
    return {".".join(str(p) for p in problem["loc"][1:]): problem["msg"] for problem in error.problems}


def valid(**overrides) -> dict:
    body = {"model": "jev-latest", "state": "text", "questions": {"q": {"type": "noul", "instructions": "Yes?"}}}
    body.update(overrides)
    return body


def test_a_valid_request_parses():
    request = parse_request(load_json(json.dumps(valid()).encode()), max_options=16)
    assert list(request.questions) == ["q"]


def test_every_problem_is_listed_with_its_path():
    found = problems({
        "state": "",
        "questions": {
            "one": {"type": "choice", "criteria": {"only": None}},
            "blank": {"type": "score", "criteria": ["low", " "]},
            "box": {"type": "box", "instructions": "the dog"},
            "empty": {"type": "noul"},
            "odd": {"type": "rank"},
            "typo": {"type": "noul", "instruction": "Yes?"},
        },
        "temperature": 2,
    })
    assert found == {
        "model": "Field required",
        "state": "must not be empty or blank text",
        "questions.one.choice.criteria": "a choice question needs 2 to 16 criteria (one option each); got 1",
        "questions.blank.score.criteria.1": "must not be empty or blank text",
        "questions.box.box": pytest.approx(found["questions.box.box"]),
        "questions.empty.noul": "a noul question needs instructions or at least one of criteria.true / criteria.false",
        "questions.odd": "Input tag 'rank' found using 'type' does not match any of the expected tags: "
                         "'noul', 'choice', 'score', 'box'",
        "questions.typo.noul.instruction": "Extra inputs are not permitted",
        "temperature": "Extra inputs are not permitted",
    }
    assert "vision-language model" in found["questions.box.box"]


def test_wrong_types_get_one_clear_message_each():
    found = problems(valid(state=5, questions={
        "a": {"type": "choice", "instructions": 7, "criteria": {"x": None, "y": False}},
        "b": {"type": "score", "criteria": {"0": "low"}},
    }))
    assert found == {
        "state": "must be text or a JSON object/array, not a number",
        "questions.a.choice.instructions": "must be text or a JSON object/array, not a number",
        "questions.a.choice.criteria.y": "must be text or a JSON object/array, not a boolean",
        "questions.b.score.criteria": "Input should be a valid list",
    }


def test_limits_follow_the_server_settings():
    many = {f"c{i}": None for i in range(5)}
    assert problems(valid(questions={"q": {"type": "choice", "criteria": many}}), max_options=4) == {
        "questions.q.choice.criteria": "a choice question needs 2 to 4 criteria (one option each); got 5"
    }
    seventeen = [f"level {i}" for i in range(17)]
    assert "got 17" in problems(valid(questions={"q": {"type": "score", "criteria": seventeen}}))["questions.q.score.criteria"]
    # no question count: a request is bounded by its body size and tokens
    many_questions = {f"q{i}": {"type": "noul", "instructions": "?"} for i in range(40)}
    request = parse_request(load_json(json.dumps(valid(questions=many_questions)).encode()), max_options=16)
    assert len(request.questions) == 40
    assert problems(valid(questions={})) == {"questions": "Dictionary should have at least 1 item after validation, not 0"}


def test_state_rules_match_structured_decisions():
    deep: object = "x"
    for _ in range(40):
        deep = [deep]
    assert problems(valid(state=deep)) == {"state": "is nested 40 levels deep; at most 32 are allowed"}
    assert problems(valid(state={})) == {"state": "must not be an empty JSON object or array"}


def test_assets_are_refused_because_the_model_reads_text_only():
    found = problems(valid(assets={"img-1": {"type": "image", "part": "asset-0"}}))
    assert list(found) == ["assets"] and "text only" in found["assets"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"model": "m", "state": NaN, "questions": {}}', "NaN is not valid JSON"),
        (b'{"model": "m", "state": "s", "questions": {"a": {}, "a": {}}}', "duplicate key 'a' in one object"),
        (b'{"model": ', "is not valid JSON: Expecting value at line 1 column 11"),
        (b"\xff\xfe", "is not UTF-8"),
        (b"  ", "is empty"),
    ],
)
def test_malformed_json_is_a_body_problem(raw, message):
    found = problems(raw)
    assert list(found) == [""] and message in found[""]


def test_error_body_has_the_container_error_and_the_typesafe_detail():
    with pytest.raises(SystemOneRequestError) as caught:
        parse_request(load_json(json.dumps(valid(state="")).encode()), max_options=16)
    body = caught.value.response_body()
    assert body["error"]["code"] == "validation_error"
    assert body["error"]["message"] == "state: must not be empty or blank text"
    assert body["error"]["fields"] == [{"field": "state", "reason": "must not be empty or blank text"}]
    assert body["detail"] == [{"loc": ["body", "state"], "msg": "must not be empty or blank text", "type": "value_error"}]


def test_zstd_bodies_are_decompressed_within_the_size_limit():
    assert zstd is not None, "backports.zstd (container/requirements.txt) must be installed below Python 3.14"
    raw = json.dumps(valid(state="x" * 5000)).encode()
    assert decode_body(zstd.compress(raw), "zstd", max_bytes=10_000) == raw
    with pytest.raises(PayloadTooLarge):
        decode_body(zstd.compress(raw), "zstd", max_bytes=4096)
    with pytest.raises(SystemOneRequestError, match="truncated"):
        decode_body(zstd.compress(raw)[:40], "zstd", max_bytes=10_000)
    with pytest.raises(SystemOneRequestError, match="invalid zstd data"):
        decode_body(b"not zstd at all", "zstd", max_bytes=10_000)
    with pytest.raises(UnsupportedMediaType, match="'br' is not supported"):
        decode_body(raw, "br", max_bytes=10_000)
    assert decode_body(raw, None, max_bytes=10_000) == raw
