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
    why = routed["decisions"]["priority"].pop("why")
    assert routed["decisions"]["priority"] == {"answer": "P1", "confidence": None, "readout": "rule", "auto": True,
                                                  "head_version": None}
    assert why["readout"] == "rule" and [r["rule"] for r in why["rules"] if r["fired"]] == [why["rule"]]
    assert "handled already" in report[1]["reason"]
    assert "INSUFFICIENT_DATA" in report[3]["reason"] and "no open incident has this key" in report[4]["reason"]
    assert "no rule of template.yaml takes 'aws.cloudwatch' 'CloudWatch Alarm Configuration Change'" in report[5]["reason"]
    assert "detail.resource" in report[6]["reason"] and outcomes[6].queues == ["IncidentDeadLetterQueue"]
    assert "detail.description is missing or empty" in report[7]["reason"]
    assert outcomes[7].queues == ["TicketDeadLetterQueue"]


def sns_line(**message) -> str:
    data = json.loads((EVENTS / "cloudwatch_alarm_sns.json").read_text())
    record = data["Records"][0]["Sns"]
    record["Message"] = json.dumps({**json.loads(record["Message"]), **message})
    record["MessageId"] = f"sns-{len(message)}-{message.get('NewStateValue', 'x')}"
    return json.dumps(data)


def test_the_new_alert_shapes_are_told_apart():
    assert [(i.kind, i.via) for i in read_items([EVENTS / "alerts.jsonl"])] == [
        ("incident", "event"), ("incident", "sns-alarm"), ("incident", "event"), ("incident", "event"),
        ("incident", "sns-alarm"), ("incident", "alarm-action"), ("incident", "event"), ("incident", "event"),
        ("incident", "event"), ("incident", "event"), ("incident", "sns-alarm"), ("incident", "sns-alarm")]
    bare = json.dumps(json.loads(sns_line())["Records"][0]["Sns"])  # as an HTTPS or SQS subscriber gets it
    assert classify("f:1", bare).via == "sns-alarm"


@pytest.mark.stack
@pytest.mark.server  # the moto server
def test_sns_alarms_alarm_actions_ocsf_and_forwarded_webhooks_end_where_they_should(local_pipeline, tmp_path):
    pipeline = local_pipeline(UNUSED_ENDPOINT)
    critical = line("securityhub_ocsf_finding", detail__findings__0__severity_id=5)  # P1 and security by rule
    asff_of_it = line("securityhub_findings_imported", detail__findings__0__Id=json.loads(critical)["detail"][
        "findings"][0]["finding_info"]["uid"])
    suppressed = json.loads(line("grafana_alerting_webhook"))
    suppressed["detail"]["alerts"] = suppressed["detail"]["alerts"][1:]
    suppressed["detail"]["alerts"][0].update(startsAt="2026-11-29T02:45:00Z")
    suppressed["detail"]["alerts"][0]["labels"]["service"] = "orders-db"
    not_an_alarm = json.loads(sns_line())
    not_an_alarm["Records"][0]["Sns"]["Message"] = "Deployment 1842 finished"
    not_an_alarm = json.dumps(not_an_alarm)
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join([
        critical,
        asff_of_it,  # the same finding by the ASFF feed: one incident
        sns_line(NewStateValue="INSUFFICIENT_DATA"),
        sns_line(NewStateValue="OK"),  # nothing open
        not_an_alarm,  # on the topic the incident intake is subscribed to: parked
        line("cloudwatch_alarm_action", alarmData__state__value="INSUFFICIENT_DATA"),
        line("pagerduty_webhook_v3_triggered", detail__event__event_type="incident.acknowledged"),
        json.dumps(suppressed),
    ]) + "\n")
    outcomes = pipeline.run(read_items([items]))
    report = [report_line(o) for o in outcomes]
    assert [r["outcome"] for r in report] == ["routed", "updated", "ignored", "ignored", "dead_lettered",
                                              "ignored", "ignored", "suppressed"]
    assert report[0]["target"] == "security-oncall" and report[0]["escalated"] is True
    assert "no open incident has this key" in report[3]["reason"]
    assert "is not a CloudWatch alarm notification" in report[4]["reason"]
    assert outcomes[4].queues == ["IncidentDeadLetterQueue"]
    assert "incident.acknowledged" in report[6]["reason"]
    assert "orders-db-sunday-patching" in report[7]["reason"]


@pytest.mark.stack
@pytest.mark.server  # the moto server
def test_a_critical_alarm_after_a_low_alarm_of_its_service_pages(local_pipeline, tmp_path):
    """`make demo ITEMS=…` as a new user tries it: a warning, then its critical two minutes on."""
    pipeline = local_pipeline(UNUSED_ENDPOINT)

    def alarm(name: str, severity: str, minute: int) -> str:
        return line("cloudwatch_alarm_state_change", id=f"{name}-1", resources=[
            f"arn:aws:cloudwatch:eu-west-1:123456789012:alarm:{name}"], detail__alarmName=name,
            detail__state__timestamp=f"2026-11-29T12:{minute:02d}:00.000+0000",
            detail__alarmTags=[{"key": "severity", "value": severity}, {"key": "service", "value": "checkout"}])

    items = tmp_path / "items.jsonl"
    items.write_text("\n".join([alarm("checkout-latency", "low", 1), alarm("checkout-healthy-hosts-0", "critical", 3),
                                alarm("checkout-5xx", "medium", 4)]) + "\n")
    report = [report_line(o) for o in pipeline.run(read_items([items]))]
    assert report[1]["outcome"] in ("routed", "review") and report[1]["escalated"] is True, report[1]
    assert report[1]["decisions"]["priority"]["answer"] == "P1"
    assert report[2]["outcome"] == "grouped" and "checkout-healthy-hosts-0" in report[2]["reason"], report[2]
    # each decision's reason names the noise controls: the first alarm leads its group; the
    # critical took the group over from it (and leads it now)
    first, critical = (report[n]["decisions"]["priority"]["why"]["noise"] for n in (0, 1))
    assert first["group_leader"] == report[0]["item_id"] and first["took_over_from"] is None
    assert critical["grouping"] == first["grouping"] is not None
    assert (critical["group_leader"], critical["took_over_from"]) == (report[1]["item_id"], report[0]["item_id"])
    assert report[1]["decisions"]["team"]["why"]["noise"] == critical
    # the held alarm has no decision: its audit row says which control held it, and in whose group
    (held,) = [row for row in pipeline.dynamodb.scan(TableName=pipeline.audit_table)["Items"]
               if row["outcome"]["S"] == "grouped"]
    assert json.loads(held["outcome_detail"]["S"])["why"] == {
        "grouping": critical["grouping"], "group_leader": report[1]["item_id"], "held": "grouped"}
