"""Read `template.yaml` and stand its data-plane resources up in moto (or whatever boto3 points at).

The template is the one source of truth for names and wiring: the tests and the local demo ask
this module for the queues, tables, bus, rules and the routing state machine it creates, and for
the environment a function would get in AWS, instead of repeating names in Python.

Created: SQS queues, EventBridge buses, EventBridge rules (SAM `EventBridgeRule` function events
and plain `AWS::Events::Rule`s; Lambda, Step Functions and SNS targets become an SQS queue, because
moto cannot deliver to them; an input transformer still applies, rendered as EventBridge documents
it: `local.input_transformer`), each bus's policy (its statements, as `bus_policy` reads them; moto
stores it and enforces nothing), DynamoDB tables (TTL and
point-in-time recovery included) and state machines (DefinitionUri + DefinitionSubstitutions
resolved), Secrets Manager secrets (GenerateSecretString's key generated), S3 buckets (versioning
as declared) and SNS topics (by name, nothing subscribed). Everything else (functions, IAM,
alarms, SageMaker, logs) is only named: a Ref to it resolves to a stable placeholder.

    stack = Stack.load(parameters={"ExistingEndpointName": "local-decision"})
    stack.create()                      # inside mock_aws() or against a moto server
    env = stack.function_environment("TicketIntakeFunction")

`python -m local.cloudformation statelint` lints every state machine after substitution.

Reading the template (tags, parameters, conditions, intrinsics, placeholder names and ARNs) is
`local.template.StackTemplate`; this module's `Stack` extends it with the creation, which fills in
the same `refs` and `attributes` the reader resolves against.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import sys
from typing import Any, Callable, Iterable

from local.input_transformer import use_in_moto
from local.template import (
    _RULE_EVENT_TYPES,
    _STATE_MACHINE_TYPES,
    DEFAULT_ACCOUNT_ID,
    DEFAULT_REGION,
    DEFAULT_STACK_NAME,
    FUNCTION_TYPES,
    REPO_ROOT,
    TEMPLATE_PATH,
    StackTemplate,
    TemplateError,
    load_template,
)

__all__ = [
    "DEFAULT_ACCOUNT_ID", "DEFAULT_REGION", "DEFAULT_STACK_NAME", "FUNCTION_TYPES", "REPO_ROOT", "TEMPLATE_PATH",
    "Stack", "StackTemplate", "TemplateError", "load_template", "statelint_problems",
]


class Stack(StackTemplate):
    """The template's resources created in moto (or whatever boto3 points at), and read back."""

    def create(self, client: Callable[[str], Any] | None = None, only: Iterable[str] | None = None) -> Stack:
        """Create queues, buses, tables, state machines and rules; returns self.

        `client(service_name)` makes boto3 clients; by default `boto3.client(name, region_name=…)`,
        which honours AWS_ENDPOINT_URL (moto server) and mock_aws(). `only`: create just these
        resources (logical ids; a unit test's table, queue, bucket or state machine), the rest stay
        placeholders (a state machine created alone names their placeholders).
        """
        client = client or self._default_client
        if only is not None:
            wanted = list(dict.fromkeys(only))
            queues = [q for q in self._queues_in_dependency_order() if q in wanted]  # a DLQ before its queue
            for logical_id in queues + [w for w in wanted if w not in queues]:
                kind = self.template["Resources"][logical_id]["Type"]
                creator = {"AWS::S3::Bucket": ("s3", self._create_bucket), "AWS::DynamoDB::Table": (
                    "dynamodb", self._create_table), "AWS::SQS::Queue": ("sqs", self._create_queue),
                    **{t: ("stepfunctions", self._create_state_machine) for t in _STATE_MACHINE_TYPES}}.get(kind)
                if creator is None:
                    raise TemplateError(f"create(only=...): {logical_id} ({kind}) is created with the whole stack only")
                creator[1](client(creator[0]), logical_id)
            return self
        use_in_moto()  # the rules' input transformers as AWS renders them
        sqs, events, dynamodb, sfn = (client(name) for name in ("sqs", "events", "dynamodb", "stepfunctions"))
        for logical_id in self.of_type("AWS::Events::EventBus"):
            self._create_bus(events, logical_id)
            policy = self.bus_policy(logical_id)
            if policy is not None:  # the whole document at once, as the chained resources end up
                events.put_permission(EventBusName=self.ref(logical_id), Policy=json.dumps(policy))
        for logical_id in self._queues_in_dependency_order():
            self._create_queue(sqs, logical_id)
        for logical_id in self.of_type("AWS::DynamoDB::Table"):
            self._create_table(dynamodb, logical_id)
        for logical_id in self.of_type("AWS::S3::Bucket"):
            self._create_bucket(client("s3"), logical_id)
        for logical_id in self.of_type("AWS::SecretsManager::Secret"):
            self._create_secret(client("secretsmanager"), logical_id)
        for logical_id in self.of_type("AWS::SNS::Topic"):  # what a function or state machine publishes to
            client("sns").create_topic(Name=self.physical_name(logical_id))
        for logical_id in self.of_type(*_STATE_MACHINE_TYPES):
            self._create_state_machine(sfn, logical_id)
        for logical_id in self.of_type("AWS::Serverless::Function"):
            for event_name, event in self.properties(logical_id).get("Events", {}).items():
                if event["Type"] in _RULE_EVENT_TYPES:
                    self._create_function_rule(sqs, events, logical_id, event_name, event["Properties"])
        for logical_id in self.of_type("AWS::Events::Rule"):
            self._create_rule(sqs, events, logical_id)
        return self

    def _queues_in_dependency_order(self) -> list[str]:
        """Dead-letter queues before the queues whose RedrivePolicy points at them."""
        queues = self.of_type("AWS::SQS::Queue")

        def dead_letter_of(logical_id: str) -> str | None:
            target = self.properties(logical_id).get("RedrivePolicy", {}).get("deadLetterTargetArn")
            return target["Fn::GetAtt"][0] if isinstance(target, dict) and "Fn::GetAtt" in target else None

        return sorted(queues, key=lambda q: dead_letter_of(q) is not None)

    def _create_queue(self, sqs: Any, logical_id: str) -> None:
        props = self.resolve(self.properties(logical_id))
        attributes: dict[str, str] = {}
        for key, value in props.items():
            if key in ("QueueName", "Tags"):
                continue
            if key == "RedrivePolicy":
                attributes[key] = json.dumps(value)
            else:
                attributes[key] = str(value).lower() if isinstance(value, bool) else str(value)
        name = self.physical_name(logical_id)
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        self._record_queue(logical_id, url, name)

    def _create_bus(self, events: Any, logical_id: str) -> None:
        name = self.physical_name(logical_id)
        arn = events.create_event_bus(Name=name)["EventBusArn"]
        self.refs[logical_id] = name
        self.attributes.update({(logical_id, "Arn"): arn, (logical_id, "Name"): name})

    def _create_table(self, dynamodb: Any, logical_id: str) -> None:
        props = self.resolve(self.properties(logical_id))
        name = self.physical_name(logical_id)
        request: dict[str, Any] = {
            "TableName": name,
            "KeySchema": props["KeySchema"],
            "AttributeDefinitions": props["AttributeDefinitions"],
            "BillingMode": props.get("BillingMode", "PROVISIONED"),
        }
        for key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes", "ProvisionedThroughput", "StreamSpecification"):
            if key in props:
                request[key] = props[key]
        if "SSESpecification" in props:
            request["SSESpecification"] = {"Enabled": bool(props["SSESpecification"].get("SSEEnabled"))}
        description = dynamodb.create_table(**request)["TableDescription"]
        ttl = props.get("TimeToLiveSpecification")
        if ttl:
            dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
        pitr = props.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled")
        if pitr:
            dynamodb.update_continuous_backups(
                TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
            )
        self.refs[logical_id] = name
        self.attributes.update({(logical_id, "Arn"): description["TableArn"], (logical_id, "Name"): name})

    def _create_bucket(self, s3: Any, logical_id: str) -> None:
        """The bucket, versioned when the template says so (rollback reads earlier versions)."""
        props = self.resolve(self.properties(logical_id))
        name = self.ref(logical_id)
        request: dict[str, Any] = {"Bucket": name}
        if self.region != "us-east-1":
            request["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        s3.create_bucket(**request)
        status = props.get("VersioningConfiguration", {}).get("Status")
        if status:
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": status})

    def _create_secret(self, secretsmanager: Any, logical_id: str) -> None:
        """SecretString as given, or GenerateSecretString's template with its key generated."""
        props = self.resolve(self.properties(logical_id))
        if "SecretString" in props:
            value = props["SecretString"]
        else:
            generate = props.get("GenerateSecretString", {})
            generated = secrets.token_urlsafe(int(generate.get("PasswordLength", 32)))[: int(generate.get("PasswordLength", 32))]
            template = json.loads(generate.get("SecretStringTemplate", "{}"))
            value = json.dumps({**template, generate["GenerateStringKey"]: generated}) if "GenerateStringKey" in generate else generated
        name = self.physical_name(logical_id)
        arn = secretsmanager.create_secret(Name=name, SecretString=value)["ARN"]
        self.refs[logical_id] = arn
        self.attributes[(logical_id, "Id")] = arn

    def _create_state_machine(self, sfn: Any, logical_id: str) -> None:
        props = self.properties(logical_id)
        name = self.physical_name(logical_id)
        arn = sfn.create_state_machine(
            name=name,
            definition=self.state_machine_definition(logical_id),
            roleArn=f"arn:aws:iam::{self.account_id}:role/{name}",
            type=self.resolve(props.get("Type", props.get("StateMachineType", "STANDARD"))),
        )["stateMachineArn"]
        self.refs[logical_id] = arn
        self.attributes.update({(logical_id, "Arn"): arn, (logical_id, "Name"): name})

    def _create_function_rule(
        self, sqs: Any, events: Any, function_id: str, event_name: str, props: dict[str, Any]
    ) -> None:
        props = self.resolve(props)
        rule_name = props.get("RuleName") or f"{self.stack_name}-{function_id}{event_name}"
        bus = props.get("EventBusName", "default")
        events.put_rule(Name=rule_name, EventBusName=bus, EventPattern=json.dumps(props["Pattern"]), State="ENABLED")
        queue_url, queue_arn = self._target_queue(sqs, f"{self.stack_name}-{function_id}-{event_name}")
        events.put_targets(Rule=rule_name, EventBusName=bus, Targets=[{"Id": function_id, "Arn": queue_arn}])
        self.rule_queues[(function_id, event_name)] = queue_url

    def _create_rule(self, sqs: Any, events: Any, logical_id: str) -> None:
        props = self.resolve(self.properties(logical_id))
        name = self.physical_name(logical_id)
        bus = props.get("EventBusName", "default")
        self._ensure_bus(events, bus)
        events.put_rule(Name=name, EventBusName=bus, EventPattern=json.dumps(props["EventPattern"]),
                        State=props.get("State", "ENABLED"))
        sqs_arns = {self.attributes[(q, "Arn")] for q in self.of_type("AWS::SQS::Queue")}
        targets = []
        for target in props.get("Targets", []):
            arn = target["Arn"]
            if arn not in sqs_arns:  # moto cannot deliver to Lambda, Step Functions or SNS targets
                url, arn = self._target_queue(sqs, f"{name}-{target['Id']}")
                self.rule_queues[(logical_id, target["Id"])] = url
            # The stand-in queue receives what the target would: the transformed input included.
            targets.append({"Id": target["Id"], "Arn": arn,
                            **{k: target[k] for k in ("InputTransformer", "Input", "InputPath") if k in target}})
        events.put_targets(Rule=name, EventBusName=bus, Targets=targets)
        self.refs[logical_id] = name

    def _ensure_bus(self, events: Any, bus: str) -> None:
        """A bus a rule names that the template does not create (a partner event bus, which exists
        once the partner source is accepted) is created here as its stand-in (moto refuses partner
        names: pass a plain name as the parameter locally)."""
        if bus == "default" or bus in {self.ref(b) for b in self.of_type("AWS::Events::EventBus")}:
            return
        with contextlib.suppress(events.exceptions.ResourceAlreadyExistsException):
            events.create_event_bus(Name=bus)

    def _target_queue(self, sqs: Any, name: str) -> tuple[str, str]:
        url = sqs.create_queue(QueueName=name[:80])["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        return url, arn

    def rule_events(self, function_id: str, event_name: str, client: Callable[[str], Any] | None = None) -> list[dict[str, Any]]:
        """Drain the queue standing in for a function's EventBridge rule: the events as Lambda
        would receive them (moto's SQS delivery omits `account`, which EventBridge always sends)."""
        sqs = (client or self._default_client)("sqs")
        url = self.rule_queues[(function_id, event_name)]
        events = []
        while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            for message in messages:
                event = json.loads(message["Body"])
                event.setdefault("account", self.account_id)
                events.append(event)
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return events

    def _default_client(self, service: str) -> Any:
        return _client(service, self.region, os.environ.get("AWS_ENDPOINT_URL"))

    def observe_bus(self, bus_logical_id: str, pattern: dict[str, Any], name: str, client: Callable[[str], Any] | None = None) -> str:
        """A rule on the bus delivering matching events to a new SQS queue; returns its URL."""
        client = client or self._default_client
        sqs, events = client("sqs"), client("events")
        bus = self.ref(bus_logical_id)
        rule = f"{self.stack_name}-observe-{name}"
        events.put_rule(Name=rule, EventBusName=bus, EventPattern=json.dumps(pattern), State="ENABLED")
        url, arn = self._target_queue(sqs, rule)
        events.put_targets(Rule=rule, EventBusName=bus, Targets=[{"Id": name, "Arn": arn}])
        return url


@functools.cache
def _client(service: str, region: str, endpoint_url: str | None) -> Any:
    """One boto3 client per service, region and endpoint for the process (making one takes about
    0.1 s, and a stack makes nine); moto's mock_aws intercepts a client whenever it was made."""
    import boto3

    return boto3.client(service, region_name=region)


# ------------------------------------------------------------------------------------- statelint
def statelint_problems(stack: Stack | None = None) -> dict[str, list[str]]:
    """statelint problems per state machine, after DefinitionSubstitutions (placeholders suffice).
    By default every state machine the template can create (the relearning one needs its image)."""
    from statelint.config import Config
    from statelint.linter import Linter

    stack = stack or Stack.load(parameters={"RelearningImageUri": "lint/relearning:latest"})
    return {
        logical_id: list(Linter.validate(stack.state_machine_definition(logical_id), Config()))
        for logical_id in stack.of_type(*_STATE_MACHINE_TYPES)
    }


def main(argv: list[str]) -> int:
    if argv[:1] != ["statelint"]:
        print("usage: python -m local.cloudformation statelint", file=sys.stderr)
        return 2
    failed = False
    for logical_id, problems in statelint_problems().items():
        print(f"statelint {logical_id}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            print(f"  {problem}")
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
