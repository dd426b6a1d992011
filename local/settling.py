"""How the local pipeline settles: it waits until every started execution finished or asked for
review, reads back where each item ended up (team queues, on-call pages, the review queue, the
workflow DLQ, the audit table), and answers pending reviews through the real review function.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

from local.items import InputItem
from local.outcomes import Outcome

if TYPE_CHECKING:
    from local.deployment import LocalDeployment


def execution_arn(pipeline: LocalDeployment, item: InputItem) -> str | None:
    """The ARN of the item's (first) execution; None when the item does not validate."""
    from decision_router.domain.records import execution_name
    from decision_router.items import InvalidItem, parse_item

    try:
        parsed = parse_item(item.kind, item.data)
    except InvalidItem:
        return None
    name = execution_name(parsed.kind, parsed.item_id, parsed.key)
    return f"{pipeline.state_machine_arn.replace(':stateMachine:', ':execution:')}:{name}"


def settle(pipeline: LocalDeployment, outcomes: list[Outcome], timeout: float) -> None:
    """Wait until each started execution finished or asked for review; then read back."""
    from decision_router.domain.records import DecisionRecord

    started = [o for o in outcomes if o.item.kind and o.item.item_id and not o.queues and not o.problem
               and not o.source_outcome]
    first_line: dict[str, str] = {}
    for outcome in started:
        outcome.execution_arn = outcome.execution_arn or execution_arn(pipeline, outcome.item)
        if outcome.execution_arn is not None:
            outcome.duplicate_of = first_line.setdefault(outcome.execution_arn, outcome.item.source)
            if outcome.duplicate_of == outcome.item.source:
                outcome.duplicate_of = None
        described = None
        if outcome.execution_arn is not None:
            with contextlib.suppress(pipeline.sfn.exceptions.ExecutionDoesNotExist):
                described = pipeline.sfn.describe_execution(executionArn=outcome.execution_arn)
        if described is None:
            outcome.execution_arn, outcome.problem = None, "no workflow execution was started"
            continue
        outcome.record = DecisionRecord.model_validate_json(described["input"])
    deadline = time.monotonic() + timeout
    waiting = [o for o in started if o.execution_arn]
    while waiting:
        collect_reviews(pipeline)
        still = []
        for outcome in waiting:
            outcome.status = pipeline.sfn.describe_execution(executionArn=outcome.execution_arn)["status"]
            if outcome.status == "RUNNING" and outcome.item.item_id not in pipeline.pending_reviews:
                still.append(outcome)
        waiting = still
        if waiting and time.monotonic() > deadline:
            names = ", ".join(o.item.label for o in waiting)
            raise TimeoutError(f"workflow executions still running after {timeout:.0f}s: {names}")
        if waiting:
            time.sleep(0.2)
    read_back(pipeline, outcomes)


def collect_reviews(pipeline: LocalDeployment) -> None:
    """Hold every review request on the review queue in `pipeline.pending_reviews`."""
    from decision_router.adapters.review import QueuedReview
    from decision_router.review.completion import PendingReview

    # Received once and held (not deleted): the review function deletes what it completes.
    while messages := pipeline.sqs.receive_message(QueueUrl=pipeline.review_queue_url, MaxNumberOfMessages=10,
                                                   VisibilityTimeout=900).get("Messages", []):
        for message in messages:
            review = PendingReview.from_message(message["Body"])
            pipeline.pending_reviews[review.record.item_id] = QueuedReview(review, message["ReceiptHandle"])


def release_reviews(pipeline: LocalDeployment) -> None:
    """Make the held review messages visible again (for a reviewer tool such as the console)."""
    from decision_router.adapters.review import ReviewQueue

    ReviewQueue(pipeline.review_queue_url, client=pipeline.sqs).release(list(pipeline.pending_reviews.values()))
    pipeline.pending_reviews.clear()


def read_back(pipeline: LocalDeployment, outcomes: list[Outcome]) -> None:
    """Drain the destination queues, the on-call pages and the workflow DLQ; look up audits."""
    held: dict[str, list[str]] = {}
    delivered_by: dict[str, list[str]] = {}
    for url in pipeline.destinations.values():
        for message in pipeline.drain_bodies(url):
            held.setdefault(message["item_id"], []).append(pipeline.queue_name(url))
            delivered_by.setdefault(message["item_id"], []).append(str(message.get("execution_name")))
    workflow_dlq = pipeline.stack.resolve(
        pipeline.stack.properties(pipeline.state_machine_id())["DefinitionSubstitutions"]["WorkflowDeadLetterQueueUrl"])
    failed, unaudited = {}, {}
    for message in pipeline.drain_messages(workflow_dlq):
        body = json.loads(message["Body"])
        (unaudited if body.get("audit_missing") else failed)[body["record"]["item_id"]] = body.get("error")
    escalated = {json.loads(m["Body"])["item_id"] for url in pipeline.page_queues for m in pipeline.drain_messages(url)}
    review_queue = pipeline.queue_name(pipeline.review_queue_url)
    for outcome in outcomes:
        item_id = outcome.item.item_id
        if outcome.record is None or item_id is None:
            continue
        outcome.queues = [q for q in outcome.queues if q != review_queue]
        outcome.queues += held.pop(item_id, [])
        outcome.delivered_by += delivered_by.pop(item_id, [])
        if item_id in pipeline.pending_reviews and outcome.status == "RUNNING":
            outcome.queues.append(review_queue)
        if item_id in failed:
            outcome.queues.append(pipeline.queue_name(workflow_dlq))
            outcome.problem = f"workflow failed: {failed.pop(item_id)}"
        if item_id in unaudited:  # routed; the workflow DLQ holds its audit row for `make redrive`
            outcome.audit_missing = str(unaudited.pop(item_id))
        outcome.escalated = outcome.escalated or item_id in escalated
        outcome.audit = pipeline.audit(item_id)
        outcome.similar = pipeline.similar(outcome.record)


def proved(event: dict[str, Any], function: str) -> dict[str, Any]:
    """`event` (a review function's: execution_name, task_token, answers, note) with what the
    function asks of its caller: this process's AWS credentials' GetCallerIdentity presigned for
    this answer to `function` (its name), as `review_cli complete` makes it (adapters/caller_identity.py)."""
    from decision_router.adapters.caller_identity import make_proof, sts_client
    from decision_router.domain.callers import answer_binding, audience

    binding = answer_binding(audience(function), event["execution_name"], event["task_token"], event["answers"],
                             event.get("note", ""))
    return {**event, "identity_proof": make_proof(sts_client(), binding)}


def complete_review(pipeline: LocalDeployment, outcome: Outcome, reviewer: str, timeout: float = 60,
                    answers: dict[str, str] | None = None) -> dict[str, Any]:
    """Answer a pending review through the real review function (`answers` where given, else the
    model's suggestions; the policy's first option where there is none), wait for the workflow to
    finish, and read back where the item went. Returns the review function's answer. `reviewer`
    is not sent: the function names its caller by the AWS identity that signed the proof (here
    moto's STS caller, which the local stack's ReviewerPrincipals lists)."""
    pending = pipeline.pending_reviews.pop(outcome.item.item_id)
    review = pending.review
    policy = pipeline.load_policy(review.record.policy.name)
    suggested = {d.question: d.option_id for d in review.record.decisions if d.option_id}
    given = answers or {}
    chosen = {q.id: given.get(q.id) or suggested.get(q.id) or q.option_ids[0] for q in policy.questions}
    answer = pipeline.reviews.invoke(proved({
        "task_token": review.task_token, "execution_name": review.execution_name, "answers": chosen,
        "note": "answered from the answers file (make learn)" if given else "accepted the model's suggestion (make demo)",
    }, pipeline.reviews.name))
    # The message this run read: removed by the reviewer, as review_cli does (the function removes none).
    pipeline.sqs.delete_message(QueueUrl=pipeline.review_queue_url, ReceiptHandle=pending.receipt_handle)
    deadline = time.monotonic() + timeout
    while (status := pipeline.sfn.describe_execution(executionArn=outcome.execution_arn)["status"]) == "RUNNING":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{outcome.item.label}: workflow still running {timeout:.0f}s after the review")
        time.sleep(0.2)
    outcome.status = status
    outcome.reviewed_target = policy.target(answer["answers"][policy.routing_question.id])
    read_back(pipeline, [outcome])
    return answer
