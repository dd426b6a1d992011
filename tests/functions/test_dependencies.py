"""Dependencies and inhibition in the fast tier: the policy's `dependencies` as data
(domain/dependencies.py: a cycle refused naming it, an undeclared service a warning), and the
incident intake's own code (`intake/dependency_holds.py`, `incidents.py`, `resolutions.py`) over
the in-memory fakes, with one smoke test on the stack in moto: while the orders database's
incident is open and paged, its dependents' new incidents are held under it (no page, linked on
both rows, audited with the parent named); its resolution routes those still open; a child's own
resolution closes it; a chain follows the service in between. tests/infra/test_noise_property.py
holds these properties over random dependency graphs."""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from aws_lambda_powertools import Logger, Metrics
from moto import mock_aws

from decision_router.adapters.review import AuditTrail
from decision_router.domain.dependencies import Dependencies, ParentEntry, find_cycle, may_hold
from decision_router.domain.policies import PolicyError, load_policy
from decision_router.intake.incidents import IncidentIntake
from decision_router.intake.pipeline import Intake
from decision_router.items import parse_item
from local.cloudwatch import play_alarm_states
from tests.fakes.intake import FakeAlarmStates, FakeEndpoint
from tests.fakes.worlds import FakeWorld, MotoWorld
from tests.functions.conftest import policy_files_beside
from tests.functions.test_correlation import HIDDEN, MONDAY, alarm
from tests.functions.test_correlation import deliver as deliver_on_fakes
from tests.infra.test_noise_property import grafana

POLICY = load_policy("incident")
ARN = "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:"


def policy_with(tmp_path, **dependencies) -> str:
    """The shipped incident policy with these `dependencies` settings, its learned heads left out:
    the endpoint's letters decide each incident as a test answers it, so which one pages (and so
    may hold its dependants) is the test's to say."""
    raw = POLICY.model_dump(mode="json", by_alias=True, exclude_none=True)
    for question in raw["questions"]:
        question.pop("head", None)
    raw["dependencies"] = {**raw["dependencies"], **dependencies}
    path = tmp_path / "incident.json"
    path.write_text(json.dumps(raw))
    policy_files_beside(tmp_path)
    return str(path)


# ----------------------------------------------------------------------------- the policy
@pytest.mark.parametrize("services, cycle", [
    ({"a": ["b"], "b": ["c"], "c": ["a"]}, "a -> b -> c -> a"),
    ({"a": ["a"]}, "a -> a"),
    ({"x": [], "a": ["x", "b"], "b": ["a"]}, "a -> b -> a"),
])
def test_a_dependency_cycle_is_refused_naming_the_cycle(tmp_path, services, cycle):
    with pytest.raises(PolicyError, match=f"dependencies.services: a cycle {cycle} "):
        load_policy(policy_with(tmp_path, services=services))


def test_an_undeclared_service_in_a_dependency_is_a_warning_not_an_error(tmp_path):
    policy = load_policy(policy_with(tmp_path, services={"checkout": ["orders-bd"], "orders-db": []}))
    assert policy.warnings == ["dependencies.services 'checkout': depends on 'orders-bd', a service the policy does "
                               "not declare (declare it with \"orders-bd\": [] if it depends on nothing)"]
    assert load_policy("incident").warnings == []


def test_an_inhibition_rule_naming_an_unknown_field_is_refused(tmp_path):
    rule = {"id": "r", "description": "d", "source": [{"field": "service", "equals": "x"}],
            "target": [{"field": "service", "equals": "y"}], "equal": ["evidence.nope"]}
    with pytest.raises(PolicyError, match="dependencies.inhibit 'r' equal: incident has no field"):
        load_policy(policy_with(tmp_path, inhibit=[rule]))


def test_dependencies_are_refused_on_a_ticket_policy(tmp_path):
    raw = load_policy("support-ticket").model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["dependencies"] = {"services": {"a": []}}
    path = tmp_path / "support-ticket.json"
    path.write_text(json.dumps(raw))
    policy_files_beside(tmp_path)
    with pytest.raises(PolicyError, match="dependencies: they apply to incidents only"):
        load_policy(path)


def test_slots_meet_parents_and_children_and_severity_decides_what_may_be_held(incident_data):
    deps = Dependencies.model_validate({"services": {"db": [], "api": ["db"], "web": ["api"]}, "inhibit": [
        {"id": "region-down", "description": "d", "source": [{"field": "source", "equals": "aws.health"}],
         "target": [{"field": "source", "equals": "aws.cloudwatch"}], "equal": ["service"]}]})
    db = parse_item("incident", {**incident_data, "service": "db", "source": "aws.health"})
    api = parse_item("incident", {**incident_data, "service": "api", "source": "aws.cloudwatch"})
    assert [s.slot for s in deps.parent_slots(db)] == ["parent#service#db", deps.inhibit[0].slot(db)]
    assert [c.slot for c in deps.candidates(api)] == ["parent#service#db", deps.inhibit[0].slot(api)]
    assert deps.inhibit[0].slot(db) != deps.inhibit[0].slot(api)  # equal: their services differ
    assert [s.slot for s in deps.parent_slots(api)] == ["parent#service#api"] and deps.candidates(db) == []
    web = parse_item("incident", {**incident_data, "service": "web", "source": "aws.health"})
    assert [c.slot for c in deps.candidates(web)] == ["parent#service#api", "parent#service#db"]  # nearest first
    assert find_cycle({"db": [], "api": ["db"], "web": ["api", "db"]}) is None
    assert may_hold("sev3", "sev2", False) and may_hold("sev2", "sev2", False)
    assert not may_hold("sev2", "sev3", False)  # more severe than its parent: it pages
    assert not may_hold("sev1", "sev1", False) and may_hold("sev1", "sev1", True)


# ----------------------------------------------------------------------------- the flow
@pytest.fixture
def world(request):
    with mock_aws():
        yield MotoWorld() if getattr(request, "param", "fakes") == "moto" else FakeWorld()


ON_THE_STACK = pytest.mark.parametrize("world", ["fakes", pytest.param("moto", marks=pytest.mark.stack)], indirect=True)


#: Each incident decided P1 (it pages) surely enough to pass the shipped priority threshold: a
#: parent holds its dependants only once it paged.
PAGES = {"priority": [20.0, 0.0, 0.0, 0.0], "team": [6.0, 0.0, 0.0, 0.0]}


def make_flow(world, monkeypatch, policy: str | None = None) -> IncidentIntake:
    env = {**world.environment("IncidentIntakeFunction"), "POLICY_NAME": policy or policy_with(Path(tempfile.mkdtemp()))}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    logger, metrics = Logger(service="test"), Metrics(namespace="Test")
    wiring = world.wiring("IncidentIntakeFunction", endpoint=FakeEndpoint(PAGES, hidden_state=HIDDEN), env=env)
    return IncidentIntake(Intake("incident", logger=logger, metrics=metrics, wiring=wiring), logger=logger, metrics=metrics)


@pytest.fixture
def incidents(world, monkeypatch):
    yield make_flow(world, monkeypatch)
    Metrics(namespace="Test").clear_metrics()


def deliver(flow: IncidentIntake, event: dict) -> dict:
    """The event delivered, CloudWatch first set to the state it says (in moto, or its fake)."""
    if isinstance(flow.wiring.alarm_states, FakeAlarmStates):
        return deliver_on_fakes(flow, event)
    play_alarm_states(event)
    (outcome,) = flow.handle(event)["outcomes"]
    return outcome


def row(flow: IncidentIntake, name: str):
    return flow.store.get(ARN + name)


@ON_THE_STACK
def test_dependents_of_a_paged_database_incident_are_held_then_routed_when_it_resolves(incidents, world):
    db = deliver(incidents, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    assert db["outcome"] == "routed"
    checkout = deliver(incidents, alarm("checkout-5xx", "medium", "ALARM", 1, 2, service="checkout"))
    payments = deliver(incidents, alarm("payments-5xx", "high", "ALARM", 1, 3, service="payments-api"))
    for child in (checkout, payments):
        assert child["outcome"] == "held" and child["held_under"] == ARN + "orders-db-cpu", child
        assert child["reason"].startswith(f"held under orders-db incident {db['incident_id']}, opened 09:00")
    assert len(world.executions()) == 1  # one page: nothing started for the held, so no deadline runs
    assert set(row(incidents, "orders-db-cpu").held_children) == {ARN + "checkout-5xx", ARN + "payments-5xx"}
    assert row(incidents, "checkout-5xx").held_under == ARN + "orders-db-cpu"
    trail = AuditTrail(world.ref("AuditTable")) if isinstance(world, MotoWorld) else world.audit
    audit = [r for r in trail.recent("held") if r.item_id == checkout["incident_id"]]
    (held,) = audit
    detail = json.loads(held.outcome_detail)
    assert detail["parent_incident_id"] == db["incident_id"] and detail["why"]["held_under"] == db["incident_id"]

    own = deliver(incidents, alarm("payments-5xx", "high", "OK", 10, 4, service="payments-api"))
    assert own["outcome"] == "resolved" and "nobody was paged for it" in own["reason"]
    parent = deliver(incidents, alarm("orders-db-cpu", "high", "OK", 20, 5, service="orders-db"))
    assert parent["outcome"] == "resolved"
    (released,) = parent["released"]  # payments-api resolved itself: only checkout is still open
    assert released["key"] == ARN + "checkout-5xx" and released["outcome"] == "routed"
    assert released["released_after"] == db["incident_id"]
    record = world.executions()[released["execution_name"]]
    assert record.item_id == checkout["incident_id"]
    assert f'"released_after": "{db["incident_id"]}"' in json.dumps(record.model_dump(mode="json"))  # its why
    assert len(world.executions()) == 2
    assert row(incidents, "checkout-5xx").execution_name == released["execution_name"]


def test_a_held_incident_holds_nothing_so_a_chain_holds_under_the_paged_ancestor(incidents, world):
    """search depends on checkout, which depends on orders-db: with checkout held, search is held
    under the paged orders-db incident itself, never under a held one."""
    deliver(incidents, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    checkout = deliver(incidents, alarm("checkout-5xx", "medium", "ALARM", 1, 2, service="checkout"))
    search = deliver(incidents, alarm("search-latency", "medium", "ALARM", 2, 3, service="search"))
    assert checkout["outcome"] == "held" and search["outcome"] == "held"
    assert search["held_under"] == ARN + "orders-db-cpu"  # checkout, held, covers nothing
    assert row(incidents, "checkout-5xx").held_children == []
    parent = deliver(incidents, alarm("orders-db-cpu", "high", "OK", 20, 4, service="orders-db"))
    released = {r["key"]: r for r in parent["released"]}
    assert released[ARN + "checkout-5xx"]["outcome"] == "routed"  # it pages now
    # search, released next, finds checkout paged: held under it (its nearest dependency)
    assert released[ARN + "search-latency"]["outcome"] == "held"
    assert released[ARN + "search-latency"]["held_under"] == ARN + "checkout-5xx"
    ok = deliver(incidents, alarm("checkout-5xx", "medium", "OK", 30, 5, service="checkout"))
    (again,) = ok["released"]
    assert again["key"] == ARN + "search-latency" and again["outcome"] == "routed"


def test_a_held_middle_that_resolves_releases_nothing_while_the_root_holds_its_dependants(incidents, world):
    deliver(incidents, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    deliver(incidents, alarm("checkout-5xx", "medium", "ALARM", 1, 2, service="checkout"))
    deliver(incidents, alarm("search-latency", "medium", "ALARM", 2, 3, service="search"))
    ok = deliver(incidents, alarm("checkout-5xx", "medium", "OK", 5, 4, service="checkout"))
    assert ok["released"] == []  # checkout held nothing: search waits under orders-db
    assert row(incidents, "search-latency").held_under == ARN + "orders-db-cpu"
    parent = deliver(incidents, alarm("orders-db-cpu", "high", "OK", 10, 5, service="orders-db"))
    assert [(r["key"], r["outcome"]) for r in parent["released"]] == [(ARN + "search-latency", "routed")]


def test_a_sev1_child_or_one_more_severe_than_its_parent_pages(incidents, world):
    deliver(incidents, alarm("orders-db-cpu", "medium", "ALARM", 0, 1, service="orders-db"))
    assert deliver(incidents, alarm("checkout-down", "critical", "ALARM", 1, 2, service="checkout"))["outcome"] == "routed"
    assert deliver(incidents, alarm("payments-5xx", "high", "ALARM", 1, 3, service="payments-api"))["outcome"] == "routed"
    assert deliver(incidents, alarm("inventory-lag", "low", "ALARM", 1, 4, service="inventory"))["outcome"] == "held"


def test_a_sev1_child_is_held_where_the_policy_says_so(world, monkeypatch, tmp_path):
    flow = make_flow(world, monkeypatch, policy_with(tmp_path, include_sev1=True))
    deliver(flow, alarm("orders-db-down", "critical", "ALARM", 0, 1, service="orders-db"))
    assert deliver(flow, alarm("checkout-down", "critical", "ALARM", 1, 2, service="checkout"))["outcome"] == "held"
    Metrics(namespace="Test").clear_metrics()


def test_an_inhibition_rule_holds_targets_whose_equal_fields_match(world, monkeypatch, tmp_path):
    rule = {"id": "db-holds-grafana", "description": "an orders-db alarm holds Grafana alerts as severe as it",
            "source": [{"field": "service", "equals": "orders-db"}], "target": [{"field": "source", "equals": "grafana"}],
            "equal": ["severity"]}
    flow = make_flow(world, monkeypatch, policy_with(tmp_path, services={}, inhibit=[rule]))
    deliver(flow, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))

    def alert(name: str, severity: str, n: int) -> dict:
        at = MONDAY + timedelta(minutes=n)
        flow.clock = lambda: at
        (outcome,) = flow.handle(grafana(name, "checkout", severity, "ALARM", at, at, n))["outcomes"]
        return outcome

    held = alert("checkout-errors", "high", 2)
    assert held["outcome"] == "held" and held["rule"] == "db-holds-grafana", held
    assert alert("checkout-warnings", "medium", 3)["outcome"] == "routed"  # not equal: another severity
    assert deliver(flow, alarm("checkout-5xx", "high", "ALARM", 4, 4, service="checkout"))["outcome"] == "routed"
    Metrics(namespace="Test").clear_metrics()


def test_a_parent_resolved_after_it_registered_holds_nothing(incidents, world):
    """A slot entry left behind (its resolution failed half way): the link to the parent's row is
    refused, so the child is not held: it pages."""
    incidents.store.register_parent("parent#service#orders-db", ParentEntry(
        key=ARN + "gone", incident_id="INC-gone", service="orders-db", severity="sev1",
        opened_at=(MONDAY - timedelta(hours=1)).isoformat()))
    assert deliver(incidents, alarm("checkout-5xx", "medium", "ALARM", 1, 2, service="checkout"))["outcome"] == "routed"


def test_a_resolution_retried_after_its_release_failed_releases_again(incidents, world):
    deliver(incidents, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    deliver(incidents, alarm("checkout-5xx", "medium", "ALARM", 1, 2, service="checkout"))
    ok = alarm("orders-db-cpu", "high", "OK", 20, 3, service="orders-db")
    real = incidents.intake.route

    def failing(*args, **kwargs):
        raise RuntimeError("the workflow cannot be reached")

    incidents.intake.route = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        deliver(incidents, ok)
    assert row(incidents, "checkout-5xx").execution_name is None and row(incidents, "checkout-5xx").status == "open"
    incidents.intake.route = real  # type: ignore[method-assign]
    again = deliver(incidents, ok)  # Lambda retries the event
    assert again["outcome"] == "resolved" and [r["key"] for r in again["released"]] == [ARN + "checkout-5xx"]
    assert row(incidents, "checkout-5xx").execution_name is not None


def test_a_released_child_meets_grouping_as_it_would_have_when_it_opened(incidents, world):
    """Released, a child joins the group its service's paged incident leads (one page for the
    service, as grouping would have had it when it opened)."""
    leader = deliver(incidents, alarm("checkout-5xx", "medium", "ALARM", 0, 1, service="checkout"))
    assert leader["outcome"] == "routed"
    deliver(incidents, alarm("orders-db-cpu", "high", "ALARM", 1, 2, service="orders-db"))
    assert deliver(incidents, alarm("checkout-latency", "medium", "ALARM", 2, 3, service="checkout"))["outcome"] == "held"
    parent = deliver(incidents, alarm("orders-db-cpu", "high", "OK", 5, 4, service="orders-db"))
    (released,) = parent["released"]
    assert released["outcome"] == "grouped" and released["leader"] == ARN + "checkout-5xx"
    assert row(incidents, "checkout-latency").group is not None


def test_a_database_incident_a_window_held_covers_nothing_until_the_window_ends_and_it_pages(incidents, world):
    sunday = datetime(2026, 11, 29, 2, 30, tzinfo=timezone.utc)  # 02:30 Dublin: the orders-db patching window
    held = deliver(incidents, alarm("orders-db-lag", "high", "ALARM", 0, 1, service="orders-db", day=sunday))
    assert held["outcome"] == "suppressed"
    during = deliver(incidents, alarm("checkout-5xx", "medium", "ALARM", 5, 2, service="checkout", day=sunday))
    assert during["outcome"] == "routed"  # nobody was paged for orders-db: checkout's page is the only one
    incidents.clock = lambda: sunday + timedelta(hours=2)  # the window ended at 04:00: the sweep pages orders-db
    assert [o["outcome"] for o in incidents.sweep_holds()["outcomes"]] == ["routed"]
    after = deliver(incidents, alarm("payments-5xx", "medium", "ALARM", 125, 3, service="payments-api", day=sunday))
    assert after["outcome"] == "held" and after["held_under"] == ARN + "orders-db-lag"


def test_the_intake_logs_a_policy_warning_when_it_loads_the_policy(world, monkeypatch, tmp_path, caplog):
    flow = make_flow(world, monkeypatch, policy_with(tmp_path, services={"checkout": ["orders-bd"]}))
    with caplog.at_level("WARNING"):
        assert flow.intake.policy.dependencies.services == {"checkout": ["orders-bd"]}
    (warning,) = [r for r in caplog.records if r.getMessage() == "policy warning"]
    assert "depends on 'orders-bd', a service the policy does not declare" in warning.__dict__["warning"]
    Metrics(namespace="Test").clear_metrics()


# ----------------------------------------------------------------------------- what covers, and for how long
P1, P3, UNSURE = [8.0, 0.0, 0.0, 0.0], [0.0, 0.0, 8.0, 0.0], [1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("parent_answer, parent_route", [(P3, "auto"), (UNSURE, "review")], ids=["P3", "in-review"])
def test_a_parent_that_paged_nobody_holds_nothing_so_a_p1_child_pages(world, monkeypatch, tmp_path, parent_answer,
                                                                     parent_route):
    """The review's D1: an orders-db incident routed as P3 (a team queue, no page), or waiting
    in review, held a sev2 checkout incident the model calls P1; nobody was paged."""
    flow = make_flow(world, monkeypatch, policy_with(tmp_path))
    flow.intake.wiring.endpoint.answer("priority", parent_answer, where={"service": "orders-db"})
    flow.intake.wiring.endpoint.answer("priority", P1, where={"service": "checkout"})
    db = deliver(flow, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    assert (db["outcome"], db["route"], db["escalate"]) == ("routed", parent_route, False)
    child = deliver(flow, alarm("checkout-5xx", "high", "ALARM", 1, 2, service="checkout"))
    assert (child["outcome"], child.get("escalate")) == ("routed", True), child  # paged
    assert row(flow, "orders-db-cpu").paged_by is None
    Metrics(namespace="Test").clear_metrics()


def test_a_paged_parent_holds_and_is_marked_with_the_execution_that_paged(incidents, world):
    db = deliver(incidents, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    assert db["escalate"] and row(incidents, "orders-db-cpu").paged_by == db["execution_name"]
    assert deliver(incidents, alarm("checkout-5xx", "high", "ALARM", 1, 2, service="checkout"))["outcome"] == "held"


TWO_SIDED = {"id": "db-holds-grafana", "description": "an orders-db alarm holds Grafana alerts as severe as it",
             "source": [{"field": "service", "equals": "orders-db"}],
             "target": [{"field": "source", "equals": "grafana"}], "equal": ["severity"]}


def test_alerts_matching_both_sides_of_a_rule_never_hold_each_other(world, monkeypatch, tmp_path):
    """The review's D2: two Grafana orders-db alerts (source and target of the rule alike) held
    under a CloudWatch orders-db alarm re-held each other when it resolved; neither paged."""
    flow = make_flow(world, monkeypatch, policy_with(tmp_path, services={}, inhibit=[TWO_SIDED]))

    def alert(name: str, state: str, minute: int, n: int) -> dict:
        at = MONDAY + timedelta(minutes=minute)
        flow.clock = lambda: at
        (outcome,) = flow.handle(grafana(name, "orders-db", "high", state, at, at, n))["outcomes"]
        return outcome

    deliver(flow, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    assert alert("orders-db-conn-errors", "ALARM", 1, 2)["outcome"] == "held"  # one-sided source: it holds
    assert alert("orders-db-replica-lag", "ALARM", 2, 3)["outcome"] == "held"
    ok = deliver(flow, alarm("orders-db-cpu", "high", "OK", 20, 4, service="orders-db"))
    # Neither is held under the other: the first pages, the second joins its group (grouping's one page).
    assert [r["outcome"] for r in ok["released"]] == ["routed", "grouped"]
    later = alert("orders-db-deadlocks", "ALARM", 30, 5)
    assert later["outcome"] == "routed"  # two-sided, like the paged one: it is not held under it
    assert not [row for row in (flow.store.get(k) for k in flow.store.rows if not k.startswith(("parent#", "group#", "lookup#")))
                if row.status == "open" and row.held_by_parent]
    Metrics(namespace="Test").clear_metrics()


def test_a_parent_resolving_between_its_childs_mark_and_link_still_releases_it(world, monkeypatch):
    """The review's D3: the parent's OK handled (by another invocation) right after the child's
    link: the child, marked before it was linked, is released by that resolution and pages."""
    flow, other = make_flow(world, monkeypatch), make_flow(world, monkeypatch)
    deliver(flow, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    real_link = type(flow.store).link_child
    raced: dict = {}

    def link_then_parent_resolves(store, parent_key, child_key):
        linked = real_link(store, parent_key, child_key)
        if not raced:
            raced["ok"] = deliver(other, alarm("orders-db-cpu", "high", "OK", 1, 3, service="orders-db"))
        return linked

    monkeypatch.setattr(type(flow.store), "link_child", link_then_parent_resolves)
    deliver(flow, alarm("checkout-5xx", "medium", "ALARM", 1, 2, service="checkout"))
    monkeypatch.setattr(type(flow.store), "link_child", real_link)
    assert [r["key"] for r in raced["ok"]["released"]] == [ARN + "checkout-5xx"]
    assert row(flow, "checkout-5xx").execution_name is not None  # routed: it paged
    Metrics(namespace="Test").clear_metrics()


def test_a_parent_resolving_before_its_childs_link_refuses_it_and_the_child_is_decided_at_once(world, monkeypatch):
    flow, other = make_flow(world, monkeypatch), make_flow(world, monkeypatch)
    deliver(flow, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    real_link = type(flow.store).link_child

    def parent_resolves_then_link(store, parent_key, child_key):
        deliver(other, alarm("orders-db-cpu", "high", "OK", 1, 3, service="orders-db"))
        return real_link(store, parent_key, child_key)

    monkeypatch.setattr(type(flow.store), "link_child", parent_resolves_then_link)
    child = deliver(flow, alarm("checkout-5xx", "medium", "ALARM", 1, 2, service="checkout"))
    monkeypatch.setattr(type(flow.store), "link_child", real_link)
    assert child["outcome"] == "routed" and row(flow, "checkout-5xx").held_under is None
    Metrics(namespace="Test").clear_metrics()


def test_a_hold_ends_at_its_ceiling_and_the_sweep_routes_the_child_saying_so(incidents, world):
    deliver(incidents, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    deliver(incidents, alarm("checkout-5xx", "medium", "ALARM", 1, 2, service="checkout"))
    incidents.clock = lambda: MONDAY + timedelta(minutes=30)  # 29 min held: not yet
    assert incidents.sweep_holds()["outcomes"] == []
    incidents.clock = lambda: MONDAY + timedelta(minutes=31)
    (swept,) = incidents.sweep_holds()["outcomes"]
    assert swept["key"] == ARN + "checkout-5xx" and swept["outcome"] == "routed"
    assert "held 30 min, the ceiling of a hold" in swept["reason"]
    record = world.executions()[swept["execution_name"]]
    assert "the ceiling of a hold" in json.dumps(record.model_dump(mode="json"))  # its why says so
    assert row(incidents, "orders-db-cpu").status == "open"  # the parent is still open: not held again


def test_a_hold_under_a_parent_that_is_gone_ends_at_the_next_sweep_or_event(incidents, world):
    """The review's E1: an erased parent (its row gone) left its child held for ever."""
    deliver(incidents, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    deliver(incidents, alarm("checkout-5xx", "medium", "ALARM", 1, 2, service="checkout"))
    deliver(incidents, alarm("payments-5xx", "medium", "ALARM", 1, 3, service="payments-api"))
    del incidents.store.rows[ARN + "orders-db-cpu"]  # as `make erase` removes it
    again = deliver(incidents, alarm("checkout-5xx", "medium", "ALARM", 5, 4, service="checkout"))
    assert again["outcome"] == "routed" and "its parent incident is gone" in again["reason"]
    (swept,) = incidents.sweep_holds()["outcomes"]
    assert swept["key"] == ARN + "payments-5xx" and swept["outcome"] == "routed"


def test_a_held_child_whose_severity_rises_past_its_parent_pages_at_once(incidents, world):
    deliver(incidents, alarm("orders-db-cpu", "medium", "ALARM", 0, 1, service="orders-db"))
    assert deliver(incidents, alarm("checkout-5xx", "low", "ALARM", 1, 2, service="checkout"))["outcome"] == "held"
    same = deliver(incidents, alarm("checkout-5xx", "low", "ALARM", 2, 3, service="checkout"))
    assert same["outcome"] == "updated"  # still as severe as before: still held
    rose = deliver(incidents, alarm("checkout-5xx", "high", "ALARM", 3, 4, service="checkout"))
    assert rose["outcome"] == "routed" and "its severity rose to sev2" in rose["reason"]


def test_dependencies_and_rules_that_could_hold_each_other_are_refused_naming_both(tmp_path):
    rule = {"id": "checkout-holds-db", "description": "d", "source": [{"field": "service", "equals": "checkout"}],
            "target": [{"field": "service", "in": ["orders-db", "search"]}]}
    with pytest.raises(PolicyError, match="dependency checkout -> orders-db and inhibition rule 'checkout-holds-db' "
                                          "together can hold an incident A under B and B under A"):
        load_policy(policy_with(tmp_path, inhibit=[rule]))
    load_policy(policy_with(tmp_path, inhibit=[TWO_SIDED]))  # its own two sides: excluded, so it loads


def item_escalated(record, execution_name: str, n: int = 1) -> dict:
    """The workflow's page for a record (its PutItemEscalated state's event, as EventBridge delivers it)."""
    return {"version": "0", "id": f"escalated-{n}", "detail-type": "Item Escalated", "source": "decision-router",
            "account": "123456789012", "time": "2026-11-30T09:05:00Z", "region": "eu-west-1", "resources": [],
            "detail": {"item_kind": record.item_kind, "item_id": record.item_id, "item": record.item,
                       "target": "data-oncall", "route": record.route, "policy": record.policy.model_dump(mode="json"),
                       "decisions": [], "execution_name": execution_name}}


@ON_THE_STACK
def test_a_parent_in_review_holds_nothing_until_its_reviewers_answer_pages(world, monkeypatch, tmp_path):
    flow = make_flow(world, monkeypatch, policy_with(tmp_path))
    flow.intake.wiring.endpoint.answer("priority", UNSURE, where={"service": "orders-db"})
    db = deliver(flow, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    assert db["route"] == "review" and not db["escalate"]
    assert deliver(flow, alarm("checkout-5xx", "medium", "ALARM", 1, 2, service="checkout"))["outcome"] == "routed"
    # the reviewer answered P1: the workflow paged
    paged = flow.handle(item_escalated(world.executions()[db["execution_name"]], db["execution_name"]))
    assert paged["outcome"] == "paged" and paged["key"] == ARN + "orders-db-cpu", paged
    assert row(flow, "orders-db-cpu").paged_by == db["execution_name"]
    held = deliver(flow, alarm("payments-5xx", "medium", "ALARM", 6, 3, service="payments-api"))
    assert held["outcome"] == "held" and held["held_under"] == ARN + "orders-db-cpu"
    Metrics(namespace="Test").clear_metrics()


def test_a_page_for_no_open_incident_that_may_hold_others_is_ignored_with_the_reason(incidents, world):
    db = deliver(incidents, alarm("orders-db-cpu", "high", "ALARM", 0, 1, service="orders-db"))
    event = item_escalated(world.executions()[db["execution_name"]], "an-execution-of-another-incident")
    ignored = incidents.handle(event)
    assert ignored["outcome"] == "ignored" and "paged for no open incident that may hold others" in ignored["reason"]
    event["detail"]["item_kind"] = "ticket"
    assert incidents.handle(event)["reason"] == "an Item Escalated event names no incident and execution: nothing to cover"
