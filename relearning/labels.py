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
  past MAX_KEPT_ROWS the oldest are (the table keeps them until their TTL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Protocol

import numpy as np

from decision_contract.signals import hidden_from_text
from decision_router.domain.kept_labels import KeptLabels, labels_key
from decision_router.domain.kept_signals import KeptSignals
from training.features import FeatureCache

#: How far behind the clock the watermark stays (DynamoDB's index is eventually consistent, and
#: the workflow's write of a label may be retried for some seconds after its labelled_at).
SETTLE_SECONDS = 300
#: Labels kept per policy, the newest: at a high review volume a year's labels would not fit one
#: object nor one fit (about 2 KB a row without signals, 4 to 16 KB with a model's kept signals).
MAX_KEPT_ROWS = 50_000


class HeadBucket(Protocol):
    def find(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...


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


def sync_labels(bucket: HeadBucket, table: LabelTable, policy: str, *, now: float, retention_days: int,
                full_read_after_seconds: float) -> Synced:
    """The policy's labels: those kept, with the table's new ones merged in (see the module)."""
    key = labels_key(policy)
    raw = bucket.find(key)
    kept = KeptLabels.load(raw, key) if raw is not None else None
    full = kept is None or (kept.full_read_at is not None and now >= kept.full_read_at)
    if kept is None:
        kept = KeptLabels(full_read_at=now + full_read_after_seconds)
    elif full:
        kept.full_read_at = None
    read = list(table.of_policy(policy)) if full else list(table.since(policy, kept.watermark))
    for row in read:
        held = kept.rows.get(row["item_key"])
        if held is None or row.get("labelled_at", "") >= held.get("labelled_at", ""):
            kept.rows[row["item_key"]] = row
    oldest = iso(now - retention_days * 86400)
    kept.rows = {k: row for k, row in kept.rows.items() if row.get("labelled_at", "") >= oldest}
    if len(kept.rows) > MAX_KEPT_ROWS:  # the newest alone: the object and the fit stay bounded
        newest_first = sorted(kept.rows.items(), key=lambda pair: (pair[1].get("labelled_at", ""), pair[0]), reverse=True)
        kept.rows = dict(newest_first[:MAX_KEPT_ROWS])
    newest = max((row.get("labelled_at", "") for row in read), default="")
    kept.watermark = max(kept.watermark, min(newest, iso(now - SETTLE_SECONDS)))
    data = kept.dump()
    if data != raw:
        bucket.put(key, data)
    return Synced(list(kept.rows.values()), len(read), full)


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


def seed_kept_signals(cache: FeatureCache, model_sha256: str, kept: Iterable[KeptSignals],
                      on_problem: Callable[[str], None] = lambda problem: None) -> int:
    """The kept signals of this model that the cache lacks, added under their request keys (marked
    to save); how many. Another model's are left out: the endpoint is asked for those items."""
    added = 0
    for signals in kept:
        if signals.model_sha256 != model_sha256 or signals.request_key in cache.rows:
            continue
        try:
            hidden = np.asarray(hidden_from_text(signals.hidden), dtype=np.float32)
        except ValueError as error:
            on_problem(f"{signals.request_key}: {error}")
            continue
        cache.rows[signals.request_key] = (hidden, np.asarray(signals.letter_logits, dtype=np.float64),
                                           float(signals.allowed_token_mass), signals.prompt_version)
        added += 1
    cache.dirty = cache.dirty or added > 0
    return added
