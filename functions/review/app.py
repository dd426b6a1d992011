"""Review completion: a reviewer's answers for a pending review → validated against the policy
→ SendTaskSuccess with {reviewer, answers, destination, escalate, note}; the workflow routes
the item, stores the labelled example and writes the audit record. Invalid answers raise with
every problem named; nothing is sent then, so the review stays pending."""

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.adapters.review import ReviewQueue, ReviewTasks
from decision_router.config import Settings
from decision_router.review import ReviewCompletion, submit_review

logger = Logger()
tasks = ReviewTasks()


@logger.inject_lambda_context
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    completion = ReviewCompletion.parse(event)
    settings = Settings.from_env().require("destination_queues")
    output = submit_review(completion, destinations=settings.destination_queues, tasks=tasks)
    if completion.receipt_handle and settings.review_queue_url:
        ReviewQueue(settings.review_queue_url).remove(completion.receipt_handle)
    result = {"status": "completed", **output.model_dump(mode="json")}
    logger.info("review completed", extra=result)
    return result
