"""template.yaml's stack deployed on this machine: its resources created in the moto server
boto3 points at, the functions that take the inputs started (each execution environment a
process of its own, `local.lambdas`), and what the pipeline reads of it: queue names and
URLs, the audit and labelled-example tables, draining a queue.

`local.pipeline.LocalPipeline` is this plus `run`; `local.sending` and `local.settling` work on it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TextIO

from local.cloudformation import DEFAULT_ACCOUNT_ID, REPO_ROOT, Stack
from local.destinations import TICKET_FUNCTION
from local.event_sources import SqsEventSource, queue_logical_id, queue_url_for_arn
from local.lambdas import FunctionPool, LocalFunction, serve_workflow_invokes

if TYPE_CHECKING:
    from decision_router.domain.policies import Policy
    from decision_router.domain.ports.review import PendingReviewRow
    from decision_router.domain.records import AuditRow, DecisionRecord

ENDPOINT_NAME = "local-decision"
LOG_DIR = REPO_ROOT / ".demo"  # the demo's and the review console's service logs
# The template's functions the pipeline runs (everything else is read from their properties);
# TICKET_FUNCTION is local.destinations', whose DESTINATION_QUEUES name the stack's destinations.
INCIDENT_FUNCTION = "IncidentIntakeFunction"
REVIEW_FUNCTION = "ReviewCompletionFunction"
#: The function the workflow's RequestReview invokes (moto's Step Functions calls it here, in this process).
INDEX_WRITER_FUNCTION = "ReviewIndexWriterFunction"
#: Its execution environments: the workflow's reviews are indexed two at a time.
INDEX_WRITERS = 2
#: What the review function adds to its caller's identity proof here, so moto's server routes it to STS.
STS_ROUTING = {"Authorization": "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/sts/aws4_request, "
                                "SignedHeaders=host, Signature=0"}
#: Who answers the local run's reviews: moto's STS names every caller so (it checks no signature).
LOCAL_REVIEWER = f"arn:aws:sts::{DEFAULT_ACCOUNT_ID}:user/moto"
WEBHOOK_FUNCTION = "TicketWebhookFunction"
DEMO_REVIEWER = "demo-reviewer@example.com"
#: The stand-in for PagerDuty's partner event bus (moto cannot create partner buses).
PAGERDUTY_BUS = "pagerduty-demo"
#: The signing secrets the demo's operator configured for the webhooks (stored in the stack's secret).
DEMO_WEBHOOK_SECRETS = {"zendesk": "demo-zendesk-signing-secret", "jira": "demo-jira-webhook-secret",
                        "pagerduty": "demo-pagerduty-webhook-secret", "grafana": "demo-grafana-hmac-secret"}
#: The rule that takes the incident webhooks' forwarded bodies to the incident intake.
INCIDENT_WEBHOOK_RULE = "IncidentWebhookRule"


def install_policies(folder: Path, policies: dict[str, str], *, replace: bool = False) -> tuple[Path, dict[str, str]]:
    """The shipped policies and heads copied into `folder`, plus each policy file of `policies`
    (item kind → path) as `<its name>.json` with the head files it names beside it; the folder and
    item kind → policy name. ValueError for an unknown kind, a policy of another kind, or (unless
    `replace`: a changed copy of a shipped policy) a policy or head file that would replace a
    shipped one."""
    from decision_router.domain.policies import POLICY_DIR, load_policy

    unknown = sorted(set(policies) - {"ticket", "incident"})
    if unknown:
        raise ValueError(f"policies: no intake for item kind(s) {', '.join(unknown)} (ticket, incident)")
    shutil.copytree(POLICY_DIR, folder, dirs_exist_ok=True)
    names = {}
    for kind, path in policies.items():
        source = Path(path).resolve()
        policy = load_policy(source)
        if policy.item_kind != kind:
            raise ValueError(f"policy file {source} decides {policy.item_kind}s, not {kind}s")
        raw = json.loads(source.read_text(encoding="utf-8"))
        files = [source] + [source.parent / q["head"]["file"] for q in raw["questions"] if q.get("head")]
        targets = [folder / f"{policy.name}.json"] + [folder / q["head"]["file"] for q in raw["questions"] if q.get("head")]
        for src, dst in zip(files, targets):
            if dst.exists() and not replace:
                raise ValueError(f"policy file {source}: {dst.relative_to(folder)} is shipped already (rename the policy)")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        names[kind] = policy.name
    return folder, names


class LocalDeployment:
    """template.yaml's resources in the moto server boto3 points at, and the functions that take
    the inputs. Construct it inside `local.services.local_aws_environ` (boto3 and the functions
    read the endpoints then); `close` (or leaving the `with` block) stops the functions."""

    def __init__(self, *, log: TextIO | None = None, endpoint_name: str = ENDPOINT_NAME, concurrency: int = 1,
                 parameters: dict[str, str] | None = None, policies: dict[str, str] | None = None):
        """`concurrency`: execution environments per intake function (Lambda scaling out);
        `parameters`: template parameters besides the local ones (e.g. RelearningImageUri);
        `policies`: item kind (`ticket`, `incident`) → a policy file its intake applies instead of
        the template's. As a deployment would ship it, it is installed beside the shipped
        policies (a policies folder of this run's own, `install_policies`), where every function
        that resolves a record's policy by name (the intakes, the review function) finds it."""
        import boto3

        self.stack = Stack.load(parameters={"ExistingEndpointName": endpoint_name, "PagerDutySource": "true",
                                            "PagerDutyEventBusName": PAGERDUTY_BUS, "ReviewerPrincipals": LOCAL_REVIEWER,
                                            **(parameters or {})}).create()
        self.sqs, self.sfn = boto3.client("sqs"), boto3.client("stepfunctions")
        self.events, self.dynamodb = boto3.client("events"), boto3.client("dynamodb")
        # Every execution environment cold-starts at once; each is waited for below.
        self._policy_folder = tempfile.TemporaryDirectory(prefix="decision-router-policies-") if policies else None
        self.policy_dir, names = (install_policies(Path(self._policy_folder.name), policies) if self._policy_folder and policies
                                  else (None, {}))
        overrides = {"decision_router.domain.policies.POLICY_DIR": self.policy_dir} if self.policy_dir else None
        self.tickets = LocalFunction(self.stack, TICKET_FUNCTION, log=log, wait=False, overrides=overrides,
                                     env={"POLICY_NAME": names["ticket"]} if "ticket" in names else None)
        self.incidents = LocalFunction(self.stack, INCIDENT_FUNCTION, log=log, wait=False, overrides=overrides,
                                       env={"POLICY_NAME": names["incident"]} if "incident" in names else None)
        # moto's server routes the caller's identity proof to STS by an Authorization scope (it checks no signature).
        self.reviews = LocalFunction(self.stack, REVIEW_FUNCTION, log=log, wait=False, overrides={
            **(overrides or {}), "decision_router.adapters.caller_identity.LOCAL_ROUTING_HEADERS": STS_ROUTING})
        self.webhooks = LocalFunction(self.stack, WEBHOOK_FUNCTION, log=log, wait=False)
        index_writer = LocalFunction(self.stack, INDEX_WRITER_FUNCTION, log=log, wait=False, overrides=overrides)
        self.index_writer_pool = FunctionPool(index_writer, INDEX_WRITERS)
        serve_workflow_invokes(index_writer, self.index_writer_pool)
        self.ticket_pool = FunctionPool(self.tickets, concurrency)
        self.incident_pool = FunctionPool(self.incidents, concurrency)
        for function in (self.reviews, self.webhooks):
            function.wait_ready()
        self.ticket_source = SqsEventSource(self.tickets, self.sqs)
        self.concurrency = concurrency
        # What a rule delivered is read back from its stand-in queue: one put and read at a time.
        self.bus_lock = threading.Lock()
        self.pagerduty_bus = PAGERDUTY_BUS
        env = self.tickets.env
        self.destinations: dict[str, str] = json.loads(env["DESTINATION_QUEUES"])
        self.pending_reviews_table = env["PENDING_REVIEWS_TABLE_NAME"]
        self.state_machine_arn = env["ROUTING_STATE_MACHINE_ARN"]
        self.audit_table = env["AUDIT_TABLE_NAME"]
        self.resolved_items_table = env["RESOLVED_ITEMS_TABLE_NAME"]
        self.labelled_table = env["LABELLED_EXAMPLES_TABLE_NAME"]
        self.bus_name = env["EVENT_BUS_NAME"]
        self.incident_event = next(name for name, event in self.stack.properties(INCIDENT_FUNCTION)["Events"].items()
                                   if event["Type"] == "EventBridgeRule")
        # The template's escalation rules page the on-call topic; here each delivers to a stand-in queue.
        function_arn = self.stack.get_att(INCIDENT_FUNCTION, "Arn")
        bus_rules = [rule for rule in self.stack.of_type("AWS::Events::Rule")
                     if self.stack.resolve(self.stack.properties(rule)).get("EventBusName") == self.stack.ref("DecisionBus")
                     and all(t["Arn"] != function_arn for t in self.stack.resolve(self.stack.properties(rule))["Targets"])]
        self.page_queues = [url for (rule, _), url in self.stack.rule_queues.items() if rule in bus_rules]
        # Every rule delivering to the incident intake: its own (decision bus) and the sources' rules.
        self.incident_rules = [(INCIDENT_FUNCTION, self.incident_event)] + [
            (rule, target["Id"]) for rule in self.stack.of_type("AWS::Events::Rule")
            for target in self.stack.resolve(self.stack.properties(rule)).get("Targets", []) if target["Arn"] == function_arn]
        secrets = boto3.client("secretsmanager")
        secret_id = self.webhooks.env["WEBHOOK_SECRET_ARN"]
        stored = json.loads(secrets.get_secret_value(SecretId=secret_id)["SecretString"])
        self.webhook_secrets = {**stored, **DEMO_WEBHOOK_SECRETS}
        secrets.put_secret_value(SecretId=secret_id, SecretString=json.dumps(self.webhook_secrets))
        self.incident_webhook_rule = next(rule for rule in self.incident_rules if rule[0] == INCIDENT_WEBHOOK_RULE)
        self.pending_reviews: dict[str, PendingReviewRow] = {}  # by item id
        self.redelivery_seconds, self.retry_delays = 0, ()

    @property
    def functions(self) -> list[LocalFunction]:
        """Every execution environment the pipeline started."""
        return [*self.ticket_pool.functions, *self.incident_pool.functions, self.reviews, self.webhooks,
                *self.index_writer_pool.functions]

    def close(self) -> None:
        for function in self.functions:
            function.close()
        if self._policy_folder is not None:
            self._policy_folder.cleanup()

    def load_policy(self, name: str) -> "Policy":
        """A record's policy by its name, as this deployment's functions resolve it."""
        from decision_router.domain.policies import load_policy

        return load_policy(self.policy_dir / f"{name}.json" if self.policy_dir else name)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def summary(self) -> str:
        count = {kind: len(self.stack.of_type(kind)) for kind in (
            "AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::Events::EventBus", "AWS::Serverless::StateMachine")}
        rules = len(self.stack.of_type("AWS::Events::Rule")) + sum(
            1 for f in self.stack.of_type("AWS::Serverless::Function")
            for e in self.stack.properties(f).get("Events", {}).values() if e["Type"] in ("EventBridgeRule", "CloudWatchEvent"))
        return (f"{count['AWS::SQS::Queue']} queues, {count['AWS::DynamoDB::Table']} tables, "
                f"{count['AWS::Events::EventBus']} event bus, {rules} rule(s), "
                f"{count['AWS::Serverless::StateMachine']} state machine (the real ASL)")

    def audit(self, item_id: str) -> str | None:
        rows = self.dynamodb.query(TableName=self.audit_table, KeyConditionExpression="item_id = :id",
                                   ExpressionAttributeValues={":id": {"S": item_id}})["Items"]
        return ", ".join(row["outcome"]["S"] for row in rows) or None

    def similar(self, record: DecisionRecord) -> list[str]:
        """The ids of the resolved items nearest to the record's item, nearest first, as the
        console finds them (each REPORT= line's `similar`)."""
        from decision_router.adapters.similar_items import ResolvedItems
        from decision_router.review.console import similar_to

        resolved = ResolvedItems(self.resolved_items_table, self.dynamodb).recent(record.policy.name)
        return [s.item_id for s in similar_to(record, self.load_policy(record.policy.name), resolved)]

    def export_audit(self, path: Path) -> list[AuditRow]:
        """The audit table's rows, one JSON object per line (what `make replay` reads once this
        stack is gone); the rows written."""
        from decision_router.adapters.review import AuditTrail, Unreadable

        rows = AuditTrail(self.audit_table, self.dynamodb).all()
        unreadable = [r for r in rows if isinstance(r, Unreadable)]
        if unreadable:  # what this stack's own workflow wrote: a row that does not read is a bug here
            raise ValueError(f"audit row {unreadable[0].item_id}/{unreadable[0].execution_name}: {unreadable[0].problem}")
        path.parent.mkdir(parents=True, exist_ok=True)
        readable = [row for row in rows if not isinstance(row, Unreadable)]
        path.write_text("".join(row.model_dump_json() + "\n" for row in readable), encoding="utf-8")
        return readable

    def labelled_example(self, policy_name: str, item_id: str) -> dict[str, str] | None:
        """The latest labelled example of an item of this id in the policy (the table is keyed by
        item key: items of one id from other sources are other rows)."""
        rows = self.dynamodb.query(TableName=self.labelled_table, KeyConditionExpression="policy_name = :p",
                                   FilterExpression="item_id = :i",
                                   ExpressionAttributeValues={":p": {"S": policy_name}, ":i": {"S": item_id}})["Items"]
        found = [{key: value["S"] for key, value in row.items() if "S" in value} for row in rows]
        return max(found, key=lambda row: row.get("labelled_at", "")) if found else None

    # ------------------------------------------------------------------------------ queues
    def state_machine_id(self) -> str:
        return next(s for s in self.stack.of_type("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
                    if self.stack.ref(s) == self.state_machine_arn)

    def ticket_dead_letter_queue(self) -> str:
        queue_id = queue_logical_id(self.stack, self.ticket_source.queue_url)
        policy = self.stack.resolve(self.stack.properties(queue_id)["RedrivePolicy"])
        return queue_url_for_arn(self.stack, policy["deadLetterTargetArn"])

    def queue_name(self, url: str) -> str:
        return queue_logical_id(self.stack, url) or url.rsplit("/", 1)[-1]

    def drain_messages(self, url: str) -> list[dict[str, Any]]:
        """Every message on the queue, received and deleted."""
        found = []
        while messages := self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                                   MessageAttributeNames=["All"]).get("Messages", []):
            for message in messages:
                found.append(message)
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return found

    def drain_bodies(self, url: str) -> list[dict[str, Any]]:
        """Messages on the queue (received and deleted), bodies parsed when JSON."""
        found = []
        for message in self.drain_messages(url):
            try:
                body = json.loads(message["Body"])
            except json.JSONDecodeError:
                body = {}
            found.append({**body, "MessageId": message["MessageId"]} if isinstance(body, dict) else
                         {"MessageId": message["MessageId"]})
        return found
