"""Every IAM action template.yaml names exists: a misspelt action (`sqs:SendMesage`) grants or
denies nothing, and neither CloudFormation nor IAM refuses it (IAM accepts any `service:Action`
string), so the function it was meant for fails in AWS only, on its first call.

Each `Action`/`NotAction` of every statement in the template (IAM roles' and SAM functions' and
state machines' inline policies, trust policies, queue, topic, bucket and bus policies, whichever
branch of an `Fn::If` it is in) and each `AWS::Lambda::Permission`'s `Action` is checked against
botocore's service models: the IAM prefix names one or more models (SERVICES), and the action must
match one of their operation names (a wildcard matches with fnmatch; IAM reads actions without
regard to case), or be one of the IAM-only actions below, each with why it has no operation of its
name. SAM policy templates (`SQSSendMessagePolicy: {...}`) are SAM's own, expanded by the
transform, and skipped (SAM_POLICY_TEMPLATES: a new one is noticed); so are managed policy names."""

from __future__ import annotations

import fnmatch
import functools
from typing import Any, Iterator

import botocore.session
import pytest

from local.template import load_template

#: IAM prefix -> the botocore models whose operations its actions are.
SERVICES: dict[str, tuple[str, ...]] = {
    "application-autoscaling": ("application-autoscaling",),
    "cloudwatch": ("cloudwatch",),
    "cognito-idp": ("cognito-idp",),
    "dynamodb": ("dynamodb", "dynamodbstreams"),
    "ecr": ("ecr",),
    "events": ("events",),
    "execute-api": (),  # IAM-only: API Gateway's invoke permissions (IAM_ONLY)
    "iam": ("iam",),
    "kms": ("kms",),
    "lambda": ("lambda",),
    "logs": ("logs",),
    "s3": ("s3",),
    "sagemaker": ("sagemaker", "sagemaker-runtime"),  # InvokeEndpoint is sagemaker-runtime's
    "scheduler": ("scheduler",),
    "secretsmanager": ("secretsmanager",),
    "ses": ("ses", "sesv2"),
    "sns": ("sns",),
    "sqs": ("sqs",),
    "ssm": ("ssm",),
    "states": ("stepfunctions",),
    "sts": ("sts",),
    "xray": ("xray",),
}

#: Actions IAM knows that no API operation of the same name stands for, and why.
IAM_ONLY: dict[str, str] = {
    "events:InvokeApiDestination": "EventBridge's permission to call an API destination for a rule; no API operation",
    "execute-api:Invoke": "API Gateway's permission to call an API's route; the call is the API's, not an AWS API",
    "execute-api:ManageConnections": "API Gateway's permission for the @connections API of a WebSocket API",
    "lambda:InvokeFunction": "the permission for the Invoke operation (and the deprecated InvokeAsync)",
    "lambda:InvokeFunctionUrl": "the permission to call a function URL (an HTTPS endpoint, no API operation)",
    "logs:CreateLogDelivery": "vended-log delivery permission (Step Functions' logging); no API of the name",
    "logs:GetLogDelivery": "vended-log delivery permission (Step Functions' logging); no API of the name",
    "logs:UpdateLogDelivery": "vended-log delivery permission (Step Functions' logging); no API of the name",
    "logs:DeleteLogDelivery": "vended-log delivery permission (Step Functions' logging); no API of the name",
    "logs:ListLogDeliveries": "vended-log delivery permission (Step Functions' logging); no API of the name",
    "s3:GetObjectVersion": "the permission for GetObject (and HeadObject) with a VersionId",
    "s3:ListBucket": "the permission for ListObjects, ListObjectsV2 and HeadBucket",
    "s3:ListBucketVersions": "the permission for ListObjectVersions",
    "s3:DeleteObjectVersion": "the permission for DeleteObject with a VersionId",
    "dynamodb:ConditionCheckItem": "the permission for a ConditionCheck inside TransactWriteItems",
}

#: SAM policy templates in use: SAM expands them (its own, checked by SAM's translator), skipped here.
SAM_POLICY_TEMPLATES = {"AWSSecretsManagerGetSecretValuePolicy", "DynamoDBCrudPolicy", "SNSPublishMessagePolicy",
                        "SQSSendMessagePolicy", "StepFunctionsExecutionPolicy"}


@functools.cache
def operations(prefix: str) -> tuple[str, ...]:
    session = botocore.session.get_session()
    return tuple(op.lower() for model in SERVICES[prefix] for op in session.get_service_model(model).operation_names)


def unknown(action: str) -> str | None:
    """Why `action` names nothing IAM can grant (None: it exists)."""
    if action == "*":
        return None
    prefix, _, name = action.partition(":")
    if not name:
        return f"{action!r} is not service:Action"
    if prefix.lower() not in SERVICES:
        return f"{action!r}: IAM prefix {prefix!r} is not mapped to a botocore model here (SERVICES)"
    if fnmatch.filter([a.lower() for a in IAM_ONLY], action.lower()):
        return None
    if fnmatch.filter(operations(prefix.lower()), name.lower()):
        return None
    return f"{action!r}: no {'/'.join(SERVICES[prefix.lower()]) or prefix} operation matches {name!r}"


def _statements(value: Any) -> Iterator[dict[str, Any]]:
    """Every policy statement under `value`: a mapping with Effect and Action or NotAction."""
    if isinstance(value, dict):
        if "Effect" in value and ("Action" in value or "NotAction" in value):
            yield value
        for item in value.values():
            yield from _statements(item)
    elif isinstance(value, list):
        for item in value:
            yield from _statements(item)


def template_actions(template: dict[str, Any]) -> list[tuple[str, str]]:
    """(resource, action) of every action in the template's policies (raw: both branches of an If)."""
    found = []
    for logical_id, spec in template["Resources"].items():
        properties = spec.get("Properties", {})
        for statement in _statements(properties):
            for key in ("Action", "NotAction"):
                value = statement.get(key, [])
                found += [(logical_id, a) for a in (value if isinstance(value, list) else [value])]
        if spec["Type"] in ("AWS::Lambda::Permission", "AWS::Events::EventBusPolicy") and "Action" in properties:
            found.append((logical_id, properties["Action"]))
        policies = properties.get("Policies", []) if spec["Type"].startswith("AWS::Serverless::") else []
        for policy in policies if isinstance(policies, list) else [policies]:
            if isinstance(policy, dict) and "Statement" not in policy and "PolicyDocument" not in policy:
                assert set(policy) <= SAM_POLICY_TEMPLATES, (
                    f"{logical_id}: SAM policy template(s) {sorted(set(policy) - SAM_POLICY_TEMPLATES)} are not "
                    "known here: add them to SAM_POLICY_TEMPLATES (SAM expands them) or write the statements out")
    return found


def test_every_action_the_template_names_exists():
    found = template_actions(load_template())
    assert len(found) > 40 and all(isinstance(a, str) for _, a in found), "intrinsics in an Action: read them here"
    problems = sorted({f"{resource}: {why}" for resource, action in found if (why := unknown(action))})
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("action, why", [
    ("sqs:SendMesage", "no sqs operation matches 'SendMesage'"),
    ("states:StartExecutions", "no stepfunctions operation matches 'StartExecutions'"),
    ("dynamodb:Get*Items", "no dynamodb/dynamodbstreams operation matches 'Get*Items'"),
    ("stepfunctions:StartExecution", "IAM prefix 'stepfunctions' is not mapped"),
    ("s3:GetObjectVersions", "no s3 operation matches 'GetObjectVersions'"),
    ("SendMessage", "is not service:Action"),
])
def test_a_misspelt_action_is_named(action, why):
    assert why in (unknown(action) or "")


@pytest.mark.parametrize("action", ["sqs:SendMessage", "SQS:sendmessage", "dynamodb:Get*", "s3:*", "*",
                                    "sagemaker:InvokeEndpoint", "lambda:InvokeFunction", "execute-api:Invoke"])
def test_real_actions_pass(action):
    assert unknown(action) is None


def test_a_misspelt_action_in_the_template_fails_the_check():
    template = load_template()
    role = next(spec for spec in template["Resources"].values() if spec["Type"] == "AWS::IAM::Role"
                and spec["Properties"].get("Policies"))
    statement = next(_statements(role["Properties"]["Policies"]))
    statement["Action"] = "sqs:RecieveMessage"
    assert any(unknown(a) for _, a in template_actions(template))


def test_the_iam_only_actions_have_no_operation_of_their_name():
    """An entry whose operation exists (a newer botocore model) belongs off the list."""
    for action in IAM_ONLY:
        prefix, name = action.split(":")
        assert not fnmatch.filter(operations(prefix), name.lower()), f"{action} is an operation now: drop it"
