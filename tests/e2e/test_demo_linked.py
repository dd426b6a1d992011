"""`make demo ITEMS=events/linked.jsonl`: an incident about a service, then tickets; the ticket
naming that service during the outage is linked to it, and its report line says so (`linked`:
the incident's id). No model is needed: whatever the endpoint answers, the link is the intake's."""

from __future__ import annotations

import pytest

from local.items import read_items
from local.outcomes import report_line
from tests.e2e.conftest import UNUSED_ENDPOINT
from tests.functions.conftest import EVENTS

LINKED_FILE = EVENTS / "linked.jsonl"


def test_the_sample_is_an_alarm_then_tickets():
    items = read_items([LINKED_FILE])
    assert [(i.kind, i.via, i.item_id) for i in items] == [
        ("incident", "event", None), ("ticket", "own", "T-3001"), ("ticket", "own", "T-3002"),
        ("ticket", "own", "T-3003")]


@pytest.mark.stack
@pytest.mark.server  # the moto server
def test_a_ticket_naming_the_open_incidents_service_reports_it_as_linked(local_pipeline):
    pipeline = local_pipeline(UNUSED_ENDPOINT)
    report = {r["item_id"]: r for r in map(report_line, pipeline.run(read_items([LINKED_FILE])))}

    incident = next(r for r in report.values() if r["kind"] == "incident")
    assert incident["outcome"] in ("routed", "review") and incident["item_id"]
    assert incident["linked"] is None
    assert report["T-3001"]["linked"] == incident["item_id"]  # names payments-api, created during the outage
    assert report["T-3002"]["linked"] is None  # names no service
    assert report["T-3003"]["linked"] is None  # names it, but hours before the incident opened
    (why,) = [d["why"] for d in report["T-3001"]["decisions"].values()]
    assert why["linked"].startswith(f"linked to incident {incident['item_id']} (payments-api, opened at ")
