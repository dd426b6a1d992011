"""Read `template.yaml` and stand its data-plane resources up in moto (or whatever boto3 points at).

The template is the one source of truth for names and wiring: the tests and the local demo ask
this module for the queues, tables, bus, rules and the routing state machine it creates, and for
the environment a function would get in AWS, instead of repeating names in Python.

Created: SQS queues, EventBridge buses, EventBridge rules (SAM `EventBridgeRule` function events
and plain `AWS::Events::Rule`s; Lambda, Step Functions and SNS targets become an SQS queue, because
moto cannot deliver to them; an input transformer still applies), DynamoDB tables (TTL and
point-in-time recovery included) and state machines (DefinitionUri + DefinitionSubstitutions
resolved), Secrets Manager secrets (GenerateSecretString's key generated), S3 buckets (versioning
as declared) and SNS topics (by name, nothing subscribed). Everything else (functions, IAM,
alarms, SageMaker, logs) is only named: a Ref to it resolves to a stable placeholder.

    stack = Stack.load(parameters={"ExistingEndpointName": "local-decision"})
    stack.create()                      # inside mock_aws() or against a moto server
    env = stack.function_environment("TicketIntakeFunction")

`python -m local.cloudformation statelint` lints every state machine after substitution.

One module of some 580 lines, on purpose: reading the template (intrinsics, conditions,
parameters) and creating its resources share one `Stack`, whose refs and attributes the creation
fills in as the reader resolves them; split in two, each half would reach into the other's state.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
TEMPLATE_PATH = REPO_ROOT / "template.yaml"

DEFAULT_STACK_NAME = "decision-router"
DEFAULT_REGION = "us-east-1"
DEFAULT_ACCOUNT_ID = "123456789012"  # moto's default account

_STATE_MACHINE_TYPES = ("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
_RULE_EVENT_TYPES = ("EventBridgeRule", "CloudWatchEvent")
_NO_VALUE = object()
# Resource types whose Ref is a name rather than an ARN (queues: URL; the rest: ARN).
_REF_IS_NAME = (
    "AWS::DynamoDB::Table",
    "AWS::Events::EventBus",
    "AWS::Events::Rule",
    "AWS::Serverless::Function",
    "AWS::Lambda::Function",
    "AWS::Logs::LogGroup",
    "AWS::IAM::Role",
    "AWS::Cognito::UserPool",  # the pool id
    "AWS::Cognito::UserPoolClient",  # the client id
    "AWS::Serverless::HttpApi",  # the API id
    "AWS::S3::Bucket",
)
#: Function resources the local run can start: SAM's, and plain container-image functions.
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")


class TemplateError(ValueError):
    """The template uses something this reader cannot resolve; the message names where."""


# ------------------------------------------------------------------------------------------ YAML
class _CfnLoader(yaml.SafeLoader):
    """YAML loader that turns CloudFormation short-form tags into their long form."""


def _construct_tag(loader: _CfnLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if tag_suffix == "Ref" else ("Condition" if tag_suffix == "Condition" else f"Fn::{tag_suffix}")
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if tag_suffix == "GetAtt":  # !GetAtt Logical.Attribute
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _construct_tag)


def load_template(path: Path | str = TEMPLATE_PATH) -> dict[str, Any]:
    """The template as plain data, short-form tags expanded (`!Ref X` -> `{"Ref": "X"}`)."""
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=_CfnLoader)  # a SafeLoader: plain data only


def _constraint_problem(spec: dict[str, Any], value: str) -> str | None:
    """Why CloudFormation would refuse this parameter value (AllowedPattern, AllowedValues,
    MinValue/MaxValue), in the template's own ConstraintDescription when it has one; else None.
    AllowedPattern is a Java regex matched against the whole value; the template's patterns use
    only syntax that Python's `re` reads the same way."""
    why = spec.get("ConstraintDescription")
    pattern = spec.get("AllowedPattern")
    if pattern is not None and not re.fullmatch(pattern, value):
        return why or f"does not match AllowedPattern {pattern}"
    allowed = spec.get("AllowedValues")
    if allowed is not None and value not in [str(a) for a in allowed]:
        return why or f"is not one of the AllowedValues {allowed}"
    if spec.get("Type") == "Number":
        number = float(value)
        if "MinValue" in spec and number < float(spec["MinValue"]):
            return why or f"is below MinValue {spec['MinValue']}"
        if "MaxValue" in spec and number > float(spec["MaxValue"]):
            return why or f"is above MaxValue {spec['MaxValue']}"
    return None


# ------------------------------------------------------------------------------------- the stack
@dataclass
class Stack:
    """The template plus the physical values of its resources (placeholders until `create`)."""

    template: dict[str, Any]
    template_dir: Path
    stack_name: str = DEFAULT_STACK_NAME
    region: str = DEFAULT_REGION
    account_id: str = DEFAULT_ACCOUNT_ID
    parameters: dict[str, str] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    attributes: dict[tuple[str, str], str] = field(default_factory=dict)
    # (function logical id, event name) -> URL of the SQS queue standing in for the function.
    rule_queues: dict[tuple[str, str], str] = field(default_factory=dict)

    @classmethod
    def load(
        cls,
        path: Path | str = TEMPLATE_PATH,
        *,
        parameters: dict[str, Any] | None = None,
        stack_name: str = DEFAULT_STACK_NAME,
        region: str = DEFAULT_REGION,
        account_id: str = DEFAULT_ACCOUNT_ID,
    ) -> Stack:
        path = Path(path)
        template = load_template(path)
        declared = template.get("Parameters", {})
        unknown = set(parameters or {}) - set(declared)
        if unknown:
            raise TemplateError(f"parameters {sorted(unknown)} are not declared in {path.name}")
        values = {name: str(spec["Default"]) for name, spec in declared.items() if "Default" in spec}
        values.update({name: str(value) for name, value in (parameters or {}).items()})
        missing = set(declared) - set(values)
        if missing:
            raise TemplateError(f"parameters {sorted(missing)} have no default; pass them")
        for name, value in values.items():
            problem = _constraint_problem(declared[name], value)
            if problem:
                raise TemplateError(f"parameter {name}={value!r} {problem}")
        stack = cls(template, path.parent, stack_name, region, account_id, values)
        for logical_id in stack.resources:
            stack._set_placeholder(logical_id)
        return stack

    # ------------------------------------------------------------------------------ reading
    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        """Resources whose Condition holds for these parameters."""
        return {
            logical_id: spec
            for logical_id, spec in self.template["Resources"].items()
            if "Condition" not in spec or self.condition(spec["Condition"])
        }

    def of_type(self, *types: str) -> list[str]:
        return [logical_id for logical_id, spec in self.resources.items() if spec["Type"] in types]

    def properties(self, logical_id: str) -> dict[str, Any]:
        return self.template["Resources"][logical_id].get("Properties", {})

    def ref(self, logical_id: str) -> str:
        return self.resolve({"Ref": logical_id})

    def get_att(self, logical_id: str, attribute: str) -> str:
        return self.resolve({"Fn::GetAtt": [logical_id, attribute]})

    def outputs(self) -> dict[str, str]:
        return {
            name: self.resolve(spec["Value"])
            for name, spec in self.template.get("Outputs", {}).items()
            if "Condition" not in spec or self.condition(spec["Condition"])
        }

    def function_environment(self, logical_id: str) -> dict[str, str]:
        """The environment variables the function gets in AWS: Globals merged with its own."""
        if logical_id not in self.of_type(*FUNCTION_TYPES):
            raise TemplateError(f"{logical_id} is not a function (AWS::Serverless::Function or AWS::Lambda::Function) "
                                "in the template")
        serverless = self.template["Resources"][logical_id]["Type"] == "AWS::Serverless::Function"
        # SAM's Globals apply to SAM functions only.
        global_env = self.template.get("Globals", {}).get("Function", {}).get("Environment", {}) if serverless else {}
        own_env = self.properties(logical_id).get("Environment", {})
        variables = {**global_env.get("Variables", {}), **own_env.get("Variables", {})}
        return {name: str(self.resolve(value)) for name, value in variables.items()}

    def state_machine_definition(self, logical_id: str) -> str:
        """The definition text with every `${name}` DefinitionSubstitution replaced."""
        props = self.properties(logical_id)
        if "DefinitionUri" in props:
            text = (self.template_dir / props["DefinitionUri"]).read_text(encoding="utf-8")
        elif "Definition" in props:
            text = json.dumps(props["Definition"], indent=2)
        else:
            text = self.resolve(props["DefinitionString"])
        substitutions = {name: str(self.resolve(value)) for name, value in props.get("DefinitionSubstitutions", {}).items()}

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in substitutions:
                raise TemplateError(f"{logical_id}: definition uses ${{{name}}} but DefinitionSubstitutions has no {name}")
            # Substituted inside JSON strings: escape like JSON would.
            return json.dumps(substitutions[name])[1:-1]

        return re.sub(r"\$\{([A-Za-z0-9_]+)\}", substitute, text)

    # ---------------------------------------------------------------------------- intrinsics
    def condition(self, name: str) -> bool:
        conditions = self.template.get("Conditions", {})
        if name not in conditions:
            raise TemplateError(f"condition {name} is not declared")
        return bool(self.resolve(conditions[name]))

    def resolve(self, value: Any) -> Any:
        """Resolve intrinsic functions in `value` for these parameters and physical values."""
        result = self._resolve(value)
        return None if result is _NO_VALUE else result

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [item for item in (self._resolve(v) for v in value) if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, arg), = value.items()
            handler = _INTRINSICS.get(key)
            if handler is not None:
                return handler(self, arg)
        resolved = {k: self._resolve(v) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not _NO_VALUE}

    def _ref(self, name: str) -> Any:
        pseudo = {
            "AWS::StackName": self.stack_name,
            "AWS::Region": self.region,
            "AWS::AccountId": self.account_id,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackId": f"arn:aws:cloudformation:{self.region}:{self.account_id}:stack/{self.stack_name}/local",
        }
        if name == "AWS::NoValue":
            return _NO_VALUE
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            if self.template.get("Parameters", {}).get(name, {}).get("Type") == "CommaDelimitedList":
                return [part.strip() for part in self.parameters[name].split(",")]
            return self.parameters[name]
        if name in self.refs:
            return self.refs[name]
        raise TemplateError(f"Ref {name}: no such parameter or resource (or its Condition is false)")

    def _get_att(self, arg: list[str]) -> str:
        logical_id, attribute = arg
        if (logical_id, attribute) not in self.attributes:
            raise TemplateError(f"GetAtt {logical_id}.{attribute}: unknown resource or attribute")
        return self.attributes[(logical_id, attribute)]

    def _sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self._resolve(arg[1]))

        def replace(match: re.Match[str]) -> str:
            expr = match.group(1)
            if expr.startswith("!"):  # ${!Literal}
                return "${" + expr[1:] + "}"
            if expr in variables:
                return str(variables[expr])
            if "." in expr and not expr.startswith("AWS::"):
                return str(self._get_att(expr.split(".", 1)))
            return str(self._ref(expr))

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    # ----------------------------------------------------------------------- physical values
    def physical_name(self, logical_id: str) -> str:
        """Explicit name property if the template sets one, else `<stack>-<LogicalId>`."""
        spec = self.template["Resources"][logical_id]
        name_property = {
            "AWS::SQS::Queue": "QueueName",
            "AWS::DynamoDB::Table": "TableName",
            "AWS::Events::EventBus": "Name",
            "AWS::Events::Rule": "Name",
            "AWS::Serverless::StateMachine": "Name",
            "AWS::StepFunctions::StateMachine": "StateMachineName",
            "AWS::Serverless::Function": "FunctionName",
            "AWS::Lambda::Function": "FunctionName",
            "AWS::S3::Bucket": "BucketName",
        }.get(spec["Type"])
        explicit = spec.get("Properties", {}).get(name_property) if name_property else None
        return str(self.resolve(explicit)) if explicit else f"{self.stack_name}-{logical_id}"

    def _set_placeholder(self, logical_id: str) -> None:
        """Values as AWS would shape them, so resolution works before (or without) `create`."""
        kind = self.template["Resources"][logical_id]["Type"]
        name = self.physical_name(logical_id)
        region, account = self.region, self.account_id
        spec = self.template["Resources"][logical_id]
        if kind in ("AWS::Serverless::Function", *_STATE_MACHINE_TYPES) and "Role" not in spec.get("Properties", {}):
            # SAM generates `<LogicalId>Role` for a function or state machine without a Role; the
            # template may refer to it (GetAtt <LogicalId>Role.Arn).
            role = f"{self.stack_name}-{logical_id}Role"
            self.refs[f"{logical_id}Role"] = role
            self.attributes.update({(f"{logical_id}Role", "Arn"): f"arn:aws:iam::{account}:role/{role}",
                                    (f"{logical_id}Role", "RoleId"): role})
        if kind == "AWS::SQS::Queue":
            self._record_queue(logical_id, f"https://sqs.{region}.amazonaws.com/{account}/{name}", name)
        elif kind == "AWS::Events::EventBus":
            arn = f"arn:aws:events:{region}:{account}:event-bus/{name}"
            self.refs[logical_id] = name
            self.attributes.update({(logical_id, "Arn"): arn, (logical_id, "Name"): name})
        elif kind == "AWS::SNS::Topic":
            arn = f"arn:aws:sns:{region}:{account}:{name}"
            self.refs[logical_id] = arn
            self.attributes.update({(logical_id, "TopicArn"): arn, (logical_id, "TopicName"): name})
        elif kind == "AWS::S3::Bucket":
            bucket = name.lower()  # S3 names are lower case
            self.refs[logical_id] = bucket
            self.attributes.update({(logical_id, "Arn"): f"arn:aws:s3:::{bucket}", (logical_id, "DomainName"):
                                    f"{bucket}.s3.amazonaws.com"})
        elif kind in _STATE_MACHINE_TYPES:
            arn = f"arn:aws:states:{region}:{account}:stateMachine:{name}"
            self.refs[logical_id] = arn
            self.attributes.update({(logical_id, "Arn"): arn, (logical_id, "Name"): name})
        else:
            service = kind.split("::")[1].lower()
            arn = f"arn:aws:{service}:{region}:{account}:{logical_id.lower()}/{name}"
            self.refs[logical_id] = name if kind in _REF_IS_NAME else arn
            # GetAtt X.Name and X.<Type>Name (ModelName, EndpointConfigName, EndpointName, ...).
            self.attributes.update({(logical_id, "Arn"): arn, (logical_id, "Name"): name,
                                    (logical_id, kind.split("::")[-1] + "Name"): name})

    def _record_queue(self, logical_id: str, url: str, name: str) -> None:
        self.refs[logical_id] = url
        self.attributes.update(
            {
                (logical_id, "Arn"): f"arn:aws:sqs:{self.region}:{self.account_id}:{name}",
                (logical_id, "QueueName"): name,
                (logical_id, "QueueUrl"): url,
            }
        )

    # ------------------------------------------------------------------------------ creating
    def create(self, client: Callable[[str], Any] | None = None, only: Iterable[str] | None = None) -> Stack:
        """Create queues, buses, tables, state machines and rules; returns self.

        `client(service_name)` makes boto3 clients; by default `boto3.client(name, region_name=…)`,
        which honours AWS_ENDPOINT_URL (moto server) and mock_aws(). `only`: create just these
        resources (logical ids; a unit test's table or bucket), the rest stay placeholders.
        """
        client = client or self._default_client
        if only is not None:
            wanted = set(only)
            for logical_id in wanted:
                kind = self.template["Resources"][logical_id]["Type"]
                creator = {"AWS::S3::Bucket": ("s3", self._create_bucket), "AWS::DynamoDB::Table": (
                    "dynamodb", self._create_table), "AWS::SQS::Queue": ("sqs", self._create_queue)}.get(kind)
                if creator is None:
                    raise TemplateError(f"create(only=...): {logical_id} ({kind}) is created with the whole stack only")
                creator[1](client(creator[0]), logical_id)
            return self
        sqs, events, dynamodb, sfn = (client(name) for name in ("sqs", "events", "dynamodb", "stepfunctions"))
        for logical_id in self.of_type("AWS::Events::EventBus"):
            self._create_bus(events, logical_id)
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
        import boto3

        return boto3.client(service, region_name=self.region)

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


def _fn_if(stack: Stack, arg: list[Any]) -> Any:
    name, when_true, when_false = arg
    return stack._resolve(when_true if stack.condition(name) else when_false)


def _fn_select(stack: Stack, arg: list[Any]) -> Any:
    index, items = stack._resolve(arg[0]), stack._resolve(arg[1])
    return items[int(index)]


_INTRINSICS: dict[str, Callable[[Stack, Any], Any]] = {
    "Ref": lambda stack, arg: stack._ref(arg),
    "Fn::GetAtt": lambda stack, arg: stack._get_att(arg if isinstance(arg, list) else arg.split(".", 1)),
    "Fn::Sub": lambda stack, arg: stack._sub(arg),
    "Fn::Join": lambda stack, arg: str(arg[0]).join(str(v) for v in stack._resolve(arg[1])),
    "Fn::Split": lambda stack, arg: stack._resolve(arg[1]).split(arg[0]),
    "Fn::Select": _fn_select,
    "Fn::If": _fn_if,
    "Fn::Equals": lambda stack, arg: str(stack._resolve(arg[0])) == str(stack._resolve(arg[1])),
    "Fn::Not": lambda stack, arg: not stack._resolve(arg[0]),
    "Fn::And": lambda stack, arg: all(stack._resolve(a) for a in arg),
    "Fn::Or": lambda stack, arg: any(stack._resolve(a) for a in arg),
    "Condition": lambda stack, arg: stack.condition(arg),
    "Fn::FindInMap": lambda stack, arg: stack.template["Mappings"][stack._resolve(arg[0])][stack._resolve(arg[1])][
        stack._resolve(arg[2])],
}


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
