"""The matching rule of duplicates linked (domain/linking.py): a ticket names an open incident's
service while the incident is open; and the team suggestion an answered incident review gives."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from decision_router.domain.linking import LEAD, OpenIncident, link_ticket, service_pattern, suggestion
from decision_router.items import Ticket

OPENED = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def _ticket(subject: str = "Checkout broken", body: str = "Nothing works.", at: datetime = OPENED + timedelta(minutes=5)) -> Ticket:
    return Ticket(ticket_id="T-1", subject=subject, body=body, customer={"id": "C-1", "tier": "pro"},
                  channel="email", created_at=at)


def _incident(service: str = "payments-api", incident_id: str = "INC-1", opened: datetime = OPENED,
              resolved: datetime | None = None, source: str | None = None) -> OpenIncident:
    return OpenIncident(key=f"key-{incident_id}", incident_id=incident_id, service=service, opened_at=opened,
                        resolved_at=resolved, source=source)


@pytest.mark.parametrize("text", [
    "payments-api returns 500", "Is PAYMENTS-API down?", "errors from payments-api.", "(payments-api) fails",
    "calls to payments-api, then nothing",
])
def test_the_service_named_as_a_whole_word_in_any_case(text):
    assert service_pattern("payments-api").search(text)


@pytest.mark.parametrize("text", [
    "payments are failing", "payments-api-v2 is slow", "new-payments-api is slow", "mypayments-api",
    "my.payments-api.internal", "payments_api",
])
def test_a_longer_name_or_a_part_of_it_does_not_name_the_service(text):
    assert not service_pattern("payments-api").search(text)


def test_a_name_too_short_never_matches():
    assert service_pattern("db") is None
    assert link_ticket(_ticket(body="the db is down"), [_incident(service="db")]) is None


def test_a_ticket_naming_an_open_incidents_service_links_to_it_with_why():
    link = link_ticket(_ticket(body="Since noon payments-api answers 503."), [_incident()])
    assert link is not None
    assert (link.incident_id, link.incident_key, link.service) == ("INC-1", "key-INC-1", "payments-api")
    assert link.opened_at == "2026-11-29T12:00:00Z"
    assert "body names 'payments-api'" in link.why and "while it was open" in link.why
    assert link.line() == "linked to incident INC-1 (payments-api, opened at 2026-11-29T12:00:00Z)"


def test_the_subject_counts_as_the_body_does():
    link = link_ticket(_ticket(subject="Payments-API outage?"), [_incident()])
    assert link is not None and "subject" in link.why


def test_a_ticket_not_naming_the_service_is_not_linked():
    assert link_ticket(_ticket(body="My invoice is wrong."), [_incident()]) is None


@pytest.mark.parametrize(("minutes", "linked"), [
    (-LEAD.total_seconds() / 60 - 1, False),  # before the lead allowance
    (-LEAD.total_seconds() / 60, True),  # exactly at its start
    (-5, True),  # customers write in before the alarm fires
    (0, True),
    (600, True),  # still open: no end
])
def test_created_from_the_lead_before_the_incident_opened(minutes, linked):
    ticket = _ticket(body="payments-api is down", at=OPENED + timedelta(minutes=minutes))
    assert (link_ticket(ticket, [_incident()]) is not None) is linked


def test_a_ticket_created_after_the_resolution_is_not_linked():
    resolved = OPENED + timedelta(hours=1)
    incident = _incident(resolved=resolved)
    assert link_ticket(_ticket(body="payments-api", at=resolved), [incident]) is not None
    assert link_ticket(_ticket(body="payments-api", at=resolved + timedelta(seconds=1)), [incident]) is None


def test_the_most_recently_opened_of_several_wins():
    older = _incident(incident_id="INC-1", opened=OPENED - timedelta(hours=2))
    newer = _incident(incident_id="INC-2", opened=OPENED)
    other = _incident(service="orders-db", incident_id="INC-3", opened=OPENED + timedelta(minutes=1))
    link = link_ticket(_ticket(body="payments-api is failing"), [newer, other, older])
    assert link is not None and link.incident_id == "INC-2"
    assert "latest of 2 matching incidents" in link.why
    assert link_ticket(_ticket(body="payments-api is failing"), [older, newer]) == link  # order does not matter


def test_no_open_incidents_no_link():
    assert link_ticket(_ticket(body="payments-api"), []) is None


def test_an_answered_incident_suggests_its_team_where_a_ticket_question_offers_it():
    questions = [("queue", ["billing", "technical_fault"]), ("owner", ["platform", "data"])]
    offered = suggestion("INC-1", {"priority": "P2", "team": "platform"}, questions)
    assert offered is not None and (offered.team, offered.question, offered.option) == ("platform", "owner", "platform")
    assert "suggested (owner: platform), not applied" in offered.line()
    shown = suggestion("INC-1", {"team": "security"}, questions)
    assert shown is not None and shown.question is None and shown.option is None
    assert "no option of the ticket's questions" in shown.line()
    assert suggestion("INC-1", {"priority": "P2"}, questions) is None
    assert suggestion("INC-1", None, questions) is None


# ---------------------------------------------------------------------------- the console's views of links
def _row(item_id: str, execution: str, outcome: str, audited_at: str, *, linked: str | None = None,
         answers: dict | None = None):
    import json

    from decision_router.domain.records import AuditRow

    return AuditRow(item_id=item_id, execution_name=execution, item_kind="ticket", outcome=outcome,
                    outcome_detail=json.dumps({"status": outcome, **({"answers": answers} if answers else {})}),
                    route="review", route_reason="r", policy_name="p", policy_version="1", decisions="[]",
                    item="{}", decided_at=audited_at, audited_at=audited_at, linked_incident=linked)


def test_an_incidents_page_lists_the_audited_tickets_linked_to_it_once_each():
    from decision_router.review.console import linked_tickets

    link = link_ticket(_ticket(body="payments-api"), [_incident()])
    assert link is not None
    rows = [_row("T-1", "ticket-T-1-a", "reviewed", "2026-11-29T12:10:00Z", linked=link.model_dump_json()),
            _row("T-2", "ticket-T-2-a", "auto_routed", "2026-11-29T12:11:00Z", linked="null"),
            _row("T-3", "ticket-T-3-a", "auto_routed", "2026-11-29T12:12:00Z"),  # from before links were kept
            _row("T-4", "ticket-T-4-a", "auto_routed", "2026-11-29T12:13:00Z", linked="{not json")]
    assert linked_tickets("INC-1", [], rows) == [
        {"execution_name": "ticket-T-1-a", "item_id": "T-1", "state": "reviewed", "why": link.why}]
    assert linked_tickets("INC-2", [], rows) == []


def test_the_latest_answered_review_of_the_incident_gives_the_suggestion():
    from decision_router.domain.policies import load_policy
    from decision_router.review.console import answered_team

    policy = load_policy("support-ticket")
    assert answered_team("INC-1", [_row("INC-1", "x", "review_overdue", "2026-11-29T12:00:00Z")], policy) is None
    rows = [_row("INC-1", "b", "reviewed", "2026-11-29T13:00:00Z", answers={"team": "data"}),
            _row("INC-1", "a", "reviewed", "2026-11-29T12:00:00Z", answers={"team": "platform"})]
    offered = answered_team("INC-1", rows, policy)
    assert offered is not None and offered.team == "data" and offered.question is None


def test_a_link_names_its_incident_by_source_and_id_and_an_older_link_by_id():
    from decision_router.review.console import linked_tickets

    link = link_ticket(_ticket(body="payments-api"), [_incident(source="cloudwatch")])
    assert link is not None and link.source == "cloudwatch" and link.ref() == "incident:cloudwatch:INC-1"
    older = link.model_copy(update={"source": None})  # kept before links named their source
    rows = [_row("T-1", "ticket-T-1-a", "reviewed", "2026-11-29T12:10:00Z", linked=link.model_dump_json()),
            _row("T-2", "ticket-T-2-a", "reviewed", "2026-11-29T12:11:00Z", linked=older.model_dump_json())]
    assert [t["item_id"] for t in linked_tickets("INC-1", [], rows, incident_ref="incident:cloudwatch:INC-1")] == [
        "T-1", "T-2"]
    # Grafana's INC-1 is another incident: the cloudwatch link is not its; the older one, by id alone, is.
    assert [t["item_id"] for t in linked_tickets("INC-1", [], rows, incident_ref="incident:grafana:INC-1")] == ["T-2"]
