"""The matching rule of duplicates linked (domain/linking.py): a ticket names an open incident's
service, or describes it in its own words (the score over the incident's words, the service's
words and the policy's aliases), while the incident is open; and the team suggestion an answered
incident review gives."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from bench.linking import load
from decision_router.domain.linking import (
    LEAD,
    MAX_DESCRIPTION,
    MAX_FILED_WORDS,
    MAX_TITLE,
    THRESHOLD,
    OpenIncident,
    bounded,
    candidates,
    filing_keys,
    incident_terms,
    link_score,
    link_scores,
    link_ticket,
    lookup_keys,
    names_in,
    service_pattern,
    stem,
    suggestion,
    trouble_in,
    words,
)
from decision_router.domain.policies import Policy, load_policy
from decision_router.items import Ticket

OPENED = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def _ticket(subject: str = "Checkout broken", body: str = "Nothing works.", at: datetime = OPENED + timedelta(minutes=5)) -> Ticket:
    return Ticket(ticket_id="T-1", subject=subject, body=body, customer={"id": "C-1", "tier": "pro"},
                  channel="email", created_at=at)


def _incident(service: str = "payments-api", incident_id: str = "INC-1", opened: datetime = OPENED,
              resolved: datetime | None = None, source: str | None = None, title: str | None = None,
              description: str | None = None) -> OpenIncident:
    return OpenIncident(key=f"key-{incident_id}", incident_id=incident_id, service=service, opened_at=opened,
                        resolved_at=resolved, source=source, title=title, description=description)


def _checkout(**extra) -> OpenIncident:
    return _incident(service="checkout-api", incident_id="checkout-api-5xx-high",
                     title="CloudWatch alarm checkout-api-5xx-high is in ALARM",
                     description="Checkout API 5xx rate above 5%: customers cannot pay.", **extra)


def _search(**extra) -> OpenIncident:
    return _incident(service="search-service", incident_id="search-latency-p99",
                     title="CloudWatch alarm search-latency-p99 is in ALARM",
                     description="Product search p99 latency above 3 seconds: search results slow or empty.", **extra)


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


# ----------------------------------------------------------------------------- described, not named
def test_words_split_names_drop_stop_words_and_numbers_and_meet_their_forms():
    assert words("checkout-api") == ["checkout"]  # `api` says nothing of which service
    assert words("Checkout keeps FAILING, we cannot pay since 12:05!") == ["checkout", "keep", "fail", "pay"]
    assert words("the db is up") == []  # too short to tell anything apart, as a service name is
    assert [stem(w) for w in ("payments", "failed", "stopped", "billing", "pages")] == [
        "payment", "fail", "stop", "bill", "page"]


def test_an_incidents_terms_weigh_the_service_and_its_aliases_above_its_alarm_words():
    terms = incident_terms(_checkout(), aliases=["payment page"])
    assert terms["checkout"] == terms["payment"] == terms["page"] == 1.0
    assert terms["pay"] == terms["customer"] == 0.5
    assert "api" not in terms and "alarm" not in terms and "5xx" not in terms


def test_the_score_saturates_spreads_over_open_incidents_and_halves_without_trouble():
    terms = {"checkout": 1.0, "pay": 0.5}
    assert link_score(["checkout", "pay"], terms, trouble="failing").value == 0.6  # S = 1.5
    assert link_score(["checkout"], terms, trouble="failing").value == 0.5  # S = 1
    assert link_score(["checkout"], terms).value == 0.33  # no trouble reported: S = 0.5
    assert link_score(["checkout"], terms, {"checkout": 2}, trouble="down").value == 0.33  # two outages share it
    assert link_score(["invoice"], terms, trouble="down").value == 0.0
    assert trouble_in("Checkout keeps failing") == "failing" and trouble_in("can't pay") == "can't"
    assert trouble_in("How do I change the checkout currency?") is None


def test_a_ticket_describing_an_open_incident_in_its_own_words_is_linked_with_the_score_and_words():
    ticket = _ticket(subject="checkout keeps failing", body="we cannot pay")
    link = link_ticket(ticket, [_checkout(), _search()])
    assert link is not None and link.incident_id == "checkout-api-5xx-high"
    assert link.why == (f"the ticket describes it (score 0.60 \u2265 {THRESHOLD:.2f}: 'checkout', 'pay'; "
                        "trouble: 'failing') and it was created while it was open")
    assert link.reason() == f"{link.line()}: {link.why}"


def test_near_misses_are_not_linked():
    open_now = [_checkout(), _search()]
    question = _ticket(subject="Checkout currency", body="How do I change the currency shown at checkout to EUR?")
    assert link_ticket(question, open_now) is None  # the same product, no trouble
    unrelated = _ticket(subject="Delete my account", body="Please delete my account and all my data.")
    assert link_ticket(unrelated, open_now) is None
    other = link_ticket(_ticket(subject="Search is slow", body="Product search results are empty and slow."), open_now)
    assert other is not None and other.incident_id == "search-latency-p99"  # the other outage, not checkout's


def test_a_described_incident_is_linked_only_while_it_is_open():
    ticket = _ticket(subject="checkout keeps failing", body="we cannot pay", at=OPENED - LEAD - timedelta(minutes=1))
    assert link_ticket(ticket, [_checkout()]) is None


def test_the_policys_aliases_count_as_the_services_own_words():
    ticket = _ticket(subject="Payment page broken", body="The payment page shows an error.")
    assert link_ticket(ticket, [_checkout()]) is None
    link = link_ticket(ticket, [_checkout()], {"checkout-api": ["payment page"]})
    assert link is not None and "'page', 'payment'" in link.why


def test_naming_the_service_wins_over_a_better_description_of_another():
    named = _incident(service="orders-db", incident_id="INC-ORD", opened=OPENED - timedelta(hours=1))
    ticket = _ticket(subject="checkout keeps failing", body="we cannot pay, and orders-db is slow")
    link = link_ticket(ticket, [_checkout(), named])
    assert link is not None and link.incident_id == "INC-ORD" and "body names 'orders-db'" in link.why


def test_of_two_described_incidents_the_higher_score_wins_whatever_the_order():
    ticket = _ticket(subject="Search is slow", body="Product search results are empty and slow; checkout fails, we cannot pay.")
    first = link_ticket(ticket, [_checkout(), _search()])
    assert first is not None and first.incident_id == "search-latency-p99" and "best of 2" in first.why
    assert link_ticket(ticket, [_search(), _checkout()]) == first
    found = link_scores(ticket, [_checkout(), _search()])
    assert found[1].value > found[0].value >= THRESHOLD


def test_the_incidents_text_is_bounded_at_a_words_end():
    assert bounded("a" * 10, 20) == "a" * 10 and bounded("  ", 5) is None and bounded(None, 5) is None
    cut = bounded("word " * 300, MAX_DESCRIPTION)
    assert cut is not None and len(cut) <= MAX_DESCRIPTION and cut.endswith("word")
    with pytest.raises(ValueError, match="at most 200 characters"):
        _incident(title="t" * (MAX_TITLE + 1))


def _ticket_policy(**extra) -> dict:
    return {**load_policy("support-ticket").model_dump(mode="json", exclude_none=True), **extra}


def test_a_ticket_policy_declares_aliases_and_bad_ones_are_named():
    policy = Policy.model_validate(_ticket_policy(service_aliases={"checkout-api": ["checkout", "payment page"]}))
    assert policy.service_aliases == {"checkout-api": ["checkout", "payment page"]}
    with pytest.raises(ValueError, match=r"service_aliases\['checkout-api'\]\[1\]: 'the api' has only stop words"):
        Policy.model_validate(_ticket_policy(service_aliases={"checkout-api": ["checkout", "the api"]}))
    with pytest.raises(ValueError, match=r"service_aliases\['checkout-api'\]: alias 'checkout' appears more than once"):
        Policy.model_validate(_ticket_policy(service_aliases={"checkout-api": ["checkout", "Checkout"]}))
    with pytest.raises(ValueError, match=r"service_aliases.checkout-api\s+List should have at least 1 item"):
        Policy.model_validate(_ticket_policy(service_aliases={"checkout-api": []}))


def test_an_incident_policy_cannot_declare_aliases():
    incident = {**load_policy("incident").model_dump(mode="json", exclude_none=True),
                "service_aliases": {"checkout-api": ["checkout"]}}
    with pytest.raises(ValueError, match="service_aliases: the ticket intake reads them to link tickets; they apply "
                                         "to ticket policies only"):
        Policy.model_validate(incident)


# ------------------------------------------------------------------ the link index (filing and lookup keys)
NAMING_TEXTS = ["payments-api returns 500", "Is PAYMENTS-API down?", "errors from payments-api.", "(payments-api) fails",
                "payments-api-v2 is down", "my.payments-api", "payments-api.eu is down", "payments-api..", "payments_api"]


@pytest.mark.parametrize("text", NAMING_TEXTS)
@pytest.mark.parametrize("service", ["payments-api", "payments-api.eu", "my.payments-api", "payments_api"])
def test_a_ticket_looks_up_exactly_the_names_the_rule_would_find(text, service):
    """`names_in` finds a name exactly where `service_pattern` does: the lookup misses no named incident."""
    pattern = service_pattern(service)
    assert pattern is not None
    assert (service.lower() in names_in(text)) == bool(pattern.search(text))


def _index(incidents: list[OpenIncident]) -> dict[str, dict[str, datetime]]:
    filed: dict[str, dict[str, datetime]] = {}
    for incident in incidents:
        for key in filing_keys(incident.service, incident.title, incident.description):
            filed.setdefault(key, {})[incident.key] = incident.opened_at
    return filed


def _looked_up(ticket: Ticket, incidents: list[OpenIncident], aliases=None) -> list[OpenIncident]:
    filed, by_key = _index(incidents), {incident.key: incident for incident in incidents}
    chosen = candidates(ticket, {key: filed[key] for key in lookup_keys(ticket, aliases) if key in filed})
    return [by_key[key] for key in chosen]


def test_an_incident_is_filed_under_its_name_and_first_salient_words():
    keys = filing_keys("Checkout-API", "CloudWatch alarm checkout-api-5xx-high is in ALARM",
                       "Checkout API 5xx rate above 5%: customers cannot pay.")
    assert keys == ["name#checkout-api", "word#checkout", "word#customer", "word#pay"]
    long = filing_keys("search", description=" ".join(f"word{n:02}x" for n in range(40)))
    assert len(long) == 1 + MAX_FILED_WORDS and long[1] == "word#search" and long[-1] == "word#word14x"


def test_a_ticket_looks_up_aliased_services_names_and_its_words():
    ticket = _ticket(subject="Payment page broken at app.example", body="The payment page on app-server fails")
    keys = lookup_keys(ticket, {"checkout-api": ["payment page"], "search-service": ["finder"]})
    assert keys[:3] == ["name#checkout-api", "name#app-server", "name#app.example"]
    assert keys[3:] == ["word#payment", "word#page", "word#broken", "word#example", "word#fail", "name#the"]


def test_candidates_put_named_incidents_first_drop_those_reported_after_the_lead_and_cap():
    ticket = _ticket(at=OPENED)
    soon, late = OPENED + LEAD, OPENED + LEAD + timedelta(seconds=1)
    filed = {"name#checkout-api": {"named": OPENED - timedelta(hours=1)},
             "word#checkout": {"named": OPENED, "two-words": OPENED, "newest": soon, "too-late": late},
             "word#pay": {"two-words": OPENED}}
    assert candidates(ticket, filed) == ["named", "two-words", "newest"]
    assert candidates(ticket, filed, limit=2) == ["named", "two-words"]


@pytest.mark.parametrize("case", load(), ids=lambda case: case.ticket.ticket_id)
def test_the_lookup_links_every_labelled_ticket_as_the_full_comparison_does(case):
    """On events/linking/: the same link, and the same scores for the incidents looked up (the
    spread counts the same incidents), as `link_ticket` over every open incident of the case."""
    found = _looked_up(case.ticket, list(case.incidents), case.aliases)
    assert link_ticket(case.ticket, found, case.aliases) == link_ticket(case.ticket, case.incidents, case.aliases)
    full = dict(zip((i.key for i in case.incidents), link_scores(case.ticket, case.incidents, case.aliases)))
    assert all(full[i.key] == s for i, s in zip(found, link_scores(case.ticket, found, case.aliases)))


def test_what_the_lookup_misses_an_incident_described_only_past_its_filed_words():
    filler = " ".join(f"metric{n:02}z" for n in range(MAX_FILED_WORDS))
    incident = _incident(service="ledger-writer", description=f"{filler} invoices missing duplicated")
    ticket = _ticket(subject="Invoices missing", body="Our invoices are missing or duplicated since this morning.")
    assert link_ticket(ticket, [incident]) is not None  # the full comparison links it
    assert _looked_up(ticket, [incident]) == []  # "invoice" and "missing" were never filed
