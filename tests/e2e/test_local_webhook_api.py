"""The webhook API as `make review` serves it: the local gateway in front of the real webhook
function (its routes read from template.yaml), a moto server, the demo's signing secrets. A
request signed as the sender signs it is queued (a ticket) or forwarded to the incident intake by
the template's rule (PagerDuty, Grafana); what is not signed is refused, and no request gets a 5xx.
No item here reaches the decision endpoint."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from typing import Iterator

import httpx
import pytest

from decision_router.intake.webhooks import sign
from local.console import LocalHttpApi
from local.deployment import DEMO_WEBHOOK_SECRETS, WEBHOOK_FUNCTION
from local.items import classify
from local.pipeline import LocalPipeline
from local.sending import deliver_to_incident_intake, signed_now
from local.services import MotoServer, local_aws_environ, patched_environ
from tests.functions.conftest import EVENTS

from .conftest import UNUSED_ENDPOINT

pytestmark = [pytest.mark.server, pytest.mark.stack]


@pytest.fixture
def served(lambda_log) -> Iterator[tuple[LocalPipeline, LocalHttpApi]]:
    with ExitStack() as stack:
        moto = stack.enter_context(MotoServer())
        stack.enter_context(patched_environ(local_aws_environ(moto, UNUSED_ENDPOINT)))
        pipeline = stack.enter_context(LocalPipeline(log=lambda_log))
        api = stack.enter_context(LocalHttpApi(pipeline.stack, WEBHOOK_FUNCTION, log=lambda_log))
        yield pipeline, api


def post(api: LocalHttpApi, source: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{api.url}/webhooks/{source}", content=body, headers={"Content-Type": "application/json", **headers})


def test_a_signed_zendesk_request_is_queued_and_an_unsigned_one_refused(served):
    pipeline, api = served
    assert DEMO_WEBHOOK_SECRETS["zendesk"] == pipeline.webhook_secrets["zendesk"]
    body = (EVENTS / "zendesk_ticket_created.json").read_bytes()
    signed = sign("zendesk", body, pipeline.webhook_secrets["zendesk"], at=time.time())

    response = post(api, "zendesk", body, signed)

    assert response.status_code == 202 and response.json()["status"] == "queued"
    (message,) = pipeline.drain_messages(pipeline.stack.ref("TicketQueue"))
    assert json.loads(message["Body"])["ticket_id"] == "zendesk-48213"
    assert post(api, "zendesk", body, signed).json()["status"] == "duplicate"
    assert post(api, "zendesk", body, {}).status_code == 401
    assert post(api, "zendesk", b"\xff\xfe not utf-8", {}).json() == {
        "status": "refused", "message": "bad request", "reason": "body is not UTF-8"}
    assert httpx.get(f"{api.url}/webhooks/zendesk").status_code == 404  # POST is the only route
    assert pipeline.drain_messages(pipeline.stack.ref("TicketQueue")) == []


@pytest.mark.parametrize("sample", ["pagerduty_webhook_incident_triggered", "grafana_alerting_webhook_firing"])
def test_an_incident_webhook_is_forwarded_and_reaches_the_incident_intake(served, sample):
    pipeline, api = served
    item = classify(sample, (EVENTS / f"{sample}.json").read_text())
    system = item.via.removeprefix("webhook:")
    body = json.dumps(signed_now(system, item.data or {})).encode()
    headers = {**(item.headers or {}), **sign(system, body, pipeline.webhook_secrets[system], at=time.time())}

    response = post(api, system, body, headers)

    assert response.status_code == 202 and response.json()["status"] == "forwarded"
    (event,) = pipeline.stack.rule_events(*pipeline.incident_webhook_rule)
    assert event["source"] == "decision-router.webhooks" and event["detail"] == json.loads(body)
    assert pipeline.drain_messages(pipeline.stack.ref("TicketQueue")) == []
    # The incident intake maps it with the source's module and opens an incident: its routing
    # workflow starts (to review here, since no endpoint answers), nothing is parked.
    from local.outcomes import Outcome

    outcome = Outcome(item)
    deliver_to_incident_intake(pipeline, outcome, event, lambda _: None)
    assert outcome.problem is None and outcome.execution_arn, (outcome.problem, outcome.source_outcome, outcome.note)
