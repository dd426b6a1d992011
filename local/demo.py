"""`make demo`: the whole Decision Router on this machine, no AWS account, no network.

    python -m local.demo [--model path.gguf] [--items items.jsonl ...] [--report out.jsonl] [--no-review]

1. Starts the decision container (`python -m decision_server`, embedded SmolLM2-135M unless
   --model) and a moto server, each on a free loopback port.
2. Creates template.yaml's queues, bus, rules, tables and routing state machine in moto.
3. Sends every ticket to the ticket queue and runs the real ticket-intake handler on SQS batches,
   and puts every incident on the bus and runs the real incident-intake handler on what the
   rule delivers; boto3's `sagemaker-runtime` calls the local container, all else goes to moto,
   whose Step Functions interpreter executes the real routing workflow.
4. Waits for the executions, reads back where every item actually ended up (team queue, review
   queue, a DLQ) and prints the table; then completes one pending review through the real review
   function to show the loop closing.

Items files hold one JSON object per line: tickets and/or incidents in our own shapes (told apart
by `ticket_id` / `incident_id`), or raw events as their sources emit them: EventBridge events
(CloudWatch alarms, AWS Health, GuardDuty, Security Hub, PagerDuty: put on the bus they arrive on,
where the template's source rules decide what reaches the incident intake), SNS notifications
holding a ticket (sent to the ticket queue as SNS would), and Zendesk / Jira webhook bodies
(signed with the stack's webhook secret and posted to the webhook function). A line that is none
of these is reported as rejected with its reason; one that fails validation goes through its
intake and lands in that intake's DLQ.
With --report, one JSON line per input line (in input order) says what became of it, for
scripts: see `report_line`. Every process started is stopped on success, failure, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, TextIO

from local.cloudformation import REPO_ROOT, Stack

if TYPE_CHECKING:
    from decision_router.adapters.review import QueuedReview
    from decision_router.domain.records import DecisionEntry, DecisionRecord
    from local.lambdas import BatchReport

EVENTS = REPO_ROOT / "events"
DEFAULT_ITEMS = (EVENTS / "tickets.jsonl", EVENTS / "incidents.jsonl")
LOG_DIR = REPO_ROOT / ".demo"
ENDPOINT_NAME = "local-decision"
# The template's functions this demo runs (everything else is read from their properties).
TICKET_FUNCTION = "TicketIntakeFunction"
INCIDENT_FUNCTION = "IncidentIntakeFunction"
REVIEW_FUNCTION = "ReviewCompletionFunction"
INCIDENT_SOURCE = "local.demo"  # EventBridge `source` of the incidents this demo publishes
DEMO_REVIEWER = "demo-reviewer@example.com"
WEBHOOK_FUNCTION = "TicketWebhookFunction"
#: The stand-in for PagerDuty's partner event bus (moto cannot create partner buses).
PAGERDUTY_BUS = "pagerduty-demo"
#: The signing secrets the demo's operator configured for the webhooks (stored in the stack's secret).
DEMO_WEBHOOK_SECRETS = {"zendesk": "demo-zendesk-signing-secret", "jira": "demo-jira-webhook-secret"}

Progress = Callable[[str], None]


# ----------------------------------------------------------------------------------- items
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
    via: str = "own"  # own | sns | event | webhook:zendesk | webhook:jira
    name: str | None = None  # a short label for a raw event (its source and resource)

    @property
    def label(self) -> str:
        return self.name or self.item_id or self.source


def _raw_source_item(source: str, line: int, text: str, data: dict[str, Any]) -> InputItem | None:
    """A raw event of a real source, or None when the object is not one."""
    from decision_router.intake.tickets import sns_message
    from decision_router.sources import TICKET_SOURCES

    if "detail-type" in data and "source" in data:
        detail = data.get("detail") if isinstance(data.get("detail"), dict) else {}
        findings = detail.get("findings") if isinstance(detail.get("findings"), list) else [{}]
        incident = detail.get("incident") if isinstance(detail.get("incident"), dict) else {}
        what = (detail.get("alarmName") or detail.get("eventTypeCode") or detail.get("type")
                or (findings[0] or {}).get("Title") or incident.get("title") or data["detail-type"])
        return InputItem(source, line, "incident", None, text, data, via="event",
                         name=f"{str(data['source']).removeprefix('aws.partner/')[:24]} {str(what)[:40]}")
    if data.get("Type") == "Notification" and "TopicArn" in data:
        message = sns_message(data)
        try:
            ticket = json.loads(message) if message is not None else None
        except ValueError:
            ticket = None
        item_id = ticket.get("ticket_id") if isinstance(ticket, dict) else None
        return InputItem(source, line, "ticket", item_id if isinstance(item_id, str) else None, text,
                         ticket if isinstance(ticket, dict) else None, via="sns")
    webhook = ("zendesk" if str(data.get("type", "")).startswith("zen:event-type:")
               else "jira" if "webhookEvent" in data else None)
    if webhook in TICKET_SOURCES:
        return InputItem(source, line, "ticket", None, text, data, via=f"webhook:{webhook}", name=f"{webhook} webhook")
    return None


def classify(source: str, text: str, line: int = 1) -> InputItem:
    """Tell a ticket from an incident by its id field; anything else is rejected with the reason.
    Validation proper is the intake's job: a bad ticket or incident still goes through it."""
    from decision_router.domain.items import ITEM_MODELS

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
                   "EventBridge event, SNS notification or Zendesk/Jira webhook")
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


# ----------------------------------------------------------------------------------- outcomes
@dataclass
class Outcome:
    """Where one input item ended up, read back from the queues and tables."""

    item: InputItem
    record: DecisionRecord | None = None  # the decision record the workflow received
    execution_arn: str | None = None
    status: str | None = None  # execution status
    queues: list[str] = field(default_factory=list)  # template logical ids of the queues holding it
    escalated: bool = False
    audit: str | None = None  # audit outcome (auto_routed, reviewed, ...) once written
    problem: str | None = None  # why it was rejected or dead-lettered
    reviewed_target: str | None = None  # where a reviewer's answer sent it (demo's review loop)
    source_outcome: str | None = None  # a raw event that routed nothing: resolved, updated, duplicate, ignored
    note: str | None = None  # why (source_outcome)
    duplicate_of: str | None = None  # the input line whose execution this one joined (same item key)
    message_id: str | None = None  # the SQS message id it was sent as (a ticket)
    delivered_by: list[str] = field(default_factory=list)  # the executions whose messages reached team queues
    audit_missing: str | None = None  # routed, but the workflow could not write its audit row (why)

    @property
    def route(self) -> str:
        if self.item.rejected:
            return "rejected"
        if self.source_outcome:
            return self.source_outcome
        if self.record is None:
            return "failed"
        return self.record.route

    @property
    def reason(self) -> str:
        if self.problem:
            return self.problem
        if self.note:
            return self.note
        if self.record is not None and self.record.route == "review":
            return self.record.route_reason
        return ""


class LocalPipeline:
    """template.yaml's resources in the moto server boto3 points at, and the three functions.
    Construct it inside `local.services.local_aws_environ` (boto3 reads the endpoints then)."""

    def __init__(self, *, log: TextIO | None = None, endpoint_name: str = ENDPOINT_NAME, concurrency: int = 1):
        """`concurrency`: execution environments per intake function (Lambda scaling out)."""
        import boto3

        from local.lambdas import FunctionPool, LocalFunction, SqsEventSource

        self.stack = Stack.load(parameters={"ExistingEndpointName": endpoint_name, "PagerDutySource": "true",
                                            "PagerDutyEventBusName": PAGERDUTY_BUS}).create()
        self.sqs, self.sfn = boto3.client("sqs"), boto3.client("stepfunctions")
        self.events, self.dynamodb = boto3.client("events"), boto3.client("dynamodb")
        self.tickets = LocalFunction(self.stack, TICKET_FUNCTION, log=log)
        self.incidents = LocalFunction(self.stack, INCIDENT_FUNCTION, log=log)
        self.reviews = LocalFunction(self.stack, REVIEW_FUNCTION, log=log)
        self.ticket_source = SqsEventSource(self.tickets, self.sqs)
        self.ticket_pool = FunctionPool(self.tickets, concurrency)
        self.incident_pool = FunctionPool(self.incidents, concurrency)
        self.concurrency = concurrency
        # What a rule delivered is read back from its stand-in queue: one put and read at a time.
        self._bus = threading.Lock()
        env = self.tickets.env
        self.destinations: dict[str, str] = json.loads(env["DESTINATION_QUEUES"])
        self.review_queue_url = env["REVIEW_QUEUE_URL"]
        self.state_machine_arn = env["ROUTING_STATE_MACHINE_ARN"]
        self.audit_table = env["AUDIT_TABLE_NAME"]
        self.labelled_table = env["LABELLED_EXAMPLES_TABLE_NAME"]
        self.bus_name = env["EVENT_BUS_NAME"]
        self.incident_event = next(name for name, event in self.stack.properties(INCIDENT_FUNCTION)["Events"].items()
                                   if event["Type"] == "EventBridgeRule")
        # The template's escalation rules page the on-call topic; here each delivers to a stand-in queue.
        bus_rules = [rule for rule in self.stack.of_type("AWS::Events::Rule")
                     if self.stack.resolve(self.stack.properties(rule)).get("EventBusName") == self.stack.ref("DecisionBus")]
        self.page_queues = [url for (rule, _), url in self.stack.rule_queues.items() if rule in bus_rules]
        # Every rule delivering to the incident intake: its own (decision bus) and the sources' rules.
        function_arn = self.stack.get_att(INCIDENT_FUNCTION, "Arn")
        self.incident_rules = [(INCIDENT_FUNCTION, self.incident_event)] + [
            (rule, target["Id"]) for rule in self.stack.of_type("AWS::Events::Rule")
            for target in self.stack.resolve(self.stack.properties(rule)).get("Targets", []) if target["Arn"] == function_arn]
        self.webhooks = LocalFunction(self.stack, WEBHOOK_FUNCTION, log=log)
        secrets = boto3.client("secretsmanager")
        secret_id = self.webhooks.env["WEBHOOK_SECRET_ARN"]
        stored = json.loads(secrets.get_secret_value(SecretId=secret_id)["SecretString"])
        self.webhook_secrets = {**stored, **DEMO_WEBHOOK_SECRETS}
        secrets.put_secret_value(SecretId=secret_id, SecretString=json.dumps(self.webhook_secrets))
        self.pending_reviews: dict[str, QueuedReview] = {}  # by item id

    def summary(self) -> str:
        count = {kind: len(self.stack.of_type(kind)) for kind in (
            "AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::Events::EventBus", "AWS::Serverless::StateMachine")}
        rules = len(self.stack.of_type("AWS::Events::Rule")) + sum(
            1 for f in self.stack.of_type("AWS::Serverless::Function")
            for e in self.stack.properties(f).get("Events", {}).values() if e["Type"] in ("EventBridgeRule", "CloudWatchEvent"))
        return (f"{count['AWS::SQS::Queue']} queues, {count['AWS::DynamoDB::Table']} tables, "
                f"{count['AWS::Events::EventBus']} event bus, {rules} rule(s), "
                f"{count['AWS::Serverless::StateMachine']} state machine (the real ASL)")

    # ------------------------------------------------------------------------------ sending
    def run(self, items: list[InputItem], progress: Progress = lambda _: None, timeout: float = 120, *,
            redelivery_seconds: int = 0, retry_delays: Sequence[float] = ()) -> list[Outcome]:
        """Send every item through its intake, wait for the workflow, read back where it ended up.
        A failed ticket is visible again after `redelivery_seconds`, a failed event retried after
        `retry_delays`."""
        self.redelivery_seconds, self.retry_delays = redelivery_seconds, tuple(retry_delays)
        outcomes = [Outcome(item, problem=f"rejected: {item.rejected}" if item.rejected else None) for item in items]
        webhooks = [o for o in outcomes if o.item.via.startswith("webhook:")]
        tickets = [o for o in outcomes if o.item.kind == "ticket" and o not in webhooks]
        incidents = [o for o in outcomes if o.item.kind == "incident" and o.item.via != "event"]
        events = [o for o in outcomes if o.item.via == "event"]
        for outcome in outcomes:
            if outcome.item.rejected:
                progress(f"{outcome.item.source}: rejected, not sent: {outcome.item.rejected}")
        for outcome in webhooks:
            self._post_webhook(outcome, progress)
        if tickets or webhooks:
            self._send_tickets(tickets, progress)
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="async-invoke") as pool:
            sent = [pool.submit(self._send_incident, o, progress) for o in incidents]
            sent += [pool.submit(self._send_event, o, progress) for o in events]
            for future in sent:
                future.result()
        self._settle(outcomes, timeout)
        return outcomes

    def _send_tickets(self, outcomes: list[Outcome], progress: Progress) -> None:
        by_message: dict[str, Outcome] = {}
        for start in range(0, len(outcomes), 10):
            chunk = outcomes[start:start + 10]
            sent = self.sqs.send_message_batch(QueueUrl=self.ticket_source.queue_url, Entries=[
                {"Id": str(i), "MessageBody": o.item.text} for i, o in enumerate(chunk)])
            if sent.get("Failed"):
                raise RuntimeError(f"could not send tickets to the ticket queue: {sent['Failed']}")
            by_message.update({entry["MessageId"]: chunk[int(entry["Id"])] for entry in sent["Successful"]})
        for message_id, outcome in by_message.items():
            outcome.message_id = message_id
        progress(f"sent {len(outcomes)} ticket(s) to the ticket queue (webhook tickets are there already); "
                 "ticket intake takes batches of "
                 f"{self.ticket_source.batch_size}")
        batches = itertools.count(1)

        def on_batch(report: BatchReport) -> None:
            failed = f", {report.failed} failed (redelivered until the DLQ takes them)" if report.failed else ""
            progress(f"ticket batch {next(batches)}: {report.messages} message(s) in {report.seconds:.1f}s{failed}")

        self.ticket_source.drain(self.ticket_pool.functions, redelivery_seconds=self.redelivery_seconds,
                                 on_batch=on_batch)
        # Read back the DLQ: invalid tickets are parked there by the intake (the reason and the
        # original message id in the attributes), others moved by the queue's redrive policy.
        dead_letter_url = self._ticket_dead_letter_queue()
        for message in self._drain_raw(dead_letter_url):
            attributes = {name: value.get("StringValue") for name, value in message.get("MessageAttributes", {}).items()}
            outcome = by_message.get(attributes.get("source_message_id") or message["MessageId"])
            if outcome is not None:
                outcome.queues.append(self.queue_name(dead_letter_url))
                reason = attributes.get("failure_reason") or _validation_problem("ticket", outcome.item.data)
                outcome.problem = f"intake failed: {reason}"

    def _send_incident(self, outcome: Outcome, progress: Progress) -> None:
        from local.lambdas import invoke_async

        started = time.monotonic()
        entry = {"EventBusName": self.bus_name, "Source": INCIDENT_SOURCE, "DetailType": "Incident Reported",
                 "Detail": outcome.item.text}
        with self._bus:
            response = self.events.put_events(Entries=[entry])
            # The template's rule (pattern and all) decides what reaches the function.
            delivered = [] if response["FailedEntryCount"] else self.stack.rule_events(INCIDENT_FUNCTION, self.incident_event)
        if response["FailedEntryCount"]:
            outcome.problem = f"EventBridge refused the event: {response['Entries'][0].get('ErrorMessage')}"
            return
        for event in delivered:
            with self.incident_pool.borrowed() as function:
                result = invoke_async(function, event, self.sqs, self.retry_delays)
            if not result.ok:
                outcome.problem = f"intake failed {result.attempts}x: {result.error}"
                if result.dead_letter_queue_url:
                    outcome.queues.append(self.queue_name(result.dead_letter_queue_url))
        state = "failed" if outcome.problem else "decided"
        progress(f"incident {outcome.item.label}: {state} in {time.monotonic() - started:.1f}s")

    def _send_event(self, outcome: Outcome, progress: Progress) -> None:
        """A raw EventBridge event: put on the bus its source publishes on; when a template rule
        delivers it, the incident intake gets the event as the source emitted it (its own id, as
        EventBridge keeps it on every delivery, so a repeated line is a re-delivery)."""
        from local.lambdas import invoke_async

        event = outcome.item.data or {}
        source, detail_type = str(event["source"]), str(event["detail-type"])
        bus = (self.bus_name if detail_type == "Incident Reported" else
               PAGERDUTY_BUS if source.startswith("aws.partner/pagerduty.com/") else "default")
        with self._bus:
            response = self.events.put_events(Entries=[{
                "EventBusName": bus, "Source": source, "DetailType": detail_type,
                "Detail": json.dumps(event.get("detail", {})), "Resources": event.get("resources", [])}])
            delivered = [] if response["FailedEntryCount"] else [
                e for rule in self.incident_rules for e in self.stack.rule_events(*rule)]
        if response["FailedEntryCount"]:
            outcome.problem = f"EventBridge refused the event: {response['Entries'][0].get('ErrorMessage')}"
            return
        if not delivered:
            why = (f"no rule of template.yaml takes {source!r} {detail_type!r} (not an incident source, or its "
                   "source parameter is off)")
            outcome.item, outcome.problem = replace(outcome.item, rejected=why), f"rejected: {why}"
            return
        raw = {"version": "0", "account": self.stack.account_id, "region": self.stack.region, "resources": [], **event}
        with self.incident_pool.borrowed() as function:
            result = invoke_async(function, raw, self.sqs, self.retry_delays)
        if not result.ok:
            outcome.problem = f"intake failed {result.attempts}x: {result.error}"
            if result.dead_letter_queue_url:
                outcome.queues.append(self.queue_name(result.dead_letter_queue_url))
            return
        answer = result.response or {}
        if answer.get("outcome") == "dead_lettered":
            outcome.problem = f"dead-lettered: {answer['reason']}"
            outcome.queues.append(self.queue_name(self.incidents.env["DEAD_LETTER_QUEUE_URL"]))
            self._drain_raw(self.incidents.env["DEAD_LETTER_QUEUE_URL"])
            progress(f"{outcome.item.label}: parked in the incident DLQ: {answer['reason']}")
            return
        first = (answer.get("outcomes") or [answer])[0]  # a Security Hub event may carry several findings
        if first["outcome"] == "routed":
            outcome.item = replace(outcome.item, item_id=first.get("incident_id") or first["item_id"])
            outcome.execution_arn = f"{self.state_machine_arn.replace(':stateMachine:', ':execution:')}:{first['execution_name']}"
        else:
            outcome.source_outcome, outcome.note = first["outcome"], first.get("reason")
        progress(f"{outcome.item.label}: {first['outcome']}" + (f" ({first['reason']})" if first.get("reason") else ""))

    def _post_webhook(self, outcome: Outcome, progress: Progress) -> None:
        """A Zendesk or Jira webhook body: signed as that system signs it (with the secret the
        operator stored) and posted to the webhook function as API Gateway's HTTP API would."""
        from decision_router.intake.webhooks import map_ticket, sign
        from decision_router.sources.webhook import Unusable
        from local.lambdas import http_api_event

        system = outcome.item.via.removeprefix("webhook:")
        data = dict(outcome.item.data or {})
        if system == "jira":
            data["timestamp"] = int(time.time() * 1000)  # the time Jira signs: now
        body = json.dumps(data).encode()
        headers = sign(system, body, self.webhook_secrets[system], at=time.time())
        response = self.webhooks.invoke(http_api_event("POST", f"/webhooks/{system}", body, headers,
                                                       path_parameters={"source": system}))
        answer = json.loads(response["body"])
        if response["statusCode"] != 202:
            why = f"the webhook answered {response['statusCode']}: {answer.get('reason')}"
            outcome.item, outcome.problem = replace(outcome.item, rejected=why), f"rejected: {why}"
        elif answer["status"] == "parked":
            outcome.problem = f"parked: {answer['reason']}"
            outcome.queues.append(self.queue_name(self.webhooks.env["DEAD_LETTER_QUEUE_URL"]))
        elif answer["status"] == "ignored":
            outcome.source_outcome, outcome.note = "ignored", answer["reason"]
        else:
            try:
                mapped = map_ticket(system, data, self.webhooks.env["WEBHOOK_DEFAULT_TIER"])
            except Unusable as error:  # the function queued it, so this cannot differ; say so if it does
                raise RuntimeError(f"{outcome.item.source}: queued by the webhook, but {error}") from None
            ticket = mapped.model_dump(mode="json", exclude_none=True) if not isinstance(mapped, str) else None
            outcome.item = replace(outcome.item, item_id=answer["ticket_id"], data=ticket)
        progress(f"{outcome.item.label}: webhook {answer.get('status', 'refused')}"
                 + (f" ({answer['reason']})" if answer.get("reason") else ""))

    # ------------------------------------------------------------------------------ reading back
    def execution_arn(self, item: InputItem) -> str | None:
        """The ARN of the item's (first) execution; None when the item does not validate."""
        from decision_router.domain.items import InvalidItem, parse_item
        from decision_router.domain.records import execution_name

        try:
            parsed = parse_item(item.kind, item.data)
        except InvalidItem:
            return None
        name = execution_name(parsed.kind, parsed.item_id, parsed.key)
        return f"{self.state_machine_arn.replace(':stateMachine:', ':execution:')}:{name}"

    def _settle(self, outcomes: list[Outcome], timeout: float) -> None:
        """Wait until each started execution finished or asked for review; then read back."""
        from decision_router.domain.records import DecisionRecord

        started = [o for o in outcomes if o.item.kind and o.item.item_id and not o.queues and not o.problem
                   and not o.source_outcome]
        first_line: dict[str, str] = {}
        for outcome in started:
            outcome.execution_arn = outcome.execution_arn or self.execution_arn(outcome.item)
            if outcome.execution_arn is not None:
                outcome.duplicate_of = first_line.setdefault(outcome.execution_arn, outcome.item.source)
                if outcome.duplicate_of == outcome.item.source:
                    outcome.duplicate_of = None
            described = None
            if outcome.execution_arn is not None:
                with contextlib.suppress(self.sfn.exceptions.ExecutionDoesNotExist):
                    described = self.sfn.describe_execution(executionArn=outcome.execution_arn)
            if described is None:
                outcome.execution_arn, outcome.problem = None, "no workflow execution was started"
                continue
            outcome.record = DecisionRecord.model_validate_json(described["input"])
        deadline = time.monotonic() + timeout
        waiting = [o for o in started if o.execution_arn]
        while waiting:
            self._collect_reviews()
            still = []
            for outcome in waiting:
                outcome.status = self.sfn.describe_execution(executionArn=outcome.execution_arn)["status"]
                if outcome.status == "RUNNING" and outcome.item.item_id not in self.pending_reviews:
                    still.append(outcome)
            waiting = still
            if waiting and time.monotonic() > deadline:
                names = ", ".join(o.item.label for o in waiting)
                raise TimeoutError(f"workflow executions still running after {timeout:.0f}s: {names}")
            if waiting:
                time.sleep(0.2)
        self.read_back(outcomes)

    def _collect_reviews(self) -> None:
        from decision_router.adapters.review import QueuedReview
        from decision_router.review.completion import PendingReview

        # Received once and held (not deleted): the review function deletes what it completes.
        while messages := self.sqs.receive_message(QueueUrl=self.review_queue_url, MaxNumberOfMessages=10,
                                                   VisibilityTimeout=900).get("Messages", []):
            for message in messages:
                review = PendingReview.from_message(message["Body"])
                self.pending_reviews[review.record.item_id] = QueuedReview(review, message["ReceiptHandle"])

    def release_reviews(self) -> None:
        """Make the held review messages visible again (for a reviewer tool such as the console)."""
        from decision_router.adapters.review import ReviewQueue

        ReviewQueue(self.review_queue_url, client=self.sqs).release(list(self.pending_reviews.values()))
        self.pending_reviews.clear()

    def read_back(self, outcomes: list[Outcome]) -> None:
        """Drain the destination queues, the on-call pages and the workflow DLQ; look up audits."""
        held: dict[str, list[str]] = {}
        delivered_by: dict[str, list[str]] = {}
        for url in self.destinations.values():
            for message in self._drain(url):
                held.setdefault(message["item_id"], []).append(self.queue_name(url))
                delivered_by.setdefault(message["item_id"], []).append(str(message.get("execution_name")))
        workflow_dlq = self.stack.resolve(
            self.stack.properties(self._state_machine_id())["DefinitionSubstitutions"]["WorkflowDeadLetterQueueUrl"])
        failed, unaudited = {}, {}
        for message in self._drain_raw(workflow_dlq):
            body = json.loads(message["Body"])
            (unaudited if body.get("audit_missing") else failed)[body["record"]["item_id"]] = body.get("error")
        escalated = {json.loads(m["Body"])["item_id"] for url in self.page_queues for m in self._drain_raw(url)}
        review_queue = self.queue_name(self.review_queue_url)
        for outcome in outcomes:
            item_id = outcome.item.item_id
            if outcome.record is None or item_id is None:
                continue
            outcome.queues = [q for q in outcome.queues if q != review_queue]
            outcome.queues += held.pop(item_id, [])
            outcome.delivered_by += delivered_by.pop(item_id, [])
            if item_id in self.pending_reviews and outcome.status == "RUNNING":
                outcome.queues.append(review_queue)
            if item_id in failed:
                outcome.queues.append(self.queue_name(workflow_dlq))
                outcome.problem = f"workflow failed: {failed.pop(item_id)}"
            if item_id in unaudited:  # routed; the workflow DLQ holds its audit row for `make redrive`
                outcome.audit_missing = str(unaudited.pop(item_id))
            outcome.escalated = outcome.escalated or item_id in escalated
            outcome.audit = self.audit(item_id)

    def audit(self, item_id: str) -> str | None:
        rows = self.dynamodb.query(TableName=self.audit_table, KeyConditionExpression="item_id = :id",
                                   ExpressionAttributeValues={":id": {"S": item_id}})["Items"]
        return ", ".join(row["outcome"]["S"] for row in rows) or None

    def labelled_example(self, policy_name: str, item_id: str) -> dict[str, str] | None:
        row = self.dynamodb.get_item(TableName=self.labelled_table, Key={
            "policy_name": {"S": policy_name}, "item_id": {"S": item_id}}).get("Item")
        return {key: value["S"] for key, value in row.items()} if row else None

    # ------------------------------------------------------------------------------ reviews
    def complete_review(self, outcome: Outcome, reviewer: str = DEMO_REVIEWER, timeout: float = 60) -> dict[str, Any]:
        """Answer a pending review through the real review function (accepting the model's
        suggestions; the policy's first option where there is none), wait for the workflow to
        finish, and read back where the item went. Returns the review function's answer."""
        from decision_router.domain.policies import load_policy

        pending = self.pending_reviews.pop(outcome.item.item_id)
        review = pending.review
        policy = load_policy(review.record.policy.name)
        suggested = {d.question: d.option_id for d in review.record.decisions if d.option_id}
        answers = {q.id: suggested.get(q.id) or q.option_ids[0] for q in policy.questions}
        answer = self.reviews.invoke({
            "task_token": review.task_token, "execution_name": review.execution_name,
            "reviewer": reviewer,
            "answers": answers, "note": "accepted the model's suggestion (make demo)",
            "receipt_handle": pending.receipt_handle})
        deadline = time.monotonic() + timeout
        while (status := self.sfn.describe_execution(executionArn=outcome.execution_arn)["status"]) == "RUNNING":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{outcome.item.label}: workflow still running {timeout:.0f}s after the review")
            time.sleep(0.2)
        outcome.status = status
        outcome.reviewed_target = policy.target(answer["answers"][policy.routing_question.id])
        self.read_back([outcome])
        return answer

    # ------------------------------------------------------------------------------ helpers
    def _state_machine_id(self) -> str:
        return next(s for s in self.stack.of_type("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
                    if self.stack.ref(s) == self.state_machine_arn)

    def _ticket_dead_letter_queue(self) -> str:
        from local.lambdas import queue_logical_id, queue_url_for_arn

        queue_id = queue_logical_id(self.stack, self.ticket_source.queue_url)
        policy = self.stack.resolve(self.stack.properties(queue_id)["RedrivePolicy"])
        return queue_url_for_arn(self.stack, policy["deadLetterTargetArn"])

    def queue_name(self, url: str) -> str:
        from local.lambdas import queue_logical_id

        return queue_logical_id(self.stack, url) or url.rsplit("/", 1)[-1]

    def _drain_raw(self, url: str) -> list[dict[str, Any]]:
        found = []
        while messages := self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                                   MessageAttributeNames=["All"]).get("Messages", []):
            for message in messages:
                found.append(message)
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return found

    def _drain(self, url: str) -> list[dict[str, Any]]:
        """Messages on the queue (received and deleted), bodies parsed when JSON."""
        found = []
        for message in self._drain_raw(url):
            try:
                body = json.loads(message["Body"])
            except json.JSONDecodeError:
                body = {}
            found.append({**body, "MessageId": message["MessageId"]} if isinstance(body, dict) else
                         {"MessageId": message["MessageId"]})
        return found


def _validation_problem(kind: str, data: dict[str, Any] | None) -> str:
    """The intake's own validation message for an item (same parser as the handler)."""
    from decision_router.domain.items import InvalidItem, parse_item

    try:
        parse_item(kind, data)
    except InvalidItem as error:
        return str(error)
    return "the handler failed (see .demo/lambda.log)"


# ----------------------------------------------------------------------------------- report
def report_line(outcome: Outcome) -> dict[str, Any]:
    """What became of one input line, for scripts (`--report`): `outcome` is one of routed,
    review, duplicate, dead_lettered, rejected, and for a raw source event that routed nothing
    resolved, updated or ignored (`reason` says why); `via` says how it came in; each decision says which readout gave the answer
    (rule, letters, head) and whether it stood without a person (`auto`)."""
    record = outcome.record
    if outcome.source_outcome:
        kind = outcome.source_outcome
    elif outcome.item.rejected or (record is None and not any("DeadLetter" in q for q in outcome.queues)):
        kind = "rejected"
    elif outcome.duplicate_of:
        kind = "duplicate"
    elif record is None or outcome.problem:
        kind = "dead_lettered"
    else:
        kind = "routed" if record.route == "auto" else "review"
    if kind == "review" and outcome.audit and "resolved_at_source" in outcome.audit:
        kind, outcome.note = "resolved", "resolved at its source while it waited for review (the review was closed)"
    reason = outcome.problem or outcome.note or (
        f"same item as {outcome.duplicate_of}: routed once" if kind == "duplicate" else None)
    if kind in ("routed", "review") and record is not None:
        reason = record.route_reason
    elif kind == "resolved" and record is not None:
        reason = outcome.note
    target = None
    if record is not None and kind != "dead_lettered":
        target = record.destination.target if record.destination else outcome.reviewed_target
    decisions = {} if record is None else {
        d.question: {"answer": d.option_id, "confidence": d.confidence, "readout": d.readout or d.source,
                     "auto": record.route == "auto" and d.passed}
        for d in record.decisions}
    return {"line": outcome.item.line, "source": outcome.item.source, "item_id": outcome.item.item_id,
            "kind": outcome.item.kind, "via": outcome.item.via, "outcome": kind, "reason": reason, "target": target,
            "escalated": outcome.escalated, "decisions": decisions}


def write_report(path: Path, outcomes: list[Outcome]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for outcome in outcomes:
            handle.write(json.dumps(report_line(outcome), ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------------- table
def _decision_cells(decision: DecisionEntry) -> list[str]:
    """decided by (question: readout), top option (p), confidence vs its minimum."""
    option = decision.option_id or "-"
    readout: str
    if decision.source == "model":
        p = (decision.probabilities or {}).get(option)
        top = f"{option} ({p:.2f})" if p is not None else option
        minimum = decision.thresholds.min_confidence
        confidence = decision.confidence or 0.0  # a model decision always has one
        check = f"{confidence:.2f} {'>=' if confidence >= minimum else '<'} {minimum:.2f}"
        readout = decision.readout or "letters"
        if readout == "head":
            letters = decision.letter_probabilities or {}
            best = max(letters, key=letters.__getitem__) if letters else None
            readout = f"head (letters: {best} {letters[best]:.2f})" if best else "head"
        elif decision.head_skipped:
            readout = "letters (head skipped)"
    elif decision.source == "rule":
        top, check, readout = f"{option} (rule {decision.rule})", "rule", "rule"
    else:
        top, check, readout = "-", "endpoint error", "endpoint error"
    return [f"{decision.question}: {readout}", top, check]


def table_rows(outcomes: list[Outcome]) -> list[list[str]]:
    rows = []
    for outcome in outcomes:
        where = ", ".join(outcome.queues) or ("(not sent)" if outcome.item.rejected else "(nowhere)")
        if outcome.escalated:
            where += " + escalated"
        decisions: list[DecisionEntry | None] = [*outcome.record.decisions] if outcome.record else []
        for index, decision in enumerate(decisions or [None]):
            cells = _decision_cells(decision) if decision else ["-", "-", "-"]
            first = index == 0
            rows.append([outcome.item.label if first else "", *cells,
                         outcome.route if first else "", where if first else "",
                         _audit_cell(outcome) if first else "", outcome.reason if first else ""])
    return rows


def _audit_cell(outcome: Outcome) -> str:
    if outcome.audit:
        return outcome.audit
    return "after review" if outcome.status == "RUNNING" and outcome.route == "review" else "-"


HEADERS = ["item", "decided by", "top option (p)", "confidence vs min", "route", "ended up in", "audit",
           "why (review / rejection)"]


def format_table(rows: list[list[str]], headers: list[str] = HEADERS) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    widths[-1] = len(headers[-1])  # the last column is free text: let it run on

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def explain(outcomes: list[Outcome], model: Path | None) -> list[str]:
    decided = [o.record for o in outcomes if o.record is not None]
    reviews = [r for r in decided if r.route == "review"]
    entries = [d for r in decided for d in r.decisions]
    lines = [f"{len(decided)} item(s) decided: {len(decided) - len(reviews)} routed automatically, "
             f"{len(reviews)} sent to human review; "
             f"{sum(1 for o in outcomes if o.route in ('rejected', 'failed') or o.problem)} rejected or dead-lettered."]
    quiet = [o.source_outcome for o in outcomes if o.source_outcome]
    if quiet:
        counts = ", ".join(f"{quiet.count(k)} {k}" for k in sorted(set(quiet)))
        lines.append(f"{len(quiet)} raw source event(s) routed nothing, as they should: {counts} "
                     "(an OK resolves its open incident, a re-delivery is routed once, an update pages nobody again).")
    latencies = sorted(d.latency_seconds for d in entries if d.source == "model" and d.latency_seconds is not None)
    if latencies:
        lines.append(f"Model time per decision: median {latencies[len(latencies) // 2]:.2f}s, "
                     f"max {latencies[-1]:.2f}s over {len(latencies)} model decision(s).")
    by_head = [d for d in entries if d.readout == "head"]
    if by_head:
        lines.append(f"{len(by_head)} decision(s) read by a learned head over the model's hidden state (fitted on "
                     f"labelled items with make fit), {sum(d.passed for d in by_head)} confident enough to route alone.")
    skipped = {d.head_skipped for d in entries if d.head_skipped}
    if skipped:
        lines.append("Heads not applied, the letters decided instead: " + "; ".join(sorted(skipped))
                     + " (refit for this model: make fit FIT_ARGS=\"--model …\").")
    if reviews:
        if model is None:
            lines.append("Why still reviews: the embedded SmolLM2-135M is a 135M-parameter toy; its letters are "
                         "near chance, and the heads route only what they are confident of at the policies' "
                         "thresholds. Bring a real model: make demo MODEL=path/to/model.gguf (then make fit).")
        else:
            lines.append(f"Items under the policies' thresholds go to review; check {model.name}'s calibration "
                         "and the thresholds with make eval.")
    return lines


# ----------------------------------------------------------------------------------- main
class _Terminated(BaseException):
    """SIGTERM/SIGHUP: unwind like Ctrl-C so every `with` block stops what it started."""


def _on_signal(signum: int, _frame: Any) -> None:
    raise _Terminated(signum)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m local.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="GGUF file to serve (default: the embedded SmolLM2-135M)")
    parser.add_argument("--items", type=Path, action="append",
                        help="JSON Lines of tickets and/or incidents (repeatable; default: events/*.jsonl)")
    parser.add_argument("--report", type=Path, help="write one JSON line per input line: what became of it")
    parser.add_argument("--no-review", action="store_true", help="do not complete a pending review")
    parser.add_argument("--log-dir", type=Path, default=LOG_DIR, help="where the service logs go (default: .demo/)")
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    out = out or sys.stdout
    began = time.monotonic()

    def progress(message: str) -> None:
        print(f"[{time.monotonic() - began:5.1f}s] {message}", file=out, flush=True)

    problems = [f"--items {p}: no such file" for p in (args.items or []) if not p.is_file()]
    if args.model is not None and not args.model.is_file():
        problems.insert(0, f"--model {args.model}: no such file")
    if problems:
        print("demo: " + "; ".join(problems), file=sys.stderr)
        return 2
    items = read_items(args.items or DEFAULT_ITEMS)
    if not items:
        print("demo: no items to route (the items files are empty)", file=sys.stderr)
        return 2

    # Ctrl-C raises KeyboardInterrupt even when started in the background (where the shell ignores SIGINT).
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    previous.update({sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)})
    try:
        return _run(args, items, progress, out, began)
    except KeyboardInterrupt:
        print("\ndemo: interrupted; every process it started has been stopped", file=sys.stderr)
        return 130
    except _Terminated as stop:
        print(f"\ndemo: stopped by signal {stop.args[0]}; every process it started has been stopped", file=sys.stderr)
        return 128 + stop.args[0]
    except Exception as error:  # noqa: BLE001 - the user gets one clear line, and the logs
        print(f"\ndemo failed: {type(error).__name__}: {error}\n(logs: {args.log_dir})", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(args: argparse.Namespace, items: list[InputItem], progress: Progress, out: TextIO, began: float) -> int:
    from decision_router.domain.items import ITEM_MODELS
    from local.services import DecisionContainer, MotoServer, local_aws_environ, patched_environ

    args.log_dir.mkdir(parents=True, exist_ok=True)
    model_name = args.model.name if args.model else "the embedded SmolLM2-135M-Instruct Q4_1"
    with ExitStack() as cleanup:
        container = cleanup.enter_context(DecisionContainer(args.log_dir / "decision-server.log", model=args.model))
        progress(f"decision container starting (pid {container.pid}, {container.url}): loading {model_name}; "
                 f"log {container.log_path.relative_to(REPO_ROOT) if container.log_path.is_relative_to(REPO_ROOT) else container.log_path}")
        moto = cleanup.enter_context(MotoServer())
        progress(f"moto server on {moto.url} (Step Functions executes definitions)")
        cleanup.enter_context(patched_environ(local_aws_environ(moto, container.url)))
        lambda_log = cleanup.enter_context(open(args.log_dir / "lambda.log", "w", encoding="utf-8"))
        pipeline = LocalPipeline(log=lambda_log)
        progress(f"created from template.yaml: {pipeline.summary()}")
        loaded = container.wait_ready(on_wait=lambda s: progress(f"... still loading the model ({s:.0f}s)"))
        progress(f"decision container ready: model loaded and warmed up {loaded:.1f}s after start")
        kinds = " and ".join(f"{sum(1 for i in items if i.kind == kind)} {kind}(s)" for kind in ITEM_MODELS)
        progress(f"routing {kinds} ({sum(1 for i in items if i.rejected)} line(s) rejected before sending)")
        routed_at = time.monotonic()
        outcomes = pipeline.run(items, progress)
        progress(f"all executions settled ({time.monotonic() - routed_at:.1f}s for {len(items)} item(s))")

        print("", file=out)
        print(format_table(table_rows(outcomes)), file=out)
        print("", file=out)
        for line in explain(outcomes, args.model):
            print(line, file=out)

        pending = [o for o in outcomes if o.item.item_id in pipeline.pending_reviews and o.status == "RUNNING"]
        if pending and not args.no_review:
            outcome = pending[0]
            answer = pipeline.complete_review(outcome)
            print(f"\nReview loop: {DEMO_REVIEWER} answered {outcome.item.label} through the review function "
                  f"({', '.join(f'{q}={a}' for q, a in answer['answers'].items())}); the workflow then delivered it "
                  f"to {', '.join(outcome.queues) or '(nowhere)'} and wrote audit '{outcome.audit}'"
                  + (", plus a labelled example for calibration." if pipeline.labelled_example(
                      outcome.record.policy.name, outcome.item.item_id) else "."), file=out)
            if len(pending) > 1:
                print(f"{len(pending) - 1} review(s) still pending (in a deployment: python -m "
                      "ops.review_cli list / complete).", file=out)
        if args.report:
            write_report(args.report, outcomes)
            print(f"\nReport: {args.report} (one JSON line per input line)", file=out)
        print(f"\nDone in {time.monotonic() - began:.1f}s; logs in {args.log_dir}. Stopping the container and moto.",
              file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
