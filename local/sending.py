"""How each kind of input line is sent into the local pipeline, as its source sends it: tickets
to the ticket queue (the SQS event source mapping then runs the ticket intake on batches), our
incidents and raw EventBridge events onto the bus they arrive on (where the template's rules decide
what reaches the incident intake, invoked asynchronously), and Zendesk / Jira / PagerDuty / Grafana
webhook bodies, signed, to the webhook function as API Gateway's HTTP API would post them (what it
forwards to the bus then reaches the incident intake by the template's IncidentWebhookRule).

Each sender fills in the line's `Outcome` with what it learnt on the way (a DLQ and its reason, a
source outcome such as resolved or ignored, the execution a raw event started).
"""

from __future__ import annotations

import itertools
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

from local.cloudwatch import play_alarm_states
from local.dependency_report import dependency_of
from local.event_sources import AsyncResult, BatchReport, http_event, invoke_async
from local.outcomes import Outcome

if TYPE_CHECKING:
    from local.deployment import LocalDeployment

INCIDENT_SOURCE = "local.demo"  # EventBridge `source` of the incidents the demo publishes
WEBHOOK_EVENTS = "decision-router.webhooks"  # the webhook API forwards verified incident webhooks on the decision bus

Progress = Callable[[str], None]


def send_all(pipeline: LocalDeployment, outcomes: list[Outcome], progress: Progress) -> None:
    """Send every line that was not rejected: webhooks first (they queue tickets), then the
    incidents and raw events (several at once, one per execution environment), then the ticket
    queue: as in an outage, the incident is open before the tickets about it arrive, so a ticket
    naming an incident's service is linked to it (decision_router.domain.linking)."""
    webhooks = [o for o in outcomes if o.item.via.startswith("webhook:")]
    tickets = [o for o in outcomes if o.item.kind == "ticket" and o not in webhooks]
    incidents = [o for o in outcomes if o.item.kind == "incident" and o.item.via == "own"]
    raw = [o for o in outcomes if o.item.via == "event" or o.item.via in DIRECT_PATHS]  # in input order
    for outcome in outcomes:
        if outcome.item.rejected:
            progress(f"{outcome.item.source}: rejected, not sent: {outcome.item.rejected}")
    for outcome in webhooks:
        post_webhook(pipeline, outcome, progress)
    with ThreadPoolExecutor(max_workers=pipeline.concurrency, thread_name_prefix="async-invoke") as pool:
        sent = [pool.submit(send_incident, pipeline, o, progress) for o in incidents]
        sent += [pool.submit(send_event if o.item.via == "event" else send_direct, pipeline, o, progress) for o in raw]
        for future in sent:
            future.result()
    if tickets or webhooks:
        send_tickets(pipeline, tickets, progress)


def send_tickets(pipeline: LocalDeployment, outcomes: list[Outcome], progress: Progress) -> None:
    """Tickets to the ticket queue, drained by the ticket intake's pollers; then the DLQ read back."""
    by_message: dict[str, Outcome] = {}
    for start in range(0, len(outcomes), 10):
        chunk = outcomes[start:start + 10]
        sent = pipeline.sqs.send_message_batch(QueueUrl=pipeline.ticket_source.queue_url, Entries=[
            {"Id": str(i), "MessageBody": o.item.text} for i, o in enumerate(chunk)])
        if sent.get("Failed"):
            raise RuntimeError(f"could not send tickets to the ticket queue: {sent['Failed']}")
        by_message.update({entry["MessageId"]: chunk[int(entry["Id"])] for entry in sent["Successful"]})
    for message_id, outcome in by_message.items():
        outcome.message_id = message_id
    progress(f"sent {len(outcomes)} ticket(s) to the ticket queue (webhook tickets are there already); "
             f"ticket intake takes batches of {pipeline.ticket_source.batch_size}")
    batches = itertools.count(1)

    def on_batch(report: BatchReport) -> None:
        failed = f", {report.failed} failed (redelivered until the DLQ takes them)" if report.failed else ""
        progress(f"ticket batch {next(batches)}: {report.messages} message(s) in {report.seconds:.1f}s{failed}")

    pipeline.ticket_source.drain(pipeline.ticket_pool.functions, redelivery_seconds=pipeline.redelivery_seconds,
                                 on_batch=on_batch)
    # Read back the DLQ: invalid tickets are parked there by the intake (the reason and the
    # original message id in the attributes), others moved by the queue's redrive policy.
    dead_letter_url = pipeline.ticket_dead_letter_queue()
    for message in pipeline.drain_messages(dead_letter_url):
        attributes = {name: value.get("StringValue") for name, value in message.get("MessageAttributes", {}).items()}
        outcome = by_message.get(attributes.get("source_message_id") or message["MessageId"])
        if outcome is not None:
            outcome.queues.append(pipeline.queue_name(dead_letter_url))
            reason = attributes.get("failure_reason") or _validation_problem("ticket", outcome.item.data)
            outcome.problem = f"intake failed: {reason}"


def send_incident(pipeline: LocalDeployment, outcome: Outcome, progress: Progress) -> None:
    """One of our incidents, published on the decision bus; what the intake's rule delivers is invoked."""
    started = time.monotonic()
    entry = {"EventBusName": pipeline.bus_name, "Source": INCIDENT_SOURCE, "DetailType": "Incident Reported",
             "Detail": outcome.item.text}
    with pipeline.bus_lock:
        response = pipeline.events.put_events(Entries=[entry])
        # The template's rule (pattern and all) decides what reaches the function.
        delivered = [] if response["FailedEntryCount"] else pipeline.stack.rule_events(
            pipeline.incidents.logical_id, pipeline.incident_event)
    if response["FailedEntryCount"]:
        outcome.problem = f"EventBridge refused the event: {response['Entries'][0].get('ErrorMessage')}"
        return
    for event in delivered:
        with pipeline.incident_pool.borrowed() as function:
            result = invoke_async(function, event, pipeline.sqs, pipeline.retry_delays)
        if not result.ok:
            outcome.problem = f"intake failed {result.attempts}x: {result.error}"
            if result.dead_letter_queue_url:
                outcome.queues.append(pipeline.queue_name(result.dead_letter_queue_url))
    state = "failed" if outcome.problem else "decided"
    progress(f"incident {outcome.item.label}: {state} in {time.monotonic() - started:.1f}s")


def send_event(pipeline: LocalDeployment, outcome: Outcome, progress: Progress) -> None:
    """A raw EventBridge event: put on the bus its source publishes on; when a template rule
    delivers it, the incident intake gets the event as the source emitted it (its own id, as
    EventBridge keeps it on every delivery, so a repeated line is a re-delivery)."""
    event = outcome.item.data or {}
    source, detail_type = str(event["source"]), str(event["detail-type"])
    play_alarm_states(event)
    bus = (pipeline.bus_name if detail_type == "Incident Reported" or source == WEBHOOK_EVENTS else
           pipeline.pagerduty_bus if source.startswith("aws.partner/pagerduty.com/") else "default")
    with pipeline.bus_lock:
        response = pipeline.events.put_events(Entries=[{
            "EventBusName": bus, "Source": source, "DetailType": detail_type,
            "Detail": json.dumps(event.get("detail", {})), "Resources": event.get("resources", [])}])
        delivered = [] if response["FailedEntryCount"] else [
            e for rule in pipeline.incident_rules for e in pipeline.stack.rule_events(*rule)]
    if response["FailedEntryCount"]:
        outcome.problem = f"EventBridge refused the event: {response['Entries'][0].get('ErrorMessage')}"
        return
    if not delivered:
        why = (f"no rule of template.yaml takes {source!r} {detail_type!r} (not an incident source, or its "
               "source parameter is off)")
        outcome.item, outcome.problem = replace(outcome.item, rejected=why), f"rejected: {why}"
        return
    raw = {"version": "0", "account": pipeline.stack.account_id, "region": pipeline.stack.region, "resources": [], **event}
    deliver_to_incident_intake(pipeline, outcome, raw, progress)


def deliver_to_incident_intake(pipeline: LocalDeployment, outcome: Outcome, raw: dict[str, Any],
                               progress: Progress) -> None:
    """An event a rule delivered, to the incident intake as Lambda invokes it asynchronously."""
    with pipeline.incident_pool.borrowed() as function:
        result = invoke_async(function, raw, pipeline.sqs, pipeline.retry_delays)
    settle_invocation(pipeline, outcome, result, progress)


#: How a raw line that is no EventBridge event reaches the incident intake, and the template
#: resource without which it does not (its source parameter is off).
DIRECT_PATHS = {"sns-alarm": ("IncidentAlarmTopicSubscription", "the SNS topic the incident intake is subscribed to"),
                "alarm-action": ("AlarmActionPermission", "a CloudWatch alarm's Lambda action")}


def send_direct(pipeline: LocalDeployment, outcome: Outcome, progress: Progress) -> None:
    """An SNS alarm notification or a Lambda alarm action: the incident intake invoked
    asynchronously with what SNS (a Lambda subscription) or CloudWatch (an alarm action) gives it,
    when the template subscribes it or lets alarms invoke it."""
    data = outcome.item.data or {}
    resource, path = DIRECT_PATHS[outcome.item.via]
    if resource not in pipeline.stack.resources:
        why = f"template.yaml has no {resource} ({path}): its source parameter is off"
        outcome.item, outcome.problem = replace(outcome.item, rejected=why), f"rejected: {why}"
        return
    event = data
    play_alarm_states(data)
    if outcome.item.via == "sns-alarm" and "Records" not in data:  # a bare notification, as a Lambda subscription gets it
        topic = pipeline.stack.ref("IncidentAlarmTopic")
        event = {"Records": [{"EventSource": "aws:sns", "EventVersion": "1.0",
                              "EventSubscriptionArn": f"{topic}:local-demo", "Sns": data}]}
    with pipeline.incident_pool.borrowed() as function:
        result = invoke_async(function, event, pipeline.sqs, pipeline.retry_delays)
    settle_invocation(pipeline, outcome, result, progress)


def settle_invocation(pipeline: LocalDeployment, outcome: Outcome, result: AsyncResult, progress: Progress) -> None:
    """What the incident intake answered for a raw line: its DLQ and reason, the execution it
    started, or what else it did (resolved, updated, grouped, ignored, ...)."""
    if not result.ok:
        outcome.problem = f"intake failed {result.attempts}x: {result.error}"
        if result.dead_letter_queue_url:
            outcome.queues.append(pipeline.queue_name(result.dead_letter_queue_url))
        return
    answer = result.response or {}
    answers = answer.get("records") or [answer]  # an SNS event: one answer per record
    parked = [a for a in answers if a.get("outcome") == "dead_lettered"]
    if parked:
        outcome.problem = f"dead-lettered: {parked[0]['reason']}"
        outcome.queues.append(pipeline.queue_name(pipeline.incidents.env["DEAD_LETTER_QUEUE_URL"]))
        pipeline.drain_messages(pipeline.incidents.env["DEAD_LETTER_QUEUE_URL"])
        progress(f"{outcome.item.label}: parked in the incident DLQ: {parked[0]['reason']}")
        return
    results = [r for a in answers for r in (a.get("outcomes") or [a])]  # an event may open several incidents
    first = next((r for r in results if r["outcome"] == "routed"), results[0])
    if first["outcome"] == "routed":
        outcome.item = replace(outcome.item, item_id=first.get("incident_id") or first["item_id"])
        outcome.execution_arn = f"{pipeline.state_machine_arn.replace(':stateMachine:', ':execution:')}:{first['execution_name']}"
    else:
        outcome.source_outcome, outcome.note = first["outcome"], first.get("reason")
    outcome.dependency = dependency_of(first)
    if first["outcome"] == "held":  # named by its incident, as a routed line is
        outcome.item = replace(outcome.item, item_id=first.get("incident_id") or outcome.item.item_id)
    for each in results:
        progress(f"{outcome.item.label}: {each['outcome']} {each.get('key') or ''}".rstrip()
                 + (f" ({each['reason']})" if each.get("reason") else ""))


def signed_now(system: str, data: dict[str, Any]) -> dict[str, Any]:
    """The body as its sender would send it now: Jira's `timestamp` and a PagerDuty event's
    `occurred_at` are the times checked."""
    data = dict(data)
    if system == "jira":
        data["timestamp"] = int(time.time() * 1000)
    if system == "pagerduty" and isinstance(data.get("event"), dict):
        data["event"] = {**data["event"], "occurred_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds")}
    return data


def post_webhook(pipeline: LocalDeployment, outcome: Outcome, progress: Progress) -> None:
    """A Zendesk, Jira, PagerDuty or Grafana webhook body: signed as that system signs it (with the
    secret the operator stored) and posted to the webhook function as API Gateway's HTTP API would;
    what it forwards to the bus is then delivered by the template's rule."""
    from decision_router.intake.webhooks import map_ticket, sign
    from decision_router.sources import TICKET_SOURCES
    from decision_router.sources.webhook import Unusable

    system = outcome.item.via.removeprefix("webhook:")
    data = signed_now(system, outcome.item.data or {})
    body = json.dumps(data).encode()
    headers = {**(outcome.item.headers or {}), **sign(system, body, pipeline.webhook_secrets[system], at=time.time())}
    response = pipeline.webhooks.invoke(http_event("POST", f"/webhooks/{system}", route_key="POST /webhooks/{source}",
                                                   headers={"Content-Type": "application/json", **headers}, body=body,
                                                   path_parameters={"source": system}))
    answer = json.loads(response["body"])
    if answer.get("status") == "forwarded":
        progress(f"{outcome.item.label}: webhook forwarded to the bus")
        with pipeline.bus_lock:
            delivered = pipeline.stack.rule_events(*pipeline.incident_webhook_rule)
        for event in delivered:
            deliver_to_incident_intake(pipeline, outcome, event, progress)
        return
    if response["statusCode"] not in (200, 202):
        why = f"the webhook answered {response['statusCode']}: {answer.get('reason')}"
        outcome.item, outcome.problem = replace(outcome.item, rejected=why), f"rejected: {why}"
    elif answer["status"] == "parked":
        outcome.problem = f"parked: {answer['reason']}"
        outcome.queues.append(pipeline.queue_name(pipeline.webhooks.env["DEAD_LETTER_QUEUE_URL"]))
    elif answer["status"] in ("ignored", "duplicate"):
        outcome.source_outcome, outcome.note = answer["status"], answer["reason"]
    else:
        try:
            mapped = map_ticket(TICKET_SOURCES[system], data, pipeline.webhooks.env["WEBHOOK_DEFAULT_TIER"])
        except Unusable as error:  # the function queued it, so this cannot differ; say so if it does
            raise RuntimeError(f"{outcome.item.source}: queued by the webhook, but {error}") from None
        ticket = mapped.model_dump(mode="json", exclude_none=True) if not isinstance(mapped, str) else None
        outcome.item = replace(outcome.item, item_id=answer["ticket_id"], data=ticket)
    progress(f"{outcome.item.label}: webhook {answer.get('status', 'refused')}"
             + (f" ({answer['reason']})" if answer.get("reason") else ""))


def _validation_problem(kind: str, data: dict[str, Any] | None) -> str:
    """The intake's own validation message for an item (same parser as the handler)."""
    from decision_router.items import InvalidItem, parse_item

    try:
        parse_item(kind, data)
    except InvalidItem as error:
        return str(error)
    return "the handler failed (see .demo/lambda.log)"
