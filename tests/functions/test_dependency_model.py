"""A held incident is never a lost page: the incident intake's dependency holds run step by step
against a small reference model of what must happen, over random dependency graphs and
inhibition rules (overlapping ones included), with Hypothesis's stateful testing.

The model knows, for each incident, what is true whatever the code does: whether it is open,
whether it would page on its own (a sev1, or a service the endpoint calls P1), and which
incidents a page went out for (the executions that escalated). After every step each open
incident must be:
- routed (an execution started for it) or held under a parent, never neither;
- held only under a parent that is open, was paged (its decision escalated, or its reviewer's
  answer did) and is not held itself (never under a resolved, missing, non-paging or held one);
- held as a sev1 only where a rule includes sev1s;
- held no longer than the ceiling, as of the last sweep;
- when it was routed and would have paged, paged.

Steps: an incident opens (a CloudWatch alarm or a Grafana alert), resolves, fires again (as
severe, or more), its parent resolves between its mark and its link, a review is answered (an
answer that escalates is paged by the workflow, whose `Item Escalated` the intake takes), the
hold's ceiling is reached (the schedule's sweep), an incident is erased (its row and its slot
entries, as `make erase` removes them, then the sweep).

The fast tier runs the intake on the in-memory fakes (the fake store is held to its adapter by
tests/fakes/test_contract_intake.py); the same machine runs a few examples on the stack in moto
(the real adapter, and `ops.erase` itself), marked `stack`.
"""

from __future__ import annotations

import functools
import json
import tempfile
import unittest
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import boto3
import pytest
from aws_lambda_powertools import Metrics
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from moto import mock_aws

from decision_router.domain.dependencies import Dependencies
from decision_router.domain.policies import load_policy
from tests.fakes.worlds import FakeWorld, MotoWorld
from tests.functions.test_correlation import MONDAY, alarm
from tests.functions.test_dependencies import deliver, item_escalated, make_flow
from tests.infra.test_noise_property import grafana

SERVICES = ["db", "api", "web", "cache"]
SOURCES = {"cloudwatch": "aws.cloudwatch", "grafana": "grafana"}
SEVERITIES = {"critical": "sev1", "high": "sev2", "medium": "sev3", "low": "sev4"}  # the shipped tables
LOGITS = {"P1": [8.0, 0.0, 0.0, 0.0], "P3": [0.0, 0.0, 8.0, 0.0], "review": [1.0, 1.0, 1.0, 1.0]}
HOLD_MINUTES = 10
ARN = "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:"

# --------------------------------------------------------------------------- the policies drawn
graphs = st.fixed_dictionaries({s: st.lists(st.sampled_from(SERVICES[:i]), unique=True, max_size=2) if i else
                                st.just([]) for i, s in enumerate(SERVICES)})
conditions = st.lists(st.one_of(
    st.builds(lambda s: {"field": "service", "equals": s}, st.sampled_from(SERVICES)),
    st.builds(lambda s: {"field": "service", "in": s}, st.lists(st.sampled_from(SERVICES), min_size=1, max_size=3,
                                                                unique=True)),
    st.builds(lambda s: {"field": "source", "equals": s}, st.sampled_from(sorted(SOURCES.values())))),
    min_size=1, max_size=2, unique_by=lambda c: c["field"])
inhibitions = st.lists(st.builds(
    lambda i, source, target, equal, sev1: {"id": f"rule-{i}", "description": "drawn", "source": source,
                                            "target": target, "equal": equal, "include_sev1": sev1},
    st.integers(0, 99), conditions, conditions, st.sampled_from([[], ["severity"]]), st.booleans()),
    max_size=2, unique_by=lambda r: r["id"])


@functools.cache
def headless_incident_policy() -> str:
    """The shipped incident policy without its heads, as JSON: read once (its heads are validated
    at load, and every example writes its own policy from it)."""
    raw = load_policy("incident").model_dump(mode="json", by_alias=True, exclude_none=True)
    for question in raw["questions"]:
        question.pop("head", None)
    return json.dumps(raw)


def letters_policy(folder: Path, services: dict, inhibit: list, include_sev1: bool) -> str:
    """The shipped incident policy, its heads and noise controls left out (the endpoint's letters
    decide, per service; nothing but the dependencies holds), with the drawn dependencies. It names
    no head file, so none is copied beside it."""
    raw = json.loads(headless_incident_policy())
    raw["noise"] = {}
    raw["dependencies"] = {"services": services, "inhibit": inhibit, "include_sev1": include_sev1,
                           "hold_minutes": HOLD_MINUTES}
    path = folder / "incident.json"
    path.write_text(json.dumps(raw))
    return str(path)


# --------------------------------------------------------------------------- the reference model
@dataclass
class Truth:
    """One incident as the model knows it."""

    key: str
    name: str
    kind: str  # cloudwatch | grafana
    service: str
    severity: str  # the source's word (critical, high, medium, low)
    opened_at: int  # minutes
    open: bool = True
    erased: bool = False
    held_since: int | None = None  # the model's clock when it was first seen held


@dataclass
class Model:
    answers: dict[str, str]
    include_sev1: bool
    rules_include_sev1: bool
    incidents: dict[str, Truth] = field(default_factory=dict)
    minute: int = 0
    swept_at: int | None = None
    events: int = 0
    review_paged: set[str] = field(default_factory=set)  # incidents a reviewer's answer paged

    def would_page(self, severity: str, service: str) -> bool:
        """On its own: a sev1 (the policy's rule says P1) or a service the endpoint calls P1."""
        return SEVERITIES[severity] == "sev1" or self.answers[service] == "P1"

    def open_ones(self) -> list[Truth]:
        return [t for t in self.incidents.values() if t.open and not t.erased]


class DependencyHolds(RuleBasedStateMachine):
    """The intake on `WORLD` (the fakes, or the stack in moto) against the model."""

    WORLD = FakeWorld
    #: A moto of its own for each example, where the world's resources live in moto; the fakes keep
    #: nothing there, so their examples share one empty moto (started by `in_one_moto`).
    OWN_MOTO = False

    def __init__(self) -> None:
        super().__init__()
        self.mock = mock_aws() if self.OWN_MOTO else None
        if self.mock is not None:
            self.mock.start()
        self.patch = pytest.MonkeyPatch()
        self.folder = tempfile.TemporaryDirectory()
        self.world = self.WORLD()
        self.model: Model | None = None

    def teardown(self) -> None:
        self.patch.undo()
        if self.mock is not None:
            self.mock.stop()
        self.folder.cleanup()
        Metrics(namespace="Test").clear_metrics()

    @initialize(services=graphs, inhibit=inhibitions, include_sev1=st.booleans(),
                answers=st.fixed_dictionaries({s: st.sampled_from(sorted(LOGITS)) for s in SERVICES}))
    def policy(self, services, inhibit, include_sev1, answers):
        try:
            Dependencies.model_validate({"services": services, "inhibit": inhibit})
        except ValueError:
            assume(False)  # a rule set that could hold A under B and B under A is refused at load
        path = letters_policy(Path(self.folder.name), services, inhibit, include_sev1)
        self.flow = make_flow(self.world, self.patch, path)
        self.other = make_flow(self.world, self.patch, path)  # another invocation, the same store
        for flow in (self.flow, self.other):
            for service, answer in answers.items():
                flow.intake.wiring.endpoint.answer("priority", LOGITS[answer], where={"service": service})
        self.model = Model(answers, include_sev1, any(r["include_sev1"] for r in inhibit))

    # ----------------------------------------------------------------------- the system's side
    def _deliver(self, truth: Truth, state: str, *, flow=None) -> dict:
        assert self.model is not None
        flow = flow or self.flow
        self.model.events += 1
        n = self.model.events
        at, opened = MONDAY + timedelta(minutes=self.model.minute), MONDAY + timedelta(minutes=truth.opened_at)
        flow.clock = lambda: at  # the delivery's time (a hold's ceiling counts from it)
        if truth.kind == "cloudwatch":
            return deliver(flow, alarm(truth.name, truth.severity, state, self.model.minute, n, service=truth.service))
        (outcome,) = flow.handle(grafana(truth.name, truth.service, truth.severity, state, at, opened, n))["outcomes"]
        return outcome

    def _tick(self, minutes: int) -> None:
        assert self.model is not None
        self.model.minute += minutes

    def _sweep(self) -> dict:
        assert self.model is not None
        self.flow.clock = lambda: MONDAY + timedelta(minutes=self.model.minute)
        swept = self.flow.sweep_holds()
        self.model.swept_at = self.model.minute
        return swept

    def _records(self) -> dict[str, dict]:
        """What each execution started for an incident decided: its item's id and whether it paged."""
        return {name: {"item_id": r.item_id, "escalate": r.escalate, "route": r.route}
                for name, r in self.world.executions().items()}

    # ----------------------------------------------------------------------- the steps
    @precondition(lambda self: self.model is not None)
    @rule(incidents=st.lists(st.tuples(st.sampled_from(sorted(SOURCES)), st.sampled_from(SERVICES),
                                       st.sampled_from(sorted(SEVERITIES)), st.integers(0, 2)), min_size=1, max_size=3))
    def storm(self, incidents):
        """One to three incidents open, a minute or two apart (an outage alarms in bursts)."""
        for kind, service, severity, minutes in incidents:
            self.open(kind, service, severity, minutes)

    def open(self, kind: str, service: str, severity: str, minutes: int) -> None:
        assert self.model is not None
        self._tick(minutes)
        name = f"{service}-{kind}-{len(self.model.incidents)}"
        key = ARN + name if kind == "cloudwatch" else None
        truth = Truth(key or "", name, kind, service, severity, self.model.minute)
        outcome = self._deliver(truth, "ALARM")
        truth.key = outcome["key"]
        self.model.incidents[truth.key] = truth

    @precondition(lambda self: self.model is not None and self.model.open_ones())
    @rule(data=st.data(), minutes=st.integers(0, 5))
    def resolve(self, data, minutes):
        assert self.model is not None
        truth = data.draw(st.sampled_from(self.model.open_ones()))
        self._tick(minutes)
        self._deliver(truth, "OK")
        truth.open = False

    @precondition(lambda self: self.model is not None and self.model.open_ones())
    @rule(data=st.data(), rise=st.booleans(), minutes=st.integers(0, 3))
    def refire(self, data, rise, minutes):
        """A new event of an open incident: as severe as before, or one step more."""
        assert self.model is not None
        truth = data.draw(st.sampled_from(self.model.open_ones()))
        if rise and truth.severity != "critical":
            truth.severity = {"low": "medium", "medium": "high", "high": "critical"}[truth.severity]
        self._tick(minutes)
        self._deliver(truth, "ALARM")

    @precondition(lambda self: self.model is not None and self.model.open_ones())
    @rule(data=st.data(), service=st.sampled_from(SERVICES), severity=st.sampled_from(sorted(SEVERITIES)),
          after=st.booleans())
    def parent_resolves_during_a_hold(self, data, service, severity, after):
        """A new CloudWatch incident whose would-be parent resolves (in another invocation) right
        before, or right after, the child's link on the parent's row."""
        assert self.model is not None
        parent = data.draw(st.sampled_from(self.model.open_ones()))
        store_type = type(self.flow.store)
        real_link = store_type.link_child
        done: list[bool] = []

        def racing_link(store, parent_key, child_key):
            if after:
                linked = real_link(store, parent_key, child_key)
            if not done:
                done.append(True)
                self._deliver(parent, "OK", flow=self.other)
                parent.open = False
            return linked if after else real_link(store, parent_key, child_key)

        self.patch.setattr(store_type, "link_child", racing_link)
        try:
            self.open("cloudwatch", service, severity, 1)
        finally:
            self.patch.setattr(store_type, "link_child", real_link)

    def _waiting(self) -> list[str]:
        return sorted(n for n, r in self._records().items()
                      if r["route"] == "review" and self.world.workflow.status(n) == "RUNNING")

    @precondition(lambda self: self.model is not None and self._waiting())
    @rule(data=st.data(), pages=st.booleans())
    def review_answered(self, data, pages):
        """A reviewer answers a pending review (its execution ends); an answer that escalates is
        paged by the workflow, whose `Item Escalated` reaches the intake (the template's rule)."""
        assert self.model is not None
        name = data.draw(st.sampled_from(self._waiting()))
        self.world.workflow.end(name, "SUCCEEDED")
        if pages:
            record = self.world.executions()[name]
            self.model.review_paged.add(record.item_id)
            self.flow.handle(item_escalated(record, name, self.model.events))

    @precondition(lambda self: self.model is not None)
    @rule()
    def ceiling_reached(self):
        self._tick(HOLD_MINUTES)
        self._sweep()

    @precondition(lambda self: self.model is not None and self.model.open_ones())
    @rule(data=st.data())
    def erase(self, data):
        """`make erase` of an open incident, then the schedule's sweep (within 5 minutes)."""
        assert self.model is not None
        truth = data.draw(st.sampled_from(self.model.open_ones()))
        self.erase_row(truth.key)
        truth.erased = True
        self._tick(5)
        self._sweep()

    def erase_row(self, key: str) -> None:
        """What `ops.erase` does to the open-incident table: the row out of its slots, then gone."""
        store = self.flow.store
        row = store.get(key)
        for slot in row.parent_slots if row else []:
            store.unregister_parent(slot, key)
        store.rows.pop(key, None)

    # ----------------------------------------------------------------------- the invariants
    @invariant()
    def no_page_is_lost(self):
        model = self.model
        if model is None:
            return
        records = self._records()
        paged = {r["item_id"] for r in records.values() if r["escalate"]} | model.review_paged
        routed = {r["item_id"]: r for r in records.values()}
        for truth in model.open_ones():
            row = self.flow.store.get(truth.key)
            assert row is not None and row.status == "open", truth
            item_id = row.incident_id
            # held under a parent: neither routed since nor grouped (a released child may join
            # the group its service's paged incident leads)
            held = row.held_under is not None and row.execution_name is None and row.group is None
            if not held:
                assert item_id in routed or row.group is not None, f"{truth.name}: neither routed nor held"
                truth.held_since = None
                continue
            # held: under an open parent that paged and is not held itself
            parent = self.flow.store.get(row.held_under)
            assert parent is not None, f"{truth.name}: held under {row.held_under}, which is gone"
            assert parent.status == "open", f"{truth.name}: held under {parent.incident_key}, resolved"
            assert parent.incident_id in paged, f"{truth.name}: held under {parent.incident_key}, never paged"
            assert parent.held_under is None or parent.execution_name is not None or parent.group is not None, (
                f"{truth.name}: held under {parent.incident_key}, itself held")
            severity = SEVERITIES[truth.severity]
            assert severity != "sev1" or model.include_sev1 or model.rules_include_sev1, f"{truth.name}: a sev1 held"
            if truth.held_since is None:
                truth.held_since = model.minute
            if model.swept_at is not None:
                assert model.swept_at - truth.held_since < HOLD_MINUTES + 3, (
                    f"{truth.name}: held since minute {truth.held_since}, past the ceiling at the sweep of "
                    f"minute {model.swept_at}")
        for record in self.world.executions().values():  # routed on its own: it paged if it would have
            severity, service = record.item["severity"], record.item["service"]
            if record.route == "auto":
                assert record.escalate == (severity == "sev1" or model.answers[service] == "P1"), record.item_id

DependencyHolds.TestCase.settings = settings(max_examples=200, stateful_step_count=20, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.filter_too_much])


def in_one_moto(case: type[unittest.TestCase]) -> type[unittest.TestCase]:
    """The machine's test with every example inside one empty moto: a call no fake answers fails at
    once, never reaching AWS (a factory, so that pytest collects the test once, by its name below)."""

    class InOneMoto(case):  # type: ignore[valid-type, misc]
        def setUp(self) -> None:
            self.moto = mock_aws()
            self.moto.start()

        def tearDown(self) -> None:
            self.moto.stop()

    return InOneMoto


test_dependency_holds_against_the_model = in_one_moto(DependencyHolds.TestCase)


class DependencyHoldsOnTheStack(DependencyHolds):
    WORLD = MotoWorld
    OWN_MOTO = True

    def _waiting(self) -> list[str]:
        return []  # moto runs no execution here: none waits for a reviewer

    def erase_row(self, key: str) -> None:
        from ops.erase import Eraser, ItemKey

        row = self.flow.store.get(key)
        assert row is not None and row.incident_id is not None
        source = "aws.cloudwatch" if key.startswith(ARN) else "grafana"
        table = self.world.environment("IncidentIntakeFunction")["OPEN_INCIDENTS_TABLE_NAME"]
        Eraser(ItemKey("incident", source, row.incident_id), {"open-incidents": table},
               dynamodb=boto3.client("dynamodb"), sqs=boto3.client("sqs"),
               stepfunctions=boto3.client("stepfunctions")).erase()


DependencyHoldsOnTheStack.TestCase.settings = settings(max_examples=3, stateful_step_count=8, deadline=None,
                                                      suppress_health_check=list(HealthCheck))
test_dependency_holds_against_the_model_on_the_stack = pytest.mark.stack(DependencyHoldsOnTheStack.TestCase)
