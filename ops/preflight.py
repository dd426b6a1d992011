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
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, TextIO

from ops.command import DONE, WORK_LEFT, Command, aws_session
from ops.preflight_account import AccountChecks
from ops.preflight_base import DEFAULT_PROCESSING_INSTANCE_TYPE, DOCS, FAIL, OK, WARN, Result, WriteRefused, guarded, sts_client
from ops.preflight_deployment import (
    SAMCONFIG,
    TEMPLATE,
    Deployment,
    PreflightError,
    endpoint_instance_types,
    human_topics,
    load_template,
    parse_overrides,
    read_samconfig,
)
from ops.preflight_endpoint import EndpointChecks

#: What the checks' modules hold, named here as well: the command's tests and tools reach them through it.
__all__ = ["DEFAULT_PROCESSING_INSTANCE_TYPE", "OK", "FAIL", "WARN", "Deployment", "Preflight", "PreflightError",
           "Result", "TEMPLATE", "WriteRefused", "deployment_of", "endpoint_instance_types", "guarded", "human_topics",
           "load_template", "main", "parse_overrides", "parser", "report", "sts_client"]

COMMAND = Command("ops.preflight", __doc__ or "", "preflight", (PreflightError,), manual=True)


class Preflight(AccountChecks, EndpointChecks):
    """Every check of one deployment, read only. `clients` replaces the session's client of a service."""

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


# ----------------------------------------------------------------------------------- the command
def parser() -> argparse.ArgumentParser:
    p = COMMAND.parser()
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
        return WORK_LEFT
    noted = f" ({warned} warning{'s' if warned != 1 else ''})" if warned else ""
    out.write(f"ready to deploy{noted}: sam build && sam deploy\n")
    return DONE


def main(argv: list[str] | None = None, out: TextIO | None = None, session: Any = None,
         clients: Mapping[str, Any] | None = None) -> int:
    args = parser().parse_args(argv)

    def session_region(profile: str | None) -> str | None:
        if session is not None:
            return str(session.region_name) if session.region_name else None
        from botocore.exceptions import ProfileNotFound

        try:
            return aws_session(profile_name=profile).region_name
        except ProfileNotFound:
            return None

    def resolve() -> tuple[Deployment, Any]:
        deployment, profile = deployment_of(args, session_region)
        from botocore.exceptions import ProfileNotFound

        try:
            return deployment, aws_session(session, profile_name=profile, region_name=deployment.region)
        except ProfileNotFound as error:
            raise PreflightError(f"The AWS profile {profile} is not configured ({error}); see {DOCS}.") from error

    def work(resolved: tuple[Deployment, Any]) -> int:
        deployment, checked_with = resolved
        results = Preflight(checked_with, deployment,
                            processing_instance_type=args.processing_instance_type or DEFAULT_PROCESSING_INSTANCE_TYPE,
                            processing_instances=args.processing_instances or 1,
                            processing_named=bool(args.processing_instance_type or args.processing_instances),
                            clients=clients).run()
        return report(results, deployment, out or sys.stdout)

    return COMMAND.run_resolved(resolve, work)


if __name__ == "__main__":
    raise SystemExit(main())

