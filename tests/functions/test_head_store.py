"""Heads outside the code: promoted into the head store (versioned S3 bucket + one SSM parameter
per policy question, both template.yaml's, in moto), picked up by the routing functions' live
heads without a restart, verified as shipped heads are, a bad artifact left unused with its
metric, and rollback (the ops CLI) audited."""

from __future__ import annotations

import hashlib
import json

import boto3
import pytest
from aws_lambda_powertools import Logger
from moto import mock_aws

from decision_router.adapters.head_store import HeadStore
from decision_router.domain.head_versions import head_key
from decision_router.domain.policies import load_policy
from decision_router.intake.live_heads import HEAD_LOAD_FAILED, LiveHeads
from local.cloudformation import Stack
from ops import heads as heads_cli
from tests.functions.test_heads import head_for

PREFIX = "/decision-router/heads"
POLICY = "support-ticket"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(monkeypatch):
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "ticket-intake")  # as in the routing function
    with mock_aws():
        stack = Stack.load().create(only=["HeadBucket", "HeadHistoryTable"])
        assert boto3.client("s3").get_bucket_versioning(Bucket=stack.ref("HeadBucket"))["Status"] == "Enabled"
        yield HeadStore(stack.ref("HeadBucket"), PREFIX, stack.ref("HeadHistoryTable"))


def head_bytes(version: str, **changes) -> bytes:
    policy = load_policy(POLICY)
    return json.dumps(head_for(policy, policy.question("queue"), model=False, version=version, **changes)).encode()


def promote(store: HeadStore, version: str, data: bytes | None = None, question: str = "queue"):
    data = data if data is not None else head_bytes(version)
    return store.promote(POLICY, question, data, b'{"report": true}', sha256=hashlib.sha256(data).hexdigest(),
                         head_version=version, by="test", reason=f"promote {version}")


def live(store: HeadStore, clock: Clock, refresh: float = 60) -> LiveHeads:
    return LiveHeads(load_policy(POLICY), store, refresh_seconds=refresh, logger=Logger(service="test"), clock=clock)


def in_service(heads: LiveHeads) -> str | None:
    head = heads.policy().question("queue").learned_head
    return head.version if head else None


def emitted(capsys, name: str) -> list[dict]:
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return [line for line in lines if name in line]


def test_a_promoted_head_is_picked_up_within_the_refresh_without_a_restart(store):
    clock = Clock()
    heads = live(store, clock)
    shipped = load_policy(POLICY).question("queue").learned_head.version
    assert in_service(heads) == shipped
    promote(store, "store-v1")
    assert in_service(heads) == shipped  # not before the refresh is due
    clock.now = 61
    assert in_service(heads) == "store-v1"
    # the same LiveHeads, no reload: a second promotion is picked up too
    promote(store, "store-v2")
    clock.now = 130
    assert in_service(heads) == "store-v2"


def test_every_version_stays_in_the_bucket_and_the_pointer_names_one(store):
    first, second = promote(store, "store-v1"), promote(store, "store-v2")
    assert first.key == second.key == head_key(POLICY, "queue") and first.s3_version != second.s3_version
    assert store.read(first) == head_bytes("store-v1")  # the earlier version is still readable
    assert store.pointer(POLICY, "queue").previous.head_version == "store-v1"


def test_a_corrupt_artifact_is_left_unused_and_counted(store, capsys):
    clock = Clock()
    heads = live(store, clock, refresh=0)
    promote(store, "store-v1")
    assert in_service(heads) == "store-v1"
    pointer = promote(store, "store-v2")
    # the object in service is overwritten in place of its version: its bytes no longer match the pointer
    boto3.client("s3").put_object(Bucket=pointer.bucket, Key=pointer.key, Body=b'{"not": "a head"}')
    store.ssm.put_parameter(Name=f"{PREFIX}/{POLICY}/queue", Overwrite=True, Type="String", Value=pointer.model_copy(
        update={"s3_version": store.client.list_object_versions(Bucket=pointer.bucket)["Versions"][0]["VersionId"]}
    ).model_dump_json())
    capsys.readouterr()
    assert in_service(heads) == "store-v1"  # the previous head keeps deciding
    metrics = emitted(capsys, HEAD_LOAD_FAILED)
    assert metrics and metrics[0]["policy"] == POLICY and metrics[0]["question"] == "queue"
    assert metrics[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["policy", "question"]]


def test_a_head_bound_to_another_question_or_unreadable_is_refused(store, capsys):
    clock = Clock()
    heads = live(store, clock, refresh=0)
    promote(store, "other-prompt", head_bytes("other-prompt", question_sha256="0" * 64))
    assert in_service(heads) == load_policy(POLICY).question("queue").learned_head.version
    assert emitted(capsys, HEAD_LOAD_FAILED)
    store.ssm.put_parameter(Name=f"{PREFIX}/{POLICY}/queue", Overwrite=True, Type="String", Value="not json")
    assert in_service(heads) == load_policy(POLICY).question("queue").learned_head.version
    assert emitted(capsys, HEAD_LOAD_FAILED)


def test_rollback_is_one_command_audited_and_picked_up(store, capsys):
    clock = Clock()
    heads = live(store, clock, refresh=0)
    promote(store, "store-v1")
    promote(store, "store-v2")
    assert in_service(heads) == "store-v2"
    capsys.readouterr()
    args = ["rollback", "--policy", POLICY, "--question", "queue", "--by", "ops@example.com"]
    assert heads_cli.main(args, store=store) == 2  # a reason is required
    assert heads_cli.main([*args, "--reason", "sends billing to sales"], store=store) == 0
    assert json.loads(capsys.readouterr().out)["in_service"] == "store-v1"
    assert in_service(heads) == "store-v1"
    assert heads_cli.main([*args, "--reason", "back to the shipped head"], store=store) == 0
    assert in_service(heads) == load_policy(POLICY).question("queue").learned_head.version
    capsys.readouterr()
    assert heads_cli.main([*args, "--reason", "again"], store=store) == 1  # nothing left to roll back
    history = store.history(POLICY, "queue")
    assert [(r["action"], r["from_version"], r["to_version"], r["by"]) for r in history[:2]] == [
        ("rolled_back", "store-v1", "shipped", "ops@example.com"),
        ("rolled_back", "store-v2", "store-v1", "ops@example.com")]
    assert history[1]["reason"] == "sends billing to sales"


def test_the_cli_names_what_is_missing():
    assert heads_cli.main(["status", "--policy", POLICY, "--question", "nope", "--bucket", "b",
                           "--parameter-prefix", "/p", "--history-table", "t"]) == 2
    assert heads_cli.main(["status", "--policy", POLICY, "--question", "queue", "--bucket", "",
                           "--parameter-prefix", "", "--history-table", ""]) == 2
