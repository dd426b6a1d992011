"""What one item costs in AWS calls, path by path, measured on the local stack at two sizes of the
state that can grow (`local.ledger` counts; `bench.capacity` prices it and prints `make capacity`).

    with LocalWorld(SMALL, progress=print) as world:   # the stack, seeded, every path warmed up
        ledger = world.measure()                       # {path: PathLedger}

A world is the local pipeline (`local.pipeline.LocalPipeline`: moto server, the real handlers
in their own processes, the real routing workflow executed by moto's Step Functions) with the
review console (`local.console.LocalConsole`, called as API Gateway calls it) and a stand-in
endpoint that answers as it is told (`local.given_endpoint`), so each item takes the path asked of
it. One item of every path runs first (cold starts, heads and the shadow loaded, nothing counted),
then the state is seeded (`local.seeding`), then each path runs once more for one new item inside
a ledger window:

- automatic: a ticket sent to the ticket queue, taken by Lambda's poller, routed to its team;
- review: a ticket the ticket head is unsure of, waiting for a person, opened and answered in the
  console (the workflow delivers it);
- page: a sev1 incident on the decision bus, routed to its on-call team and paged (the
  escalation's SNS publish, and the paged event back to the incident intake);
- correction: an automatic route, then a reviewer lists the recent routes, opens it and corrects
  it (a second execution delivers it again);
- incident resolved: a CloudWatch alarm opens an incident (routed), then its OK resolves it;
- console listing: the review console's list of pending reviews (one page load).

Each path is a whole item from its source to its end, so a mix of paths adds up to the items of a
day. What the stack does on a timer (the SLA sweep, the held-incident sweep, a head refresh every
HEAD_REFRESH_SECONDS per execution environment, Lambda's empty long polls) is no item's and is
left out; so is what Lambda's SQS poller does per batch rather than per item (each item here is
a batch of one: the per-batch calls are counted whole, an upper bound).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TextIO

from local import seeding
from local.cloudformation import REPO_ROOT
from local.cloudwatch import play_alarm_states
from local.console import LocalConsole
from local.deployment import INCIDENT_FUNCTION
from local.event_sources import SqsEventSource, invoke_async
from local.given_endpoint import GivenEndpoint
from local.ledger import CallLedger, PathLedger
from local.pipeline import LocalPipeline
from local.services import MotoServer, local_aws_environ, patched_environ

Progress = Callable[[str], None]

#: The paths of an item, then the console's listing (a reviewer's page load, not an item).
ITEM_PATHS = ("automatic", "review", "page", "correction", "incident resolved")
LISTING = "console listing"
PATHS = (*ITEM_PATHS, LISTING)
LOG_DIR = REPO_ROOT / ".capacity"
#: The local stack's settings for a measuring run: heads are read once per execution environment
#: (at the warm-up), so no refresh lands in a measured item (HeadRefreshSeconds: a day).
PARAMETERS = {"HeadRefreshSeconds": "86400"}
#: moto, with a thousand executions waiting in this process, answers far more slowly than AWS: an
#: invocation may take minutes here that takes seconds there (its calls are the same). No
#: function is ended at its template Timeout (29 s for the console) in a measuring run.
LOCAL_TIMEOUT_SECONDS = 900.0
REVIEWER = "capacity-reviewer@example.com"
WAIT_SECONDS = 120.0


@dataclass(frozen=True)
class Sizes:
    """The state that can grow, as a world is seeded with it: `pending_reviews` is the
    pending-review index's rows when the measured review waits (itself included)."""

    pending_reviews: int
    open_incidents: int
    audit_rows: int
    shadowed_items: int

    def describe(self) -> str:
        return (f"{self.pending_reviews:,} pending reviews, {self.open_incidents:,} open incidents, "
                f"{self.audit_rows:,} audit rows, {self.shadowed_items:,} shadowed items")


SMALL = Sizes(pending_reviews=10, open_incidents=10, audit_rows=100, shadowed_items=10)
LARGE = Sizes(pending_reviews=1000, open_incidents=5000, audit_rows=100_000, shadowed_items=1000)


# ---------------------------------------------------------------------------------- the items
def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ticket(ticket_id: str, *, unsure: bool) -> dict[str, Any]:
    """A ticket the ticket head routes by itself, or (unsure) one it sends to review."""
    if unsure:
        return {"ticket_id": ticket_id, "subject": "Question about the thing from last week",
                "body": "Following up on what we talked about on the phone, can you do the same as before? Thanks.",
                "customer": {"id": "C-9001", "tier": "free"}, "channel": "email", "created_at": now_iso()}
    return {"ticket_id": ticket_id, "subject": "Charged twice for March invoice",
            "body": "Hi, my credit card shows two charges of $49.00 on March 3rd for the same invoice INV-20931. "
                    "Please refund the duplicate.",
            "customer": {"id": "C-7300", "tier": "pro"}, "channel": "email", "created_at": now_iso()}


def sev1_incident(incident_id: str) -> dict[str, Any]:
    return {"incident_id": incident_id, "title": "Capacity API returns 503 for every request",
            "description": "All requests to capacity-api fail with 503 since 12:00; customers cannot sign in.",
            "service": "capacity-api", "severity": "sev1", "source": "monitoring", "reported_at": now_iso()}


def alarm_event(alarm: str, state: str, region: str) -> dict[str, Any]:
    """A CloudWatch alarm's state change as EventBridge delivers it (events/cloudwatch_alarm_state_change.json)."""
    sample = json.loads((REPO_ROOT / "events" / "cloudwatch_alarm_state_change.json").read_text(encoding="utf-8"))
    arn = f"arn:aws:cloudwatch:{region}:{sample['account']}:alarm:{alarm}"
    detail = {**sample["detail"], "alarmName": alarm, "state": {**sample["detail"]["state"], "value": state},
              "previousState": {**sample["detail"]["previousState"], "value": "ALARM" if state == "OK" else "OK"}}
    return {**sample, "id": str(uuid.uuid4()), "region": region, "time": now_iso(), "resources": [arn], "detail": detail}


# ---------------------------------------------------------------------------------- the world
class LocalWorld:
    """The local stack seeded at `sizes`, every path warmed up; a context manager. `measure`
    runs each path once for a new item inside a ledger window."""

    def __init__(self, sizes: Sizes, *, progress: Progress = lambda _: None, log_dir: Path = LOG_DIR):
        self.sizes, self.progress, self.log_dir = sizes, progress, log_dir
        self._cleanup = ExitStack()
        self.outcomes: dict[str, str] = {}  # what each measured path's item came to
        self._items = 0

    def __enter__(self) -> LocalWorld:
        try:
            self._start()
        except BaseException:
            self._cleanup.close()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._cleanup.close()

    def _start(self) -> None:
        enter = self._cleanup.enter_context
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.endpoint = enter(GivenEndpoint())
        moto = enter(MotoServer())
        enter(patched_environ(local_aws_environ(moto, self.endpoint.url)))
        log: TextIO = enter(open(self.log_dir / "lambda.log", "w", encoding="utf-8"))
        started = time.monotonic()
        self.pipeline = enter(LocalPipeline(log=log, parameters=PARAMETERS))
        self.console = enter(LocalConsole(self.pipeline.stack, log=log))
        for function in (self.console.function, *self.pipeline.functions):
            function.timeout = LOCAL_TIMEOUT_SECONDS
        self.progress(f"stack and functions up in {time.monotonic() - started:.0f}s ({self.pipeline.summary()})")
        self.ledger = enter(CallLedger())
        self.ledger.watch([*self.pipeline.functions, self.console.function])
        assert self.console.tokens is not None, "the console's API has a JWT authorizer in template.yaml"
        self.token = self.console.tokens.sign(REVIEWER)
        self.ticket_source = self.ledger.client("sqs", "ticket source")
        self.incident_source = self.ledger.client("events", "incident source")
        self.poller = SqsEventSource(self.pipeline.tickets, self.ledger.client("sqs", "Lambda SQS poller"))
        self._shadow()
        started = time.monotonic()
        review_record = self.run_all(measured=False)
        self.progress(f"every path warmed up in {time.monotonic() - started:.0f}s")
        self._check_shadow()
        self._seed(review_record)

    # ------------------------------------------------------------------ seeding
    def _shadow(self) -> None:
        from decision_router.domain.policies import load_policy

        env = self.pipeline.tickets.env
        policy = load_policy(env["POLICY_NAME"])
        question = policy.questions[0]
        assert question.head is not None, f"{policy.name}.{question.id} ships without a head to shadow"
        head_file = (policy_dir() / question.head.file).read_bytes()
        self.shadow = (policy.name, question.id, seeding.start_shadow(env, policy.name, question.id, head_file))

    def _check_shadow(self) -> None:
        """The warm-up's tickets were answered by the shadow head too, or the run stops saying why."""
        from decision_router.adapters.shadow_tally import ShadowTally

        if not ShadowTally(self.pipeline.tickets.env["HEAD_HISTORY_TABLE_NAME"]).counts(*self.shadow).items:
            raise RuntimeError(f"the shadow head of {self.shadow[0]}.{self.shadow[1]} answered no item: "
                               f"see 'shadow head not loaded' in {self.log_dir / 'lambda.log'}")

    def _seed(self, review_record: Any) -> None:
        env, sizes = self.pipeline.tickets.env, self.sizes
        steps = [
            ("audit rows", lambda: seeding.put_rows(env["AUDIT_TABLE_NAME"], seeding.audit_rows(sizes.audit_rows))),
            ("open incidents", lambda: seeding.put_rows(env["OPEN_INCIDENTS_TABLE_NAME"],
                                                        seeding.open_incident_rows(sizes.open_incidents))),
            ("shadowed items", lambda: seeding.shadow_tally(env, *self.shadow, items=sizes.shadowed_items)),
            # the measured review is the last of them: the others wait already
            ("pending reviews", lambda: seeding.pending_reviews(
                review_record, sizes.pending_reviews - 1, state_machine_arn=self.pipeline.state_machine_arn,
                retention_days=int(env["AUDIT_RETENTION_DAYS"]), label_retention_days=int(env["LABEL_RETENTION_DAYS"]),
                pending_reviews_table=self.pipeline.pending_reviews_table)),
        ]
        for what, step in steps:
            started = time.monotonic()
            step()
            self.progress(f"seeded {what} in {time.monotonic() - started:.0f}s")

    # ------------------------------------------------------------------ the paths
    def measure(self) -> dict[str, PathLedger]:
        """Each path once more, for a new item, inside its ledger window; the ledger by path."""
        self.run_all(measured=True)
        return self.ledger.paths

    def run_all(self, *, measured: bool) -> Any:
        """Every path once; the review's record (what the seeded pending reviews are made like)."""
        record = None
        for path in PATHS:
            started = time.monotonic()
            with self.ledger.measuring(path) if measured else contextlib.nullcontext():
                mark = len(self.ledger.executions)
                outcome = getattr(self, "_" + path.replace(" ", "_"))()
            direct = outcome if path == "automatic" else None
            if path == "review":
                record = outcome
            if measured:
                self.ledger.count_transitions(self.pipeline.sfn, self.ledger.paths[path])
                self.outcomes[path] = self._summary(mark, direct) if path != LISTING else f"{outcome} reviews listed"
            self.progress(f"{'measured' if measured else 'warmed up'} {path}: "
                          f"{self.outcomes.get(path) if measured else self._summary(mark, direct)} "
                          f"({time.monotonic() - started:.1f}s)")
        return record

    def _automatic(self) -> Any:
        return self._ticket(unsure=False)  # its id: the intake delivers it without an execution

    def _review(self) -> Any:
        from decision_router.domain.records import DecisionRecord

        mark = len(self.ledger.executions)
        self._ticket(unsure=True)
        (arn,) = self.ledger.executions[mark:]
        record = DecisionRecord.model_validate_json(self.pipeline.sfn.describe_execution(executionArn=arn)["input"])
        name = arn.rsplit(":", 1)[1]
        self._console("GET", f"/api/reviews/{name}")
        self._console("POST", f"/api/reviews/{name}", {"answers": {"queue": "billing"}, "note": "capacity run"})
        self._settle(mark)
        return record

    def _page(self) -> Any:
        mark = len(self.ledger.executions)
        incident = sev1_incident(self._new_id("CAP-INC"))
        sent = self.incident_source.put_events(Entries=[{
            "EventBusName": self.pipeline.bus_name, "Source": "local.capacity", "DetailType": "Incident Reported",
            "Detail": json.dumps(incident)}])
        if sent["FailedEntryCount"]:
            raise RuntimeError(f"EventBridge refused the incident: {sent['Entries']}")
        self.endpoint.answers = {"team": "platform"}
        self._settle(mark)

    def _correction(self) -> Any:
        mark = len(self.ledger.executions)
        self._ticket(unsure=False)  # delivered by the intake, without an execution
        name = self._console("GET", "/api/routes")["routes"][0]["execution_name"]  # the newest route
        self._console("GET", f"/api/routes/{name}")
        self._console("POST", f"/api/routes/{name}/correction", {"answers": {"queue": "account_access"},
                                                                 "note": "capacity run: corrected"})
        self._settle(mark)

    def _incident_resolved(self) -> Any:
        mark = len(self.ledger.executions)
        alarm = self._new_id("capacity-alarm").lower()
        self.endpoint.answers = {"team": "platform"}
        for state in ("ALARM", "OK"):
            self._service_event(alarm_event(alarm, state, self.pipeline.stack.region))
            self._settle(mark)

    def _console_listing(self) -> Any:
        return len(self._console("GET", "/api/reviews")["reviews"])

    # ------------------------------------------------------------------ how an item travels
    def _new_id(self, prefix: str) -> str:
        self._items += 1
        return f"{prefix}-{self._items}-{uuid.uuid4().hex[:6]}"

    def _ticket(self, *, unsure: bool) -> str:
        """A ticket sent by its source to the ticket queue, taken by Lambda's poller (a batch of
        one), and whatever it started carried on as far as it goes without a person; its id."""
        mark = len(self.ledger.executions)
        self.endpoint.answers = {}
        body = ticket(self._new_id("CAP-T"), unsure=unsure)
        self.ticket_source.send_message(QueueUrl=self.poller.queue_url, MessageBody=json.dumps(body))
        report = self.poller.poll_once(self.pipeline.tickets)
        if report is None or report.failed:
            raise RuntimeError(f"the ticket intake did not take ticket {body['ticket_id']}: {report}")
        self._settle(mark)
        return str(body["ticket_id"])

    def _service_event(self, event: dict[str, Any]) -> None:
        """An AWS service's event on the default bus (EventBridge charges nothing for these): put
        with a client the ledger does not hear, and noted."""
        play_alarm_states(event)  # CloudWatch sets the alarm's state before it says so
        self.ledger.note("CloudWatch (AWS service event)", "events", "service event")
        sent = self.pipeline.events.put_events(Entries=[{
            "EventBusName": "default", "Source": event["source"], "DetailType": event["detail-type"],
            "Detail": json.dumps(event["detail"]), "Resources": event["resources"]}])
        if sent["FailedEntryCount"]:
            raise RuntimeError(f"EventBridge refused the alarm event: {sent['Entries']}")

    def _console(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request of a signed-in reviewer's browser, through the console's HTTP API."""
        self.ledger.note("reviewer's browser", "apigateway", "HTTP API request")
        status, _, payload = self.console.handle(method, path, {
            "authorization": f"Bearer {self.token}", "content-type": "application/json"},
            json.dumps(body) if body is not None else None)
        if status != 200:
            raise RuntimeError(f"the console answered {method} {path} with {status}: {payload[:500]!r}")
        return json.loads(payload)

    def _settle(self, mark: int) -> None:
        """Until every execution started since `mark` ended or waits for a person: what the
        template's rules delivered meanwhile, delivered (to a function, or noted: an SNS publish)."""
        while True:
            for arn in self.ledger.executions[mark:]:
                self._wait(arn)
            if not self._deliver_rule_events():
                return

    def _wait(self, arn: str) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            described = self.pipeline.sfn.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING" or self._waits_for_review(arn):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"execution {arn} still running after {WAIT_SECONDS:.0f}s")
            time.sleep(0.1)

    def _waits_for_review(self, arn: str) -> bool:
        """Whether the execution's last step handed a task token on (the review request) and waits."""
        events = [e for page in self.pipeline.sfn.get_paginator("get_execution_history").paginate(executionArn=arn)
                  for e in page["events"]]
        return bool(events) and max(events, key=lambda e: e["id"])["type"] == "TaskSubmitted"

    def _deliver_rule_events(self) -> int:
        """What each rule's stand-in queue holds, delivered as the rule's target would take it."""
        stack, delivered = self.pipeline.stack, 0
        for (owner, target), _ in list(stack.rule_queues.items()):
            for event in stack.rule_events(owner, target):
                delivered += 1
                if owner == INCIDENT_FUNCTION or (owner, target) in self.pipeline.incident_rules:
                    result = invoke_async(self.pipeline.incidents, event, self.pipeline.sqs)
                    if not result.ok:
                        raise RuntimeError(f"the incident intake failed on {event.get('detail-type')}: {result.error}")
                    continue
                arn = next(t["Arn"] for t in stack.resolve(stack.properties(owner))["Targets"] if t["Id"] == target)
                if not str(arn).startswith("arn:aws:sns:"):
                    raise RuntimeError(f"rule {owner} target {target}: no delivery played for {arn}")
                self.ledger.note(f"EventBridge rule {owner}", "sns", "Publish")
        return delivered

    def _summary(self, mark: int, direct: str | None = None) -> str:
        """What the path's executions came to: each one's status and audit outcomes; or, for the
        item `direct` the intake delivered itself, its audit outcomes."""
        shown = []
        for arn in self.ledger.executions[mark:]:
            described = self.pipeline.sfn.describe_execution(executionArn=arn)
            status = "waiting for a person" if described["status"] == "RUNNING" else described["status"].lower()
            item_id = json.loads(described["input"]).get("item_id", "?")
            shown.append(f"{status} ({self.pipeline.audit(item_id) or 'not audited'})")
        if not shown and direct is not None:
            return f"delivered by the intake, no execution ({self.pipeline.audit(direct) or 'not audited'})"
        return "; ".join(shown) or "no execution"


def policy_dir() -> Path:
    from decision_router.domain.policies import POLICY_DIR

    return Path(POLICY_DIR)
