"""Every enabled native source has its rule on the right bus with the incident intake as its
target (retries, the incident DLQ, the invoke permission); a disabled one has none; the rules
match the sources' own events and nothing else (moto's EventBridge matching, SQS stand-ins)."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from local.cloudformation import Stack, TemplateError
from tests.functions.conftest import EVENTS

SOURCES = {  # parameter -> (rule, its event's source, sample)
    "CloudWatchAlarmSource": ("CloudWatchAlarmRule", "aws.cloudwatch", "cloudwatch_alarm_state_change"),
    "HealthEventSource": ("HealthEventRule", "aws.health", "aws_health_event"),
    "GuardDutyFindingSource": ("GuardDutyFindingRule", "aws.guardduty", "guardduty_finding"),
    "SecurityHubFindingSource": ("SecurityHubFindingRule", "aws.securityhub", "securityhub_findings_imported"),
    "SecurityHubOcsfFindingSource": ("SecurityHubOcsfFindingRule", "aws.securityhub", "securityhub_ocsf_finding"),
    "PagerDutySource": ("PagerDutyRule", "aws.partner/pagerduty.com/", "pagerduty_incident_trigger"),
}
ALL_ON = {name: "true" for name in SOURCES} | {"PagerDutyEventBusName": "pagerduty-acme-router"}


def load(**parameters: str) -> Stack:
    return Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", **parameters})


@pytest.mark.parametrize("parameter", sorted(SOURCES))
def test_an_enabled_source_has_its_rule_target_dead_letter_queue_and_permission(parameter):
    stack = load(**ALL_ON)
    rule, source, _ = SOURCES[parameter]
    props = stack.resolve(stack.properties(rule))
    assert props["State"] == "ENABLED"
    pattern_source = props["EventPattern"]["source"]
    assert pattern_source == ([{"prefix": source}] if source.endswith("/") else [source])
    assert props.get("EventBusName", "default") == ("pagerduty-acme-router" if parameter == "PagerDutySource" else "default")
    (target,) = props["Targets"]
    assert target["Arn"] == stack.get_att("IncidentIntakeFunction", "Arn")
    assert target["DeadLetterConfig"]["Arn"] == stack.get_att("IncidentDeadLetterQueue", "Arn")
    assert target["RetryPolicy"]["MaximumRetryAttempts"] > 0
    permission = stack.resolve(stack.properties(f"{rule}Permission"))
    assert permission["SourceArn"] == stack.get_att(rule, "Arn") and permission["Principal"] == "events.amazonaws.com"
    # The rule may hand undeliverable events to the incident DLQ.
    statements = stack.resolve(stack.properties("IncidentDeadLetterQueuePolicy"))["PolicyDocument"]["Statement"]
    (statement,) = [s for s in statements if s["Effect"] == "Allow"]
    assert stack.get_att(rule, "Arn") in statement["Condition"]["ArnEquals"]["aws:SourceArn"]
    # Nobody else may: the redrive re-sends what the queue holds.
    (deny,) = [s for s in statements if s["Effect"] == "Deny"]
    assert deny["Action"] == "sqs:SendMessage" and deny["Principal"] == "*"
    assert deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"] == stack.get_att("IncidentIntakeFunctionRole", "Arn")


@pytest.mark.parametrize("parameter", sorted(SOURCES))
def test_a_disabled_source_has_no_rule(parameter):
    stack = load(**ALL_ON | {parameter: "false"})
    rule = SOURCES[parameter][0]
    assert rule not in stack.resources and f"{rule}Permission" not in stack.resources
    assert set(stack.of_type("AWS::Events::Rule")) >= {r for p, (r, _, _) in SOURCES.items() if p != parameter}


def test_pagerduty_is_off_by_default_and_the_aws_sources_on():
    rules = set(load().of_type("AWS::Events::Rule"))
    assert {r for r, *_ in SOURCES.values()} - rules == {"PagerDutyRule"}


def test_pagerduty_without_its_bus_is_refused_by_the_template_rule():
    template = load().template
    (assertion,) = template["Rules"]["PagerDutyBus"]["Assertions"]
    assert assertion["Assert"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "PagerDutyEventBusName"}, ""]}]}
    with pytest.raises(TemplateError):
        load(PagerDutySource="maybe")


def test_incident_intake_gets_the_open_incident_table_and_may_park_in_its_dlq():
    stack = load()
    env = stack.function_environment("IncidentIntakeFunction")
    assert env["OPEN_INCIDENTS_TABLE_NAME"] == stack.ref("OpenIncidentsTable")
    assert env["DEAD_LETTER_QUEUE_URL"] == stack.ref("IncidentDeadLetterQueue")
    policies = json.dumps(stack.resolve(stack.properties("IncidentIntakeFunction")["Policies"]))
    assert stack.ref("OpenIncidentsTable") in policies and stack.get_att("IncidentDeadLetterQueue", "QueueName") in policies


@pytest.mark.stack
def test_each_rule_matches_its_sources_samples_and_no_other():
    with mock_aws():
        stack = load(**ALL_ON).create()
        events = boto3.client("events")
        for _, (rule, _, name) in SOURCES.items():
            event = json.loads((EVENTS / f"{name}.json").read_text())
            entry = {"Source": event["source"], "DetailType": event["detail-type"], "Detail": json.dumps(event["detail"])}
            bus = "pagerduty-acme-router" if rule == "PagerDutyRule" else "default"
            events.put_events(Entries=[dict(entry, EventBusName=bus),
                                       dict(entry, EventBusName=bus, DetailType="Something Else")])
        delivered = {rule: [(e["source"], e["detail-type"]) for e in stack.rule_events(rule, "IncidentIntake")]
                     for rule, _, _ in SOURCES.values()}
    assert {rule: len(found) for rule, found in delivered.items()} == {rule: 1 for rule, _, _ in SOURCES.values()}


def test_the_security_hub_rules_match_their_own_detail_type_so_the_feeds_do_not_duplicate():
    stack = load(**ALL_ON)
    patterns = {rule: stack.resolve(stack.properties(rule))["EventPattern"]
                for rule in ("SecurityHubFindingRule", "SecurityHubOcsfFindingRule")}
    assert patterns == {"SecurityHubFindingRule": {"source": ["aws.securityhub"],
                                                   "detail-type": ["Security Hub Findings - Imported"]},
                        "SecurityHubOcsfFindingRule": {"source": ["aws.securityhub"],
                                                       "detail-type": ["Findings Imported V2"]}}


def test_the_incident_intake_is_subscribed_to_the_alarm_topic_and_alarms_may_invoke_it():
    stack = load()
    function = stack.get_att("IncidentIntakeFunction", "Arn")
    subscription = stack.resolve(stack.properties("IncidentAlarmTopicSubscription"))
    assert subscription == {"TopicArn": stack.ref("IncidentAlarmTopic"), "Protocol": "lambda", "Endpoint": function}
    permission = stack.resolve(stack.properties("IncidentAlarmTopicPermission"))
    assert permission["Principal"] == "sns.amazonaws.com" and permission["SourceArn"] == stack.ref("IncidentAlarmTopic")
    action = stack.resolve(stack.properties("AlarmActionPermission"))
    assert action["Principal"] == "lambda.alarms.cloudwatch.amazonaws.com"
    assert action["SourceArn"].endswith(":alarm:*") and action["SourceAccount"] == stack.account_id
    assert "ExistingAlarmTopicSubscription" not in stack.resources  # no topic named


def test_an_existing_alarm_topic_is_subscribed_too_and_each_path_can_be_turned_off():
    topic = "arn:aws:sns:us-east-1:123456789012:ops-alarms"
    stack = load(ExistingAlarmTopicArn=topic)
    assert stack.resolve(stack.properties("ExistingAlarmTopicSubscription"))["TopicArn"] == topic
    assert stack.resolve(stack.properties("ExistingAlarmTopicPermission"))["SourceArn"] == topic
    off = load(AlarmSnsSource="false", AlarmActionSource="false")
    assert not {"IncidentAlarmTopic", "IncidentAlarmTopicSubscription", "IncidentAlarmTopicPermission",
                "AlarmActionPermission"} & set(off.resources)


@pytest.mark.stack
def test_the_incident_webhook_rule_takes_forwarded_webhooks_on_the_decision_bus_only():
    with mock_aws():
        stack = load().create()
        events = boto3.client("events")
        bus = stack.ref("DecisionBus")
        for name in ("pagerduty_webhook_v3_triggered", "grafana_alerting_webhook"):
            event = json.loads((EVENTS / f"{name}.json").read_text())
            entry = {"Source": event["source"], "DetailType": event["detail-type"], "Detail": json.dumps(event["detail"])}
            events.put_events(Entries=[dict(entry, EventBusName=bus), dict(entry, EventBusName="default"),
                                       dict(entry, EventBusName=bus, Source="someone.else")])
        delivered = [(e["source"], e["detail-type"]) for e in stack.rule_events("IncidentWebhookRule", "IncidentIntake")]
    assert sorted(delivered) == [("decision-router.webhooks", "Grafana Alerting Webhook"),
                                 ("decision-router.webhooks", "PagerDuty Webhook")]
    props = stack.resolve(stack.properties("IncidentWebhookRule"))
    (target,) = props["Targets"]
    assert target["DeadLetterConfig"]["Arn"] == stack.get_att("IncidentDeadLetterQueue", "Arn")


# ------------------------------------------------------------------------ write-back example
ZENDESK = {"ZendeskSubdomain": "acme", "ZendeskApiSecretName": "decision-router/zendesk-api"}


def test_the_zendesk_write_back_example_is_absent_by_default_and_disabled_when_created():
    assert not {"ZendeskWriteBackRule", "ZendeskTicketUpdate", "ZendeskConnection"} & set(load().resources)
    stack = load(**ZENDESK)
    rule = stack.resolve(stack.properties("ZendeskWriteBackRule"))
    assert rule["State"] == "DISABLED" and rule["EventBusName"] == stack.ref("DecisionBus")
    assert rule["EventPattern"] == {"source": ["decision-router"], "detail-type": ["Item Routed"],
                                    "detail": {"outcome": ["auto_routed", "reviewed"],
                                               "reference": {"system": ["zendesk"]}}}
    (target,) = rule["Targets"]
    assert target["Arn"] == stack.get_att("ZendeskTicketUpdate", "Arn")
    assert target["HttpParameters"] == {"PathParameterValues": ["$.detail.reference.id"]}
    assert target["DeadLetterConfig"]["Arn"] == stack.get_att("NotificationDeadLetterQueue", "Arn")
    note = target["InputTransformer"]["InputTemplate"]
    for name in target["InputTransformer"]["InputPathsMap"]:
        note = note.replace(f"<{name}>", "x")
    assert json.loads(note)["ticket"]["comment"]["public"] is False  # valid JSON once filled in
    destination = stack.resolve(stack.properties("ZendeskTicketUpdate"))
    assert destination["InvocationEndpoint"] == "https://acme.zendesk.com/api/v2/tickets/*"
    assert destination["ConnectionArn"] == stack.get_att("ZendeskConnection", "Arn")
    auth = stack.resolve(stack.properties("ZendeskConnection"))["AuthParameters"]["BasicAuthParameters"]
    assert auth["Password"] == "{{resolve:secretsmanager:decision-router/zendesk-api:SecretString:password}}"
    role = json.dumps(stack.resolve(stack.properties("ZendeskWriteBackRole")))
    assert "events:InvokeApiDestination" in role and stack.get_att("ZendeskTicketUpdate", "Arn") in role
