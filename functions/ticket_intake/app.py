"""Ticket intake (SQS, ReportBatchItemFailures): each ticket is validated, decided once, and
handed to the routing workflow.

- A body that is an SNS notification (SNS → SQS without raw delivery) is unwrapped first.
- A ticket that fails validation can never succeed: it is parked in the ticket DLQ at once, the
  reason in its message attributes (failure_kind, failure_reason, item_id, source_message_id).
- A failed workflow start fails that record alone: SQS redelivers it and moves it to the DLQ
  after maxReceiveCount; each failure is logged with the message id and the reason.
- An unreachable endpoint does not fail the record: the ticket goes to review (decision_router.router).
- An endpoint waking from zero instances does: the ticket is hidden for `wake_up_wait` seconds
  (ChangeMessageVisibility), then received and decided again, so it waits minutes for the model
  instead of flooding review after every idle period.
"""

from typing import cast

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.adapters.queues import Queue
from decision_router.config import Settings
from decision_router.envelopes import unwrap_sns
from decision_router.errors import WaitingForCapacity, wake_up_wait
from decision_router.intake import Intake
from decision_router.items import InvalidItem

logger = Logger()
metrics = Metrics()
tracer = Tracer()
processor = BatchProcessor(event_type=EventType.SQS, model=SqsRecordModel, raise_on_entire_batch_failure=False)
intake = Intake("ticket", logger=logger, metrics=metrics)
dead_letters: dict[str, Queue] = {}
ticket_queues: dict[str, Queue] = {}


def record_handler(record: SqsRecordModel, lambda_context: LambdaContext) -> dict:
    try:
        return intake.handle(unwrap_sns(cast(str, record.body)), lambda_context)
    except InvalidItem as error:
        park(record, error)
        return {"item_id": error.item_id, "dead_lettered": True, "reason": str(error)}
    except WaitingForCapacity as waiting:
        wait_for_capacity(record, waiting)
        raise
    except Exception as error:
        logger.exception("ticket failed; SQS redelivers it, then moves it to the ticket DLQ", extra={
            "message_id": record.messageId, "receive_count": record.attributes.ApproximateReceiveCount,
            "reason": f"{type(error).__name__}: {error}"})
        raise


def wait_for_capacity(record: SqsRecordModel, waiting: WaitingForCapacity) -> None:
    """Hide the ticket until the endpoint should be awake; the record then fails, so SQS receives
    it again (if hiding fails, it comes back after the queue's own visibility timeout)."""
    receives = int(record.attributes.ApproximateReceiveCount)
    seconds = wake_up_wait(receives)
    metrics.add_metric(name="WaitingForCapacity", unit=MetricUnit.Count, value=1)
    try:
        ticket_queue().hide(record.receiptHandle, seconds)
    except Exception:
        logger.exception("could not hide the waiting ticket; it comes back after the queue's visibility timeout",
                         extra={"message_id": record.messageId})
    logger.warning("endpoint waking from zero instances; the ticket is received again later", extra={
        "message_id": record.messageId, "receive_count": receives, "retry_in_seconds": seconds,
        "reason": str(waiting)})


def ticket_queue() -> Queue:
    url = Settings.from_env().require("ticket_queue_url").ticket_queue_url
    return ticket_queues.setdefault(url, Queue(url))


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
