"""The head store (adapter `adapters/head_store.py` `HeadStore`) as dictionaries: the bucket's
objects, every version of each; the pointers' parameters; the head history table's rows. It hands
over the adapter's own values (`HeadPointer`, history rows as the table's strings) and raises S3's
errors as the adapter lets them through. `test_contract_head_store.py` (the objects and the
history) and `test_contract_console.py` (the pointers) run the same behaviours against it and
against the adapter over moto.

It keeps what the adapter writes and answers what the adapter reads, and no more: no change lock
(a second writer's `HeadChangeInProgress` is tests/functions/test_head_store.py's); how many
refusals in a row is counted by the adapter's own `refusals_in_a_row` over the rows kept. A
conditional write (`put_unless_changed`) holds as S3's does for the head bucket (SSE-S3: an
object's ETag is the MD5 of its bytes, quoted): If-Match against the current object's ETag
(no object: 404, not written), If-None-Match where no object is; moto honours both too, so the
contract holds the two sides to the same answers. S3's 409 (another conditional write under way
at that instant) has no counterpart here: a dictionary has no two writers at once.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

from botocore.exceptions import ClientError

from decision_router.adapters.head_store import now as history_time
from decision_router.adapters.head_store import refusals_in_a_row
from decision_router.domain.head_versions import HeadPointer, head_key, pointer_problems, report_key, shadow_key


def _no_such(code: str, message: str, operation: str) -> ClientError:
    """S3's answer for a key or version not held, as a plain ClientError with its code (a real
    client raises its modelled subclass of it, `s3.exceptions.NoSuchKey`)."""
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


def etag_of(data: bytes) -> str:
    """S3's ETag of an object written in one PutObject to an SSE-S3 bucket: its MD5, quoted."""
    return f'"{hashlib.md5(data).hexdigest()}"'


class FakeHeadStore:
    """The head store as the routing functions read it (port `PointerSource`: pointer,
    shadow_pointer, read, bucket) and as the relearning job and its label sync use it (objects:
    find, get, put, find_tagged, put_unless_changed, download, upload; the history: audit,
    history, refusals_in_a_row; pointers: promote, shadow, end_shadow).

    `objects`: every version of every key, by (key, version); `current`: each key's current
    version; `parameters`: each pointer's text, by (policy, question, shadow); `rows`: the history
    table's rows by their `policy_question`. `put_pointer_text` writes a parameter as anyone with
    access could (a malformed or misplaced pointer)."""

    def __init__(self, bucket: str = "decision-router-headbucket", history_table: str = "decision-router-head-history"):
        self.bucket, self.history_table = bucket, history_table
        self.objects: dict[tuple[str, str], bytes] = {}
        self.current: dict[str, str] = {}
        self.parameters: dict[tuple[str, str, bool], str] = {}
        self.rows: dict[str, list[dict[str, str]]] = {}

    # -------------------------------------------------------------------- pointers, read
    def pointer(self, policy: str, question: str) -> HeadPointer | None:
        """The head in service; None when none was promoted. Raises on a malformed parameter."""
        text = self.parameters.get((policy, question, False))
        return HeadPointer.model_validate_json(text) if text is not None else None

    def shadow_pointer(self, policy: str, question: str) -> HeadPointer | None:
        text = self.parameters.get((policy, question, True))
        return HeadPointer.model_validate_json(text) if text is not None else None

    def read(self, pointer: HeadPointer) -> bytes:
        """Exactly the version the pointer names. ValueError for a pointer naming another bucket or
        key; S3's `NoSuchVersion` for a version (or key) the store does not hold."""
        problems = pointer_problems(pointer, bucket=self.bucket, policy=pointer.policy, question=pointer.question,
                                    shadow=pointer.action == "shadow")
        if problems:
            raise ValueError(f"pointer of {pointer.policy}/{pointer.question} " + "; ".join(problems))
        try:
            return self.objects[(pointer.key, pointer.s3_version)]
        except KeyError:
            raise _no_such("NoSuchVersion", "The specified version does not exist.", "GetObject") from None

    # -------------------------------------------------------------------- objects
    def _put(self, key: str, data: bytes) -> str:
        """A new current version of the key; its version id (PutObject's VersionId)."""
        version = uuid.uuid4().hex
        self.objects[(key, version)] = data
        self.current[key] = version
        return version

    def put(self, key: str, data: bytes) -> None:
        self._put(key, data)

    def get(self, key: str) -> bytes:
        """The key's current bytes; S3's `NoSuchKey` when there are none."""
        if key not in self.current:
            raise _no_such("NoSuchKey", "The specified key does not exist.", "GetObject")
        return self.objects[(key, self.current[key])]

    def find(self, key: str) -> bytes | None:
        return self.get(key) if key in self.current else None

    def find_tagged(self, key: str) -> tuple[bytes, str] | None:
        data = self.find(key)
        return None if data is None else (data, etag_of(data))

    def put_unless_changed(self, key: str, data: bytes, etag: str | None) -> bool:
        """Written only while the current object's ETag is `etag` (None: while there is none)."""
        found = self.find_tagged(key)
        if (found[1] if found is not None else None) != etag:
            return False
        self.put(key, data)
        return True

    def download(self, key: str, path: Path) -> bytes:
        data = self.find(key)
        if data is None:
            return b""
        path.write_bytes(data)
        return data

    def upload(self, key: str, path: Path) -> None:
        self.put(key, path.read_bytes())

    # -------------------------------------------------------------------- the history table
    def audit(self, policy: str, question: str, action: str, *, by: str, reason: str, came_from: str = "",
              went_to: str = "", details: dict | None = None, caller: str = "") -> None:
        """One row, as the adapter writes it (every field a string, `at` its time and a random suffix)."""
        row = {"policy_question": f"{policy}/{question}", "at": f"{history_time()}#{uuid.uuid4().hex[:8]}",
               "action": action, "by": by, "reason": reason, "from_version": came_from, "to_version": went_to,
               "details": json.dumps(details or {}, sort_keys=True)}
        if caller:
            row["caller_arn"] = caller
        self.rows.setdefault(row["policy_question"], []).append(row)

    def history(self, policy: str, question: str, limit: int = 20) -> list[dict[str, str]]:
        """The question's rows, newest first (the table's sort key `at`, descending), at most `limit`."""
        rows = sorted(self.rows.get(f"{policy}/{question}", []), key=lambda row: row["at"], reverse=True)
        return [dict(row) for row in rows[:limit]]

    def refusals_in_a_row(self, policy: str, question: str) -> int:
        return refusals_in_a_row(self.history(policy, question, limit=50))

    # -------------------------------------------------------------------- pointers, written
    def promote(self, policy: str, question: str, head: bytes, report: bytes, *, sha256: str, head_version: str,
                by: str, reason: str, caller: str = "", signature: str = "") -> HeadPointer:
        """A new version of the question's head named in service (the pointer replaced kept as its
        previous), its report beside it, and the change audited."""
        version = self._put(head_key(policy, question), head)
        self._put(report_key(policy, question), report)
        pointer = HeadPointer(policy=policy, question=question, bucket=self.bucket, key=head_key(policy, question),
                              s3_version=version, sha256=sha256, head_version=head_version, at=history_time(), by=by,
                              reason=reason, previous=self.pointer(policy, question), signature=signature)
        self.parameters[(policy, question, False)] = pointer.without_history().model_dump_json()
        self.audit(policy, question, pointer.action, by=by, reason=reason,
                   came_from=pointer.previous.head_version if pointer.previous else "shipped", went_to=head_version,
                   caller=caller, details={"s3_version": version, "sha256": sha256})
        return pointer

    def shadow(self, policy: str, question: str, head: bytes, *, sha256: str, head_version: str, by: str,
               reason: str, signature: str = "") -> HeadPointer:
        """A candidate named the question's shadow, and audited."""
        version = self._put(shadow_key(policy, question), head)
        pointer = HeadPointer(policy=policy, question=question, bucket=self.bucket, key=shadow_key(policy, question),
                              s3_version=version, sha256=sha256, head_version=head_version, action="shadow",
                              at=history_time(), by=by, reason=reason, signature=signature)
        self.parameters[(policy, question, True)] = pointer.model_dump_json()
        self.audit(policy, question, "shadow_started", by=by, reason=reason, went_to=head_version,
                   details={"s3_version": version, "sha256": sha256})
        return pointer

    def end_shadow(self, policy: str, question: str, *, by: str, reason: str) -> None:
        """The question's shadow pointer removed and audited; nothing at all when none was there."""
        current = self.shadow_pointer(policy, question)
        if current is None:
            return
        del self.parameters[(policy, question, True)]
        self.audit(policy, question, "shadow_ended", by=by, reason=reason, came_from=current.head_version,
                   details={"sha256": current.sha256})

    def put_pointer_text(self, policy: str, question: str, text: str, *, shadow: bool = False) -> None:
        self.parameters[(policy, question, shadow)] = text
