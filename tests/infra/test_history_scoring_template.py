"""template.yaml's part in make fit-history ON=sagemaker: the role a history-scoring processing
job runs as grants what the job does and nothing more, its S3 prefix expires, and the stack outputs
what the scorer reads, with the endpoint's resources only."""

from __future__ import annotations

import fnmatch

import pytest

from local.cloudformation import Stack

IMAGE = "1.dkr.ecr.us-east-1.amazonaws.com/d@sha256:" + "a" * 64
#: What training/sagemaker_scoring.py reads of the stack.
SCORING_OUTPUTS = {"HistoryScoringRoleArn", "HistoryScoringUri", "DecisionImage", "DecisionModelDataUrl", "DecisionCompute"}
CPU = {"DecisionImageUri": IMAGE, "ModelDataUrl": "s3://models/smollm2/model.tar.gz", "EndpointCompute": "CPU"}


@pytest.fixture(scope="module")
def stack() -> Stack:
    return Stack.load(parameters=CPU)


def test_the_scoring_role_is_assumed_by_sagemaker_alone_for_this_accounts_history_jobs(stack):
    """No confused deputy: SageMaker assumes it only for a processing job of this account and
    region named as the scorer names its jobs (job_name: <stack>-history-<time>-<hex>)."""
    from training.sagemaker_scoring import job_name

    trust = stack.resolve(stack.properties("HistoryScoringRole"))["AssumeRolePolicyDocument"]
    jobs = "arn:aws:sagemaker:us-east-1:123456789012:processing-job/*-history-*"
    assert trust["Statement"] == [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"},
                                   "Action": "sts:AssumeRole",
                                   "Condition": {"StringEquals": {"aws:SourceAccount": "123456789012"},
                                                 "ArnLike": {"aws:SourceArn": jobs}}}]
    for stack_name in ("decision-router", "A-Stack-Name-Far-Longer-Than-A-Job-Name-May-Be-0123456789"):
        arn = f"arn:aws:sagemaker:us-east-1:123456789012:processing-job/{job_name(stack_name).lower()}"
        assert fnmatch.fnmatchcase(arn, jobs), arn


def test_the_scoring_role_grants_exactly_what_a_job_needs(stack):
    (policy,) = stack.resolve(stack.properties("HistoryScoringRole"))["Policies"]
    bucket = stack.get_att("HeadBucket", "Arn")
    logs = "arn:aws:logs:us-east-1:123456789012:log-group:/aws/sagemaker/ProcessingJobs:*"
    grants = {}
    for statement in policy["PolicyDocument"]["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        grants[statement["Sid"]] = (sorted(actions), statement["Resource"], statement.get("Condition"))
    assert grants == {
        "ReadDecisions": (["s3:GetObject"], f"{bucket}/history-scoring/*/input/*", None),
        "WriteSignals": (["s3:PutObject"], f"{bucket}/history-scoring/*/output/*", None),
        "ListRuns": (["s3:ListBucket"], bucket, {"StringLike": {"s3:prefix": "history-scoring/*"}}),
        "ModelArchive": (["s3:GetObject"], "arn:aws:s3:::models/smollm2/model.tar.gz", None),
        "ModelArchiveListing": (["s3:ListBucket"], "arn:aws:s3:::models", None),
        "PullImage": (["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
                      "arn:aws:ecr:us-east-1:1:repository/d", None),  # DecisionImageUri's repository alone
        "EcrToken": (["ecr:GetAuthorizationToken"], "*", None),  # no resource-level permissions
        "JobLogs": (["logs:CreateLogGroup", "logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"], logs, None),
        "JobMetrics": (["cloudwatch:PutMetricData"], "*",  # no resource-level permissions; SageMaker's namespaces only
                       {"StringLike": {"cloudwatch:namespace": ["/aws/sagemaker/*", "AWS/SageMaker"]}}),
    }
    # no wildcard action anywhere
    assert not [a for actions, _, _ in grants.values() for a in actions if a.endswith("*")]


@pytest.mark.parametrize("uri,repository", [
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/decision-router@sha256:", "123456789012:repository/decision-router"),
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/decision-container@sha256:",
     "123456789012:repository/team/decision-container"),
    ("210987654321.dkr.ecr.us-east-1.amazonaws.com/a.b/c_d/e-f@sha256:", "210987654321:repository/a.b/c_d/e-f"),
    ("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/team/decision@sha256:", "123456789012:repository/team/decision"),
])
def test_the_scoring_role_pulls_from_the_one_repository_the_image_uri_names(uri, repository):
    stack = Stack.load(parameters={**CPU, "DecisionImageUri": uri + "b" * 64})
    (policy,) = stack.resolve(stack.properties("HistoryScoringRole"))["Policies"]
    (pull,) = [s for s in policy["PolicyDocument"]["Statement"] if s["Sid"] == "PullImage"]
    assert pull["Resource"] == f"arn:aws:ecr:us-east-1:{repository}"


def test_each_runs_files_expire_with_the_prefix(stack):
    rules = {r["Id"]: r for r in stack.properties("HeadBucket")["LifecycleConfiguration"]["Rules"]}
    rule = rules["history-scoring"]
    assert rule["Status"] == "Enabled" and rule["Prefix"] == "history-scoring/"
    assert rule["ExpirationInDays"] <= 30 and rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    assert stack.outputs()["HistoryScoringUri"] == f"s3://{stack.ref('HeadBucket')}/history-scoring/"


def test_the_stack_outputs_what_the_scorer_reads_with_its_own_endpoint_only(stack):
    outputs = stack.outputs()
    assert {key: outputs[key] for key in SCORING_OUTPUTS} == {
        "HistoryScoringRoleArn": stack.get_att("HistoryScoringRole", "Arn"),
        "HistoryScoringUri": f"s3://{stack.ref('HeadBucket')}/history-scoring/",
        "DecisionImage": IMAGE, "DecisionModelDataUrl": CPU["ModelDataUrl"], "DecisionCompute": "CPU"}
    existing = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})
    assert "HistoryScoringRole" not in existing.resources
    assert not SCORING_OUTPUTS & set(existing.outputs())
