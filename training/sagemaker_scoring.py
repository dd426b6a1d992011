"""`make fit-history ON=sagemaker`: an export's decisions scored on SageMaker Processing.

A help desk's export of 30k–300k rows takes hours to score on one machine. This module scores the
decision shards `make fit-history` wrote (`part-00000.jsonl`, ... one Decision a line) in one
SageMaker Processing job that runs the decision image the stack deploys, on as many instances as
asked, and brings the signals back:

    scoring = SageMakerScoring.from_stack("decisions", instances=2, instance_type="ml.c7i.8xlarge", say=print)
    print(scoring.estimate(items))                      # instances x hours x price
    model = scoring.run(shards_folder, signals_folder, yes=True)

`run` uploads the shards to `<HistoryScoringUri><run>/input/`, creates the job (the image's
`decision-server batch`; each instance gets its share of the shards, `ShardedByS3Key`, and the
model archive), shows its progress from the signal shards it uploads as it finishes them
(`Continuous`), and downloads `*.signals.npz`, `*.errors.jsonl` and `model.json` when it completes.
Ctrl-C stops the job. What it reads of the stack are its outputs (`STACK_OUTPUTS`): a stack that
creates its own endpoint has them (template.yaml's HistoryScoringRole).

The estimate (an instance type's throughput and price, a job's hours, dollars and time limit) is
training/processing_estimate.py's; the scorer that hands this job its decisions and takes its
signals into the store is training/scoring.py's `SageMakerBatchScoring`.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import boto3
from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import BotoCoreError, ClientError

from decision_contract import ModelInfo
from decision_contract.signals import SHARD_SUFFIX, read_shard
from decision_router.adapters.caller_identity import sts_client
from decision_server import batch

from .history_policy import HistoryError
from .processing_estimate import Estimate, check_instances, estimate_for, offer

#: Each instance's disk, and the wait between looks at a running job.
VOLUME_GB = 30
POLL_SECONDS = 30.0

#: The image's batch scorer; where a processing job puts its inputs and takes its output, and the
#: files it writes, are the batch scorer's own (decision_server.batch).
ENTRYPOINT = ["/opt/decision-server/bin/decision-server", "batch"]
DECISIONS_DIR, MODEL_DIR, SIGNALS_DIR = str(batch.DEFAULT_INPUT), str(batch.DEFAULT_MODEL_DIR), str(batch.DEFAULT_OUTPUT)
ERRORS_SUFFIX, MODEL_FILE = batch.ERRORS_SUFFIX, batch.MODEL_JSON

#: The stack outputs the scorer reads (template.yaml, with the stack's own endpoint).
ROLE_OUTPUT, URI_OUTPUT, IMAGE_OUTPUT, MODEL_OUTPUT, COMPUTE_OUTPUT = (
    "HistoryScoringRoleArn", "HistoryScoringUri", "DecisionImage", "DecisionModelDataUrl", "DecisionCompute")
STACK_OUTPUTS = (ROLE_OUTPUT, URI_OUTPUT, IMAGE_OUTPUT, MODEL_OUTPUT)

_S3_URI = re.compile(r"^s3:/+([^/]+)/(.*)$")


def job_name(stack_name: str, now: datetime | None = None) -> str:
    """A unique processing job name (63 characters at most, letters, digits and hyphens)."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")
    suffix = f"history-{stamp}-{secrets.token_hex(2)}"
    base = re.sub(r"[^A-Za-z0-9]+", "-", stack_name).strip("-")[:63 - len(suffix) - 1].rstrip("-")
    return f"{base}-{suffix}" if base else suffix


def progress_line(done_shards: int, total_shards: int, done_items: int, total_items: int, seconds: float) -> str:
    if not done_items:
        return f"scored 0 of {total_shards} shards ({total_items:,} items) after {_duration(seconds)}: waiting for the first"
    rate = done_items / max(seconds, 1.0)
    left = (total_items - done_items) / rate
    return (f"scored {done_shards} of {total_shards} shards ({done_items:,} of {total_items:,} items), "
            f"{rate:.1f} items/s, about {_duration(left)} left")


def _duration(seconds: float) -> str:
    minutes = int(round(seconds / 60))
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


# ----------------------------------------------------------------------------------- the stack
@dataclass(frozen=True)
class ScoringStack:
    """What the scorer needs of a deployed stack, from its outputs."""

    name: str
    role_arn: str
    bucket: str
    prefix: str  # ends with "/"
    image_uri: str
    model_data_url: str
    compute: str | None  # CPU or GPU: the kind of image

    @classmethod
    def from_outputs(cls, name: str, outputs: dict[str, str]) -> ScoringStack:
        missing = [key for key in STACK_OUTPUTS if not outputs.get(key)]
        if missing:
            raise HistoryError(
                f"stack {name} has no output {', '.join(missing)}: scoring on SageMaker needs a stack that creates its own "
                "endpoint (DecisionImageUri and ModelDataUrl set, no ExistingEndpointName) deployed with this template; "
                "deploy it so, or score here (--on local)")
        match = _S3_URI.match(outputs[URI_OUTPUT])
        if not match:
            raise HistoryError(f"stack {name}: {URI_OUTPUT} {outputs[URI_OUTPUT]!r} is not an s3:// URI")
        prefix = match.group(2).strip("/")
        return cls(name, outputs[ROLE_OUTPUT], match.group(1), f"{prefix}/" if prefix else "", outputs[IMAGE_OUTPUT],
                   outputs[MODEL_OUTPUT], outputs.get(COMPUTE_OUTPUT))


def stack_outputs(name: str, cloudformation: Any) -> dict[str, str]:
    region = cloudformation.meta.region_name
    try:
        (stack,) = cloudformation.describe_stacks(StackName=name)["Stacks"]
    except ClientError as error:
        message = (error.response["Error"].get("Message") or str(error)).rstrip(".")
        raise HistoryError(f"stack {name}: {message} in {region}. Check STACK= and that the region is the stack's "
                           f"(AWS_DEFAULT_REGION); the permissions it takes are in {DOCS_PERMISSIONS}.") from None
    except BotoCoreError as error:
        raise HistoryError(f"stack {name}: {str(error).rstrip('.')}. See {DOCS_PREFLIGHT}.") from None
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


#: Where a refusal sends the reader: the permissions the command takes, and the account checks.
DOCS_PERMISSIONS = "docs/learning/fit-history.md#the-permissions-of-the-person-running-it"
DOCS_PREFLIGHT = "docs/operations/preflight.md"


def check_account(session: boto3.session.Session) -> str:
    """The region and the credentials, checked before anything else is done: the account's ARN
    (sts get_caller_identity on the region's own host), else HistoryError in whole sentences
    naming the page to read. boto3 takes its default region from AWS_DEFAULT_REGION or the
    profile's `region` (botocore's config provider), never from AWS_REGION."""
    region = session.region_name
    if not region:
        raise HistoryError(
            "No AWS region is set, so the stack cannot be looked up. Set AWS_DEFAULT_REGION to the stack's region "
            "(e.g. AWS_DEFAULT_REGION=us-east-1; boto3 does not read AWS_REGION for its default region), or `region` in "
            f"the profile AWS_PROFILE names. See {DOCS_PREFLIGHT}.")
    try:
        credentials = session.get_credentials()
    except BotoCoreError as error:
        raise HistoryError(f"The AWS credentials could not be read: {str(error).rstrip('.')}. See {DOCS_PREFLIGHT}.") from None
    if credentials is None:
        raise HistoryError(
            "No AWS credentials were found (boto3: Unable to locate credentials), so nothing can be checked or started. "
            "Sign in (aws sso login --profile NAME, then AWS_PROFILE=NAME) or set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, as someone with the permissions listed in "
            f"{DOCS_PERMISSIONS}.")
    try:
        identity = sts_client(region, session=session).get_caller_identity()
    except ClientError as error:
        code = error.response["Error"].get("Code", "")
        message = (error.response["Error"].get("Message") or str(error)).rstrip(".")
        raise HistoryError(f"AWS did not accept these credentials in {region} ({code}: {message}). Refresh them "
                           f"(aws sso login) or use another profile; see {DOCS_PERMISSIONS}.") from None
    except BotoCoreError as error:
        raise HistoryError(f"AWS could not be reached to check the credentials in {region}: {str(error).rstrip('.')}. "
                           f"See {DOCS_PREFLIGHT}.") from None
    return str(identity.get("Arn", ""))


# ----------------------------------------------------------------------------------- the job
class SageMakerScoring:
    """One processing job over a folder of decision shards, on the stack's image and model."""

    def __init__(self, stack: ScoringStack, *, instances: int, instance_type: str, say: Callable[[str], None],
                 session: boto3.session.Session) -> None:
        self.stack = stack
        self.instances = instances
        self.instance_type = instance_type
        self.say = say
        self.region = session.region_name
        self.sagemaker = session.client("sagemaker")
        self.s3 = session.client("s3")
        #: How the wait between polls is made (a test interrupts it as Ctrl-C would).
        self.sleep: Callable[[float], None] = time.sleep
        self.poll_seconds = POLL_SECONDS
        known = self.sagemaker.meta.service_model.shape_for("ProcessingInstanceType").enum
        if instance_type not in known:
            raise HistoryError(f"--instance-type {instance_type}: not a SageMaker Processing instance type "
                               f"(e.g. ml.c7i.8xlarge, ml.m7i.8xlarge, ml.g5.xlarge)")
        check_instances(instances)
        self.offer = offer(instance_type)
        if self.offer.gpu and stack.compute == "CPU":
            raise HistoryError(f"stack {stack.name} deploys the CPU image, which leaves a {instance_type}'s GPU idle: "
                               "choose a CPU instance type (e.g. ml.c7i.8xlarge)")
        if self.offer.gpu:
            say(f"note: a processing job has no GPU driver or AMI option; whether the CUDA image runs on a {instance_type} "
                "Processing host is unverified (the CPU types are the tested path)")
        if not self.offer.gpu and stack.compute == "GPU":
            say(f"note: stack {stack.name} deploys the CUDA image; on {instance_type} it must run on the CPU alone")

    @classmethod
    def from_stack(cls, stack_name: str, *, instances: int, instance_type: str, say: Callable[[str], None],
                   session: boto3.session.Session | None = None) -> SageMakerScoring:
        """The scorer for a deployed stack, from its outputs, after the region and the credentials
        are checked (check_account); HistoryError when any is missing."""
        session = session or boto3.DEFAULT_SESSION or boto3.session.Session()
        check_account(session)  # region and credentials first: nothing else is worth doing without them
        stack = ScoringStack.from_outputs(stack_name, stack_outputs(stack_name, session.client("cloudformation")))
        return cls(stack, instances=instances, instance_type=instance_type, say=say, session=session)

    # ------------------------------------------------------------------ the estimate
    def plan(self, items: int) -> Estimate:
        return estimate_for(items, self.instances, self.offer)

    def estimate(self, items: int) -> str:
        """One or two lines: instances x expected hours x price = USD (or why it is unknown)."""
        return self.plan(items).text

    # ------------------------------------------------------------------ the request
    def job_request(self, name: str, items: int) -> dict[str, Any]:
        """CreateProcessingJob's parameters for the run `name` (its S3 folders under the stack's prefix)."""
        base = f"s3://{self.stack.bucket}/{self.stack.prefix}{name}"
        environment = {"SM_LLAMA_CPP_THREADS": str(self.offer.vcpus)}
        if self.offer.gpu:
            environment["SM_LLAMA_CPP_N_GPU_LAYERS"] = "999"
        return {
            "ProcessingJobName": name,
            "RoleArn": self.stack.role_arn,
            "AppSpecification": {"ImageUri": self.stack.image_uri, "ContainerEntrypoint": list(ENTRYPOINT)},
            "ProcessingInputs": [
                {"InputName": "decisions", "S3Input": {
                    "S3Uri": f"{base}/input/", "LocalPath": DECISIONS_DIR, "S3DataType": "S3Prefix",
                    "S3InputMode": "File", "S3DataDistributionType": "ShardedByS3Key"}},
                {"InputName": "model", "S3Input": {
                    "S3Uri": self.stack.model_data_url, "LocalPath": MODEL_DIR, "S3DataType": "S3Prefix",
                    "S3InputMode": "File", "S3DataDistributionType": "FullyReplicated"}},
            ],
            "ProcessingOutputConfig": {"Outputs": [
                {"OutputName": "signals", "S3Output": {"S3Uri": f"{base}/output/", "LocalPath": SIGNALS_DIR,
                                                       "S3UploadMode": "Continuous"}},
            ]},
            "ProcessingResources": {"ClusterConfig": {"InstanceCount": self.instances, "InstanceType": self.instance_type,
                                                      "VolumeSizeInGB": VOLUME_GB}},
            "StoppingCondition": {"MaxRuntimeInSeconds": self.plan(items).max_runtime_seconds},
            "NetworkConfig": {"EnableNetworkIsolation": True},
            "Environment": environment,
            # no Tags: tagging on create takes sagemaker:AddTags too; the job's name starts with the stack's
        }

    # ------------------------------------------------------------------ the run
    def run(self, inputs: Path, download_to: Path, *, yes: bool) -> ModelInfo:
        """Score the shards in `inputs` in one processing job and download its signals, errors
        and model.json into `download_to`; the model that scored them."""
        shards = sorted(inputs.glob("part-*.jsonl"))
        if not shards:
            raise HistoryError(f"{inputs}: no decision shards (part-*.jsonl) to score")
        counts = {p.name: _lines(p) for p in shards}
        items = sum(counts.values())
        if len(shards) < self.instances:
            # an instance that ShardedByS3Key gives no object has nothing to do, and costs as much
            self.say(f"note: {len(shards)} shard(s) to score: {len(shards)} instance(s) instead of {self.instances}")
            self.instances = len(shards)
        for line in self.estimate(items).splitlines():
            self.say(line)
        if not yes:
            raise HistoryError("scoring on SageMaker starts paid instances: pass --yes (make fit-history ... YES=1) "
                               "once the estimate above suits")
        name = job_name(self.stack.name)
        run_prefix = f"{self.stack.prefix}{name}/"
        self.say(f"uploading {len(shards)} shards ({items:,} items) to s3://{self.stack.bucket}/{run_prefix}input/")
        try:
            for path in shards:
                self.s3.upload_file(str(path), self.stack.bucket, f"{run_prefix}input/{path.name}")
            self.sagemaker.create_processing_job(**self.job_request(name, items))
        except ClientError as error:
            raise HistoryError(f"cannot start the processing job {name}: {self.why_refused(error)}") from None
        except S3UploadFailedError as error:
            raise HistoryError(f"cannot upload the shards of {name}: {error} (docs/learning/fit-history.md lists "
                               "the permissions it takes)") from None
        self.say(f"processing job {name} started: https://{self.region}.console.aws.amazon.com/sagemaker/home"
                 f"?region={self.region}#/processing-jobs/{name} (logs: /aws/sagemaker/ProcessingJobs, {name}/*)")
        expected = {_signals_name(shard): n for shard, n in counts.items()}
        job = self._wait(name, f"{run_prefix}output/", expected)
        status = job["ProcessingJobStatus"]
        if status != "Completed":
            reason = job.get("FailureReason") or job.get("ExitMessage") or "no reason given"
            raise HistoryError(f"processing job {name} {status.lower()}: {reason} (its log: CloudWatch "
                               f"/aws/sagemaker/ProcessingJobs, streams {name}/*)")
        return self._download(f"{run_prefix}output/", download_to, expected)

    def why_refused(self, error: ClientError) -> str:
        """CreateProcessingJob's refusal in words: a quota is named as one, with what to raise."""
        code, message = error.response["Error"].get("Code", ""), error.response["Error"].get("Message", str(error))
        if code == "ResourceLimitExceeded":
            quota = processing_quota_name(self.instance_type)
            return (f"{message}. This is a quota, not a permission: the account may run fewer {self.instance_type} "
                    f"processing instances than the {self.instances} asked (new accounts often have 0). Raise the "
                    f"Service Quotas quota '{quota}' (service code sagemaker; `make preflight` prints its quota code "
                    f"and the command), or ask for fewer instances (INSTANCES=) or another type (INSTANCE_TYPE=)")
        return f"{message} ({code}; docs/learning/fit-history.md lists the permissions it takes)"

    def _outputs(self, prefix: str) -> list[str]:
        """Keys under the run's output prefix."""
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.stack.bucket, Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return keys

    def _wait(self, name: str, output_prefix: str, expected: dict[str, int]) -> dict[str, Any]:
        """Poll the job until it ends, saying its progress; Ctrl-C stops it."""
        total_items = sum(expected.values())
        said_status = said_line = None
        done: set[str] = set()
        try:
            while True:
                job = self.sagemaker.describe_processing_job(ProcessingJobName=name)
                status = job["ProcessingJobStatus"]
                if status != said_status:
                    self.say(f"job {name}: {status}")
                    said_status = status
                if status in ("Completed", "Failed", "Stopped"):
                    return job
                done = {Path(k).name for k in self._outputs(output_prefix)} & set(expected)
                started = job.get("ProcessingStartTime") or job.get("CreationTime") or datetime.now(timezone.utc)
                line = progress_line(len(done), len(expected), sum(expected[d] for d in done), total_items,
                                     (datetime.now(timezone.utc) - started).total_seconds())
                if line != said_line:
                    self.say(line)
                    said_line = line
                self.sleep(self.poll_seconds)
        except KeyboardInterrupt:
            self.say(f"Ctrl-C: stopping processing job {name}")
            try:
                self.sagemaker.stop_processing_job(ProcessingJobName=name)
            except ClientError as error:  # it ended meanwhile
                self.say(f"  could not stop it: {error}")
            raise HistoryError(f"processing job {name} stopped (Ctrl-C) with {len(done)} of {len(expected)} shards scored; "
                               "nothing was fitted. A new run scores every shard again") from None

    def _download(self, prefix: str, folder: Path, expected: dict[str, int]) -> ModelInfo:
        folder.mkdir(parents=True, exist_ok=True)
        got: set[str] = set()
        for key in self._outputs(prefix):
            file = Path(key).name
            if file.endswith((SHARD_SUFFIX, ERRORS_SUFFIX)) or file == MODEL_FILE:
                self.s3.download_file(self.stack.bucket, key, str(folder / file))
                got.add(file)
        where = f"s3://{self.stack.bucket}/{prefix}"
        if MODEL_FILE not in got:
            raise HistoryError(f"processing job completed without writing {MODEL_FILE} under {where}")
        missing = sorted(set(expected) - got)
        if missing:
            raise HistoryError(f"processing job completed but {len(missing)} of {len(expected)} signal shards never "
                               f"reached {where}: {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''} (the job's "
                               "log says why; nothing was fitted)")
        for file, lines in sorted(expected.items()):
            _check_shard(folder / file, lines, folder / (file.removesuffix(SHARD_SUFFIX) + ERRORS_SUFFIX), where)
        errors = sum(_lines(folder / f) for f in got if f.endswith(ERRORS_SUFFIX))
        if errors:
            self.say(f"note: {errors} item(s) could not be scored (*{ERRORS_SUFFIX} in {folder})")
        self.say(f"downloaded {len(got & set(expected))} signal shards to {folder}")
        return ModelInfo.model_validate_json((folder / MODEL_FILE).read_text())


def processing_quota_name(instance_type: str) -> str:
    """The Service Quotas name of the quota a processing job of `instance_type` counts against."""
    return f"{instance_type} for processing job usage"


def _check_shard(signals: Path, lines: int, errors: Path, where: str) -> None:
    """A downloaded shard holds a row or an error for every line of its input: a shard uploaded
    while it was written (or cut short) is refused by name, never fitted on."""
    try:
        rows = len(read_shard(signals))
    except ValueError as error:
        raise HistoryError(f"{signals.name} from {where} is not a whole signals shard ({error}); nothing was fitted, "
                           "run again") from None
    failed = _lines(errors) if errors.exists() else 0
    if rows + failed != lines:
        raise HistoryError(f"{signals.name} from {where} holds {rows} rows and {failed} errors for {lines} input lines: "
                           "an incomplete upload; nothing was fitted, run again")


def _signals_name(shard: str) -> str:
    return shard.removesuffix(".jsonl") + SHARD_SUFFIX


def _lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


# ----------------------------------------------------------------------------------- exports on S3
def fetch_export(url_or_path: str | Path, folder: Path, *, session: boto3.session.Session | None = None) -> Path:
    """DATA or TEST: an s3://bucket/key is downloaded into `folder` (its file name kept, so a .csv
    is read as CSV); a local path is returned as it is."""
    match = _S3_URI.match(str(url_or_path))
    if not match or Path(url_or_path).exists():
        return Path(url_or_path)
    bucket, key = match.groups()
    if not key or key.endswith("/"):
        raise HistoryError(f"{url_or_path}: an export is one object, s3://bucket/key")
    session = session or boto3.DEFAULT_SESSION or boto3.session.Session()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / Path(key).name
    try:
        session.client("s3").download_file(bucket, key, str(target))
    except ClientError as error:
        raise HistoryError(f"s3://{bucket}/{key}: {error.response['Error'].get('Message') or error}") from None
    return target
