"""Every AWS request the code builds passes botocore's own parameter validation against the
service model, so a request moto accepts but AWS would refuse fails here.

A boto3 client validates its parameters before it sends them (moto answers after that, and so
does botocore's Stubber), and no client of this project turns that off
(`test_no_client_of_ours_turns_parameter_validation_off`): whatever an adapter sends through a
client in a test is already checked. What no client checks:

- the Step Functions Task states' requests. moto's interpreter re-cases the parameter names to
  the API's, turns any JSON into a string where the API wants one, and sends them through
  clients made with `parameter_validation=False`. Checked here from the ASL, every
  Task state of statemachine/*.asl.json, with typed placeholders for the values computed at run
  time (JSONPath, intrinsic functions, JSONata); the request parts that Pass states build are
  checked too; and, in the stack tier, every request moto's interpreter sends while the routing
  workflow runs its routes;
- request dicts that a test sends to a fake instead of a client: SageMakerScoring.job_request
  (a GPU job is never created in a test) and the Lambda invocations that the tests of
  ops.redrive and ops.review_cli replace.

Besides botocore's checks (members, required members, types, nesting, minimum lengths and
values), the literal values are checked against the model's enums, maximums and patterns, which
AWS enforces and botocore does not. A `${Name}` substitution stays a string here; template.yaml's
own properties are cfn-lint's (test_template_lint.py).
"""

from __future__ import annotations

import ast
import copy
import io
import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import boto3
import botocore.session
import pytest
from botocore.config import Config
from botocore.model import OperationModel, Shape
from botocore.response import StreamingBody
from botocore.stub import Stubber
from botocore.validate import ParamValidator

ROOT = Path(__file__).resolve().parents[2]
DEFINITIONS = sorted((ROOT / "statemachine").glob("*.asl.json"))
#: The code whose boto3 clients must keep botocore's parameter validation on.
CLIENT_CODE = ("functions", "ops", "relearning", "training", "local")

_BOTOCORE = botocore.session.get_session()


@lru_cache(maxsize=None)
def operation_model(service: str, operation: str) -> OperationModel:
    return _BOTOCORE.get_service_model(service).operation_model(operation)


@lru_cache(maxsize=None)
def service_names() -> frozenset[str]:
    return frozenset(_BOTOCORE.get_available_services())


# ------------------------------------------------------------------------------ Task resources
#: Optimized integrations (`arn:aws:states:::<service>:<action>`): their parameters are the API's.
OPTIMIZED = {
    "dynamodb:getItem": ("dynamodb", "GetItem"), "dynamodb:putItem": ("dynamodb", "PutItem"),
    "dynamodb:updateItem": ("dynamodb", "UpdateItem"), "dynamodb:deleteItem": ("dynamodb", "DeleteItem"),
    "sqs:sendMessage": ("sqs", "SendMessage"),
    "sns:publish": ("sns", "Publish"),
    "events:putEvents": ("events", "PutEvents"),
    "lambda:invoke": ("lambda", "Invoke"),
    "states:startExecution": ("stepfunctions", "StartExecution"),
}
#: What an optimized integration takes as any JSON and serializes itself (the API wants a string).
SERIALIZED = {
    ("sqs", "SendMessage"): {("MessageBody",)},
    ("sns", "Publish"): {("Message",)},
    ("events", "PutEvents"): {("Entries", "*", "Detail")},
    ("stepfunctions", "StartExecution"): {("Input",)},
    ("lambda", "Invoke"): {("Payload",)},  # free-form: the function's event
}
#: `aws-sdk:<service>:<action>` names the SDK's service; where it differs from botocore's.
SDK_SERVICES = {
    "sfn": "stepfunctions", "eventbridge": "events", "cloudwatchlogs": "logs", "cloudwatchevents": "events",
    "cognitoidentityprovider": "cognito-idp", "elasticloadbalancingv2": "elbv2", "elasticloadbalancing": "elb",
    "sagemakerruntime": "sagemaker-runtime", "acmpca": "acm-pca",
}
_INTEGRATION = re.compile(r"^arn:aws[a-z-]*:states:::(?P<name>[^.]+)(?P<pattern>\.sync(:2)?|\.waitForTaskToken)?$")
#: A Task that invokes a Lambda function or waits on an activity by ARN: its input is no SDK request.
_NOT_SDK = re.compile(r"^arn:aws[a-z-]*:(lambda:[^:]+:\d{12}:function:|states:[^:]+:\d{12}:activity:)")


class UnknownIntegration(ValueError):
    pass


def operation_of(resource: str) -> tuple[str, str, bool] | None:
    """(botocore service, operation, optimized) of a Task's Resource; None: not an SDK request;
    UnknownIntegration: neither an integration this check knows nor a function or activity."""
    if _NOT_SDK.match(resource):
        return None
    match = _INTEGRATION.match(resource)
    if not match:
        raise UnknownIntegration(f"Resource {resource!r} is not a Step Functions service integration this check knows")
    name = match["name"]
    if name.startswith("aws-sdk:"):
        _, sdk_service, action = (name.split(":") + [""])[:3]
        service = SDK_SERVICES.get(sdk_service, sdk_service)
        if service not in service_names():
            raise UnknownIntegration(f"aws-sdk service {sdk_service!r} is no botocore service (add it to SDK_SERVICES "
                                     "if the SDK's name differs from botocore's)")
        operation = action[:1].upper() + action[1:]
        if operation not in _BOTOCORE.get_service_model(service).operation_names:
            raise UnknownIntegration(f"aws-sdk action {action!r} is no operation of {service}")
        return service, operation, False
    if name not in OPTIMIZED:
        raise UnknownIntegration(f"optimized integration {name!r} is not one this check maps to an API "
                                 f"(known: {', '.join(sorted(OPTIMIZED))})")
    return (*OPTIMIZED[name], True)


# ------------------------------------------------------------------------------ computed values
#: What the intrinsic functions return; None: whatever the JSON holds.
INTRINSICS = {
    "States.Format": "string", "States.JsonToString": "string", "States.UUID": "string", "States.Hash": "string",
    "States.Base64Encode": "string", "States.Base64Decode": "string", "States.StringToJson": None,
    "States.Array": "list", "States.ArrayPartition": "list", "States.ArrayRange": "list", "States.ArrayUnique": "list",
    "States.StringSplit": "list", "States.ArrayContains": "boolean", "States.ArrayLength": "integer",
    "States.MathAdd": "integer", "States.MathRandom": "integer", "States.ArrayGetItem": None, "States.JsonMerge": "object",
}
#: The context object's fields whose type is known.
CONTEXT = {
    "$$.Execution.Id": "string", "$$.Execution.Name": "string", "$$.Execution.StartTime": "string",
    "$$.Execution.RoleArn": "string", "$$.Execution.RedriveCount": "integer", "$$.Execution.Input": "object",
    "$$.State.EnteredTime": "string", "$$.State.Name": "string", "$$.State.RetryCount": "integer",
    "$$.StateMachine.Id": "string", "$$.StateMachine.Name": "string", "$$.Task.Token": "string",
    "$$.Map.Item.Index": "integer",
}
_FITS = {"string": {"string", "blob", "timestamp"}, "integer": {"integer", "long", "float", "double"},
         "boolean": {"boolean"}, "list": {"list"}, "object": {"structure", "map"}}
_SAMPLE = {"string": "computed", "integer": 0, "boolean": True, "list": [], "object": {}}


def result_type(expression: str) -> str | None:
    """The JSON type a JSONPath or intrinsic expression yields, where the ASL alone tells."""
    if expression in CONTEXT:
        return CONTEXT[expression]
    function = re.match(r"^(States\.\w+)\(", expression)
    return INTRINSICS.get(function[1]) if function else None


def placeholder(shape: Shape, depth: int = 0) -> Any:
    """A value of `shape`'s type that botocore accepts: stands for a value computed at run time."""
    kind = shape.type_name
    if kind == "structure":
        if shape.is_document_type or depth > 20:
            return {}
        if shape.is_tagged_union:
            first = next(iter(shape.members))
            return {first: placeholder(shape.members[first], depth + 1)}
        return {name: placeholder(shape.members[name], depth + 1) for name in shape.required_members}
    if kind == "list":
        return [placeholder(shape.member, depth + 1) for _ in range(shape.metadata.get("min", 0))]
    if kind == "map":
        return {}
    if kind == "string":
        return shape.enum[0] if shape.enum else "x" * max(1, shape.metadata.get("min", 1))
    if kind in ("integer", "long"):
        return int(shape.metadata.get("min", 0))
    if kind in ("float", "double"):
        return float(shape.metadata.get("min", 0))
    if kind == "boolean":
        return True
    if kind == "blob":
        return b"x" * max(1, shape.metadata.get("min", 1))
    if kind == "timestamp":
        return datetime.now(timezone.utc)
    raise AssertionError(f"no placeholder for a {kind} shape")


def computed(expression: Any, shape: Shape) -> Any:
    """What stands for `expression`'s value: a placeholder of the shape's type, or, where the
    expression's own type is known and does not fit, a value of that type (botocore reports it)."""
    kind = result_type(expression) if isinstance(expression, str) else None
    if kind is not None and shape.type_name not in _FITS[kind]:
        return copy.deepcopy(_SAMPLE[kind])
    return placeholder(shape)


# ------------------------------------------------------------------------------ a request
@dataclass
class Request:
    """An ASL Parameters/Arguments object (or a plain dict) made concrete for botocore: computed
    values replaced by placeholders; with the literals' problems against the model's constraints."""

    asl: bool = False  # keys ending in `.$` are computed (JSONPath)
    jsonata: bool = False  # string values "{% ... %}" are computed (JSONata)
    serialized: set[tuple[str, ...]] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def concrete(self, value: Any, shape: Shape | None, path: tuple[str, ...] = ()) -> Any:
        if shape is None:  # not a member: botocore names it
            return value
        if path in self.serialized:
            text = value if isinstance(value, str) else json.dumps(value)
            return text.encode() if shape.type_name == "blob" else text
        if self.jsonata and isinstance(value, str) and value.strip().startswith("{%"):
            return placeholder(shape)
        kind = shape.type_name
        if kind == "structure" and shape.is_document_type:
            return value
        if kind in ("structure", "map") and isinstance(value, dict):
            members = shape.members if kind == "structure" else None
            out = {}
            for key, item in value.items():
                name = key[:-2] if self.asl and key.endswith(".$") else key
                if members is None:
                    self._check_literal(name, shape.key, path + (name,))
                member = members.get(name) if members is not None else shape.value
                if name != key:
                    if not isinstance(item, str):
                        self.problems.append(f"{_dotted(path + (key,))}: a `.$` value must be a path or an intrinsic")
                    out[name] = item if member is None else computed(item, member)
                else:
                    out[name] = self.concrete(item, member, path + (name,))
            if kind == "map":
                self._check_size(len(out), shape, path)
            return out
        if kind == "list" and isinstance(value, list):
            self._check_size(len(value), shape, path)
            return [self.concrete(item, shape.member, path + ("*",)) for item in value]
        self._check_literal(value, shape, path)
        return value

    def _check_size(self, size: int, shape: Shape, path: tuple[str, ...]) -> None:
        if "max" in shape.metadata and size > shape.metadata["max"]:
            self.problems.append(f"{_dotted(path)}: {size} entries, at most {shape.metadata['max']}")

    def _check_literal(self, value: Any, shape: Shape, path: tuple[str, ...]) -> None:
        """What AWS checks of a value and botocore does not: enum, maximum, pattern."""
        where = _dotted(path)
        if isinstance(value, str) and shape.type_name == "string":
            if "${" in value:  # a DefinitionSubstitution: its value is the template's
                return
            if shape.enum and value not in shape.enum:
                self.problems.append(f"{where}: {value!r} is not one of {shape.enum}")
            if "max" in shape.metadata and len(value) > shape.metadata["max"]:
                self.problems.append(f"{where}: {len(value)} characters, at most {shape.metadata['max']}")
            pattern = _pattern(shape.metadata.get("pattern"))
            if pattern is not None and not pattern.fullmatch(value):
                self.problems.append(f"{where}: {value!r} does not match {pattern.pattern!r}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and shape.type_name in _FITS["integer"]:
            if "max" in shape.metadata and value > shape.metadata["max"]:
                self.problems.append(f"{where}: {value} is more than {shape.metadata['max']}")


@lru_cache(maxsize=None)
def _pattern(pattern: str | None) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error:  # a Java-only construct (\p{L}, surrogate ranges): not checked here
        return None


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path) or "(the request)"


def request_problems(service: str, operation: str, params: Any, request: Request | None = None) -> list[str]:
    """botocore's validation report and the constraint problems of `params` as `operation`'s input."""
    request = request or Request()
    shape = operation_model(service, operation).input_shape
    if not isinstance(params, dict):
        return [f"the request is a {type(params).__name__}, not an object"]
    concrete = request.concrete(params, shape)
    report = ParamValidator().validate(concrete, shape)
    return ([report.generate_report()] if report.has_errors() else []) + request.problems


# ------------------------------------------------------------------------------ the ASL
def states_of(definition: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(path, state, the States block holding it) for every state, branches and Map iterators included."""
    block = definition.get("States", {})
    for name, state in block.items():
        yield prefix + name, state, block
        for branch in state.get("Branches", []):
            yield from states_of(branch, f"{prefix}{name}/")
        for key in ("Iterator", "ItemProcessor"):
            if key in state:
                yield from states_of(state[key], f"{prefix}{name}/")


def task_problems(name: str, state: dict[str, Any], language: str) -> tuple[str | None, list[str]]:
    """The operation a Task state calls and its request's problems, each naming the state."""
    language = state.get("QueryLanguage", language)
    try:
        found = operation_of(state.get("Resource", ""))
    except UnknownIntegration as error:
        return None, [f"{name}: {error}"]
    if found is None:
        return None, []
    service, operation, optimized = found
    problems = []
    key, other = ("Arguments", "Parameters") if language == "JSONata" else ("Parameters", "Arguments")
    if other in state:
        problems.append(f"{other} in a {language} state: Step Functions reads {key}")
    params = state.get(key, {})
    if isinstance(params, str):
        problems.append(f"{key} is one expression: write it as an object so its request can be checked")
        params = {}
    request = Request(asl=language != "JSONata", jsonata=language == "JSONata",
                      serialized=SERIALIZED.get((service, operation), set()) if optimized else set())
    problems += request_problems(service, operation, params, request)
    problems += credentials_problems(state.get("Credentials"), language)
    label = f"{service}.{operation}"
    return label, [f"{name}: {label}: {problem}" for problem in problems]


def credentials_problems(credentials: Any, language: str) -> list[str]:
    """A Task's Credentials: the role Step Functions assumes for the call, `RoleArn` (or `RoleArn.$`)."""
    if credentials is None:
        return []
    keys = {"RoleArn"} if language == "JSONata" else {"RoleArn", "RoleArn.$"}
    if not isinstance(credentials, dict) or len(credentials) != 1 or set(credentials) - keys:
        return [f"Credentials must be one of {sorted(keys)}, not {credentials!r}"]
    (key, value), = credentials.items()
    literal = key == "RoleArn" and isinstance(value, str) and "${" not in value and not value.startswith("{%")
    if literal and not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+", value):
        return [f"Credentials.RoleArn {value!r} is not an IAM role ARN"]
    return []


def fragment_problems(block: dict[str, Any], task: str, service: str, operation: str) -> tuple[int, list[str]]:
    """A request member taken whole from the state input (`Item.$: "$.item"`) is built by the Pass
    states before the Task: each Pass state of the same block that writes that path (or a part of
    it) is checked as that member (or part). Returns how many were checked and their problems."""
    state = block[task]
    input_shape = operation_model(service, operation).input_shape
    checked, problems = 0, []
    for key, expression in state.get("Parameters", {}).items():
        member = input_shape.members.get(key[:-2]) if key.endswith(".$") else None
        if member is None or not isinstance(expression, str) or not re.fullmatch(r"\$(\.\w+)+", expression):
            continue
        target = tuple(expression.split(".")[1:])
        for name, other in block.items():
            result_path = other.get("ResultPath", "$")
            if other.get("Type") != "Pass" or not ("Parameters" in other or "Result" in other) or result_path is None:
                continue  # (ResultPath null: the Pass writes nothing)
            written = tuple(result_path.split(".")[1:])
            value, asl = (other["Parameters"], True) if "Parameters" in other else (other["Result"], False)
            if written[:len(target)] == target:  # the Pass writes the member or a part of it
                shape = _descend(member, written[len(target):])
            elif target[:len(written)] == written:  # the Pass writes what holds the member
                value = _lookup(value, target[len(written):])
                shape = member
            else:
                continue
            if shape is None or value is _MISSING:
                continue
            request = Request(asl=asl)
            concrete = request.concrete(value, shape, (key[:-2], *written[len(target):]))
            report = ParamValidator().validate(concrete, shape)
            found = ([report.generate_report()] if report.has_errors() else []) + request.problems
            part = _dotted((key[:-2], *written[len(target):]))
            problems += [f"{name} (builds {task}'s {part}): {service}.{operation}: {p}" for p in found]
            checked += 1
    return checked, problems


_MISSING = object()


def _descend(shape: Shape, path: tuple[str, ...]) -> Shape | None:
    for part in path:
        if shape.type_name == "structure":
            shape = shape.members.get(part)
        elif shape.type_name == "map":
            shape = shape.value
        else:
            return None
        if shape is None:
            return None
    return shape


def _lookup(value: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return _MISSING  # absent, or computed (`part.$`): nothing literal to check
        value = value[part]
    return value


def definition_problems(definition: dict[str, Any]) -> tuple[dict[str, str], int, list[str]]:
    """Every Task state's operation (state path -> service.Operation), how many Pass-built request
    parts were checked, and every problem."""
    language = definition.get("QueryLanguage", "JSONPath")
    operations, fragments, problems = {}, 0, []
    for name, state, block in states_of(definition):
        for key in ("ItemReader", "ResultWriter"):
            if key in state:
                problems.append(f"{name}: {key}: a Map's S3 requests are not checked here yet: extend this check")
        if state.get("Type") != "Task":
            continue
        label, found = task_problems(name, state, language)
        problems += found
        if label is not None:
            operations[name] = label
            if state.get("QueryLanguage", language) != "JSONata":
                checked, more = fragment_problems(block, name.rsplit("/", 1)[-1], *label.split("."))
                fragments += checked
                problems += more
    return operations, fragments, problems


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


# ------------------------------------------------------------------------------ (a) the ASL
def test_both_workflows_are_checked():
    assert {p.name for p in DEFINITIONS} >= {"routing.asl.json", "relearning.asl.json"}


@pytest.mark.parametrize("path", DEFINITIONS, ids=lambda p: p.name)
def test_every_task_states_request_passes_botocores_validation(path):
    """moto's interpreter sends these requests with validation off: checked here instead, with a
    typed placeholder for every value the state computes."""
    definition = load(path)
    operations, _, problems = definition_problems(definition)

    assert not problems, f"{path.name}: requests AWS would refuse:\n" + "\n\n".join(problems)
    tasks = {name for name, state, _ in states_of(definition)
             if state.get("Type") == "Task" and not _NOT_SDK.match(state.get("Resource", ""))}
    assert tasks and set(operations) == tasks, "every Task state that calls an AWS API is checked"


def test_the_audit_row_the_pass_states_build_is_a_dynamodb_item():
    """PutAuditRecord writes `Item.$: $.item`, which three Pass states build: the row, its link
    index key and its expiry, each an AttributeValue map that moto would store as it is."""
    definition = load(ROOT / "statemachine" / "routing.asl.json")
    _, fragments, problems = definition_problems(definition)

    assert not problems
    assert fragments >= 3


def test_placeholders_keep_the_requests_shape_checked():
    """A computed value stands in with its shape's type: names, nesting and required members are
    still botocore's to judge, and an intrinsic's known type must fit its member."""
    sent = {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem", "Parameters": {
        "TableName": "${Table}", "Item": {"id": {"S.$": "$.id"}, "n": {"N.$": "States.Format('{}', $.n)"}},
        "ConditionExpression": "attribute_not_exists(id)"}}
    assert task_problems("Put", sent, "JSONPath") == ("dynamodb.PutItem", [])

    counted = copy.deepcopy(sent)
    counted["Parameters"]["Item"]["n"] = {"N.$": "States.ArrayLength($.list)"}  # an integer where a string goes
    _, problems = task_problems("Put", counted, "JSONPath")
    assert len(problems) == 1 and "Invalid type for parameter Item.n.N" in problems[0]


@pytest.mark.parametrize(("parameters", "message"), [
    ({"QueueURL": "${Queue}", "MessageBody": {"a.$": "$.a"}}, 'Unknown parameter in input: "QueueURL", must be one of'),
    ({"QueueUrl.$": "$.queue"}, 'Missing required parameter in input: "MessageBody"'),
    ({"QueueUrl": "${Queue}", "MessageBody": "x", "DelaySeconds": "10"}, "Invalid type for parameter DelaySeconds"),
    ({"QueueUrl": "${Queue}", "MessageBody": "x", "MessageAttributes": {"kind": {"StringValue": "ticket"}}},
     'Missing required parameter in MessageAttributes.kind: "DataType"'),
    ({"QueueUrl": "${Queue}", "MessageBody": "x", "MessageAttributes": {"kind": {
        "DataType": "String", "StringValue.$": "$.kind", "Value": "ticket"}}},
     'Unknown parameter in MessageAttributes.kind: "Value"'),
])
def test_a_misspelled_missing_or_mistyped_member_is_reported_with_the_state_and_operation(parameters, message):
    task = {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage", "Parameters": parameters, "End": True}
    _, _, problems = definition_problems({"StartAt": "Send", "States": {"Send": task}})

    assert len(problems) == 1
    assert problems[0].startswith("Send: sqs.SendMessage: ") and message in problems[0]


def test_a_bad_request_in_a_parallel_branch_and_a_pass_built_part_are_reported():
    item = {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:putItem",
            "Parameters": {"TableName": "audit-table", "Item.$": "$.row", "ReturnValues": "EVERYTHING"}, "End": True}
    build = {"Type": "Pass", "Parameters": {"row": {"id": {"String.$": "$.id"}}}, "Next": "Put"}
    definition = {"StartAt": "Both", "States": {"Both": {"Type": "Parallel", "End": True, "Branches": [
        {"StartAt": "Build", "States": {"Build": build, "Put": item}}]}}}

    _, _, problems = definition_problems(definition)

    assert any(p.startswith("Both/Put: dynamodb.PutItem:") and "'EVERYTHING' is not one of" in p for p in problems)
    assert any(p.startswith("Build (builds Put's Item): dynamodb.PutItem:") and 'Unknown parameter in id: "String"' in p
               for p in problems)


@pytest.mark.parametrize(("resource", "message"), [
    ("arn:aws:states:::aws-sdk:nosuchservice:doThing", "aws-sdk service 'nosuchservice' is no botocore service"),
    ("arn:aws:states:::aws-sdk:sqs:sendMesage", "aws-sdk action 'sendMesage' is no operation of sqs"),
    ("arn:aws:states:::sqs:sendMesage.waitForTaskToken", "optimized integration 'sqs:sendMesage' is not one"),
    ("${SomeFunctionArn}", "is not a Step Functions service integration this check knows"),
])
def test_an_unknown_service_or_operation_fails_with_the_state_name(resource, message):
    task = {"Type": "Task", "Resource": resource, "Parameters": {}, "End": True}
    _, _, problems = definition_problems({"StartAt": "Call", "States": {"Call": task}})

    assert len(problems) == 1 and problems[0].startswith("Call: ") and message in problems[0]


def test_sdk_integrations_map_to_botocore_names_and_take_no_serialized_json():
    """aws-sdk actions are the API's in camelCase, on the SDK's service names. Only the optimized
    integrations' documented JSON fields are taken as serialized by Step Functions: an aws-sdk
    request is checked as the API's (a Detail is a string there: States.JsonToString)."""
    assert operation_of("arn:aws:states:::aws-sdk:sfn:startExecution.sync:2") == ("stepfunctions", "StartExecution", False)
    assert operation_of("arn:aws:states:::aws-sdk:eventbridge:putEvents") == ("events", "PutEvents", False)
    assert operation_of("arn:aws:states:::aws-sdk:s3:listObjectsV2") == ("s3", "ListObjectsV2", False)
    assert operation_of("arn:aws:states:::states:startExecution.sync") == ("stepfunctions", "StartExecution", True)
    assert operation_of("arn:aws:lambda:us-east-1:123456789012:function:f") is None
    entries = {"Entries": [{"Source": "s", "DetailType": "d", "Detail": {"a.$": "$.a"}}]}
    optimized = {"Type": "Task", "Resource": "arn:aws:states:::events:putEvents", "Parameters": entries}
    sdk = dict(optimized, Resource="arn:aws:states:::aws-sdk:eventbridge:putEvents")

    assert task_problems("Put", optimized, "JSONPath") == ("events.PutEvents", [])
    assert "Invalid type for parameter Entries[0].Detail" in task_problems("Put", sdk, "JSONPath")[1][0]


def test_lambda_invoke_payloads_are_free_form_and_jsonata_arguments_are_checked():
    invoke = {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
              "Parameters": {"FunctionName": "${Fn}", "Payload": {"anything.$": "$", "nested": [1, {"x": None}]}}}
    assert task_problems("Invoke", invoke, "JSONPath") == ("lambda.Invoke", [])

    jsonata = {"Type": "Task", "Resource": "arn:aws:states:::sns:publish", "QueryLanguage": "JSONata",
               "Arguments": {"TopicArn": "{% $topic %}", "Message": {"a": "{% $states.input.a %}"}, "Subjekt": "x"},
               "Credentials": {"RoleArn": "{% $role %}"}}
    _, problems = task_problems("Publish", jsonata, "JSONPath")
    assert len(problems) == 1 and 'Unknown parameter in input: "Subjekt"' in problems[0]


def test_credentials_name_a_role():
    assert credentials_problems({"RoleArn": "arn:aws:iam::123456789012:role/caller"}, "JSONPath") == []
    assert credentials_problems({"RoleArn.$": "$.role"}, "JSONPath") == []
    assert credentials_problems({"Role": "x"}, "JSONPath")
    assert credentials_problems({"RoleArn": "arn:aws:iam::123456789012:user/me"}, "JSONPath")


# ------------------------------------------------------------------------------ (b) dict-built requests
def session() -> boto3.session.Session:
    """A session whose clients are made and never used: no moto, no network."""
    return boto3.session.Session(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.mark.parametrize(("instance_type", "instances", "items", "compute"), [
    ("ml.c7i.xlarge", 1, 1, "CPU"),
    ("ml.m7i.8xlarge", 100, 300_000, "CPU"),
    ("ml.c7i.large", 1, 10_000_000, "CPU"),  # the longest run the estimate can ask for
    ("ml.g5.xlarge", 2, 30_000, "GPU"),  # throughput unmeasured: the GPU limit
])
def test_the_processing_job_request_is_one_sagemaker_accepts(instance_type, instances, items, compute):
    """job_request builds CreateProcessingJob as a dict; moto stores whatever it gets, and its
    enums (S3DataDistributionType, S3UploadMode, ...), patterns and limits are AWS's alone to
    enforce. The stack is template.yaml's outputs, as the scorer's own tests deploy it."""
    from local.cloudformation import Stack
    from training.sagemaker_scoring import SageMakerScoring, ScoringStack, job_name

    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/decision-router@sha256:" + "a" * 64
    template = Stack.load(parameters={"DecisionImageUri": image, "ModelDataUrl": "s3://models/smollm2/model.tar.gz",
                                      "EndpointCompute": compute}, stack_name="decision-router")
    stack = ScoringStack.from_outputs(template.stack_name, template.outputs())
    scoring = SageMakerScoring(stack, instances=instances, instance_type=instance_type, say=lambda line: None,
                               session=session())

    request = scoring.job_request(job_name(stack.name), items)

    assert request_problems("sagemaker", "CreateProcessingJob", request) == []


def test_the_lambda_invocations_the_tests_replace_are_valid_requests():
    """ops.redrive's asynchronous invoke and ops.review_cli's synchronous one run on fakes in their
    tests: here on a real Lambda client (which validates) over botocore's Stubber."""
    from decision_router.adapters.functions import AsyncFunction, SyncFunction

    client = session().client("lambda")
    sent: list[dict[str, Any]] = []
    client.meta.events.register("before-parameter-build.lambda.Invoke", lambda params, **_: sent.append(dict(params)))
    with Stubber(client) as stubber:
        stubber.add_response("invoke", {"StatusCode": 202})
        stubber.add_response("invoke", {"StatusCode": 200, "Payload": _body(b'{"ok": true}')})
        AsyncFunction("decision-router-IncidentIntakeFunction", client=client).invoke({"detail-type": "x"})
        assert SyncFunction("decision-router-ReviewCompletionFunction", client=client).invoke({"a": 1}) == {"ok": True}
        stubber.assert_no_pending_responses()

    assert [request["InvocationType"] for request in sent] == ["Event", "RequestResponse"]
    assert [problem for request in sent for problem in request_problems("lambda", "Invoke", request)] == []


def _body(data: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(data), len(data))


def test_a_constraint_botocore_leaves_to_aws_is_reported():
    request = {"ProcessingJobName": "bad_name", "RoleArn": "arn:aws:iam::123456789012:role/r",
               "AppSpecification": {"ImageUri": "image"},
               "ProcessingResources": {"ClusterConfig": {"InstanceCount": 101, "InstanceType": "ml.c7i.xlarge",
                                                         "VolumeSizeInGB": 30}},
               "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
               "ProcessingOutputConfig": {"Outputs": [{"OutputName": "o", "S3Output": {
                   "S3Uri": "s3://b/k", "LocalPath": "/opt/ml/processing/output", "S3UploadMode": "Continous"}}]}}

    problems = request_problems("sagemaker", "CreateProcessingJob", request)

    assert len(problems) == 3
    assert any(p.startswith("ProcessingJobName: 'bad_name' does not match") for p in problems)
    assert any(p.startswith("ProcessingOutputConfig.Outputs.*.S3Output.S3UploadMode: 'Continous' is not one of")
               for p in problems)
    assert "ProcessingResources.ClusterConfig.InstanceCount: 101 is more than 100" in problems


# ------------------------------------------------------------------------------ validation stays on
def _turned_off(tree: ast.AST) -> Iterator[ast.AST]:
    """Nodes that may turn parameter validation off: a `parameter_validation=` that is not a
    literal True, or the name as a string (a Config dict, set_config_variable, an AWS config file)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "parameter_validation":
            if not (isinstance(node.value, ast.Constant) and node.value.value is True):
                yield node.value
        elif isinstance(node, ast.Constant) and node.value == "parameter_validation":
            yield node


def test_no_client_of_ours_turns_parameter_validation_off():
    """Every request through a client of ours is then validated by botocore in the tests that make it."""
    found = [f"{path.relative_to(ROOT)}:{node.lineno}" for top in CLIENT_CODE for path in sorted((ROOT / top).rglob("*.py"))
             for node in _turned_off(ast.parse(path.read_text(), str(path)))]
    assert found == [], "parameter validation turned off (or configured by name) at: " + ", ".join(found)
    assert list(_turned_off(ast.parse("Config(parameter_validation=False)")))
    assert list(_turned_off(ast.parse("Config(**{'parameter_validation': False})")))
    assert not list(_turned_off(ast.parse("Config(parameter_validation=True)")))


# ------------------------------------------------------------------------------ at run time (stack)
@pytest.fixture
def sent_by_moto_workflows() -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    """Every request a client made from here on sends, validated by botocore as a client with
    validation on would (moto's interpreter makes its clients as the test runs, with it off)."""
    requests: list[tuple[str, str, dict[str, Any]]] = []

    def validate(params: dict[str, Any], model: OperationModel, **_: Any) -> None:
        requests.append((model.service_model.service_name, model.name, copy.deepcopy(params)))

    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    events = boto3.DEFAULT_SESSION.events
    events.register_last("before-parameter-build", validate, unique_id="test-sdk-requests")
    try:
        yield requests
    finally:
        events.unregister("before-parameter-build", unique_id="test-sdk-requests")


def test_the_run_time_check_sees_what_a_client_with_validation_off_sends(sent_by_moto_workflows):
    """As moto's interpreter makes its clients: the request is seen, and what AWS would refuse is reported."""
    client = boto3.client("sqs", region_name="us-east-1", config=Config(parameter_validation=False))
    with Stubber(client) as stubber:
        stubber.add_response("send_message", {"MessageId": "1"})
        client.send_message(QueueUrl="https://sqs.us-east-1.amazonaws.com/123456789012/q", MessageBody={"a": 1},
                            DelaySeconds="10")

    ((service, operation, params),) = sent_by_moto_workflows
    problems = request_problems(service, operation, params)
    assert len(problems) == 1
    assert "Invalid type for parameter MessageBody" in problems[0] and "Invalid type for parameter DelaySeconds" in problems[0]


@pytest.mark.stack
def test_the_routing_workflows_requests_are_valid_as_moto_sends_them(pipeline, sent_by_moto_workflows):
    """The same requests with the values the routes really compute: auto, escalated on the way,
    escalated before a review that is answered, an overdue review and an unknown route."""
    env = pipeline.env
    auto = pipeline.record("incident", "INC-1", route="auto", escalate=True, answers={"priority": "P1", "team": "data"})
    reviewed = pipeline.record("incident", "INC-2", route="review", escalate=True,
                               answers={"priority": "P1", "team": "data"})
    overdue = pipeline.record("ticket", "T-3", route="review", answers={"queue": "sales"}, timeout_seconds=1)
    unknown = dict(pipeline.record("ticket", "T-4", route="auto", answers={"queue": "billing"}), route="later")
    arns = [pipeline.start(record) for record in (auto, reviewed, overdue, unknown)]
    review = review_request(pipeline, "INC-2")
    output = pipeline.reviewer_output(reviewed, {"priority": "P1", "team": "security"}, execution_name=review["execution_name"])
    pipeline.sfn.send_task_success(taskToken=review["task_token"], output=output)
    statuses = [pipeline.wait(arn, timeout=60)["status"] for arn in arns]

    problems = [f"{service}.{operation}: {problem}" for service, operation, params in sent_by_moto_workflows
                for problem in request_problems(service, operation, params)]
    assert problems == []
    assert statuses == ["SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "FAILED"]
    sent = {(operation, params.get("QueueUrl") or params.get("TableName")
             or params.get("Entries", [{}])[0].get("DetailType")) for _, operation, params in sent_by_moto_workflows}
    destinations = {("SendMessage", url) for url in pipeline.destinations.values()}
    assert sent >= {
        ("Invoke", None), ("DeleteItem", env["PENDING_REVIEWS_TABLE_NAME"]),
        ("SendMessage", pipeline.stack.ref("EscalationQueue")),
        ("SendMessage", pipeline.stack.ref("WorkflowDeadLetterQueue")),
        ("PutItem", env["AUDIT_TABLE_NAME"]), ("PutItem", env["LABELLED_EXAMPLES_TABLE_NAME"]),
        ("PutEvents", "Item Escalated"), ("PutEvents", "Review Overdue"), ("PutEvents", "Item Routed"),
    }
    assert sent & destinations


def review_request(pipeline, item_id: str, timeout: float = 20) -> dict[str, Any]:
    """The pending-review index's row about `item_id`, as the workflow's index writer put it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for request in pipeline.review_requests(wait_seconds=1):
            if request["record"]["item_id"] == item_id:
                return request
        time.sleep(0.1)
    raise AssertionError(f"no review request for {item_id} after {timeout} s")
