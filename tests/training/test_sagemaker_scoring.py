"""make fit-history ON=sagemaker: an export's decision shards scored in one SageMaker Processing job
on the stack's image, role and model, and its signals brought back.

The fast tests run in moto: the stack is a tiny CloudFormation stack holding template.yaml's own
outputs (as resolved for a stack with its own endpoint) and the HeadBucket the template declares.
moto marks a processing job Completed at once and runs nothing, so what a job would do (upload
signal shards, fail, keep running) is done here by botocore event handlers on the client's calls
or by setting moto's record of the job. The test marked `model` scores for real: a handler runs
the image's batch scorer over the uploaded shards when the job is created."""

from __future__ import annotations

import copy
import csv
import json
import re
from pathlib import Path
from typing import Any, Callable

import boto3
import numpy as np
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sagemaker.models import sagemaker_backends

from decision_contract import ModelInfo
from decision_contract.signals import SHARD_SUFFIX, read_shard, write_shard
from local.cloudformation import Stack
from tests.training.test_history import clinc150_slice
from training import processing_estimate as estimates
from training import sagemaker_scoring as scoring
from training.history_policy import HistoryError
from training.processing_estimate import estimate_for, offer, shard_count
from training.sagemaker_scoring import SageMakerScoring, ScoringStack, fetch_export

REGION = "us-east-1"
STACK = "decisions"
IMAGE = f"{DEFAULT_ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com/decision-router@sha256:" + "a" * 64
CPU = {"DecisionImageUri": IMAGE, "ModelDataUrl": "s3://models/smollm2/model.tar.gz", "EndpointCompute": "CPU"}
MODEL = ModelInfo(file="SmolLM2-135M-Instruct.Q4_1.gguf", bytes=1, sha256="b" * 64, context_size=4096, threads=4,
                  gpu_layers=0, llama_cpp_python_version="test", hidden_size=8)
JOB_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


@pytest.fixture(scope="module")
def template() -> Stack:
    return Stack.load(parameters=CPU, stack_name=STACK)


class World:
    """The deployed stack in moto, the CreateProcessingJob requests made, and the job's doings."""

    def __init__(self, template: Stack, outputs: dict[str, str] | None = None,
                 session: boto3.session.Session | None = None) -> None:
        self.session = session or boto3.session.Session(region_name=REGION)
        template.create(only=["HeadBucket"])
        self.bucket = template.ref("HeadBucket")
        self.outputs = template.outputs() if outputs is None else outputs
        body = {"Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
                "Outputs": {key: {"Value": value} for key, value in self.outputs.items()}}
        self.session.client("cloudformation").create_stack(StackName=STACK, TemplateBody=json.dumps(body))
        self.s3 = self.session.client("s3")
        self.requests: list[dict[str, Any]] = []
        #: What "the job" does once CreateProcessingJob returns (moto itself runs nothing).
        self.job_does: Callable[[dict[str, Any]], None] = lambda request: None
        self.said: list[str] = []
        self.session.events.register("provide-client-params.sagemaker.CreateProcessingJob",
                                     lambda params, **_: self.requests.append(copy.deepcopy(params)))
        self.session.events.register("after-call.sagemaker.CreateProcessingJob",
                                     lambda **_: self.job_does(self.requests[-1]))

    def scorer(self, instances: int = 2, instance_type: str = "ml.c7i.xlarge") -> SageMakerScoring:
        return SageMakerScoring.from_stack(STACK, instances=instances, instance_type=instance_type, say=self.said.append,
                                           session=self.session)

    def job(self, name: str) -> Any:
        return sagemaker_backends[DEFAULT_ACCOUNT_ID][REGION].processing_jobs[name]

    def keys(self, prefix: str) -> list[str]:
        return [o["Key"] for o in self.s3.list_objects_v2(Bucket=self.bucket, Prefix=prefix).get("Contents", [])]

    def put_output(self, request: dict[str, Any], name: str, body: bytes) -> None:
        bucket, key = split(request["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"])
        self.s3.put_object(Bucket=bucket, Key=key + name, Body=body)

    def scores(self, request: dict[str, Any], tmp: Path, *, shards: list[str] | None = None,
               short: int = 0) -> None:
        """Upload what the batch scorer writes: a signals shard per input shard (or `shards`), a
        row for each of its lines but the first of part-00000, whose error is in the errors file,
        and model.json. `short`: rows left out of each shard (an upload cut short)."""
        bucket, prefix = split(request["ProcessingInputs"][0]["S3Input"]["S3Uri"])
        inputs = shards if shards is not None else [Path(k).name for k in self.keys(prefix)]
        for name in inputs:
            lines = len(self.s3.get_object(Bucket=bucket, Key=prefix + name)["Body"].read().splitlines())
            rows = lines - (name == "part-00000.jsonl") - short
            path = write_shard(tmp / "out" / (name.removesuffix(".jsonl") + SHARD_SUFFIX), MODEL.sha256,
                               [f"{i:064x}" for i in range(rows)], np.ones((rows, 8)), [[0.5, 0.25]] * rows,
                               [0.75] * rows, ["direct-options-v1"] * rows)
            self.put_output(request, path.name, path.read_bytes())
        self.put_output(request, "part-00000.errors.jsonl", b'{"line": 1, "reason": "prompt too long"}\n')
        self.put_output(request, "model.json", MODEL.model_dump_json().encode())


def split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


@pytest.fixture
def world(template):
    with mock_aws():
        yield World(template)


def shards(folder: Path, sizes: list[int]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, size in enumerate(sizes):
        (folder / f"part-{i:05d}.jsonl").write_text("".join(json.dumps({"id": f"d{i}-{j}"}) + "\n" for j in range(size)))
    return folder


# ----------------------------------------------------------------------------------- the job
def test_one_job_scores_the_shards_on_the_stacks_image_role_and_model_and_the_signals_come_back(world, tmp_path):
    world.job_does = lambda request: world.scores(request, tmp_path)
    model = world.scorer(instances=2, instance_type="ml.c7i.xlarge").run(shards(tmp_path / "in", [3, 3, 2, 2]),
                                                                         tmp_path / "signals", yes=True)
    assert model == MODEL
    (request,) = world.requests
    name = request["ProcessingJobName"]
    assert JOB_NAME.match(name) and name.startswith(f"{STACK}-history-")
    assert request["AppSpecification"] == {"ImageUri": IMAGE,
                                           "ContainerEntrypoint": ["/opt/decision-server/bin/decision-server", "batch"]}
    assert request["RoleArn"] == world.outputs["HistoryScoringRoleArn"]
    decisions, model_input = (i["S3Input"] for i in request["ProcessingInputs"])
    run_uri = f"{world.outputs['HistoryScoringUri']}{name}/"
    assert decisions == {"S3Uri": f"{run_uri}input/", "LocalPath": "/opt/ml/processing/input/decisions", "S3DataType": "S3Prefix",
                         "S3InputMode": "File", "S3DataDistributionType": "ShardedByS3Key"}
    assert model_input["S3Uri"] == CPU["ModelDataUrl"] and model_input["S3DataDistributionType"] == "FullyReplicated"
    assert model_input["LocalPath"] == "/opt/ml/processing/input/model"
    # every shard was uploaded under the run's input prefix before the job started
    assert world.keys(split(decisions["S3Uri"])[1]) == [f"{split(decisions['S3Uri'])[1]}part-{i:05d}.jsonl" for i in range(4)]
    (output,) = request["ProcessingOutputConfig"]["Outputs"]
    assert output["S3Output"] == {"S3Uri": f"{run_uri}output/", "LocalPath": "/opt/ml/processing/output/signals",
                                  "S3UploadMode": "Continuous"}
    assert request["ProcessingResources"]["ClusterConfig"] == {"InstanceCount": 2, "InstanceType": "ml.c7i.xlarge",
                                                               "VolumeSizeInGB": scoring.VOLUME_GB}
    assert request["NetworkConfig"] == {"EnableNetworkIsolation": True}
    assert request["Environment"] == {"SM_LLAMA_CPP_THREADS": "4"}  # an ml.c7i.xlarge's vCPUs; no GPU layers
    assert 3600 <= request["StoppingCondition"]["MaxRuntimeInSeconds"] <= estimates.MAX_RUNTIME_SECONDS
    # what the job wrote came back, and the job is the one moto holds
    assert sorted(p.name for p in (tmp_path / "signals").iterdir()) == [
        "model.json", "part-00000.errors.jsonl", *(f"part-{i:05d}{SHARD_SUFFIX}" for i in range(4))]
    assert read_shard(tmp_path / "signals" / f"part-00000{SHARD_SUFFIX}").model_sha256 == MODEL.sha256
    assert world.job(name).role_arn == world.outputs["HistoryScoringRoleArn"]
    said = "\n".join(world.said)
    assert "2 x ml.c7i.xlarge" in said and "Completed" in said and "1 item(s) could not be scored" in said


def test_a_gpu_type_offloads_every_layer_and_its_estimate_is_unknown(template):
    with mock_aws():
        outputs = {**template.outputs(), "DecisionCompute": "GPU"}
        world = World(template, outputs)
        scorer = world.scorer(instances=1, instance_type="ml.g5.xlarge")
        request = scorer.job_request("decisions-history-x", 1000)
    assert request["Environment"] == {"SM_LLAMA_CPP_THREADS": "4", "SM_LLAMA_CPP_N_GPU_LAYERS": "999"}
    assert request["StoppingCondition"]["MaxRuntimeInSeconds"] == estimates.UNMEASURED_RUNTIME_SECONDS
    text = scorer.estimate(1000)
    assert "unmeasured" in text and "unknown" in text and "$1.408/h" in text


def test_the_cpu_image_is_refused_on_a_gpu_instance_it_would_leave_idle(world):
    with pytest.raises(HistoryError, match="CPU image"):
        world.scorer(instance_type="ml.g5.xlarge")


@pytest.mark.parametrize("instances, instance_type, message", [
    (1, "ml.c7i.9xlarge", "not a SageMaker Processing instance type"),
    (0, "ml.c7i.xlarge", "1 to 100 instances"),
])
def test_what_sagemaker_would_refuse_is_refused_before_anything_is_uploaded(world, instances, instance_type, message):
    with pytest.raises(HistoryError, match=message):
        world.scorer(instances=instances, instance_type=instance_type)


def test_without_yes_it_prints_the_estimate_and_starts_nothing(world, tmp_path):
    with pytest.raises(HistoryError, match=r"--yes .*YES=1"):
        world.scorer().run(shards(tmp_path / "in", [5, 5]), tmp_path / "signals", yes=False)
    assert world.requests == [] and world.keys("history-scoring/") == []
    assert world.said[0].startswith("2 x ml.c7i.xlarge (4 vCPUs) for 10 items")


def test_progress_is_the_shards_already_uploaded_while_the_job_runs(world, tmp_path):
    def starts(request):
        world.job(request["ProcessingJobName"]).processing_job_status = "InProgress"
        world.scores(request, tmp_path, shards=["part-00000.jsonl"])

    def poll_wait(seconds):  # the rest of the shards are done by the next poll
        request = world.requests[-1]
        world.scores(request, tmp_path)
        world.job(request["ProcessingJobName"]).processing_job_status = "Completed"

    world.job_does = starts
    scorer = world.scorer()
    scorer.sleep = poll_wait
    scorer.run(shards(tmp_path / "in", [4, 4, 4]), tmp_path / "signals", yes=True)
    progress = [line for line in world.said if line.startswith("scored ")]
    assert len(progress) == 1 and progress[0].startswith("scored 1 of 3 shards (4 of 12 items), ")
    assert "items/s, about" in progress[0] and "left" in progress[0]


def test_ctrl_c_while_waiting_stops_the_job(world, tmp_path):
    world.job_does = lambda request: setattr(world.job(request["ProcessingJobName"]), "processing_job_status", "InProgress")

    def ctrl_c(seconds):
        raise KeyboardInterrupt

    scorer = world.scorer()
    scorer.sleep = ctrl_c
    with pytest.raises(HistoryError, match=r"stopped \(Ctrl-C\) with 0 of 2 shards scored"):
        scorer.run(shards(tmp_path / "in", [2, 2]), tmp_path / "signals", yes=True)
    name = world.requests[-1]["ProcessingJobName"]
    described = world.session.client("sagemaker").describe_processing_job(ProcessingJobName=name)
    assert described["ProcessingJobStatus"] == "Stopped"
    assert not (tmp_path / "signals").exists()


def test_a_failed_job_says_why(world, tmp_path):
    def fails(request):
        job = world.job(request["ProcessingJobName"])
        job.processing_job_status, job.failure_reason = "Failed", "AlgorithmError: no *.gguf in the model archive"

    world.job_does = fails
    with pytest.raises(HistoryError, match="failed: AlgorithmError: no \\*.gguf in the model archive"):
        world.scorer().run(shards(tmp_path / "in", [2, 2]), tmp_path / "signals", yes=True)


def test_a_completed_job_without_model_json_is_an_error(world, tmp_path):
    with pytest.raises(HistoryError, match="without writing model.json"):
        world.scorer().run(shards(tmp_path / "in", [2, 2]), tmp_path / "signals", yes=True)


def test_fewer_shards_than_instances_runs_one_instance_a_shard(world, tmp_path):
    """An instance that ShardedByS3Key gives no object would exit non-zero and fail the whole job
    (and costs as much as one that scores): the job asks for as many instances as shards."""
    world.job_does = lambda request: world.scores(request, tmp_path)
    world.scorer(instances=4).run(shards(tmp_path / "in", [2, 2]), tmp_path / "signals", yes=True)
    (request,) = world.requests
    assert request["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 2
    assert "2 shard(s) to score: 2 instance(s) instead of 4" in world.said[0]
    assert world.said[1].startswith("2 x ml.c7i.xlarge")  # the estimate is for the instances that run


def test_a_shard_that_never_arrived_fails_the_download_naming_it(world, tmp_path):
    world.job_does = lambda request: world.scores(request, tmp_path, shards=["part-00000.jsonl", "part-00002.jsonl"])
    with pytest.raises(HistoryError, match=r"1 of 3 signal shards never reached s3://.*: part-00001\.signals\.npz"):
        world.scorer().run(shards(tmp_path / "in", [2, 2, 2]), tmp_path / "signals", yes=True)


def test_a_shard_cut_short_or_truncated_is_refused_by_name(world, tmp_path):
    world.job_does = lambda request: world.scores(request, tmp_path, short=1)
    with pytest.raises(HistoryError, match=r"part-00000\.signals\.npz .* holds 1 rows and 1 errors for 3 input lines"):
        world.scorer().run(shards(tmp_path / "in", [3, 3]), tmp_path / "signals", yes=True)

    def truncated(request):
        world.scores(request, tmp_path)
        body = (tmp_path / "out" / f"part-00001{SHARD_SUFFIX}").read_bytes()
        world.put_output(request, f"part-00001{SHARD_SUFFIX}", body[: len(body) // 2])

    world.job_does = truncated
    with pytest.raises(HistoryError, match=r"part-00001\.signals\.npz from s3://.* is not a whole signals shard"):
        world.scorer().run(shards(tmp_path / "in2", [3, 3]), tmp_path / "signals2", yes=True)


def test_a_quota_refusal_is_named_as_a_quota_with_what_to_raise(world, tmp_path):
    """SageMaker says ResourceLimitExceeded when the account's processing quota for the type is too
    low (new accounts often have 0): a quota to raise, not a permission to add."""
    from botocore.exceptions import ClientError

    def refuse(params, **_):
        raise ClientError({"Error": {"Code": "ResourceLimitExceeded", "Message": (
            "The account-level service limit 'ml.c7i.xlarge for processing job usage' is 0 Instances, with current "
            "utilization of 0 Instances and a request delta of 2 Instances.")}}, "CreateProcessingJob")

    world.session.events.register("before-call.sagemaker.CreateProcessingJob", refuse)
    with pytest.raises(HistoryError) as refused:
        world.scorer().run(shards(tmp_path / "in", [2, 2]), tmp_path / "signals", yes=True)
    message = str(refused.value)
    assert "a quota, not a permission" in message and "'ml.c7i.xlarge for processing job usage'" in message
    assert "make preflight" in message and "permissions" not in message


def test_other_refusals_point_to_the_permissions(world, tmp_path):
    from botocore.exceptions import ClientError

    def refuse(params, **_):
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}, "CreateProcessingJob")

    world.session.events.register("before-call.sagemaker.CreateProcessingJob", refuse)
    with pytest.raises(HistoryError, match=r"not authorized \(AccessDeniedException; docs/learning/fit-history.md"):
        world.scorer().run(shards(tmp_path / "in", [2, 2]), tmp_path / "signals", yes=True)


# ----------------------------------------------------------------------------------- the stack
def test_a_stack_without_the_scoring_outputs_is_refused_with_what_to_do(template):
    existing = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}, stack_name=STACK)
    assert not set(scoring.STACK_OUTPUTS) & set(existing.outputs())  # the template's own: no endpoint, no scoring
    with mock_aws():
        world = World(template, existing.outputs())
        with pytest.raises(HistoryError, match=r"has no output HistoryScoringRoleArn, .*(?s:.)*--on local"):
            world.scorer()
        with pytest.raises(HistoryError, match="stack elsewhere: .*does not exist"):
            SageMakerScoring.from_stack("elsewhere", instances=1, instance_type="ml.c7i.xlarge", say=print,
                                        session=world.session)


def test_the_stack_outputs_read_are_the_templates():
    outputs = Stack.load(parameters=CPU, stack_name=STACK).outputs()
    stack = ScoringStack.from_outputs(STACK, outputs)
    assert (stack.image_uri, stack.model_data_url, stack.compute) == (IMAGE, CPU["ModelDataUrl"], "CPU")
    assert stack.prefix == "history-scoring/" and stack.bucket == Stack.load(parameters=CPU, stack_name=STACK).ref("HeadBucket")


# ----------------------------------------------------------------------------------- the estimate
def test_the_estimate_is_instances_times_hours_times_the_processing_price(tmp_path):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({
        "as_of": "2025-10-01", "region": "us-east-1", "instances": [{"type": "ml.c7i.8xlarge", "vcpus": 32, "gpu": None,
                                                                     "usd_per_hour": 9.0}],
        "processing": {"as_of": "2026-01-01", "estimated": True, "items_per_second_per_vcpu": 0.5,
                       "instances": [{"type": "ml.c7i.8xlarge", "vcpus": 32, "gpu": None, "usd_per_hour": 1.5}]}}))
    found = offer("ml.c7i.8xlarge", prices)
    assert (found.usd_per_hour, found.items_per_second_per_vcpu, found.vcpus) == (1.5, 0.5, 32)
    plan = estimate_for(100_000, 2, found)
    # 50,000 items an instance at 16 items/s, plus the start: 3,725 s = 1.03 h; 2 x 1.03 h x $1.50
    assert plan.hours == pytest.approx(3725 / 3600) and plan.usd == pytest.approx(2 * 3725 / 3600 * 1.5)
    first, second = plan.text.splitlines()
    assert first.endswith("16.0 items/s an instance, 1.0 h each: 2 x 1.0 h x $1.500/h = $3.10")
    assert "SageMaker Processing price (estimated, not published), us-east-1 on-demand as of 2026-01-01" in second
    assert "0.5 items/s per vCPU (from the price file)" in second
    assert plan.max_runtime_seconds == int(estimates.RUNTIME_HEADROOM * 3725)


def test_without_a_processing_price_the_estimate_says_where_its_figures_come_from(tmp_path):
    real_time = offer("ml.c6i.8xlarge")  # the shipped file's real-time inference list
    assert real_time.usd_per_hour and "real-time inference price" in real_time.basis
    assert real_time.items_per_second_per_vcpu == estimates.MEASURED_ITEMS_PER_SECOND_PER_VCPU
    unknown = offer("ml.c7i.48xlarge", tmp_path / "none.json")
    assert (unknown.vcpus, unknown.usd_per_hour) == (192, None)
    text = estimate_for(300_000, 2, unknown).text
    assert "price unknown" in text and "measured, docs/benchmarks/batch-scoring.md" in text
    huge = estimate_for(10_000_000, 1, offer("ml.c7i.large", tmp_path / "none.json"))
    assert huge.max_runtime_seconds == estimates.MAX_RUNTIME_SECONDS  # capped at the service's maximum


@pytest.mark.parametrize("items, instances, expected", [
    (300_000, 2, 150), (300_000, 4, 152), (40, 2, 2), (1, 3, 1), (5_000, 3, 3), (10, 1, 1), (2_001, 1, 2),
])
def test_shards_are_about_two_thousand_items_as_many_for_every_instance(items, instances, expected):
    assert shard_count(items, instances) == expected


def test_job_names_are_unique_and_valid_for_any_stack_name():
    names = {scoring.job_name("a" * 128 + "--x") for _ in range(20)} | {scoring.job_name("---"), scoring.job_name("Prod_Stack.1")}
    assert len(names) == 22 and all(JOB_NAME.match(n) and len(n) <= 63 for n in names)


# ----------------------------------------------------------------------------------- exports on S3
def test_an_export_on_s3_is_downloaded_under_its_own_name_and_a_local_one_is_used_as_is(tmp_path):
    local = tmp_path / "train.csv"
    local.write_text("text,label\n")
    assert fetch_export(str(local), tmp_path / "fetched") == local
    with mock_aws():
        session = boto3.session.Session(region_name=REGION)
        s3 = session.client("s3")
        s3.create_bucket(Bucket="exports")
        s3.put_object(Bucket="exports", Key="desk/2026/train.csv", Body=b"text,label\nhello,a\n")
        got = fetch_export("s3://exports/desk/2026/train.csv", tmp_path / "fetched", session=session)
        assert got == tmp_path / "fetched" / "train.csv" and got.read_text() == "text,label\nhello,a\n"
        # a Path of an s3:// URI keeps one slash; it is still the object
        assert fetch_export(Path("s3://exports/desk/2026/train.csv"), tmp_path / "again", session=session).is_file()
        with pytest.raises(HistoryError, match="s3://exports/desk/missing.csv"):
            fetch_export("s3://exports/desk/missing.csv", tmp_path / "fetched", session=session)


# ----------------------------------------------------------------------------------- for real
def the_image_scores(world: World, engine: Any, tmp: Path) -> Callable[[dict[str, Any]], None]:
    """What the job's instances do, done here when CreateProcessingJob returns (moto marks the job
    Completed at once and runs nothing): each instance takes its ShardedByS3Key share of the input
    objects and runs the image's batch scorer on them, and what they write lands in the output prefix."""
    from decision_server.batch import score_folder

    def job(request: dict[str, Any]) -> None:
        bucket, prefix = split(request["ProcessingInputs"][0]["S3Input"]["S3Uri"])
        keys = world.keys(prefix)
        instances = request["ProcessingResources"]["ClusterConfig"]["InstanceCount"]
        output = tmp / "job-output"
        for i in range(instances):
            folder = tmp / f"instance-{i}"
            folder.mkdir(parents=True)
            for key in keys[i::instances]:
                world.s3.download_file(bucket, key, str(folder / Path(key).name))
            if any(folder.iterdir()):
                score_folder(engine, folder, output)
        for path in sorted(output.iterdir()):
            world.put_output(request, path.name, path.read_bytes())

    return job


def ticket_decisions(rows: list[dict[str, str]]) -> list[Any]:
    """The decisions make fit-history asks of the model for these rows (text, label)."""
    from decision_router.domain.model_requests import question_decision
    from training.history_policy import question_of, raw_policy, states, vocabulary

    raw = raw_policy("history", ["text"], "label", vocabulary([r["label"] for r in rows], 1, "review"), 0.03)
    question = question_of(raw)
    return [question_decision(question, s).model_copy(update={"return_hidden_state": True})
            for s in states(raw, rows, ["text"])]


@pytest.mark.model
def test_the_images_batch_scorer_writes_what_the_scorer_brings_back(world, tmp_path, embedded_engine):
    """The scorer and the image's batch scorer agree on the files: every decision's signals come
    back keyed by its request key, from the model that scored them."""
    from decision_contract.signals import request_key
    from decision_server.batch import write_inputs

    decisions = ticket_decisions(clinc150_slice(4, 3, 0))
    scorer = world.scorer(instances=2)
    write_inputs(decisions, tmp_path / "in", shard_count(len(decisions), 2))
    world.job_does = the_image_scores(world, embedded_engine, tmp_path / "job")
    model = scorer.run(tmp_path / "in", tmp_path / "signals", yes=True)
    assert model == embedded_engine.model_info
    keys = {key for shard in sorted((tmp_path / "signals").glob(f"*{SHARD_SUFFIX}")) for key in read_shard(shard).keys}
    assert keys == {request_key(model.sha256, d) for d in decisions}
    assert not list((tmp_path / "signals").glob(f"*{scoring.ERRORS_SUFFIX}"))


def _history_takes_sagemaker() -> bool:
    try:
        from training import history

        return "--on" in history.parser().format_help() and __import__("decision_server.batch") is not None
    except ImportError:
        return False


@pytest.mark.model
@pytest.mark.skipif(not _history_takes_sagemaker(),
                    reason="needs training.history's --on sagemaker (calling training.sagemaker_scoring) and "
                           "decision_server.batch")
def test_fit_history_on_sagemaker_writes_what_a_local_run_writes(template, tmp_path, embedded_engine):
    """make fit-history ON=sagemaker end to end in moto: DATA on S3, the decisions scored by the
    image's batch scorer in the job (run here, by the handler, as moto runs nothing), and the
    policy, head and report the same as a run that scores here."""
    from evaluation.runners import EngineRunner
    from training import history

    train, test = clinc150_slice(4, 10, 0), clinc150_slice(4, 5, 20)
    local_data, local_test = tmp_path / "train.csv", tmp_path / "test.csv"
    for path, rows in ((local_data, train), (local_test, test)):
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows(rows)
    common = ["--text", "text", "--label", "label", "--min-examples", "2", "--targets", "own", "--no-progress"]
    assert history.main(["--data", str(local_data), "--test", str(local_test), "--out", str(tmp_path / "local" / "out"),
                         "--cache", str(tmp_path / "cache-local"), "--on", "local", *common],
                        runner=EngineRunner(embedded_engine)) == 0

    with mock_aws():
        boto3.setup_default_session(region_name=REGION)  # what the command's scorer uses
        try:
            world = World(template, session=boto3.DEFAULT_SESSION)
            world.s3.create_bucket(Bucket="exports")
            world.s3.upload_file(str(local_data), "exports", "desk/train.csv")
            world.job_does = the_image_scores(world, embedded_engine, tmp_path / "job")
            code = history.main(["--data", "s3://exports/desk/train.csv", "--test", str(local_test),
                                 "--out", str(tmp_path / "sagemaker" / "out"), "--cache", str(tmp_path / "cache-sagemaker"),
                                 "--on", "sagemaker", "--stack", STACK, "--instances", "2", "--instance-type", "ml.c7i.xlarge",
                                 "--yes", *common])
        finally:
            boto3.DEFAULT_SESSION = None
    assert code == 0
    (request,) = world.requests
    assert request["AppSpecification"]["ImageUri"] == IMAGE and request["RoleArn"] == world.outputs["HistoryScoringRoleArn"]
    assert request["ProcessingInputs"][0]["S3Input"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert request["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 2
    local, remote = tmp_path / "local" / "out", tmp_path / "sagemaker" / "out"
    assert (remote / "policy.json").read_text() == (local / "policy.json").read_text()
    (head,) = (local / "heads").iterdir()
    assert (remote / "heads" / head.name).read_bytes() == head.read_bytes()
    reports = [json.loads((folder / "report.json").read_text()) for folder in (local, remote)]
    for report in reports:
        report.pop("seconds")
    assert reports[0] == reports[1]
