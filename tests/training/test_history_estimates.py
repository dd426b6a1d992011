"""make fit-history's promises of time and money: the local estimate is timed on this machine's
first items (and kept for the next run), and ON=sagemaker prints its cost estimate and checks the
region, the credentials and the stack before anything is read, embedded or scored."""

from __future__ import annotations

import json
import re
import threading
import time

import boto3
import pytest
from moto import mock_aws

from training import history, history_export, history_scoring
from training.sagemaker_scoring import DOCS_PERMISSIONS, DOCS_PREFLIGHT

from .test_history import MODEL, WordRunner, export, write_jsonl
from .test_sagemaker_scoring import REGION, STACK, World, template  # noqa: F401 (the fixture)


class SlowRunner(WordRunner):
    """The word runner on one busy core: `seconds` an item, one item at a time whatever the workers."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds, self.lock = seconds, threading.Lock()

    def decide(self, decisions):
        with self.lock:
            time.sleep(self.seconds * len(decisions))
            return super().decide(decisions)


def fit(tmp_path, runner, seed=1, out="out"):
    train = write_jsonl(tmp_path / f"train-{seed}.jsonl", export(4, 10, seed=seed))
    test = write_jsonl(tmp_path / f"test-{seed}.jsonl", export(4, 3, seed=seed + 100))
    return history.main(["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                         "--targets", "own", "--out", str(tmp_path / out), "--cache", str(tmp_path / "cache"),
                         "--min-examples", "2", "--no-progress"], runner=runner)


@pytest.mark.parametrize("seconds", [0.02, 0.05])  # slept an item: 52 items take 1 s and 2.6 s
def test_the_local_estimate_is_timed_here_and_within_a_factor_of_two(tmp_path, capsys, seconds):
    assert fit(tmp_path, SlowRunner(seconds)) == 0
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if "items here takes about" in line)
    found = re.search(r"scoring (\d+) items here takes about (\d+) s, .*\(from the first 8 items here: ([\d.]+) items/s\)", line)
    assert found, line
    items, promised, rate = int(found[1]), int(found[2]), float(found[3])
    assert items == 52 and 0.5 / seconds < rate < 2 / seconds  # the runner's own speed, not a fixed figure
    taken = json.loads((tmp_path / "out" / "report.json").read_text())["seconds"]["scoring"]
    assert taken / 2 <= promised <= 2 * taken, (promised, taken)
    # the run's rate is kept in the model's cache folder for this machine's next run
    (rate_kept,) = json.loads((tmp_path / "cache" / MODEL.sha256 / history_scoring.RATE_FILE).read_text()).values()
    assert rate_kept["model_sha256"] == MODEL.sha256 and rate_kept["items"] == 52
    assert 0.5 / seconds < rate_kept["items_per_second"] < 2 / seconds


def test_the_next_run_names_this_machines_last_rate(tmp_path, capsys):
    assert fit(tmp_path, SlowRunner(0.02)) == 0
    assert fit(tmp_path, SlowRunner(0.02), seed=7, out="again") == 0  # other rows: scored again
    lines = [line for line in capsys.readouterr().err.splitlines() if "items here takes about" in line]
    assert len(lines) == 2 and "last run" not in lines[0]
    assert re.search(r"; this machine's last run on \d{4}-\d\d-\d\d: [\d.]+ items/s\)$", lines[1]), lines[1]


def test_everything_cached_promises_nothing(tmp_path, capsys):
    assert fit(tmp_path, SlowRunner(0.0)) == 0
    assert fit(tmp_path, SlowRunner(0.0), out="again") == 0
    assert capsys.readouterr().err.count("items here takes about") == 1


# ----------------------------------------------------------------------------------- on SageMaker
@pytest.fixture
def nothing_local(monkeypatch):
    """Fails the test if the export is read, embedded or scored."""
    def refuse(*_, **__):
        raise AssertionError("local work before the account was checked")

    for module, name in ((history, "read_export"), (history, "states"), (history, "text_curve"),
                         (history_scoring, "_score_here")):
        monkeypatch.setattr(module, name, refuse)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)


@pytest.fixture
def no_account(monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def on_sagemaker(tmp_path, *extra):
    train = write_jsonl(tmp_path / "train.jsonl", export(4, 10, seed=1))
    test = write_jsonl(tmp_path / "test.jsonl", export(4, 3, seed=2))
    return history.main(["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                         "--targets", "own", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
                         "--on", "sagemaker", "--stack", STACK, "--instances", "2", "--instance-type", "ml.c7i.8xlarge",
                         *extra])


ESTIMATE = re.compile(r"2 x ml\.c7i\.8xlarge \(32 vCPUs\) for 52 items: .* = \$[\d.]+")


def test_without_credentials_the_estimate_is_printed_then_a_sentence_naming_the_permissions(
        tmp_path, capsys, monkeypatch, no_account, nothing_local):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    assert on_sagemaker(tmp_path, "--yes") == 2
    err = capsys.readouterr().err
    assert ESTIMATE.search(err), err
    error = err.strip().splitlines()[-1]
    assert error.startswith("fit-history: No AWS credentials were found (boto3: Unable to locate credentials)")
    assert error.endswith(f"{DOCS_PERMISSIONS}.") and err.index("52 items") < err.index("No AWS credentials")


def test_without_a_region_it_says_aws_default_region_which_boto3_reads_not_aws_region(
        tmp_path, capsys, monkeypatch, no_account, nothing_local):
    monkeypatch.setenv("AWS_REGION", REGION)  # botocore's config provider reads AWS_DEFAULT_REGION, not this
    assert on_sagemaker(tmp_path, "--yes") == 2
    err = capsys.readouterr().err
    assert ESTIMATE.search(err), err
    error = err.strip().splitlines()[-1]
    assert error.startswith("fit-history: No AWS region is set") and "Set AWS_DEFAULT_REGION to the stack's region" in error
    assert "does not read AWS_REGION" in error and error.endswith(f"See {DOCS_PREFLIGHT}.")


def test_credentials_refused_by_sts_are_named_before_any_local_work(tmp_path, capsys, template, nothing_local):  # noqa: F811
    from botocore.exceptions import ClientError

    with mock_aws():
        boto3.setup_default_session(region_name=REGION)
        hosts = []

        def expired(request, **_):
            hosts.append(request.url)
            raise ClientError({"Error": {"Code": "ExpiredToken", "Message": "The security token included in the request "
                                         "is expired"}}, "GetCallerIdentity")

        boto3.DEFAULT_SESSION.events.register("before-send.sts.GetCallerIdentity", expired)
        try:
            assert on_sagemaker(tmp_path, "--yes") == 2
        finally:
            boto3.DEFAULT_SESSION = None
    assert hosts == [f"https://sts.{REGION}.amazonaws.com/"]  # the region's own host
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == (f"fit-history: AWS did not accept these credentials in {REGION} (ExpiredToken: The security token "
                     f"included in the request is expired). Refresh them (aws sso login) or use another profile; see "
                     f"{DOCS_PERMISSIONS}.")


def test_a_missing_stack_is_named_before_any_local_work(tmp_path, capsys, nothing_local):
    with mock_aws():
        boto3.setup_default_session(region_name=REGION)
        try:
            assert on_sagemaker(tmp_path, "--yes") == 2
        finally:
            boto3.DEFAULT_SESSION = None
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(rf"fit-history: stack {STACK}: .*does not exist in {REGION}\. Check STACK= and that the region is "
                        rf"the stack's \(AWS_DEFAULT_REGION\); the permissions it takes are in {re.escape(DOCS_PERMISSIONS)}\.",
                        error), error


def test_with_the_stack_and_no_yes_it_stops_after_the_estimate_before_any_local_work(
        tmp_path, capsys, template, nothing_local):  # noqa: F811
    with mock_aws():
        boto3.setup_default_session(region_name=REGION)
        try:
            world = World(template, session=boto3.DEFAULT_SESSION)
            assert on_sagemaker(tmp_path) == 2
        finally:
            boto3.DEFAULT_SESSION = None
    err = capsys.readouterr().err
    assert ESTIMATE.search(err) and world.requests == []
    assert err.strip().splitlines()[-1] == ("fit-history: Scoring on SageMaker starts paid instances: pass --yes "
                                            "(make fit-history ... YES=1) once the estimate above suits.")


def test_rows_are_counted_without_reading_the_export(tmp_path):
    (tmp_path / "a.csv").write_text('text,label\n"two\nlines",x\none,y\n\n')
    assert history_export.export_rows(tmp_path / "a.csv", None) == 2 and history_export.export_rows(tmp_path / "a.csv", 1) == 1
    assert history_export.export_rows("s3://bucket/key.csv", None) is None
