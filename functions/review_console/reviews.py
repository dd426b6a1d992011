"""Pending reviews: the list, one item with its similar and linked items, the answer, and where an
answered item went. The task token never leaves this function: it is read from the review-queue
message of the pending execution, and the answer is checked against the execution's own record
(decision_router.review.completion), as the review function does."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from decision_router.adapters.review import QueuedReview, ReviewTaskGone
from decision_router.adapters.workflow import ExecutionNotRunning
from decision_router.domain.policies import PolicyError
from decision_router.domain.records import DecisionRecord
from decision_router.domain.signatures import cognito_identity
from decision_router.intake.precision_checks import count_check
from decision_router.intake.resolved_items import remember_resolved
from decision_router.intake.shadow_reviews import count_review
from decision_router.review import console
from decision_router.review.completion import InvalidReview, ReviewCompletion, submit_review

from .wiring import Wiring, answer, now, readable, wiring

logger = Logger(child=True)
router = APIGatewayHttpRouter()
#: Executions described at once while a listing checks its messages (boto3 clients are thread-safe).
VERIFY_WORKERS = 8


@router.get("/api/me")
def me() -> dict[str, Any]:
    who = wiring(router).reviewer(router.current_event)
    return {"reviewer": who.shown, "sub": who.sub, "username": who.username, "email": who.email}


@router.get("/api/reviews")
def reviews() -> dict[str, Any]:
    given = wiring(router)
    given.reviewer(router.current_event)
    pending = given.queue.pending(limit=500)
    given.queue.release(pending.reviews)  # shown, not taken: any reviewer may open one at once
    moment = now()
    summaries = []
    trusted = verified(given, pending.reviews)
    for queued in trusted:
        try:
            summaries.append(console.pending_summary(queued.review, given.policy(queued.review.record.policy.name), moment))
        except PolicyError as error:
            logger.warning("pending review under an unknown policy", extra={"error": str(error)})
    query = router.current_event.query_string_parameters or {}
    shown = console.pending_list(summaries, kind=query.get("kind") or None, question=query.get("question") or None)
    # a sampled check is blind: its automatic answers are not listed (review/console.py `blinded`)
    return {"reviews": [console.blinded(s, given.policy(s.policy)).model_dump() for s in shown],
            "malformed": len(pending.malformed),
            "unverified": len(pending.reviews) - len(trusted),
            "kinds": sorted({s.item_kind for s in summaries}),
            "questions": sorted({q for s in summaries for q in s.questions})}


def verified(given: Wiring, queued: list[QueuedReview]) -> list[QueuedReview]:
    """The review messages whose execution vouches for them: it exists under the routing state
    machine (the name is looked up there, never an ARN from the message), it is RUNNING, and its
    input is the record the message carries. Anyone who may send to the review queue could put a
    message there; one its execution does not vouch for is never listed (logged, and counted as
    `unverified`). One DescribeExecution each, a few at a time."""
    def vouched(review: QueuedReview) -> bool:
        try:
            record = given.workflow.running_record(review.review.execution_name)
        except ExecutionNotRunning as error:
            logger.warning("review message without a waiting execution", extra={
                "execution_name": review.review.execution_name, "reason": str(error)})
            return False
        if record != review.review.record:
            logger.warning("review message whose record is not its execution's", extra={
                "execution_name": review.review.execution_name})
            return False
        return True

    with ThreadPoolExecutor(max_workers=VERIFY_WORKERS) as pool:
        return [review for review, ok in zip(queued, pool.map(vouched, queued)) if ok]


@router.get("/api/reviews/<name>")
def review(name: str) -> dict[str, Any]:
    given = wiring(router)
    given.reviewer(router.current_event)
    record = given.workflow.running_record(name)  # the execution's own input, and proof it still waits
    queued = given.queue.find(name)
    if queued is None:
        raise console.Conflict(f"{name} has no pending review message (answered a moment ago?)")
    given.queue.release([queued])
    view = console.item_view(queued.review, record, given.policy(record.policy.name), now())
    return {**view, **links(given, record), "task": "review", "similar": given.similar_items(record)}


def links(given: Wiring, record: DecisionRecord) -> dict[str, Any]:
    """A linked ticket's incident (with the team its answered review suggests), and an
    incident's linked tickets (in review, then audited). What cannot be read is logged and
    left out: the item can be answered all the same."""
    try:
        if record.linked is not None:
            rows = readable(given.audit.of_item(record.linked.incident_id))
            return {"linked": console.link_view(record, rows, given.policy(record.policy.name))}
        if record.item_kind == "incident":
            pending = given.queue.pending(limit=500)
            given.queue.release(pending.reviews)
            return {"linked_tickets": console.linked_tickets(record.item_id, [q.review for q in pending.reviews],
                                                             given.audit.linked_to(record.item_id),
                                                             incident_ref=record.item_ref())}
    except Exception as error:  # noqa: BLE001 - links are shown beside the item, never instead of it
        logger.warning("linked items not shown", extra={"item_id": record.item_id,
                                                        "error": f"{type(error).__name__}: {error}"})
        return {"links_error": f"linked items could not be read: {type(error).__name__}: {error}"}
    return {}


@router.post("/api/reviews/<name>")
def answer_review(name: str) -> dict[str, Any]:
    given = wiring(router)
    who = given.reviewer(router.current_event)
    answered = answer(router.current_event)
    record = given.workflow.running_record(name)
    queued = given.queue.find(name)
    if queued is None:
        raise console.Conflict(f"{name} has no pending review message (answered a moment ago?)")
    completion = ReviewCompletion(execution_name=name, task_token=queued.review.task_token, reviewer=who.sub,
                                  reviewer_username=who.username, reviewer_email=who.email,
                                  answers=answered.answers, note=answered.note)
    try:
        output = submit_review(completion, record, tasks=given.tasks, reviewer_id=cognito_identity(who.sub),
                               sign=given.identity_signer())
    except InvalidReview:
        given.queue.release([queued])
        raise
    except ReviewTaskGone:
        given.queue.remove(queued.receipt_handle)  # a dead task: its message is of no further use
        raise
    given.queue.remove(queued.receipt_handle)
    chosen = output.chosen
    count_review(record, chosen.answers, given.settings.head_history_table, logger)
    count_check(record, chosen.answers, given.policy(record.policy.name), given.precision_tally, logger)
    remember_resolved(record, chosen.answers, who.shown, given.resolved_items, logger,
                      policy=given.policy(record.policy.name))
    logger.info("review answered in the console", extra={"execution_name": name, "reviewer": who.sub,
                                                          "target": chosen.destination.target})
    return {"status": "answered", "execution_name": name, "item_id": record.item_id, "reviewer": who.shown,
            "reviewer_sub": who.sub,
            "answers": chosen.answers, "target": chosen.destination.target, "escalate": chosen.escalate}


@router.get("/api/executions/<name>")
def execution(name: str) -> dict[str, Any]:
    """Where an answered or corrected item went: the execution's status and its audit record."""
    given = wiring(router)
    given.reviewer(router.current_event)
    status, execution_input = given.workflow.describe(name)
    row = given.audit.row(str(execution_input.get("item_id", "")), name)
    detail = row.detail() if row else None
    return {"execution_name": name, "status": status, "item_id": execution_input.get("item_id"),
            "outcome": row.outcome if row else None, "target": (detail or {}).get("target"),
            "reviewer": console.audited_reviewer(detail) if detail else None,
            "escalated": (detail or {}).get("escalated")}
