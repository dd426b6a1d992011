"""The head store's fake (tests/fakes/head_store.py `FakeHeadStore`) held to its adapter
(`adapters/head_store.py` `HeadStore`) over moto, on template.yaml's HeadBucket and
HeadHistoryTable: the objects the relearning job and its label sync keep in the bucket, the
conditional write the sync relies on, and the history rows the steps write and count. Each
behaviour is written once and runs on both sides; the pointers' side is test_contract_console.py's.

moto honours S3's conditional PutObject (If-Match: 412 for another ETag, 404 for no object;
If-None-Match: 412 where an object is), so the conditional cases run on the adapter as on AWS."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from decision_router.adapters.head_store import PROMOTED, REFUSED, HeadStore
from local.cloudformation import Stack
from tests.fakes.head_store import FakeHeadStore

SIDES = ["fake", "moto"]
KEY = "labels/support-ticket.jsonl.gz"
#: One session for every client (moto gives each mock a fresh default one, whose clients read their model again).
AWS = boto3.Session(region_name="us-east-1")


def client(service: str) -> Any:
    return AWS.client(service)


@pytest.fixture(params=SIDES)
def store(request) -> Iterator[FakeHeadStore | HeadStore]:
    if request.param == "fake":
        yield FakeHeadStore()
        return
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}).create(
            client=client, only=["HeadBucket", "HeadHistoryTable"])
        yield HeadStore(stack.ref("HeadBucket"), "/decision-router/heads", stack.ref("HeadHistoryTable"),
                        client=client("s3"), ssm=client("ssm"), dynamodb=client("dynamodb"))


def error_code(raised: pytest.ExceptionInfo[ClientError]) -> str:
    return str(raised.value.response["Error"]["Code"])


# ------------------------------------------------------------------------------ objects
def test_an_object_is_read_back_as_last_written_and_a_missing_one_is_none_or_no_such_key(store):
    assert store.find(KEY) is None
    with pytest.raises(ClientError) as missing:
        store.get(KEY)
    assert error_code(missing) == "NoSuchKey"
    store.put(KEY, b"first")
    store.put(KEY, b"second")
    assert store.find(KEY) == store.get(KEY) == b"second"
    assert store.find("labels/incident.jsonl.gz") is None  # a key of its own


def test_download_writes_the_object_to_a_file_and_upload_puts_a_files_bytes(store, tmp_path):
    path = tmp_path / "signals.npz"
    assert store.download(KEY, path) == b"" and not path.exists()  # none: no file at all
    store.put(KEY, b"kept signals")
    assert store.download(KEY, path) == b"kept signals" and path.read_bytes() == b"kept signals"
    Path(tmp_path / "newer.npz").write_bytes(b"newer signals")
    store.upload(KEY, tmp_path / "newer.npz")
    assert store.get(KEY) == b"newer signals"


def test_an_objects_tag_is_the_md5_of_its_bytes_as_s3_gives_it(store):
    """SSE-S3 (the head bucket's encryption): the ETag of a one-part write is its MD5, quoted, so
    the same bytes written again keep their tag."""
    assert store.find_tagged(KEY) is None
    store.put(KEY, b"rows")
    assert store.find_tagged(KEY) == (b"rows", f'"{hashlib.md5(b"rows").hexdigest()}"')
    store.put(KEY, b"other rows")
    assert store.find_tagged(KEY) == (b"other rows", f'"{hashlib.md5(b"other rows").hexdigest()}"')


# ------------------------------------------------------------------------------ the conditional write
def test_a_new_object_is_written_only_where_none_is(store):
    assert store.put_unless_changed(KEY, b"first sync", None)
    assert store.get(KEY) == b"first sync"
    assert not store.put_unless_changed(KEY, b"a second first sync", None)  # If-None-Match: 412
    assert store.get(KEY) == b"first sync"


def test_an_object_is_rewritten_only_while_it_is_the_one_read(store):
    store.put(KEY, b"read by the sync")
    _, tag = store.find_tagged(KEY)
    store.put(KEY, b"rewritten by an erasure")  # another writer meanwhile
    assert not store.put_unless_changed(KEY, b"the sync's copy", tag)  # If-Match: 412
    assert store.get(KEY) == b"rewritten by an erasure"

    _, fresh = store.find_tagged(KEY)
    assert store.put_unless_changed(KEY, b"the sync's copy, read again", fresh)
    assert store.get(KEY) == b"the sync's copy, read again"


def test_a_tag_holds_while_the_bytes_are_the_same_whoever_wrote_them(store):
    """S3 compares ETags, not versions: a rewrite of the very bytes read leaves the write allowed."""
    store.put(KEY, b"rows")
    _, tag = store.find_tagged(KEY)
    store.put(KEY, b"rows")
    assert store.put_unless_changed(KEY, b"rows and a new one", tag)


def test_a_tag_of_an_object_that_is_not_there_is_refused(store):
    tag = f'"{hashlib.md5(b"rows").hexdigest()}"'
    assert not store.put_unless_changed(KEY, b"rows", tag)  # If-Match where no object is: 404
    assert store.find(KEY) is None


# ------------------------------------------------------------------------------ the history table
def audited(store: Any, actions: list[str], question: str = "queue") -> None:
    """One row an action, a millisecond apart: each row's `at` (microseconds) is then later than
    the last, so the order read back is the order written on both sides."""
    for action in actions:
        store.audit("support-ticket", question, action, by="relearning:run-1", reason=f"{action} for a reason",
                    came_from="h-1", went_to="h-2")
        time.sleep(0.001)


def test_history_rows_come_back_newest_first_as_written(store):
    audited(store, [REFUSED, PROMOTED])
    audited(store, [REFUSED], question="team")
    newest, oldest = store.history("support-ticket", "queue")
    assert (newest["action"], oldest["action"]) == (PROMOTED, REFUSED)
    assert {k: v for k, v in newest.items() if k != "at"} == {
        "policy_question": "support-ticket/queue", "action": PROMOTED, "by": "relearning:run-1",
        "reason": f"{PROMOTED} for a reason", "from_version": "h-1", "to_version": "h-2", "details": "{}"}
    assert newest["at"] > oldest["at"]
    assert [row["action"] for row in store.history("support-ticket", "queue", limit=1)] == [PROMOTED]
    assert [row["action"] for row in store.history("support-ticket", "team")] == [REFUSED]
    assert store.history("incident", "team") == []


def test_refusals_in_a_row_are_those_since_the_last_promotion(store):
    assert store.refusals_in_a_row("support-ticket", "queue") == 0
    audited(store, [REFUSED, REFUSED, PROMOTED, REFUSED, "shadow_started", REFUSED])
    assert store.refusals_in_a_row("support-ticket", "queue") == 2
    audited(store, [PROMOTED])
    assert store.refusals_in_a_row("support-ticket", "queue") == 0


def test_ending_a_shadow_removes_its_pointer_and_records_it_and_ending_none_records_nothing(store):
    store.end_shadow("support-ticket", "queue", by="relearning:run-1", reason="judged")
    assert store.history("support-ticket", "queue") == []

    sha256 = hashlib.sha256(b'{"s": 1}').hexdigest()
    store.shadow("support-ticket", "queue", b'{"s": 1}', sha256=sha256, head_version="c-1", by="relearning:run-1",
                 reason="passed its gate")
    time.sleep(0.001)
    store.end_shadow("support-ticket", "queue", by="relearning:run-1", reason="in shadow: too few items")

    assert store.shadow_pointer("support-ticket", "queue") is None
    ended, started = store.history("support-ticket", "queue")
    assert (started["action"], started["to_version"], started["reason"]) == ("shadow_started", "c-1", "passed its gate")
    assert (ended["action"], ended["from_version"], ended["reason"], ended["details"]) == (
        "shadow_ended", "c-1", "in shadow: too few items", f'{{"sha256": "{sha256}"}}')


def test_a_promotion_is_recorded_with_the_head_it_replaced(store):
    """The pointer's change (`promoted`); the relearning outcome (PROMOTED) is the job's own row."""
    for version in ("h-1", "h-2"):
        head = f'{{"v": "{version}"}}'.encode()
        store.promote("support-ticket", "queue", head, b"{}", sha256=hashlib.sha256(head).hexdigest(),
                      head_version=version, by="relearning:run-1", reason="passed its gate and its shadow")
        time.sleep(0.001)
    second, first = store.history("support-ticket", "queue")
    assert [(row["action"], row["from_version"], row["to_version"]) for row in (first, second)] == [
        ("promoted", "shipped", "h-1"), ("promoted", "h-1", "h-2")]
    assert store.get("heads/support-ticket/queue.json") == b'{"v": "h-2"}'
