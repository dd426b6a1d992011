"""The one store of the model's signals (hidden state, option logits, allowed-token mass, prompt
version) per request key (`decision_contract.signals.request_key`), for `make fit`, relearning and
`make fit-history` alike.

The signals live in shard files (`decision_contract.signals`: hidden states in float16) in one
folder per model (its sha256), so a second run scores nothing again and an interrupted one resumes
where it stopped. What the batch scorer writes is a shard, and so are the signals shipped with the
repository for the embedded model (`bench/data/signals/<sha256>.npz`) and the file relearning keeps
in its bucket: each joins the store as it is (`adopt`, `include`). Only the keys are indexed in
memory; the signals are read from the shards when gathered, one shard at a time.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from decision_contract import DecisionResult
from decision_contract.signals import SHARD_SUFFIX, read_keys, read_model_sha256, read_shard, write_shard
from evaluation.runners import RunFailure

#: `make fit-history`'s store (`--cache`): one folder per model file (its sha256).
DEFAULT_CACHE = Path.home() / ".cache/decision-router/signals"
#: The signals shipped for the shipped labelled sets, one file per model (its GGUF's sha256).
SHIPPED_SIGNALS = Path(__file__).resolve().parents[1] / "bench/data/signals"

#: One decision's signals: hidden state (float32), option logits (float64), allowed-token mass, prompt version.
Row = tuple[np.ndarray, np.ndarray, float, str]


def shipped_path(model_sha256: str, directory: Path = SHIPPED_SIGNALS) -> Path:
    """Where the signals shipped for a model are (none may be)."""
    return directory / f"{model_sha256}.npz"


@dataclass(frozen=True)
class Gathered:
    """The signals of a list of request keys, row i for key i."""

    hidden: np.ndarray  # float16, n x width
    logits: list[np.ndarray]
    mass: np.ndarray
    versions: list[str]

    def row(self, i: int) -> Row:
        return self.hidden[i].astype(np.float32), self.logits[i], float(self.mass[i]), self.versions[i]


@dataclass(frozen=True)
class _Pending:
    """A row put and not yet written as a shard."""

    model_sha256: str
    hidden: np.ndarray
    logits: np.ndarray
    mass: float
    version: str


class SignalsStore:
    """The model's signals per request key, in shard files under `folder` (None: what is put is
    kept in memory). Shards written elsewhere join it moved (`adopt`) or read where they are
    (`include`: the shipped file, a downloaded one)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._shards: list[Path] = []
        self._keys: list[np.ndarray] = []  # per shard, its keys as 32 raw bytes
        self._index: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # sorted keys, shard, row
        self._pending: dict[str, _Pending] = {}
        if folder is not None and folder.is_dir():
            for shard in sorted(folder.glob(f"*{SHARD_SUFFIX}")):
                self._add(shard)

    def _add(self, shard: Path) -> None:
        self._shards.append(shard)
        self._keys.append(read_keys(shard))  # the keys alone: the signals are read when gathered
        self._index = None

    def __len__(self) -> int:
        return sum(len(k) for k in self._keys) + len(self._pending)

    def __contains__(self, key: str) -> bool:
        return key in self._pending or bool(self._lookup([key])[0][0])

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
        wanted = np.array([bytes.fromhex(k) for k in keys], dtype="S32")
        at = np.minimum(np.searchsorted(sorted_keys, wanted), len(sorted_keys) - 1)
        return sorted_keys[at] == wanted, shards[at], rows[at]

    def missing(self, keys: Sequence[str]) -> list[int]:
        """Indexes of the first occurrence of each key the store lacks."""
        found, _, _ = self._lookup(keys)
        seen: set[str] = set()
        out = []
        for i in np.flatnonzero(~found):
            key = keys[int(i)]
            if key not in seen and key not in self._pending:
                seen.add(key)
                out.append(int(i))
        return out

    # ------------------------------------------------------------------ adding
    def put(self, key: str, result: DecisionResult) -> None:
        """An answer of the model (its hidden state asked for); written as a shard at `save`."""
        self._pending[key] = _Pending(result.model.sha256, np.asarray(result.hidden_state or [], dtype=np.float32),
                                      np.asarray(result.option_logits, dtype=np.float64), result.allowed_token_mass,
                                      result.prompt_version)

    def put_row(self, key: str, model_sha256: str, row: Row) -> None:
        """Signals known without asking (kept at decision time); written as a shard at `save`."""
        hidden, logits, mass, version = row
        self._pending[key] = _Pending(model_sha256, np.asarray(hidden, dtype=np.float32),
                                      np.asarray(logits, dtype=np.float64), float(mass), version)

    def save(self) -> None:
        """The rows put since the last save, as one more shard (one per model)."""
        if self.folder is None or not self._pending:
            return
        pending, self._pending = self._pending, {}
        for model in sorted({p.model_sha256 for p in pending.values()}):
            keys = [k for k, p in pending.items() if p.model_sha256 == model]
            shard = write_shard(self.folder / f"local-{time.time_ns()}{SHARD_SUFFIX}", model, keys,
                                [pending[k].hidden for k in keys], [pending[k].logits.tolist() for k in keys],
                                [pending[k].mass for k in keys], [pending[k].version for k in keys])
            self._add(shard)

    def adopt(self, shards: Sequence[Path]) -> None:
        """Shards written elsewhere (the batch scorer's output) moved into the store."""
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

    def include(self, shard: Path, model_sha256: str) -> int:
        """A shard read where it is (never moved or changed); how many of its keys the store
        lacked. ValueError naming the file when it is not a shard or holds another model's rows."""
        held = read_model_sha256(shard)
        if held != model_sha256:
            raise ValueError(f"{shard}: signals of model {held}, not {model_sha256}")
        keys = read_keys(shard)
        new = len(self.missing([bytes(k).ljust(32, b"\0").hex() for k in keys]))
        self._add(shard)
        return new

    def include_shipped(self, model_sha256: str, directory: Path = SHIPPED_SIGNALS) -> int:
        """The signals shipped for this model (none shipped: 0); how many the store lacked."""
        path = shipped_path(model_sha256, directory)
        return self.include(path, model_sha256) if path.is_file() else 0

    # ------------------------------------------------------------------ reading
    def gather(self, keys: Sequence[str]) -> Gathered:
        """The signals of every key (each must be in the store), reading each shard once."""
        self.save()
        found, shard_of, row_of = self._lookup(keys)
        pending = [int(i) for i in np.flatnonzero(~found) if keys[int(i)] in self._pending]
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
        for at in pending:
            row = self._pending[keys[at]]
            if hidden is None:
                hidden = np.zeros((len(keys), len(row.hidden)), dtype=np.float16)
            hidden[at] = row.hidden.astype(np.float16)
            logits[at], mass[at], versions[at] = row.logits, row.mass, row.version
        return Gathered(hidden if hidden is not None else np.zeros((len(keys), 0), np.float16), logits, mass, versions)

    def rows(self, keys: Sequence[str]) -> dict[str, Row]:
        """The signals of those keys the store holds, by key (the others left out)."""
        lacking = {keys[i] for i in self.missing(keys)}
        present = sorted(set(keys) - lacking)
        gathered = self.gather(present)
        return {key: gathered.row(i) for i, key in enumerate(present)}

    def write_file(self, path: Path, model_sha256: str, keys: Sequence[str]) -> Path:
        """The rows of those keys the store holds as one compressed shard at `path` (the file
        shipped for a model, the one relearning keeps in its bucket)."""
        rows = self.rows(keys)
        ordered = sorted(rows)
        return write_shard(path, model_sha256, ordered, [rows[k][0] for k in ordered], [rows[k][1].tolist() for k in ordered],
                           [rows[k][2] for k in ordered], [rows[k][3] for k in ordered], compress=True)
