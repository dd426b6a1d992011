"""Ticket webhooks (API Gateway HTTP API, POST /webhooks/{source}): Zendesk, Jira and a generic
JSON webhook. decision_router.intake.webhooks verifies the HMAC signature and its time, maps the payload
to a ticket and queues it for the ticket intake; 401 (nothing queued) when the signature is bad,
missing or stale; 202 with `parked` and the reason when the payload lacks what the policy needs."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities import parameters
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.adapters.queues import Queue
from decision_router.config import Settings
from decision_router.intake.webhooks import WebhookIntake
from decision_router.sources.webhook import Unauthorized

#: Seconds a fetched secret is reused before Secrets Manager is asked again (a rotated secret is picked up).
SECRET_MAX_AGE = 300

logger = Logger()
metrics = Metrics()
tracer = Tracer()
app = APIGatewayHttpResolver()
_intake: WebhookIntake | None = None


def intake() -> WebhookIntake:
    """Built on the first request (no AWS client at import)."""
    global _intake
    if _intake is None:
        s = Settings.from_env().require("ticket_queue_url", "dead_letter_queue_url", "webhook_secret_arn")
        # Its own provider (not Powertools' process-wide default): its client is made here, on first use.
        provider = parameters.SecretsProvider()

        def secrets() -> dict[str, Any]:
            value = provider.get(s.webhook_secret_arn, transform="json", max_age=SECRET_MAX_AGE)
            if not isinstance(value, dict):  # a secret that is not a JSON object of source -> key
                raise RuntimeError(f"WEBHOOK_SECRET_ARN: the secret is not a JSON object of source keys: {type(value).__name__}")
            return value

        _intake = WebhookIntake(secrets=secrets, tickets=Queue(s.ticket_queue_url), dead_letters=Queue(s.dead_letter_queue_url),
                                max_skew_seconds=s.webhook_max_skew_seconds, default_tier=s.webhook_default_tier)
    return _intake


def _json(status: HTTPStatus, body: dict) -> Response:
    return Response(status_code=status.value, content_type=content_types.APPLICATION_JSON, body=body)


@app.post("/webhooks/<source>")
def receive(source: str) -> Response:
    event = app.current_event
    raw = event.decoded_body or ""
    body = raw.encode("utf-8") if isinstance(raw, str) else raw
    try:
        received = intake().receive(source, dict(event.headers or {}), body)
    except Unauthorized as error:
        metrics.add_metric(name="WebhooksRefused", unit=MetricUnit.Count, value=1)
        logger.warning("webhook refused", extra={"source": source, "reason": str(error)})
        return _json(HTTPStatus.UNAUTHORIZED, {"message": "unauthorized", "reason": str(error)})
    metrics.add_metric(name=f"Webhooks{received.status.capitalize()}", unit=MetricUnit.Count, value=1)
    result = {"status": received.status, "reason": received.reason or None,
              "ticket_id": received.ticket.ticket_id if received.ticket else None}
    logger.info(f"webhook {received.status}", extra={"source": source, **result})
    return _json(HTTPStatus.ACCEPTED, result)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
