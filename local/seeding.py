"""Large state put into a local stack before its cost is measured (`local.capacity`): audit rows,
open incidents, pending reviews, a shadow head and its tally. Nothing here is counted.

Table rows go straight into the table of the moto server this process runs (moto's own put, the
path a BatchWriteItem's PutRequests take, without an HTTP round trip per 25 rows), each row shaped
as the code that writes it in service writes it (`AuditTrail`, `OpenIncidents.claim`). Pending
reviews are real: executions of the routing workflow started through `WorkflowStarter`, each of
which runs to its RequestReview state and puts its own review message on the queue.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

from local.cloudformation import DEFAULT_ACCOUNT_ID, DEFAULT_REGION

if TYPE_CHECKING:
    from decision_router.domain.records import DecisionRecord

#: Words enough to make an open incident's row the size a real one has (its title and
#: description are kept for linking, up to 200 and 600 characters).
FILLER = ("Requests to the service time out after the deploy; the error rate and the latency both rose and the "
          "on-call engineer is looking at the database connections and the load balancer's health checks. ")


def _backend() -> Any:
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[DEFAULT_ACCOUNT_ID][DEFAULT_REGION]


def put_rows(table: str, rows: Iterator[dict[str, dict[str, Any]]]) -> int:
    """DynamoDB items (attribute values typed) into moto's table; how many."""
    backend, count = _backend(), 0
    for row in rows:
        backend.put_item(table, row)
        count += 1
    return count


def audit_rows(count: int) -> Iterator[dict[str, dict[str, Any]]]:
    """Audit rows of tickets routed automatically, as the workflow's WriteAuditRecord puts them
    (spread over the shards of the index of recent rows, as its random pick spreads them)."""
    from decision_router.domain.records import AuditRow

    for n in range(count):
        ticket = {"ticket_id": f"SEED-T-{n}", "subject": "Invoice question", "body": FILLER,
                  "customer": {"id": f"C-{n % 977}", "tier": "pro"}, "channel": "email", "created_at": "2026-11-29T12:00:00Z"}
        columns = {"item_id": f"SEED-T-{n}", "execution_name": f"ticket-SEED-T-{n}", "item_kind": "ticket",
                   "outcome": "auto_routed", "outcome_detail": '{"status":"auto_routed","target":"billing"}',
                   "route": "auto", "route_reason": "all thresholds met", "policy_name": "support-ticket",
                   "policy_version": "1", "decisions": "[]", "item": json.dumps(ticket),
                   "decided_at": "2026-11-29T12:00:00Z", "audited_at": f"2026-11-29T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z",
                   "linked_incident": "null"}
        yield {name: {"S": value} for name, value in AuditRow.model_validate(columns).columns().items()}


def open_incident_rows(count: int) -> Iterator[dict[str, dict[str, Any]]]:
    """Open, routed incidents, as `OpenIncidents.claim` and `routed` leave them: each of its own
    service (none the measured items name), with a title and description of a real one's length;
    then the link index's rows they are filed under, as the incident intake's `file` leaves them
    (the words they share list `MAX_FILED` of them, as a full key does)."""
    from decision_router.adapters.incident_table import OPEN_MARK, open_mark
    from decision_router.adapters.link_index import FILED, FILED_COUNT, LOOKUP_ROW
    from decision_router.domain.linking import MAX_FILED, filing_keys

    filed: dict[str, dict[str, Any]] = {}
    for n in range(count):
        delivery, key, service = f"seed-delivery-{n}", f"monitoring:SEED-INC-{n}", f"seed-service-{n}"
        title, description, reported_at = f"{service} is degraded", (FILLER * 3)[:600], "2026-11-29T12:00:00Z"
        keys = filing_keys(service, title, description)
        yield {"incident_key": {"S": key}, "status": {"S": "open"}, OPEN_MARK: {"S": open_mark(key)},
               "opened_by": {"S": delivery}, "deliveries": {"SS": [delivery]}, "routed": {"BOOL": True},
               "updates": {"N": "0"}, "incident_id": {"S": f"SEED-INC-{n}"}, "source": {"S": "monitoring"},
               "opened_at": {"S": "2026-11-29T12:00:00.000+00:00"}, "service": {"S": service},
               "reported_at": {"S": reported_at}, "title": {"S": title}, "description": {"S": description},
               "execution_name": {"S": f"incident-SEED-INC-{n}"}, "filed_under": {"L": [{"S": k} for k in keys]}}
        for lookup in keys:
            listed = filed.setdefault(lookup, {})
            if len(listed) < MAX_FILED:
                listed[FILED + key] = {"S": reported_at}
    for lookup, listed in filed.items():
        yield {"incident_key": {"S": LOOKUP_ROW + lookup}, **listed, FILED_COUNT: {"N": str(len(listed))}}


def clone(record: DecisionRecord, n: int) -> DecisionRecord:
    """Another item like `record`: its own id and key (so its own execution name)."""
    field = "ticket_id" if record.item_kind == "ticket" else "incident_id"
    item_id = f"SEED-R-{n}"
    key = f"{record.item_kind}:seed:{item_id}:{hashlib.sha256(item_id.encode()).hexdigest()[:16]}"
    return record.model_copy(update={"item_id": item_id, "item_key": key, "item": {**record.item, field: item_id}})


def pending_reviews(record: DecisionRecord, count: int, *, state_machine_arn: str, retention_days: int,
                    label_retention_days: int, pending_reviews_table: str, timeout: float = 600) -> None:
    """`count` items like `record` (one routed to review) waiting for a person: started, and
    waited for until the pending-review index holds a row of each more than it held (the workflow's
    index writer puts them)."""
    import boto3

    from decision_router.adapters.workflow import WorkflowStarter

    dynamodb = boto3.client("dynamodb")
    before = _rows(dynamodb, pending_reviews_table)
    starter = WorkflowStarter(state_machine_arn, audit_retention_days=retention_days,
                              label_retention_days=label_retention_days)  # the stack's, as its intakes start them
    with parsed_once():
        for n in range(count):
            name, started = starter.start(clone(record, n))
            if not started:
                raise RuntimeError(f"seeding: execution {name} existed already")
        deadline = time.monotonic() + timeout
        while (rows := _rows(dynamodb, pending_reviews_table)) < before + count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"seeding: {rows - before} of {count} pending-review rows after {timeout:.0f}s")
            time.sleep(0.5)


@contextlib.contextmanager
def parsed_once() -> Iterator[None]:
    """moto's interpreter parses the definition anew for every execution (a tenth of a second on
    two cores); while seeding, each execution gets a copy of one parse instead (its own copy: no
    state is shared between executions)."""
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    original = ExecutionWorker._get_evaluation_entrypoint
    parsed: dict[str, Any] = {}
    lock = threading.Lock()

    def entrypoint(worker: Any) -> Any:
        definition = worker._evaluation_details.state_machine_details.definition
        with lock:
            if definition not in parsed:
                parsed[definition] = original(worker)
            return copy.deepcopy(parsed[definition])

    ExecutionWorker._get_evaluation_entrypoint = entrypoint  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        ExecutionWorker._get_evaluation_entrypoint = original  # type: ignore[method-assign]


def _rows(dynamodb: Any, table: str) -> int:
    pages = dynamodb.get_paginator("scan").paginate(TableName=table, Select="COUNT", ConsistentRead=True)
    return sum(page["Count"] for page in pages)


def start_shadow(env: dict[str, str], policy: str, question: str, head_file: bytes) -> str:
    """`head_file` serving in shadow for the question, signed with the stack's head signing key
    as relearning signs a shadow; its sha256."""
    from decision_router.adapters.head_store import HeadStore
    from decision_router.adapters.signing_key import SigningKey
    from decision_router.domain.signatures import HEAD_SHADOW

    document = json.loads(head_file)
    version = document["version"] = f"{document['version']}-shadow"  # a candidate of its own version (the file's sha256 changes with it)
    data = json.dumps(document, separators=(",", ":")).encode()  # compact: a head's size is bounded
    sha256 = hashlib.sha256(data).hexdigest()
    key = SigningKey.from_secret(env["HEAD_SIGNING_KEY_SECRET_ARN"]) if env.get("HEAD_SIGNING_KEY_SECRET_ARN") else None
    signature = key.head_signature(policy, question, sha256, version, HEAD_SHADOW) if key else ""
    store = HeadStore(env["HEAD_STORE_BUCKET"], env["HEAD_PARAMETER_PREFIX"], env["HEAD_HISTORY_TABLE_NAME"])
    store.shadow(policy, question, data, sha256=sha256, head_version=version, by="capacity-run",
                 reason="a shadow, so the measured items are shadowed", signature=signature)
    return sha256


def shadow_tally(env: dict[str, str], policy: str, question: str, sha256: str, items: int) -> None:
    """The shadow head's tally as after `items` shadowed items."""
    from decision_router.adapters.shadow_tally import ShadowTally

    ShadowTally(env["HEAD_HISTORY_TABLE_NAME"]).add(policy, question, sha256, items=items, agreed=items)
