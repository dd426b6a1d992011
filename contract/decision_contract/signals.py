"""The model's signals for many decisions, as files: what the batch scorer writes and what the
fitter reads (its signal cache, and the signals shipped with the repository).

A decision's signals are the hidden state at its answer position, the option letters' logits,
the token mass the letters hold and the prompt version. They are keyed by `request_key`: the
model's sha256 and the decision's content (not its id), so the same item asked again of the
same model finds its row, and a changed prompt, question or model finds none.

A shard file is a numpy `.npz` holding, for n rows:

- `model_sha256`: the model the rows come from (one model a file);
- `keys`: the request keys, 32 raw bytes each;
- `hidden`: n x hidden width, float16 (a hidden state's values lie far inside its range);
- `n_options`, `logits`: how many letter logits each row has, and all of them end to end (float32);
- `mass`: float32; `versions` and `version`: the prompt versions, and each row's index into them.

Written under a temporary name and renamed, so a reader never sees half a shard.

One decision's hidden state also travels as text (`hidden_text`, `hidden_from_text`): the same
float16 values, little-endian, in base64 (2 bytes a value, 4/3 of that as text), as a decision
record keeps them for relearning (576 values: 1,536 characters; 2,560: 6,828).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import math
import os
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .models import Decision

#: A shard's file name ends so; anything else in a signals folder is not a shard.
SHARD_SUFFIX = ".signals.npz"


def request_key(model_sha256: str, decision: Decision) -> str:
    """The key of a decision's signals: sha256 (hex) of the model's sha256 and the decision's
    content, leaving out what does not change the forward pass (id, temperature, whether the
    hidden state is returned). A decision of the default layout is written without its layout
    (`Decision`'s serializer), so its key is the one it had before decisions had a layout."""
    content = decision.model_dump_json(exclude={"id", "return_hidden_state", "temperature"})
    return hashlib.sha256(f"{model_sha256}\n{content}".encode()).hexdigest()


def hidden_text(hidden: Sequence[float]) -> str:
    """A hidden state as float16 little-endian bytes in base64 (pure Python: the routing functions
    write it). ValueError when a value is not finite or lies past float16's range."""
    try:
        packed = struct.pack(f"<{len(hidden)}e", *hidden)
    except (OverflowError, struct.error) as error:
        raise ValueError(f"hidden state: a value does not fit float16 ({error})") from None
    if not all(math.isfinite(v) for v in hidden):
        raise ValueError("hidden state: a value is not finite")
    return base64.b64encode(packed).decode("ascii")


def hidden_from_text(text: str, width: int | None = None) -> list[float]:
    """`hidden_text`'s values back (as floats); ValueError naming what is wrong: not base64, an odd
    byte count, or not `width` values."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise ValueError(f"hidden state text: not base64 ({error})") from None
    if len(raw) % 2:
        raise ValueError(f"hidden state text: {len(raw)} bytes, not whole float16 values (2 bytes each)")
    values = list(struct.unpack(f"<{len(raw) // 2}e", raw))
    if width is not None and len(values) != width:
        raise ValueError(f"hidden state text: {len(values)} values, expected {width}")
    return values


@dataclass(frozen=True)
class SignalShard:
    """One shard's rows, as arrays (row i: `keys[i]`, `hidden[i]`, `logits_of(i)`, ...)."""

    model_sha256: str
    keys: list[str]
    hidden: np.ndarray  # float16, n x width
    offsets: np.ndarray  # row i's logits are logits[offsets[i]:offsets[i + 1]]
    logits: np.ndarray  # float32
    mass: np.ndarray  # float32
    versions: list[str]
    version: np.ndarray  # index into versions

    def __len__(self) -> int:
        return len(self.keys)

    def logits_of(self, i: int) -> np.ndarray:
        return self.logits[self.offsets[i]:self.offsets[i + 1]]

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray, float, str]:
        """Row i as (hidden float32, letter logits float64, token mass, prompt version)."""
        return (self.hidden[i].astype(np.float32), self.logits_of(i).astype(np.float64), float(self.mass[i]),
                self.versions[int(self.version[i])])


def write_shard(path: Path, model_sha256: str, keys: Sequence[str], hidden: np.ndarray | Sequence[np.ndarray],
                logits: Sequence[Sequence[float]], mass: Sequence[float], versions: Sequence[str], *,
                compress: bool = False, in_place: bool = False) -> Path:
    """Write rows as one shard at `path`; the path written.

    By default the shard is written beside `path` and renamed onto it, so a reader never sees half
    a shard. `in_place`: written under its final name in one write, for a folder that SageMaker
    Processing uploads as files appear (`S3UploadMode: Continuous`), where how a rename is uploaded
    is undocumented; a reader then checks the shard (`read_shard` refuses a truncated one)."""
    names = sorted(set(versions))
    if not len(keys) == len(hidden) == len(logits) == len(mass) == len(versions):
        raise ValueError("a shard's keys, hidden states, logits, masses and versions must be as many")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    buffer = io.BytesIO()
    save = np.savez_compressed if compress else np.savez
    width = np.shape(hidden)[1] if len(keys) else 0
    save(buffer, model_sha256=np.str_(model_sha256),
         keys=np.array([bytes.fromhex(k) for k in keys], dtype="S32"),
         hidden=np.asarray(hidden, dtype=np.float16).reshape(len(keys), width),
         n_options=np.array([len(z) for z in logits], dtype=np.uint8),
         logits=np.concatenate([np.asarray(z, dtype=np.float32) for z in logits]) if len(keys) else np.zeros(0, np.float32),
         mass=np.asarray(mass, dtype=np.float32),
         versions=np.array(names, dtype=np.str_),
         version=np.array([names.index(v) for v in versions], dtype=np.uint8))
    if in_place:
        path.write_bytes(buffer.getvalue())
        return path
    temporary.write_bytes(buffer.getvalue())
    temporary.replace(path)
    return path


#: What numpy raises for a file that is not an npz, or one without a shard's members (an empty or
#: truncated file: EOFError; a damaged zip: BadZipFile).
_NOT_A_SHARD = (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile)


def read_shard(path: Path) -> SignalShard:
    """A shard's rows; ValueError naming the file when it is not a shard."""
    try:
        with np.load(path, allow_pickle=False) as data:
            n_options = data["n_options"].astype(np.int64)
            offsets = np.concatenate([[0], np.cumsum(n_options)])
            # numpy's bytes type drops trailing NUL bytes: a key ending in 00 is padded back to 32 bytes
            keys = [bytes(k).ljust(32, b"\0").hex() for k in data["keys"]]
            return SignalShard(str(data["model_sha256"]), keys, data["hidden"], offsets, data["logits"], data["mass"],
                               [str(v) for v in data["versions"]], data["version"])
    except _NOT_A_SHARD as error:
        raise ValueError(f"{path}: not a signals shard ({error})") from error


def read_model_sha256(path: Path) -> str:
    """The model a shard's rows come from, without reading its rows (an npz loads members one by
    one); ValueError naming the file when it is not a shard."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return str(data["model_sha256"])
    except _NOT_A_SHARD as error:
        raise ValueError(f"{path}: not a signals shard ({error})") from error


def read_keys(path: Path) -> np.ndarray:
    """A shard's request keys as 32 raw bytes each (numpy "S32", whose trailing zero bytes compare
    as absent, alike on both sides of a lookup), without reading its rows; ValueError naming the
    file when it is not a shard."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return data["keys"].astype("S32")
    except _NOT_A_SHARD as error:
        raise ValueError(f"{path}: not a signals shard ({error})") from error
