"""`make fit-history`'s signal cache: the model's signals (hidden state, option logits, allowed-token
mass, prompt version) per request key, in shard files under one folder per model, so that a second
run scores nothing again and an interrupted one resumes where it stopped."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from decision_contract import DecisionResult
from decision_contract.signals import SHARD_SUFFIX, read_keys, read_shard, write_shard
from evaluation.runners import RunFailure

#: Where the signals are kept (`--cache`): one folder per model file (its sha256).
DEFAULT_CACHE = Path.home() / ".cache/decision-router/signals"


@dataclass(frozen=True)
class Gathered:
    """The signals of a list of request keys, row i for key i."""

    hidden: np.ndarray  # float16, n x width
    logits: list[np.ndarray]
    mass: np.ndarray
    versions: list[str]

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray, float, str]:
        return self.hidden[i].astype(np.float32), self.logits[i], float(self.mass[i]), self.versions[i]


class SignalCache:
    """The model's signals per request key, in shard files (decision_contract.signals: hidden
    states in float16) under one folder per model (its sha256). What the batch scorer writes is
    a shard too, so its output joins the cache as it is. Only the keys are indexed in memory; the
    signals are read from the shards when gathered, one shard at a time."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._shards: list[Path] = []
        self._keys: list[np.ndarray] = []  # per shard, its keys as 32 raw bytes
        self._index: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # sorted keys, shard, row
        self._pending: dict[str, DecisionResult] = {}  # answers not yet written (no folder: kept here)
        if folder is not None and folder.is_dir():
            for shard in sorted(folder.glob(f"*{SHARD_SUFFIX}")):
                self._add(shard)

    def _add(self, shard: Path) -> None:
        self._shards.append(shard)
        self._keys.append(read_keys(shard))  # the keys alone: the signals are read when gathered
        self._index = None

    def __len__(self) -> int:
        return sum(len(k) for k in self._keys) + len(self._pending)

    def _lookup(self, keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(found, shard, row) per key: a sorted index over every shard's keys, searched at once
        (n log n, never a scan per key)."""
        if self._index is None:
            every = np.concatenate(self._keys) if self._keys else np.zeros(0, dtype="S32")
            shard = np.concatenate([np.full(len(k), i, dtype=np.int32) for i, k in enumerate(self._keys)]) if self._keys \
                else np.zeros(0, dtype=np.int32)
            row = np.concatenate([np.arange(len(k), dtype=np.int64) for k in self._keys]) if self._keys \
                else np.zeros(0, dtype=np.int64)
            order = np.argsort(every, kind="stable")
            self._index = every[order], shard[order], row[order]
        sorted_keys, shards, rows = self._index
        if not len(sorted_keys):
            return np.zeros(len(keys), bool), np.zeros(len(keys), np.int32), np.zeros(len(keys), np.int64)
        wanted = _raw_keys(keys)
        at = np.minimum(np.searchsorted(sorted_keys, wanted), len(sorted_keys) - 1)
        return sorted_keys[at] == wanted, shards[at], rows[at]

    def missing(self, keys: Sequence[str]) -> list[int]:
        """Indexes of the first occurrence of each key the cache lacks."""
        found, _, _ = self._lookup(keys)
        seen: set[str] = set()
        out = []
        for i in np.flatnonzero(~found):
            key = keys[i]
            if key not in seen and key not in self._pending:
                seen.add(key)
                out.append(int(i))
        return out

    def put(self, key: str, result: DecisionResult) -> None:
        self._pending[key] = result

    def save(self) -> None:
        """The answers put since the last save, as one more shard."""
        if self.folder is None or not self._pending:
            return
        pending, self._pending = self._pending, {}
        keys = list(pending)
        shard = write_shard(self.folder / f"local-{time.time_ns()}{SHARD_SUFFIX}", self.model_of(pending), keys,
                            [pending[k].hidden_state or [] for k in keys], [pending[k].option_logits for k in keys],
                            [pending[k].allowed_token_mass for k in keys], [pending[k].prompt_version for k in keys])
        self._add(shard)

    @staticmethod
    def model_of(results: dict[str, DecisionResult]) -> str:
        return next(iter(results.values())).model.sha256

    def adopt(self, shards: Sequence[Path]) -> None:
        """Shards written elsewhere (the batch scorer's output) moved into the cache."""
        for shard in shards:
            if self.folder is None:
                self._add(shard)
                continue
            self.folder.mkdir(parents=True, exist_ok=True)
            target = self.folder / shard.name
            if target.exists():
                target = self.folder / f"{shard.name[:-len(SHARD_SUFFIX)]}-{time.time_ns()}{SHARD_SUFFIX}"
            shutil.move(str(shard), target)
            self._add(target)

    def gather(self, keys: Sequence[str]) -> Gathered:
        """The signals of every key (each must be cached), reading each shard once."""
        self.save()
        found, shard_of, row_of = self._lookup(keys)
        pending = [i for i in np.flatnonzero(~found) if keys[i] in self._pending]
        if int((~found).sum()) != len(pending):
            raise RunFailure(f"{int((~found).sum()) - len(pending)} item(s) have no signals after scoring")
        hidden: np.ndarray | None = None
        logits: list[np.ndarray] = [np.zeros(0)] * len(keys)
        mass = np.zeros(len(keys), dtype=np.float32)
        versions = [""] * len(keys)
        for shard_number in np.unique(shard_of[found]):
            shard = read_shard(self._shards[int(shard_number)])
            here = np.flatnonzero(found & (shard_of == shard_number))
            rows = row_of[here]
            if hidden is None:
                hidden = np.zeros((len(keys), shard.hidden.shape[1]), dtype=np.float16)
            hidden[here] = shard.hidden[rows]
            mass[here] = shard.mass[rows]
            for i, r in zip(here, rows):
                logits[i] = shard.logits_of(int(r)).astype(np.float64)
                versions[i] = shard.versions[int(shard.version[r])]
        for i in pending:
            result = self._pending[keys[i]]
            if hidden is None:
                hidden = np.zeros((len(keys), len(result.hidden_state or [])), dtype=np.float16)
            hidden[i] = np.asarray(result.hidden_state, dtype=np.float16)
            logits[i], mass[i], versions[i] = np.asarray(result.option_logits), result.allowed_token_mass, result.prompt_version
        return Gathered(hidden if hidden is not None else np.zeros((len(keys), 0), np.float16), logits, mass, versions)


def _raw_keys(keys: Sequence[str]) -> np.ndarray:
    return np.array([bytes.fromhex(k) for k in keys], dtype="S32")
