"""Erase's kept labels: one item's rows out of the labels relearning keeps in the head bucket (`ops.erase`).

Each policy's object under `labels/` that holds the item (or whose labelled-examples table held a
row of it) is rewritten without the item's rows as a new current version, only while it is the
version read (S3 If-Match, If-None-Match where there is none yet); then every other version that
holds the item is deleted, so none is left for the lifecycle rule's day."""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping

from botocore.exceptions import ClientError

from decision_router.adapters.head_store import CHANGED_MEANWHILE
from decision_router.domain.kept_labels import LABELS_PREFIX, KeptLabels, labels_key
from ops.erase_item import ItemKey

#: Rewrites of one kept-labels object tried while relearning writes it meanwhile, before a note says to run erase again.
LABEL_WRITE_ATTEMPTS = 5


class KeptLabelsEraser:
    """The item's rows out of every policy's kept labels in one bucket, and the versions that held them."""

    def __init__(self, key: ItemKey, s3: Any, *, dry_run: bool, notes: list[str]):
        self.key, self.s3, self.dry_run, self.notes = key, s3, dry_run, notes

    def erase(self, bucket: str, label_policies: Iterable[str]) -> tuple[int, int]:
        """The item's rows out of each policy's kept labels (written as a new current version, its
        watermark and next full read as they were), then every other version of the object that
        holds the item deleted, so that none is left for the lifecycle rule's day. `label_policies`:
        those whose labelled-examples rows of the item were erased. How many rows, how many versions."""
        rows = versions = 0
        # a policy that had a row of the item is rewritten even without an object yet (a first sync under way)
        touched = {labels_key(policy) for policy in label_policies}
        for key in sorted(set(self._versions(bucket, LABELS_PREFIX)) | touched):
            found, written = self._rewrite_labels(bucket, key, touch=key in touched)
            rows += found
            # listed after the rewrite: the version it replaced, and any relearning wrote meanwhile
            for version in self._versions(bucket, key).get(key, []):
                if version != written and self._labels_of(bucket, key, version) is not None:
                    versions += 1
                    if not self.dry_run:
                        self.s3.delete_object(Bucket=bucket, Key=key, VersionId=version)
            if written:
                self._check_not_written_back(bucket, key, written)
        return rows, versions

    def _versions(self, bucket: str, prefix: str) -> dict[str, list[str]]:
        """The version ids of each object under `prefix` (delete markers hold nothing)."""
        found: dict[str, list[str]] = {}
        for page in self.s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
            for version in page.get("Versions", []):
                found.setdefault(version["Key"], []).append(version["VersionId"])
        return found

    def _labels_of(self, bucket: str, key: str, version: str) -> KeptLabels | None:
        """One version's kept labels where it holds the item; None where not (or where it does not
        read: a note says so, and it is left)."""
        data = self.s3.get_object(Bucket=bucket, Key=key, VersionId=version)["Body"].read()
        try:
            kept = KeptLabels.load(data, f"{key} (version {version})")
        except ValueError as error:
            self.notes.append(f"kept-labels: {error}: left as it is")
            return None
        return kept if kept.remove(self._holds_row) else None

    def _rewrite_labels(self, bucket: str, key: str, *, touch: bool) -> tuple[int, str | None]:
        """The current version without the item's rows, written as the new current one with its
        `erased_at` now, where it held the item or `touch` (its policy's table held a row of the
        item, which a relearning sync may have read). Written only while it is the version read,
        read again on a conflict (see the module). The rows removed (found, on a dry run) and the
        new version's id (None when nothing was written)."""
        for _ in range(LABEL_WRITE_ATTEMPTS):
            try:
                current = self.s3.get_object(Bucket=bucket, Key=key)
                data, condition = current["Body"].read(), {"IfMatch": current["ETag"]}
            except self.s3.exceptions.NoSuchKey:  # none yet, or a delete marker: its versions are read below
                data, condition = None, {"IfNoneMatch": "*"}
            try:
                kept = KeptLabels.load(data, key) if data is not None else KeptLabels()
            except ValueError:
                return 0, None  # the versions' pass names it in a note
            removed = kept.remove(self._holds_row)
            if self.dry_run or not (removed or touch):
                return removed, None
            kept.erased_at = time.time()
            try:
                return removed, self.s3.put_object(Bucket=bucket, Key=key, Body=kept.dump(), **condition)["VersionId"]
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") not in CHANGED_MEANWHILE:
                    raise
        self.notes.append(f"kept-labels: {key} changed under each of {LABEL_WRITE_ATTEMPTS} rewrites (relearning "
                          "wrote it meanwhile): run erase again")
        return 0, None

    def _check_not_written_back(self, bucket: str, key: str, written: str) -> None:
        """A relearning step that read the labels before the rewrite and writes its copy (the
        item's rows in it) after the versions were read: said in a note (run erase again)."""
        current = self.s3.head_object(Bucket=bucket, Key=key)["VersionId"]
        if current != written and self._labels_of(bucket, key, current) is not None:
            self.notes.append(f"kept-labels: relearning wrote {key} again while erase ran, the item's rows in it: "
                              "run erase again")

    def _holds_row(self, row: Mapping[str, str]) -> bool:
        return self.key.holds(row.get("item_kind"), row.get("item"))

