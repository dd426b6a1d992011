"""`make preflight STACK=… REGION=…` (ops/preflight.py): the deploy checklist, made with read-only calls.

Each check passes and fails here: against moto where moto serves the service (STS, CloudFormation,
ECR, S3, SNS), and over botocore's Stubber for Service Quotas (moto has no ListServiceQuotas) and
for the answers moto does not give (AccessDenied, expired credentials, a ROLLBACK_COMPLETE stack,
a subscription pending confirmation). Every call preflight makes is read off the session's
`before-call` event: Get*, List*, Describe* and Head* only."""

from __future__ import annotations

import copy
import datetime
import io
import json
import re
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from ops import preflight

REPO = Path(__file__).resolve().parents[2]
REGION = "eu-west-1"
STACK = "decision-router-test"
REPOSITORY = "decision-router/decision-container"
REGISTRY = f"123456789012.dkr.ecr.{REGION}.amazonaws.com"
BUCKET = "decision-router-models"
MODEL_URL = f"s3://{BUCKET}/decision-router/model.tar.gz"
NO_SAMCONFIG = "/nonexistent/samconfig.toml"
GPU_POOL = ["ml.g6e.xlarge", "ml.g6.2xlarge", "ml.g5.2xlarge", "ml.g4dn.2xlarge"]
#: The template's endpoint bounds (sized for a million items a day: docs/operations/capacity.md).
MIN, MAX = (int(preflight.load_template()["Parameters"][f"Endpoint{m}Instances"]["Default"]) for m in ("Min", "Max"))
ENOUGH = {"ml.c6i.8xlarge for endpoint usage": ("L-C6I8XL", MAX + 2),
          "ml.c7i.8xlarge for processing job usage": ("L-C7I8XL", 2)}


# ------------------------------------------------------------------------------------- helpers
read_template = preflight.load_template
_shipped: list[dict[str, Any]] = []  # the shipped template as read_template reads it, once


def shipped_template_once(path: Path = preflight.TEMPLATE) -> dict[str, Any]:
    """`preflight.load_template`, the shipped template parsed once for the module (cfn-lint's reader
    takes about half a second a read): each caller gets its own deep copy, as a read gives."""
    if Path(path) != preflight.TEMPLATE:
        return read_template(path)
    if not _shipped:
        _shipped.append(read_template(path))
    return copy.deepcopy(_shipped[0])


@pytest.fixture(autouse=True)
def template_read_once(monkeypatch):
    monkeypatch.setattr(preflight, "load_template", shipped_template_once)


@pytest.fixture
def session():
    with mock_aws():
        yield boto3.Session(region_name=REGION)


def push_image(session: Any, tag: str = "cpu", region: str = REGION) -> str:
    ecr = session.client("ecr", region_name=region)
    ecr.create_repository(repositoryName=REPOSITORY)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"digest": "sha256:" + "c" * 64, "size": 1, "mediaType": "application/vnd.docker.container.image.v1+json"},
                "layers": []}
    image = ecr.put_image(repositoryName=REPOSITORY, imageManifest=json.dumps(manifest), imageTag=tag)["image"]
    return image["imageId"]["imageDigest"]


def upload_model(session: Any, region: str = REGION, key: str = "decision-router/model.tar.gz") -> None:
    s3 = session.client("s3", region_name=region)
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": region})
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"\x1f\x8b" + b"\0" * 2098)


def create_stack(session: Any, subscribe: bool = True) -> dict[str, str]:
    """A stack holding the template's two paged topics (moto confirms every subscription at once)."""
    cloudformation = session.client("cloudformation")
    body = {"Resources": {"EscalationTopic": {"Type": "AWS::SNS::Topic"}, "AlarmTopic": {"Type": "AWS::SNS::Topic"}}}
    cloudformation.create_stack(StackName=STACK, TemplateBody=json.dumps(body))
    topics = {r["LogicalResourceId"]: r["PhysicalResourceId"]
              for r in cloudformation.describe_stack_resources(StackName=STACK)["StackResources"]}
    if subscribe:
        for arn in topics.values():
            session.client("sns").subscribe(TopicArn=arn, Protocol="email", Endpoint="oncall@example.com")
    return topics


def quota(name: str, code: str, value: float, adjustable: bool = True) -> dict[str, Any]:
    return {"ServiceCode": "sagemaker", "ServiceName": "Amazon SageMaker", "QuotaName": name, "QuotaCode": code,
            "QuotaArn": f"arn:aws:servicequotas:{REGION}:123456789012:sagemaker/{code}", "Value": value,
            "Unit": "None", "Adjustable": adjustable, "GlobalQuota": False}


def quotas_client(session: Any, applied: dict[str, tuple[str, float]] | None = None,
                  defaults: dict[str, tuple[str, float]] | None = None, *, denied: bool = False) -> Any:
    """Service Quotas over a Stubber: the applied quotas on two pages, then, when asked, the defaults."""
    client = session.client("service-quotas", region_name=REGION)
    stubber = Stubber(client)
    if denied:
        stubber.add_client_error("list_service_quotas", service_error_code="AccessDeniedException",
                                 service_message="User is not authorized to perform: servicequotas:ListServiceQuotas",
                                 http_status_code=400, expected_params={"ServiceCode": "sagemaker"})
    else:
        rows = [quota(name, code, value) for name, (code, value) in (applied if applied is not None else ENOUGH).items()]
        rows.insert(0, quota("ml.m5.large for endpoint usage", "L-M5L", 20))
        stubber.add_response("list_service_quotas", {"Quotas": rows[:1], "NextToken": "page-2"}, {"ServiceCode": "sagemaker"})
        stubber.add_response("list_service_quotas", {"Quotas": rows[1:]}, {"ServiceCode": "sagemaker", "NextToken": "page-2"})
        if defaults is not None:
            stubber.add_response("list_aws_default_service_quotas",
                                 {"Quotas": [quota(name, code, value) for name, (code, value) in defaults.items()]},
                                 {"ServiceCode": "sagemaker"})
    stubber.activate()
    return client


def ready(session: Any, tag: str = "cpu") -> str:
    """The image pushed and the model uploaded: the digest to deploy."""
    digest = push_image(session, tag)
    upload_model(session)
    return digest


def good_parameters(digest: str, **more: str) -> str:
    values = {"DecisionImageUri": f"{REGISTRY}/{REPOSITORY}@{digest}", "ModelDataUrl": MODEL_URL,
              "OnCallEmail": "oncall@example.com", **more}
    return " ".join(f"{k}={v}" for k, v in values.items())


def run(session: Any, parameters: str = "", *extra: str, clients: dict[str, Any] | None = None,
        quotas: Any = None) -> tuple[int, str]:
    argv = ["--stack", STACK, "--region", REGION, "--config-file", NO_SAMCONFIG, *extra]
    if parameters:
        argv += ["--parameter-overrides", parameters]
    out = io.StringIO()
    clients = {"service-quotas": quotas if quotas is not None else quotas_client(session), **(clients or {})}
    code = preflight.main(argv, out=out, session=session, clients=clients)
    return code, out.getvalue()


def lines(output: str, check: str) -> list[str]:
    """The result lines of one check, each with its indented fixes."""
    found: list[str] = []
    current = False
    for line in output.splitlines():
        if line.startswith("    "):
            if current:
                found[-1] += "\n" + line
            continue
        current = bool(re.match(rf"^[✓✗!] {check}: ", line))
        if current:
            found.append(line)
    return found


def checker(session: Any, parameters: str = "", *, template: dict[str, Any] | None = None,
            clients: dict[str, Any] | None = None, **options: Any) -> preflight.Preflight:
    deployment = preflight.Deployment(STACK, REGION, template or preflight.load_template(),
                                      preflight.parse_overrides(parameters, "PARAMS"), ["template defaults", "PARAMS"])
    return preflight.Preflight(session, deployment, clients=clients, **options)


# ------------------------------------------------------------------------- read only, regional
def test_a_whole_run_makes_read_only_calls_and_passes_a_ready_deployment(session):
    called: list[str] = []
    # before-call sees every call sent; a Stubber answers in before-call ahead of other handlers, so
    # the calls it answers (Service Quotas) are seen in before-parameter-build, which runs for every call.
    for event in ("before-call", "before-parameter-build"):
        session.events.register(event, lambda model, **_: called.append(model.name))
    digest = push_image(session)
    upload_model(session)
    create_stack(session)
    called.clear()
    code, output = run(session, good_parameters(digest))
    assert code == 0, output
    assert "✗" not in output and output.rstrip().endswith("ready to deploy: sam build && sam deploy"), output
    assert called, "no call was seen"
    writes = [name for name in called if not re.match(r"^(Get|List|Describe|Head)[A-Z]", name)]
    assert not writes, f"preflight made calls that are not reads: {writes}"
    assert {"GetCallerIdentity", "DescribeStacks", "ListServiceQuotas", "DescribeImages", "HeadBucket", "HeadObject",
            "DescribeStackResources", "ListSubscriptionsByTopic"} <= set(called), called


def test_the_guard_refuses_a_write_before_it_is_sent(session):
    stubbed = session.client("sns", region_name=REGION)
    stubber = Stubber(stubbed)
    stubber.add_response("publish", {"MessageId": "m-1"})
    stubber.activate()
    checks = checker(session, clients={"sns": stubbed})
    with pytest.raises(preflight.WriteRefused, match="CreateBucket is not one"):
        checks.client("s3").create_bucket(Bucket="never-made", CreateBucketConfiguration={"LocationConstraint": REGION})
    assert checks.client("s3").list_buckets()["Buckets"] == []
    with pytest.raises(preflight.WriteRefused, match="Publish is not one"):  # even a call a Stubber would answer
        checks.client("sns").publish(TopicArn=f"arn:aws:sns:{REGION}:123456789012:t", Message="page")
    session.client("s3").create_bucket(Bucket="made-outside", CreateBucketConfiguration={"LocationConstraint": REGION})


def test_sts_is_called_on_the_regional_host(session):
    client = checker(session).client("sts")
    assert client.meta.endpoint_url == "https://sts.eu-west-1.amazonaws.com"
    assert client.meta.region_name == REGION
    assert preflight.sts_client("cn-north-1", session=session).meta.endpoint_url == "https://sts.cn-north-1.amazonaws.com.cn"


# --------------------------------------------------------------------------- 1. credentials
def test_credentials_print_the_account_and_the_arn(session):
    code, output = run(session, good_parameters(ready(session)))
    assert "✓ credentials: account 123456789012 as arn:aws:sts::123456789012:user/moto (sts.eu-west-1.amazonaws.com)." in output


def test_no_credentials_is_a_sentence_naming_the_permissions_page_and_nothing_else_runs(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    called: list[str] = []
    session = boto3.Session(region_name=REGION)
    session.events.register("before-call", lambda model, **_: called.append(model.name))
    out = io.StringIO()
    code = preflight.main(["--stack", STACK, "--region", REGION, "--config-file", NO_SAMCONFIG], out=out, session=session)
    output = out.getvalue()
    assert code == 1
    assert ("✗ credentials: No AWS credentials were found. Configure credentials (aws configure, AWS_PROFILE=… or aws "
            "sso login) for an identity with the read-only permissions listed in docs/operations/preflight.md, then run "
            "make preflight again.") in output
    assert "none of them ran" in output and called == ["GetCallerIdentity"]


def test_refused_credentials_say_why(session):
    sts = preflight.sts_client(REGION, session=session)
    stubber = Stubber(sts)
    stubber.add_client_error("get_caller_identity", service_error_code="ExpiredToken",
                             service_message="The security token included in the request is expired", http_status_code=403)
    stubber.activate()
    code, output = run(session, clients={"sts": sts})
    assert code == 1
    assert ("✗ credentials: AWS refused the credentials (ExpiredToken: The security token included in the request is "
            "expired). Refresh them") in output
    assert "docs/operations/preflight.md" in lines(output, "credentials")[0]


# --------------------------------------------------------------------------------- 2. quotas
def test_endpoint_and_processing_quotas_that_suffice_pass(session):
    code, output = run(session, good_parameters(ready(session)))
    assert f'✓ quota: "ml.c6i.8xlarge for endpoint usage" (L-C6I8XL) is {MAX + 2}: enough for {MAX} (EndpointMaxInstances).' \
        in output
    assert '✓ quota: "ml.c7i.8xlarge for processing job usage" (L-C7I8XL) is 2: enough for 1.' in output


def test_a_zero_endpoint_quota_fails_with_its_name_code_and_the_increase_command(session):
    quotas = quotas_client(session, {**ENOUGH, "ml.c6i.8xlarge for endpoint usage": ("L-C6I8XL", 0)})
    code, output = run(session, good_parameters(ready(session)), quotas=quotas)
    assert code == 1
    [line] = lines(output, "quota")[:1]
    assert line.startswith(f'✗ quota: "ml.c6i.8xlarge for endpoint usage" (L-C6I8XL) is 0, but the endpoint starts with {MIN} '
                           "(EndpointMinInstances): the deploy would fail. Request the increase and deploy once it is "
                           "granted (docs/operations/preflight.md#quotas)."), line
    assert ("    run: aws service-quotas request-service-quota-increase --service-code sagemaker --quota-code L-C6I8XL "
            f"--desired-value {MAX} --region eu-west-1") in line


def test_a_quota_below_the_maximum_warns_that_scaling_stops_there(session):
    quotas = quotas_client(session, {**ENOUGH, "ml.c6i.8xlarge for endpoint usage": ("L-C6I8XL", 2)})
    code, output = run(session, good_parameters(ready(session), EndpointMinInstances="1", EndpointMaxInstances="5"),
                       quotas=quotas)
    assert code == 0, output
    assert "! quota: \"ml.c6i.8xlarge for endpoint usage\" (L-C6I8XL) is 2: the endpoint starts with 1 " \
           "(EndpointMinInstances), but auto scaling stops at 2 of 5 (EndpointMaxInstances)." in output
    assert "--quota-code L-C6I8XL --desired-value 5 --region eu-west-1" in output


def test_the_gpu_pool_is_read_from_the_template_in_priority_order():
    deployment = preflight.Deployment(STACK, REGION, preflight.load_template(), {"EndpointCompute": "GPU"}, [])
    cpu, pool = preflight.endpoint_instance_types(deployment)
    assert pool == GPU_POOL
    assert cpu == "ml.c6i.8xlarge"
    changed = preflight.Deployment(STACK, REGION, preflight.load_template(), {"CpuInstanceType": "ml.c7i.4xlarge"}, [])
    assert preflight.endpoint_instance_types(changed)[0] == "ml.c7i.4xlarge"


def test_a_gpu_pool_without_quota_on_any_type_fails_and_one_type_with_quota_passes(session):
    digest = ready(session, tag="cuda")
    none = {f"{t} for endpoint usage": (f"L-GPU{i}", 0) for i, t in enumerate(GPU_POOL)}
    code, output = run(session, good_parameters(digest, EndpointCompute="GPU"),
                       quotas=quotas_client(session, {**ENOUGH, **none}))
    assert code == 1
    failed = [line for line in lines(output, "quota") if line.startswith("✗")]
    assert len(failed) == 4 and f"--quota-code L-GPU0 --desired-value {MAX}" in failed[0]
    assert failed[0].startswith('✗ quota: "ml.g6e.xlarge for endpoint usage" (L-GPU0) is 0 (GPU pool priority 1 of 4), '
                                f"but the endpoint starts with {MIN} (EndpointMinInstances), and no type of the pool has "
                                "that quota: the deploy would fail.")
    some = {**none, "ml.g5.2xlarge for endpoint usage": ("L-GPU2", MAX)}
    code, output = run(session, good_parameters(digest, EndpointCompute="GPU"), quotas=quotas_client(session, {**ENOUGH, **some}))
    assert code == 0, output
    assert f'✓ quota: "ml.g5.2xlarge for endpoint usage" (L-GPU2) is {MAX}: enough for the GPU pool priority 3 of 4' in output
    assert '! quota: "ml.g6e.xlarge for endpoint usage" (L-GPU0) is 0' in output


def test_a_short_processing_quota_warns_and_fails_when_fit_history_on_sagemaker_is_named(session):
    quotas = {**ENOUGH, "ml.c7i.8xlarge for processing job usage": ("L-C7I8XL", 0)}
    digest = ready(session)
    code, output = run(session, good_parameters(digest), quotas=quotas_client(session, quotas))
    assert code == 0, output
    assert "! quota: \"ml.c7i.8xlarge for processing job usage\" (L-C7I8XL) is 0, but make fit-history " \
           "ON=sagemaker INSTANCES=1 runs 1 (not needed to deploy)." in output
    code, output = run(session, good_parameters(digest), "--processing-instances", "2", quotas=quotas_client(session, quotas))
    assert code == 1
    assert "✗ quota: \"ml.c7i.8xlarge for processing job usage\" (L-C7I8XL) is 0, but make fit-history ON=sagemaker " \
           "INSTANCES=2 runs 2: the job would fail." in output
    assert "--quota-code L-C7I8XL --desired-value 2 --region eu-west-1" in output


def test_a_quota_the_account_never_changed_is_read_from_the_defaults(session):
    applied = {"ml.c7i.8xlarge for processing job usage": ("L-C7I8XL", 1)}
    defaults = {"ml.c6i.8xlarge for endpoint usage": ("L-C6I8XL", MAX)}
    code, output = run(session, good_parameters(ready(session)), quotas=quotas_client(session, applied, defaults))
    assert f'✓ quota: "ml.c6i.8xlarge for endpoint usage" (L-C6I8XL) is {MAX} (the default): enough for {MAX}' in output


def test_without_service_quotas_permission_it_says_so_and_carries_on(session):
    digest = push_image(session)
    upload_model(session)
    code, output = run(session, good_parameters(digest), quotas=quotas_client(session, denied=True))
    assert code == 0, output
    assert ("! quotas: The SageMaker quotas was not checked: your credentials may not call servicequotas:ListServiceQuotas. "
            "Add the read-only permissions listed in docs/operations/preflight.md to check it.") in output
    assert "✓ image:" in output and "✓ model:" in output


# ---------------------------------------------------------------------------------- 3. image
def test_an_image_in_ecr_by_digest_passes(session):
    digest = push_image(session)
    [line] = lines(run(session, good_parameters(digest))[1], "image")
    assert line.startswith(f"✓ image: {REPOSITORY}@{digest[:19]}… is in ECR of eu-west-1 (tags cpu, pushed ")


def test_an_image_digest_not_pushed_fails_with_what_to_run(session):
    push_image(session)
    code, output = run(session, good_parameters("sha256:" + "d" * 64))
    assert code == 1
    [line] = lines(output, "image")
    assert line.startswith(f"✗ image: {REPOSITORY} in eu-west-1 has no image of digest sha256:ddd")
    assert "docs/container/image.md" in line and "run: aws ecr describe-images" in line


def test_an_image_by_tag_is_resolved_to_the_digest_to_pin(session):
    digest = push_image(session)
    code, output = run(session, good_parameters(digest).replace(f"@{digest}", ":cpu"))
    assert code == 1  # template.yaml takes DecisionImageUri by digest only
    [line] = lines(output, "image")
    assert "by its tag cpu, which can move to another image and which the template refuses" in line
    assert f"    pin: DecisionImageUri={REGISTRY}/{REPOSITORY}@{digest}" in line
    # a template that accepted tags: a warning, with the same digest to pin
    template = preflight.load_template()
    template["Parameters"]["DecisionImageUri"].pop("AllowedPattern")
    checks = checker(session, f"DecisionImageUri={REGISTRY}/{REPOSITORY}:cpu", template=template)
    [result] = checks.image()
    assert result.mark == "!" and result.fixes == [f"pin: DecisionImageUri={REGISTRY}/{REPOSITORY}@{digest}"]


def test_an_image_in_another_regions_registry_fails(session):
    digest = push_image(session, region="us-west-2")
    wrong = f"DecisionImageUri=123456789012.dkr.ecr.us-west-2.amazonaws.com/{REPOSITORY}@{digest}"
    [result] = checker(session, wrong).image()
    assert result.mark == "✗"
    assert result.text.startswith("DecisionImageUri is in ECR of us-west-2, but the endpoint in eu-west-1 pulls from its "
                                  f"own region's registry. Push (or replicate) the image to {REGISTRY}/{REPOSITORY}")


def test_samconfigs_placeholders_fail_the_image_model_and_pages(session, tmp_path):
    """The shipped samconfig.toml, as it is before its placeholders are replaced."""
    out = io.StringIO()
    code = preflight.main(["--region", REGION, "--config-file", str(REPO / "samconfig.toml")], out=out, session=session,
                          clients={"service-quotas": quotas_client(session)})
    output = out.getvalue()
    assert code == 1
    assert output.startswith("preflight of stack decision-router in eu-west-1 (parameters: template defaults, "
                             "samconfig.toml [default]); read-only calls only")
    assert "✗ image: DecisionImageUri is still the placeholder REPLACE_WITH_IMAGE_URI@sha256:REPLACE_WITH_DIGEST." in output
    assert "✗ model: ModelDataUrl is still the placeholder s3://REPLACE-WITH-BUCKET/decision-router/model.tar.gz." in output
    assert "✗ pages: OnCallEmail is still the placeholder REPLACE_WITH_ONCALL_EMAIL." in output


# ---------------------------------------------------------------------------------- 4. model
def test_a_model_archive_in_the_regions_bucket_passes(session):
    upload_model(session)
    [result] = checker(session, f"ModelDataUrl={MODEL_URL}").model()
    assert result.mark == "✓" and result.text.startswith(f"{MODEL_URL} is there (2.1 KB, uploaded ")


def test_a_missing_model_archive_fails_with_the_commands_that_make_and_upload_it(session):
    upload_model(session, key="other/model.tar.gz")
    [result] = checker(session, f"ModelDataUrl={MODEL_URL}").model()
    assert result.mark == "✗"
    assert result.text == (f"There is no object {MODEL_URL}. Package the GGUF as model.tar.gz and upload it there "
                           "(docs/container/model-package.md).")
    assert result.fixes == ["run: python container/package_model.py MODEL.gguf --sha256 <its sha256> --output model.tar.gz "
                            f"&& aws s3 cp model.tar.gz {MODEL_URL} --region eu-west-1"]


def test_a_model_archive_in_another_regions_bucket_fails(session):
    upload_model(session, region="eu-central-1")
    [result] = checker(session, f"ModelDataUrl={MODEL_URL}").model()
    assert result.mark == "✗" and result.text.startswith(f"The bucket {BUCKET} is in eu-central-1, but SageMaker in eu-west-1")


# ---------------------------------------------------------------------------------- 5. pages
def test_confirmed_subscriptions_of_the_stacks_topics_pass(session):
    create_stack(session)
    checks = checker(session, "OnCallEmail=oncall@example.com")
    checks.stack()
    assert [(r.mark, r.text) for r in checks.pages()] == [
        ("✓", "AlarmTopic: 1 confirmed (email oncall@example.com)."),
        ("✓", "EscalationTopic: 1 confirmed (email oncall@example.com)."),
    ]


def test_the_topics_checked_are_those_the_template_subscribes_people_to():
    topics = preflight.human_topics(preflight.load_template())
    assert topics == {"EscalationTopic": ["OnCallEmail", "OnCallWebhookUrl"],
                      "AlarmTopic": ["AlarmEmail", "OnCallEmail", "OnCallWebhookUrl"]}


def test_pending_confirmations_are_reported_and_all_pending_fails(session):
    topics = create_stack(session, subscribe=False)
    sns = session.client("sns", region_name=REGION)
    stubber = Stubber(sns)

    def subscription(arn: str, protocol: str, endpoint: str, pending: bool) -> dict[str, str]:
        return {"SubscriptionArn": "PendingConfirmation" if pending else f"{arn}:1", "Owner": "123456789012",
                "Protocol": protocol, "Endpoint": endpoint, "TopicArn": arn}

    alarm, escalation = topics["AlarmTopic"], topics["EscalationTopic"]
    stubber.add_response("list_subscriptions_by_topic", {"Subscriptions": [
        subscription(alarm, "email", "oncall@example.com", pending=True)]}, {"TopicArn": alarm})
    stubber.add_response("list_subscriptions_by_topic", {"Subscriptions": [
        subscription(escalation, "email", "oncall@example.com", pending=True),
        subscription(escalation, "https", "https://pager.example.com/sns", pending=False)]}, {"TopicArn": escalation})
    stubber.activate()
    checks = checker(session, "OnCallEmail=oncall@example.com", clients={"sns": sns})
    checks.stack()
    alarm_result, escalation_result = checks.pages()
    assert alarm_result.mark == "✗"
    assert alarm_result.text.startswith("AlarmTopic: every subscription is pending confirmation (email oncall@example.com), "
                                        "so its pages reach nobody.")
    assert alarm_result.fixes[0] == (f"run: aws sns subscribe --topic-arn {alarm} --protocol email --notification-endpoint "
                                     "oncall@example.com --region eu-west-1   # sends the confirmation again")
    assert escalation_result.mark == "!"
    assert escalation_result.text.startswith("EscalationTopic: 1 confirmed, 1 pending confirmation (email oncall@example.com)")


def test_before_the_first_deploy_the_on_call_parameters_are_checked(session):
    checks = checker(session, "OnCallEmail=oncall@example.com")
    checks.stack()
    [result] = checks.pages()
    assert result.mark == "✓" and result.text.startswith("oncall@example.com will be subscribed to the on-call topic")
    [result] = checker(session, "").pages()
    assert result.mark == "✗" and "neither OnCallEmail nor OnCallWebhookUrl is set" in result.text
    assert "docs/destinations/on-call.md" in result.text
    [result] = checker(session, "OnCallEmail=oncall").pages()
    assert result.mark == "✗" and "OnCallEmail=oncall is not an e-mail address" in result.text


# ---------------------------------------------------------------------------------- 6. stack
def test_a_stack_that_does_not_exist_or_is_complete_passes(session):
    [result] = checker(session).stack()
    assert (result.mark, result.text) == ("✓", f"{STACK} does not exist in eu-west-1 yet; sam deploy creates it.")
    create_stack(session)
    [result] = checker(session).stack()
    assert (result.mark, result.text) == ("✓", f"{STACK} exists (CREATE_COMPLETE); sam deploy updates it.")


def test_a_rollback_complete_stack_must_be_deleted_before_the_deploy(session):
    cloudformation = session.client("cloudformation", region_name=REGION)
    stubber = Stubber(cloudformation)
    stubber.add_response("describe_stacks", {"Stacks": [{
        "StackName": STACK, "StackStatus": "ROLLBACK_COMPLETE",
        "CreationTime": datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)}]}, {"StackName": STACK})
    stubber.add_response("describe_stack_resources", {"StackResources": []}, {"StackName": STACK})
    stubber.activate()
    code, output = run(session, good_parameters(push_image(session)), clients={"cloudformation": cloudformation})
    assert code == 1
    [line] = lines(output, "stack")
    assert line.startswith(f"✗ stack: {STACK} is ROLLBACK_COMPLETE: its first create failed and rolled back, and "
                           "CloudFormation cannot update such a stack. Delete it, then deploy again "
                           "(docs/operations/preflight.md#stack).")
    assert f"    run: aws cloudformation delete-stack --stack-name {STACK} --region eu-west-1" in line


# ------------------------------------------------------------------------- ExistingEndpointName
def test_an_existing_endpoint_is_described_instead_of_the_image_and_model(session):
    sagemaker = session.client("sagemaker", region_name=REGION)
    stubber = Stubber(sagemaker)
    stubber.add_response("describe_endpoint", {
        "EndpointName": "shared-endpoint", "EndpointArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/shared-endpoint",
        "EndpointStatus": "InService", "CreationTime": datetime.datetime(2026, 12, 1),
        "LastModifiedTime": datetime.datetime(2026, 12, 1)}, {"EndpointName": "shared-endpoint"})
    stubber.activate()
    checks = checker(session, "ExistingEndpointName=shared-endpoint", clients={"sagemaker": sagemaker})
    [result] = checks.endpoint()
    assert result.mark == "✓" and result.text.startswith("ExistingEndpointName=shared-endpoint is InService")
    assert checks.image() == [] and checks.model() == []
    [result] = checker(session, "ExistingEndpointName=missing-endpoint").endpoint()  # moto: no such endpoint
    assert result.mark == "✗" and result.text.startswith("ExistingEndpointName=missing-endpoint: there is no such endpoint")


# ----------------------------------------------------------------------------------- parameters
def test_parameters_come_from_the_template_then_samconfig_then_params(tmp_path):
    config = tmp_path / "samconfig.toml"
    config.write_text('version = 0.1\n[prod.global.parameters]\nstack_name = "router-prod"\nregion = "eu-west-1"\n'
                      '[prod.deploy.parameters]\nparameter_overrides = ["EndpointCompute=GPU", "EndpointMaxInstances=4", '
                      '"OnCallEmail=a@example.com"]\n', encoding="utf-8")
    args = preflight.parser().parse_args(["--config-file", str(config), "--config-env", "prod",
                                          "--parameter-overrides", 'EndpointMaxInstances=6 AlarmEmail="ops@example.com"'])
    deployment, profile = preflight.deployment_of(args, lambda profile: None)
    assert (deployment.stack, deployment.region, profile) == ("router-prod", "eu-west-1", None)
    assert deployment.origins == ["template defaults", "samconfig.toml [prod]", "PARAMS"]
    values = deployment.parameters
    assert (values["EndpointCompute"], values["EndpointMaxInstances"], values["AlarmEmail"]) == ("GPU", "6", "ops@example.com")
    assert values["CpuInstanceType"] == "ml.c6i.8xlarge"  # the template's default
    with pytest.raises(preflight.PreflightError, match=r"has no environment \[staging\]"):
        preflight.deployment_of(preflight.parser().parse_args(["--config-file", str(config), "--config-env", "staging"]),
                                lambda profile: None)
    assert preflight.parse_overrides("ParameterKey=EndpointCompute,ParameterValue=GPU", "PARAMS") == {"EndpointCompute": "GPU"}


def test_parameters_the_template_refuses_fail(session):
    [result] = checker(session, "EndpointCompute=GPU OnCallEmail=a@example.com").parameters()
    assert result.mark == "✓" and result.text == "2 set in PARAMS over the template's defaults; the template accepts them."
    [result] = checker(session, "EndpointCompute=TPU EndpointMinInstances=0 NoSuchKnob=1").parameters()
    assert result.mark == "✗"
    assert result.text.startswith("the template has no parameter NoSuchKnob (CloudFormation refuses the deploy); "
                                  "EndpointCompute=TPU is not one of CPU, GPU; EndpointMinInstances=0 is below its MinValue 1.")


# -------------------------------------------------------------------------- make, docs, defaults
def test_the_processing_default_is_fit_historys():
    history = (REPO / "training/history.py").read_text(encoding="utf-8")
    default = re.search(r'"--instance-type", default="([^"]+)"', history)
    assert default and default[1] == preflight.DEFAULT_PROCESSING_INSTANCE_TYPE


def test_make_preflight_is_a_documented_target_whose_flags_the_command_takes():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    phony = re.search(r"^\.PHONY:(.*)$", makefile, flags=re.M)
    assert phony and "preflight" in phony[1].split()
    assert re.search(r'^\t@echo "make preflight STACK=name REGION=region', makefile, flags=re.M)
    recipe = re.search(r"^preflight: \$\(STAMP\)\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert recipe and "$(PY) -m ops.preflight" in recipe[1]
    flags = set(re.findall(r"(--[a-z-]+)", recipe[1]))
    known = {option for action in preflight.parser()._actions for option in action.option_strings}
    assert flags and flags <= known, flags - known


def test_the_docs_list_every_check_its_permissions_and_put_preflight_before_the_deploy():
    page = (REPO / "docs/operations/preflight.md").read_text(encoding="utf-8")
    for action in ("sts:GetCallerIdentity", "cloudformation:DescribeStacks", "servicequotas:ListServiceQuotas",
                   "servicequotas:ListAWSDefaultServiceQuotas", "sagemaker:DescribeEndpoint", "ecr:DescribeImages",
                   "s3:GetObject", "s3:ListBucket", "cloudformation:DescribeStackResources", "sns:ListSubscriptionsByTopic"):
        assert action in page, action
    assert "## What it cannot check" in page
    assert "operations/preflight.md" in (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert "preflight.md" in (REPO / "docs/operations/index.md").read_text(encoding="utf-8")
    for doc in ("docs/quickstart.md", "README.md"):
        text = (REPO / doc).read_text(encoding="utf-8")
        assert 0 <= text.index("make preflight") < text.index("sam deploy --guided"), doc
