"""An automatic route delivered by the intake itself, without an execution of the routing workflow:
the audit row claimed first, then the team queue's message and the `Item Routed` event, each as
the workflow writes them for the same record (statemachine/routing.asl.json: DeliverToDestination,
WriteAuditRecord, PutItemRouted), then the claim marked delivered.

The claim is the audit row's conditional put (attribute_not_exists): only the invocation whose
put succeeds delivers. Until it marks the row delivered, the row carries `delivery_pending_until`
(epoch seconds: the deadline of the invocation that holds the claim). A retry that finds the row
delivered delivers nothing; one that finds it pending waits (`DeliveryInProgress`, so the item is
retried) until that deadline has passed, then takes the claim over and delivers. A crash between
the send and the mark is the one window left: the retry sends the message (and the event) again,
under the same `execution_name`.

Who delivers, waits or finds the name delivered or spent is the lease rule's (domain/leases.py);
`DirectDelivery` delivers by it over the audit row's conditional writes and the two sends, which
`DirectRoutes` makes on AWS."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any, Callable

import boto3
from aws_lambda_powertools import Tracer

from ..domain.leases import Held, Placement, Verdict, claim_lease
from ..domain.ports.routing import Delivery
from ..domain.records import AuditRow, DecisionRecord, json_text
from ..domain.routing import is_direct
from . import AwsAdapter, expiry

#: The `source` of the events the routing workflow puts (template.yaml's Events mapping, Workflow).
WORKFLOW_EVENT_SOURCE = "decision-router"
ROUTED_DETAIL_TYPE = "Item Routed"
#: How long a claim holds when its holder names no deadline: the intake functions' Timeout (300 s).
LEASE_SECONDS = 300.0
#: The audit outcome of a route that failed (the workflow's RecordFailed): it delivered nothing.
FAILED = "failed"
#: The attribute that marks a claim whose delivery is not yet done (a number: readers of the
#: audit row read its string columns only).
PENDING = "delivery_pending_until"

tracer = Tracer()


class DeliveryInProgress(RuntimeError):
    """Another invocation holds the claim and may still be delivering: retry the item later."""


def entered_time(now: float) -> str:
    """A time as Step Functions' `$$.State.EnteredTime` writes it (ISO 8601, milliseconds, Z)."""
    return datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _destination(record: DecisionRecord) -> Any:
    if not is_direct(record) or record.destination is None:
        raise ValueError(f"{record.item_kind} {record.item_id}: only an automatic route that pages nobody "
                         f"is delivered directly (route {record.route!r}, escalate {record.escalate})")
    return record.destination


def audit_row(record: DecisionRecord, name: str, audited_at: str) -> AuditRow:
    """The row WriteAuditRecord writes for an automatic route (outcome auto_routed), with the
    record's remaining fields beside it (`routing_record`); no `execution_arn`: there is none."""
    destination = _destination(record)
    outcome = {"status": "auto_routed", "target": destination.target, "escalated": record.escalate, "reviewer": None}
    rest = record.model_dump(mode="json", exclude={"item", "decisions", "announce"})
    return AuditRow(
        item_id=record.item_id, execution_name=name, item_kind=record.item_kind, outcome="auto_routed",
        outcome_detail=json_text(outcome), route=record.route, route_reason=record.route_reason,
        policy_name=record.policy.name, policy_version=record.policy.version,
        decisions=json_text(record.model_dump(mode="json")["decisions"]), item=json_text(record.item),
        decided_at=record.decided_at, audited_at=audited_at,
        linked_incident=json_text(record.linked.model_dump(mode="json") if record.linked else None),
        routing_record=json_text(rest))


def team_message(record: DecisionRecord, name: str) -> dict[str, Any]:
    """The body DeliverToDestination sends to the team's queue."""
    dumped = record.model_dump(mode="json")
    return {"item_kind": record.item_kind, "item_id": record.item_id, "item": dumped["item"],
            "target": _destination(record).target, "route": record.route, "route_reason": record.route_reason,
            "policy": dumped["policy"], "decisions": dumped["decisions"], "execution_name": name}


def routed_detail(record: DecisionRecord, name: str) -> dict[str, Any]:
    """The `Item Routed` event's detail PutItemRouted puts for an automatic route."""
    announce = record.model_dump(mode="json")["announce"]
    return {"item_kind": record.item_kind, "item_id": record.item_id, "item_key": record.item_key,
            "reference": announce["reference"], "outcome": "auto_routed", "target": _destination(record).target,
            "escalated": record.escalate, "decided_by": record.route, "reviewer": None,
            "answers": announce["answers"], "suggested": announce["answers"], "confidence": announce["confidence"],
            "readout": announce["readout"], "policy": record.policy.model_dump(mode="json"), "execution_name": name}


def held(outcome: str | None, pending_until: float | None) -> Held:
    """An audit row as the lease rule reads it: pending until its holder's deadline; else delivered,
    or spent when a failed execution wrote it (nothing was delivered under its name)."""
    return Held(lease_until=pending_until, spent=pending_until is None and outcome == FAILED)


class DirectDelivery:
    """Delivers an automatic route by the lease rule over the audit row's conditional writes
    (`_place` where no row is; `_take_over`, `_mark_delivered`, `_release` only while the pending
    mark is the one read or this invocation's) and the two sends (`_send`, `_announce`)."""

    retention_days: int
    clock: Callable[[], float]

    def _place(self, row: AuditRow, expires_at: int | None, until: float) -> Placement:
        raise NotImplementedError

    def _take_over(self, item_id: str, name: str, theirs: Held, until: float) -> bool:
        raise NotImplementedError

    def _mark_delivered(self, item_id: str, name: str, until: float) -> str | None:
        """The pending mark removed while it is `until`; why it could not be (None: done, or
        another invocation's now)."""
        raise NotImplementedError

    def _release(self, item_id: str, name: str, until: float) -> None:
        raise NotImplementedError

    def _send(self, queue_url: str, body: str) -> None:
        raise NotImplementedError

    def _announce(self, record: DecisionRecord, name: str) -> str | None:
        """The `Item Routed` event put; why it was not (the workflow goes on past a failed announcement too)."""
        raise NotImplementedError

    def deliver(self, record: DecisionRecord, name: str, *, holds_until: float | None = None) -> Delivery:
        """Claim the record's audit row (`name`: its execution name), deliver and announce it, mark
        it delivered. `holds_until` (epoch seconds): when this invocation ends at the latest (its
        claim's lease). Delivery(False) when it was delivered before; DeliveryInProgress while
        another invocation holds the claim."""
        now = self.clock()
        until = holds_until if holds_until is not None else now + LEASE_SECONDS
        verdict = self._claim(record, name, now, until)
        if verdict.action == "wait":
            raise DeliveryInProgress(f"{record.item_kind} {record.item_id}: delivery claimed by another invocation "
                                     f"until {entered_time(verdict.until)}")
        if verdict.action != "take":
            return Delivery(False, ended_unrouted=verdict.action == "spent")
        try:
            self._send(_destination(record).queue_url, json.dumps(team_message(record, name), ensure_ascii=False))
        except Exception:
            self._release(record.item_id, name, until)  # nothing was sent: the retry need not wait
            raise
        announce_error = self._announce(record, name)
        return Delivery(True, announce_error, self._mark_delivered(record.item_id, name, until))

    def _claim(self, record: DecisionRecord, name: str, now: float, until: float) -> Verdict:
        row = audit_row(record, name, entered_time(now))
        expires_at = expiry(self.retention_days, datetime.fromisoformat(record.decided_at)) if self.retention_days else None
        return claim_lease(lambda: self._place(row, expires_at, until),
                     lambda theirs: self._take_over(record.item_id, name, theirs, until), self.clock)


class DirectRoutes(DirectDelivery, AwsAdapter):
    """Delivers an automatic route (port `DirectRoutes`): the audit table's claim, the team queue,
    the decision bus."""

    service = "dynamodb"

    def __init__(self, audit_table: str, event_bus_name: str, *, retention_days: int = 0, client: Any = None,
                 sqs: Any = None, events: Any = None, clock: Callable[[], float] = time.time):
        super().__init__(client)
        self.audit_table, self.event_bus_name, self.retention_days = audit_table, event_bus_name, retention_days
        self._sqs, self._events, self.clock = sqs, events, clock

    @property
    def sqs(self) -> Any:
        self._sqs = self._sqs or boto3.client("sqs")
        return self._sqs

    @property
    def events(self) -> Any:
        self._events = self._events or boto3.client("events")
        return self._events

    @tracer.capture_method(capture_response=False)
    def deliver(self, record: DecisionRecord, name: str, *, holds_until: float | None = None) -> Delivery:
        return super().deliver(record, name, holds_until=holds_until)

    def _key(self, item_id: str, name: str) -> dict[str, Any]:
        return {"item_id": {"S": item_id}, "execution_name": {"S": name}}

    def _place(self, row: AuditRow, expires_at: int | None, until: float) -> Placement:
        item: dict[str, Any] = {key: {"S": value} for key, value in row.columns().items()}
        if expires_at is not None:
            item["expires_at"] = {"N": str(expires_at)}
        item[PENDING] = {"N": repr(until)}
        try:
            self.client.put_item(TableName=self.audit_table, Item=item, ConditionExpression="attribute_not_exists(item_id)",
                                 ReturnValuesOnConditionCheckFailure="ALL_OLD")
            return "placed"
        except self.client.exceptions.ConditionalCheckFailedException as error:
            found = error.response.get("Item") or self.client.get_item(
                TableName=self.audit_table, Key=self._key(row.item_id, row.execution_name), ConsistentRead=True).get("Item")
        if not found:
            return "gone"
        pending = found.get(PENDING)
        return held(found.get("outcome", {}).get("S"), float(pending["N"]) if pending else None)

    def _take_over(self, item_id: str, name: str, theirs: Held, until: float) -> bool:
        try:
            self.client.update_item(TableName=self.audit_table, Key=self._key(item_id, name),
                                    UpdateExpression=f"SET {PENDING} = :mine", ConditionExpression=f"{PENDING} = :theirs",
                                    ExpressionAttributeValues={":mine": {"N": repr(until)},
                                                               ":theirs": {"N": repr(theirs.lease_until)}})
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def _send(self, queue_url: str, body: str) -> None:
        self.sqs.send_message(QueueUrl=queue_url, MessageBody=body)

    def _announce(self, record: DecisionRecord, name: str) -> str | None:
        try:
            sent = self.events.put_events(Entries=[{
                "EventBusName": self.event_bus_name, "Source": WORKFLOW_EVENT_SOURCE, "DetailType": ROUTED_DETAIL_TYPE,
                "Detail": json.dumps(routed_detail(record, name), ensure_ascii=False)}])
        except Exception as error:  # noqa: BLE001 - the item is delivered; the announcement is reported
            return f"{type(error).__name__}: {error}"
        if sent.get("FailedEntryCount"):
            entry = sent["Entries"][0]
            return f"{entry.get('ErrorCode')}: {entry.get('ErrorMessage')}"
        return None

    def _mark_delivered(self, item_id: str, name: str, until: float) -> str | None:
        """The claim's pending mark removed, if it is still this invocation's (a retry that took it
        over after this one's deadline marks it itself); why it could not be (the item is delivered
        and not retried: only a later copy of it past the deadline would deliver it again)."""
        try:
            self.client.update_item(TableName=self.audit_table, Key=self._key(item_id, name),
                                    UpdateExpression=f"REMOVE {PENDING}", ConditionExpression=f"{PENDING} = :mine",
                                    ExpressionAttributeValues={":mine": {"N": repr(until)}})
        except self.client.exceptions.ConditionalCheckFailedException:
            return None
        except Exception as error:  # noqa: BLE001 - delivered; a retry now would send it twice
            return f"{type(error).__name__}: {error}"
        return None

    def _release(self, item_id: str, name: str, until: float) -> None:
        """The claim handed back after a send that failed here (its deadline set past), so the
        item's retry delivers at once; a release that fails leaves the retry to wait for the deadline."""
        try:
            self.client.update_item(TableName=self.audit_table, Key=self._key(item_id, name),
                                    UpdateExpression=f"SET {PENDING} = :ended", ConditionExpression=f"{PENDING} = :mine",
                                    ExpressionAttributeValues={":mine": {"N": repr(until)}, ":ended": {"N": "0"}})
        except Exception:  # noqa: BLE001 - the deadline still frees it
            pass
