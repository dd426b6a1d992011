"""Fixtures for the infrastructure tests: template.yaml's resources in moto, with moto's Step
Functions interpreter executing the real routing ASL (no AWS account, no Docker).

Fake credentials and the region are set in tests/conftest.py."""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
import pytest
from moto import mock_aws

from decision_router.domain.judging import review_choices
from decision_router.domain.policies import load_policy
from decision_router.domain.records import DecisionRecord, execution_name
from decision_router.items import parse_item
from decision_router.review.completion import complete_review
from local.cloudformation import Stack
from local.lambdas import LocalFunction, serve_workflow_invokes
from local.settling import Route, routes
from tests.functions.sts_stand_in import TEST_REVIEWER_PRINCIPALS

ENDPOINT_NAME = "decision-endpoint"
MODEL = {
    "file": "SmolLM2-135M-Instruct.Q4_1.gguf", "bytes": 94_000_000, "sha256": "ab" * 32,
    "context_size": 4096, "threads": 2, "gpu_layers": 0, "llama_cpp_python_version": "0.3.36",
}


class Pipeline:
    """The stack created in moto plus the calls the tests make against it."""

    def __init__(self, stack: Stack):
        self.stack = stack
        self.sqs = boto3.client("sqs")
        self.sfn = boto3.client("stepfunctions")
        self.dynamodb = boto3.client("dynamodb")
        # Each function gets the same wiring; any one of them tells where things are.
        self.env = stack.function_environment("TicketIntakeFunction")
        self.destinations: dict[str, str] = json.loads(self.env["DESTINATION_QUEUES"])
        self.state_machine_arn = self.env["ROUTING_STATE_MACHINE_ARN"]

    # ---------------------------------------------------------------- records (interfaces file)
    def reviewer_output(self, record: dict, answers: dict[str, str], *, execution_name: str,
                        reviewer: str = "bob@example.com") -> str:
        """A reviewer's SendTaskSuccess output for these answers, as the review function builds it."""
        answer = complete_review(DecisionRecord.model_validate(record), execution_name, answers, reviewer)
        return answer.model_dump_json()

    def record(self, kind: str, item_id: str, *, route: str, answers: dict[str, str], escalate: bool = False,
               timeout_seconds: int = 86400) -> dict:
        """A decision record as the intake writes it (validated by the functions' DecisionRecord)
        for the shipped policy's questions; `answers` are the model's (chosen or suggested) options."""
        policy = load_policy("support-ticket" if kind == "ticket" else "incident")
        questions = {q.id: (answers[q.id], q.option_ids) for q in policy.questions}
        routing = policy.routing_question
        target = routing.option(answers[routing.id]).target if route == "auto" else None
        decisions = []
        for question, (chosen, options) in questions.items():
            probabilities = {option: (0.82 if option == chosen else 0.18 / (len(options) - 1)) for option in options}
            passed = route == "auto"
            decisions.append({
                "question": question, "source": "model", "option_id": chosen, "probabilities": probabilities,
                "confidence": 0.775 if passed else 0.31, "confidence_formula": "normalized_peak",
                "margin": 0.775 if passed else 0.12, "allowed_token_mass": 0.93, "temperature": 1.6,
                "thresholds": {"min_confidence": 0.6, "min_margin": 0.15, "min_allowed_token_mass": 0.5},
                "passed": passed, "reasons": [] if passed else ["confidence 0.31 < 0.60"],
                "rule": None, "error": None, "model": MODEL, "prompt_sha256": "cd" * 32, "latency_seconds": 0.2,
            })
        item = ({"ticket_id": item_id, "subject": "Charged twice", "body": "Please refund one payment.",
                 "customer": {"id": "C-1", "tier": "pro"}, "channel": "email", "created_at": "2026-11-29T12:00:00Z"}
                if kind == "ticket" else
                {"incident_id": item_id, "title": "Checkout down", "description": "5xx at 100%",
                 "service": "checkout-api", "severity": "sev1", "source": "cloudwatch",
                 "reported_at": "2026-11-29T12:00:00Z"})
        record = {
            "item_kind": kind, "item_id": item_id, "item_key": parse_item(kind, item).key, "item": item,
            "policy": {"name": policy.name, "version": policy.version},
            "route": route,
            "route_reason": "all thresholds met" if route == "auto" else "queue: confidence 0.31 < 0.60",
            "destination": {"target": target, "queue_url": self.destinations[target]} if target else None,
            "escalate": escalate,
            "decisions": decisions,
            "review": {"timeout_seconds": timeout_seconds,
                       "questions": {q: options for q, (_, options) in questions.items()},
                       "choices": [c.wire() for c in review_choices(policy, self.destinations)]},
            "decided_at": "2026-11-29T12:00:01Z",
        }
        return DecisionRecord.model_validate(record).model_dump(mode="json")

    # ---------------------------------------------------------------------------- workflow
    def start(self, record: dict[str, Any]) -> str:
        # moto gives every unnamed execution the same ARN: always name it (as the functions do).
        name = execution_name(record["item_kind"], record["item_id"], record["item_key"])
        return self.sfn.start_execution(stateMachineArn=self.state_machine_arn, name=name,
                                        input=json.dumps(record))["executionArn"]

    def wait(self, execution_arn: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            described = self.sfn.describe_execution(executionArn=execution_arn)
            if described["status"] != "RUNNING":
                return described
            if time.monotonic() > deadline:
                raise AssertionError(f"execution still RUNNING after {timeout}s: {execution_arn}")
            time.sleep(0.1)

    def failed_states(self, execution_arn: str) -> list[dict]:
        events = self.sfn.get_execution_history(executionArn=execution_arn)["events"]
        return [e for e in events if e["type"].endswith("Failed")]

    def routes(self) -> dict[str, Route]:
        """Name -> route of every item routed so far: the workflow's executions and the automatic
        routes the intake delivered itself (read from their audit rows), as the local harness reads them."""
        return routes(self.dynamodb, self.env["AUDIT_TABLE_NAME"], self.sfn, self.state_machine_arn)

    def settled(self, timeout: float = 60) -> dict[str, str]:
        """Name -> status of every route, once no execution runs any more (for tests where none
        waits for a review): a direct route is SUCCEEDED once delivered."""
        return {name: self.wait(route.execution_arn, timeout)["status"] if route.execution_arn else route.status
                for name, route in self.routes().items()}

    # ------------------------------------------------------------------------- reviews
    def review_requests(self, *, wait_seconds: float = 0) -> list[dict]:
        """The reviews the workflow waits for, as its index writer put them in the pending-review
        index (task_token, execution_name, requested_at, record; waits up to `wait_seconds` for one)."""
        deadline = time.monotonic() + wait_seconds
        while True:
            rows = self.dynamodb.scan(TableName=self.env["PENDING_REVIEWS_TABLE_NAME"], ConsistentRead=True)["Items"]
            if rows or time.monotonic() >= deadline:
                return [{"task_token": row["task_token"]["S"], "execution_name": row["execution_name"]["S"],
                         "requested_at": row["requested_at"]["S"], "record": json.loads(row["record"]["S"])}
                        for row in rows]
            time.sleep(0.1)

    # ------------------------------------------------------------------------------ queues
    def messages(self, queue_url: str, *, wait_seconds: float = 0) -> list[dict]:
        """Every message on the queue (bodies as JSON), received and deleted."""
        deadline = time.monotonic() + wait_seconds
        found: list[dict] = []
        while True:
            batch = self.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
            for message in batch:
                found.append(json.loads(message["Body"]))
                self.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            if not batch and (found or time.monotonic() >= deadline):
                return found
            if not batch:
                time.sleep(0.1)

    def routed(self) -> dict[str, dict[str, list[dict]]]:
        """Drain the nine destination queues: item id -> target -> its messages."""
        found: dict[str, dict[str, list[dict]]] = {}
        for target, url in self.destinations.items():
            for message in self.messages(url):
                found.setdefault(message["item_id"], {}).setdefault(target, []).append(message)
        return found

    def queues_holding(self, item_id: str) -> dict[str, list[dict]]:
        """Target -> messages about this item (drains all destination queues: one item per call)."""
        return self.routed().get(item_id, {})

    def pages(self) -> list[dict]:
        """What the on-call topic received: the template's own rules on the bus deliver to it; in
        moto each rule target is an SQS queue standing in for the topic (input transformer applied)."""
        found = []
        for (rule, _target), url in self.stack.rule_queues.items():
            if rule in self.stack.of_type("AWS::Events::Rule"):
                found += self.messages(url)
        return found

    def observe(self, *detail_types: str) -> str:
        """An SQS queue receiving the bus's events of these detail types."""
        return self.stack.observe_bus("DecisionBus", {"detail-type": list(detail_types)}, name="-".join(
            d.replace(" ", "") for d in detail_types))

    # ------------------------------------------------------------------------------ tables
    def audit(self, item_id: str) -> list[dict[str, Any]]:
        rows = self.dynamodb.query(
            TableName=self.env["AUDIT_TABLE_NAME"], KeyConditionExpression="item_id = :id",
            ExpressionAttributeValues={":id": {"S": item_id}})["Items"]
        return [{key: value["S"] for key, value in row.items() if "S" in value} for row in rows]  # not the TTL number

    def labelled_example(self, policy_name: str, item_id: str) -> dict[str, str] | None:
        """The labelled example of the one item of this id in the policy (the table is keyed by item key)."""
        rows = self.dynamodb.query(TableName=self.env["LABELLED_EXAMPLES_TABLE_NAME"],
                                   KeyConditionExpression="policy_name = :p", FilterExpression="item_id = :i",
                                   ExpressionAttributeValues={":p": {"S": policy_name}, ":i": {"S": item_id}})["Items"]
        assert len(rows) <= 1, f"{len(rows)} labelled examples of {item_id}"
        return {key: value["S"] for key, value in rows[0].items() if "S" in value} if rows else None


@pytest.fixture
def pipeline():
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        stack = Stack.load(parameters={"ExistingEndpointName": ENDPOINT_NAME,
                                       "ReviewerPrincipals": TEST_REVIEWER_PRINCIPALS}).create()
        writer = LocalFunction(stack, "ReviewIndexWriterFunction")  # the workflow's RequestReview invokes it
        serve_workflow_invokes(writer)
        yield Pipeline(stack)
        writer.close()


class LambdaContext:
    """Lambda's context object (there is no Lambda runtime here): 5 minutes left, like the template."""

    function_name = "decision-router-test"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:decision-router-test"
    aws_request_id = "00000000-0000-4000-8000-000000000001"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


@pytest.fixture
def lambda_context() -> LambdaContext:
    return LambdaContext()
