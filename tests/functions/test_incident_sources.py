"""The native incident sources' adapters (pure code): each sample in events/ and the variants a
source really sends (OK, INSUFFICIENT_DATA, composite and anomaly alarms, closed Health events,
archived findings, PagerDuty's lifecycle) map to the right outcome, severity and evidence."""

from __future__ import annotations

import copy
import json

import pytest

from decision_router.domain.items import parse_item
from decision_router.domain.policies import Policy, PolicyError, load_policy
from decision_router.domain.rules import apply_rules
from decision_router.intake.incidents import IncidentOpened as Opened
from decision_router.intake.incidents import native_outcomes
from decision_router.sources import read_event
from decision_router.sources.events import (
    AnyEnvelope,
    Ignored,
    InvalidSourceEvent,
    Resolved,
    SourceEventError,
    UnknownEvent,
    incident_id,
    read_envelope,
)
from tests.functions.conftest import EVENTS

POLICY = load_policy("incident")
TABLES = POLICY.source_severity


def sample(name: str) -> dict:
    return json.loads((EVENTS / f"{name}.json").read_text())


def outcome(event: dict):
    (result,) = native_outcomes(*read_event(event), TABLES)
    return result


def alarm(state: str = "ALARM", **detail) -> dict:
    event = sample("cloudwatch_alarm_state_change")
    event["detail"]["state"]["value"] = state
    event["detail"].update(detail)
    return event


# ------------------------------------------------------------------------ CloudWatch
def test_an_alarm_in_alarm_opens_an_incident_keyed_by_its_arn_with_its_metric_as_evidence():
    opened = outcome(alarm())
    assert isinstance(opened, Opened)
    incident = opened.incident
    assert opened.key == incident.incident_id == "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:checkout-api-5xx-rate"
    assert incident.source == "aws.cloudwatch" and incident.service == "checkout-api"  # the alarm's service tag
    assert incident.severity == "sev2"  # its severity tag "high", by the policy's table
    assert incident.reported_at.isoformat() == "2026-11-29T11:58:20.120000+00:00"  # +0000 read as UTC
    evidence = incident.evidence
    assert (evidence.alarm_kind, evidence.namespace, evidence.metric_name) == ("metric", "AWS/ApplicationELB",
                                                                             "HTTPCode_Target_5XX_Count")
    assert evidence.source_severity == "high" and "LoadBalancer=app/checkout-api" in evidence.dimensions
    assert "Threshold Crossed" in incident.description and "AWS/ApplicationELB" in incident.description


def test_ok_resolves_and_insufficient_data_is_ignored_with_the_reason():
    resolved = outcome(alarm("OK"))
    assert isinstance(resolved, Resolved) and resolved.key.endswith(":alarm:checkout-api-5xx-rate")
    ignored = outcome(alarm("INSUFFICIENT_DATA"))
    assert isinstance(ignored, Ignored) and "INSUFFICIENT_DATA" in ignored.reason and ignored.key == resolved.key


def test_metric_math_anomaly_and_composite_alarms_are_told_apart():
    math = alarm(configuration={"description": "Total traffic", "metrics": [
        {"id": "e1", "expression": "SUM(METRICS())", "label": "Total", "returnData": True},
        {"id": "m1", "metricStat": {"metric": {"namespace": "AWS/EC2", "name": "NetworkIn", "dimensions": {}},
                                    "period": 300, "stat": "Maximum"}, "returnData": False}]})
    band = alarm(configuration={"metrics": [
        {"id": "m1", "metricStat": {"metric": {"namespace": "AWS/EC2", "name": "CPUUtilization"}, "period": 60,
                                    "stat": "Average"}, "returnData": True},
        {"id": "ad1", "expression": "ANOMALY_DETECTION_BAND(m1, 2)", "returnData": True}]})
    composite = alarm(alarmTags=[], configuration={"alarmRule": "ALARM(api-5xx) OR ALARM(api-latency)",
                                                   "actionsSuppressor": "maintenance"})
    composite["detail"]["state"]["reasonData"] = json.dumps({"triggeringAlarms": [
        {"arn": "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:api-5xx", "state": {"value": "ALARM"}}]})
    kinds = {name: outcome(event).incident for name, event in
             {"math": math, "band": band, "composite": composite}.items()}
    assert kinds["math"].evidence.alarm_kind == "metric-math" and "SUM(METRICS())" in kinds["math"].description
    assert kinds["band"].evidence.alarm_kind == "anomaly-detection"
    incident = kinds["composite"]
    assert incident.evidence.alarm_kind == "composite" and incident.evidence.namespace is None
    assert "ALARM(api-5xx) OR ALARM(api-latency)" in incident.description and "api-5xx" in incident.description
    assert incident.severity == "sev3"  # no severity tag: the table's default
    assert incident.service == "checkout-api-5xx-rate"  # no metric and no service tag: the alarm's name


# ------------------------------------------------------------------------ AWS Health
def test_a_health_issue_opens_with_its_rfc_1123_times_parsed():
    opened = outcome(sample("aws_health_event"))
    incident = opened.incident
    assert opened.key.startswith("arn:aws:health:eu-west-1::event/RDS/")
    assert incident.reported_at.isoformat() == "2026-11-29T10:41:07+00:00"  # "Sun, 29 Nov 2026 10:41:07 GMT"
    assert (incident.service, incident.severity) == ("RDS", "sev2")  # category issue
    assert incident.evidence.health_event_type == "AWS_RDS_OPERATIONAL_ISSUE"
    assert "orders-primary (IMPAIRED)" in incident.description


def test_health_scheduled_change_is_low_upcoming_opens_and_closed_resolves():
    event = sample("aws_health_event")
    event["detail"].update(eventTypeCategory="scheduledChange", statusCode="upcoming")
    assert outcome(event).incident.severity == "sev4"
    event["detail"]["statusCode"] = "closed"
    assert isinstance(outcome(event), Resolved)


def test_a_health_time_that_is_neither_form_names_the_field():
    event = sample("aws_health_event")
    event["detail"]["startTime"] = "Sun, 99 Nov 2026 10:12:00 GMT"
    with pytest.raises(InvalidSourceEvent, match="detail.startTime"):
        outcome(event)


# ------------------------------------------------------------------------ GuardDuty, Security Hub
@pytest.mark.parametrize("score, band, sev", [(9.5, "CRITICAL", "sev1"), (8, "HIGH", "sev2"), (7.0, "HIGH", "sev2"),
                                              (5.3, "MEDIUM", "sev3"), (2, "LOW", "sev4")])
def test_guardduty_scores_are_banded_and_mapped_by_the_table(score, band, sev):
    event = sample("guardduty_finding")
    event["detail"]["severity"] = score
    incident = outcome(event).incident
    assert (incident.evidence.source_severity, incident.severity, incident.evidence.source_score) == (band, sev, score)


def test_a_guardduty_finding_is_keyed_by_its_id_and_goes_to_security_by_rule():
    opened = outcome(sample("guardduty_finding"))
    assert opened.key == "8ec6a1f0d2b34c5e9f7a6b5c4d3e2f10"
    assert opened.incident.evidence.finding_type.startswith("UnauthorizedAccess:IAMUser/")
    assert opened.incident.service == "AccessKey ASIAEXAMPLE7QWERTY12"
    assert apply_rules(POLICY, opened.incident)["team"].option_id == "security"
    archived = sample("guardduty_finding")
    archived["detail"]["service"]["archived"] = True
    assert isinstance(outcome(archived), Resolved)


def test_a_security_hub_finding_keeps_its_long_id_as_evidence_and_resolves_when_over():
    opened = outcome(sample("securityhub_findings_imported"))
    incident = opened.incident
    assert incident.severity == "sev1" and incident.evidence.source_ref == opened.key  # CRITICAL
    assert incident.evidence.compliance_status == "FAILED" and incident.evidence.resource_type == "AwsS3Bucket"
    assert apply_rules(POLICY, incident)["priority"].option_id == "P1"  # sev1 pages by rule
    for change in ({"Workflow": {"Status": "RESOLVED"}}, {"RecordState": "ARCHIVED"}, {"Compliance": {"Status": "PASSED"}}):
        event = sample("securityhub_findings_imported")
        event["detail"]["findings"][0].update(change)
        assert isinstance(outcome(event), Resolved)


def test_keys_longer_than_an_item_id_keep_their_start_and_a_digest():
    key = "arn:aws:securityhub:eu-west-1:123456789012:subscription/" + "x" * 200
    short = incident_id(key)
    assert len(short) == 128 and short.startswith(key[:100]) and short != incident_id(key + "y")


# ------------------------------------------------------------------------ PagerDuty
def test_pagerduty_trigger_opens_resolve_resolves_other_lifecycle_events_are_ignored():
    event = sample("pagerduty_incident_trigger")
    opened = outcome(event)
    assert opened.key == "Q2W3E4R5T6Y7U8" and opened.incident.source == "pagerduty"
    assert opened.incident.severity == "sev2"  # priority P2
    assert (opened.incident.evidence.pagerduty_service, opened.incident.evidence.urgency) == ("search-api", "high")
    assert opened.incident.evidence.source_url.endswith("/incidents/Q2W3E4R5T6Y7U8")
    no_priority = copy.deepcopy(event)
    no_priority["detail"]["incident"].update(priority=None, urgency="low")
    assert outcome(no_priority).incident.severity == "sev4"  # urgency low
    event["detail"]["event"] = "incident.acknowledge"
    assert isinstance(outcome(event), Ignored)
    event["detail"]["event"] = "incident.resolve"
    assert isinstance(outcome(event), Resolved)


# ------------------------------------------------------------------------ what is not mapped
def test_an_unknown_detail_type_is_refused_with_what_is_mapped():
    event = alarm()
    event["detail-type"] = "CloudWatch Alarm Configuration Change"
    with pytest.raises(UnknownEvent, match="'CloudWatch Alarm Configuration Change' is not an incident event .*GuardDuty"):
        outcome(event)


def test_a_source_event_missing_a_field_names_it_and_a_non_event_is_refused():
    event = sample("guardduty_finding")
    del event["detail"]["title"]
    with pytest.raises(InvalidSourceEvent, match="detail.title: Field required"):
        outcome(event)
    with pytest.raises(SourceEventError, match="not an EventBridge event: .*detail-type"):
        read_envelope(AnyEnvelope, {"AlarmName": "x"})


# ------------------------------------------------------------------------ items and policy
def test_evidence_does_not_change_the_key_of_an_incident_without_it(incident_data):
    assert parse_item("incident", incident_data).key == parse_item("incident", dict(incident_data, evidence=None)).key


def test_a_policy_rule_can_name_evidence_and_an_incident_without_evidence_never_matches_it(incident_data):
    raw = POLICY.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["rules"].insert(0, {"id": "rds-is-data", "description": "RDS issues belong to data.",
                            "when": [{"field": "evidence.health_event_type", "equals": "AWS_RDS_OPERATIONAL_ISSUE"}],
                            "answers": {"team": "data"}})
    policy = Policy.model_validate(raw)
    assert apply_rules(policy, outcome(sample("aws_health_event")).incident)["team"].option_id == "data"
    assert "team" not in apply_rules(policy, parse_item("incident", incident_data))


def test_a_severity_table_with_a_value_off_the_scale_is_refused(tmp_path):
    raw = POLICY.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["source_severity"]["pagerduty"]["labels"]["P1"] = "critical"
    path = tmp_path / "incident.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(PolicyError, match="source_severity.pagerduty.labels.P1"):
        load_policy(path)
