"""Every source in the tables of decision_router.sources has what docs/sources/add-a-source.md
asks for: a sample in events/ that it really maps (an incident source: an event that opens an
incident, whose evidence keeps its model through the record's JSON; a ticket webhook: a body
named after the source that maps to a valid ticket), and a test in tests/functions/ that names
its module. A source added to a table without them fails here, naming what is missing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, get_args

import pytest

from decision_router.domain.policies import load_policy
from decision_router.evidence import Evidence
from decision_router.items import Incident, Ticket
from decision_router.sources import INCIDENT_SOURCES, TICKET_SOURCES, raw_events
from decision_router.sources.events import IncidentSource, Opened, SourceEventError
from decision_router.sources.webhook import TicketSource
from tests.functions.conftest import EVENTS

HERE = Path(__file__).resolve()
SAMPLES = {path.name: json.loads(path.read_text()) for path in sorted(EVENTS.glob("*.json"))}
TABLES = load_policy("incident").source_severity


def module_of(source: IncidentSource[Any] | TicketSource) -> str:
    """The module of decision_router.sources that declares the source (`cloudwatch`, `zendesk`)."""
    return type(source).__module__.rpartition(".")[2]


def named(word: str, text: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])", text) is not None


def opened_incidents(source: IncidentSource[Any], payload: Any) -> list[Incident]:
    """What the source opens from a sample (an EventBridge event, an SNS event's records, a Lambda
    alarm action); nothing from one that is the source's but that it does not map."""
    read = []
    for delivery in raw_events(payload):
        try:
            event = source.read(delivery)
        except SourceEventError:
            continue
        if event is not None:
            read.append(event)
    outcomes = [o for event in read for o in source.adapt(event, TABLES[source.name])]
    return [o.incident for o in outcomes if isinstance(o, Opened)]


@pytest.mark.parametrize("source", INCIDENT_SOURCES, ids=module_of)
def test_an_incident_source_has_a_sample_that_opens_an_incident(source):
    incidents = [incident for event in SAMPLES.values() for incident in opened_incidents(source, event)]
    assert incidents, (f"no sample in events/ that the {module_of(source)} source maps to an opened incident: add "
                       f"one ({source.event_source} {source.detail_type!r}, as the source sends it)")
    assert source.evidence in get_args(Evidence), (
        f"the {module_of(source)} source's evidence, {source.evidence.__name__}, is no member of the incidents' "
        "Evidence union: add it there (decision_router/evidence.py)")
    for incident in incidents:
        assert type(incident.evidence) is source.evidence, (
            f"the {module_of(source)} source opens incidents with {type(incident.evidence).__name__}, and names "
            f"{source.evidence.__name__} as its evidence")
        again = Incident.model_validate_json(incident.model_dump_json())
        assert type(again.evidence) is type(incident.evidence), (
            f"{type(incident.evidence).__name__} comes back from JSON as {type(again.evidence).__name__}: "
            "a model of the Evidence union accepts the fields of another one (decision_router/evidence.py)")


@pytest.mark.parametrize("source", TICKET_SOURCES.values(), ids=module_of)
def test_a_ticket_source_has_a_sample_body_that_maps_to_a_ticket(source):
    samples = [name for name in SAMPLES if named(source.name, Path(name).stem)]
    assert samples, f"no sample body in events/ named after the {source.name!r} webhook (e.g. events/{source.name}_ticket.json)"
    for name in samples:
        ticket = source.ticket(SAMPLES[name], "free")
        assert isinstance(ticket, Ticket), f"events/{name}: the {source.name} webhook does not route it: {ticket}"


@pytest.mark.parametrize("source", [*INCIDENT_SOURCES, *TICKET_SOURCES.values()], ids=module_of)
def test_every_source_has_a_test_that_names_it(source):
    module = module_of(source)
    tests = [path.name for path in sorted(HERE.parent.glob("test_*.py")) if path != HERE and named(module, path.read_text())]
    assert tests, f"no test in tests/functions/ names the {module} source (decision_router/sources/{module}.py)"
