"""The head store: promoted heads in a versioned S3 bucket, the version in service in one SSM
parameter per policy question, and every change (promotion, rollback, relearning outcome) in
the head history table (see domain/head_versions.py).

A promotion or rollback of one policy question holds that question's change lock while it reads
the pointer in service and writes the next one: a conditional row of the head history table
(`lock#<policy>/<question>`, apart from the question's history rows). A second writer meanwhile
gets `HeadChangeInProgress` instead of writing a pointer built on the one the first replaces (a
lost update). A writer that dies holding the lock leaves it for LOCK_SECONDS at most."""

from __future__ import annotations

import json
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

import boto3

from ..domain.head_versions import (
    HeadPointer,
    head_key,
    parameter_name,
    pointer_problems,
    report_key,
    shadow_key,
    shadow_parameter_name,
)
from . import AwsAdapter

#: Relearning outcomes in the history table (what the refusal alarm counts).
PROMOTED, REFUSED = "relearning_promoted", "relearning_refused"
#: How long a change lock holds at most (a change takes seconds; a dead writer's lock then lapses).
LOCK_SECONDS = 300
#: S3's answers to a conditional write of an object another writer changed since it was read:
#: another version (412), deleted (404), or another conditional write under way (409).
CHANGED_MEANWHILE = frozenset({"PreconditionFailed", "NoSuchKey", "ConditionalRequestConflict"})


class HeadChangeInProgress(ValueError):
    """Another promotion or rollback of the same policy question holds its change lock."""


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def refusals_in_a_row(history: Iterable[dict[str, str]]) -> int:
    """Of a question's history rows, newest first: the relearning refusals before the newest promotion."""
    count = 0
    for row in history:
        if row["action"] == REFUSED:
            count += 1
        elif row["action"] == PROMOTED:
            break
    return count


class HeadStore(AwsAdapter):
    """Reads and changes which head decides a policy question in service."""

    service = "s3"

    def __init__(self, bucket: str, parameter_prefix: str, history_table: str, *, client: Any = None,
                 ssm: Any = None, dynamodb: Any = None):
        super().__init__(client)
        self.bucket, self.prefix, self.history_table = bucket, parameter_prefix, history_table
        self._ssm, self._dynamodb = ssm, dynamodb

    @property
    def ssm(self) -> Any:
        if self._ssm is None:
            self._ssm = boto3.client("ssm")
        return self._ssm

    @property
    def dynamodb(self) -> Any:
        if self._dynamodb is None:
            self._dynamodb = boto3.client("dynamodb")
        return self._dynamodb

    # ------------------------------------------------------------------------- reading
    def pointer(self, policy: str, question: str) -> HeadPointer | None:
        """The head in service, or None when none was promoted (the shipped head decides).
        Raises on an unreadable or malformed parameter (the caller keeps its head)."""
        try:
            value = self.ssm.get_parameter(Name=parameter_name(self.prefix, policy, question))["Parameter"]["Value"]
        except self.ssm.exceptions.ParameterNotFound:
            return None
        return HeadPointer.model_validate_json(value)

    def shadow_pointer(self, policy: str, question: str) -> HeadPointer | None:
        """The candidate serving in shadow, or None when none is. Raises as `pointer` does."""
        try:
            value = self.ssm.get_parameter(Name=shadow_parameter_name(self.prefix, policy, question))["Parameter"]["Value"]
        except self.ssm.exceptions.ParameterNotFound:
            return None
        return HeadPointer.model_validate_json(value)

    def read(self, pointer: HeadPointer) -> bytes:
        """The head's bytes, exactly the S3 version the pointer names. ValueError for a pointer
        naming another bucket or another key than its question's in this head store."""
        problems = pointer_problems(pointer, bucket=self.bucket, policy=pointer.policy, question=pointer.question,
                                    shadow=pointer.action == "shadow")
        if problems:
            raise ValueError(f"pointer of {pointer.policy}/{pointer.question} " + "; ".join(problems))
        body = self.client.get_object(Bucket=pointer.bucket, Key=pointer.key, VersionId=pointer.s3_version)["Body"]
        return bytes(body.read())

    def history(self, policy: str, question: str, limit: int = 20) -> list[dict[str, str]]:
        """The latest changes and relearning outcomes of a policy question, newest first."""
        response = self.dynamodb.query(TableName=self.history_table, KeyConditionExpression="policy_question = :h",
                                       ExpressionAttributeValues={":h": {"S": f"{policy}/{question}"}},
                                       ScanIndexForward=False, Limit=limit)
        return [{k: v["S"] for k, v in row.items() if "S" in v} for row in response["Items"]]

    def refusals_in_a_row(self, policy: str, question: str) -> int:
        """How many relearning runs in a row refused their candidate (since the last promotion)."""
        return refusals_in_a_row(self.history(policy, question, limit=50))

    # ------------------------------------------------------------------------- the relearning job's objects
    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def get(self, key: str) -> bytes:
        return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def find(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        try:
            return self.get(key)
        except self.client.exceptions.NoSuchKey:
            return None

    def find_tagged(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and its ETag (what `put_unless_changed` compares), or None when there is none."""
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except self.client.exceptions.NoSuchKey:
            return None
        return bytes(response["Body"].read()), response["ETag"]

    def put_unless_changed(self, key: str, data: bytes, etag: str | None) -> bool:
        """Write the object only while it is still the one read: the version of ETag `etag`
        (S3 If-Match), or no object at all for None (If-None-Match). False, writing nothing, when
        another writer changed it meanwhile (412; 404: deleted; 409: a concurrent conditional write)."""
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, **condition)
        except self.client.exceptions.ClientError as error:
            if error.response.get("Error", {}).get("Code") in CHANGED_MEANWHILE:
                return False
            raise
        return True

    def download(self, key: str, path: Path) -> bytes:
        """The object's bytes written to `path` (b"" and no file when there is none)."""
        try:
            data = self.get(key)
        except self.client.exceptions.NoSuchKey:
            return b""
        path.write_bytes(data)
        return data

    def upload(self, key: str, path: Path) -> None:
        self.put(key, path.read_bytes())

    # ------------------------------------------------------------------------- changing
    def promote(self, policy: str, question: str, head: bytes, report: bytes, *, sha256: str, head_version: str,
                by: str, reason: str, caller: str = "", signature: str = "") -> HeadPointer:
        """Write the head (and its fit report) as new versions in the store and name it in service.
        `caller`: the AWS identity making the change (its ARN), audited beside `by`.
        HeadChangeInProgress while another change of the question is under way."""
        with self.changing(policy, question, "promote", by):
            version = self.client.put_object(Bucket=self.bucket, Key=head_key(policy, question), Body=head,
                                             ContentType="application/json")["VersionId"]
            self.client.put_object(Bucket=self.bucket, Key=report_key(policy, question), Body=report,
                                   ContentType="application/json", Metadata={"head-version": head_version})
            pointer = HeadPointer(policy=policy, question=question, bucket=self.bucket, key=head_key(policy, question),
                                  s3_version=version, sha256=sha256, head_version=head_version, at=now(), by=by,
                                  reason=reason, previous=self.pointer(policy, question), signature=signature)
            self._set(pointer, caller=caller)
        return pointer

    def shadow(self, policy: str, question: str, head: bytes, *, sha256: str, head_version: str, by: str,
               reason: str, signature: str = "") -> HeadPointer:
        """Write a candidate as the question's shadow head (a new version of its shadow key) and
        name it in its shadow pointer: the routing functions answer with it beside the head in
        service. HeadChangeInProgress while another change of the question is under way."""
        with self.changing(policy, question, "shadow", by):
            version = self.client.put_object(Bucket=self.bucket, Key=shadow_key(policy, question), Body=head,
                                             ContentType="application/json")["VersionId"]
            pointer = HeadPointer(policy=policy, question=question, bucket=self.bucket, key=shadow_key(policy, question),
                                  s3_version=version, sha256=sha256, head_version=head_version, action="shadow",
                                  at=now(), by=by, reason=reason, signature=signature)
            self.ssm.put_parameter(Name=shadow_parameter_name(self.prefix, policy, question),
                                   Value=pointer.model_dump_json(), Type="String", Overwrite=True)
            self.audit(policy, question, "shadow_started", by=by, reason=reason, went_to=head_version,
                       details={"s3_version": version, "sha256": sha256})
        return pointer

    def end_shadow(self, policy: str, question: str, *, by: str, reason: str) -> None:
        """No candidate serves in shadow for the question any more (nothing when none did)."""
        with self.changing(policy, question, "end shadow", by):
            current = self.shadow_pointer(policy, question)
            if current is None:
                return
            self.ssm.delete_parameter(Name=shadow_parameter_name(self.prefix, policy, question))
            self.audit(policy, question, "shadow_ended", by=by, reason=reason, came_from=current.head_version,
                       details={"sha256": current.sha256})

    def rollback(self, policy: str, question: str, *, by: str, reason: str, caller: str = "") -> HeadPointer | None:
        """Put back the head the one in service replaced (None: the shipped head decides again).
        ValueError when nothing was promoted; HeadChangeInProgress while another change of the
        question is under way."""
        with self.changing(policy, question, "rollback", by):
            current = self.pointer(policy, question)
            if current is None:
                raise ValueError(f"{policy}/{question}: no promoted head is in service (the shipped head decides); "
                                 "nothing to roll back")
            previous = current.previous
            if previous is None:
                self.ssm.delete_parameter(Name=parameter_name(self.prefix, policy, question))
                self.audit(policy, question, "rolled_back", by=by, reason=reason, came_from=current.head_version,
                           went_to="shipped", caller=caller)
                return None
            restored = previous.model_copy(update={"action": "rolled_back", "at": now(), "by": by, "reason": reason})
            self._set(restored, came_from=current.head_version, caller=caller)
        return restored

    @contextmanager
    def changing(self, policy: str, question: str, action: str, by: str) -> Iterator[None]:
        """Hold the question's change lock for the block (a conditional PutItem; released after).
        HeadChangeInProgress when another writer holds it."""
        key = {"policy_question": {"S": f"lock#{policy}/{question}"}, "at": {"S": "lock"}}
        owner, started = uuid.uuid4().hex, int(time.time())
        try:
            self.dynamodb.put_item(
                TableName=self.history_table, Item={**key, "owner": {"S": owner}, "action": {"S": action},
                                                    "by": {"S": by}, "since": {"S": now()},
                                                    "expires": {"N": str(started + LOCK_SECONDS)}},
                ConditionExpression="attribute_not_exists(policy_question) OR expires < :now",
                ExpressionAttributeValues={":now": {"N": str(started)}}, ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except self.dynamodb.exceptions.ConditionalCheckFailedException as error:
            held = {k: v.get("S", v.get("N", "")) for k, v in error.response.get("Item", {}).items()}
            raise HeadChangeInProgress(
                f"{policy}/{question}: another change is under way ({held.get('action', '?')} by "
                f"{held.get('by', '?')} since {held.get('since', '?')}); nothing was changed: look at the head "
                "in service (ops.heads status) and try again") from None
        try:
            yield
        finally:
            try:
                self.dynamodb.delete_item(TableName=self.history_table, Key=key, ConditionExpression="#o = :me",
                                          ExpressionAttributeNames={"#o": "owner"},
                                          ExpressionAttributeValues={":me": {"S": owner}})
            except self.dynamodb.exceptions.ConditionalCheckFailedException:
                pass  # it lapsed and another writer holds it now: theirs to release

    def _set(self, pointer: HeadPointer, came_from: str | None = None, caller: str = "") -> None:
        self.ssm.put_parameter(Name=parameter_name(self.prefix, pointer.policy, pointer.question),
                               Value=pointer.without_history().model_dump_json(), Type="String", Overwrite=True)
        before = came_from or (pointer.previous.head_version if pointer.previous else "shipped")
        self.audit(pointer.policy, pointer.question, pointer.action, by=pointer.by, reason=pointer.reason,
                   came_from=before, went_to=pointer.head_version, caller=caller,
                   details={"s3_version": pointer.s3_version, "sha256": pointer.sha256})

    def audit(self, policy: str, question: str, action: str, *, by: str, reason: str, came_from: str = "",
              went_to: str = "", details: dict | None = None, caller: str = "") -> None:
        """One row of the head history table (every field a string). `by` is what the writer
        says it is; `caller`, when given, the AWS identity (ARN) that made the call."""
        row = {"policy_question": f"{policy}/{question}", "at": f"{now()}#{uuid.uuid4().hex[:8]}", "action": action, "by": by,
               "reason": reason, "from_version": came_from, "to_version": went_to,
               "details": json.dumps(details or {}, sort_keys=True)}
        if caller:
            row["caller_arn"] = caller
        self.dynamodb.put_item(TableName=self.history_table, Item={k: {"S": v} for k, v in row.items()})
