"""`make demo ITEMS=…` takes raw events of every source line by line (events/sources.jsonl):
each line is told apart, sent the way its source sends it, and the report says what became of
it. The lines here need no model (rules decide, or nothing is routed): nothing listens at the
endpoint."""

from __future__ import annotations

import json

import pytest

from local.items import classify, read_items
from local.outcomes import report_line
from tests.e2e.conftest import UNUSED_ENDPOINT
from tests.functions.conftest import EVENTS

SOURCES_FILE = EVENTS / "sources.jsonl"


def line(name: str, **changes) -> str:
    data = json.loads((EVENTS / f"{name}.json").read_text())
    for path, value in changes.items():
        holder = data
        *parents, last = path.split("__")
        for part in parents:
            holder = holder[int(part)] if isinstance(holder, list) else holder[part]
        holder[last] = value
    return json.dumps(data)


def test_raw_events_sns_notifications_and_webhooks_are_told_apart():
    kinds = [(item.kind, item.via) for item in read_items([SOURCES_FILE])]
    assert kinds == [("incident", "event")] * 9 + [("ticket", "sns"), ("ticket", "webhook:zendesk"),
                                                   ("ticket", "webhook:jira")]
    sns = read_items([SOURCES_FILE])[9]
    assert sns.item_id == "T-2001" and sns.data["subject"].startswith("Cannot log in")  # the ticket inside
    assert "no EventBridge event, SNS notification" in classify("f:1", '{"order_id": "O-1"}').rejected


@pytest.mark.stack
@pytest.mark.server  # the moto server
def test_raw_source_lines_end_routed_resolved_ignored_duplicate_parked_or_rejected(local_pipeline, tmp_path):
    pipeline = local_pipeline(UNUSED_ENDPOINT)
    critical = line("securityhub_findings_imported")  # CRITICAL: P1 and security by rule, no model
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join([
        critical,
        critical,  # EventBridge delivered it twice
        line("securityhub_findings_imported", detail__findings__0__Workflow={"Status": "RESOLVED"}, id="resolved-1"),
        line("cloudwatch_alarm_state_change", detail__state__value="INSUFFICIENT_DATA"),
        line("cloudwatch_alarm_state_change", detail__state__value="OK", id="ok-without-alarm"),
        line("cloudwatch_alarm_state_change", **{"detail-type": "CloudWatch Alarm Configuration Change"}),
        line("guardduty_finding", detail__resource=None),  # known kind, but not its shape: parked
        line("zendesk_ticket_created", detail__description=""),
    ]) + "\n")
    outcomes = pipeline.run(read_items([items]))
    report = [report_line(o) for o in outcomes]
    assert [r["outcome"] for r in report] == ["routed", "duplicate", "resolved", "ignored", "ignored",
                                              "rejected", "dead_lettered", "dead_lettered"]
    routed = report[0]
    assert routed["target"] == "security-oncall" and routed["escalated"] is True
    assert routed["decisions"]["priority"] == {"answer": "P1", "confidence": None, "readout": "rule", "auto": True,
                                                  "head_version": None}
    assert "handled already" in report[1]["reason"]
    assert "INSUFFICIENT_DATA" in report[3]["reason"] and "no open incident has this key" in report[4]["reason"]
    assert "no rule of template.yaml takes 'aws.cloudwatch' 'CloudWatch Alarm Configuration Change'" in report[5]["reason"]
    assert "detail.resource" in report[6]["reason"] and outcomes[6].queues == ["IncidentDeadLetterQueue"]
    assert "detail.description is missing or empty" in report[7]["reason"]
    assert outcomes[7].queues == ["TicketDeadLetterQueue"]
