"""`make demo ITEMS=events/dependency_storm.jsonl`: the orders database fails (sev1: it pages by the
policy's rule), five services that depend on it (the shipped policy's dependencies; search
through checkout) alarm within three minutes; payments recovers while the database is down, the
database recovers with three of them still firing, checkout recovers later. Then a replica of the
database lags (decided, not paged) and checkout goes down for every customer: a parent that paged
nobody holds nothing, so checkout is decided on its own (with a model, P1: it pages). The run's
dependency line says: pages sent against incidents opened, children held, children decided when
their hold ended, and no page missing. No model is needed: the endpoint is unreachable, so what
the rules do not decide goes to a person (a review, which is not a page)."""

from __future__ import annotations

import pytest

from local.dependency_report import DependencyFigures, dependency_figures
from local.items import read_items
from local.outcomes import report_line
from tests.e2e.conftest import UNUSED_ENDPOINT
from tests.functions.conftest import EVENTS

STORM_FILE = EVENTS / "dependency_storm.jsonl"


def test_the_storm_is_a_database_alarm_then_its_dependents_then_the_recoveries():
    items = read_items([STORM_FILE])
    assert [(i.kind, i.via) for i in items] == [("incident", "event")] * 11
    tags = [{t["key"]: t["value"] for t in i.data["detail"]["alarmTags"]} for i in items]
    services = [t["service"] for t in tags]
    states = [i.data["detail"]["state"]["value"] for i in items]
    assert services[0] == "orders-db" and tags[0]["severity"] == "critical"
    assert len(set(services[1:6])) == 5 and states[:6] == ["ALARM"] * 6
    assert states[6:9] == ["OK"] * 3 and services[6:9] == ["payments-api", "orders-db", "checkout"]
    # a parent that pages nobody (sev2, decided), then a child of it that a model calls P1
    assert services[9:] == ["orders-db", "checkout"] and states[9:] == ["ALARM"] * 2


@pytest.mark.stack
@pytest.mark.server  # the moto server
def test_the_storm_pages_once_for_the_database_then_for_what_is_still_failing(local_pipeline):
    pipeline = local_pipeline(UNUSED_ENDPOINT)
    outcomes = pipeline.run(read_items([STORM_FILE]))
    report = [report_line(o) for o in outcomes]
    # The database's incident paged (sev1, by rule) and resolved at 10:25.
    assert report[0]["outcome"] in ("routed", "resolved") and report[0]["item_id"], report[0]
    assert [r["outcome"] for r in report[1:6]] == ["held"] * 5, report
    assert [r["outcome"] for r in report[6:9]] == ["resolved"] * 3
    # The replica's incident went to a person (no endpoint): it paged nobody, so it holds nothing.
    assert report[9]["outcome"] == "review" and report[10]["outcome"] == "review", report[9:]
    figures = dependency_figures(outcomes)
    assert figures == DependencyFigures(opened=8, pages=1, held=5, decided_after_hold=4, paged_after_hold=0,
                                        resolved_while_held=1, missing=[])
    assert figures.line() == ("Dependencies: 1 page(s) sent for 8 incident(s) opened; 5 child incident(s) held "
                              "under a paged parent; 4 decided when their hold ended (0 paged); 1 resolved while "
                              "held; no page missing.")
    database = report[0]["item_id"]
    assert "held under orders-db incident " + database in report[1]["reason"]
    assert "held under orders-db incident " + database in report[3]["reason"]  # search: checkout, held, covers nothing
