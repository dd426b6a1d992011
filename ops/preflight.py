"""Preflight: the deploy checklist, checked with your own credentials before `sam deploy`; writes nothing.

    python -m ops.preflight [--stack NAME] [--region REGION] [--parameter-overrides "Key=Value ..."]
                            [--config-file samconfig.toml] [--config-env default] [--template template.yaml]
                            [--processing-instance-type ml.c7i.8xlarge] [--processing-instances 1]
                            [--profile NAME]

(`make preflight STACK=… REGION=… [PARAMS="Key=Value ..."] [CONFIG_ENV=…]`.) The parameters are
those `sam deploy` would use: template.yaml's defaults, then samconfig.toml's parameter_overrides
of the chosen environment (`[default]` unless --config-env), then --parameter-overrides. The
stack name and the region default to samconfig.toml's. The checks, one line each (✓ passed,
✗ to fix before deploying, ! a warning, or a check your credentials could not make):

| check | calls (read only) |
|---|---|
| credentials: the account and the ARN you act as | sts:GetCallerIdentity on the regional STS host |
| parameters: names the template has, values it accepts, no samconfig placeholder left | none |
| stack: a stack of that name, and whether `sam deploy` can update it | cloudformation:DescribeStacks |
| quotas: "<type> for endpoint usage" of the endpoint's types (CPU, or the GPU pool) | servicequotas:ListServiceQuotas |
| quotas: "<type> for processing job usage" (make fit-history ON=sagemaker) | servicequotas:ListAWSDefaultServiceQuotas |
| endpoint: with ExistingEndpointName, that endpoint | sagemaker:DescribeEndpoint |
| image: DecisionImageUri in ECR of the region, by digest | ecr:DescribeImages |
| model: ModelDataUrl's archive in S3, in the region | s3:ListBucket (HeadBucket), s3:GetObject (HeadObject) |
| pages: the on-call and alarm subscriptions, confirmed | cloudformation:DescribeStackResources, sns:ListSubscriptionsByTopic |

Exit status 1 when any line is ✗, else 0 (2: the command line or samconfig.toml cannot be read).
Every client call goes through a guard that refuses any operation but Get*, List*, Describe* and
Head*: preflight cannot write, whatever the credentials allow. docs/operations/preflight.md lists
the permissions and what preflight cannot check.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TextIO

from decision_router.adapters.caller_identity import sts_client

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "template.yaml"
SAMCONFIG = REPO / "samconfig.toml"

#: The page with every check, the permissions it needs and what it cannot check.
DOCS = "docs/operations/preflight.md"
IMAGE_DOCS = "docs/container/image.md"
MODEL_DOCS = "docs/container/model-package.md"
ON_CALL_DOCS = "docs/destinations/on-call.md"
QUICKSTART = "docs/quickstart.md"

#: `make fit-history ON=sagemaker`'s Processing instance type when INSTANCE_TYPE is not given
#: (training/history.py's --instance-type default; a test holds the two together).
DEFAULT_PROCESSING_INSTANCE_TYPE = "ml.c7i.8xlarge"

#: The only operations preflight makes: reads.
READ_ONLY = re.compile(r"^(Get|List|Describe|Head)[A-Z]")

#: Parameters a check of their own reads (the parameters check leaves them to it).
OWN_CHECK = {"DecisionImageUri", "ModelDataUrl", "OnCallEmail", "OnCallWebhookUrl", "AlarmEmail"}
#: samconfig.toml's placeholders: REPLACE_WITH_…, REPLACE-WITH-….
PLACEHOLDER = re.compile(r"REPLACE[_-]WITH", re.IGNORECASE)
#: Error codes of a call the credentials may not make.
DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError", "403", "Forbidden"}
#: SNS subscription protocols that reach a person (or a paging service).
HUMAN_PROTOCOLS = {"email", "email-json", "http", "https", "sms"}
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
ECR_REGISTRY = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")

OK, FAIL, WARN = "✓", "✗", "!"


class PreflightError(ValueError):
    """The command line, samconfig.toml or the template cannot be read; the message says which."""


class WriteRefused(RuntimeError):
    """Preflight was about to make a call that is not a read."""


# ------------------------------------------------------------------------------------ results
@dataclass
class Result:
    mark: str  # OK, FAIL or WARN
    check: str  # credentials, parameters, stack, quota, endpoint, image, model, pages
    text: str  # whole sentences
    fixes: list[str] = field(default_factory=list)  # "run: …" / "read: …"

    def lines(self) -> list[str]:
        return [f"{self.mark} {self.check}: {self.text}", *(f"    {fix}" for fix in self.fixes)]


def code_of(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def message_of(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Message", "")) or str(error)


def is_client_error(error: Exception) -> bool:
    return getattr(error, "response", None) is not None


def not_checked(check: str, what: str, actions: str, error: Exception) -> Result:
    """A check the credentials could not make (denied) or that AWS did not answer: a warning."""
    if code_of(error) in DENIED:
        return Result(WARN, check, f"{what} was not checked: your credentials may not call {actions}. "
                                   f"Add the read-only permissions listed in {DOCS} to check it.")
    return Result(WARN, check, f"{what} was not checked: {type(error).__name__}: {message_of(error)}. "
                               f"See {DOCS} for what this check needs.")


# --------------------------------------------------------------------------------- deployment
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


def quota_increase_command(code: str, desired: int, region: str) -> str:
    return (f"aws service-quotas request-service-quota-increase --service-code sagemaker --quota-code {code} "
            f"--desired-value {desired} --region {region}")


# ---------------------------------------------------------------------------------- the checks
class Preflight:
    """Every check of one deployment, read only. `clients` replaces the session's client of a service."""

    def __init__(self, session: Any, deployment: Deployment, *, processing_instance_type: str = DEFAULT_PROCESSING_INSTANCE_TYPE,
                 processing_instances: int = 1, processing_named: bool = False, clients: Mapping[str, Any] | None = None):
        self.session = session
        self.deployment = deployment
        self.region = deployment.region
        self.processing_instance_type = processing_instance_type
        self.processing_instances = processing_instances
        self.processing_named = processing_named  # INSTANCE_TYPE or INSTANCES given: a shortfall is ✗
        self._clients: dict[str, Any] = {}
        for service, client in (clients or {}).items():
            self._clients[service] = guarded(client)
        self.account: str | None = None
        self.stack_exists = False

    def client(self, service: str) -> Any:
        """The client of SERVICE in the deployment's region, every call of it through the read-only guard."""
        if service not in self._clients:
            self._clients[service] = guarded(sts_client(self.region, session=self.session) if service == "sts"
                                             else self.session.client(service, region_name=self.region))
        return self._clients[service]

    def run(self) -> list[Result]:
        results = [self.credentials()]
        if results[0].mark == FAIL:
            results.append(Result(WARN, "checks", "The other checks need credentials, so none of them ran. "
                                                  f"Fix the credentials, then run make preflight again ({DOCS})."))
            return results
        checks: list[Callable[[], list[Result]]] = [self.parameters, self.stack, self.quotas, self.endpoint,
                                                     self.image, self.model, self.pages]
        for check in checks:
            results.extend(check())
        return results

    # 1. ---------------------------------------------------------------------------- credentials
    def credentials(self) -> Result:
        from botocore.exceptions import BotoCoreError, NoCredentialsError

        client = self.client("sts")
        try:
            identity = client.get_caller_identity()
        except NoCredentialsError:
            return Result(FAIL, "credentials", "No AWS credentials were found. Configure credentials (aws configure, "
                                               "AWS_PROFILE=… or aws sso login) for an identity with the read-only "
                                               f"permissions listed in {DOCS}, then run make preflight again.",
                          [f"read: {DOCS}#permissions"])
        except BotoCoreError as error:
            return Result(FAIL, "credentials", f"STS at {client.meta.endpoint_url} could not be reached ({error}). "
                                               f"Check the network and that {self.region} is a region; {DOCS} "
                                               "explains the check.", [f"read: {DOCS}#credentials"])
        except Exception as error:
            if not is_client_error(error):
                raise
            return Result(FAIL, "credentials", f"AWS refused the credentials ({code_of(error)}: {message_of(error)}). "
                                               "Refresh them (aws sso login, or new access keys) for an identity with "
                                               f"the read-only permissions listed in {DOCS}.",
                          [f"read: {DOCS}#permissions"])
        self.account = identity["Account"]
        host = client.meta.endpoint_url.removeprefix("https://")
        return Result(OK, "credentials", f"account {identity['Account']} as {identity['Arn']} ({host}).")

    # parameters ----------------------------------------------------------------------------------
    def parameters(self) -> list[Result]:
        deployment = self.deployment
        declared = deployment.declared
        problems: list[str] = []
        unknown = sorted(set(deployment.given) - set(declared))
        if unknown:
            problems.append(f"the template has no parameter {', '.join(unknown)} (CloudFormation refuses the deploy)")
        for name, value in sorted(deployment.given.items()):
            if name not in declared or name in OWN_CHECK:
                continue
            spec = declared[name]
            problem = _invalid(name, value, spec)
            if problem:
                problems.append(problem)
        if problems:
            return [Result(FAIL, "parameters", f"{'; '.join(problems)}. Fix them in {deployment.origins[-1]} "
                                               "(the configuration reference lists each parameter's allowed values).",
                           [f"read: {QUICKSTART}#3-deploy"])]
        given = ", ".join(deployment.origins[1:]) or "nothing"
        return [Result(OK, "parameters", f"{len(deployment.given)} set in {given} over the template's defaults; "
                                         "the template accepts them.")]

    # 6. ---------------------------------------------------------------------------------- stack
    def stack(self) -> list[Result]:
        name, region = self.deployment.stack, self.region
        try:
            stacks = self.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
        except Exception as error:
            if not is_client_error(error):
                raise
            if code_of(error) == "ValidationError" and "does not exist" in message_of(error):
                return [Result(OK, "stack", f"{name} does not exist in {region} yet; sam deploy creates it.")]
            return [not_checked("stack", f"The stack {name}", "cloudformation:DescribeStacks", error)]
        status = stacks[0]["StackStatus"]
        self.stack_exists = True
        events = f"run: aws cloudformation describe-stack-events --stack-name {name} --region {region} --max-items 20"
        if status == "ROLLBACK_COMPLETE":
            return [Result(FAIL, "stack", f"{name} is ROLLBACK_COMPLETE: its first create failed and rolled back, and "
                                          "CloudFormation cannot update such a stack. Delete it, then deploy again "
                                          f"({DOCS}#stack).",
                           [events + "   # why the create failed",
                            f"run: aws cloudformation delete-stack --stack-name {name} --region {region}"])]
        if status in ("ROLLBACK_FAILED", "DELETE_FAILED"):
            return [Result(FAIL, "stack", f"{name} is {status}: a rollback or delete left resources behind. Read its "
                                          f"events, delete what blocks it, then delete the stack ({DOCS}#stack).",
                           [events, f"run: aws cloudformation delete-stack --stack-name {name} --region {region}"])]
        if status == "UPDATE_ROLLBACK_FAILED":
            return [Result(FAIL, "stack", f"{name} is UPDATE_ROLLBACK_FAILED: it cannot be updated until its rollback "
                                          f"finishes ({DOCS}#stack).",
                           [events, f"run: aws cloudformation continue-update-rollback --stack-name {name} --region {region}"])]
        if status == "REVIEW_IN_PROGRESS":
            return [Result(WARN, "stack", f"{name} is REVIEW_IN_PROGRESS: a change set was made and never executed; "
                                          "sam deploy makes a new one.")]
        if status.endswith("_IN_PROGRESS"):
            return [Result(FAIL, "stack", f"{name} is {status}: wait until it ends before deploying ({DOCS}#stack).",
                           [f"run: aws cloudformation describe-stacks --stack-name {name} --region {region} "
                            "--query 'Stacks[0].StackStatus'"])]
        if status == "UPDATE_ROLLBACK_COMPLETE":
            return [Result(WARN, "stack", f"{name} is UPDATE_ROLLBACK_COMPLETE: its last update failed and was rolled "
                                          "back (it runs the version before); sam deploy can update it.", [events])]
        return [Result(OK, "stack", f"{name} exists ({status}); sam deploy updates it.")]

    # 2. --------------------------------------------------------------------------------- quotas
    def quotas(self) -> list[Result]:
        wanted: list[tuple[str, int, int, str]] = []  # (quota name, needed, scales to, what needs it)
        deployment = self.deployment
        cpu_type, gpu_pool = endpoint_instance_types(deployment)
        maximum = deployment.number("EndpointMaxInstances", 1)
        minimum = 1 if deployment.scale_to_zero else deployment.number("EndpointMinInstances", 1)
        starts = ("the endpoint starts with 1 (EndpointScaleToZero)" if deployment.scale_to_zero
                  else f"the endpoint starts with {minimum} (EndpointMinInstances)")
        if not deployment.existing_endpoint:
            endpoint_types = gpu_pool if deployment.gpu else [cpu_type or deployment.value("CpuInstanceType")]
            for instance_type in endpoint_types:
                wanted.append((f"{instance_type} for endpoint usage", minimum, max(minimum, maximum), starts))
        processing, count = self.processing_instance_type, self.processing_instances
        wanted.append((f"{processing} for processing job usage", count, count,
                       f"make fit-history ON=sagemaker INSTANCES={count} runs {count}"))
        try:
            quotas = self._quotas({name for name, *_ in wanted})
        except Exception as error:
            if not is_client_error(error):
                raise
            return [not_checked("quotas", "The SageMaker quotas", "servicequotas:ListServiceQuotas", error)]
        pool_ok = any((quotas.get(f"{t} for endpoint usage") or {}).get("Value", 0) >= minimum for t in gpu_pool)
        results: list[Result] = []
        for name, needed, scales_to, why in wanted:
            endpoint = name.endswith("for endpoint usage")
            results.append(self._quota_result(name, quotas.get(name), needed, scales_to, why, endpoint=endpoint,
                                              pool=gpu_pool if endpoint and deployment.gpu else None, pool_ok=pool_ok))
        return results

    def _quotas(self, names: set[str]) -> dict[str, dict[str, Any]]:
        """The account's applied SageMaker quotas of these names; the defaults of those it has none applied."""
        client = self.client("service-quotas")
        found: dict[str, dict[str, Any]] = {}
        for page in client.get_paginator("list_service_quotas").paginate(ServiceCode="sagemaker"):
            for quota in page.get("Quotas", []):
                if quota.get("QuotaName") in names:
                    found[quota["QuotaName"]] = quota
        if names - set(found):
            for page in client.get_paginator("list_aws_default_service_quotas").paginate(ServiceCode="sagemaker"):
                for quota in page.get("Quotas", []):
                    if quota.get("QuotaName") in names and quota["QuotaName"] not in found:
                        found[quota["QuotaName"]] = {**quota, "default": True}
        return found

    def _quota_result(self, name: str, quota: dict[str, Any] | None, needed: int, scales_to: int, why: str, *,
                      endpoint: bool, pool: list[str] | None, pool_ok: bool) -> Result:
        region = self.region
        if quota is None:
            return Result(WARN, "quota", f"SageMaker lists no quota \"{name}\" in {region}: the instance type may not be "
                                         f"offered there. Check it in the Service Quotas console ({DOCS}#quotas).")
        value = int(quota.get("Value", 0))
        code = quota.get("QuotaCode", "?")
        shown = f"\"{name}\" ({code}) is {value}{' (the default)' if quota.get('default') else ''}"
        command = f"run: {quota_increase_command(code, scales_to, region)}"
        if not quota.get("Adjustable", True):
            command += "   # not adjustable: ask AWS Support"
        request = f"Request the increase and deploy once it is granted ({DOCS}#quotas)."
        if pool is not None:
            where = f"GPU pool priority {pool.index(name.split(' ')[0]) + 1} of {len(pool)}"
            if value >= scales_to:
                return Result(OK, "quota", f"{shown}: enough for the {where} ({scales_to} at most).")
            if value >= needed:
                return Result(WARN, "quota", f"{shown} ({where}): {why}, but auto scaling stops at {value} of "
                                             f"{scales_to} (EndpointMaxInstances) on this type.", [command])
            if pool_ok:
                return Result(WARN, "quota", f"{shown} ({where}), but {why}. Another type of the pool has the quota; "
                                             "SageMaker falls back along the pool on missing capacity, so raise this "
                                             "one for the endpoint to run on it.", [command])
            return Result(FAIL, "quota", f"{shown} ({where}), but {why}, and no type of the pool has that quota: the "
                                         f"deploy would fail. {request}", [command])
        if value >= scales_to:
            return Result(OK, "quota", f"{shown}: enough for {scales_to}"
                                       f"{' (EndpointMaxInstances)' if endpoint and scales_to > needed else ''}.")
        if value >= needed:
            return Result(WARN, "quota", f"{shown}: {why}, but auto scaling stops at {value} of {scales_to} "
                                         "(EndpointMaxInstances).", [command])
        if endpoint:
            return Result(FAIL, "quota", f"{shown}, but {why}: the deploy would fail. {request}", [command])
        if self.processing_named:
            return Result(FAIL, "quota", f"{shown}, but {why}: the job would fail. Request the increase before "
                                         f"running it ({DOCS}#quotas).", [command])
        return Result(WARN, "quota", f"{shown}, but {why} (not needed to deploy).", [command])

    # ExistingEndpointName ---------------------------------------------------------------------
    def endpoint(self) -> list[Result]:
        name = self.deployment.existing_endpoint
        if not name:
            return []
        try:
            described = self.client("sagemaker").describe_endpoint(EndpointName=name)
        except Exception as error:
            if not is_client_error(error):
                raise
            if code_of(error) == "ValidationException" and "Could not find" in message_of(error):
                return [Result(FAIL, "endpoint", f"ExistingEndpointName={name}: there is no such endpoint in "
                                                 f"{self.region}. Name a running endpoint, or leave the parameter empty "
                                                 f"for the stack to create one ({QUICKSTART}#3-deploy).",
                               [f"run: aws sagemaker list-endpoints --region {self.region}"])]
            return [not_checked("endpoint", f"The endpoint {name}", "sagemaker:DescribeEndpoint", error)]
        status = described.get("EndpointStatus", "?")
        if status != "InService":
            return [Result(WARN, "endpoint", f"ExistingEndpointName={name} is {status}, not InService.")]
        return [Result(OK, "endpoint", f"ExistingEndpointName={name} is InService; the stack creates no SageMaker "
                                       "endpoint, so its image and model are not checked.")]

    # 3. ---------------------------------------------------------------------------------- image
    def image(self) -> list[Result]:
        if self.deployment.existing_endpoint:
            return []
        uri = self.deployment.value("DecisionImageUri")
        push = f"read: {IMAGE_DOCS}"
        if not uri:
            return [Result(FAIL, "image", "DecisionImageUri is empty, and the template needs it unless "
                                          f"ExistingEndpointName is set. Build and push the image ({IMAGE_DOCS}).", [push])]
        if PLACEHOLDER.search(uri):
            return [Result(FAIL, "image", f"DecisionImageUri is still the placeholder {uri}. Build and push the image, "
                                          f"then give its digest URI ({IMAGE_DOCS}).", [push])]
        registry, _, rest = uri.partition("/")
        digest: str | None = None
        tag: str | None = None
        if "@" in rest:
            repository, _, digest = rest.partition("@")
            image_id = {"imageDigest": digest}
        else:
            repository, _, tag = rest.rpartition(":") if ":" in rest else (rest, "", "latest")
            image_id = {"imageTag": tag}
        match = ECR_REGISTRY.match(registry)
        if not match or not repository:
            return [Result(FAIL, "image", f"DecisionImageUri {uri} is not an image in a private ECR registry "
                                          f"(ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPOSITORY@sha256:…), which "
                                          f"SageMaker pulls from. Push it to ECR in {self.region} ({IMAGE_DOCS}).", [push])]
        account, image_region = match["account"], match["region"]
        if image_region != self.region:
            target = f"{account}.dkr.ecr.{self.region}.amazonaws.com/{repository}"
            return [Result(FAIL, "image", f"DecisionImageUri is in ECR of {image_region}, but the endpoint in "
                                          f"{self.region} pulls from its own region's registry. Push (or replicate) "
                                          f"the image to {target} and deploy with that URI ({IMAGE_DOCS}).", [push])]
        try:
            details = self.client("ecr").describe_images(registryId=account, repositoryName=repository,
                                                         imageIds=[image_id])["imageDetails"]
        except Exception as error:
            if not is_client_error(error):
                raise
            if code_of(error) == "RepositoryNotFoundException":
                return [Result(FAIL, "image", f"There is no ECR repository {repository} in {account}/{self.region}. "
                                              f"Create it and push the image ({IMAGE_DOCS}).", [push])]
            if code_of(error) == "ImageNotFoundException":
                what = f"digest {digest}" if digest else f"tag {tag}"
                return [Result(FAIL, "image", f"{repository} in {self.region} has no image of {what}. Push the image "
                                              f"and deploy by the digest the push prints ({IMAGE_DOCS}).",
                               [push, f"run: aws ecr describe-images --repository-name {repository} --region {self.region} "
                                      "--query 'sort_by(imageDetails,&imagePushedAt)[-3:].[imageDigest,imageTags]'"])]
            return [not_checked("image", f"The image {uri}", "ecr:DescribeImages", error)]
        detail = details[0]
        found = detail["imageDigest"]
        tags = detail.get("imageTags", [])
        pushed = detail.get("imagePushedAt")
        about = (f" (tags {', '.join(tags)}" if tags else " (untagged") + (f", pushed {pushed:%Y-%m-%d %H:%M})" if pushed else ")")
        results: list[Result] = []
        if tag is not None:
            pinned = f"{registry}/{repository}@{found}"
            pattern = self.deployment.declared.get("DecisionImageUri", {}).get("AllowedPattern")
            refused = bool(pattern) and re.fullmatch(pattern, uri) is None
            results.append(Result(FAIL if refused else WARN, "image",
                                  f"DecisionImageUri names the image by its tag {tag}, which can move to another image"
                                  f"{' and which the template refuses' if refused else ''}. Deploy by its digest: "
                                  f"DecisionImageUri={pinned} ({IMAGE_DOCS}).", [f"pin: DecisionImageUri={pinned}"]))
        else:
            results.append(Result(OK, "image", f"{repository}@{found[:19]}… is in ECR of {self.region}{about}."))
        compute = "GPU" if self.deployment.gpu else "CPU"
        flavours = {"cuda" if "cuda" in t.lower() else "cpu" for t in tags if "cuda" in t.lower() or "cpu" in t.lower()}
        if flavours and flavours != ({"cuda"} if self.deployment.gpu else {"cpu"}):
            results.append(Result(WARN, "image", f"the image is tagged {', '.join(tags)} but EndpointCompute={compute}: "
                                                 f"the CPU endpoint runs the cpu image, the GPU pool the cuda one ({IMAGE_DOCS})."))
        return results

    # 4. ---------------------------------------------------------------------------------- model
    def model(self) -> list[Result]:
        if self.deployment.existing_endpoint:
            return []
        url = self.deployment.value("ModelDataUrl")
        upload = (f"run: python container/package_model.py MODEL.gguf --sha256 <its sha256> --output model.tar.gz "
                  f"&& aws s3 cp model.tar.gz {url or 's3://BUCKET/decision-router/model.tar.gz'} --region {self.region}")
        read = f"read: {MODEL_DOCS}"
        if not url:
            return [Result(FAIL, "model", "ModelDataUrl is empty, and the template needs it unless ExistingEndpointName "
                                          f"is set. Package a GGUF as model.tar.gz and upload it ({MODEL_DOCS}).", [read])]
        if PLACEHOLDER.search(url):
            return [Result(FAIL, "model", f"ModelDataUrl is still the placeholder {url}. Package a GGUF as model.tar.gz, "
                                          f"upload it and give its s3:// URL ({MODEL_DOCS}).", [read])]
        found = re.fullmatch(r"s3://([a-z0-9.-]{3,63})/(.+)", url)
        if not found:
            return [Result(FAIL, "model", f"ModelDataUrl {url} is not s3://BUCKET/KEY/model.tar.gz ({MODEL_DOCS}).", [read])]
        bucket, key = found[1], found[2]
        s3 = self.client("s3")
        try:
            bucket_region = s3.head_bucket(Bucket=bucket).get("BucketRegion")
        except Exception as error:
            if not is_client_error(error):
                raise
            if code_of(error) in ("404", "NoSuchBucket", "NotFound"):
                return [Result(FAIL, "model", f"The bucket {bucket} does not exist. Create it in {self.region} and "
                                              f"upload the archive ({MODEL_DOCS}).",
                               [f"run: aws s3 mb s3://{bucket} --region {self.region}", upload])]
            bucket_region = None  # 403 without s3:ListBucket: the object's HEAD still tells
        if bucket_region and bucket_region != self.region:
            return [Result(FAIL, "model", f"The bucket {bucket} is in {bucket_region}, but SageMaker in {self.region} reads "
                                          f"the model from a bucket of its own region. Upload the archive to a bucket in "
                                          f"{self.region} and deploy with that ModelDataUrl ({MODEL_DOCS}).", [read])]
        try:
            head = s3.head_object(Bucket=bucket, Key=key)
        except Exception as error:
            if not is_client_error(error):
                raise
            if code_of(error) in ("404", "NoSuchKey", "NotFound"):
                return [Result(FAIL, "model", f"There is no object {url}. Package the GGUF as model.tar.gz and upload it "
                                              f"there ({MODEL_DOCS}).", [upload])]
            return [not_checked("model", f"The archive {url}", "s3:GetObject on it (S3 also answers 403 for a missing "
                                                                "object when s3:ListBucket is not allowed)", error)]
        size = int(head.get("ContentLength", 0))
        modified = head.get("LastModified")
        when = f", uploaded {modified:%Y-%m-%d %H:%M}" if modified else ""
        if size == 0:
            return [Result(FAIL, "model", f"{url} is empty. Upload the packaged archive there again ({MODEL_DOCS}).", [upload])]
        return [Result(OK, "model", f"{url} is there ({_size(size)}{when}).")]

    # 5. ---------------------------------------------------------------------------------- pages
    def pages(self) -> list[Result]:
        deployment = self.deployment
        email, webhook = deployment.value("OnCallEmail"), deployment.value("OnCallWebhookUrl")
        problems = []
        for name, value in (("OnCallEmail", email), ("OnCallWebhookUrl", webhook), ("AlarmEmail", deployment.value("AlarmEmail"))):
            if not value:
                continue
            if PLACEHOLDER.search(value):
                problems.append(f"{name} is still the placeholder {value}")
            elif name.endswith("Email") and not EMAIL.match(value):
                problems.append(f"{name}={value} is not an e-mail address")
            elif name == "OnCallWebhookUrl" and not value.startswith("https://"):
                problems.append(f"{name}={value} is not an https:// URL")
        if not email and not webhook:
            problems.append("neither OnCallEmail nor OnCallWebhookUrl is set, and the template refuses a stack whose "
                            "escalations reach nobody")
        if problems:
            return [Result(FAIL, "pages", f"{'; '.join(problems)}. Set who is paged ({ON_CALL_DOCS}).", [f"read: {ON_CALL_DOCS}"])]
        if not self.stack_exists:
            who = " and ".join(v for v in (email, webhook) if v)
            return [Result(OK, "pages", f"{who} will be subscribed to the on-call topic by the deploy; each must confirm "
                                        "the subscription SNS sends (run make preflight again after the deploy to see it).")]
        return self._subscriptions()

    def _subscriptions(self) -> list[Result]:
        stack = self.deployment.stack
        topics = human_topics(self.deployment.template)
        try:
            resources = self.client("cloudformation").describe_stack_resources(StackName=stack)["StackResources"]
        except Exception as error:
            if not is_client_error(error):
                raise
            return [not_checked("pages", "The on-call subscriptions", "cloudformation:DescribeStackResources", error)]
        arns = {r["LogicalResourceId"]: r.get("PhysicalResourceId") for r in resources
                if r.get("ResourceType") == "AWS::SNS::Topic" and r["LogicalResourceId"] in topics}
        if not arns:
            return [Result(WARN, "pages", f"the stack {stack} has none of the topics {', '.join(sorted(topics))} yet; "
                                          "the deploy creates them and subscribes the on-call.")]
        sns = self.client("sns")
        results: list[Result] = []
        for logical, arn in sorted(arns.items()):
            try:
                subscriptions = [s for page in sns.get_paginator("list_subscriptions_by_topic").paginate(TopicArn=arn)
                                 for s in page.get("Subscriptions", [])]
            except Exception as error:
                if not is_client_error(error):
                    raise
                results.append(not_checked("pages", f"The subscriptions of {logical}", "sns:ListSubscriptionsByTopic", error))
                continue
            people = [s for s in subscriptions if s.get("Protocol") in HUMAN_PROTOCOLS]
            pending = [s for s in people if s.get("SubscriptionArn") == "PendingConfirmation"]
            confirmed = [s for s in people if s not in pending]
            shown = ", ".join(f"{s.get('Protocol')} {s.get('Endpoint')}" for s in pending)
            resend = [f"run: aws sns subscribe --topic-arn {arn} --protocol {s.get('Protocol')} "
                      f"--notification-endpoint {s.get('Endpoint')} --region {self.region}   # sends the confirmation again"
                      for s in pending if s.get("Protocol") in ("email", "email-json")]
            if not people:
                results.append(Result(FAIL, "pages", f"{logical} has no e-mail or HTTPS subscriber: its pages reach nobody. "
                                                     f"Deploy with OnCallEmail and/or OnCallWebhookUrl ({ON_CALL_DOCS}).",
                                      [f"read: {ON_CALL_DOCS}"]))
            elif not confirmed:
                results.append(Result(FAIL, "pages", f"{logical}: every subscription is pending confirmation ({shown}), "
                                                     "so its pages reach nobody. Each recipient must open the link in SNS's "
                                                     "\"Subscription Confirmation\" message (an HTTPS endpoint must visit its "
                                                     f"SubscribeURL) ({ON_CALL_DOCS}).", [*resend, f"read: {ON_CALL_DOCS}"]))
            elif pending:
                results.append(Result(WARN, "pages", f"{logical}: {len(confirmed)} confirmed, {len(pending)} pending "
                                                     f"confirmation ({shown}); a pending one receives nothing until "
                                                     f"its recipient confirms ({ON_CALL_DOCS}).", resend))
            else:
                subscribers = ", ".join(f"{s.get('Protocol')} {s.get('Endpoint')}" for s in confirmed)
                results.append(Result(OK, "pages", f"{logical}: {len(confirmed)} confirmed ({subscribers})."))
        return results


def _invalid(name: str, value: str, spec: Mapping[str, Any]) -> str | None:
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


def _size(size: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000  # type: ignore[assignment]
    return str(size)


def guarded(client: Any) -> Any:
    """CLIENT, refusing every operation but a read before its request is built (before-parameter-build
    runs for every call, even one a Stubber answers)."""
    client.meta.events.register("before-parameter-build", refuse_writes, unique_id="decision-router-preflight-read-only")
    return client


def refuse_writes(model: Any = None, **_: Any) -> None:
    """`before-parameter-build` guard: any operation but a read is refused before its request is built."""
    name = getattr(model, "name", "")
    if not READ_ONLY.match(name):
        raise WriteRefused(f"preflight makes read-only calls only, and {name} is not one")


# ----------------------------------------------------------------------------------- the command
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ops.preflight", description=(__doc__ or "").splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--stack", help="the stack's name (default: samconfig.toml's stack_name)")
    p.add_argument("--region", help="the region to deploy to (default: samconfig.toml's, then the AWS configuration's)")
    p.add_argument("--parameter-overrides", action="append", default=[], metavar="'Key=Value ...'",
                   help="parameters as sam deploy --parameter-overrides takes them, over samconfig.toml's")
    p.add_argument("--config-file", type=Path, default=SAMCONFIG, help="the SAM configuration file (samconfig.toml)")
    p.add_argument("--config-env", help="its environment (default: default)")
    p.add_argument("--template", type=Path, default=TEMPLATE, help="the template (template.yaml)")
    p.add_argument("--processing-instance-type",
                   help=f"make fit-history ON=sagemaker's instance type (default {DEFAULT_PROCESSING_INSTANCE_TYPE})")
    p.add_argument("--processing-instances", type=int, help="and how many (default 1)")
    p.add_argument("--profile", help="the AWS profile (default: samconfig.toml's, then AWS_PROFILE)")
    return p


def deployment_of(args: argparse.Namespace, session_region: Callable[[str | None], str | None]) -> tuple[Deployment, str | None]:
    """The deployment the arguments and samconfig.toml describe, and the profile to use."""
    template = load_template(args.template)
    config = read_samconfig(args.config_file, args.config_env or "default", required=bool(args.config_env))
    given: dict[str, str] = {}
    origins = ["template defaults"]
    if config is not None:
        given.update(config.parameters)
        origins.append(config.origin)
    if args.parameter_overrides:
        for text in args.parameter_overrides:
            given.update(parse_overrides(text, "PARAMS"))
        origins.append("PARAMS")
    profile = args.profile or (config.profile if config else None)
    stack = args.stack or (config.stack if config else None)
    region = args.region or (config.region if config else None) or session_region(profile)
    if not stack:
        raise PreflightError("No stack name: give STACK=… (or stack_name in samconfig.toml).")
    if not region:
        raise PreflightError("No region: give REGION=… (or region in samconfig.toml, or AWS_REGION).")
    return Deployment(stack, region, template, given, origins), profile


def report(results: list[Result], deployment: Deployment, out: TextIO) -> int:
    out.write(f"preflight of stack {deployment.stack} in {deployment.region} "
              f"(parameters: {', '.join(deployment.origins)}); read-only calls only\n")
    for result in results:
        for line in result.lines():
            out.write(line + "\n")
    failed = sum(r.mark == FAIL for r in results)
    warned = sum(r.mark == WARN for r in results)
    if failed:
        out.write(f"{failed} to fix, {warned} warning{'s' if warned != 1 else ''}: fix each ✗ line, then run make "
                  f"preflight again ({DOCS}).\n")
        return 1
    noted = f" ({warned} warning{'s' if warned != 1 else ''})" if warned else ""
    out.write(f"ready to deploy{noted}: sam build && sam deploy\n")
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None, session: Any = None,
         clients: Mapping[str, Any] | None = None) -> int:
    out = out or sys.stdout
    args = parser().parse_args(argv)

    def session_region(profile: str | None) -> str | None:
        if session is not None:
            return str(session.region_name) if session.region_name else None
        import boto3
        from botocore.exceptions import ProfileNotFound

        try:
            return boto3.Session(profile_name=profile).region_name
        except ProfileNotFound:
            return None

    try:
        deployment, profile = deployment_of(args, session_region)
        if session is None:
            import boto3
            from botocore.exceptions import ProfileNotFound

            try:
                session = boto3.Session(profile_name=profile, region_name=deployment.region)
            except ProfileNotFound as error:
                raise PreflightError(f"The AWS profile {profile} is not configured ({error}); see {DOCS}.") from error
    except PreflightError as error:
        print(f"preflight: {error}", file=sys.stderr)
        return 2
    processing_type = args.processing_instance_type or DEFAULT_PROCESSING_INSTANCE_TYPE
    processing_instances = args.processing_instances or 1
    results = Preflight(session, deployment, processing_instance_type=processing_type,
                        processing_instances=processing_instances,
                        processing_named=bool(args.processing_instance_type or args.processing_instances),
                        clients=clients).run()
    return report(results, deployment, out)


if __name__ == "__main__":
    raise SystemExit(main())
