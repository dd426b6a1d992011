"""Read `template.yaml`: its short-form tags, parameters (with their constraints), conditions,
intrinsic functions (Ref, GetAtt, Sub, Join, Select, If, FindInMap...) and the physical names and
ARNs its resources would get, as placeholders shaped like AWS's.

`StackTemplate` holds the template and the physical values (`refs`, `attributes`);
`local.cloudformation.Stack` extends it with the creation, which overwrites the placeholders with
what moto returns, so the reader resolves against real values once a resource exists.
"""

from __future__ import annotations

import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

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
_Reader = TypeVar("_Reader", bound="StackTemplate")  # `Stack.load` returns a Stack

#: Function resources the local run can start: SAM's, and plain container-image functions.
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")


class TemplateError(ValueError):
    """The template uses something this reader cannot resolve; the message names where."""


# ------------------------------------------------------------------------------------------ YAML
# libyaml's parser where PyYAML was built with it (about ten times faster on the template).
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CfnLoader(_SafeLoader):
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


#: Each template parsed once per process: (path, mtime, size) -> its data, pickled. A test suite
#: loads the same template hundreds of times; an edit of the file is a new key.
_PARSED: dict[tuple[str, int, int], bytes] = {}


def load_template(path: Path | str = TEMPLATE_PATH) -> dict[str, Any]:
    """The template as plain data, short-form tags expanded (`!Ref X` -> `{"Ref": "X"}`); a fresh
    copy on every call, so a caller may change what it is given."""
    path = Path(path).resolve()
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        with open(path, encoding="utf-8") as handle:
            _PARSED[key] = pickle.dumps(yaml.load(handle, Loader=_CfnLoader))  # a SafeLoader: plain data only
    return pickle.loads(_PARSED[key])


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
class StackTemplate:
    """The template plus the physical values of its resources: placeholders as AWS would shape
    them until `Stack.create` (in `local.cloudformation`) records the real ones."""

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
        cls: type[_Reader],
        path: Path | str = TEMPLATE_PATH,
        *,
        parameters: dict[str, Any] | None = None,
        stack_name: str = DEFAULT_STACK_NAME,
        region: str = DEFAULT_REGION,
        account_id: str = DEFAULT_ACCOUNT_ID,
    ) -> _Reader:
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

    def bus_policy_writers(self, bus_logical_id: str) -> list[str]:
        """The resources that write this bus's policy: the bus itself when it sets `Policy`, and
        each AWS::Events::EventBusPolicy naming it, the latter in DependsOn order (the order
        CloudFormation writes them in)."""
        bus_name = self.ref(bus_logical_id)
        statements = [r for r in self.of_type("AWS::Events::EventBusPolicy")
                      if self.resolve(self.properties(r).get("EventBusName", "default")) == bus_name]
        after = {r: self.depends_on(r, transitively=True) for r in statements}
        ordered = sorted(statements, key=lambda r: len(after[r] & set(statements)))
        return ([bus_logical_id] if "Policy" in self.properties(bus_logical_id) else []) + ordered

    def bus_policy(self, bus_logical_id: str) -> dict[str, Any] | None:
        """The whole policy the template gives this bus (None: none): its own `Policy`, then each
        EventBusPolicy's statement (its StatementId as the Sid), in the order they are written."""
        statements: list[dict[str, Any]] = []
        for writer in self.bus_policy_writers(bus_logical_id):
            props = self.resolve(self.properties(writer))
            if writer == bus_logical_id:
                policy = props["Policy"]
                statements += (json.loads(policy) if isinstance(policy, str) else policy)["Statement"]
            else:
                statements.append({"Sid": props["StatementId"], **props["Statement"]})
        return {"Version": "2012-10-17", "Statement": statements} if statements else None

    def depends_on(self, logical_id: str, *, transitively: bool = False) -> set[str]:
        """The resources this one names in DependsOn (and theirs, transitively)."""
        found: set[str] = set()
        todo = [logical_id]
        while todo:
            spec = self.template["Resources"][todo.pop()]
            named = spec.get("DependsOn", [])
            for other in [named] if isinstance(named, str) else named:
                if other not in found:
                    found.add(other)
                    if transitively:
                        todo.append(other)
        return found

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
        elif kind == "AWS::IAM::Role":  # IAM is global: no region in the ARN (SageMaker refuses any other shape)
            self.refs[logical_id] = name
            self.attributes.update({(logical_id, "Arn"): f"arn:aws:iam::{account}:role/{name}",
                                    (logical_id, "RoleId"): name})
        elif kind in FUNCTION_TYPES:  # as Lambda shapes it (the workflow invokes one by its ARN)
            self.refs[logical_id] = name
            self.attributes.update({(logical_id, "Arn"): f"arn:aws:lambda:{region}:{account}:function:{name}"})
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


def _fn_if(stack: StackTemplate, arg: list[Any]) -> Any:
    name, when_true, when_false = arg
    return stack._resolve(when_true if stack.condition(name) else when_false)


def _fn_select(stack: StackTemplate, arg: list[Any]) -> Any:
    index, items = stack._resolve(arg[0]), stack._resolve(arg[1])
    return items[int(index)]


_INTRINSICS: dict[str, Callable[[StackTemplate, Any], Any]] = {
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
