"""How the local pipeline settles: it waits until every started execution finished or asked for
review, reads back where each item ended up (team queues, on-call pages, the pending-review
index, the workflow DLQ, the audit table), and answers pending reviews through the real review
function.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from local.items import InputItem
from local.outcomes import Outcome

if TYPE_CHECKING:
    from local.deployment import LocalDeployment

#: Where an item waiting for its reviewer is shown to be (the template's pending-review index).
WAITING_FOR_REVIEW = "PendingReviewsTable"


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


def delivered_directly(pipeline: LocalDeployment, item: InputItem, arn: str | None) -> tuple[Any, str] | None:
    """(record, status) of the automatic route the intake delivered without an execution, under the
    name `arn` ends with, read back from its audit row (SUCCEEDED once marked delivered, RUNNING
    while its claim is pending, FAILED once the claim is past its deadline undelivered); None when
    there is no such row."""
    if arn is None or item.item_id is None:
        return None
    route = direct_route(pipeline.dynamodb, pipeline.audit_table, item.item_id, arn.rsplit(":", 1)[1])
    return None if route is None else (route.record, route.status)


#: How long the harness reads again through throttling (longer than a soak outage).
HARNESS_READ_SECONDS = 60.0


@dataclass(frozen=True)
class Route:
    """How one item was routed, from wherever that is kept: an execution of the routing workflow,
    or the audit row of an automatic route the intake delivered itself (`execution_arn` None)."""

    name: str  # the execution's name; a direct route's audit row carries the name it would have had
    record: Any  # the DecisionRecord (a CorrectedRecord for a correction's execution)
    status: str  # an execution's; a direct route's: SUCCEEDED delivered, RUNNING claimed, FAILED claim handed back
    execution_arn: str | None = None


def _direct(found: dict[str, Any]) -> Route | None:
    """The route an audit row (DynamoDB's attribute values) delivered directly; None for a row the workflow wrote."""
    from decision_router.adapters.direct_routes import PENDING
    from decision_router.domain.records import AuditRow

    if "routing_record" not in found:
        return None
    row = AuditRow.model_validate({key: value["S"] for key, value in found.items() if "S" in value})
    record = row.routed_record()
    if record is None:
        return None
    # A claim past its holder's deadline (handed back after a failed send) delivers nothing until a retry takes it over.
    status = ("SUCCEEDED" if PENDING not in found
              else "RUNNING" if float(found[PENDING]["N"]) > time.time() else "FAILED")
    return Route(row.execution_name, record, status)


def direct_route(dynamodb: Any, audit_table: str, item_id: str, name: str) -> Route | None:
    """The automatic route delivered without an execution under `name`, read from its audit row
    (read again through a throttle: `make soak` throttles this process's DynamoDB calls too, for
    up to its outage's seconds, and the harness must still read what happened)."""
    deadline = time.monotonic() + HARNESS_READ_SECONDS
    while True:
        try:
            found = dynamodb.get_item(TableName=audit_table, ConsistentRead=True, Key={
                "item_id": {"S": item_id}, "execution_name": {"S": name}}).get("Item")
            return _direct(found) if found else None
        except dynamodb.exceptions.ProvisionedThroughputExceededException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def routes(dynamodb: Any, audit_table: str, sfn: Any = None, state_machine_arn: str | None = None) -> dict[str, Route]:
    """Name -> route of every item routed so far: each execution of the workflow (when `sfn` is
    given; its status as it is now) and each automatic route the intake delivered itself."""
    from decision_router.domain.records import CorrectedRecord, DecisionRecord

    found: dict[str, Route] = {}
    if sfn is not None:
        for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=state_machine_arn):
            for execution in page["executions"]:
                described = sfn.describe_execution(executionArn=execution["executionArn"])
                raw = json.loads(described["input"])
                record = (CorrectedRecord if "correction" in raw else DecisionRecord).model_validate(raw)
                found[execution["name"]] = Route(execution["name"], record, described["status"], execution["executionArn"])
    for page in dynamodb.get_paginator("scan").paginate(TableName=audit_table, ConsistentRead=True):
        for route in filter(None, map(_direct, page["Items"])):
            found[route.name] = route  # under the name of an execution that failed: it is what routed the item
    return found


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
            direct = delivered_directly(pipeline, outcome.item, outcome.execution_arn)
            outcome.execution_arn = None
            if direct is None:
                outcome.problem = "no workflow execution was started"
            else:  # an automatic route the intake delivered itself: no execution to wait for
                outcome.record, outcome.status = direct
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
    """Every review the workflow waits for (the index writer's rows), in `pipeline.pending_reviews`
    by item id: read, not taken (the workflow removes a row once its wait is over)."""
    from decision_router.adapters.pending_reviews import row_of

    pages = pipeline.dynamodb.get_paginator("scan").paginate(TableName=pipeline.pending_reviews_table,
                                                             ConsistentRead=True)
    for page in pages:
        for item in page["Items"]:
            row = row_of(item)
            pipeline.pending_reviews[row.record.item_id] = row


def release_reviews(pipeline: LocalDeployment) -> None:
    """Let go of the reviews this run holds, for a reviewer tool such as the console (which reads
    the index itself)."""
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
    for outcome in outcomes:
        item_id = outcome.item.item_id
        if outcome.record is None or item_id is None:
            continue
        outcome.queues = [q for q in outcome.queues if q != WAITING_FOR_REVIEW]
        outcome.queues += held.pop(item_id, [])
        outcome.delivered_by += delivered_by.pop(item_id, [])
        if item_id in pipeline.pending_reviews and outcome.status == "RUNNING":
            outcome.queues.append(WAITING_FOR_REVIEW)
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
    review = pipeline.pending_reviews.pop(outcome.item.item_id)
    policy = pipeline.load_policy(review.record.policy.name)
    suggested = {d.question: d.option_id for d in review.record.decisions if d.option_id}
    given = answers or {}
    chosen = {q.id: given.get(q.id) or suggested.get(q.id) or q.option_ids[0] for q in policy.questions}
    answer = pipeline.reviews.invoke(proved({
        "task_token": review.task_token, "execution_name": review.execution_name, "answers": chosen,
        "note": "answered from the answers file (make learn)" if given else "accepted the model's suggestion (make demo)",
    }, pipeline.reviews.name))
    deadline = time.monotonic() + timeout
    while (status := pipeline.sfn.describe_execution(executionArn=outcome.execution_arn)["status"]) == "RUNNING":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{outcome.item.label}: workflow still running {timeout:.0f}s after the review")
        time.sleep(0.2)
    outcome.status = status
    outcome.reviewed_target = policy.target(answer["answers"][policy.routing_question.id])
    read_back(pipeline, [outcome])
    return answer
