"""The review console behind API Gateway's HTTP API: the page and its static files (no sign-in
needed to load them), and the JSON API under /api/ that the JWT authorizer guards.

The reviewer is whoever the verified token's claims name (API Gateway puts them in the event's
requestContext): audited by the token's `sub`, shown by the user pool's verified email (or the
user name); a name in the request body is refused. The task token never leaves this
function: it is read from the review-queue message of the pending execution, and the answer is
checked against the execution's own record (decision_router.review.completion), as the review function does.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from decision_router.adapters.review import AuditTrail, LabelledExamples, ReviewQueue, ReviewTaskGone, ReviewTasks
from decision_router.adapters.similar_items import ResolvedItems
from decision_router.adapters.workflow import ExecutionNotRunning, WorkflowStarter
from decision_router.config import Settings
from decision_router.domain.policies import Policy, PolicyError, load_policy
from decision_router.domain.records import AuditRow, DecisionRecord
from decision_router.intake.resolved_items import remember_resolved
from decision_router.intake.shadow_reviews import count_review
from decision_router.review import console
from decision_router.review.completion import InvalidReview, ReviewCompletion, submit_review
from decision_router.validation import describe_errors

logger = Logger()
tracer = Tracer()
app = APIGatewayHttpResolver()

STATIC = Path(__file__).parent / "static"
#: The only files served, with their types (nothing else under static/ is reachable).
ASSETS = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8",
          "console.svg": "image/svg+xml",
          "picker.js": "text/javascript; charset=utf-8"}  # the option picker of a question with many options
RECENT_ROUTES = 25


def content_security_policy(region: str) -> str:
    """Scripts and styles from this origin only (no inline script or style, no eval); the only
    other connection is Cognito's sign-in API."""
    return ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
            f"connect-src 'self' https://cognito-idp.{region}.amazonaws.com; "
            "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def _region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def security_headers(resolver: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response:
    response = next_middleware(resolver)
    response.headers.update({
        "Content-Security-Policy": content_security_policy(_region()),
        "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
        "Cache-Control": "no-store", "Cross-Origin-Opener-Policy": "same-origin",
    })
    return response


app.use(middlewares=[security_headers])


# ------------------------------------------------------------------------------ wiring
@lru_cache(maxsize=1)
def settings() -> Settings:
    return Settings.from_env().require("review_queue_url", "state_machine_arn", "audit_table",
                                       "labelled_examples_table")


@lru_cache(maxsize=1)
def adapters() -> tuple[ReviewQueue, WorkflowStarter, AuditTrail, LabelledExamples, ReviewTasks]:
    s = settings()
    return (ReviewQueue(s.review_queue_url), WorkflowStarter(s.state_machine_arn), AuditTrail(s.audit_table),
            LabelledExamples(s.labelled_examples_table), ReviewTasks())


@lru_cache(maxsize=1)
def resolved_items() -> ResolvedItems | None:
    table = settings().resolved_items_table
    return ResolvedItems(table) if table else None


def similar_items(record: DecisionRecord) -> list[dict[str, Any]]:
    """The record's nearest resolved items of its policy; none (and a warning) when they cannot be read."""
    store = resolved_items()
    if store is None:
        return []
    try:
        similar = console.similar_to(record, policy(record.policy.name), store.recent(record.policy.name))
    except Exception as error:  # noqa: BLE001 - the review is shown without its neighbours
        logger.warning("similar items not read", extra={"item_id": record.item_id,
                                                         "reason": f"{type(error).__name__}: {error}"})
        return []
    return [s.model_dump() for s in similar]


@lru_cache(maxsize=16)
def policy(name: str) -> Policy:
    return load_policy(name)


def reviewer() -> console.Reviewer:
    """The signed-in reviewer, from the claims API Gateway's JWT authorizer verified."""
    claims = app.current_event.request_context.authorizer.jwt_claim
    return console.reviewer_from_claims(claims, settings().reviewer_group)


def _answer() -> console.Answer:
    try:
        body = json.loads(app.current_event.body or "")
    except json.JSONDecodeError:
        raise InvalidReview("the body must be JSON: {\"answers\": {question: option}, \"note\": \"…\"}") from None
    try:
        return console.Answer.model_validate(body)
    except ValidationError as error:
        raise InvalidReview("; ".join(describe_errors(error))) from None


def _now() -> datetime:
    return datetime.now(timezone.utc)


# ------------------------------------------------------------------------------ errors
def _error(status: int, error: Exception) -> Response:
    return Response(status_code=status, content_type="application/json", body=json.dumps({"error": str(error)}))


@app.exception_handler(console.NotSignedIn)
def _not_signed_in(error: Exception) -> Response:
    return _error(401, error)


@app.exception_handler(console.NotAReviewer)
def _not_a_reviewer(error: Exception) -> Response:
    return _error(403, error)


@app.exception_handler(InvalidReview)
def _invalid(error: Exception) -> Response:
    return _error(400, error)


@app.exception_handler([ExecutionNotRunning, ReviewTaskGone, console.Conflict])
def _conflict(error: Exception) -> Response:
    return _error(409, error)


@app.not_found
def _not_found(_: Exception) -> Response:
    return _error(404, LookupError("no such page"))


# ------------------------------------------------------------------------------ page
@app.get("/")
def page() -> Response:
    return Response(200, "text/html; charset=utf-8", (STATIC / "index.html").read_text(encoding="utf-8"))


@app.get("/static/<name>")
def asset(name: str) -> Response:
    if name not in ASSETS:
        return _error(404, LookupError(f"no asset {name!r}"))
    return Response(200, ASSETS[name], (STATIC / name).read_text(encoding="utf-8"))


@app.get("/config")
def page_config() -> dict[str, Any]:
    """How the page signs people in: Cognito's user-password sign-in on the stack's app client,
    or the local run's stand-in (local/console.py); nothing secret."""
    s = settings()
    return {"sign_in": s.console_sign_in, "region": _region(), "client_id": s.user_pool_client_id,
            "group": s.reviewer_group}


# ------------------------------------------------------------------------------ reviews
@app.get("/api/me")
def me() -> dict[str, Any]:
    who = reviewer()
    return {"reviewer": who.shown, "sub": who.sub, "username": who.username, "email": who.email}


@app.get("/api/reviews")
def reviews() -> dict[str, Any]:
    reviewer()
    queue = adapters()[0]
    pending = queue.pending(limit=500)
    queue.release(pending.reviews)  # shown, not taken: any reviewer may open one at once
    now = _now()
    summaries = []
    for queued in pending.reviews:
        try:
            summaries.append(console.pending_summary(queued.review, policy(queued.review.record.policy.name), now))
        except PolicyError as error:
            logger.warning("pending review under an unknown policy", extra={"error": str(error)})
    query = app.current_event.query_string_parameters or {}
    shown = console.pending_list(summaries, kind=query.get("kind") or None, question=query.get("question") or None)
    return {"reviews": [s.model_dump() for s in shown], "malformed": len(pending.malformed),
            "kinds": sorted({s.item_kind for s in summaries}),
            "questions": sorted({q for s in summaries for q in s.questions})}


@app.get("/api/reviews/<name>")
def review(name: str) -> dict[str, Any]:
    reviewer()
    queue, workflow = adapters()[0], adapters()[1]
    record = workflow.running_record(name)  # the execution's own input, and proof it still waits
    queued = queue.find(name)
    if queued is None:
        raise console.Conflict(f"{name} has no pending review message (answered a moment ago?)")
    queue.release([queued])
    view = console.item_view(queued.review, record, policy(record.policy.name), _now())
    return {**view, **_links(record), "task": "review", "similar": similar_items(record)}


def _links(record: DecisionRecord) -> dict[str, Any]:
    """A linked ticket's incident (with the team its answered review suggests), and an
    incident's linked tickets (in review, then audited). What cannot be read is logged and
    left out: the item can be answered all the same."""
    audit = adapters()[2]
    try:
        if record.linked is not None:
            rows = []
            for row in audit.of_item(record.linked.incident_id):
                try:
                    rows.append(AuditRow.model_validate(row))
                except ValidationError as error:
                    logger.warning("audit row of the linked incident not read", extra={
                        "item_id": record.linked.incident_id, "error": "; ".join(describe_errors(error))})
            return {"linked": console.link_view(record, rows, policy(record.policy.name))}
        if record.item_kind == "incident":
            queue = adapters()[0]
            pending = queue.pending(limit=500)
            queue.release(pending.reviews)
            return {"linked_tickets": console.linked_tickets(record.item_id, [q.review for q in pending.reviews],
                                                             audit.linked_to(record.item_id))}
    except Exception as error:  # noqa: BLE001 - links are shown beside the item, never instead of it
        logger.warning("linked items not shown", extra={"item_id": record.item_id,
                                                        "error": f"{type(error).__name__}: {error}"})
        return {"links_error": f"linked items could not be read: {type(error).__name__}: {error}"}
    return {}


@app.post("/api/reviews/<name>")
def answer_review(name: str) -> dict[str, Any]:
    who = reviewer()
    answer = _answer()
    queue, workflow, _, _, tasks = adapters()
    record = workflow.running_record(name)
    queued = queue.find(name)
    if queued is None:
        raise console.Conflict(f"{name} has no pending review message (answered a moment ago?)")
    completion = ReviewCompletion(execution_name=name, task_token=queued.review.task_token, reviewer=who.sub,
                                  reviewer_username=who.username, reviewer_email=who.email,
                                  answers=answer.answers, note=answer.note)
    try:
        output = submit_review(completion, record, tasks=tasks)
    except InvalidReview:
        queue.release([queued])
        raise
    except ReviewTaskGone:
        queue.remove(queued.receipt_handle)  # a dead task: its message is of no further use
        raise
    queue.remove(queued.receipt_handle)
    chosen = output.chosen
    count_review(record, chosen.answers, settings().head_history_table, logger)
    remember_resolved(record, chosen.answers, who.shown, settings().resolved_items_table, logger)
    logger.info("review answered in the console", extra={"execution_name": name, "reviewer": who.sub,
                                                          "target": chosen.destination.target})
    return {"status": "answered", "execution_name": name, "item_id": record.item_id, "reviewer": who.shown,
            "reviewer_sub": who.sub,
            "answers": chosen.answers, "target": chosen.destination.target, "escalate": chosen.escalate}


@app.get("/api/executions/<name>")
def execution(name: str) -> dict[str, Any]:
    """Where an answered or corrected item went: the execution's status and its audit record."""
    reviewer()
    workflow, audit = adapters()[1], adapters()[2]
    status, given = workflow.describe(name)
    row = audit.row(str(given.get("item_id", "")), name)
    detail = row.detail() if row else None
    return {"execution_name": name, "status": status, "item_id": given.get("item_id"),
            "outcome": row.outcome if row else None, "target": (detail or {}).get("target"),
            "reviewer": console.audited_reviewer(detail) if detail else None,
            "escalated": (detail or {}).get("escalated")}


# ------------------------------------------------------------------------------ automatic routes
@app.get("/api/routes")
def routes() -> dict[str, Any]:
    reviewer()
    audit = adapters()[2]
    shown = []
    for row in audit.recent("auto_routed", limit=RECENT_ROUTES):
        try:
            shown.append(console.auto_route(row, policy(row["policy_name"]), audit.of_item(row["item_id"])))
        except (PolicyError, KeyError, ValueError) as error:
            logger.warning("audit row not shown", extra={"error": str(error), "item_id": row.get("item_id")})
    return {"routes": [r.model_dump() for r in shown]}


def _routed_record(name: str) -> DecisionRecord:
    status, given = adapters()[1].describe(name)
    record = DecisionRecord.model_validate(given)
    if status != "SUCCEEDED" or record.route != "auto":
        raise console.Conflict(f"{name} is {status} with route {record.route}: only a delivered automatic route "
                               "can be corrected")
    return record


@app.get("/api/routes/<name>")
def routed(name: str) -> dict[str, Any]:
    reviewer()
    record = _routed_record(name)
    p = policy(record.policy.name)
    return {"task": "correction", "execution_name": name, "item_kind": record.item_kind, "item_id": record.item_id,
            "policy": p.name, "policy_version": record.policy.version, "headline": console.headline(record.item, p),
            "item": record.item, "reason": record.route_reason, "decided_at": record.decided_at,
            "target": record.destination.target if record.destination else None,
            "questions": console.decision_view(record, p), "doubtful": [], "similar": similar_items(record)}


@app.post("/api/routes/<name>/correction")
def correct(name: str) -> dict[str, Any]:
    who = reviewer()
    answer = _answer()
    record = _routed_record(name)
    corrected = console.correction(record, name, answer.answers, who, note=answer.note)
    started = adapters()[1].start_named(corrected.correction.execution_name, corrected)
    if not started:
        raise console.Conflict(f"{record.item_kind} {record.item_id} was already corrected "
                               f"(execution {corrected.correction.execution_name})")
    chosen = corrected.correction.chosen
    count_review(record, chosen.answers, settings().head_history_table, logger)  # once: the start is named
    remember_resolved(record, chosen.answers, who.shown, settings().resolved_items_table, logger)
    logger.info("automatic route corrected", extra={"execution_name": name, "reviewer": who.sub,
                                                    "target": chosen.destination.target})
    return {"status": "corrected", "execution_name": corrected.correction.execution_name, "item_id": record.item_id,
            "reviewer": who.shown, "reviewer_sub": who.sub, "answers": chosen.answers, "target": chosen.destination.target,
            "escalate": chosen.escalate}


# ------------------------------------------------------------------------------ export
@app.get("/api/export")
def export() -> Response:
    """One page of the labelled examples as `make fit REVIEWS=` reads them (review_cli export's
    lines): `?page=` the X-Next-Page header of the page before (absent on the last page)."""
    reviewer()
    query = app.current_event.query_string_parameters or {}
    wanted = query.get("policy") or None
    rows, after = adapters()[3].page(console.EXPORT_PAGE_ROWS, console.read_page_token(query.get("page") or None))
    examples = console.labelled_examples(rows, wanted)
    body = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in examples)
    headers = {"Content-Disposition": 'attachment; filename="labelled-examples.jsonl"'}
    if after:
        headers["X-Next-Page"] = console.page_token(after)
    return Response(200, "application/x-ndjson; charset=utf-8", body, headers=headers)


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)  # item text and notes: not for traces
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
