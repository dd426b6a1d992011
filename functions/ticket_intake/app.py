"""Ticket intake (SQS, ReportBatchItemFailures): each ticket is validated, decided once, and
handed to the routing workflow.

- A body that is an SNS notification (SNS → SQS without raw delivery) is unwrapped first.
- A ticket that fails validation can never succeed: it is parked in the ticket DLQ at once, the
  reason in its message attributes (failure_kind, failure_reason, item_id, source_message_id).
- A failed workflow start fails that record alone: SQS redelivers it and moves it to the DLQ
  after maxReceiveCount; each failure is logged with the message id and the reason.
- An unreachable endpoint does not fail the record: the ticket goes to review (decision_router.router).
"""

from typing import cast

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.adapters.queues import Queue
from decision_router.config import Settings
from decision_router.envelopes import unwrap_sns
from decision_router.intake import Intake
from decision_router.items import InvalidItem

logger = Logger()
metrics = Metrics()
tracer = Tracer()
processor = BatchProcessor(event_type=EventType.SQS, model=SqsRecordModel, raise_on_entire_batch_failure=False)
intake = Intake("ticket", logger=logger, metrics=metrics)
dead_letters: dict[str, Queue] = {}


def record_handler(record: SqsRecordModel, lambda_context: LambdaContext) -> dict:
    try:
        return intake.handle(unwrap_sns(cast(str, record.body)), lambda_context)
    except InvalidItem as error:
        park(record, error)
        return {"item_id": error.item_id, "dead_lettered": True, "reason": str(error)}
    except Exception as error:
        logger.exception("ticket failed; SQS redelivers it, then moves it to the ticket DLQ", extra={
            "message_id": record.messageId, "receive_count": record.attributes.ApproximateReceiveCount,
            "reason": f"{type(error).__name__}: {error}"})
        raise


def park(record: SqsRecordModel, error: InvalidItem) -> None:
    """Put an invalid ticket on the ticket DLQ with the reason (a failure here fails the record,
    so SQS redelivers it: nothing is lost)."""
    url = Settings.from_env().require("dead_letter_queue_url").dead_letter_queue_url
    queue = dead_letters.setdefault(url, Queue(url))
    body = cast(str, record.body)  # SqsRecordModel's body is the message text
    queue.send(body, {"failure_kind": "invalid_item", "failure_reason": str(error),
                             "item_id": error.item_id or "", "source_message_id": record.messageId})
    logger.warning("invalid ticket parked in the ticket DLQ", extra={"message_id": record.messageId,
                                                                     "item_id": error.item_id, "reason": str(error)})


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> PartialItemFailureResponse:
    intake.register(context)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
