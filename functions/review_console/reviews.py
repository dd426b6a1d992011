"""Pending reviews: the list, one item with its similar and linked items, the answer, and where an
answered item went. Each is read from the pending-review index (adapters/pending_reviews.py): the
list is one Query per lane shard, an item and its answer one GetItem. The task token never leaves
this function: it is read from the review's row (put by the workflow's index writer alone), and
the answer is checked against the row's record (decision_router.review.completion), as the review
function does."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import ValidationError

from decision_router.adapters.review import ReviewTaskGone
from decision_router.domain.policies import PolicyError
from decision_router.domain.ports.review import PendingReviewRow
from decision_router.domain.records import DecisionRecord
from decision_router.domain.signatures import cognito_identity
from decision_router.intake.resolved_items import remember_resolved
from decision_router.review import console
from decision_router.review.completion import ReviewCompletion, submit_review
from decision_router.review.pending import as_pending, moved_on
from decision_router.review.precision_checks import count_check
from decision_router.review.shadow_reviews import count_review

from .wiring import Wiring, answer, now, readable, wiring

logger = Logger(child=True)
router = APIGatewayHttpRouter()
#: Rows listed of each lane shard (due first): the list is bounded however many reviews wait.
LISTED_PER_LANE = 100


@router.get("/api/me")
def me() -> dict[str, Any]:
    who = wiring(router).reviewer(router.current_event)
    return {"reviewer": who.shown, "sub": who.sub, "username": who.username, "email": who.email}


@router.get("/api/reviews")
def reviews() -> dict[str, Any]:
    given = wiring(router)
    given.reviewer(router.current_event)
    summaries, malformed = listed(given, given.all_lanes(), now())
    query = router.current_event.query_string_parameters or {}
    shown = console.pending_list(summaries, kind=query.get("kind") or None, question=query.get("question") or None)
    # a sampled check is blind: its automatic answers are not listed (review/console.py `blinded`)
    return {"reviews": [console.blinded(s, given.policy(s.policy)).model_dump() for s in shown],
            "malformed": malformed,
            "kinds": sorted({s.item_kind for s in summaries}),
            "questions": sorted({q for s in summaries for q in s.questions})}


def listed(given: Wiring, lanes: list[str], moment: datetime) -> tuple[list[console.PendingSummary], int]:
    """The waiting reviews of `lanes` as of `moment`: the first LISTED_PER_LANE of each lane shard by due
    time (one Query each), and how many rows did not read (logged, not listed). A row is put by
    the workflow's index writer alone, so what it says needs no other check."""
    summaries, malformed = [], 0
    for row in given.pending_reviews.listing(lanes, LISTED_PER_LANE):
        try:
            summary = console.PendingSummary.model_validate_json(row.summary)
            summaries.append(moved_on(summary, given.policy(summary.policy), moment))
        except (PolicyError, ValidationError, ValueError) as error:
            malformed += 1
            logger.warning("pending review row not listed", extra={"execution_name": row.execution_name,
                                                                   "error": f"{type(error).__name__}: {error}"})
    return summaries, malformed


def waiting(given: Wiring, name: str) -> PendingReviewRow:
    """The review's row (its record and task token); 409 when none waits."""
    row = given.pending_reviews.get(name)
    if row is None:
        raise console.Conflict(f"{name}: already answered (or closed or timed out): no review of it waits")
    return row


@router.get("/api/reviews/<name>")
def review(name: str) -> dict[str, Any]:
    given = wiring(router)
    given.reviewer(router.current_event)
    row = waiting(given, name)
    record = row.record
    view = console.item_view(as_pending(row), record, given.policy(record.policy.name), now())
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
            in_review, _ = listed(given, given.all_lanes(item_kind="ticket"), now())
            return {"linked_tickets": console.linked_tickets(record.item_id, in_review,
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
    row = waiting(given, name)
    record = row.record
    completion = ReviewCompletion(execution_name=name, task_token=row.task_token, reviewer=who.sub,
                                  reviewer_username=who.username, reviewer_email=who.email,
                                  answers=answered.answers, note=answered.note)
    try:
        output = submit_review(completion, record, tasks=given.tasks, reviewer_id=cognito_identity(who.sub),
                               sign=given.identity_signer())
    except ReviewTaskGone:
        given.pending_reviews.remove(name, row.task_token)  # a dead task: its row stands for nothing
        raise console.Conflict(f"{name}: already answered (or closed or timed out): its task is gone") from None
    given.pending_reviews.remove(name, row.task_token)  # the workflow removes it too, as its wait ends
    chosen = output.chosen
    count_review(record, chosen.answers, given.shadow_tally, logger)
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
