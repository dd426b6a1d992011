"""Re-route what the dead-letter queues hold, as new routes: nothing parked there is lost.

    python -m ops.redrive workflow  [--dlq-url URL] [--state-machine-arn ARN]
    python -m ops.redrive tickets   [--dlq-url URL] [--queue-url URL]
    python -m ops.redrive incidents [--dlq-url URL] [--bus NAME] [--function NAME] [--policy FILE]
    (each also takes --max N and --dry-run)

workflow   Each record in the workflow DLQ starts a NEW execution with the same decision (the
           model is not asked again). The failed execution's name cannot be reused for 90 days,
           so the item's next attempt name is taken (`…-r2`). A record whose item has been routed
           since (an execution of it running or succeeded) is only taken off the queue. A record
           whose item was routed but not audited (`audit_missing`) gets its audit row written
           (--audit-table), nothing else. Each new execution's labelled example expires
           LabelRetentionDays after the item was decided, as the stack's own starts do
           (--label-retention-days; else LABEL_RETENTION_DAYS; else the parameter of the stack
           the state machine belongs to, read from CloudFormation).
tickets    Each ticket in the ticket DLQ goes back to the ticket queue; ticket intake decides it again.
incidents  Each incident in the incident DLQ (Lambda's on-failure record, or EventBridge's
           undelivered event) is put on the bus again as "Incident Reported". A source's raw
           event parked there (an unknown shape, a missing field: CloudWatch, SNS, Security Hub,
           a forwarded webhook, ...) is sent to the incident intake again (asynchronous invoke,
           --function), as its source sent it, once a source maps it under the policy (--policy;
           the shipped one by default); until then it stays, with the reason.

A message is deleted from its DLQ only once it was re-sent. A malformed message, or an item that
would fail validation again, stays on its DLQ and is reported with the reason (exit status 1).
Defaults come from the environment: WORKFLOW_DEAD_LETTER_QUEUE_URL, ROUTING_STATE_MACHINE_ARN,
AUDIT_TABLE_NAME, TICKET_DEAD_LETTER_QUEUE_URL, TICKET_QUEUE_URL, INCIDENT_DEAD_LETTER_QUEUE_URL, EVENT_BUS_NAME,
INCIDENT_INTAKE_FUNCTION (the stack's outputs of the same names, see docs/operations/redrive.md; the function:
IncidentIntakeFunctionArn).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, TextIO

from pydantic import ValidationError

from decision_router.domain.policies import Policy, load_policy
from decision_router.domain.records import AuditRow, DecisionRecord, json_text
from decision_router.intake.tickets import parse_ticket
from decision_router.items import InvalidItem, parse_item
from decision_router.validation import describe_errors
from ops.command import DONE, WORK_LEFT, Command

INCIDENT_DETAIL_TYPE = "Incident Reported"


class NotRedrivable(ValueError):
    """A dead-letter message that cannot be redriven as it is; the message says why."""


@dataclass(frozen=True)
class Replay:
    """One dead letter, understood: what it is, why it failed, and how to send it again."""

    label: str
    reason: str
    send: Callable[[], str]  # re-sends; returns what happened, for the operator


# ------------------------------------------------------------------------------ parsing
def _json(body: str) -> Any:
    try:
        return json.loads(body)
    except json.JSONDecodeError as error:
        raise NotRedrivable(f"not JSON: {error}") from None


def _attribute(message: dict, name: str) -> str | None:
    value = message.get("MessageAttributes", {}).get(name)
    return value.get("StringValue") if value else None


def workflow_record(message: dict) -> tuple[DecisionRecord, str]:
    """The decision record and the failure of a workflow DLQ message
    ({error: {Error, Cause}, execution_name, execution_arn, failed_at, record})."""
    body = _json(message["Body"])
    if not isinstance(body, dict) or "record" not in body:
        raise NotRedrivable("no 'record': not a message of the routing workflow's dead-letter path")
    try:
        record = DecisionRecord.model_validate(body["record"])
    except ValidationError as error:
        raise NotRedrivable("record: " + "; ".join(describe_errors(error))) from None
    failure = body.get("error") or {}
    reason = f"{failure.get('Error', 'unknown error')}: {failure.get('Cause', '')}".strip().rstrip(":")
    return record, f"{body.get('execution_name', '?')} failed with {reason}"


def check_against_execution(message: dict, workflow: Any) -> None:
    """A workflow DLQ message is redriven only as the workflow wrote it: it names an execution of
    this routing workflow whose input is the message's record, which FAILED (a failed route) or
    SUCCEEDED with the message's outcome (a missing audit row). Anyone who may send to the queue
    could write any other message: NotRedrivable, with the difference."""
    from decision_router.adapters.workflow import ExecutionNotRunning

    body = _json(message["Body"])
    name, arn = body.get("execution_name"), body.get("execution_arn")
    if not isinstance(name, str) or arn != workflow.execution_arn(name):
        raise NotRedrivable(f"names no execution of this routing workflow (execution_arn {arn!r}, "
                       f"execution_name {name!r}): not written by it, not redriven")
    try:
        status, given, output = workflow.ended(name)
    except ExecutionNotRunning as error:
        raise NotRedrivable(f"{error}: not written by the workflow, not redriven") from None
    if given != body.get("record"):
        raise NotRedrivable(f"its record differs from the input of execution {name}: not redriven")
    if body.get("audit_missing"):
        ended_with = output.get("outcome") if isinstance(output, dict) else None
        claimed = body.get("outcome")
        # The execution's outcome is the message's, plus what the workflow adds after it (answers).
        if (status != "SUCCEEDED" or not isinstance(ended_with, dict) or not isinstance(claimed, dict)
                or any(ended_with.get(k) != v for k, v in claimed.items())):
            raise NotRedrivable(f"its outcome is not the one execution {name} ({status}) ended with: not written")
    elif status not in ("FAILED", "TIMED_OUT", "ABORTED"):
        raise NotRedrivable(f"execution {name} is {status}, not failed: nothing to redrive")


def missing_audit_row(message: dict) -> AuditRow | None:
    """The audit row the workflow could not write for an item it routed (a workflow DLQ message
    with `audit_missing`), field for field as its WriteAuditRecord state writes it; None for a
    message of a failed route."""
    body = _json(message["Body"])
    if not isinstance(body, dict) or not body.get("audit_missing"):
        return None
    record, outcome = body.get("record"), body.get("outcome")
    if not isinstance(record, dict) or not isinstance(outcome, dict) or "status" not in outcome:
        raise NotRedrivable("audit_missing without its 'record' and 'outcome'")
    try:
        return AuditRow(item_id=record["item_id"], execution_name=body["execution_name"],
                        item_kind=record["item_kind"], outcome=outcome["status"],
                        outcome_detail=json_text(outcome), route=record["route"],
                        route_reason=record["route_reason"], policy_name=record["policy"]["name"],
                        policy_version=record["policy"]["version"], decisions=json_text(record["decisions"]),
                        item=json_text(record["item"]), decided_at=record["decided_at"],
                        audited_at=body["failed_at"], execution_arn=body["execution_arn"],
                        # a record from before links has none: audited as not linked, as the workflow does
                        linked_incident=json_text(record.get("linked")))
    except (KeyError, TypeError) as error:
        raise NotRedrivable(f"audit_missing: the message lacks {error}") from None
    except ValidationError as error:
        raise NotRedrivable(f"audit_missing: the message's record does not make an audit row: {error}") from None


def dead_ticket(message: dict) -> tuple[str, str]:
    """A ticket DLQ message: (ticket id, why it failed). Raises NotRedrivable when it would fail again."""
    try:
        ticket = parse_ticket(message["Body"])  # as the intake reads it: bare, or in an SNS notification
    except InvalidItem as error:
        raise NotRedrivable(f"still invalid, fix it before redriving: {error}") from None
    reason = _attribute(message, "failure_reason") or "failed intake (redelivered until maxReceiveCount)"
    return ticket.item_id, reason


def dead_event(message: dict) -> tuple[Any, str]:
    """An incident DLQ message: (the event, why it failed). Lambda's on-failure destination record
    carries the event in `requestPayload`; a rule's DLQ and the intake's own parking get the event itself."""
    body = _json(message["Body"])
    if isinstance(body, dict) and "requestPayload" in body:
        response = body.get("responsePayload") or {}
        return body["requestPayload"], (response.get("errorMessage")
                                        or body.get("requestContext", {}).get("condition", "handler failed"))
    reason = (_attribute(message, "failure_reason") or _attribute(message, "ERROR_MESSAGE")
              or "not delivered to incident intake")
    return body, reason


def is_reported(event: Any) -> bool:
    """Our own `Incident Reported` event (re-sent on the bus), as opposed to a source's raw event."""
    return isinstance(event, dict) and event.get("detail-type") == INCIDENT_DETAIL_TYPE


def dead_incident(message: dict) -> tuple[str, str, dict, str]:
    """An `Incident Reported` of the incident DLQ: (source, incident id, detail, why it failed)."""
    event, reason = dead_event(message)
    if not isinstance(event, dict) or not isinstance(event.get("detail"), dict):
        raise NotRedrivable("no EventBridge event with a 'detail' object in it")
    try:
        incident = parse_item("incident", event["detail"])
    except InvalidItem as error:
        raise NotRedrivable(f"still invalid, fix it before redriving: {error}") from None
    return str(event.get("source") or incident.origin), incident.item_id, event["detail"], reason


def dead_source_event(message: dict, policy: Policy) -> tuple[str, Any, str]:
    """A source's raw event of the incident DLQ (an unknown shape, a missing field: parked by the
    intake), re-sent only once a source maps it under `policy`: (label, the event, why it failed).
    NotRedrivable, with the reason, while it would be parked again."""
    from decision_router.intake.incidents import native_outcomes
    from decision_router.sources import raw_events, read_event
    from decision_router.sources.events import SourceEventError

    event, reason = dead_event(message)
    try:
        for each in raw_events(event):
            source, envelope = read_event(each)
            native_outcomes(source, envelope, policy.source_severity)
    except (SourceEventError, LookupError) as error:
        raise NotRedrivable(f"still not mapped, support the source or fix the policy before redriving: {error}") from None
    label = (f"{envelope.source} {envelope.detail_type!r} event {envelope.id}")
    return label, event, reason


# ------------------------------------------------------------------------------ commands
def redrive(queue, understand: Callable[[dict], Replay], *, limit: int, dry_run: bool, out: TextIO) -> int:
    """Send every understood message again and delete it; keep and report the rest."""
    sent = kept = 0
    held = []
    for message in queue.messages(limit):
        try:
            replay = understand(message)
        except NotRedrivable as error:
            print(f"left on the queue: message {message['MessageId']}: {error}", file=sys.stderr)
            held.append(message)
            kept += 1
            continue
        if dry_run:
            print(f"would redrive {replay.label} ({replay.reason})", file=out)
            held.append(message)
            continue
        print(f"{replay.label}: {replay.send()} (was: {replay.reason})", file=out)
        queue.delete(message)
        sent += 1
    for message in held:
        queue.release(message)
    if not sent and not kept and not held:
        print("nothing to redrive", file=out)
    elif not dry_run:
        print(f"redriven {sent}, left {kept} on the queue", file=out)
    return WORK_LEFT if kept else DONE


def cmd_workflow(args, out: TextIO) -> int:
    from decision_router.adapters.queues import Queue
    from decision_router.adapters.review import AuditTrail
    from decision_router.adapters.workflow import WorkflowStarter

    arn = _required(args.state_machine_arn, "--state-machine-arn", "ROUTING_STATE_MACHINE_ARN")
    workflow = WorkflowStarter(arn, label_retention_days=label_retention_days(args.label_retention_days, arn))

    def understand(message: dict) -> Replay:
        record, reason = workflow_record(message)
        row = missing_audit_row(message)
        check_against_execution(message, workflow)
        if row is not None:
            audit = AuditTrail(_required(args.audit_table, "--audit-table", "AUDIT_TABLE_NAME"))

            def write() -> str:
                if not audit.write(row):
                    return f"its audit row ({row.execution_name}) exists already: left as it is; removed"
                return f"routed by execution {row.execution_name}; its audit row ({row.outcome}) written"

            return Replay(f"{record.item_kind} {record.item_id}", f"{reason} (only the audit)", write)

        def send() -> str:
            name, started = workflow.start(record)
            return f"re-routed as execution {name}" if started else f"already routed by execution {name}; removed"

        return Replay(f"{record.item_kind} {record.item_id}", reason, send)

    queue = Queue(_required(args.dlq_url, "--dlq-url", "WORKFLOW_DEAD_LETTER_QUEUE_URL"))
    return redrive(queue, understand, limit=args.max, dry_run=args.dry_run, out=out)


def cmd_tickets(args, out: TextIO) -> int:
    from decision_router.adapters.queues import Queue

    target = Queue(_required(args.queue_url, "--queue-url", "TICKET_QUEUE_URL"))

    def understand(message: dict) -> Replay:
        ticket_id, reason = dead_ticket(message)

        def send() -> str:
            target.send(message["Body"])
            return "sent back to the ticket queue"

        return Replay(f"ticket {ticket_id}", reason, send)

    queue = Queue(_required(args.dlq_url, "--dlq-url", "TICKET_DEAD_LETTER_QUEUE_URL"))
    return redrive(queue, understand, limit=args.max, dry_run=args.dry_run, out=out)


def cmd_incidents(args, out: TextIO) -> int:
    from decision_router.adapters.functions import AsyncFunction
    from decision_router.adapters.queues import EventBus, Queue

    policy = load_policy(args.policy or "incident")

    def understand(message: dict) -> Replay:
        if not is_reported(dead_event(message)[0]):
            label, event, why = dead_source_event(message, policy)
            intake = AsyncFunction(_required(args.function, "--function", "INCIDENT_INTAKE_FUNCTION"))

            def invoke() -> str:
                intake.invoke(event)
                return f"sent to {intake.name} again, as its source sent it"

            return Replay(label, why, invoke)
        source, incident_id, detail, reason = dead_incident(message)
        bus = EventBus(_required(args.bus, "--bus", "EVENT_BUS_NAME"))

        def send() -> str:
            bus.put(source, INCIDENT_DETAIL_TYPE, detail)
            return f"put on {bus.name} again as {INCIDENT_DETAIL_TYPE!r}"

        return Replay(f"incident {incident_id}", reason, send)

    queue = Queue(_required(args.dlq_url, "--dlq-url", "INCIDENT_DEAD_LETTER_QUEUE_URL"))
    return redrive(queue, understand, limit=args.max, dry_run=args.dry_run, out=out)


#: The stack parameter a labelled example's retention is read from (template.yaml).
LABEL_RETENTION_PARAMETER = "LabelRetentionDays"


def label_retention_days(given: str | None, state_machine_arn: str, cloudformation: Any = None) -> int:
    """Days a redriven record's labelled example is kept, as the stack keeps those it starts:
    `given` (--label-retention-days), else LABEL_RETENTION_DAYS, else the LabelRetentionDays
    parameter of the stack that holds the state machine. LookupError saying which could not be read."""
    text = (given or os.environ.get("LABEL_RETENTION_DAYS", "")).strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise LookupError(f"--label-retention-days (or LABEL_RETENTION_DAYS) {text!r}: a whole number of days, 1 or more")
        return int(text)
    if cloudformation is None:
        import boto3

        cloudformation = boto3.client("cloudformation")
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        resources = cloudformation.describe_stack_resources(PhysicalResourceId=state_machine_arn)["StackResources"]
        stack = resources[0]["StackName"]
        parameters = cloudformation.describe_stacks(StackName=stack)["Stacks"][0].get("Parameters", [])
    except (BotoCoreError, ClientError, IndexError, KeyError) as error:
        raise LookupError(f"pass --label-retention-days or set LABEL_RETENTION_DAYS: the stack of {state_machine_arn} "
                          f"could not be read ({error})") from None
    value = next((p.get("ParameterValue") for p in parameters if p.get("ParameterKey") == LABEL_RETENTION_PARAMETER), None)
    if value is None or not value.isdigit() or int(value) < 1:
        raise LookupError(f"stack {stack}: no {LABEL_RETENTION_PARAMETER} of 1 day or more ({value!r}); "
                          "pass --label-retention-days")
    return int(value)


def _required(value: str | None, flag: str, variable: str) -> str:
    value = value or os.environ.get(variable, "").strip()
    if not value:
        raise LookupError(f"pass {flag} or set {variable}")
    return value


#: A setting neither passed nor in the environment, or one that does not read: bad input.
COMMAND = Command("ops.redrive", __doc__, "error", (LookupError,), manual=True)


def _parser() -> argparse.ArgumentParser:
    parser = COMMAND.parser()
    commands = parser.add_subparsers(required=True, metavar="DLQ")
    specs = [
        ("workflow", cmd_workflow, "the workflow DLQ: start each record as a new execution",
         [("--state-machine-arn", "routing state machine (default: ROUTING_STATE_MACHINE_ARN)"),
          ("--audit-table", "the audit table, for routed items whose audit is missing (default: AUDIT_TABLE_NAME)"),
          ("--label-retention-days", "days a redriven item's labelled example is kept (default: LABEL_RETENTION_DAYS, "
           "else the stack's LabelRetentionDays)")]),
        ("tickets", cmd_tickets, "the ticket DLQ: back to the ticket queue",
         [("--queue-url", "ticket queue (default: TICKET_QUEUE_URL)")]),
        ("incidents", cmd_incidents, "the incident DLQ: Incident Reported back on the bus, source events "
         "back to the incident intake once mapped",
         [("--bus", "the decision bus (default: EVENT_BUS_NAME)"),
          ("--function", "the incident intake, for source events (default: INCIDENT_INTAKE_FUNCTION)"),
          ("--policy", "the incident policy file a source event must map under (default: the shipped one)")]),
    ]
    for name, run, text, options in specs:
        command = commands.add_parser(name, help=text)
        command.add_argument("--dlq-url", help="the dead-letter queue (default: from the environment, see below)")
        for flag, help_text in options:
            command.add_argument(flag, help=help_text)
        command.add_argument("--max", type=int, default=1000, help="redrive at most this many messages")
        command.add_argument("--dry-run", action="store_true", help="only list what would be redriven")
        command.set_defaults(run=run)
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    return COMMAND.run(lambda: args.run(args, out or sys.stdout))


if __name__ == "__main__":
    raise SystemExit(main())
