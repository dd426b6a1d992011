"""A property of the noise controls over random alert streams: whatever the order of CloudWatch
alarms and Grafana alerts of two services (one with the shipped Sunday maintenance window), of
every severity, opening and resolving at random times, delivered late or not, with the schedule's
sweep ticking in between,
- every sev1 that opens is routed (it pages): no grouping, flapping or window holds it;
- no incident is grouped under a leader less severe than itself;
- an incident a window held, still open when the window ends, is routed by the first delivery
  of it after the end (or the first sweep), and only once.

The real incident-intake handler and open-incident store (moto). The endpoint answers each
request it is sent with confident letters, built from the request (a botocore handler in place
of the HTTP call: the model is not what is tested here); workflow executions are started in moto,
not run."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as event_note
from hypothesis import strategies as st
from moto import mock_aws

from decision_router.adapters.endpoint import DecisionEndpoint
from local.cloudformation import Stack
from local.cloudwatch import play_alarm_states
from tests.functions.conftest import make_result
from tests.functions.test_intake_handlers import FakeLambdaContext, batch_body, make_intake
from tests.infra.conftest import ENDPOINT_NAME
from tests.infra.test_incident_sources_pipeline import sample

pytestmark = pytest.mark.stack

SEV = {"critical": 1, "high": 2, "medium": 3, "low": 4}  # CloudWatch's severity tags in the shipped policy
GRAFANA_LABEL = {"critical": "critical", "high": "error", "medium": "warning", "low": "info"}
#: The shipped window holds orders-db on Sundays 02:00-04:00 Dublin time (UTC+1 in summer).
DUBLIN = ZoneInfo("Europe/Dublin")
FIRST_SUNDAY = datetime(2026, 11, 1, tzinfo=timezone.utc)
examples = itertools.count()


def answering_endpoint() -> DecisionEndpoint:
    """A real sagemaker-runtime client whose calls are answered from their request body."""
    client = boto3.client("sagemaker-runtime", region_name="us-east-1")

    def answer(params, **_):
        request = json.loads(params["body"])
        decisions = request.get("decisions") or [request["decision"]]
        results = [make_result(d["id"], [o["id"] for o in d["options"]],
                               [6.0] + [0.0] * (len(d["options"]) - 1)) for d in decisions]
        raw = batch_body(*results) if "decisions" in request else json.dumps(
            {"result": json.loads(results[0].model_dump_json())}).encode()
        import io

        from botocore.awsrequest import AWSResponse
        from botocore.response import StreamingBody
        http = AWSResponse("https://stub", 200, {}, None)
        return http, {"Body": StreamingBody(io.BytesIO(raw), len(raw)), "ContentType": "application/json",
                      "ResponseMetadata": {"HTTPStatusCode": 200}}

    client.meta.events.register("before-call.sagemaker-runtime.InvokeEndpoint", answer)
    return DecisionEndpoint(ENDPOINT_NAME, client=client, max_attempts=1, sleep=lambda s: None)


@pytest.fixture(scope="module")
def intake():
    # The workflow is not run (what is checked is what the intake decides): an execution left
    # running in moto's background thread would otherwise finish into the next module's stack.
    with mock_aws(config={"stepfunctions": {"execute_state_machine": False}}), pytest.MonkeyPatch.context() as mp:
        from incident_intake import app

        stack = Stack.load(parameters={"ExistingEndpointName": ENDPOINT_NAME}).create()
        make_intake(mp, stack, app, "incident", "IncidentIntakeFunction", answering_endpoint())
        yield app


def cloudwatch(name: str, service: str, severity: str, state: str, at: datetime, n: int) -> dict:
    event = sample("cloudwatch_alarm_state_change")
    event["id"] = f"cw-{n}"
    event["resources"] = [f"arn:aws:cloudwatch:eu-west-1:123456789012:alarm:{name}"]
    event["detail"]["alarmName"] = name
    event["detail"]["state"].update(value=state, timestamp=at.strftime("%Y-%m-%dT%H:%M:%S.000+0000"))
    event["detail"]["alarmTags"] = [{"key": "severity", "value": severity}, {"key": "service", "value": service}]
    return event


def grafana(name: str, service: str, severity: str, state: str, at: datetime, opened: datetime, n: int) -> dict:
    event = sample("grafana_alerting_webhook")
    event["id"] = f"gf-{n}"
    alert = event["detail"]["alerts"][0]
    alert.update(status="firing" if state == "ALARM" else "resolved", fingerprint=name,
                 startsAt=opened.strftime("%Y-%m-%dT%H:%M:%SZ"))  # Grafana repeats the first startsAt
    alert["labels"].update(service=service, severity=GRAFANA_LABEL[severity], alertname=name)
    event["detail"]["alerts"] = [alert]
    return event


alarm_spec = st.tuples(st.sampled_from(["cloudwatch", "grafana"]), st.sampled_from(["orders-db", "checkout"]),
                       st.sampled_from(sorted(SEV)))
step = st.tuples(st.integers(0, 5), st.sampled_from(["ALARM", "ALARM", "OK", "SWEEP"]),
                 st.integers(0, 300), st.integers(0, 30))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(alarms=st.lists(alarm_spec, min_size=1, max_size=6), steps=st.lists(step, min_size=1, max_size=14))
def test_no_noise_control_swallows_a_page_or_outlasts_its_window(intake, alarms, steps):
    n = next(examples)
    day = FIRST_SUNDAY + timedelta(days=7 * n)  # a Sunday of its own: no state shared between examples
    window_start, window_end = (datetime(day.year, day.month, day.day, hour, tzinfo=DUBLIN) for hour in (2, 4))
    names = [f"p{n}-a{i}" for i in range(len(alarms))]
    severity_of, open_since, held_until = {}, {}, {}
    clock = day
    for i, (which, state, minute, late) in enumerate(sorted(steps, key=lambda s: s[2])):
        at = day + timedelta(hours=1, minutes=minute)
        clock = max(clock, at + timedelta(minutes=late))  # deliveries arrive late, never back in time
        intake.incidents.clock = lambda now=clock: now
        if state == "SWEEP":
            tick = {"version": "0", "id": f"tick-{n}-{i}", "detail-type": "Scheduled Event", "source": "aws.events",
                    "account": "123456789012", "time": clock.isoformat(), "region": "eu-west-1", "resources": [],
                    "detail": {}}
            # (the sweep also decides what a dependency held past its ceiling: not this test's subject)
            swept = {o["key"] for o in intake.lambda_handler(tick, FakeLambdaContext())["outcomes"]
                     if "released_after" not in o}
            mine = {key for key in swept if key.rsplit(":", 1)[-1].startswith(f"p{n}-")}  # (earlier examples' too)
            due = {key for key, until in held_until.items() if clock >= until}
            assert mine == due, f"swept {mine}, due {due}: each hold past its window, once"
            for key in due:
                del held_until[key]
            continue
        source, service, severity = alarms[which % len(alarms)]
        name = names[which % len(alarms)]
        if state == "ALARM" and name not in open_since:
            open_since[name] = at
        event = (cloudwatch(name, service, severity, state, at, i) if source == "cloudwatch"
                 else grafana(name, service, severity, state, at, open_since.get(name, at), i))
        if source == "grafana":
            event["id"] = f"gf-{n}-{i}"
        else:
            event["id"] = f"cw-{n}-{i}"
        play_alarm_states(event)  # CloudWatch sets the alarm's state before it sends the event
        answer = intake.lambda_handler(event, FakeLambdaContext())
        (outcome,) = [o for a in answer.get("records", [answer]) for o in a.get("outcomes", [a])]
        key, what = outcome.get("key"), outcome["outcome"]
        if state == "OK":
            open_since.pop(name, None)
            if key is not None:
                held_until.pop(key, None)
            continue
        severity_of[key] = SEV[severity]
        if key in held_until and clock >= held_until[key]:
            assert what == "routed", f"the first delivery after its window did not route it: {outcome}"
            del held_until[key]
            continue
        if what in ("routed", "grouped", "flapping", "suppressed"):  # this delivery opened the incident
            if SEV[severity] == 1:
                assert what == "routed", f"a sev1 was held: {outcome}"
            if what == "grouped":
                assert severity_of[outcome["leader"]] <= SEV[severity], f"grouped under a less severe leader: {outcome}"
            if what == "suppressed":
                reported = open_since[name] if source == "grafana" else at  # Grafana's first startsAt
                assert service == "orders-db" and window_start <= reported < window_end
                held_until[key] = window_end


# ----------------------------------------------------------------------------- dependencies
#: Services of a random dependency graph: each depends on one or two of those before it, the
#: first on nothing (acyclic by construction).
SERVICES = 4
graph = st.tuples(st.just(frozenset()), *(st.frozensets(st.integers(0, i - 1), min_size=1, max_size=2)
                                          for i in range(1, SERVICES)))
#: Mostly the severities that may be held; a sev1 now and then.
dependency_severity = st.sampled_from(["high", "medium", "medium", "low", "low", "critical"])


@pytest.fixture
def with_dependencies(intake):
    """Each example's own dependency graph, on the function's policy (put back after)."""
    import dataclasses

    from decision_router.domain.dependencies import Dependencies

    shipped = intake.intake.parts

    def use(services: dict[str, list[str]], include_sev1: bool) -> None:
        policy = shipped.policy.model_copy(update={"dependencies": Dependencies(services=services,
                                                                                include_sev1=include_sev1)})
        intake.intake._parts = dataclasses.replace(shipped, policy=policy)

    yield use
    intake.intake._parts = shipped


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parents=graph, include_sev1=st.booleans(),
       alarms=st.lists(st.tuples(st.integers(0, SERVICES - 1), dependency_severity, st.integers(0, 30),
                                 st.none() | st.integers(1, 60)), min_size=2, max_size=8))
def test_no_dependency_hold_orphans_a_page(intake, with_dependencies, parents, include_sev1, alarms):
    """Over random dependency graphs and alarm streams (services of their own per example):
    - no sev1 is held unless the graph's rule includes sev1, nor a child more severe than its parent;
    - every child still open when its parent resolves is routed by that resolution (it pages, or
      joins the group its service's paged incident leads, as grouping would have had it), or held
      again under another covered parent: an open held incident's parent is always open;
    - a held incident's own resolution closes it, and it stays closed (nothing held is left open)."""
    n = next(examples)
    services = [f"d{n}-s{i}" for i in range(SERVICES)]
    graph_of = {services[i]: sorted(services[j] for j in parents[i]) for i in range(SERVICES)}
    with_dependencies(graph_of, include_sev1)
    store = intake.incidents.store
    day = datetime(2026, 12, 1, tzinfo=timezone.utc) + timedelta(days=n)  # a Tuesday on: no window holds them
    names = [f"d{n}-a{i}" for i in range(len(alarms))]
    keys = {name: f"arn:aws:cloudwatch:eu-west-1:123456789012:alarm:{name}" for name in names}
    severity_of: dict[str, int] = {}
    # Each alarm opens, and closes after its duration (None: still firing at the end).
    steps = sorted([(opened, 0, i, "ALARM") for i, (_, _, opened, _) in enumerate(alarms)]
                   + [(opened + lasted, 1, i, "OK") for i, (_, _, opened, lasted) in enumerate(alarms) if lasted])
    for i, (minute, _, which, state) in enumerate(steps):
        service_index, severity, _, _ = alarms[which]
        name = names[which]
        at = day + timedelta(hours=9, minutes=minute)
        intake.incidents.clock = lambda now=at: now
        event = cloudwatch(name, services[service_index], severity, state, at, i)
        event["id"] = f"dep-{n}-{i}"
        play_alarm_states(event)
        answer = intake.lambda_handler(event, FakeLambdaContext())
        (outcome,) = [o for a in answer.get("records", [answer]) for o in a.get("outcomes", [a])]
        what = outcome["outcome"]
        event_note(f"{state} {what}" + (" releasing" if outcome.get("released") else ""))
        if state == "ALARM" and what == "held":
            parent_row = store.get(outcome["held_under"])
            assert SEV[severity] > 1 or include_sev1, f"a sev1 was held without include_sev1: {outcome}"
            assert parent_row is not None and parent_row.status == "open", outcome
            assert severity_of[outcome["held_under"]] <= SEV[severity], f"held under a less severe parent: {outcome}"
        if state == "ALARM" and what in ("routed", "held", "grouped", "flapping"):
            severity_of[keys[name]] = SEV[severity]
        if state == "OK" and what == "resolved":
            row = store.get(keys[name])
            assert row is not None and row.status == "resolved"
            for child in row.held_children:  # each still open was routed now, or is held under an open parent
                child_row = store.get(child)
                assert child_row is not None
                if child_row.status == "open":  # routed (it paged), grouped under its service's paged leader, or moved
                    assert (child_row.execution_name is not None or child_row.group is not None
                            or child_row.held_under != keys[name]), f"{child} was left held under {keys[name]}: {outcome}"
        for key in keys.values():  # after every delivery: nothing open is held under a resolved parent
            row = store.get(key)
            if (row is not None and row.status == "open" and row.held_under and row.execution_name is None
                    and row.group is None):
                parent = store.get(row.held_under)
                assert parent is not None and parent.status == "open", f"{key} is held under a resolved {row.held_under}"
