"""Correlation and the noise controls in the fast tier: the incident intake's own code
(`intake/incidents.py`, `noise_holds.py`, `resolutions.py`) over the in-memory fakes of the
open-incident store, the audit trail, the dead-letter queue, CloudWatch's alarm states and the
workflow (`tests/fakes/`, each held to its adapter by a contract test), with a deterministic
sequence of alarms of one service. The endpoint answers every question with confident letters:
the model is not what is tested. tests/infra/test_noise_property.py holds these properties over
random streams on the stack in moto.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from aws_lambda_powertools import Logger, Metrics
from moto import mock_aws

from decision_router.domain.linking import MAX_DESCRIPTION
from decision_router.domain.policies import load_policy
from decision_router.intake.incidents import IncidentIntake
from decision_router.intake.pipeline import Intake
from local.cloudwatch import alarm_states_in
from tests.fakes.intake import FakeEndpoint
from tests.fakes.worlds import FakeWorld
from tests.infra.test_noise_property import cloudwatch

#: A Monday: no maintenance window of the shipped policy holds checkout-api then.
MONDAY = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)
#: The first option of each incident question, confidently (what is held, grouped or routed is the point).
CONFIDENT = {"priority": [6.0, 0.0, 0.0, 0.0], "team": [6.0, 0.0, 0.0, 0.0]}
#: The hidden state the shipped heads ask for, of their width; from the fake's own model, so the
#: heads are skipped and the confident letters decide, as the test means.
HIDDEN = [0.0] * max(q.learned_head.hidden_size or 1 for q in load_policy("incident").questions if q.learned_head)


def alarm(name: str, severity: str, state: str, minute: int, n: int, service: str = "checkout-api",
          day: datetime = MONDAY) -> dict:
    """The alarm's EventBridge state change `minute` minutes into `day` (the property test's builder)."""
    return cloudwatch(name, service, severity, state, day + timedelta(minutes=minute), n)


@pytest.fixture
def world():
    with mock_aws():  # a net: a call no fake answers fails at once
        yield FakeWorld()


@pytest.fixture
def incidents(world, monkeypatch):
    env = world.environment("IncidentIntakeFunction")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    logger, metrics = Logger(service="test"), Metrics(namespace="Test")
    wiring = world.wiring("IncidentIntakeFunction", endpoint=FakeEndpoint(CONFIDENT, hidden_state=HIDDEN), env=env)
    yield IncidentIntake(Intake("incident", logger=logger, metrics=metrics, wiring=wiring), logger=logger, metrics=metrics)
    metrics.clear_metrics()  # Powertools keeps one metric set per process: never flushed here, so never left for the next test


def audited(world: FakeWorld, outcome: str) -> list:
    """The audit rows of this outcome the intake wrote itself (held incidents, resolved groups)."""
    return world.audit.recent(outcome)


def deliver(flow: IncidentIntake, event: dict, late_minutes: int = 0) -> dict:
    for arn, state in alarm_states_in(event):  # CloudWatch says what the event says (an OK is confirmed by it)
        flow.wiring.alarm_states.set(arn, state)
    at = datetime.strptime(event["detail"]["state"]["timestamp"], "%Y-%m-%dT%H:%M:%S.000+0000").replace(tzinfo=timezone.utc)
    flow.clock = lambda: at + timedelta(minutes=late_minutes)
    (outcome,) = flow.handle(event)["outcomes"]
    return outcome


def test_a_critical_alarm_after_a_lower_one_of_its_service_pages_and_leads_the_group(incidents, world):
    low = deliver(incidents, alarm("disk-70", "low", "ALARM", 0, 1))
    assert low["outcome"] == "routed"
    critical = deliver(incidents, alarm("errors-5xx", "critical", "ALARM", 2, 2))
    assert critical["outcome"] == "routed", critical  # never held under a less severe leader
    assert "leads the group from now on" in critical["reason"]
    medium = deliver(incidents, alarm("latency-p99", "medium", "ALARM", 4, 3))
    assert medium["outcome"] == "grouped" and medium["leader_incident_id"] == critical["incident_id"]
    assert "pages nobody again" in medium["reason"]
    [row] = audited(world, "grouped")
    assert row.item_id == medium["incident_id"] and row.route == "held"


def test_a_redelivery_is_a_duplicate_and_a_new_event_of_an_open_incident_updates_it(incidents, world):
    first = alarm("errors-5xx", "high", "ALARM", 0, 1)
    assert deliver(incidents, first)["outcome"] == "routed"
    assert deliver(incidents, first)["outcome"] == "duplicate"
    again = alarm("errors-5xx", "high", "ALARM", 1, 2)
    assert deliver(incidents, again)["outcome"] == "updated"


def test_a_group_is_resolved_when_its_last_member_is(incidents, world):
    leader = deliver(incidents, alarm("errors-5xx", "high", "ALARM", 0, 1))
    member = deliver(incidents, alarm("latency-p99", "medium", "ALARM", 3, 2))
    assert member["outcome"] == "grouped"
    first_ok = deliver(incidents, alarm("errors-5xx", "high", "OK", 20, 3))
    assert first_ok["outcome"] == "resolved" and "stays open" in first_ok["reason"]
    last_ok = deliver(incidents, alarm("latency-p99", "medium", "OK", 25, 4))
    assert last_ok["outcome"] == "resolved" and "the group of 2 is resolved" in last_ok["reason"]
    assert last_ok["execution_name"] == leader["execution_name"]
    [row] = audited(world, "group_resolved")
    assert row.item_id == leader["incident_id"]


def test_an_ok_cloudwatch_does_not_confirm_resolves_nothing(incidents, world):
    deliver(incidents, alarm("errors-5xx", "high", "ALARM", 0, 1))
    forged = alarm("errors-5xx", "high", "OK", 5, 2)
    incidents.clock = lambda: MONDAY + timedelta(minutes=5)
    (outcome,) = incidents.handle(forged)["outcomes"]  # CloudWatch still says ALARM
    assert outcome["outcome"] == "ignored" and "not resolved: CloudWatch says the alarm is ALARM now" in outcome["reason"]
    assert outcome["touched_open_incident"] is True


def test_an_alarm_that_keeps_reopening_is_held_as_flapping(incidents, world):
    outcomes = []
    for i in range(5):  # opens at minutes 0, 12, 24, 36, 48 (after the grouping window), each resolved
        outcomes.append(deliver(incidents, alarm("errors-5xx", "high", "ALARM", 12 * i, 2 * i))["outcome"])
        deliver(incidents, alarm("errors-5xx", "high", "OK", 12 * i + 5, 2 * i + 1))
    assert outcomes[:3] == ["routed"] * 3 and outcomes[3:] == ["flapping", "flapping"]


def test_a_maintenance_window_holds_an_incident_until_it_ends_then_the_sweep_routes_it_once(incidents, world):
    sunday = datetime(2026, 11, 29, 2, 30, tzinfo=timezone.utc)  # 02:30 Dublin: inside the patching window
    held = deliver(incidents, alarm("replica-lag", "high", "ALARM", 0, 1, service="orders-db", day=sunday))
    assert held["outcome"] == "suppressed" and held["window"] == "orders-db-sunday-patching"
    incidents.clock = lambda: sunday + timedelta(hours=1)  # still inside
    assert incidents.sweep_holds()["outcomes"] == []
    incidents.clock = lambda: sunday + timedelta(hours=2)  # the window ended at 04:00
    swept = incidents.sweep_holds()["outcomes"]
    assert [o["outcome"] for o in swept] == ["routed"]
    assert incidents.sweep_holds()["outcomes"] == []  # once


def test_an_opened_alarm_keeps_its_title_and_description_for_the_tickets_that_describe_it(incidents, world):
    event = alarm("errors-5xx", "high", "ALARM", 0, 1)
    assert deliver(incidents, event)["outcome"] == "routed"
    (incident,) = world.open_incidents.open_incidents(list(world.open_incidents.rows))  # every row, read by key
    assert incident.title == "CloudWatch alarm errors-5xx is in ALARM"
    assert incident.description is not None and len(incident.description) <= MAX_DESCRIPTION
    assert incident.description.startswith("Share of 5xx responses from the checkout API load balancer")
