"""The labels relearning has read, kept in the head bucket beside its signal cache, so that each
run reads only the labels new since the last one from the labelled-examples table.

`labels/<policy>.jsonl.gz`: a header (the watermark, the next full read), then one row per item
key as the table holds it (a later review of an item replaces its row); the layout is
decision_router/domain/kept_labels.py, which `make erase` rewrites without an erased item's rows.

A sync (`sync_labels`):

- the first (nothing kept): the policy's whole partition, once: rows from before the shard index
  are in no shard. Again once `full_read_at` has come (the first sync plus the longest review
  wait): a review answered by an execution started before the index has no shard either.
- every other: the shard index's rows labelled after the watermark (LabelledExamples.since),
  nothing older. The watermark stays SETTLE_SECONDS behind the clock: a row whose write was
  retried, or that the index shows late, is read on the next sync (rows read twice are one row).
- rows labelled more than the retention ago are dropped (the table's TTL removes them there), and
  past MAX_KEPT_ROWS, or past the bytes `kept_bytes_budget` allows the function's memory, the
  oldest are (the table keeps them until their TTL); how many, in `Synced.capped`. The bounds hold
  while the table's rows come in too (`_NewestRows`), a whole read of the partition included.
- the object is written only while it is the one read (S3 If-Match on its ETag; If-None-Match
  for a new one). `make erase` deletes an item's table rows, then always writes a new version:
  a sync that read the object before meets a conflict, and starts over from the object (object
  first, then the table), so the rows it read before the erasure are never written back. After
  WRITE_ATTEMPTS conflicts in a row, LabelsKeptChanging.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Protocol

import numpy as np

from decision_contract.signals import hidden_from_text
from decision_router.domain.kept_labels import KeptLabels, labels_key
from decision_router.domain.kept_signals import KeptSignals
from training.signals_store import SignalsStore

#: How far behind the clock the watermark stays (DynamoDB's index is eventually consistent, and
#: the workflow's write of a label may be retried for some seconds after its labelled_at).
SETTLE_SECONDS = 300
#: Labels kept per policy, the newest: at a high review volume a year's labels would not fit one
#: object nor one fit (about 2 KB a row without signals, 4 to 16 KB with a model's kept signals).
MAX_KEPT_ROWS = 50_000
#: What a sync holds at its peak per byte of the kept rows' JSON lines (the object read, its rows
#: as Python strings, the object written again): measured 4.4 to 5.0 on rows with a 4B model's
#: signals (docs/learning/relearning.md), the kept signals put in the signals store included.
SYNC_PEAK_PER_BYTE = 5
#: The share of the relearning function's memory the kept labels may take at that peak; the rest
#: is the fitter's (the cases, the signals store, the sentence encoder, the heads).
KEPT_LABELS_MEMORY_SHARE = 0.4
#: The relearning function's memory where Lambda does not say it (template.yaml's MemorySize).
FUNCTION_MEMORY_MB = 3008
#: Syncs started over when the kept labels change under one (an erasure, another step) before it gives up.
WRITE_ATTEMPTS = 5


class LabelsKeptChanging(RuntimeError):
    """The kept labels changed under every attempt to write them (WRITE_ATTEMPTS)."""


class HeadBucket(Protocol):
    def find_tagged(self, key: str) -> tuple[bytes, str] | None: ...

    def put_unless_changed(self, key: str, data: bytes, etag: str | None) -> bool: ...


class LabelTable(Protocol):
    def of_policy(self, policy_name: str) -> Iterable[dict[str, str]]: ...

    def since(self, policy_name: str, labelled_after: str) -> Iterable[dict[str, str]]: ...


def iso(epoch: float) -> str:
    """An epoch time as Step Functions writes `labelled_at` ($$.State.EnteredTime): UTC, milliseconds."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class Synced:
    rows: list[dict[str, str]]
    read: int  # rows the labelled-examples table handed over in this sync
    full_read: bool
    restarts: int = 0  # syncs started over: the kept labels changed before this one's write
    capped: int = 0  # the oldest rows left out past MAX_KEPT_ROWS or the bytes budget


def kept_bytes_budget(memory_mb: int | None = None) -> int:
    """The most bytes of JSON lines the kept labels may hold: KEPT_LABELS_MEMORY_SHARE of the
    function's memory (`memory_mb`; else Lambda's AWS_LAMBDA_FUNCTION_MEMORY_SIZE, else
    FUNCTION_MEMORY_MB) at SYNC_PEAK_PER_BYTE. ValueError naming a memory that is not a positive
    whole number of MB."""
    if memory_mb is None:
        setting = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", str(FUNCTION_MEMORY_MB))
        try:
            memory_mb = int(setting)
        except ValueError:
            raise ValueError(f"AWS_LAMBDA_FUNCTION_MEMORY_SIZE {setting!r}: not a whole number of MB") from None
    if memory_mb < 1:
        raise ValueError(f"memory_mb {memory_mb!r}: must be 1 MB or more")
    return int(memory_mb * 2**20 * KEPT_LABELS_MEMORY_SHARE / SYNC_PEAK_PER_BYTE)


def sync_labels(bucket: HeadBucket, table: LabelTable, policy: str, *, now: float, retention_days: int,
                full_read_after_seconds: float, max_bytes: int | None = None) -> Synced:
    """The policy's labels: those kept, with the table's new ones merged in (see the module);
    at most `max_bytes` of JSON lines (None: `kept_bytes_budget()`)."""
    key = labels_key(policy)
    budget = kept_bytes_budget() if max_bytes is None else max_bytes
    if budget < 1:
        raise ValueError(f"max_bytes {max_bytes!r}: must be 1 or more")
    for restarts in range(WRITE_ATTEMPTS):
        found = bucket.find_tagged(key)
        raw, etag = found if found is not None else (None, None)
        kept, synced = _merged(raw, key, table, policy, now=now, retention_days=retention_days,
                               full_read_after_seconds=full_read_after_seconds, max_bytes=budget)
        data = kept.dump()
        if data == raw or bucket.put_unless_changed(key, data, etag):
            return replace(synced, restarts=restarts)
    raise LabelsKeptChanging(f"{key}: changed under each of {WRITE_ATTEMPTS} attempts to write it (an erasure "
                             "or another relearning step meanwhile); the next step syncs again")


def _merged(raw: bytes | None, key: str, table: LabelTable, policy: str, *, now: float, retention_days: int,
            full_read_after_seconds: float, max_bytes: int) -> tuple[KeptLabels, Synced]:
    """The kept labels `raw` (None: none yet) with the table's new rows merged in, and what was read."""
    kept = KeptLabels.load(raw, key) if raw is not None else None
    # never synced: nothing kept, or only what an erasure wrote before the first sync
    first = kept is None or (not kept.watermark and not kept.rows)
    full = first or (kept is not None and kept.full_read_at is not None and now >= kept.full_read_at)
    if kept is None:
        kept = KeptLabels()
    kept.full_read_at = now + full_read_after_seconds if first else None if full else kept.full_read_at
    bounded = _NewestRows(oldest=iso(now - retention_days * 86400), max_bytes=max_bytes)
    for row in kept.rows.values():
        bounded.add(row)
    read, newest = 0, ""
    for row in table.of_policy(policy) if full else table.since(policy, kept.watermark):
        read, newest = read + 1, max(newest, row.get("labelled_at", ""))
        bounded.add(row)
    bounded.bound()
    kept.rows = bounded.rows
    kept.watermark = max(kept.watermark, min(newest, iso(now - SETTLE_SECONDS)))
    return kept, Synced(list(kept.rows.values()), read, full, capped=bounded.capped)


class _NewestRows:
    """Rows by item key (a later review of an item replaces its row), none labelled before `oldest`
    (the retention), bounded as they come: past twice MAX_KEPT_ROWS or `max_bytes` of JSON lines
    (as KeptLabels.dump writes them) the oldest are dropped down to the bounds, so even a whole read
    of a large partition holds at most about twice the budget. The newest by (`labelled_at`, key)
    are kept, never an older row for a newer one; `capped` counts the rows dropped."""

    def __init__(self, *, oldest: str, max_bytes: int):
        self.oldest, self.max_bytes = oldest, max_bytes
        self.rows: dict[str, dict[str, str]] = {}
        self.sizes: dict[str, int] = {}
        self.total = self.capped = 0

    def add(self, row: dict[str, str]) -> None:
        key, labelled = row["item_key"], row.get("labelled_at", "")
        held = self.rows.get(key)
        if labelled < self.oldest or (held is not None and labelled < held.get("labelled_at", "")):
            return
        size = len(json.dumps(row, sort_keys=True)) + 1  # its line and the newline
        self.total += size - self.sizes.get(key, 0)
        self.rows[key], self.sizes[key] = row, size
        if self.total > 2 * self.max_bytes or len(self.rows) > 2 * MAX_KEPT_ROWS:
            self.bound()

    def bound(self) -> None:
        """Down to the newest MAX_KEPT_ROWS rows within `max_bytes`."""
        newest_first = sorted(self.rows, key=lambda key: (self.rows[key].get("labelled_at", ""), key), reverse=True)
        fitting, used = set(), 0
        for key in newest_first[:MAX_KEPT_ROWS]:
            used += self.sizes[key]
            if used > self.max_bytes:
                break
            fitting.add(key)
        if len(fitting) < len(self.rows):
            self.capped += len(self.rows) - len(fitting)
            self.rows = {key: row for key, row in self.rows.items() if key in fitting}
            self.sizes = {key: self.sizes[key] for key in self.rows}
            self.total = sum(self.sizes.values())


def signals_of(row: dict[str, str]) -> dict[str, KeptSignals]:
    """The row's signals kept at decision time (question → signals); {} for a row without them.
    ValueError naming what does not read."""
    text = row.get("signals")
    if not text:
        return {}
    value: Any = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("signals: not a JSON object of question → signals")
    return {question: KeptSignals.model_validate(kept) for question, kept in value.items()}


def seed_kept_signals(store: SignalsStore, model_sha256: str, kept: Iterable[KeptSignals],
                      on_problem: Callable[[str], None] = lambda problem: None) -> int:
    """The kept signals of this model that the store lacks, put under their request keys (written
    at its next save); how many. Another model's are left out: the endpoint is asked for those items."""
    added = 0
    for signals in kept:
        if signals.model_sha256 != model_sha256 or signals.request_key in store:
            continue
        try:
            hidden = np.asarray(hidden_from_text(signals.hidden), dtype=np.float32)
        except ValueError as error:
            on_problem(f"{signals.request_key}: {error}")
            continue
        store.put_row(signals.request_key, model_sha256, (hidden, np.asarray(signals.letter_logits, dtype=np.float64),
                                                          float(signals.allowed_token_mass), signals.prompt_version))
        added += 1
    return added
