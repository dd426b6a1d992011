"""Webhooks (API Gateway HTTP API, POST /webhooks/{source}): Zendesk, Jira and a generic JSON
webhook (tickets), PagerDuty V3 and Grafana alerting (incidents). decision_router.intake.webhooks
verifies the signature and its time, records the delivery, and queues the ticket or forwards the
incident to the event bus.

Answers, each naming its `status`: 202 with the status (queued, forwarded, parked with the
reason, ignored with the reason); 200 `duplicate` for a delivery already accepted (nothing handed
on again, counted); 409 `in_progress` with Retry-After for a delivery another invocation is
handing on right now (see IN_PROGRESS); a 4xx `refused` with a short fixed reason for what is
refused (401 for any failed verification, 413 too large, 400 not UTF-8 or not base64), nothing
queued. No input makes it answer 5xx; only an AWS failure does (and the sender retries)."""

from __future__ import annotations

import base64
import binascii
from http import HTTPStatus

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.intake.webhooks import Refused, WebhookIntake
from ticket_webhook.wiring import Wiring

#: The answer to a delivery whose twin is being handed on (its claim's lease still runs): 409
#: Conflict, which every sender retries (Zendesk retries a 409 up to three times, and a 429 or 503
#: only with a Retry-After under a minute; Jira retries 408, 409, 425, 429 and 5xx; PagerDuty any
#: non-2xx), and a 4xx, so no input makes this function answer 5xx. Retry-After says when the
#: lease runs out: by then the twin is done (the retry is a duplicate) or dead (the retry takes over).
IN_PROGRESS = HTTPStatus.CONFLICT

logger = Logger()
metrics = Metrics()
tracer = Tracer()
app = APIGatewayHttpResolver()
#: This execution environment's settings and parts (made on first use, kept between invocations).
WIRING = Wiring()


def intake() -> WebhookIntake:
    """Built on the first request (no AWS client at import)."""
    return WIRING.intake


def _json(status: int, body: dict) -> Response:
    return Response(status_code=int(status), content_type=content_types.APPLICATION_JSON, body=body)


def raw_body(event: dict) -> bytes:
    """The request's bytes as the sender sent them: API Gateway base64-encodes a body it does not
    take for text. Nothing decodes them to text here (the intake does, and refuses what is not UTF-8)."""
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise Refused(400, "body is not valid base64", "isBase64Encoded with a body that is not base64") from None
    # A JSON event's text may hold lone surrogates: kept as the (invalid) bytes they stand for.
    return body.encode("utf-8", "surrogatepass")


@app.post("/webhooks/<source>")
def receive(source: str) -> Response:
    event = app.current_event
    try:
        received = intake().receive(source, dict(event.headers or {}), raw_body(event.raw_event))
    except Refused as refused:
        metrics.add_metric(name="WebhooksRefused", unit=MetricUnit.Count, value=1)
        logger.warning("webhook refused", extra={"source": source[:64], "status": refused.status,
                                                 "reason": refused.reason, "detail": str(refused)})
        return _json(refused.status, {"status": "refused", "message": HTTPStatus(refused.status).phrase.lower(),
                                      "reason": refused.reason})
    metrics.add_metric(name="Webhooks" + received.status.title().replace("_", ""), unit=MetricUnit.Count, value=1)
    result = {"status": received.status, "reason": received.reason or None,
              "ticket_id": received.ticket.ticket_id if received.ticket else None}
    logger.info(f"webhook {received.status}", extra={"source": source, **result})
    if received.status == "in_progress":
        return Response(status_code=int(IN_PROGRESS), content_type=content_types.APPLICATION_JSON, body=result,
                        headers={"Retry-After": str(received.retry_after)})
    return _json(HTTPStatus.OK if received.status == "duplicate" else HTTPStatus.ACCEPTED, result)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
