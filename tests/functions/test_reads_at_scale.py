"""What one request reads stays bounded however large the tables grow: 100,000 rows in the audit
table and 100,000 resolved rows in the open-incident table (moto, the template's tables), then
the review console's page of an incident (its linked tickets) and one ticket batch of the ticket
intake (the open incidents it may link to), each through its real handler. A botocore hook counts
the items every DynamoDB read of the request read (`ScannedCount`, or one per item returned by a
GetItem): they are the rows asked for, not the table.

Stack tier: the whole stack is created and 200,000 rows are put (about 20 s on 2 cores); the rows
go straight into moto's table (the batch writes' own path in moto, without the HTTP round trip
per 25 rows that would triple the time)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends

from decision_router.adapters.open_incidents import OpenIncidents
from decision_router.domain.linking import filing_keys
from local.cloudformation import Stack
from local.event_sources import http_event
from local.lambdas import LocalFunction, serve_workflow_invokes
from tests.fakes.console_worlds import start, wait_for, waiting_reviews
from tests.functions.test_intake_handlers import FakeLambdaContext, StubbedEndpoint, make_intake
from tests.functions.test_intake_handlers import body as answer_body
from tests.functions.test_review_console import ALICE, INCIDENT, TICKET, UNSURE_INCIDENT, decided

pytestmark = pytest.mark.stack

ROWS = 100_000
#: The items one request may read: the few rows it is about (a handful of linked tickets, the open
#: incidents), far below the table's size.
BOUND = 50
EVENTS = Path(__file__).resolve().parents[2] / "events"


class ReadCounter:
    """Items read per table by every DynamoDB read made while it listens (a botocore hook on the
    default session's clients and on any client it is given)."""

    def __init__(self) -> None:
        self.items: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def asked(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["read_table"] = params.get("TableName") or next(iter(params.get("RequestItems") or {}), "")

    def answered(self, model: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        operation, table = model.name, context.get("read_table", "")
        if operation == "BatchGetItem":
            self.items[table] += len((parsed.get("Responses") or {}).get(table, []))
        elif operation in ("Scan", "Query"):
            self.items[table] += parsed.get("ScannedCount", 0)
        elif operation == "GetItem":
            self.items[table] += 1 if "Item" in parsed else 0
        else:
            return
        self.calls[f"{operation} {table}"] += 1

    def clear(self) -> None:
        self.items.clear()
        self.calls.clear()


@pytest.fixture
def stack(monkeypatch) -> Iterator[Stack]:
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}).create()
        serve_workflow_invokes(LocalFunction(stack, "ReviewIndexWriterFunction"))  # RequestReview invokes it
        yield stack


@pytest.fixture
def reads(monkeypatch) -> ReadCounter:
    """Every client made from now on reports its reads (the handlers make theirs on first use)."""
    counter = ReadCounter()
    original = boto3.session.Session.client

    def client(self, *args: Any, **kwargs: Any) -> Any:
        made = original(self, *args, **kwargs)
        made.meta.events.register("provide-client-params.dynamodb", counter.asked)
        made.meta.events.register("after-call.dynamodb", counter.answered)
        return made

    monkeypatch.setattr(boto3.session.Session, "client", client)
    return counter


def put_rows(table: str, rows: Iterator[dict[str, str]]) -> None:
    """Rows of strings into moto's table, as BatchWriteItem's PutRequests put them."""
    backend = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    for row in rows:
        backend.put_item(table, {name: {"S": value} for name, value in row.items()})


def link(incident_id: str) -> str:
    return json.dumps({"incident_key": f"grafana:{incident_id}", "incident_id": incident_id, "service": "orders-db",
                       "opened_at": "2026-11-29T11:59:00Z", "why": "subject names orders-db"})


def audit_rows(count: int, linked_to: str, *, own: int) -> Iterator[dict[str, str]]:
    """`count` audit rows of routed tickets: `own` of them linked to `linked_to`, one in ten
    linked to other incidents (each its own), the rest not linked."""
    for n in range(count):
        row = {"item_id": f"T-{n}", "execution_name": f"ticket-T-{n}", "item_kind": "ticket", "outcome": "auto_routed",
               "outcome_detail": '{"status":"auto_routed","target":"billing"}', "route": "auto",
               "route_reason": "all thresholds met", "policy_name": "support-ticket", "policy_version": "1",
               "decisions": "[]", "item": json.dumps({**TICKET, "ticket_id": f"T-{n}"}), "decided_at": "2026-11-29T12:00:00Z",
               "audited_at": f"2026-11-29T12:{n % 60:02d}:00Z", "linked_incident": "null"}
        incident = linked_to if n < own else f"INC-other-{n}" if n % 10 == 0 else None
        if incident is not None:
            row.update(linked_incident=link(incident), linked_incident_id=incident)
        yield row


def test_an_incident_page_and_a_ticket_batch_read_their_rows_not_the_tables(stack, reads, monkeypatch):
    # The console's page of an incident in review, beside 100,000 audit rows (3 of its own tickets).
    audit = stack.ref("AuditTable")
    name = start(stack, decided(stack, "incident", INCIDENT, UNSURE_INCIDENT))
    wait_for(lambda: waiting_reviews(stack) == 1, "the incident's review request")
    put_rows(audit, audit_rows(ROWS, INCIDENT["incident_id"], own=3))
    console = LocalFunction(stack, "ReviewConsoleFunction")
    reads.clear()
    page = console.invoke(http_event("GET", f"/api/reviews/{name}", claims=ALICE))
    assert page["statusCode"] == 200, page["body"]
    shown = json.loads(page["body"])
    assert sorted(t["item_id"] for t in shown["linked_tickets"]) == ["T-0", "T-1", "T-2"]
    assert "links_error" not in shown
    assert reads.calls[f"Query {audit}"] >= 1 and not any(call.startswith("Scan") for call in reads.calls), reads.calls
    assert reads.items[audit] <= BOUND, (reads.items, reads.calls)
    print(f"incident page: {reads.items[audit]} audit items read of {ROWS} ({dict(reads.calls)})")

    # One ticket batch, beside 100,000 resolved incidents and 3 open ones.
    from ticket_intake import app

    incidents = stack.ref("OpenIncidentsTable")
    put_rows(incidents, ({"incident_key": f"grafana:fp-{n}", "incident_id": f"INC-{n}", "service": f"svc-{n % 50}",
                          "reported_at": "2026-01-01T00:00:00Z", "status": "resolved"} for n in range(ROWS)))
    open_incidents = OpenIncidents(incidents)  # the open ones as the incident intake opens and files them
    for n in range(3):
        key = f"grafana:open-{n}"
        open_incidents.claim(key, f"d-{n}", incident_id=f"INC-open-{n}", source="grafana", service="payments-api",
                             reported_at="2026-11-29T11:00:00Z", title="payments-api errors")
        open_incidents.file(key, filing_keys("payments-api", "payments-api errors", None), "2026-11-29T11:00:00Z")
    stub = StubbedEndpoint()
    make_intake(monkeypatch, stack, app, "ticket", "TicketIntakeFunction", stub.endpoint)
    stub.answer(answer_body(["billing", "account_access", "technical_fault", "how_to", "sales"], [30.0, 0, 0, 0, 0]))
    template = json.loads((EVENTS / "ticket_batch.json").read_text())["Records"][0]
    ticket = {**TICKET, "ticket_id": "T-new", "subject": "payments-api fails", "body": "payments-api answers 503."}
    reads.clear()
    answer = app.lambda_handler({"Records": [dict(template, messageId="m-1", body=json.dumps(ticket))]}, FakeLambdaContext())
    assert answer == {"batchItemFailures": []}
    # by key: the rows of the names and words the ticket uses, then the incidents they list
    assert reads.calls[f"BatchGetItem {incidents}"] >= 1, reads.calls
    assert not any(call.startswith(("Scan", "Query")) and call.endswith(incidents) for call in reads.calls), reads.calls
    assert reads.items[incidents] <= BOUND, (reads.items, reads.calls)
    print(f"ticket batch: {reads.items[incidents]} open-incident items read of {ROWS + 3} ({dict(reads.calls)})")
