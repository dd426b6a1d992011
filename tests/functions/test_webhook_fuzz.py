"""Hostile bodies, VALIDLY signed, through the real webhook handler on template.yaml's names over
in-memory fakes of its ports (tests/fakes/webhook_worlds.py), and once more on its resources in moto
(a smoke test, marked `stack`), and the incident webhooks' forwarded events on through the real
incident-intake handler.

Each leaf and each object of every source's real sample is replaced in turn by a hostile value
(null, wrong JSON types, 100 KB text, huge and odd numbers, control and bidi characters, a lone
surrogate escape, odd times, deep nesting); a few whole-body shapes and header oddities are added.
Every object and array is replaced by a number and by a string; of the other cases a seeded
sample (the same on every run) keeps it quick. No exception may escape
and no request may get a 5xx: every body is queued, forwarded, parked, ignored, acknowledged as a
duplicate, or refused with a 4xx; a parked one is on the DLQ with its reason.
"""

from __future__ import annotations

import json
import os
import random
import time
from datetime import datetime, timezone

import pytest

from tests.fakes.webhook_worlds import webhook_world
from tests.functions.conftest import make_result
from tests.functions.test_intake_handlers import ON_THE_STACK, FakeLambdaContext, make_intake
from tests.functions.test_webhook_attacks import grafana_headers, pagerduty_headers, sample
from tests.functions.test_webhooks import payload, request, sign

HOSTILE = [None, True, 0, -1, 10**39, 1.5e308, -0.0, "", " ", "x" * 100_000, "\u0000\u202e\u2028", "\\ud800",
           "2026-13-45T99:99:99Z", "0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59", [], {}, [[[[{}]]]],
           {"$ref": "#"}, ["a", 1, None], 7, "text"]
WHOLE_BODIES = [b"[]", b"null", b'"text"', b"1e999", b'{"a":1,"a":2}', b"{" * 40 + b"}" * 40, b"\xef\xbb\xbf{}"]
SOURCES = ["zendesk", "jira", "generic", "pagerduty", "grafana"]
#: Other replaced leaves per source (a seeded sample); WEBHOOK_LEAF_FUZZ_CASES=0 runs every one.
CASES_PER_SOURCE = int(os.environ.get("WEBHOOK_LEAF_FUZZ_CASES", "30"))
SEED = 20261202
#: What a request may end as (2xx statuses of the answer, or a 4xx refusal).
OUTCOMES = {"queued", "forwarded", "parked", "ignored", "duplicate"}


def paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:2]):
            yield from paths(v, prefix + (i,))


def replaced(value, path, new):
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    target = copy
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = new
    return copy


def encode(value) -> bytes:
    text = json.dumps(value, ensure_ascii=False)
    return text.replace('"\\\\ud800"', '"\\ud800"').encode("utf-8")  # a real lone-surrogate escape


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def base(source: str) -> dict:
    """The source's real sample, its checked time set to now."""
    if source == "jira":
        data = payload("jira_issue_created")
        data["timestamp"] = int(time.time() * 1000)
        return data
    if source == "pagerduty":
        data = sample("pagerduty_webhook_incident_triggered")["body"]
        data["event"]["occurred_at"] = now_iso()
        return data
    if source == "grafana":
        return sample("grafana_alerting_webhook_firing")["body"]
    return payload({"zendesk": "zendesk_ticket_created", "generic": "webhook_generic_ticket"}[source])


def headers_for(source: str, raw: bytes, n: int) -> dict:
    if source == "pagerduty":
        return pagerduty_headers(raw, delivery=f"fuzz-{n}-{time.time_ns()}")
    if source == "grafana":
        return grafana_headers(raw)
    return sign(source, raw)


def at(value, path):
    for part in path:
        value = value[part]
    return value


def bodies(source: str, rng: random.Random) -> list[bytes]:
    """Every object and array of the sample replaced by a scalar (the wrong JSON type where a
    mapping reads one), a seeded sample of the other cases, and the whole-body oddities."""
    sample_body = base(source)
    every = [(p, v) for p in paths(sample_body) for v in HOSTILE]
    wrong_type = [(p, v) for p in paths(sample_body) if isinstance(at(sample_body, p), (dict, list)) for v in (7, "text")]
    others = [case for case in every if case not in wrong_type]
    if CASES_PER_SOURCE:
        others = rng.sample(others, min(CASES_PER_SOURCE, len(others)))
    return [encode(replaced(base(source), p, v)) for p, v in wrong_type + others] + WHOLE_BODIES


@pytest.fixture
def world(request, monkeypatch):
    """The fakes, or, for a test marked `ON_THE_STACK`, also the template's resources in moto."""
    with webhook_world(getattr(request, "param", "fakes"), monkeypatch) as world:
        yield world


class AnyAnswer:
    """The endpoint: every decision answered (uniform letters)."""

    def decide(self, decisions, *, deadline=None):
        return {d.id: make_result(d.id, [o.id for o in d.options], [0.0] * len(d.options)) for d in decisions}


@ON_THE_STACK
def test_fuzz_every_leaf_of_every_sample_replaced_by_hostile_values_is_handled(world, monkeypatch):
    from incident_intake import app as incident_app

    webhook = world.webhook()
    make_intake(monkeypatch, world, incident_app, "incident", "IncidentIntakeFunction", AnyAnswer())
    rng, problems, outcomes, n = random.Random(SEED), [], set(), 0
    for source in SOURCES:
        for raw in bodies(source, rng):
            n += 1
            headers = headers_for(source, raw, n)
            if n % 7 == 0:  # header oddities: names in upper case, long and empty delivery ids
                headers = {**{k.upper(): v for k, v in headers.items()}, "x-webhook-id": "\u202e" * 300,
                           "X-Zendesk-Webhook-Id": ""}
            event = request(source, b"", headers) | {"body": raw.decode("utf-8", "surrogateescape")}
            try:
                response = webhook.lambda_handler(event, FakeLambdaContext())
            except Exception as error:  # noqa: BLE001 - what Lambda would report (API Gateway: 500)
                problems.append((source, raw[:80], f"{type(error).__name__}: {error}"[:200]))
                continue
            answer = json.loads(response["body"])
            status = response["statusCode"]
            outcome = answer.get("status") if status < 300 else "refused"
            outcomes.add(outcome)
            if status >= 500 or (status < 300 and outcome not in OUTCOMES) or (300 <= status < 400):
                problems.append((source, raw[:80], status, answer))
            if outcome == "parked":
                parked = world.queued("TicketDeadLetterQueue")
                if not (len(parked) == 1 and parked[0]["MessageAttributes"]["failure_reason"]["StringValue"]):
                    problems.append((source, raw[:80], "parked without its reason on the DLQ"))
            if outcome == "queued" and len(world.queued()) != 1:
                problems.append((source, raw[:80], "queued, but not one ticket on the queue"))
            if outcome != "forwarded":
                continue
            for forwarded in world.on_bus():  # on to the incident intake, as IncidentWebhookRule delivers it
                try:
                    incident_app.lambda_handler(forwarded, FakeLambdaContext())
                except Exception as error:  # noqa: BLE001
                    problems.append(("incident intake", raw[:80], f"{type(error).__name__}: {str(error)[:200]}"))
    # Nothing was handed on without its answer saying so.
    assert world.queued() == world.queued("TicketDeadLetterQueue") == world.on_bus() == []
    assert problems == [], f"{len(problems)} of {n} requests: {problems[:10]}"
    assert {"queued", "forwarded", "parked", "refused"} <= outcomes, outcomes
