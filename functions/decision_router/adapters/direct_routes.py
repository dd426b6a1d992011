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
under the same `execution_name`."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any, Callable

import boto3
from aws_lambda_powertools import Tracer

from ..domain.ports.routing import Delivery
from ..domain.records import AuditRow, DecisionRecord, json_text
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


def is_direct(record: DecisionRecord) -> bool:
    """Whether the intake delivers this record itself: routed without review and without a page
    (anything that waits for a person or pages runs the workflow)."""
    return record.route == "auto" and not record.escalate and record.destination is not None


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


class DirectRoutes(AwsAdapter):
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
        """Claim the record's audit row (`name`: its execution name), deliver and announce it, mark
        it delivered. `holds_until` (epoch seconds): when this invocation ends at the latest (its
        claim's lease). Delivery(False) when it was delivered before; DeliveryInProgress while
        another invocation holds the claim."""
        now = self.clock()
        until = holds_until if holds_until is not None else now + LEASE_SECONDS
        claimed = self._claim(record, name, now, until)
        if claimed is not True:
            return Delivery(False, ended_unrouted=claimed == FAILED)
        try:
            self.sqs.send_message(QueueUrl=_destination(record).queue_url,
                                  MessageBody=json.dumps(team_message(record, name), ensure_ascii=False))
        except Exception:
            self._release(record.item_id, name, until)  # nothing was sent: the retry need not wait
            raise
        announce_error = self._announce(record, name)
        return Delivery(True, announce_error, self._mark_delivered(record.item_id, name, until))

    def _key(self, item_id: str, name: str) -> dict[str, Any]:
        return {"item_id": {"S": item_id}, "execution_name": {"S": name}}

    def _claim(self, record: DecisionRecord, name: str, now: float, until: float) -> bool | str:
        """True when this invocation holds the claim: a new row, or a pending one whose holder's
        deadline has passed (taken over); False when the row says delivered; FAILED when the row
        is a failed execution's (nothing was delivered under this name)."""
        row = audit_row(record, name, entered_time(now))
        item: dict[str, Any] = {key: {"S": value} for key, value in row.columns().items()}
        if self.retention_days:
            decided = datetime.fromisoformat(record.decided_at)
            item["expires_at"] = {"N": str(expiry(self.retention_days, decided))}
        item[PENDING] = {"N": repr(until)}
        try:
            self.client.put_item(TableName=self.audit_table, Item=item, ConditionExpression="attribute_not_exists(item_id)",
                                 ReturnValuesOnConditionCheckFailure="ALL_OLD")
            return True
        except self.client.exceptions.ConditionalCheckFailedException as error:
            found = error.response.get("Item") or self.client.get_item(
                TableName=self.audit_table, Key=self._key(record.item_id, name), ConsistentRead=True).get("Item") or {}
        held = found.get(PENDING)
        if held is None:
            if found.get("outcome", {}).get("S") == FAILED:
                return FAILED  # an execution of the workflow failed under this name and routed nothing
            return False  # delivered (by this path or by an execution of the workflow)
        if float(held["N"]) > now:
            raise DeliveryInProgress(f"{record.item_kind} {record.item_id}: delivery claimed by another invocation "
                                     f"until {entered_time(float(held['N']))}")
        try:  # the holder's invocation has ended: take its claim over, once
            self.client.update_item(TableName=self.audit_table, Key=self._key(record.item_id, name),
                                    UpdateExpression=f"SET {PENDING} = :mine", ConditionExpression=f"{PENDING} = :theirs",
                                    ExpressionAttributeValues={":mine": {"N": repr(until)}, ":theirs": held})
        except self.client.exceptions.ConditionalCheckFailedException:
            raise DeliveryInProgress(f"{record.item_kind} {record.item_id}: another retry took the delivery over") from None
        return True

    def _announce(self, record: DecisionRecord, name: str) -> str | None:
        """The `Item Routed` event; why it was not put (the workflow goes on past a failed announcement too)."""
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
