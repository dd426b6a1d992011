"""What `sam deploy` would deploy: the template, samconfig.toml's environment and the overrides (`ops.preflight`).

Also what the checks read from the template: the endpoint's instance types, the topics that page a
person, and whether CloudFormation would accept a parameter's value."""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ops.command import CommandError

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "template.yaml"
SAMCONFIG = REPO / "samconfig.toml"

#: samconfig.toml's placeholders: REPLACE_WITH_…, REPLACE-WITH-….
PLACEHOLDER = re.compile(r"REPLACE[_-]WITH", re.IGNORECASE)
#: SNS subscription protocols that reach a person (or a paging service).
HUMAN_PROTOCOLS = {"email", "email-json", "http", "https", "sms"}


class PreflightError(CommandError):
    """The command line, samconfig.toml or the template cannot be read; the message says which."""


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    """The template with its short-form tags in their long form (cfn-lint's own reader)."""
    from cfnlint.decode import decode_str  # type: ignore[import-untyped]

    try:
        template, problems = decode_str(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise PreflightError(f"The template {path} cannot be read ({error}).") from error
    if problems:
        raise PreflightError(f"The template {path} cannot be read ({problems[0].message}).")
    if not isinstance(template, dict) or not isinstance(template.get("Parameters"), dict):
        raise PreflightError(f"The template {path} has no Parameters section.")
    return template


def parse_overrides(value: str | Iterable[str], origin: str) -> dict[str, str]:
    """`Key=Value Key2="a b"` (or a list of those, or SAM's ParameterKey=K,ParameterValue=V) -> {Key: Value}."""
    texts = [value] if isinstance(value, str) else list(value)
    parameters: dict[str, str] = {}
    for text in texts:
        try:
            tokens = shlex.split(text)
        except ValueError as error:
            raise PreflightError(f"{origin}: {text!r} cannot be split into Key=Value pairs ({error}).") from error
        for token in tokens:
            long_form = re.fullmatch(r"ParameterKey=([^,]+),ParameterValue=(.*)", token)
            if long_form:
                parameters[long_form[1]] = long_form[2]
                continue
            key, sep, val = token.partition("=")
            if not sep or not key:
                raise PreflightError(f"{origin}: {token!r} is not Key=Value (e.g. EndpointCompute=GPU).")
            parameters[key] = val
    return parameters


@dataclass
class SamConfig:
    parameters: dict[str, str]
    stack: str | None
    region: str | None
    profile: str | None
    origin: str  # e.g. samconfig.toml [default]


def read_samconfig(path: Path, env: str, *, required: bool) -> SamConfig | None:
    """What `sam deploy --config-env ENV` reads from PATH: [ENV.global.parameters] then [ENV.deploy.parameters]."""
    if not path.is_file():
        if required:
            raise PreflightError(f"{path} does not exist (give --config-file, or leave CONFIG_ENV out).")
        return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise PreflightError(f"{path} cannot be read ({error}).") from error
    if env not in data:
        if required:
            raise PreflightError(f"{path} has no environment [{env}] (its environments: "
                                 f"{', '.join(k for k in data if isinstance(data[k], dict)) or 'none'}).")
        return None
    origin = f"{path.name} [{env}]"
    merged: dict[str, Any] = {}
    for command in ("global", "deploy"):
        merged.update(data[env].get(command, {}).get("parameters", {}))
    overrides = merged.get("parameter_overrides", [])
    return SamConfig(parse_overrides(overrides, f"{origin} parameter_overrides") if overrides else {},
                     merged.get("stack_name"), merged.get("region"), merged.get("profile"), origin)


@dataclass
class Deployment:
    """What `sam deploy` would deploy: where, and with which parameter values."""
    stack: str
    region: str
    template: dict[str, Any]
    given: dict[str, str]  # the parameters set by samconfig.toml or the command line
    origins: list[str]  # where they came from

    @property
    def declared(self) -> dict[str, Any]:
        return dict(self.template["Parameters"])

    @property
    def parameters(self) -> dict[str, str]:
        """Every parameter's value: the template's default unless given."""
        values = {name: _text(spec.get("Default", "")) for name, spec in self.declared.items()}
        return {**values, **{k: v for k, v in self.given.items() if k in values}}

    def value(self, name: str) -> str:
        return self.parameters.get(name, "")

    def number(self, name: str, default: int) -> int:
        try:
            return int(float(self.value(name)))
        except ValueError:
            return default

    @property
    def existing_endpoint(self) -> str:
        return self.value("ExistingEndpointName")

    @property
    def gpu(self) -> bool:
        return self.value("EndpointCompute") == "GPU"

    @property
    def scale_to_zero(self) -> bool:
        return self.value("EndpointScaleToZero") == "true"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    return str(value)


def _branches(value: Any) -> list[Any]:
    """Both outcomes of an Fn::If (recursively); any other value as itself."""
    if isinstance(value, dict) and "Fn::If" in value:
        _, then, otherwise = value["Fn::If"]
        return _branches(then) + _branches(otherwise)
    return [value]


def _resolve(value: Any, parameters: Mapping[str, str]) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return parameters.get(value["Ref"])
    return None


def endpoint_instance_types(deployment: Deployment) -> tuple[str | None, list[str]]:
    """The endpoint's instance types, read from the template's endpoint configs: the single type of the
    CPU variant (CpuInstanceType) and the GPU variant's pool in priority order."""
    single: str | None = None
    pools: dict[str, int] = {}
    parameters = deployment.parameters
    for resource in deployment.template.get("Resources", {}).values():
        if resource.get("Type") != "AWS::SageMaker::EndpointConfig":
            continue
        for variant in _branches_of_list(resource.get("Properties", {}).get("ProductionVariants", [])):
            if not isinstance(variant, dict):
                continue
            if "InstancePools" in variant:
                for pool in variant["InstancePools"]:
                    instance_type = _resolve(pool.get("InstanceType"), parameters)
                    if instance_type:
                        pools[instance_type] = min(pools.get(instance_type, 99), int(pool.get("Priority", 99)))
            elif "InstanceType" in variant:
                single = single or _resolve(variant["InstanceType"], parameters)
    return single, sorted(pools, key=lambda t: pools[t])


def _branches_of_list(values: Any) -> list[Any]:
    out: list[Any] = []
    for value in values if isinstance(values, list) else _branches(values):
        out.extend(_branches(value))
    return out


def human_topics(template: Mapping[str, Any]) -> dict[str, list[str]]:
    """The template's topics with a subscription that reaches a person: logical id -> the parameters it takes endpoints from."""
    topics: dict[str, list[str]] = {}
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") != "AWS::SNS::Subscription":
            continue
        properties = resource.get("Properties", {})
        topic = properties.get("TopicArn")
        if properties.get("Protocol") not in HUMAN_PROTOCOLS or not (isinstance(topic, dict) and "Ref" in topic):
            continue
        refs = [ref for branch in _branches(properties.get("Endpoint")) if (ref := _ref_of(branch))]
        topics.setdefault(topic["Ref"], [])
        topics[topic["Ref"]] += [ref for ref in refs if ref not in topics[topic["Ref"]]]
    return topics


def _ref_of(value: Any) -> str | None:
    return value["Ref"] if isinstance(value, dict) and set(value) == {"Ref"} else None


def invalid_value(name: str, value: str, spec: Mapping[str, Any]) -> str | None:
    """Why CloudFormation would refuse VALUE for the parameter SPEC, or None."""
    if PLACEHOLDER.search(value):
        return f"{name} is still the placeholder {value}"
    kind = str(spec.get("Type", "String"))
    allowed = spec.get("AllowedValues")
    if allowed is not None and value not in [_text(v) for v in allowed]:
        return f"{name}={value} is not one of {', '.join(_text(v) for v in allowed)}"
    if kind == "Number":
        try:
            number = float(value)
        except ValueError:
            return f"{name}={value} is not a number"
        if "MinValue" in spec and number < float(spec["MinValue"]):
            return f"{name}={value} is below its MinValue {spec['MinValue']}"
        if "MaxValue" in spec and number > float(spec["MaxValue"]):
            return f"{name}={value} is above its MaxValue {spec['MaxValue']}"
    pattern = spec.get("AllowedPattern")
    if pattern and "List" not in kind and re.fullmatch(str(pattern), value) is None:
        return f"{name}={value} does not match its AllowedPattern {pattern}"
    return None

