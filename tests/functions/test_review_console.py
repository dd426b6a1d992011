"""The review console's handler (functions/review_console): pending reviews listed oldest first
with their reason, answers checked against the execution's own record and delivered, the
reviewer taken from the token's claims only, corrections of automatic routes, the export, and the
page's headers. On template.yaml's names over the fakes of the ports with the routing workflow
played over them (tests/fakes/console_worlds.py); three smoke tests run on both worlds, also on
the template's resources in moto with the real routing workflow executing, and one check of the
real workflow runs there only.

Events are HTTP API payload 2.0 events as `local.event_sources.http_event` builds them (the local
gateway's own builder); the claims are what API Gateway's JWT authorizer would pass on."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path

import boto3
import pytest

from decision_router.adapters.escalations import LEASE_SECONDS, mark_key
from decision_router.adapters.workflow import WorkflowStarter
from decision_router.domain.judging import build_record, explain, model_entry
from decision_router.domain.policies import PrecisionCheck, load_policy
from decision_router.domain.records import DecisionRecord
from decision_router.domain.review_sla import SWEEP_SOURCE
from decision_router.items import parse_item
from decision_router.review.completion import PendingReview, labelled_example
from decision_router.review.console import correction_name, pending_list, pending_summary, reviewer_from_claims
from local.cloudformation import Stack
from local.event_sources import http_event
from tests.fakes.console_worlds import console_world
from tests.functions.conftest import letters_only, make_result
from tests.functions.sts_stand_in import BOB
from tests.functions.test_intake_handlers import ON_THE_STACK, ONLY_ON_THE_STACK, FakeLambdaContext

STATIC = Path(__file__).resolve().parents[2] / "functions" / "review_console" / "static"
ALICE = {"sub": "a-1", "email": "alice@example.com", "email_verified": "true", "cognito:username": "alice",
         "cognito:groups": ["reviewers"]}

TICKET = {"ticket_id": "T-77", "subject": "Charged twice", "body": "Two charges of $49, refund one please.",
          "customer": {"id": "C-9", "tier": "pro"}, "channel": "email", "created_at": "2026-11-29T12:00:00Z"}
INCIDENT = {"incident_id": "INC-77", "title": "Replica lag", "description": "read replica 40 s behind",
            "service": "orders-db", "severity": "sev3", "source": "cloudwatch", "reported_at": "2026-11-29T12:00:00Z"}


def decided(stack: Stack, kind: str, data: dict, logits: dict[str, list[float]]) -> DecisionRecord:
    """A record built by the real routing code from model answers with these option logits, for
    the stack's queues (a world's `template`)."""
    policy = letters_only(load_policy("incident" if kind == "incident" else "support-ticket"))
    env = stack.function_environment("TicketIntakeFunction")
    item = parse_item(kind, data)
    entries = explain(policy, item, [model_entry(q, make_result(q.id, q.option_ids, logits[q.id])) for q in policy.questions])
    return build_record(policy, item, entries, destinations=json.loads(env["DESTINATION_QUEUES"]),
                        review_timeout_seconds=3600)


UNSURE_TICKET = {"queue": [2.0, 1.6, 0.1, 0.0, 0.0]}
UNSURE_INCIDENT = {"priority": [0.2, 0.1, 0.0, 0.0], "team": [0.1, 0.3, 0.0, 0.0]}
SURE_TICKET = {"queue": [30.0, 0.0, 0.0, 0.0, 0.0]}


@pytest.fixture
def world(request, monkeypatch):
    """The fakes, or, for a test marked `ON_THE_STACK`, also the template's resources in moto with
    the routing workflow executing."""
    with console_world(getattr(request, "param", "fakes")) as world:
        yield world


@pytest.fixture
def console(world):
    """The console function over the world's parts, called like API Gateway does."""
    invoke = world.console_function()

    def call(method: str, path: str, *, claims: dict | None = ALICE, body=None, query: str = "") -> dict:
        text = body if body is None or isinstance(body, str) else json.dumps(body)
        response = invoke(http_event(method, path, query=query, body=text, claims=claims))
        is_json = response["headers"].get("Content-Type", "").startswith("application/json")
        response["json"] = json.loads(response["body"]) if is_json else None
        return response

    return call


# ---------------------------------------------------------------------------- identity
def test_the_reviewer_is_whoever_the_verified_claims_name():
    alice = reviewer_from_claims(ALICE, "reviewers")
    assert (alice.sub, alice.username, alice.email, alice.shown) == ("a-1", "alice", "alice@example.com", "alice@example.com")
    bob = reviewer_from_claims({"sub": "b-2", "cognito:username": "bob", "cognito:groups": "[admins reviewers]"}, "reviewers")
    assert (bob.sub, bob.email, bob.shown) == ("b-2", None, "bob")
    # An access token names the user in `username`.
    assert reviewer_from_claims({"sub": "c-3", "username": "carol", "cognito:groups": ["reviewers"]}, "reviewers").username == "carol"
    with pytest.raises(PermissionError, match="not in the 'reviewers' group"):
        reviewer_from_claims({"sub": "e-4", "email": "eve@example.com", "cognito:groups": "[viewers]"}, "reviewers")
    with pytest.raises(PermissionError, match="sign in first"):
        reviewer_from_claims({}, "reviewers")
    with pytest.raises(PermissionError, match="no 'sub' claim"):
        reviewer_from_claims({"email": "x@example.com", "email_verified": "true", "cognito:groups": ["reviewers"]}, "reviewers")


# Attack: a reviewer who set their own email (Cognito's UpdateUserAttributes) signs as someone else.
@pytest.mark.parametrize("verified", [None, "false", False, "no"])
def test_attack_an_unverified_email_claim_names_nobody(verified):
    claims = {"sub": "m-666", "cognito:username": "mallory", "email": "ceo@example.com", "cognito:groups": ["reviewers"]}
    if verified is not None:
        claims["email_verified"] = verified
    who = reviewer_from_claims(claims, "reviewers")
    assert (who.sub, who.email, who.shown) == ("m-666", None, "mallory")


# Attack: a group whose name holds a comma is one group, not two.
@pytest.mark.parametrize("groups", ["[admins,reviewers]", "[reviewers,x]", '["admins,reviewers"]', ["admins,reviewers"]])
def test_attack_a_group_name_with_a_comma_is_not_split(groups):
    with pytest.raises(PermissionError, match="not in the 'reviewers' group"):
        reviewer_from_claims({"sub": "m-1", "cognito:groups": groups}, "reviewers")
    assert reviewer_from_claims({"sub": "r-1", "cognito:groups": '["a,b", "reviewers"]'}, "reviewers").sub == "r-1"


def test_attack_a_self_set_email_is_neither_shown_nor_audited(world, console):
    (name,) = world.pending(decided(world.template, "ticket", TICKET, UNSURE_TICKET))
    mallory = {"sub": "m-666", "cognito:username": "mallory", "email": "ceo@example.com", "cognito:groups": ["reviewers"]}

    response = console("POST", f"/api/reviews/{name}", claims=mallory, body={"answers": {"queue": "billing"}})

    assert response["statusCode"] == 200 and response["json"]["reviewer"] == "mallory"
    assert response["json"]["reviewer_sub"] == "m-666"
    assert world.finished(name) == "SUCCEEDED"
    audit = world.audit_columns("T-77", name)
    assert "ceo@example.com" not in json.dumps(audit)
    detail = json.loads(audit["outcome_detail"])
    assert detail["reviewer"] == "m-666" and detail["review"]["reviewer_username"] == "mallory"
    assert detail["review"]["reviewer_email"] is None
    example = world.labelled_example("support-ticket", "T-77")
    assert example["reviewer"] == "m-666" and "ceo@example.com" not in json.dumps(example)
    assert console("GET", "/api/me", claims=mallory)["json"] == {"reviewer": "mallory", "sub": "m-666",
                                                                 "username": "mallory", "email": None}


def test_an_audit_row_from_before_reviewers_were_audited_by_sub_stays_readable():
    from decision_router.review.console import audited_reviewer

    assert audited_reviewer({"status": "reviewed", "reviewer": "alice@example.com",
                             "review": {"execution_name": "x", "reviewer": "alice@example.com", "choice": "{}"}}) == "alice@example.com"
    assert audited_reviewer({"reviewer": "a-1", "review": {"reviewer": "a-1", "reviewer_username": "alice",
                                                           "reviewer_email": None}}) == "alice"
    assert audited_reviewer({"reviewer": "a-1", "review": {"reviewer_email": "alice@example.com"}}) == "alice@example.com"


def test_without_verified_claims_the_api_answers_401_and_outside_the_group_403(console):
    for path in ("/api/reviews", "/api/routes", "/api/export", "/api/me"):
        response = console("GET", path, claims=None)
        assert response["statusCode"] == 401 and "sign in" in response["json"]["error"], path
    outsider = {**ALICE, "cognito:groups": ["viewers"]}
    assert console("GET", "/api/reviews", claims=outsider)["statusCode"] == 403
    assert console("POST", "/api/reviews/x", claims=None, body={"answers": {"queue": "billing"}})["statusCode"] == 401


# ---------------------------------------------------------------------------- pending reviews
def test_pending_reviews_are_listed_oldest_first_and_filtered_by_kind_and_question(world):
    now = datetime(2026, 11, 29, 13, 0, tzinfo=timezone.utc)
    reviews = []
    for minutes, (kind, data, logits) in zip((10, 50), (("ticket", TICKET, UNSURE_TICKET), ("incident", INCIDENT, UNSURE_INCIDENT))):
        record = decided(world.template, kind, data, logits)
        reviews.append(PendingReview(task_token="t", execution_name=f"{kind}-x", record=record,
                                     requested_at=(now - timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")))
    summaries = [pending_summary(r, load_policy(r.record.policy.name), now) for r in reviews]
    assert [s.item_id for s in pending_list(summaries)] == ["INC-77", "T-77"]
    assert summaries[0].age_seconds == 600 and summaries[0].timeout_seconds == 3600
    assert summaries[0].headline == "Charged twice" and summaries[0].reason.startswith("queue: confidence ")
    assert [s.item_id for s in pending_list(summaries, kind="ticket")] == ["T-77"]
    assert [s.item_id for s in pending_list(summaries, question="team")] == ["INC-77"]
    assert pending_list(summaries, question="nothing") == []


def test_the_list_orders_by_breach_risk_then_priority_then_age_and_shows_the_time_left(world, console, monkeypatch):
    # Requested oldest first: a free ticket (480 min), an enterprise ticket (60 min), a P1 incident (15 min).
    free = decided(world.template, "ticket", {**TICKET, "ticket_id": "T-free", "customer": {"id": "C-1", "tier": "free"}},
                   UNSURE_TICKET)
    enterprise = decided(world.template, "ticket", {**TICKET, "ticket_id": "T-ent",
                                                    "customer": {"id": "C-2", "tier": "enterprise"}}, UNSURE_TICKET)
    world.pending(free, enterprise, decided(world.template, "incident", INCIDENT, UNSURE_INCIDENT))
    # 50 minutes on: the P1 is past due, the enterprise ticket within the last quarter of its hour.
    later = datetime.now(timezone.utc) + timedelta(minutes=50)
    monkeypatch.setattr("review_console.reviews.now", lambda: later)
    shown = console("GET", "/api/reviews")["json"]["reviews"]
    assert [(r["item_id"], r["sla"]["priority"], r["sla"]["risk"]) for r in shown] == [
        ("INC-77", "P1", "breached"), ("T-ent", "enterprise", "at_risk"), ("T-free", "free", "on_track")]
    assert [r["sla"]["target_minutes"] for r in shown] == [15, 60, 480]
    left = [r["sla"]["time_left_seconds"] for r in shown]
    assert -35 * 60 - 5 < left[0] <= -35 * 60 and 10 * 60 - 5 < left[1] <= 10 * 60
    # the oldest first, once the clock is back at the start: nothing at risk, the shorter target first
    monkeypatch.setattr("review_console.reviews.now", lambda: later - timedelta(minutes=50))
    assert [r["item_id"] for r in console("GET", "/api/reviews")["json"]["reviews"]] == ["INC-77", "T-ent", "T-free"]


SCHEDULED = {"version": "0", "id": "e-1", "source": "aws.events", "detail-type": "Scheduled Event",
             "account": "123456789012", "time": "2026-11-29T13:00:00Z", "region": "us-east-1", "resources": [], "detail": {}}


@ON_THE_STACK
def test_the_scheduled_sweep_counts_what_waits_is_at_risk_and_past_due_as_metrics(world, monkeypatch, capsys):
    enterprise = decided(world.template, "ticket", {**TICKET, "ticket_id": "T-ent",
                                                    "customer": {"id": "C-2", "tier": "enterprise"}}, UNSURE_TICKET)
    world.pending(enterprise, decided(world.template, "incident", INCIDENT, UNSURE_INCIDENT))
    monkeypatch.setattr("review_console.sla.now", lambda: datetime.now(timezone.utc) + timedelta(minutes=50))
    capsys.readouterr()
    result = world.console_function()(SCHEDULED)
    assert result["review_sla"] == {"incident": {"waiting": 1, "at_risk": 0, "breached": 1},
                                    "support-ticket": {"waiting": 1, "at_risk": 1, "breached": 0}}
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    breached = {m["policy"]: m["ReviewsBreached"] for m in emitted if "ReviewsBreached" in m}
    assert breached == {"incident": [1.0], "support-ticket": [0.0]}
    (directive,) = next(m for m in emitted if "ReviewsBreached" in m)["_aws"]["CloudWatchMetrics"]
    assert directive["Dimensions"] == [["policy"]]
    # the oldest (the incident, requested first) is 50 minutes old: one figure, no dimension
    (oldest,) = [m for m in emitted if "OldestReviewAgeSeconds" in m]
    assert 50 * 60 <= oldest["OldestReviewAgeSeconds"][0] < 51 * 60
    assert oldest["OldestReviewAgeSeconds"][0] == result["oldest_review_age_seconds"]
    assert oldest["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [[]]
    # the messages were counted, not taken: the list shows both at once
    assert len(console_listing(world)) == 2


# ---------------------------------------------------------------------------- review SLA escalations
UNSURE_P2 = {"priority": [0.1, 0.2, 0.0, 0.0], "team": [0.1, 0.3, 0.0, 0.0]}


def sweep_at(world, monkeypatch, minutes: float) -> dict:
    """The console function's scheduled sweep, its clock `minutes` after now."""
    monkeypatch.setattr("review_console.sla.now", lambda: datetime.now(timezone.utc) + timedelta(minutes=minutes))
    return world.console_function()(SCHEDULED)


def test_a_p1_at_risk_is_escalated_once_across_sweeps_with_the_workflows_fields_and_why(world, monkeypatch):
    (name,) = world.pending(decided(world.template, "incident", INCIDENT, UNSURE_INCIDENT))
    assert sweep_at(world, monkeypatch, 5)["escalated"] == [] and world.bus.events == []  # 10 of 15 minutes left

    first = sweep_at(world, monkeypatch, 12)  # under a quarter of its 15 minutes left: at risk
    assert (first["escalated"], first["not_escalated"]) == ([name], [])
    ((source, detail_type, detail),) = world.bus.events
    assert (source, detail_type) == (SWEEP_SOURCE, "Item Escalated")
    assert {k: detail[k] for k in ("item_kind", "item_id", "target", "route", "execution_name")} == {
        "item_kind": "incident", "item_id": "INC-77", "target": None, "route": "review", "execution_name": name}
    assert detail["policy"] == {"name": "incident", "version": "1"}
    assert re.fullmatch(r"review SLA at risk: [23]m left of 15m \(P1\)", detail["reason"]), detail["reason"]
    assert (detail["sla"]["risk"], detail["sla"]["priority"], detail["sla"]["target_minutes"]) == ("at_risk", "P1", 15)
    assert INCIDENT["title"] not in json.dumps(detail) and INCIDENT["description"] not in json.dumps(detail)

    # the next sweeps, at risk and then past due: paged already
    assert sweep_at(world, monkeypatch, 13)["escalated"] == [] and sweep_at(world, monkeypatch, 30)["escalated"] == []
    assert len(world.bus.events) == 1
    # and the item is still waiting for its reviewer: counted, not taken
    assert [r["execution_name"] for r in console_listing(world)] == [name]


def test_only_the_risk_and_the_priorities_the_policy_names_escalate(world, monkeypatch):
    # The shipped incident policy escalates a P1 at risk; a P2 is not paged, even past due.
    world.pending(decided(world.template, "incident", {**INCIDENT, "incident_id": "INC-2"}, UNSURE_P2))
    result = sweep_at(world, monkeypatch, 90)
    assert result["review_sla"]["incident"]["breached"] == 1 and result["escalated"] == []
    assert world.bus.events == []


def test_a_policy_without_escalate_never_escalates(world, monkeypatch):
    # The shipped ticket policy sets targets and no escalation: an enterprise ticket past due pages nobody.
    assert load_policy("support-ticket").review_sla.escalate is None  # type: ignore[union-attr]
    world.pending(decided(world.template, "ticket", {**TICKET, "customer": {"id": "C-2", "tier": "enterprise"}},
                          UNSURE_TICKET))
    for minutes in (50, 70, 600):
        result = sweep_at(world, monkeypatch, minutes)
        assert result["review_sla"]["support-ticket"]["waiting"] == 1 and result["escalated"] == []
    assert world.bus.events == []


def test_a_page_the_bus_refused_is_put_by_the_next_sweep(world, monkeypatch):
    (name,) = world.pending(decided(world.template, "incident", INCIDENT, UNSURE_INCIDENT))
    world.bus.refusing = 1
    refused = sweep_at(world, monkeypatch, 12)
    assert (refused["escalated"], refused["not_escalated"], world.bus.events) == ([], [name], [])
    # The refused sweep's claim holds off the sweeps of its own lease; the next 5-minute sweep is past it.
    assert sweep_at(world, monkeypatch, 12.5)["escalated"] == []
    world.escalations.clock = lambda: time.time() + LEASE_SECONDS + 1
    assert sweep_at(world, monkeypatch, 17)["escalated"] == [name]
    assert [(source, detail["execution_name"]) for source, _, detail in world.bus.events] == [(SWEEP_SOURCE, name)]


@ONLY_ON_THE_STACK
def test_on_the_stack_the_sweep_pages_the_on_call_through_the_escalation_rule_once(world, monkeypatch):
    """The console function's handler on its scheduled event, with the template's environment and
    role's resources: its mark in the idempotency table, its event on the decision bus, and
    ItemEscalatedRule's target (the on-call topic's stand-in in moto) receiving the page once."""
    (name,) = world.pending(decided(world.template, "incident", INCIDENT, UNSURE_INCIDENT))
    assert sweep_at(world, monkeypatch, 12)["escalated"] == [name]
    assert sweep_at(world, monkeypatch, 13)["escalated"] == []

    (page,) = world.template.rule_events("ItemEscalatedRule", "on-call")
    # target null, as the workflow's page before a review (rendered as EventBridge does: a JSON null)
    assert page["summary"] == f"Item Escalated: {name}" and page["target"] is None
    assert (page["item_id"], page["execution_name"], page["policy"], page["source"]) == (
        "INC-77", name, "incident", SWEEP_SOURCE)
    rows = boto3.client("dynamodb").scan(TableName=world.ref("IdempotencyTable"))["Items"]
    assert [(row["id"]["S"], row["state"]["S"]) for row in rows] == [(mark_key(name), "sent")]


@ONLY_ON_THE_STACK
def test_an_item_the_workflow_paged_before_its_review_is_not_paged_again_by_the_sweep(world, monkeypatch):
    """A sure P1 whose team is in doubt: the workflow paged the on-call as the review was requested."""
    world.pending(decided(world.template, "incident", INCIDENT, {**UNSURE_INCIDENT, "priority": [30.0, 0.0, 0.0, 0.0]}))
    (page,) = world.template.rule_events("ItemEscalatedRule", "on-call")
    assert page["source"] == "decision-router"  # the workflow's
    result = sweep_at(world, monkeypatch, 12)
    assert result["review_sla"]["incident"]["at_risk"] == 1 and result["escalated"] == []
    assert world.template.rule_events("ItemEscalatedRule", "on-call") == []


def console_listing(world) -> list[dict]:
    response = world.console_function()(http_event("GET", "/api/reviews", claims=ALICE))
    return json.loads(response["body"])["reviews"]


def test_the_sla_clock_starts_when_the_review_is_requested_not_while_the_item_was_held(world):
    # An incident held under its parent for two hours reaches the review state at 13:00.
    held = decided(world.template, "incident", {**INCIDENT, "reported_at": "2026-11-29T11:00:00Z"}, UNSURE_INCIDENT)
    review = PendingReview(task_token="t", execution_name="incident-x", record=held, requested_at="2026-11-29T13:00:00Z")
    summary = pending_summary(review, load_policy("incident"), datetime(2026, 11, 29, 13, 5, tzinfo=timezone.utc))
    assert summary.sla is not None and summary.sla.risk == "on_track" and summary.sla.time_left_seconds == 10 * 60


def test_a_checks_priority_is_hidden_from_its_reviewer_but_its_deadline_still_runs_on_it():
    """An incident whose automatic priority is sampled: the reviewer's view names no priority (the
    check measures it), while the summary the SLA sweep reads keeps P1's 15-minute target."""
    from decision_router.review.console import blinded

    policy = letters_only(load_policy("incident")).model_copy(update={"precision_check": PrecisionCheck(sample_rate=1.0)})
    item = parse_item("incident", INCIDENT)
    sure = {"priority": [30.0, 0.0, 0.0, 0.0], "team": [30.0] + [0.0] * (len(policy.question("team").options) - 1)}
    entries = explain(policy, item, [model_entry(q, make_result(q.id, q.option_ids, sure[q.id])) for q in policy.questions])
    record = build_record(policy, item, entries, destinations={t: f"https://sqs/{t}" for t in policy.targets},
                          review_timeout_seconds=3600)
    assert record.checked == ["priority", "team"]
    review = PendingReview(task_token="t", execution_name="incident-x", record=record, requested_at="2026-11-29T13:00:00Z")
    summary = pending_summary(review, policy, datetime(2026, 11, 29, 13, 5, tzinfo=timezone.utc))
    assert summary.sla.priority == "P1" and summary.sla.target_minutes == 15 and summary.suggested["priority"] == "P1"
    shown = blinded(summary, policy)
    assert shown.suggested == {"priority": None, "team": None} and shown.withheld == ["priority", "team"]
    assert shown.sla.priority is None and shown.sla.target_minutes == 15
    unsampled = summary.model_copy(update={"check": []})
    assert blinded(unsampled, policy) == unsampled  # a review the thresholds asked for shows its suggestion


def test_the_list_and_item_page_show_what_the_record_says_and_hide_the_task_token(world, console):
    ticket, incident = world.pending(decided(world.template, "ticket", TICKET, UNSURE_TICKET),
                                     decided(world.template, "incident", INCIDENT, UNSURE_INCIDENT))

    listing = console("GET", "/api/reviews")
    assert listing["statusCode"] == 200
    assert {r["execution_name"] for r in listing["json"]["reviews"]} == {ticket, incident}
    assert listing["json"]["kinds"] == ["incident", "ticket"] and "queue" in listing["json"]["questions"]
    assert "task_token" not in listing["body"]
    only = console("GET", "/api/reviews", query="kind=incident")["json"]["reviews"]
    assert [r["item_id"] for r in only] == ["INC-77"]

    # Opened at once after the listing: the listing hid nothing.
    item = console("GET", f"/api/reviews/{ticket}")
    assert item["statusCode"] == 200 and "task_token" not in item["body"]
    view = item["json"]
    assert view["item"]["subject"] == "Charged twice" and view["item"]["customer"] == {"id": "C-9", "tier": "pro"}
    (queue,) = view["questions"]
    assert queue["suggested"] == "billing" and queue["source"] == "model" and queue["readout"] == "letters"
    assert [o["id"] for o in queue["options"]] == ["billing", "account_access", "technical_fault", "how_to", "sales"]
    billing = queue["options"][0]
    assert billing["probability"] == pytest.approx(billing["letters"]) and billing["head"] is None
    assert billing["target"] == "billing" and "confidence" in view["reason"]
    # the reason: one line, and in full (the thresholds the letters' answer was compared with)
    assert queue["why"].startswith("letters → billing (conf ") and "0/1 rules matched" in queue["why"]
    checks = {c["name"]: c for c in queue["why_detail"]["checks"]}
    assert checks["confidence"]["value"] == pytest.approx(queue["confidence"]) and not checks["confidence"]["passed"]
    assert queue["why_detail"]["rules"] == [{"rule": "billing-portal-to-billing", "matched": False, "fired": False}]
    assert console("GET", "/api/reviews/ticket-nothing-0")["statusCode"] == 409


#: What writes a row of a DynamoDB table (a grant of any of these on the index lets its holder list a review).
TABLE_WRITES = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem", "dynamodb:*", "*"}


def grants_on(value, table: str, found: set[str], owner: str) -> None:
    """Every Allow statement under `value` that grants a write naming `table` adds `owner` to `found`."""
    if isinstance(value, list):
        for item in value:
            grants_on(item, table, found, owner)
    elif isinstance(value, dict):
        if value.get("Effect") == "Allow" and table in json.dumps(value.get("Resource")):
            actions = value.get("Action")
            if set(actions if isinstance(actions, list) else [actions]) & TABLE_WRITES:
                found.add(owner)
        for item in value.values():
            grants_on(item, table, found, owner)


def test_a_row_whose_summary_does_not_read_is_counted_not_listed_and_the_others_are(world, console):
    (real,) = world.pending(decided(world.template, "ticket", TICKET, UNSURE_TICKET))
    waiting = world.pending_reviews.get(real)
    world.pending_reviews.put(waiting.model_copy(update={"execution_name": "ticket-T-9-0123456789ab",
                                                         "summary": '{"policy": "support-ticket"}'}))

    listing = console("GET", "/api/reviews")["json"]

    assert [r["execution_name"] for r in listing["reviews"]] == [real] and listing["malformed"] == 1


def test_only_the_workflows_index_writer_may_put_a_pending_review(world):
    """Anyone who could write the pending-review index could list a made-up review ("URGENT from
    the CFO") under a token of their choosing: the index writer, which the workflow invokes with
    its own task token, is the only principal the stack lets write it."""
    writers: set[str] = set()
    for logical_id, spec in world.template.template["Resources"].items():
        grants_on(spec.get("Properties", {}), "PendingReviewsTable", writers, logical_id)
    assert writers == {"ReviewIndexWriterFunction"}


@ON_THE_STACK
def test_an_answer_is_delivered_and_audited_under_the_tokens_reviewer(world, console):
    (name,) = world.pending(decided(world.template, "ticket", TICKET, UNSURE_TICKET))

    response = console("POST", f"/api/reviews/{name}", body={"answers": {"queue": "technical_fault"}, "note": "a bug"})

    assert response["statusCode"] == 200, response["body"]
    assert response["json"] == {"status": "answered", "execution_name": name, "item_id": "T-77",
                                "reviewer": "alice@example.com", "reviewer_sub": "a-1", "answers": {"queue": "technical_fault"},
                                "target": "technical-support", "escalate": False}
    assert world.finished(name) == "SUCCEEDED"
    (message,) = world.delivered("TechnicalSupportQueue")
    assert message["item_id"] == "T-77"
    audit = world.audit_columns("T-77", name)
    assert audit["outcome"] == "reviewed"
    detail = json.loads(audit["outcome_detail"])
    assert detail["reviewer"] == "a-1" and detail["review"]["reviewer_email"] == "alice@example.com"
    outcome = console("GET", f"/api/executions/{name}")["json"]
    assert outcome == {"execution_name": name, "status": "SUCCEEDED", "item_id": "T-77", "outcome": "reviewed",
                       "target": "technical-support", "reviewer": "alice@example.com", "escalated": False}
    assert world.review_requests() == []  # its row: removed once answered
    # Answered already: nothing is pending any more.
    again = console("POST", f"/api/reviews/{name}", body={"answers": {"queue": "billing"}})
    assert again["statusCode"] == 409 and "already answered" in again["json"]["error"]


def test_answers_are_validated_and_a_reviewer_in_the_body_is_refused(world, console):
    (name,) = world.pending(decided(world.template, "ticket", TICKET, UNSURE_TICKET))
    cases = [
        ({"answers": {"queue": "billing"}, "reviewer": "mallory@example.com"}, "reviewer: Extra inputs are not permitted"),
        ({"answers": {"queue": "refunds"}}, "answers.queue: 'refunds' is not an option"),
        ({"answers": {"team": "data"}}, "policy 'support-ticket' asks no such question"),
        ({"answers": {}}, "answers: Dictionary should have at least 1 item"),
        ("not json", "the body must be JSON"),
    ]
    for body, message in cases:
        response = console("POST", f"/api/reviews/{name}", body=body)
        assert response["statusCode"] == 400 and message in response["json"]["error"], (body, response["body"])
    assert world.status(name) == "RUNNING"  # nothing was sent: the review still waits
    assert console("GET", f"/api/reviews/{name}")["statusCode"] == 200


# ---------------------------------------------------------------------------- corrections
@ON_THE_STACK
def test_a_wrong_automatic_route_is_corrected_rerouted_and_labelled(world, console):
    record = decided(world.template, "ticket", TICKET, SURE_TICKET)
    assert record.route == "auto" and record.destination.target == "billing"
    name = world.start(record)
    assert world.finished(name) == "SUCCEEDED"
    assert [m["item_id"] for m in world.delivered("BillingQueue")] == ["T-77"]

    (listed,) = console("GET", "/api/routes")["json"]["routes"]
    assert listed["execution_name"] == name and listed["target"] == "billing" and listed["corrected"] is None
    assert listed["decided"] == {"queue": "billing"} and listed["decided_by"] == {"queue": "letters"}
    page = console("GET", f"/api/routes/{name}")["json"]
    assert page["task"] == "correction" and page["questions"][0]["suggested"] == "billing"
    same = console("POST", f"/api/routes/{name}/correction", body={"answers": {"queue": "billing"}})
    assert same["statusCode"] == 400 and "is what the item was routed by" in same["json"]["error"]

    fixed = console("POST", f"/api/routes/{name}/correction", body={"answers": {"queue": "sales"}, "note": "upsell"})

    assert fixed["statusCode"] == 200, fixed["body"]
    assert fixed["json"]["execution_name"] == correction_name(record) and fixed["json"]["target"] == "sales"
    corrected = fixed["json"]["execution_name"]
    assert world.finished(corrected) == "SUCCEEDED"
    assert [m["item_id"] for m in world.delivered("SalesQueue")] == ["T-77"]
    example = world.labelled_example("support-ticket", "T-77")
    assert json.loads(example["answers"]) == {"queue": "sales"} and example["reviewer"] == "a-1"
    assert example["route_reason"].startswith("correction by alice@example.com of the automatic route to billing")
    audit = world.audit_columns("T-77", corrected)
    assert (audit["route"], audit["outcome"]) == ("correction", "reviewed")
    assert json.loads(audit["outcome_detail"])["reviewer"] == "a-1"
    (after,) = console("GET", "/api/routes")["json"]["routes"]
    assert after["corrected"]["target"] == "sales" and after["corrected"]["reviewer"] == "alice@example.com"
    twice = console("POST", f"/api/routes/{name}/correction", body={"answers": {"queue": "how_to"}})
    assert twice["statusCode"] == 409 and "already corrected" in twice["json"]["error"]


def test_an_automatic_route_delivered_without_an_execution_is_corrected_from_its_audit_row(world, console):
    from decision_router.domain.records import execution_name
    from tests.fakes.intake import FakeDirectRoutes, FakeQueue

    record = decided(world.template, "ticket", TICKET, SURE_TICKET)
    direct = FakeDirectRoutes(world.audit, FakeQueue)
    name = execution_name(record.item_kind, record.item_id, record.item_key)
    assert direct.deliver(record, name).delivered and world.status(name) is None  # no execution
    (listed,) = console("GET", "/api/routes")["json"]["routes"]
    assert listed["execution_name"] == name and listed["target"] == "billing"
    page = console("GET", f"/api/routes/{name}")
    assert page["statusCode"] == 200 and page["json"]["item_id"] == "T-77", page["body"]
    fixed = console("POST", f"/api/routes/{name}/correction", body={"answers": {"queue": "sales"}})
    assert fixed["statusCode"] == 200 and fixed["json"]["execution_name"] == correction_name(record), fixed["body"]
    assert console("GET", "/api/routes/ticket-nothing-000000000000")["statusCode"] == 409  # no such route


@ON_THE_STACK
def test_another_channels_ticket_of_the_same_id_neither_corrects_a_route_nor_replaces_its_label(world, console):
    """Ids are only unique per source: an email ticket T-500 and a web and a chat ticket T-500 are
    three items. The web one's review is no correction of the email one's automatic route, and
    each reviewed one keeps its own labelled example."""
    email = {**TICKET, "ticket_id": "T-500", "channel": "email", "subject": "Cannot log in", "body": "Locked out."}
    auto = world.start(decided(world.template, "ticket", email, SURE_TICKET))
    assert world.finished(auto) == "SUCCEEDED"
    web = {**TICKET, "ticket_id": "T-500", "channel": "web", "subject": "Invoice copy", "body": "Send me a copy."}
    chat = {**TICKET, "ticket_id": "T-500", "channel": "chat", "subject": "Refund", "body": "Refund please."}
    for other, answer in ((web, "sales"), (chat, "billing")):
        (review,) = world.pending(decided(world.template, "ticket", other, UNSURE_TICKET))
        answered = console("POST", f"/api/reviews/{review}", body={"answers": {"queue": answer}})
        assert answered["statusCode"] == 200, answered["body"]
        assert world.finished(review) == "SUCCEEDED"

    (shown,) = [r for r in console("GET", "/api/routes")["json"]["routes"] if r["execution_name"] == auto]
    assert shown["corrected"] is None  # still offered for correction
    labels = sorted((json.loads(row["item"])["channel"], json.loads(row["answers"])["queue"])
                    for row in world.labelled_examples() if row["item_id"] == "T-500")
    assert labels == [("chat", "billing"), ("web", "sales")]


def test_only_a_delivered_automatic_route_can_be_corrected(world, console):
    (name,) = world.pending(decided(world.template, "ticket", TICKET, UNSURE_TICKET))
    response = console("POST", f"/api/routes/{name}/correction", body={"answers": {"queue": "sales"}})
    assert response["statusCode"] == 409 and "only a delivered automatic route" in response["json"]["error"]


# ---------------------------------------------------------------------------- sampled checks
def sampled_ticket(stack: Stack) -> DecisionRecord:
    """A ticket the letters answer surely, under the shipped policy with every automatic answer
    sampled for a check: the real routing code holds it for review."""
    policy = letters_only(load_policy("support-ticket"))
    policy = policy.model_copy(update={"precision_check": PrecisionCheck(sample_rate=1.0)})
    env = stack.function_environment("TicketIntakeFunction")
    item = parse_item("ticket", TICKET)
    entries = explain(policy, item, [model_entry(q, make_result(q.id, q.option_ids, SURE_TICKET[q.id])) for q in policy.questions])
    return build_record(policy, item, entries, destinations=json.loads(env["DESTINATION_QUEUES"]),
                        review_timeout_seconds=3600)


@ON_THE_STACK
def test_a_sampled_automatic_answer_is_a_check_in_the_list_and_its_answer_counts_for_the_live_precision(world, console):
    record = sampled_ticket(world.template)
    assert record.route == "review" and record.checked == ["queue"]
    (name,) = world.pending(record)

    (listed,) = console("GET", "/api/reviews")["json"]["reviews"]
    assert listed["execution_name"] == name and listed["check"] == ["queue"] and listed["questions"] == ["queue"]
    # blind: the automatic answer the check measures is neither listed nor named in the reason
    assert listed["reason"].startswith("precision check") and listed["suggested"] == {"queue": None}
    assert listed["withheld"] == ["queue"] and "billing" not in json.dumps(listed)
    assert console("GET", "/api/reviews", query="question=queue")["json"]["reviews"][0]["execution_name"] == name
    page = console("GET", f"/api/reviews/{name}")["json"]
    assert page["check"] == ["queue"] and page["questions"][0]["passed"] is True
    (queue,) = page["questions"]
    assert queue["blind"] is True and queue["suggested"] is None and page["suggested"] == {"queue": None}
    # nothing that would tell it either: no probabilities, confidence, reason or ranking by the readout
    assert all(o["probability"] is None and o["letters"] is None and o["head"] is None for o in queue["options"])
    assert queue["confidence"] is None and queue["why"] is None and queue["why_detail"] is None and queue["reasons"] == []
    assert queue["ranked"] == [o["id"] for o in queue["options"]] == load_policy("support-ticket").question("queue").option_ids

    answered = console("POST", f"/api/reviews/{name}", body={"answers": {"queue": "billing"}})

    assert answered["statusCode"] == 200, answered["body"]
    assert world.finished(name) == "SUCCEEDED"
    assert [m["item_id"] for m in world.delivered("BillingQueue")] == ["T-77"]
    assert world.precision_counts("support-ticket", "queue").model_dump() == {"checked": 1, "right": 1, "corrected": 0}
    assert world.precision_counts("support-ticket", "queue", "billing").checked == 1
    audit = world.audit_columns("T-77", name)  # the audit row says the answer was sampled
    assert audit["route_reason"].startswith("precision check") and json.loads(audit["decisions"])[0]["check"] is True


def test_a_check_answered_otherwise_counts_as_wrong_and_a_correction_only_as_corrected(world, console):
    (name,) = world.pending(sampled_ticket(world.template))
    assert console("POST", f"/api/reviews/{name}", body={"answers": {"queue": "sales"}})["statusCode"] == 200
    assert world.precision_counts("support-ticket", "queue").model_dump() == {"checked": 1, "right": 0, "corrected": 0}

    routed = world.start(decided(world.template, "ticket", TICKET | {"ticket_id": "T-78"}, SURE_TICKET))
    assert world.finished(routed) == "SUCCEEDED"
    assert console("POST", f"/api/routes/{routed}/correction", body={"answers": {"queue": "sales"}})["statusCode"] == 200
    # only wrong answers are reported: a correction is counted beside the sample, never in it
    assert world.precision_counts("support-ticket", "queue").model_dump() == {"checked": 1, "right": 0, "corrected": 1}
    assert world.precision_counts("support-ticket", "queue", "billing").corrected == 1


def test_the_review_function_counts_a_checks_answer_too(world, monkeypatch):
    from review import app

    (name,) = world.pending(sampled_ticket(world.template))
    world.review_function(monkeypatch)
    message = world.pending_message()
    result = app.lambda_handler(BOB.prove({"execution_name": name, "task_token": message["task_token"],
                                           "answers": {"queue": "billing"}}), FakeLambdaContext())
    assert result["status"] == "completed"
    assert world.precision_counts("support-ticket", "queue").model_dump() == {"checked": 1, "right": 1, "corrected": 0}


# ---------------------------------------------------------------------------- export
def test_export_writes_what_review_cli_export_writes(world, console):
    (name,) = world.pending(decided(world.template, "ticket", TICKET, UNSURE_TICKET))
    assert console("POST", f"/api/reviews/{name}", body={"answers": {"queue": "billing"}})["statusCode"] == 200
    world.wait_for(lambda: world.status(name) == "SUCCEEDED", "the workflow")

    response = console("GET", "/api/export")

    assert response["statusCode"] == 200 and response["headers"]["Content-Type"].startswith("application/x-ndjson")
    assert "attachment" in response["headers"]["Content-Disposition"]
    expected = [labelled_example(row) for row in world.labelled_examples()]
    assert [json.loads(line) for line in response["body"].splitlines()] == expected
    assert expected[0] == {"policy": "support-ticket", "item": json.loads(json.dumps(parse_item("ticket", TICKET).model_dump(mode="json"))),
                           "gold": {"queue": "billing"}}
    assert console("GET", "/api/export", query="policy=incident")["body"] == ""


def test_export_comes_in_pages_each_naming_the_next(world, console, monkeypatch):
    """Attack (6 MB): the export is no longer one scan in one answer."""
    for i in range(7):
        world.put_labelled_example({
            "policy_name": "support-ticket", "item_key": f"ticket:email:T-{i}:0", "item_id": f"T-{i}", "reviewer": "a-1",
            "item": json.dumps({**TICKET, "ticket_id": f"T-{i}"}), "answers": '{"queue": "sales"}'})
    monkeypatch.setattr("decision_router.review.console.EXPORT_PAGE_ROWS", 3)  # the function runs in this process
    lines, query, pages = [], "", 0
    while True:
        response = console("GET", "/api/export", query=query)
        assert response["statusCode"] == 200
        pages += 1
        lines += response["body"].splitlines()
        token = response["headers"].get("X-Next-Page")
        if not token:
            break
        query = f"page={token}"
    assert pages >= 3 and sorted(json.loads(line)["item"]["ticket_id"] for line in lines) == [f"T-{i}" for i in range(7)]
    bad = console("GET", "/api/export", query="page=eyJ0YWJsZSI6IngifQ")
    assert bad["statusCode"] == 400 and "not a page token" in bad["json"]["error"]


# ---------------------------------------------------------------------------- the page
class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.script_text = ""
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.script_text += data.strip()


def test_the_page_comes_with_a_strict_content_security_policy_and_no_inline_script(console):
    page = console("GET", "/", claims=None)
    assert page["statusCode"] == 200 and page["headers"]["Content-Type"].startswith("text/html")
    csp = page["headers"]["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self';" in csp and "style-src 'self';" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp and "frame-ancestors 'none'" in csp
    parsed = _Tags()
    parsed.feed(page["body"])
    scripts = [attrs for tag, attrs in parsed.tags if tag == "script"]
    assert scripts == [{"type": "module", "src": "/static/console.js"}] and parsed.script_text == ""
    assert not [(tag, name) for tag, attrs in parsed.tags for name in attrs if name.startswith("on") or name == "style"]
    script = console("GET", "/static/console.js", claims=None)
    assert script["statusCode"] == 200 and script["headers"]["Content-Type"].startswith("text/javascript")
    assert console("GET", "/static/app.py", claims=None)["statusCode"] == 404
    config = console("GET", "/config", claims=None)["json"]
    assert config["sign_in"] == "cognito" and config["group"] == "reviewers" and config["client_id"]


def test_the_script_never_parses_text_as_html():
    scripts = sorted(STATIC.glob("*.js"))
    assert [s.name for s in scripts] == ["console.js", "picker.js"]
    for path in scripts:
        script = path.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in script, (path.name, sink)


@ONLY_ON_THE_STACK
def test_the_workflow_checks_a_correction_like_any_answer(world):
    """A correction whose choice the record does not offer (here: pointed at the escalation
    queue) routes nothing: the workflow dead-letters it, as it does a foreign review answer."""
    from decision_router.domain.records import Destination, ReviewChoice
    from decision_router.review.console import correction

    record = decided(world.template, "ticket", TICKET, SURE_TICKET)
    fixed = correction(record, "ticket-T-77-original", {"queue": "sales"}, reviewer_from_claims(ALICE, "reviewers"))
    forged_choice = ReviewChoice(answers={"queue": "sales"}, escalate=False,
                                 destination=Destination(target="sales", queue_url=world.ref("EscalationQueue")))
    forged = fixed.model_copy(update={"correction": fixed.correction.model_copy(update={"choice": forged_choice.wire()})})
    name = fixed.correction.execution_name
    assert WorkflowStarter(world.ref("RoutingStateMachine")).start_named(name, forged)

    assert world.finished(name) == "FAILED"
    assert world.depth("EscalationQueue") == 0 and world.depth("SalesQueue") == 0
    (dead,) = world.delivered("WorkflowDeadLetterQueue")
    assert dead["error"]["Error"] == "InvalidReviewAnswer" and dead["execution_name"] == name


# ---------------------------------------------------------------------------- duplicates linked
OUTAGE = {"incident_id": "INC-88", "title": "payments-api 5xx above 20%", "description": "payments-api answers 503",
          "service": "payments-api", "severity": "sev2", "source": "cloudwatch", "reported_at": "2026-11-29T11:55:00Z"}
OUTAGE_TICKET = {**TICKET, "ticket_id": "T-88", "subject": "Cannot pay", "body": "payments-api says 503 at checkout."}


@ON_THE_STACK
def test_a_linked_ticket_and_its_incident_show_each_other_and_the_answered_team_is_suggested(world, console):
    from decision_router.domain.linking import OpenIncident, link_ticket

    incident_record = decided(world.template, "incident", OUTAGE, UNSURE_INCIDENT)
    link = link_ticket(parse_item("ticket", OUTAGE_TICKET), [OpenIncident(
        key="arn:alarm:payments", incident_id="INC-88", service="payments-api", opened_at=OUTAGE["reported_at"],
        source=OUTAGE["source"])])
    assert link is not None
    ticket_record = decided(world.template, "ticket", OUTAGE_TICKET, UNSURE_TICKET).model_copy(update={"linked": link})
    incident, ticket = world.pending(incident_record, ticket_record)

    # The ticket's page names its incident; no suggestion while the incident's review is open.
    linked = console("GET", f"/api/reviews/{ticket}")["json"]["linked"]
    assert linked["line"] == "linked to incident INC-88 (payments-api, opened at 2026-11-29T11:55:00Z)"
    assert linked["suggestion"] is None
    # The incident's page lists the ticket, still in review.
    shown = console("GET", f"/api/reviews/{incident}")["json"]
    assert [(t["item_id"], t["state"]) for t in shown["linked_tickets"]] == [("T-88", "in review")]
    assert "linked" not in shown

    answered = console("POST", f"/api/reviews/{incident}", body={"answers": {"priority": "P2", "team": "platform"}})
    assert answered["statusCode"] == 200, answered["body"]
    assert world.finished(incident) == "SUCCEEDED"
    audit = world.audit
    (incident_row,) = audit.of_item("INC-88")
    assert incident_row.linked_incident == "null"  # audited as not linked
    # Another source's incident INC-88, answered later with another team, is another incident.
    grafana = {**json.loads(incident_row.item), "source": "grafana"}
    audit.write(incident_row.model_copy(update={
        "execution_name": "incident-INC-88-grafana", "item": json.dumps(grafana), "audited_at": "2999-01-01T00:00:00Z",
        "outcome_detail": json.dumps({"status": "reviewed", "answers": {"priority": "P2", "team": "data"}})}))

    # Now the incident's team is suggested on the ticket, and only suggested: nothing is answered.
    suggestion = console("GET", f"/api/reviews/{ticket}")["json"]["linked"]["suggestion"]
    assert (suggestion["incident_id"], suggestion["team"]) == ("INC-88", "platform")
    assert suggestion["question"] is None and suggestion["line"].endswith("not applied")
    assert world.status(ticket) == "RUNNING"

    answered = console("POST", f"/api/reviews/{ticket}", body={"answers": {"queue": "technical_fault"}})
    assert answered["statusCode"] == 200, answered["body"]
    assert world.finished(ticket) == "SUCCEEDED"
    (row,) = audit.linked_to("INC-88")
    assert row.item_id == "T-88" and row.outcome == "reviewed" and row.link() == link
    assert audit.linked_to("INC-other") == []
    # The ticket's row is in the link index (its key written), the incident's is not; both expire
    # AuditRetentionDays after their item was decided.
    assert world.audit_columns("T-88", ticket)["linked_incident_id"] == "INC-88"
    assert "linked_incident_id" not in world.audit_columns("INC-88", incident)
    days = int(world.template.function_environment("ReviewConsoleFunction")["AUDIT_RETENTION_DAYS"])
    decided_at = datetime.fromisoformat(ticket_record.decided_at)
    assert world.audit_expiry("T-88", ticket) == int((decided_at + timedelta(days=days)).timestamp())
