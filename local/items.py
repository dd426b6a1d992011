"""The lines of an items file, told apart: our own tickets and incidents, or raw events as their
sources emit them (EventBridge events, SNS notifications holding a ticket or a CloudWatch alarm,
CloudWatch's Lambda alarm actions, Zendesk / Jira / PagerDuty / Grafana webhook bodies, bare or as
{"headers": {...}, "body": {...}} with the headers their sender adds besides the signature, such as
a delivery id). A line that is none of these is rejected with its reason; validation proper is the
intake's job, so a ticket or incident that does not validate is still sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from local.cloudformation import REPO_ROOT

EVENTS = REPO_ROOT / "events"
DEFAULT_ITEMS = (EVENTS / "tickets.jsonl", EVENTS / "incidents.jsonl")


@dataclass(frozen=True)
class InputItem:
    """One line of an items file: a ticket, an incident, or rejected (kind None, with a reason)."""

    source: str  # "file.jsonl:3"
    line: int  # its line number in that file
    kind: str | None
    item_id: str | None
    text: str
    data: dict[str, Any] | None = None  # the item (a ticket inside an SNS notification or webhook: the ticket)
    rejected: str | None = None
    via: str = "own"  # own | sns | sns-alarm | event | alarm-action | webhook:<source> (zendesk, jira, pagerduty, grafana)
    name: str | None = None  # a short label for a raw event (its source and resource)
    headers: dict[str, str] | None = None  # a webhook's headers besides its signature (e.g. its delivery id)

    @property
    def label(self) -> str:
        return self.name or self.item_id or self.source


def _raw_source_item(source: str, line: int, text: str, data: dict[str, Any]) -> InputItem | None:
    """A raw event of a real source, or None when the object is not one."""
    from pydantic import ValidationError

    from decision_router.intake.tickets import TicketNotification
    from decision_router.sources import INCIDENT_WEBHOOKS, TICKET_SOURCES

    if "detail-type" in data and "source" in data:
        detail = data.get("detail") if isinstance(data.get("detail"), dict) else {}
        findings = detail.get("findings") if isinstance(detail.get("findings"), list) else [{}]
        incident = detail.get("incident") if isinstance(detail.get("incident"), dict) else {}
        what = (detail.get("alarmName") or detail.get("eventTypeCode") or detail.get("type")
                or (findings[0] or {}).get("Title") or incident.get("title") or data["detail-type"])
        return InputItem(source, line, "incident", None, text, data, via="event",
                         name=f"{str(data['source']).removeprefix('aws.partner/')[:24]} {str(what)[:40]}")
    alarm = _alarm(data)
    if alarm is not None:
        return alarm_item(source, line, text, data, *alarm)
    if data.get("Type") == "Notification" and "TopicArn" in data:
        try:
            ticket = TicketNotification.model_validate(data).Message
        except ValidationError:
            ticket = None
        item_id = ticket.get("ticket_id") if isinstance(ticket, dict) else None
        return InputItem(source, line, "ticket", item_id if isinstance(item_id, str) else None, text,
                         ticket if isinstance(ticket, dict) else None, via="sns")
    headers = None
    if isinstance(data.get("headers"), dict) and isinstance(data.get("body"), dict):
        headers = {str(k): str(v) for k, v in data["headers"].items()}
        data = data["body"]
    event = data.get("event") if isinstance(data.get("event"), dict) else {}
    webhook = ("zendesk" if str(data.get("type", "")).startswith("zen:event-type:")
               else "jira" if "webhookEvent" in data
               else "pagerduty" if "event_type" in event
               else "grafana" if isinstance(data.get("alerts"), list) and "receiver" in data else None)
    if webhook in TICKET_SOURCES:
        return InputItem(source, line, "ticket", None, text, data, via=f"webhook:{webhook}", name=f"{webhook} webhook",
                         headers=headers)
    if webhook in INCIDENT_WEBHOOKS:
        what = event.get("event_type") or data.get("status")
        return InputItem(source, line, "incident", None, text, data, via=f"webhook:{webhook}",
                         name=f"{webhook} webhook {str(what)[:30]}", headers=headers)
    return None


def _alarm(data: dict[str, Any]) -> tuple[str, str] | None:
    """(via, alarm name) of a CloudWatch alarm that reaches the incident intake without
    EventBridge: an SNS notification (a Lambda SNS event, or a bare notification) holding an alarm,
    or a Lambda alarm action; None for anything else."""
    from decision_router.sources import cloudwatch_action, cloudwatch_sns
    from decision_router.sources.events import SourceEventError
    from decision_router.sources.sns import carried

    try:
        action = cloudwatch_action.INCIDENT_SOURCE.read(data)
    except SourceEventError:  # an alarm action the intake cannot read: it parks it
        return "alarm-action", str(data.get("alarmArn"))
    if action is not None:
        return "alarm-action", action.alarmData.alarmName
    records = data.get("Records")
    first = {"Records": records[:1]} if isinstance(records, list) and records else data  # several records: the first names it
    try:
        alarm = cloudwatch_sns.INCIDENT_SOURCE.read(first)
    except SourceEventError:  # a notification that holds no alarm, or a bad one
        alarm = None
    if alarm is not None:
        return "sns-alarm", alarm.Message.AlarmName
    sns = carried(first)
    if isinstance(records, list) and sns is not None:  # a Lambda SNS event: the incident intake gets it
        return "sns-alarm", f"SNS message {str(sns.get('MessageId'))[:24]}"
    return None


def alarm_item(source: str, line: int, text: str, data: dict[str, Any], via: str, name: str) -> InputItem:
    return InputItem(source, line, "incident", None, text, data, via=via, name=f"{via} {name[:40]}")


def classify(source: str, text: str, line: int = 1) -> InputItem:
    """Tell a ticket from an incident by its id field; anything else is rejected with the reason.
    Validation proper is the intake's job: a bad ticket or incident still goes through it."""
    from decision_router.items import ITEM_MODELS

    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        return InputItem(source, line, None, None, text, rejected=f"not JSON: {error}")
    if not isinstance(data, dict):
        return InputItem(source, line, None, None, text, rejected=f"expected a JSON object, got {type(data).__name__}")
    raw = _raw_source_item(source, line, text, data)
    if raw is not None:
        return raw
    kinds = [kind for kind, model in ITEM_MODELS.items() if model.id_field in data]
    if len(kinds) != 1:
        fields = [model.id_field for model in ITEM_MODELS.values()]
        problem = (f"has both {' and '.join(fields)}" if kinds else f"has neither {' nor '.join(fields)}, and is no "
                   "EventBridge event, SNS notification or Zendesk/Jira/PagerDuty/Grafana webhook")
        return InputItem(source, line, None, None, text, data, rejected=f"{problem}: cannot tell what it is")
    kind = kinds[0]
    item_id = data[ITEM_MODELS[kind].id_field]
    return InputItem(source, line, kind, item_id if isinstance(item_id, str) and item_id.strip() else None, text, data)


def read_items(paths: Iterable[Path]) -> list[InputItem]:
    items = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    items.append(classify(f"{path.name}:{number}", line.strip(), number))
    return items
