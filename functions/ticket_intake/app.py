"""Ticket intake (SQS, ReportBatchItemFailures): each ticket is validated, routed once, and
handed to the routing workflow. A bad ticket or a failed workflow start fails that record
alone: SQS redelivers it and moves it to the DLQ after maxReceiveCount. An unreachable
endpoint does not fail the record: the ticket goes to review (see decision_router.service)."""

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.intake import Intake

logger = Logger()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.SQS, model=SqsRecordModel, raise_on_entire_batch_failure=False)
intake = Intake("ticket", logger=logger, metrics=metrics)


def record_handler(record: SqsRecordModel, lambda_context: LambdaContext) -> dict:
    return intake.handle(record.body, lambda_context)


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    intake.register(context)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
