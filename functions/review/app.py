"""Review completion: a reviewer's answers for a pending review → validated against the record
the review's execution was started with (read from Step Functions, never taken from the caller)
→ SendTaskSuccess with {execution_name, reviewer, choice, note}; the workflow checks the answer,
routes the item, stores the labelled example and writes the audit record. Invalid answers raise
with every problem named; nothing is sent then, so the review stays pending."""

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.adapters.review import ReviewQueue, ReviewTasks
from decision_router.adapters.similar_items import ResolvedItems
from decision_router.adapters.workflow import WorkflowStarter
from decision_router.config import Settings
from decision_router.intake.resolved_items import remember_resolved, resolved_items
from decision_router.intake.shadow_reviews import count_review
from decision_router.review.completion import ReviewCompletion, submit_review

logger = Logger()
tracer = Tracer()
tasks = ReviewTasks()
workflows: dict[str, WorkflowStarter] = {}
resolved_stores: dict[str, ResolvedItems | None] = {}


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)  # the reviewer's note: not for traces
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    completion = ReviewCompletion.parse(event)
    settings = Settings.from_env().require("state_machine_arn")
    workflow = workflows.setdefault(settings.state_machine_arn, WorkflowStarter(settings.state_machine_arn))
    record = workflow.running_record(completion.execution_name)
    output = submit_review(completion, record, tasks=tasks)
    if completion.receipt_handle and settings.review_queue_url:
        ReviewQueue(settings.review_queue_url).remove(completion.receipt_handle)
    chosen = output.chosen
    count_review(record, chosen.answers, settings.head_history_table, logger)
    table = settings.resolved_items_table
    remember_resolved(record, chosen.answers, output.reviewer, resolved_stores.setdefault(table, resolved_items(table)),
                      logger)
    result = {"status": "completed", "execution_name": output.execution_name, "reviewer": output.reviewer,
              "note": output.note, **chosen.model_dump(mode="json")}
    logger.info("review completed", extra=result)
    return result
