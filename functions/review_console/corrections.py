"""Recent automatic routes, and their correction: the right answer re-routes the item (a new
execution of the routing workflow whose record carries the correction as its review answer)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from decision_router.adapters.workflow import ExecutionNotRunning
from decision_router.domain.policies import PolicyError
from decision_router.domain.records import DecisionRecord
from decision_router.intake.resolved_items import remember_resolved
from decision_router.review import console
from decision_router.review.precision_checks import count_correction
from decision_router.review.shadow_reviews import count_review

from .wiring import Wiring, answer, readable, wiring

logger = Logger(child=True)
router = APIGatewayHttpRouter()
RECENT_ROUTES = 25


@router.get("/api/routes")
def routes() -> dict[str, Any]:
    given = wiring(router)
    given.reviewer(router.current_event)
    shown = []
    for row in readable(given.audit.recent("auto_routed", limit=RECENT_ROUTES)):
        try:
            shown.append(console.auto_route(row, given.policy(row.policy_name), readable(given.audit.of_item(row.item_id))))
        except (PolicyError, ValueError) as error:
            logger.warning("audit row not shown", extra={"error": str(error), "item_id": row.item_id})
    return {"routes": [r.model_dump() for r in shown]}


def routed_record(given: Wiring, name: str) -> DecisionRecord:
    try:
        status, execution_input = given.workflow.describe(name)
    except ExecutionNotRunning:
        return delivered_directly(given, name)
    record = DecisionRecord.model_validate(execution_input)
    if status != "SUCCEEDED" or record.route != "auto":
        raise console.Conflict(f"{name} is {status} with route {record.route}: only a delivered automatic route "
                               "can be corrected")
    return record


def delivered_directly(given: Wiring, name: str) -> DecisionRecord:
    """The record of an automatic route the intake delivered without an execution, read from its
    audit row among the recent routes this console offers for correction (those `routes` lists)."""
    for row in readable(given.audit.recent("auto_routed", limit=RECENT_ROUTES)):
        if row.execution_name == name and (record := row.routed_record()) is not None:
            return record
    raise ExecutionNotRunning(f"no routing execution named {name!r}, nor a recent automatic route")


@router.get("/api/routes/<name>")
def routed(name: str) -> dict[str, Any]:
    given = wiring(router)
    given.reviewer(router.current_event)
    record = routed_record(given, name)
    p = given.policy(record.policy.name)
    return {"task": "correction", "execution_name": name, "item_kind": record.item_kind, "item_id": record.item_id,
            "policy": p.name, "policy_version": record.policy.version, "headline": console.headline(record.item, p),
            "item": record.item, "reason": record.route_reason, "decided_at": record.decided_at,
            "target": record.destination.target if record.destination else None,
            "questions": console.decision_view(record, p), "doubtful": [], "similar": given.similar_items(record)}


@router.post("/api/routes/<name>/correction")
def correct(name: str) -> dict[str, Any]:
    given = wiring(router)
    who = given.reviewer(router.current_event)
    answered = answer(router.current_event)
    record = routed_record(given, name)
    corrected = console.correction(record, name, answered.answers, who, note=answered.note,
                                   sign=given.identity_signer())
    started = given.workflow.start_named(corrected.correction.execution_name, corrected)
    if not started:
        raise console.Conflict(f"{record.item_kind} {record.item_id} was already corrected "
                               f"(execution {corrected.correction.execution_name})")
    chosen = corrected.correction.chosen
    count_review(record, chosen.answers, given.shadow_tally, logger)  # once: the start is named
    count_correction(record, chosen.answers, given.precision_tally, logger)  # a count beside the estimate, never in it
    remember_resolved(record, chosen.answers, who.shown, given.resolved_items, logger,
                      policy=given.policy(record.policy.name))
    logger.info("automatic route corrected", extra={"execution_name": name, "reviewer": who.sub,
                                                    "target": chosen.destination.target})
    return {"status": "corrected", "execution_name": corrected.correction.execution_name, "item_id": record.item_id,
            "reviewer": who.shown, "reviewer_sub": who.sub, "answers": chosen.answers, "target": chosen.destination.target,
            "escalate": chosen.escalate}
