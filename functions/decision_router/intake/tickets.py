"""The ticket intake's flow over each SQS record of the ticket queue: the body is parsed once,
from its text to a `Ticket`, and routed; what cannot be routed now is parked or waits.

- A body that is an SNS notification (SNS → SQS without raw message delivery wraps every message
  in one: JSON with Type "Notification", TopicArn, Message, ...) carries the ticket as its
  `Message` text, read once with the notification (sources.sns); any other body, and one that
  looks like a notification but lacks what SNS always sends, is the ticket itself.
- A ticket that fails validation can never succeed: it is parked in the ticket DLQ at once, the
  reason in its message attributes (failure_kind, failure_reason, item_id, source_message_id).
- An endpoint waking from zero instances: the ticket is hidden for `wake_up_wait` seconds
  (ChangeMessageVisibility) and its record fails, so it is received and decided again later
  instead of flooding review after every idle period.
- Any other failure fails that record alone: SQS redelivers it and moves it to the DLQ after
  maxReceiveCount; each failure is logged with the message id and the reason.
- A ticket that names an open incident's service, or describes it (its words score at least
  the measured threshold against the incident's words and the ticket policy's `service_aliases`),
  while that incident is open is linked to it (domain/linking.py): the link goes on its record,
  its audit row and its reason (which says why: named, or described with the score and the words
  shared). A link is a suggestion: the ticket's route is decided as if it were not linked. Only
  the open incidents filed under the names and words the ticket uses are read (the link index:
  one BatchGetItem of its keys, one of the incidents they list; each read once per invocation),
  never a listing of every open incident, so a ticket's reads stay the same however many are open;
  when they cannot be read, the ticket is routed unlinked with a warning: a link never holds a
  ticket back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from pydantic import ValidationError
from pydantic_core import from_json

from ..domain.failures import WaitingForCapacity, wake_up_wait
from ..domain.linking import LinkedIncident, OpenIncident, candidates, link_ticket, lookup_keys
from ..domain.ports.incidents import LinkIndex
from ..domain.records import RecordTooLarge
from ..items import InvalidItem, Ticket, parse_item
from ..sources.sns import SnsNotification, carried, faults_the_notification
from ..validation import describe_errors
from .pipeline import Intake

#: An SNS notification whose Message is a ticket's JSON (validated as a ticket next, naming its id).
TicketNotification = SnsNotification[Any]


def ticket_json(body: str) -> Any:
    """The ticket's JSON value in an SQS body: the SNS notification's Message, or the body."""
    try:
        data = from_json(body)
    except ValueError as error:
        raise InvalidItem("ticket", None, [f"Invalid JSON: {error}"]) from None
    notification = carried(data)
    if notification is None:
        return data
    try:
        return TicketNotification.model_validate(notification).Message
    except ValidationError as error:
        if faults_the_notification(error):
            return data  # no notification as SNS sends them: the body is the ticket, and fails as one
        raise InvalidItem("ticket", None, describe_errors(error)) from None  # a Message that is no JSON


def parse_ticket(body: str) -> Ticket:
    """The ticket an SQS body carries; InvalidItem names every bad field."""
    return cast(Ticket, parse_item("ticket", ticket_json(body)))


class TicketIntake:
    def __init__(self, intake: Intake, *, logger: Logger, metrics: Metrics):
        """Its queues and the open-incident store come from the intake's wiring (the function's
        composition root)."""
        self.intake, self.logger, self.metrics = intake, logger, metrics
        self.wiring = intake.wiring
        #: What this invocation read of the link index (`begin` forgets it): the incidents filed
        #: under each lookup key, and each incident read (None: not open, or nothing to link to).
        self._filed: dict[str, dict[str, datetime]] = {}
        self._incidents: dict[str, OpenIncident | None] = {}

    def begin(self) -> None:
        """A new invocation: the link index is read again for its batch."""
        self._filed, self._incidents = {}, {}

    def link(self, ticket: Ticket) -> LinkedIncident | None:
        """The open incident `ticket` describes, or None; a store that cannot be read is logged
        and counted, and the ticket goes on unlinked (it is read again for the next ticket)."""
        store = self.wiring.open_incidents
        if store is None:
            return None
        try:
            incidents = self._filed_for(store, ticket)
        except Exception as error:  # noqa: BLE001 - a link is a hint: the ticket is routed without it
            self.metrics.add_metric(name="LinkLookupFailed", unit=MetricUnit.Count, value=1)
            self.logger.warning("open incidents could not be read; the ticket is routed unlinked", extra={
                "item_id": ticket.ticket_id, "reason": f"{type(error).__name__}: {error}"})
            return None
        linked = link_ticket(ticket, incidents, self.intake.policy.service_aliases)
        if linked is not None:
            self.metrics.add_metric(name="TicketsLinked", unit=MetricUnit.Count, value=1)
            self.logger.info("ticket linked to an open incident", extra={
                "item_id": ticket.ticket_id, "incident_id": linked.incident_id, "why": linked.why})
        return linked

    def _filed_for(self, store: LinkIndex, ticket: Ticket) -> list[OpenIncident]:
        """The open incidents filed under `ticket`'s lookup keys (domain/linking.py): at most one
        read of the keys and one of the incidents, each key and incident read once per invocation."""
        keys = lookup_keys(ticket, self.intake.policy.service_aliases)
        unread = [key for key in keys if key not in self._filed]
        if unread:
            found = store.filed_under(unread)
            self._filed.update({key: found.get(key, {}) for key in unread})
        chosen = candidates(ticket, {key: self._filed[key] for key in keys})
        unread = [key for key in chosen if key not in self._incidents]
        if unread:
            read = {incident.key: incident for incident in store.open_incidents(unread)}
            self._incidents.update({key: read.get(key) for key in unread})
        return [incident for key in chosen if (incident := self._incidents[key]) is not None]

    def handle(self, record: SqsRecordModel, context: Any = None) -> dict:
        """Route the record's ticket; park it when invalid; raise so SQS receives it again otherwise."""
        try:
            ticket = parse_ticket(cast(str, record.body))  # SqsRecordModel's body is the message text
        except InvalidItem as error:
            self.intake.invalid(error)
            self.park(record, error, item_id=error.item_id)
            return {"item_id": error.item_id, "dead_lettered": True, "reason": str(error)}
        try:
            return self.intake.route(ticket, context, linked=self.link(ticket))
        except RecordTooLarge as error:
            self.park(record, error, item_id=ticket.ticket_id)
            return {"item_id": ticket.ticket_id, "dead_lettered": True, "reason": str(error)}
        except WaitingForCapacity as waiting:
            self.wait_for_capacity(record, waiting)
            raise
        except Exception as error:
            self.logger.exception("ticket failed; SQS redelivers it, then moves it to the ticket DLQ", extra={
                "message_id": record.messageId, "receive_count": record.attributes.ApproximateReceiveCount,
                "reason": f"{type(error).__name__}: {error}"})
            raise

    def wait_for_capacity(self, record: SqsRecordModel, waiting: WaitingForCapacity) -> None:
        """Hide the ticket until the endpoint should be awake; the record then fails, so SQS receives
        it again (if hiding fails, it comes back after the queue's own visibility timeout)."""
        receives = int(record.attributes.ApproximateReceiveCount)
        seconds = wake_up_wait(receives)
        self.metrics.add_metric(name="WaitingForCapacity", unit=MetricUnit.Count, value=1)
        try:
            self.wiring.ticket_queue.hide(record.receiptHandle, seconds)
        except Exception:
            self.logger.exception("could not hide the waiting ticket; it comes back after the queue's visibility "
                                  "timeout", extra={"message_id": record.messageId})
        self.logger.warning("endpoint waking from zero instances; the ticket is received again later", extra={
            "message_id": record.messageId, "receive_count": receives, "retry_in_seconds": seconds,
            "reason": str(waiting)})

    def park(self, record: SqsRecordModel, error: InvalidItem | RecordTooLarge, *, item_id: str | None) -> None:
        """Put a ticket no retry can route (invalid, or a record too large to start the workflow
        with) on the ticket DLQ with the reason (a failure here fails the record, so SQS redelivers
        it: nothing is lost)."""
        kind = "invalid_item" if isinstance(error, InvalidItem) else error.failure_kind
        self.wiring.dead_letters.send(cast(str, record.body), {
            "failure_kind": kind, "failure_reason": str(error), "item_id": item_id or "",
            "source_message_id": record.messageId})
        self.logger.warning("ticket parked in the ticket DLQ", extra={
            "message_id": record.messageId, "item_id": item_id, "failure_kind": kind, "reason": str(error)})
