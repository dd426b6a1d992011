"""The review SLA (domain/review_sla.py): the policy's targets, validated with precise errors, and
where a pending item stands against its target."""

import json

import pytest

from decision_router.domain.policies import POLICY_DIR, PolicyError, load_policy
from decision_router.domain.review_sla import ReviewSla, escalation_reason, sla_order, sla_status
from decision_router.review.console import PendingSummary
from review_console.sla import oldest_age_seconds
from tests.functions.test_policies import load_changed

INCIDENT = json.loads((POLICY_DIR / "incident.json").read_text())
TICKET = json.loads((POLICY_DIR / "support-ticket.json").read_text())


def test_the_shipped_policies_read_an_incidents_priority_answer_and_a_tickets_tier():
    incident, ticket = load_policy("incident").review_sla, load_policy("support-ticket").review_sla
    assert incident is not None and ticket is not None
    assert incident.priority_of({"severity": "sev3"}, {"priority": "P1", "team": "data"}) == "P1"
    assert incident.target_minutes("P1", "data") == 15 and incident.target_minutes(None, None) == 240
    assert ticket.priority_of({"customer": {"id": "C", "tier": "enterprise"}}, {"queue": "billing"}) == "enterprise"
    assert ticket.priority_of({"customer": None}, {}) is None
    assert ticket.target_minutes("enterprise", None) == 60


@pytest.mark.parametrize(
    ("raw", "sla", "message"),
    [
        (INCIDENT, {"default_minutes": 240, "priority": {"question": "urgency"}, "by_priority": {"P1": 15}},
         "review_sla.priority.question: the policy asks no question 'urgency' (questions: priority, team)"),
        (INCIDENT, {"default_minutes": 240, "priority": {"question": "priority"}, "by_priority": {"P0": 5}},
         "review_sla.by_priority['P0']: not a priority the policy can give (allowed: P1, P2, P3, P4)"),
        (INCIDENT, {"default_minutes": 240, "priority": {"field": "severity"}, "by_priority": {"sev9": 5}},
         "review_sla.by_priority['sev9']: not a priority the policy can give (allowed: sev1, sev2, sev3, sev4)"),
        (TICKET, {"default_minutes": 240, "priority": {"field": "customer.plan"}, "by_priority": {"pro": 5}},
         "review_sla.priority.field: ticket has no field 'customer.plan': no field 'plan' (fields here: id, tier)"),
        (TICKET, {"default_minutes": 240, "by_queue": {"refunds": 30}},
         "review_sla.by_queue['refunds']: not an option of the routing question (options: billing, "),
        (TICKET, {"default_minutes": 240, "by_priority": {"pro": 5}},
         "by_priority needs priority (a question or an item field to read the priority from)"),
        (TICKET, {"default_minutes": 240, "priority": {"field": "customer.tier", "question": "queue"}},
         "give exactly one of question (its suggested answer) or field (an item field)"),
        (TICKET, {"default_minutes": 240, "priority": {"field": "customer.tier"}, "by_priority": {"pro": 0}},
         "by_priority['pro']: 0 minutes; a target is 1 to 43200 minutes"),
        (TICKET, {"default_minutes": 0}, "review_sla.default_minutes: Input should be greater than or equal to 1"),
        (TICKET, {"default_minutes": 60, "at_risk_share": 1.5}, "review_sla.at_risk_share: Input should be less than 1"),
        (TICKET, {"default_minutes": 60, "minutes": 5}, "review_sla.minutes: Extra inputs are not permitted"),
        (INCIDENT, {**INCIDENT["review_sla"], "escalate": {"when": "soon"}},
         "review_sla.escalate.when: Input should be 'at_risk' or 'breached'"),
        (INCIDENT, {**INCIDENT["review_sla"], "escalate": {}}, "review_sla.escalate.when: Field required"),
        (INCIDENT, {**INCIDENT["review_sla"], "escalate": {"when": "at_risk", "priorities": ["P0", "P1"]}},
         "review_sla.escalate.priorities['P0']: not a priority the policy can give (allowed: P1, P2, P3, P4)"),
        (INCIDENT, {**INCIDENT["review_sla"], "escalate": {"when": "at_risk", "priorities": []}},
         "review_sla.escalate.priorities: List should have at least 1 item"),
        (INCIDENT, {**INCIDENT["review_sla"], "escalate": {"when": "at_risk", "after_minutes": 5}},
         "review_sla.escalate.after_minutes: Extra inputs are not permitted"),
        (TICKET, {"default_minutes": 60, "escalate": {"when": "breached", "priorities": ["enterprise"]}},
         "escalate.priorities needs priority (a question or an item field to read the priority from)"),
    ],
)
def test_a_bad_review_sla_fails_with_a_precise_error(tmp_path, raw, sla, message):
    with pytest.raises(PolicyError) as info:
        load_changed(tmp_path, raw, lambda p: p.update(review_sla=sla))
    assert message in str(info.value)


def test_a_queue_target_applies_when_it_is_the_shorter_promise():
    sla = ReviewSla(default_minutes=240, priority={"field": "customer.tier"}, by_priority={"pro": 120},
                    by_queue={"billing": 30})
    assert sla.target_minutes("pro", "billing") == 30 and sla.target_minutes("pro", "sales") == 120
    assert sla.target_minutes("free", "billing") == 30 and sla.target_minutes("free", "sales") == 240


def test_an_item_is_at_risk_in_the_last_share_of_its_target_and_breached_once_due():
    sla = ReviewSla(default_minutes=60, at_risk_share=0.25)
    assert sla_status(sla, None, None, 44 * 60).risk == "on_track"
    at_risk = sla_status(sla, None, None, 46 * 60)
    assert at_risk.risk == "at_risk" and at_risk.time_left_seconds == 14 * 60
    breached = sla_status(sla, None, None, 61 * 60)
    assert breached.risk == "breached" and breached.time_left_seconds == -60


def test_the_order_is_breach_risk_then_the_shorter_target_then_age():
    sla = ReviewSla(default_minutes=240, priority={"question": "priority"}, by_priority={"P1": 15, "P2": 60})
    items = {  # name: (priority, age in minutes)
        "old-p3-on-track": ("P3", 100), "p2-at-risk": ("P2", 50), "p1-on-track": ("P1", 5),
        "p3-breached": ("P3", 300), "p1-breached": ("P1", 16), "young-p3-on-track": ("P3", 10)}
    ordered = sorted(items, key=lambda name: sla_order(sla_status(sla, items[name][0], None, items[name][1] * 60),
                                                       items[name][1] * 60))
    assert ordered == ["p1-breached", "p3-breached", "p2-at-risk", "p1-on-track", "old-p3-on-track", "young-p3-on-track"]
    # without a target (a policy with no review_sla): after every item that has one, oldest first
    assert sla_order(None, 9999.0) > sla_order(sla_status(sla, "P3", None, 0.0), 0.0)
    assert sla_order(None, 20.0) < sla_order(None, 10.0)


def test_the_shipped_incident_policy_escalates_a_p1_at_risk_and_the_ticket_policy_nothing():
    incident, ticket = load_policy("incident").review_sla, load_policy("support-ticket").review_sla
    assert incident is not None and ticket is not None
    assert incident.escalate is not None and (incident.escalate.when, incident.escalate.priorities) == ("at_risk", ["P1"])
    assert ticket.escalate is None


@pytest.mark.parametrize(
    ("escalate", "priority", "minutes", "expected"),
    [
        (None, "P1", 16, False),  # no escalate: never, even past due
        ({"when": "at_risk"}, "P1", 10, False),  # 5 of 15 minutes left: on track
        ({"when": "at_risk"}, "P1", 12, True),  # 3 left: at risk
        ({"when": "at_risk"}, "P3", 300, True),  # past due is past at risk
        ({"when": "breached"}, "P1", 12, False),
        ({"when": "breached"}, "P1", 15, True),
        ({"when": "at_risk", "priorities": ["P1"]}, "P2", 59, False),  # a priority not named
        ({"when": "at_risk", "priorities": ["P1"]}, None, 300, False),  # no priority read
        ({"when": "at_risk", "priorities": ["P1", "P2"]}, "P2", 50, True),
    ],
)
def test_an_item_escalates_once_it_reaches_the_named_risk_in_a_named_priority(escalate, priority, minutes, expected):
    sla = ReviewSla(default_minutes=240, priority={"question": "priority"}, by_priority={"P1": 15, "P2": 60},
                    escalate=escalate)
    assert sla.escalates(sla_status(sla, priority, None, minutes * 60)) is expected


def test_the_reason_says_the_risk_the_time_left_or_past_due_the_target_and_the_priority():
    sla = ReviewSla(default_minutes=240, priority={"question": "priority"}, by_priority={"P2": 60})
    assert escalation_reason(sla_status(sla, "P2", None, 48 * 60)) == "review SLA at risk: 12m left of 60m (P2)"
    assert escalation_reason(sla_status(sla, "P2", None, 125 * 60)) == "review SLA breached: 1h 5m past due of 60m (P2)"
    assert escalation_reason(sla_status(sla, None, None, 200 * 60)) == "review SLA at risk: 40m left of 240m"


def waiting_for(age_seconds: float | None) -> PendingSummary:
    return PendingSummary(execution_name=f"x-{age_seconds}", item_kind="ticket", item_id="T-1", policy="support-ticket",
                          headline="h", reason="r", questions=["queue"], suggested={"queue": None},
                          requested_at=None if age_seconds is None else "2026-11-29T12:00:00Z",
                          age_seconds=age_seconds, timeout_seconds=3600)


def test_the_oldest_age_is_the_longest_wait_and_zero_when_none_waits():
    """What ReviewAgeAlarm reads: 0 with nothing waiting (the alarm resolves), and a row whose
    request time did not read (no age) is not taken for a fresh review."""
    assert oldest_age_seconds([]) == 0.0
    assert oldest_age_seconds([waiting_for(None)]) == 0.0
    assert oldest_age_seconds([waiting_for(60.0), waiting_for(None), waiting_for(7200.0), waiting_for(600.0)]) == 7200.0
