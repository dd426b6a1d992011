"""Ticket intake (SQS, ReportBatchItemFailures): each ticket is validated, decided once, and
handed to the routing workflow (decision_router.intake.tickets says what becomes of each record:
routed, parked in the ticket DLQ when invalid, hidden while the endpoint wakes from zero
instances, or failed so SQS receives it again). An unreachable endpoint does not fail the
record: the ticket goes to review (decision_router.domain.routing)."""

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.intake.pipeline import Intake
from decision_router.intake.tickets import TicketIntake
from decision_router.intake.wiring import Wiring

logger = Logger()
metrics = Metrics()
tracer = Tracer()
processor = BatchProcessor(event_type=EventType.SQS, model=SqsRecordModel, raise_on_entire_batch_failure=False)
wiring = Wiring()  # this function's settings and adapters, made from its environment on first use
intake = Intake("ticket", logger=logger, metrics=metrics, wiring=wiring)
tickets = TicketIntake(intake, logger=logger, metrics=metrics)


def record_handler(record: SqsRecordModel, lambda_context: LambdaContext) -> dict:
    return tickets.handle(record, lambda_context)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> PartialItemFailureResponse:
    intake.register(context)
    tickets.begin()  # the open incidents (for linking) are read once per batch
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
