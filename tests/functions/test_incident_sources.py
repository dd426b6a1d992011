"""The native incident sources' adapters (pure code): each sample in events/ and the variants a
source really sends (OK, INSUFFICIENT_DATA, composite and anomaly alarms, closed Health events,
archived findings, PagerDuty's lifecycle) map to the right outcome, severity and evidence."""

from __future__ import annotations

import copy
import json

import pytest

from decision_router.domain.policies import Policy, PolicyError, load_policy
from decision_router.domain.rules import apply_rules
from decision_router.intake.incidents import native_outcomes
from decision_router.items import parse_item
from decision_router.sources import raw_events, read_event
from decision_router.sources.events import (
    AnyEnvelope,
    Ignored,
    InvalidSourceEvent,
    Opened,
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


# ------------------------------------------------------------------------ cloudwatch_sns and cloudwatch_action
def outcomes_of(payload) -> list:
    """Every outcome of a raw payload, as the intake reads it (an SNS event: record by record)."""
    return [o for event in raw_events(payload) for o in native_outcomes(*read_event(event), TABLES)]


def sns_alarm(**message) -> dict:
    event = sample("cloudwatch_alarm_sns")
    record = event["Records"][0]["Sns"]
    record["Message"] = json.dumps({**json.loads(record["Message"]), **message})
    return event


def test_an_sns_alarm_opens_the_incident_the_eventbridge_alarm_opens_on_the_same_key_and_delivery():
    (by_sns,) = outcomes_of(sample("cloudwatch_alarm_sns"))
    (by_bus,) = outcomes_of(sample("cloudwatch_alarm_state_change"))
    assert isinstance(by_sns, Opened) and by_sns.key == by_bus.key == by_sns.incident.incident_id
    assert by_sns.delivery == by_bus.delivery  # one state change, whichever way it came
    incident = by_sns.incident
    assert incident.source == "aws.cloudwatch" and incident.severity == "sev3"  # SNS carries no tags: the default
    assert incident.reported_at.isoformat() == "2026-11-29T11:58:20.120000+00:00"  # "+0000" read as UTC
    assert (incident.evidence.alarm_kind, incident.evidence.metric_name) == ("metric", "HTTPCode_Target_5XX_Count")
    assert incident.evidence.dimensions == "LoadBalancer=app/checkout-api/3f2a9c1d0b7e6a54"
    notification = read_event(raw_events(sample("cloudwatch_alarm_sns"))[0])[1]  # read once, no envelope made of it
    assert notification.id == sample("cloudwatch_alarm_sns")["Records"][0]["Sns"]["MessageId"]
    assert notification.Message.AlarmArn == by_bus.key  # the Message parsed with the notification


def test_sns_ok_resolves_insufficient_data_is_ignored_and_a_bare_notification_reads_the_same():
    (resolved,) = outcomes_of(sns_alarm(NewStateValue="OK", NewStateReason="back under the threshold"))
    assert isinstance(resolved, Resolved) and "back under the threshold" in resolved.reason
    (ignored,) = outcomes_of(sns_alarm(NewStateValue="INSUFFICIENT_DATA", NewStateReason="no datapoints"))
    assert isinstance(ignored, Ignored) and "INSUFFICIENT_DATA" in ignored.reason and "no datapoints" in ignored.reason
    bare = sample("cloudwatch_alarm_sns")["Records"][0]["Sns"]  # as an HTTPS or SQS subscriber gets it
    (opened,) = outcomes_of(bare)
    assert isinstance(opened, Opened) and opened.key.endswith(":alarm:checkout-api-5xx-rate")


def test_sns_metric_math_anomaly_and_composite_alarms_with_children_as_strings_or_objects():
    math = sns_alarm(Trigger={
        "Metrics": [{"Expression": "m1*1", "Id": "e1", "Label": "Expression1", "ReturnData": True},
                    {"Id": "m1", "ReturnData": False, "MetricStat": {"Metric": {
                        "Dimensions": [{"value": "TestInstance", "name": "InstanceId"}], "MetricName": "NetworkOut",
                        "Namespace": "AWS/EC2"}, "Period": 60, "Stat": "Average"}}],
        "ComparisonOperator": "GreaterThanThreshold", "Threshold": 0.0})
    anomaly = sns_alarm(Trigger={"ThresholdMetricId": "ad1",
                                 "ComparisonOperator": "LessThanLowerOrGreaterThanUpperThreshold", "Metrics": [
        {"Id": "m1", "ReturnData": True, "MetricStat": {"Metric": {"MetricName": "CPUUtilization", "Namespace": "AWS/EC2",
                                                                   "Dimensions": []}, "Period": 60, "Stat": "Average"}},
        {"Id": "ad1", "Expression": "ANOMALY_DETECTION_BAND(m1, 2)", "ReturnData": True}]})
    children = [{"Arn": "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:api-5xx",
                 "State": {"Value": "ALARM", "Timestamp": "2026-11-29T11:57:55.640+0000"}},
                "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:api-latency"]
    composite = sns_alarm(Trigger=None, AlarmRule="ALARM(api-5xx) OR ALARM(api-latency)", TriggeringChildren=children)
    (m,), (a,), (c,) = outcomes_of(math), outcomes_of(anomaly), outcomes_of(composite)
    assert m.incident.evidence.alarm_kind == "metric-math" and "m1*1" in m.incident.description
    assert m.incident.evidence.namespace == "AWS/EC2" and m.incident.evidence.dimensions == "InstanceId=TestInstance"
    assert a.incident.evidence.alarm_kind == "anomaly-detection"
    assert c.incident.evidence.alarm_kind == "composite" and "Triggered by api-5xx, api-latency" in c.incident.description
    empty = sns_alarm(Trigger=None, AlarmRule="ALARM(a)", TriggeringChildren=[])
    assert outcomes_of(empty)[0].incident.evidence.alarm_kind == "composite"


def test_the_published_aws_sns_alarm_samples_map():
    """The alarm messages AWS's own Lambda library ships as fixtures (metric math with `Region`
    EXAMPLE and placeholder ARNs) still map: nothing in them is needed that they lack."""
    for trigger in ({"MetricName": "CPUUtilization", "Namespace": "AWS/EC2", "Unit": None, "Dimensions": [
            {"value": "i-0123", "name": "InstanceId"}], "Period": 60, "EvaluationPeriods": 1,
            "ComparisonOperator": "GreaterThanThreshold", "Threshold": 0.0,
            "TreatMissingData": "- TreatMissingData:                    missing",
            "EvaluateLowSampleCountPercentile": ""},):
        (opened,) = outcomes_of(sns_alarm(Region="EXAMPLE", AlarmDescription=None, Trigger=trigger))
        assert opened.incident.evidence.metric_name == "CPUUtilization"


def test_an_sns_message_that_is_no_alarm_or_misses_a_field_is_refused_with_the_reason():
    event = sample("cloudwatch_alarm_sns")
    event["Records"][0]["Sns"]["Message"] = "Deployment finished"
    with pytest.raises(UnknownEvent, match="is not a CloudWatch alarm notification"):
        outcomes_of(event)
    missing = sns_alarm()
    message = json.loads(missing["Records"][0]["Sns"]["Message"])
    del message["AlarmArn"]
    missing["Records"][0]["Sns"]["Message"] = json.dumps(message)
    with pytest.raises(InvalidSourceEvent, match="'Alarm SNS Notification' event: Message.AlarmArn: Field required"):
        outcomes_of(missing)
    no_message = sample("cloudwatch_alarm_sns")
    del no_message["Records"][0]["Sns"]["Message"]  # not an SNS notification as SNS sends them
    with pytest.raises(InvalidSourceEvent, match="aws:sns 'Notification' event: Message: Field required"):
        outcomes_of(no_message)


@pytest.mark.parametrize("message, refused", [
    ("[1]", "is not a CloudWatch alarm notification"),  # JSON, but no object
    (json.dumps({"AlarmName": "api-5xx", "State": "ALARM"}), "is not a CloudWatch alarm notification"),
    (7, "aws:sns 'Notification' event: Message: JSON input should be string"),  # SNS sends text
])
def test_an_sns_message_of_another_shape_is_refused_naming_why(message, refused):
    event = sample("cloudwatch_alarm_sns")
    event["Records"][0]["Sns"]["Message"] = message
    with pytest.raises(SourceEventError, match=refused):
        outcomes_of(event)


def test_a_notification_without_what_sns_always_sends_names_the_field():
    bare = sample("cloudwatch_alarm_sns")["Records"][0]["Sns"]
    del bare["MessageId"]
    with pytest.raises(InvalidSourceEvent, match="aws:sns 'Notification' event: MessageId: Field required"):
        outcomes_of(bare)


def test_an_sns_event_of_several_records_is_one_delivery_per_record():
    event = sample("cloudwatch_alarm_sns")
    ok = sns_alarm(NewStateValue="OK")["Records"][0]
    ok["Sns"]["MessageId"] = "another"
    event["Records"].append(ok)
    assert [type(o).__name__ for o in outcomes_of(event)] == ["Opened", "Resolved"]


def test_a_lambda_alarm_action_maps_as_the_eventbridge_alarm_does():
    (opened,) = outcomes_of(sample("cloudwatch_alarm_action"))
    assert opened.key == "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:orders-db-cpu-anomaly"
    assert opened.incident.evidence.alarm_kind == "anomaly-detection"
    assert opened.incident.service == "AWS/RDS DBInstanceIdentifier=orders-primary"
    action = sample("cloudwatch_alarm_action")
    action["alarmData"]["state"]["value"] = "OK"
    assert isinstance(outcomes_of(action)[0], Resolved)
    del action["alarmData"]["alarmName"]
    with pytest.raises(InvalidSourceEvent, match="'Lambda Alarm Action' event: alarmData.alarmName: Field required"):
        outcomes_of(action)


# ------------------------------------------------------------------------ Security Hub OCSF
def ocsf(**finding) -> dict:
    event = sample("securityhub_ocsf_finding")
    event["detail"]["findings"][0].update(finding)
    return event


def test_an_ocsf_detection_finding_opens_on_the_key_guardduty_and_asff_use():
    (opened,) = outcomes_of(sample("securityhub_ocsf_finding"))
    (guardduty,) = outcomes_of(sample("guardduty_finding"))
    assert opened.key == guardduty.key == "8ec6a1f0d2b34c5e9f7a6b5c4d3e2f10"  # one finding, one incident
    incident = opened.incident
    assert incident.source == "aws.securityhub" and incident.severity == "sev2"  # High
    assert incident.evidence.finding_class == "Detection Finding" and incident.evidence.product == "GuardDuty"
    assert incident.evidence.source_ref.startswith("arn:aws:guardduty:")
    assert apply_rules(POLICY, incident)["team"].option_id == "security"
    asff = sample("securityhub_findings_imported")
    asff["detail"]["findings"][0]["Id"] = incident.evidence.source_ref  # GuardDuty's finding imported as ASFF
    assert outcomes_of(asff)[0].key == opened.key


def test_an_ocsf_compliance_finding_shares_the_asff_key_and_passing_resolves():
    asff_id = sample("securityhub_findings_imported")["detail"]["findings"][0]["Id"]
    control = ocsf(class_uid=2003, class_name="Compliance Finding", severity_id=6, severity="Fatal",
                   finding_info={"uid": asff_id, "title": "S3 general purpose buckets should block public access",
                                 "types": ["Software and Configuration Checks"]},
                   compliance={"status": "FAILED", "control": "S3.2", "standards": ["aws-foundational"]},
                   resources=[{"type": "AWS::S3::Bucket", "uid": "arn:aws:s3:::invoices-export"}])
    (opened,) = outcomes_of(control)
    (asff,) = outcomes_of(sample("securityhub_findings_imported"))
    assert opened.key == asff.key == asff_id
    assert opened.incident.severity == "sev1" and opened.incident.evidence.compliance_control == "S3.2"  # Fatal
    control["detail"]["findings"][0]["compliance"]["status"] = "PASSED"
    assert isinstance(outcomes_of(control)[0], Resolved)


@pytest.mark.parametrize("change, why", [({"activity_id": 3}, "activity Close"), ({"status_id": 3}, "Suppressed"),
                                         ({"status_id": 4}, "Resolved"), ({"status_id": 5}, "Archived")])
def test_an_ocsf_finding_closed_suppressed_or_resolved_at_the_source_resolves(change, why):
    (resolved,) = outcomes_of(ocsf(**change))
    assert isinstance(resolved, Resolved) and why in resolved.reason


def test_an_ocsf_finding_without_its_uid_names_the_field():
    event = sample("securityhub_ocsf_finding")
    del event["detail"]["findings"][0]["finding_info"]["uid"]
    with pytest.raises(InvalidSourceEvent, match=r"detail.findings.0.finding_info.uid: Field required"):
        outcomes_of(event)


# ------------------------------------------------------------------------ webhooks: PagerDuty V3, Grafana
def pd_webhook(event_type: str = "incident.triggered", **data) -> dict:
    event = sample("pagerduty_webhook_v3_triggered")
    event["detail"]["event"]["event_type"] = event_type
    event["detail"]["event"]["data"].update(data)
    return event


def test_a_pagerduty_v3_trigger_opens_on_the_partner_bus_key_resolve_resolves_others_are_ignored():
    (opened,) = outcomes_of(pd_webhook())
    (partner,) = outcomes_of(sample("pagerduty_incident_trigger"))
    assert opened.key == partner.key == "Q2W3E4R5T6Y7U8"  # one PagerDuty incident, whichever way it comes
    assert opened.incident.source == "pagerduty" and opened.incident.severity == "sev2"  # P2
    assert opened.incident.evidence.pagerduty_service == "search-api"
    assert isinstance(outcomes_of(pd_webhook("incident.reopened"))[0], Opened)
    assert isinstance(outcomes_of(pd_webhook("incident.resolved", resolve_reason=None))[0], Resolved)
    acked = outcomes_of(pd_webhook("incident.acknowledged"))[0]
    assert isinstance(acked, Ignored) and acked.key == "Q2W3E4R5T6Y7U8" and "incident.acknowledged" in acked.reason
    assert outcomes_of(pd_webhook(priority=None, urgency="low"))[0].incident.severity == "sev4"


def test_a_pagerduty_v3_event_that_is_no_incident_is_ignored_and_a_trigger_without_title_names_it():
    event = pd_webhook("pagey.ping")
    event["detail"]["event"].update(resource_type="pagey", data={"message": "Hello from your friend Pagey!",
                                                                 "type": "ping"})
    (ignored,) = outcomes_of(event)
    assert isinstance(ignored, Ignored) and "pagey.ping" in ignored.reason
    untitled = pd_webhook(title=None)
    with pytest.raises(InvalidSourceEvent, match="detail.event.data.title"):
        outcomes_of(untitled)


def test_a_grafana_post_is_one_incident_per_alert_fingerprint_and_resolved_alerts_resolve():
    event = sample("grafana_alerting_webhook")
    first, second = outcomes_of(event)
    assert (first.key, second.key) == ("grafana:c6eadffa33fcdf37", "grafana:bc97ff14869b13e3")
    assert first.incident.severity == "sev1" and second.incident.severity == "sev3"  # critical, warning
    assert first.incident.service == "checkout-api" and first.incident.evidence.alertname == "High memory usage"
    assert first.incident.title == "checkout-api memory above 90% in zone us-1"
    event["detail"]["alerts"][1]["status"] = "resolved"
    assert [type(o).__name__ for o in outcomes_of(event)] == ["Opened", "Resolved"]


def test_grafana_correlated_by_group_is_one_incident_resolved_with_the_whole_group():
    raw = POLICY.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["source_severity"]["grafana"]["correlate_by"] = "group"
    tables = Policy.model_validate(raw).source_severity
    event = sample("grafana_alerting_webhook")
    (group,) = native_outcomes(*read_event(event), tables)
    assert group.key == "grafana-group:{}:{}" and group.incident.evidence.alerts == 2
    assert group.incident.severity == "sev1"  # no common severity: the worst firing alert's
    event["detail"]["status"] = "resolved"
    for alert in event["detail"]["alerts"]:
        alert["status"] = "resolved"
    assert isinstance(native_outcomes(*read_event(event), tables)[0], Resolved)
    raw["source_severity"]["grafana"]["correlate_by"] = "label"
    with pytest.raises(ValueError, match="correlate_by"):
        Policy.model_validate(raw)
