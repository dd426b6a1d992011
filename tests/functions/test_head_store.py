"""Heads outside the code: promoted into the head store (versioned S3 bucket + one SSM parameter
per policy question, both template.yaml's, in moto), picked up by the routing functions' live
heads without a restart, verified as shipped heads are, a bad artifact left unused with its
metric, a pointer naming any other object than its question's in the head store refused the same
way, promotions and rollbacks one at a time, and rollback (the ops CLI) audited with the caller's ARN."""

from __future__ import annotations

import hashlib
import io
import json
import time

import boto3
import pytest
from aws_lambda_powertools import Logger
from moto import mock_aws

from decision_router.adapters.head_store import HeadChangeInProgress, HeadStore
from decision_router.adapters.signing_key import SigningKey
from decision_router.domain import signatures
from decision_router.domain.head_versions import HeadPointer, head_key, parameter_name
from decision_router.domain.policies import load_policy
from decision_router.domain.signatures import HEAD_SERVICE, HEAD_SHADOW
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


# ------------------------------------------------------------------------- where a pointer may point
def point_at(store: HeadStore, bucket: str, key: str, data: bytes, version: str) -> None:
    """Write the question's parameter by hand, as anyone allowed ssm:PutParameter on it could."""
    s3_version = boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=data)["VersionId"]
    pointer = HeadPointer(policy=POLICY, question="queue", bucket=bucket, key=key, s3_version=s3_version,
                          sha256=hashlib.sha256(data).hexdigest(), head_version=version, at="2026-12-01T00:00:00Z",
                          by="someone")
    store.ssm.put_parameter(Name=f"{PREFIX}/{POLICY}/queue", Overwrite=True, Type="String",
                            Value=pointer.model_dump_json())


def test_a_pointer_naming_another_bucket_is_refused_counted_and_the_last_good_head_kept(store, capsys):
    clock = Clock()
    heads = live(store, clock, refresh=0)
    promote(store, "store-v1")
    assert in_service(heads) == "store-v1"
    # a well-formed head (right options, right question digest, sha256 matching) in a bucket of the writer's choosing
    boto3.client("s3").create_bucket(Bucket="someone-elses-bucket")
    boto3.client("s3").put_bucket_versioning(Bucket="someone-elses-bucket",
                                             VersioningConfiguration={"Status": "Enabled"})
    point_at(store, "someone-elses-bucket", head_key(POLICY, "queue"), head_bytes("planted"), "planted")
    capsys.readouterr()
    assert in_service(heads) == "store-v1"
    (metric,) = emitted(capsys, HEAD_LOAD_FAILED)
    assert (metric["policy"], metric["question"]) == (POLICY, "queue")
    with pytest.raises(ValueError, match="not the head store"):
        store.read(store.pointer(POLICY, "queue"))


def test_a_pointer_naming_another_key_of_the_head_store_is_refused(store, capsys):
    clock = Clock()
    heads = live(store, clock, refresh=0)
    promote(store, "store-v1")
    assert in_service(heads) == "store-v1"
    # e.g. a candidate the gate refused, kept under runs/, or another question's head
    for key in ("runs/some-run/support-ticket.queue.json", head_key(POLICY, "other")):
        point_at(store, store.bucket, key, head_bytes("refused-candidate"), "refused-candidate")
        capsys.readouterr()
        assert in_service(heads) == "store-v1"
        assert emitted(capsys, HEAD_LOAD_FAILED)
    # the pointer put right again: picked up
    promote(store, "store-v2")
    assert in_service(heads) == "store-v2"


# ------------------------------------------------------------------------- one change at a time
def second_writer(store: HeadStore) -> HeadStore:
    """Another process writing the same head store (its own clients)."""
    return HeadStore(store.bucket, store.prefix, store.history_table)


def during_pointer_write(store: HeadStore, action) -> list:
    """Run `action` while `store` is about to write the pointer (between its read and its write)."""
    results: list = []

    def hook(**_kwargs):
        if not results:
            try:
                results.append(action())
            except Exception as error:  # noqa: BLE001 - the test looks at it
                results.append(error)

    store.ssm.meta.events.register("before-call.ssm.PutParameter", hook)
    return results


def test_a_rollback_racing_a_promotion_is_refused_and_no_update_is_lost(store):
    promote(store, "store-v1")
    promote(store, "store-v2")
    other = second_writer(store)
    raced = during_pointer_write(store, lambda: other.rollback(POLICY, "queue", by="ops", reason="bad head"))
    promote(store, "store-v3")
    (error,) = raced
    assert isinstance(error, HeadChangeInProgress)
    assert "another change is under way (promote by test" in str(error) and "nothing was changed" in str(error)
    pointer = store.pointer(POLICY, "queue")
    assert (pointer.head_version, pointer.previous.head_version) == ("store-v3", "store-v2")
    # once the promotion is done, the rollback goes through and puts back what it replaced
    assert other.rollback(POLICY, "queue", by="ops", reason="bad head").head_version == "store-v2"
    assert [r["action"] for r in store.history(POLICY, "queue")] == ["rolled_back", "promoted", "promoted", "promoted"]


def test_two_promotions_at_once_one_is_refused(store):
    promote(store, "store-v1")
    other = second_writer(store)
    raced = during_pointer_write(store, lambda: promote(other, "store-b"))
    promote(store, "store-a")
    assert isinstance(raced[0], HeadChangeInProgress)
    pointer = store.pointer(POLICY, "queue")
    assert (pointer.head_version, pointer.previous.head_version) == ("store-a", "store-v1")


def test_a_lock_left_by_a_dead_writer_lapses(store):
    promote(store, "store-v1")
    lock = {"policy_question": {"S": f"lock#{POLICY}/queue"}, "at": {"S": "lock"}}
    item = {**lock, "owner": {"S": "dead"}, "action": {"S": "promote"}, "by": {"S": "relearning:x"},
            "since": {"S": "2026-12-01T00:00:00Z"}}
    store.dynamodb.put_item(TableName=store.history_table, Item={**item, "expires": {"N": str(int(time.time()) + 60)}})
    with pytest.raises(HeadChangeInProgress, match="promote by relearning:x"):
        promote(store, "store-v2")
    store.dynamodb.put_item(TableName=store.history_table, Item={**item, "expires": {"N": str(int(time.time()) - 1)}})
    assert promote(store, "store-v2").head_version == "store-v2"
    # released after the change; the lock row is no history row
    assert "Item" not in store.dynamodb.get_item(TableName=store.history_table, Key=lock)
    assert all(r["policy_question"] == f"{POLICY}/queue" for r in store.history(POLICY, "queue"))


def test_the_cli_refuses_a_rollback_while_a_change_is_under_way(store, capsys):
    promote(store, "store-v1")
    args = ["rollback", "--policy", POLICY, "--question", "queue", "--reason", "bad head"]
    raced = during_pointer_write(store, lambda: heads_cli.main(args, store=second_writer(store)))
    promote(store, "store-v2")
    assert raced == [1]
    assert "another change is under way" in capsys.readouterr().err
    assert store.pointer(POLICY, "queue").head_version == "store-v2"


def test_the_cli_audits_the_callers_arn_beside_the_name_given(store, capsys):
    promote(store, "store-v1")
    arn = boto3.client("sts").get_caller_identity()["Arn"]
    assert heads_cli.main(["rollback", "--policy", POLICY, "--question", "queue", "--by", "someone else",
                           "--reason", "bad head"], store=store) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["by"], out["caller_arn"]) == ("someone else", arn)
    (row, *_) = store.history(POLICY, "queue")
    assert (row["action"], row["by"], row["caller_arn"]) == ("rolled_back", "someone else", arn)


# ------------------------------------------------------------------------------ signed heads
HEAD_KEY = SigningKey(b"head-signing-key-of-this-test-stack-0123456789")


def signed_promote(store: HeadStore, version: str, data: bytes | None = None, key: SigningKey = HEAD_KEY,
                   purpose: str = HEAD_SERVICE):
    """A promotion as the relearning function makes it: signed for service (`purpose`: another, to forge one)."""
    data = data if data is not None else head_bytes(version)
    sha256 = hashlib.sha256(data).hexdigest()
    return store.promote(POLICY, "queue", data, b'{"report": true}', sha256=sha256, head_version=version, by="test",
                         reason=f"promote {version}",
                         signature=key.head_signature(POLICY, "queue", sha256, version, purpose))


def test_with_a_head_signing_key_only_heads_the_gate_signed_decide(store, capsys):
    """The stack configured a head key: a signed head loads; one altered after the gate passed it
    (new bytes under a rewritten pointer, sha256 and all), an unsigned one, or one signed with
    another key is refused by the loader, counted, and the last good head keeps deciding."""
    clock, logged = Clock(), io.StringIO()
    heads = LiveHeads(load_policy(POLICY), store, refresh_seconds=0, logger=Logger(service="signed-heads-test", stream=logged),
                      clock=clock, head_key=HEAD_KEY)
    signed = signed_promote(store, "store-v1")
    assert in_service(heads) == "store-v1"

    altered = head_bytes("store-v1", bias=[9.0, 0, 0, 0, 0])  # same version name, other weights
    version = store.client.put_object(Bucket=signed.bucket, Key=signed.key, Body=altered)["VersionId"]
    store.ssm.put_parameter(Name=f"{PREFIX}/{POLICY}/queue", Overwrite=True, Type="String", Value=signed.model_copy(
        update={"s3_version": version, "sha256": hashlib.sha256(altered).hexdigest()}).model_dump_json())
    capsys.readouterr()
    assert in_service(heads) == "store-v1" and heads.policy().question("queue").learned_head.bias != [9.0, 0, 0, 0, 0]
    assert HEAD_LOAD_FAILED in capsys.readouterr().out
    assert "its signature does not verify with the stack's head signing key" in logged.getvalue()

    promote(store, "store-v2")  # no signature (whoever may write the store, but not the key)
    assert in_service(heads) == "store-v1"
    assert "head store-v2" in logged.getvalue() and "unsigned; this stack signs every head" in logged.getvalue()
    signed_promote(store, "store-v3", key=SigningKey(b"another-stacks-head-signing-key-0123456789"))
    assert in_service(heads) == "store-v1"

    signed_promote(store, "store-v4")
    assert in_service(heads) == "store-v4"
    # a rollback restores the earlier pointer with its own signature: still the gate's word
    store.rollback(POLICY, "queue", by="test", reason="back")
    assert store.pointer(POLICY, "queue").head_version == "store-v3"
    assert in_service(heads) == "store-v4"  # v3 was signed by another key: refused, v4 keeps deciding


def test_without_a_head_signing_key_unsigned_heads_load_as_shipped_heads_do(store):
    """No key configured (a local run, a test without a stack): the rule is explicit, unsigned loads."""
    heads = live(store, Clock(), refresh=0)
    promote(store, "store-v1")
    assert in_service(heads) == "store-v1"


def test_an_unsigned_shadow_is_left_out_when_the_stack_signs_heads(store):
    heads = LiveHeads(load_policy(POLICY), store, refresh_seconds=0, logger=Logger(service="test"), clock=Clock(),
                      head_key=HEAD_KEY)
    data = head_bytes("shadow-v1")
    sha256 = hashlib.sha256(data).hexdigest()
    store.shadow(POLICY, "queue", data, sha256=sha256, head_version="shadow-v1", by="test", reason="unsigned")
    heads.policy()
    assert heads.shadows() == {}
    store.shadow(POLICY, "queue", data, sha256=sha256, head_version="shadow-v1", by="test", reason="signed",
                 signature=HEAD_KEY.head_signature(POLICY, "queue", sha256, "shadow-v1", HEAD_SHADOW))
    heads.policy()
    assert heads.shadows()["queue"].head.version == "shadow-v1"


def signed_heads(store: HeadStore) -> tuple[LiveHeads, io.StringIO]:
    logged = io.StringIO()  # a service name of its own: Powertools keeps the first stream a name was given
    logger = Logger(service=f"signed-heads-{time.monotonic_ns()}", stream=logged)
    return LiveHeads(load_policy(POLICY), store, refresh_seconds=0, logger=logger, clock=Clock(), head_key=HEAD_KEY), logged


def test_a_shadows_signature_never_puts_its_head_in_service(store, capsys):
    """The signature names what it was made for: a candidate signed when its shadow started (the
    shadow then refused it, or a person did) copied with that signature to the head in service's
    key and pointer is refused, counted, and the head in service keeps deciding; only a signature
    made for service (a promotion's) loads there."""
    heads, logged = signed_heads(store)
    signed_promote(store, "store-v1")
    assert in_service(heads) == "store-v1"
    data = head_bytes("refused-candidate")
    sha256 = hashlib.sha256(data).hexdigest()
    store.shadow(POLICY, "queue", data, sha256=sha256, head_version="refused-candidate", by="relearning:run-7",
                 reason="gate passed", signature=HEAD_KEY.head_signature(POLICY, "queue", sha256, "refused-candidate",
                                                                         HEAD_SHADOW))
    heads.policy()
    assert heads.shadows()["queue"].head.version == "refused-candidate"  # a shadow, with its shadow signature
    captured = store.shadow_pointer(POLICY, "queue").signature
    store.end_shadow(POLICY, "queue", by="relearning:run-7", reason="in shadow: refused")

    # whoever may write the bucket and the pointers: the bytes to the in-service key, the signature to its pointer
    signed_promote(store, "refused-candidate", data=data, purpose=HEAD_SHADOW)
    assert store.pointer(POLICY, "queue").signature == captured
    capsys.readouterr()
    assert in_service(heads) == "store-v1"
    assert HEAD_LOAD_FAILED in capsys.readouterr().out
    assert "signed for shadow, not as the head in service" in logged.getvalue()
    # a signature made without naming its purpose is a shadow's: the least one can vouch for
    assert HEAD_KEY.head_signature(POLICY, "queue", sha256, "refused-candidate") == captured

    signed_promote(store, "store-v2")  # the relearning function's promotion: signed for service
    assert in_service(heads) == "store-v2"


def test_a_service_signature_is_no_shadows_and_a_rollback_keeps_its_promotions_signature(store):
    heads, logged = signed_heads(store)
    data = head_bytes("shadow-v1")
    sha256 = hashlib.sha256(data).hexdigest()
    store.shadow(POLICY, "queue", data, sha256=sha256, head_version="shadow-v1", by="test", reason="forged",
                 signature=HEAD_KEY.head_signature(POLICY, "queue", sha256, "shadow-v1", HEAD_SERVICE))
    heads.policy()
    assert heads.shadows() == {} and "signed for service, not as a shadow" in logged.getvalue()

    signed_promote(store, "store-v1")
    signed_promote(store, "store-v2")
    assert in_service(heads) == "store-v2"
    restored = store.rollback(POLICY, "queue", by="test", reason="back")
    assert restored.head_version == "store-v1" and HEAD_KEY.head_verified(restored, HEAD_SERVICE)
    assert in_service(heads) == "store-v1"  # the earlier promotion's own service signature


def test_a_head_signed_before_signatures_named_their_purpose_is_refused_saying_so(store, capsys):
    """Such a signature was the same for a shadow and a promotion: it cannot vouch for service."""
    heads, logged = signed_heads(store)
    signed_promote(store, "store-v1")
    assert in_service(heads) == "store-v1"
    old = signed_promote(store, "store-v0")
    legacy = signatures.legacy_head_signature(HEAD_KEY.material, POLICY, "queue", old.sha256, "store-v0")
    store.ssm.put_parameter(Name=parameter_name(PREFIX, POLICY, "queue"), Overwrite=True, Type="String",
                            Value=old.model_copy(update={"signature": legacy}).without_history().model_dump_json())
    capsys.readouterr()
    assert in_service(heads) == "store-v1"
    assert HEAD_LOAD_FAILED in capsys.readouterr().out
    assert "signed before head signatures named shadow or service" in logged.getvalue()
    assert HEAD_KEY.head_signed_for(store.pointer(POLICY, "queue")) == signatures.LEGACY_HEAD
