"""The ways alerts really arrive, end to end, and the noise controls: SNS alarm notifications and
Lambda alarm actions as the incident intake receives them (on the same key as the EventBridge
alarm), Security Hub's OCSF and ASFF feeds both on, PagerDuty V3 and Grafana webhooks forwarded on
the decision bus and delivered by the template's IncidentWebhookRule; a burst of related alarms
paging once (grouping), a flapping alarm held, a maintenance window holding an incident. The real
incident-intake handler, the open-incident and audit tables in moto, and moto executing the real
routing workflow.

SNS and CloudWatch's alarm actions invoke the function directly; moto cannot deliver either to a
function, so those payloads are handed to the handler as Lambda gives them (the template's
subscription and permission are checked in tests/infra/test_source_rules.py). Endpoint answers come
from a botocore Stubber (the model is not what is tested here)."""

from __future__ import annotations

import copy
import json
import time
from datetime import datetime, timezone

import boto3
import pytest

from local.cloudwatch import play_alarm_states
from tests.functions.test_intake_handlers import PRIORITY_OPTIONS, TEAM_OPTIONS, FakeLambdaContext, body
from tests.infra import test_incident_sources_pipeline as native
from tests.infra.test_incident_sources_pipeline import confident, open_row, sample, settled

pytestmark = pytest.mark.stack
#: The native sources' fixtures: the stack with every source on, the intake over a stub endpoint.
pipeline, incidents = native.pipeline, native.incidents


def put(pipeline, event: dict, rule: str, bus: str = "default") -> dict:
    """Put the event on its bus; return it as the template's `rule` delivers it to the intake
    (an alarm's state set first, as CloudWatch sets it before it sends the event)."""
    play_alarm_states(event)
    entry = {"Source": event["source"], "DetailType": event["detail-type"], "Detail": json.dumps(event["detail"]),
             "Resources": event.get("resources", []), "Time": datetime.fromisoformat(event["time"]),
             "EventBusName": bus}
    assert boto3.client("events").put_events(Entries=[entry])["FailedEntryCount"] == 0
    (delivered,) = pipeline.stack.rule_events(rule, "IncidentIntake")
    return delivered


def handle(app, event: dict) -> list[dict]:
    play_alarm_states(event)
    answer = app.lambda_handler(event, FakeLambdaContext())
    return [r for a in answer.get("records", [answer]) for r in a.get("outcomes", [a])]


def alarm(name: str, state: str = "ALARM", minute: int = 0, service: str = "checkout-api") -> dict:
    event = sample("cloudwatch_alarm_state_change")
    event["id"] = f"{name}-{state}-{minute}"
    event["resources"] = [f"arn:aws:cloudwatch:eu-west-1:123456789012:alarm:{name}"]
    event["detail"]["alarmName"] = name
    event["detail"]["state"].update(value=state, timestamp=f"2026-11-29T12:{minute:02d}:00.000+0000")
    event["detail"]["alarmTags"] = [{"key": "severity", "value": "high"}, {"key": "service", "value": service}]
    return event


def sns_of(event: dict) -> dict:
    """The same alarm state change as the SNS notification CloudWatch sends for it."""
    sns = sample("cloudwatch_alarm_sns")
    record = sns["Records"][0]["Sns"]
    message = json.loads(record["Message"])
    detail = event["detail"]
    message.update(AlarmName=detail["alarmName"], AlarmArn=event["resources"][0], NewStateValue=detail["state"]["value"],
                   StateChangeTime=detail["state"]["timestamp"])
    record.update(Message=json.dumps(message), MessageId=f"sns-{event['id']}")
    return sns


# ------------------------------------------------------------------------ SNS and alarm actions
def test_an_alarm_notifying_eventbridge_and_sns_is_one_incident_and_ok_by_either_resolves(pipeline, incidents):
    app, stub = incidents
    confident(stub)
    by_bus = alarm("checkout-api-5xx-rate", minute=1)
    (routed,) = handle(app, put(pipeline, by_bus, "CloudWatchAlarmRule"))
    (by_sns,) = handle(app, sns_of(by_bus))
    assert routed["outcome"] == "routed" and by_sns["outcome"] == "duplicate"  # the same state change
    (ok,) = handle(app, sns_of(alarm("checkout-api-5xx-rate", "OK", minute=7)))
    assert ok["outcome"] == "resolved" and ok["execution_name"] == routed["execution_name"]
    # The ALARM's copy by the other path, late: it reopens nothing.
    (late,) = handle(app, sns_of(by_bus))
    assert late["outcome"] == "duplicate"
    assert len(settled(pipeline)) == 1 and len(stub.requests) == 1


def forged_ok(name: str, minute: int, account: str = "123456789012") -> dict:
    """An "OK" for alarm `name` that CloudWatch did not send: published to the alarm topic by
    someone else (nothing plays CloudWatch's part, so the alarm keeps its state)."""
    ok = alarm(name, "OK", minute=minute)
    ok["resources"] = [f"arn:aws:cloudwatch:eu-west-1:{account}:alarm:{name}"]
    return sns_of(ok)


def test_an_ok_that_cloudwatch_does_not_confirm_leaves_the_incident_open(pipeline, incidents):
    app, stub = incidents
    confident(stub)
    (routed,) = handle(app, put(pipeline, alarm("payments-api-5xx", minute=1, service="payments-api"),
                                "CloudWatchAlarmRule"))
    forged = forged_ok("payments-api-5xx", minute=2)
    answer = app.lambda_handler(forged, FakeLambdaContext())  # (not `handle`: nobody plays CloudWatch)
    (refused,) = [o for a in answer.get("records", [answer]) for o in a.get("outcomes", [a])]
    assert refused["outcome"] == "ignored" and "CloudWatch says the alarm is ALARM now" in refused["reason"]
    assert open_row(pipeline, routed["key"])["status"]["S"] == "open"
    # A forged OK put straight into the intake (as a redrive of the incident DLQ would) fares the same.
    ok = alarm("payments-api-5xx", "OK", minute=3, service="payments-api")
    (direct,) = app.lambda_handler(ok, FakeLambdaContext())["outcomes"]
    assert direct["outcome"] == "ignored" and open_row(pipeline, routed["key"])["status"]["S"] == "open"
    # An open incident whose alarm CloudWatch does not know is never resolved by an OK either
    # (its ALARM is handed over without playing CloudWatch, so no such alarm exists in moto).
    confident(stub)
    (opened,) = app.lambda_handler(alarm("no-such-alarm", minute=4, service="ledger"), FakeLambdaContext())["outcomes"]
    (unknown,) = app.lambda_handler(alarm("no-such-alarm", "OK", minute=5, service="ledger"),
                                    FakeLambdaContext())["outcomes"]
    assert opened["outcome"] == "routed" and unknown["outcome"] == "ignored"
    assert "CloudWatch says there is no such alarm" in unknown["reason"]
    assert open_row(pipeline, opened["key"])["status"]["S"] == "open"
    # When CloudWatch does say OK, the same message resolves it.
    (resolved,) = handle(app, forged)
    assert resolved["outcome"] == "resolved" and resolved["execution_name"] == routed["execution_name"]


def test_an_ok_of_another_accounts_alarm_is_taken_as_it_comes(pipeline, incidents):
    """This account cannot ask about another account's alarm (the bus policy says who may put its events)."""
    app, stub = incidents
    confident(stub)
    other = alarm("shared-db-cpu", minute=1)
    other["resources"] = ["arn:aws:cloudwatch:eu-west-1:210987654321:alarm:shared-db-cpu"]
    (routed,) = app.lambda_handler(other, FakeLambdaContext())["outcomes"]
    answer = app.lambda_handler(forged_ok("shared-db-cpu", minute=5, account="210987654321"), FakeLambdaContext())
    (resolved,) = [o for a in answer.get("records", [answer]) for o in a.get("outcomes", [a])]
    assert routed["outcome"] == "routed" and resolved["outcome"] == "resolved"


def test_a_lambda_alarm_action_is_routed_and_an_sns_message_that_is_no_alarm_is_parked(pipeline, incidents):
    app, stub = incidents
    confident(stub, team_logits=(0, 6.0, 0, 0))
    (routed,) = handle(app, sample("cloudwatch_alarm_action"))
    assert routed["outcome"] == "routed" and routed["target"] == "data-oncall"
    assert list(settled(pipeline).values()) == ["SUCCEEDED"]
    other = sample("cloudwatch_alarm_sns")
    other["Records"][0]["Sns"].update(Message="Deployment 42 finished", MessageId="not-an-alarm")
    (parked,) = handle(app, other)
    assert parked["outcome"] == "dead_lettered" and parked["event_id"] == "not-an-alarm"
    dlq = pipeline.stack.ref("IncidentDeadLetterQueue")
    (message,) = pipeline.sqs.receive_message(QueueUrl=dlq, MessageAttributeNames=["All"])["Messages"]
    attributes = {k: v["StringValue"] for k, v in message["MessageAttributes"].items()}
    assert attributes["failure_kind"] == "unknown_event" and attributes["source"] == "aws:sns"
    assert "is not a CloudWatch alarm notification" in attributes["failure_reason"]
    assert json.loads(message["Body"]) == other  # the SNS event itself, ready to be sent again


# ------------------------------------------------------------------------ Security Hub, both feeds
def test_ocsf_and_asff_imports_of_one_finding_are_one_incident(pipeline, incidents):
    app, stub = incidents
    stub.answer(body(PRIORITY_OPTIONS, [0, 6.0, 0, 0], decision_id="priority"))  # team by rule
    (routed,) = handle(app, put(pipeline, sample("securityhub_ocsf_finding"), "SecurityHubOcsfFindingRule"))
    assert routed["outcome"] == "routed" and routed["target"] == "security-oncall"
    asff = sample("securityhub_findings_imported")
    asff["detail"]["findings"][0]["Id"] = sample("securityhub_ocsf_finding")["detail"]["findings"][0]["finding_info"]["uid"]
    (again,) = handle(app, put(pipeline, asff, "SecurityHubFindingRule"))
    assert again["outcome"] == "updated" and again["key"] == routed["key"]
    closed = sample("securityhub_ocsf_finding")
    closed["detail"]["findings"][0].update(activity_id=3, status_id=4)
    (resolved,) = handle(app, put(pipeline, closed, "SecurityHubOcsfFindingRule"))
    assert resolved["outcome"] == "resolved"
    assert len(settled(pipeline)) == 1


# ------------------------------------------------------------------------ webhooks on the decision bus
def test_a_forwarded_pagerduty_v3_trigger_is_routed_and_its_resolve_resolves(pipeline, incidents):
    app, stub = incidents
    confident(stub)
    bus = pipeline.stack.ref("DecisionBus")
    (routed,) = handle(app, put(pipeline, sample("pagerduty_webhook_v3_triggered"), "IncidentWebhookRule", bus))
    assert routed["outcome"] == "routed" and routed["key"] == "Q2W3E4R5T6Y7U8"
    # The same PagerDuty incident on the partner bus (the EventBridge integration) is not a second one.
    (partner,) = handle(app, sample("pagerduty_incident_trigger"))
    assert partner["outcome"] == "updated"
    resolved = sample("pagerduty_webhook_v3_triggered")
    resolved["detail"]["event"]["event_type"] = "incident.resolved"
    (closed,) = handle(app, put(pipeline, resolved, "IncidentWebhookRule", bus))
    assert closed["outcome"] == "resolved"
    assert len(settled(pipeline)) == 1


def test_a_grafana_post_opens_per_alert_and_its_related_alerts_page_once(pipeline, incidents):
    """Both alerts of the sample are checkout-api's: the shipped grouping joins the second to the first."""
    app, stub = incidents
    stub.answer(body(TEAM_OPTIONS, [0, 0, 0, 6.0], decision_id="team"))  # critical: sev1, P1 by rule
    bus = pipeline.stack.ref("DecisionBus")
    first, second = handle(app, put(pipeline, sample("grafana_alerting_webhook"), "IncidentWebhookRule", bus))
    assert first["outcome"] == "routed" and first["escalate"] is True
    assert second["outcome"] == "grouped" and second["leader"] == first["key"]
    assert len(settled(pipeline)) == 1


# ------------------------------------------------------------------------ noise controls
def test_a_burst_of_related_alarms_pages_once_lists_its_members_and_resolves_with_the_last(pipeline, incidents):
    app, stub = incidents
    confident(stub, priority_logits=(6.0, 0, 0, 0))  # P1: the one page
    names = [f"checkout-api-{what}" for what in ("5xx", "latency", "errors", "saturation", "timeouts")]
    results = [handle(app, put(pipeline, alarm(name, minute=i), "CloudWatchAlarmRule"))[0]
               for i, name in enumerate(names)]
    assert [r["outcome"] for r in results] == ["routed", "grouped", "grouped", "grouped", "grouped"]
    assert list(settled(pipeline).values()) == ["SUCCEEDED"] and len(stub.requests) == 1
    assert len(pipeline.pages()) == 1  # a burst of related alarms pages once
    leader = results[0]
    assert results[-1]["members"] == sorted(r["key"] for r in results)
    assert set(open_row(pipeline, leader["key"])["members"]["SS"]) == {r["key"] for r in results[1:]}
    (audit,) = pipeline.audit(results[2]["incident_id"])
    assert audit["outcome"] == "grouped" and json.loads(audit["outcome_detail"])["leader"] == leader["key"]
    # Another service in the same minutes is an incident of its own.
    confident(stub)
    (other,) = handle(app, put(pipeline, alarm("search-latency", minute=2, service="search"), "CloudWatchAlarmRule"))
    assert other["outcome"] == "routed"
    # The group stays open until every member is resolved.
    outcomes = [handle(app, put(pipeline, alarm(name, "OK", minute=30 + i), "CloudWatchAlarmRule"))[0]
                for i, name in enumerate(names)]
    assert [o["outcome"] for o in outcomes] == ["resolved"] * 5
    assert all("stays open" in o["reason"] for o in outcomes[:-1]) and "the group of 5 is resolved" in outcomes[-1]["reason"]
    assert outcomes[-1]["execution_name"] == leader["execution_name"]
    (closed,) = [row for row in pipeline.audit(leader["incident_id"]) if row["outcome"] == "group_resolved"]
    assert json.loads(closed["outcome_detail"])["members"] == sorted(r["key"] for r in results)
    # A new alarm after the group ended opens a new one.
    confident(stub)
    (fresh,) = handle(app, put(pipeline, alarm("checkout-api-5xx", minute=50), "CloudWatchAlarmRule"))
    assert fresh["outcome"] == "routed"


def tagged(event: dict, severity: str) -> dict:
    for tag in event["detail"]["alarmTags"]:
        if tag["key"] == "severity":
            tag["value"] = severity
    return event


def test_a_critical_after_a_low_alarm_of_its_service_pages_and_leads_the_group(pipeline, incidents):
    """A warning before its critical is how outages often start: grouping must never hold the critical."""
    app, stub = incidents
    confident(stub, priority_logits=(0, 0, 0, 6.0))  # the low alarm: P4, no page
    (low,) = handle(app, put(pipeline, tagged(alarm("checkout-api-latency", minute=1), "low"), "CloudWatchAlarmRule"))
    assert low["outcome"] == "routed" and low["escalate"] is False
    settled(pipeline)
    pages = len(pipeline.pages())
    stub.answer(body(TEAM_OPTIONS, [0, 0, 0, 6.0], decision_id="team"))  # critical: sev1, P1 by rule
    critical = tagged(alarm("checkout-api-healthy-hosts", minute=3), "critical")
    (paged,) = handle(app, put(pipeline, critical, "CloudWatchAlarmRule"))
    assert paged["outcome"] == "routed" and paged["escalate"] is True
    assert "more severe (sev1) than the leader" in paged["reason"]
    settled(pipeline)
    assert len(pipeline.pages()) == pages + 1
    # From now on the critical leads: a high alarm of the service joins it and pages nobody.
    (member,) = handle(app, put(pipeline, alarm("checkout-api-5xx", minute=4), "CloudWatchAlarmRule"))
    assert member["outcome"] == "grouped" and member["leader"] == paged["key"]
    # A second critical of the service pages too (sev1 is held only where the rule includes sev1).
    stub.answer(body(TEAM_OPTIONS, [0, 0, 0, 6.0], decision_id="team"))
    (again,) = handle(app, put(pipeline, tagged(alarm("checkout-api-down", minute=5), "critical"),
                                "CloudWatchAlarmRule"))
    assert again["outcome"] == "routed" and again["escalate"] is True
    # The group is over when all four are resolved; its last resolution names the last leader's run.
    outcomes = [handle(app, put(pipeline, alarm(name, "OK", minute=30 + i), "CloudWatchAlarmRule"))[0]
                for i, name in enumerate(("checkout-api-latency", "checkout-api-healthy-hosts", "checkout-api-5xx",
                                          "checkout-api-down"))]
    assert [o["outcome"] for o in outcomes] == ["resolved"] * 4
    assert "the group of 4 is resolved" in outcomes[-1]["reason"]
    assert outcomes[-1]["execution_name"] == again["execution_name"]


def test_untagged_alarms_of_two_databases_are_two_services(pipeline, incidents):
    app, stub = incidents
    results = []
    for i, db in enumerate(("reporting-db", "payments-db")):
        event = alarm(f"{db}-cpu", minute=i)
        event["detail"]["alarmTags"] = [{"key": "severity", "value": "high"}]
        metric = event["detail"]["configuration"]["metrics"][0]["metricStat"]["metric"]
        metric.update(namespace="AWS/RDS", dimensions={"DBInstanceIdentifier": db})
        confident(stub)
        results += handle(app, put(pipeline, event, "CloudWatchAlarmRule"))
    assert [r["outcome"] for r in results] == ["routed", "routed"]  # one namespace, two groups
    groups = {open_row(pipeline, r["key"])["group"]["S"] for r in results}
    assert len(groups) == 2


def test_an_alarm_that_keeps_flapping_is_held_past_the_policys_limit(pipeline, incidents):
    app, stub = incidents
    for _ in range(3):
        confident(stub)
    outcomes = []
    for i in range(4):  # ALARM/OK four times within the hour: the shipped limit is 3 openings
        outcomes += [o["outcome"] for o in handle(app, put(pipeline, alarm("orders-api-5xx", minute=i * 10),
                                                               "CloudWatchAlarmRule"))]
        outcomes += [o["outcome"] for o in handle(app, put(pipeline, alarm("orders-api-5xx", "OK", minute=i * 10 + 5),
                                                               "CloudWatchAlarmRule"))]
    assert outcomes == ["routed", "resolved"] * 3 + ["flapping", "resolved"]
    assert len(settled(pipeline)) == 3
    key = "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:orders-api-5xx"
    (audit,) = [row for row in pipeline.audit(key) if row["outcome"] == "flapping"]
    assert "opened 4 times in 60 min" in audit["route_reason"]


def test_a_maintenance_window_records_a_matching_incident_without_paging_but_never_a_sev1(pipeline, incidents):
    app, stub = incidents
    bus = pipeline.stack.ref("DecisionBus")
    grafana = sample("grafana_alerting_webhook")
    grafana["detail"]["alerts"] = grafana["detail"]["alerts"][1:]  # one warning alert
    patching = grafana["detail"]["alerts"][0]
    patching["labels"]["service"] = "orders-db"
    patching["startsAt"] = "2026-11-29T02:30:00Z"  # a Sunday, 02:30 in Dublin: the shipped window
    (held,) = handle(app, put(pipeline, grafana, "IncidentWebhookRule", bus))
    assert held["outcome"] == "suppressed" and held["window"] == "orders-db-sunday-patching"
    assert stub.requests == [] and settled(pipeline) == {} and pipeline.pages() == []
    (audit,) = pipeline.audit(held["incident_id"])
    assert audit["outcome"] == "suppressed" and "orders-db-sunday-patching" in audit["route_reason"]
    assert open_row(pipeline, held["key"])["held"]["S"].startswith("maintenance window")
    # A sev1 in the same window is routed as usual.
    critical = copy.deepcopy(grafana)
    critical["detail"]["alerts"][0].update(fingerprint="0a1b2c3d4e5f6a7b")
    critical["detail"]["alerts"][0]["labels"]["severity"] = "critical"
    stub.answer(body(TEAM_OPTIONS, [0, 6.0, 0, 0], decision_id="team"))
    (paged,) = handle(app, put(pipeline, critical, "IncidentWebhookRule", bus))
    assert paged["outcome"] == "routed" and paged["escalate"] is True
    assert list(settled(pipeline).values()) == ["SUCCEEDED"]  # (and no execution thread outlives the test)


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, 29, hour, minute, tzinfo=timezone.utc)  # a Sunday; Dublin is on UTC in winter


def test_a_window_holds_an_incident_until_it_ends_and_the_next_delivery_routes_it(pipeline, incidents):
    """Grafana repeats a firing alert with its first startsAt: the repeat after the window pages."""
    app, stub = incidents
    bus = pipeline.stack.ref("DecisionBus")
    grafana = sample("grafana_alerting_webhook")
    grafana["detail"]["alerts"] = grafana["detail"]["alerts"][1:]
    alert = grafana["detail"]["alerts"][0]
    alert["labels"].update(service="orders-db", severity="error")
    alert["startsAt"] = "2026-11-29T03:55:00Z"  # inside the shipped Sunday 02:00-04:00 window
    app.incidents.clock = lambda: at(3, 56)
    (held,) = handle(app, put(pipeline, grafana, "IncidentWebhookRule", bus))
    assert held["outcome"] == "suppressed" and "until 2026-11-29T04:00:00.000+00:00" in held["reason"]
    assert stub.requests == []
    confident(stub)
    app.incidents.clock = lambda: at(8)  # Grafana's repeat, four hours on
    (routed,) = handle(app, put(pipeline, grafana, "IncidentWebhookRule", bus))
    assert routed["outcome"] == "routed" and "window ended while it was still open" in routed["reason"]
    assert list(settled(pipeline).values()) == ["SUCCEEDED"] and len(stub.requests) == 1
    app.incidents.clock = lambda: at(12)
    (again,) = handle(app, put(pipeline, grafana, "IncidentWebhookRule", bus))
    assert again["outcome"] == "updated" and len(settled(pipeline)) == 1
    resolved = copy.deepcopy(grafana)
    resolved["detail"]["alerts"][0]["status"] = "resolved"
    (closed,) = handle(app, put(pipeline, resolved, "IncidentWebhookRule", bus))
    assert closed["outcome"] == "resolved" and closed["execution_name"] == routed["execution_name"]


def test_the_schedule_routes_an_alarm_still_open_when_its_window_ends(pipeline, incidents):
    """CloudWatch sends nothing more while an alarm stays in ALARM: the template's sweep routes it."""
    app, stub = incidents
    event = alarm("orders-db-writes", minute=0, service="orders-db")
    event["detail"]["state"]["timestamp"] = "2026-11-29T03:50:00.000+0000"
    app.incidents.clock = lambda: at(3, 50)
    (held,) = handle(app, put(pipeline, event, "CloudWatchAlarmRule"))
    assert held["outcome"] == "suppressed"
    schedule = pipeline.stack.template["Resources"]["IncidentIntakeFunction"]["Properties"]["Events"][
        "HeldIncidentSweep"]
    assert schedule["Type"] == "Schedule" and schedule["Properties"]["Schedule"] == "rate(5 minutes)"
    tick = {"version": "0", "id": "tick-1", "detail-type": "Scheduled Event", "source": "aws.events",
            "account": "123456789012", "time": "2026-11-29T03:55:00Z", "region": "eu-west-1",
            "resources": ["arn:aws:events:eu-west-1:123456789012:rule/sweep"], "detail": {}}
    assert app.lambda_handler(tick, FakeLambdaContext())["outcomes"] == []  # the window still lasts
    confident(stub)
    app.incidents.clock = lambda: at(4, 5)
    swept = app.lambda_handler({**tick, "id": "tick-2"}, FakeLambdaContext())
    assert [o["outcome"] for o in swept["outcomes"]] == ["routed"] and swept["outcomes"][0]["key"] == held["key"]
    assert app.lambda_handler({**tick, "id": "tick-3"}, FakeLambdaContext())["outcomes"] == []  # routed once
    assert list(settled(pipeline).values()) == ["SUCCEEDED"]
    (ok,) = handle(app, put(pipeline, alarm("orders-db-writes", "OK", minute=30, service="orders-db"),
                            "CloudWatchAlarmRule"))
    assert ok["outcome"] == "resolved" and ok["execution_name"] == swept["outcomes"][0]["execution_name"]


def test_a_window_whose_action_is_review_decides_the_incident_and_sends_it_to_review(pipeline, incidents):
    """The policy as an operator would edit it: the patching window sends to review instead."""
    from decision_router.domain import policies

    path = policies.POLICY_DIR / "incident.json"  # the test's copy (letters_policies)
    raw = json.loads(path.read_text())
    raw["noise"]["maintenance"][0]["action"] = "review"
    path.write_text(json.dumps(raw))
    app, stub = incidents
    confident(stub)  # confident enough to route alone: the window still sends it to review
    grafana = sample("grafana_alerting_webhook")
    grafana["detail"]["alerts"] = grafana["detail"]["alerts"][1:]
    grafana["detail"]["alerts"][0]["labels"]["service"] = "orders-db"
    grafana["detail"]["alerts"][0]["startsAt"] = "2026-11-29T03:10:00Z"
    (routed,) = handle(app, put(pipeline, grafana, "IncidentWebhookRule", pipeline.stack.ref("DecisionBus")))
    assert routed["outcome"] == "routed" and routed["route"] == "review" and routed["window"] == "orders-db-sunday-patching"
    assert "maintenance window 'orders-db-sunday-patching'" in routed["route_reason"] and routed["escalate"] is False
    deadline, waiting = time.monotonic() + 30, []
    while not waiting and time.monotonic() < deadline:  # the review request, in the pending-review index
        waiting = pipeline.review_requests()
        time.sleep(0.2)  # a poll without a pause holds the GIL: moto's execution thread took 50 s to get there
    assert "orders-db-sunday-patching" in json.dumps(waiting[0]["record"])
    assert pipeline.pages() == []
    # The alert resolves: its review is closed, the workflow ends (and no execution thread outlives the test).
    grafana["detail"]["alerts"][0]["status"] = "resolved"
    (resolved,) = handle(app, put(pipeline, grafana, "IncidentWebhookRule", pipeline.stack.ref("DecisionBus")))
    assert resolved["outcome"] == "resolved" and resolved["review_closed"] is True
    assert list(settled(pipeline).values()) == ["SUCCEEDED"]


@native.ROUTE_FAULTS
def test_a_group_leader_whose_route_failed_still_leads_its_group_on_the_retry(pipeline, incidents, priority_logits,
                                                                              break_route):
    app, stub = incidents
    confident(stub, priority_logits=priority_logits)
    first = put(pipeline, alarm("checkout-api-5xx", minute=1), "CloudWatchAlarmRule")
    mend = break_route(pipeline)
    with pytest.raises(Exception, match="does not exist|StateMachineDoesNotExist"):
        handle(app, first)
    (member,) = handle(app, put(pipeline, alarm("checkout-api-latency", minute=2), "CloudWatchAlarmRule"))
    assert member["outcome"] == "grouped"  # the group exists: its leader's page is on its way
    mend()
    (retried,) = handle(app, first)  # Lambda's retry
    assert retried["outcome"] == "routed"
    assert list(settled(pipeline).values()) == ["SUCCEEDED"]
    group = open_row(pipeline, member["group"])
    assert group["leader"]["S"] == retried["key"] and len(group["members"]["SS"]) == 2
    assert group["execution_name"]["S"] == retried["execution_name"]
