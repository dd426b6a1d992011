"""Incident intake: our own `Incident Reported` events on the decision bus, the native sources'
events from the default bus (CloudWatch alarms, AWS Health, GuardDuty, Security Hub's ASFF and
OCSF feeds), the PagerDuty partner bus and the webhooks the webhook API forwards (PagerDuty V3,
Grafana), CloudWatch alarms through SNS (a topic subscription) and as a Lambda alarm action,
correlated by incident (decision_router.intake.incidents says what becomes of each). Invoked
asynchronously: a failure to route raises, so Lambda retries and then hands the event to the
function's on-failure destination/DLQ; an event no retry can map is parked there at once with its
reason. An unreachable endpoint sends the incident to review."""

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.intake.incidents import IncidentIntake
from decision_router.intake.pipeline import Intake
from decision_router.intake.wiring import Wiring

logger = Logger()
metrics = Metrics()
tracer = Tracer()
wiring = Wiring()  # this function's settings and adapters, made from its environment on first use
intake = Intake("incident", logger=logger, metrics=metrics, wiring=wiring)
incidents = IncidentIntake(intake, logger=logger, metrics=metrics)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    intake.register(context)
    try:
        return incidents.handle(event, context)
    except Exception as error:
        detail = event.get("detail") if isinstance(event, dict) else None
        logger.exception("incident failed; Lambda retries it, then the incident DLQ gets it with this error", extra={
            "event_id": event.get("id") if isinstance(event, dict) else None,
            "incident_id": detail.get("incident_id") if isinstance(detail, dict) else None,
            "reason": f"{type(error).__name__}: {error}"})
        raise
