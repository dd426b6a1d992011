"""Incident intake (EventBridge `Incident Reported` on the custom bus). Invoked asynchronously:
a bad incident or a failed workflow start raises, so Lambda retries and then hands the event
to the function's on-failure destination/DLQ. An unreachable endpoint sends it to review."""

from typing import Any, cast

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.intake import Intake

DETAIL_TYPE = "Incident Reported"

logger = Logger()
metrics = Metrics()
tracer = Tracer()
intake = Intake("incident", logger=logger, metrics=metrics)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    intake.register(context)
    envelope = parse(event=event, model=EventBridgeModel)
    if envelope.detail_type != DETAIL_TYPE:
        raise ValueError(f"detail-type {envelope.detail_type!r}: this function takes {DETAIL_TYPE!r} events only")
    detail = cast(dict[str, Any], envelope.detail)  # EventBridgeModel's detail is the event's JSON object
    try:
        return intake.handle(detail, context)
    except Exception as error:
        logger.exception("incident failed; Lambda retries it, then the incident DLQ gets it with this error", extra={
            "event_id": envelope.id, "incident_id": detail.get("incident_id"),
            "reason": f"{type(error).__name__}: {error}"})
        raise
