"""`make demo ITEMS=events/dependency_storm.jsonl`: the orders database fails, five services that
depend on it (the shipped policy's dependencies; search through checkout) alarm within three
minutes; payments recovers while the database is down, the database recovers with three of them
still firing, checkout recovers later. The run's dependency line says: pages sent against
incidents opened, children held, children paged after their parent resolved, and no page missing.
No model is needed: the endpoint is unreachable, so what is routed goes to a person (a review),
which is a page all the same."""

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
    assert [(i.kind, i.via) for i in items] == [("incident", "event")] * 9
    services = [next(t["value"] for t in i.data["detail"]["alarmTags"] if t["key"] == "service") for i in items]
    states = [i.data["detail"]["state"]["value"] for i in items]
    assert services[0] == "orders-db" and len(set(services[1:6])) == 5 and states[:6] == ["ALARM"] * 6
    assert states[6:] == ["OK"] * 3 and services[6:] == ["payments-api", "orders-db", "checkout"]


@pytest.mark.stack
@pytest.mark.server  # the moto server
def test_the_storm_pages_once_for_the_database_then_for_what_is_still_failing(local_pipeline):
    pipeline = local_pipeline(UNUSED_ENDPOINT)
    outcomes = pipeline.run(read_items([STORM_FILE]))
    report = [report_line(o) for o in outcomes]
    # The database's incident went to a person (no endpoint), and its review closed when it resolved.
    assert report[0]["outcome"] in ("routed", "review", "resolved") and report[0]["item_id"], report[0]
    assert [r["outcome"] for r in report[1:6]] == ["held"] * 5, report
    assert [r["outcome"] for r in report[6:]] == ["resolved"] * 3
    figures = dependency_figures(outcomes)
    assert figures == DependencyFigures(opened=6, pages=5, held=5, paged_after_parent=4, resolved_while_held=1,
                                        missing=[])
    assert figures.line() == ("Dependencies: 5 page(s) sent for 6 incident(s) opened; 5 child incident(s) held "
                              "under a parent; 4 paged after their parent resolved; 1 resolved while held; "
                              "no page missing.")
    database = report[0]["item_id"]
    assert "held under orders-db incident " + database in report[1]["reason"]
    assert "held under checkout incident " in report[3]["reason"]  # search waits on checkout, itself held
