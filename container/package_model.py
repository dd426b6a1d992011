#!/usr/bin/env python3
"""Package a GGUF as the SageMaker model archive `model.tar.gz`, with its sha256 checked and a
manifest written.

    python container/package_model.py Qwen3.5-4B-Q4_K_M.gguf --sha256 <expected hex> \\
        --output model.tar.gz --manifest model-manifest.json --source https://…/Qwen3.5-4B-Q4_K_M.gguf

SageMaker extracts `model.tar.gz` into /opt/ml/model, where the decision container looks for the
GGUF, so the archive holds exactly two files at its root: the GGUF and `model-manifest.json`.

The manifest (JSON) records the GGUF's name, size and sha256 (and whether it matched
`--sha256`), its GGUF header (format version, tensor and metadata counts), a few metadata keys
(architecture, name, …) when the `gguf` package is installed, the `--source` it came from, when
it was made and by which version of this tool. `--manifest` writes it next to the archive too,
with the archive's own size and sha256 added.

A `--sha256` that does not match refuses the file: nothing is written. The archive is written
under a temporary name, read back (the GGUF inside must hash to the same sha256), then renamed,
so a failed run never leaves a `model.tar.gz` behind. Standard library only (runs in a plain
CodeBuild image); exit status 0 when packaged, 1 when refused.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import struct
import sys
import tarfile
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

TOOL = "decision-router package_model"
TOOL_VERSION = "1.0"
MANIFEST_NAME = "model-manifest.json"
GGUF_MAGIC = b"GGUF"
#: Metadata keys copied into the manifest when the `gguf` package can read them.
METADATA_KEYS = ("general.architecture", "general.name", "general.size_label", "general.file_type",
                 "general.quantization_version", "general.license")
_CHUNK = 8 * 1024 * 1024
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class PackagingRefused(Exception):
    """The model cannot be packaged; the message says why."""


def sha256_of(stream: BinaryIO) -> str:
    digest = hashlib.sha256()
    for chunk in iter(lambda: stream.read(_CHUNK), b""):
        digest.update(chunk)
    return digest.hexdigest()


def gguf_header(path: Path) -> dict[str, int]:
    """The fixed GGUF header: magic, format version, tensor count, metadata key/value count."""
    with path.open("rb") as handle:
        head = handle.read(24)
    if len(head) < 24 or head[:4] != GGUF_MAGIC:
        raise PackagingRefused(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)")
    version, tensors, keys = struct.unpack("<IQQ", head[4:24])
    return {"gguf_version": version, "tensor_count": tensors, "metadata_kv_count": keys}


def gguf_metadata(path: Path) -> tuple[dict[str, Any] | None, str]:
    """A few metadata values, read by the `gguf` package when it is installed; else (None, why)."""
    try:
        from gguf import GGUFReader  # optional: llama.cpp's own reader
    except ImportError:
        return None, "the gguf package is not installed: file facts only"
    try:
        reader = GGUFReader(str(path))
        found: dict[str, Any] = {}
        architecture = None
        for key in METADATA_KEYS:
            field = reader.fields.get(key)
            if field is not None:
                found[key] = field.contents()
                architecture = found[key] if key == "general.architecture" else architecture
        if architecture:
            field = reader.fields.get(f"{architecture}.context_length")
            if field is not None:
                found[f"{architecture}.context_length"] = field.contents()
        return found, "read with the gguf package"
    except Exception as exc:  # noqa: BLE001 - a damaged file: the manifest says so instead of failing the build
        return None, f"the gguf package could not read the metadata: {exc}"


def build_manifest(gguf: Path, digest: str, expected: str | None, source: str | None) -> dict[str, Any]:
    metadata, how = gguf_metadata(gguf)
    return {
        "gguf": {
            "file": gguf.name,
            "bytes": gguf.stat().st_size,
            "sha256": digest,
            "sha256_expected": expected,
            **gguf_header(gguf),
            "metadata": metadata,
            "metadata_note": how,
        },
        "source": source,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "tool": {"name": TOOL, "version": TOOL_VERSION, "python": sys.version.split()[0]},
    }


def _add(archive: tarfile.TarFile, name: str, size: int, stream: BinaryIO) -> None:
    # Owned by root, world-readable, no host user names: SageMaker extracts the archive as root.
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, int(datetime.now(timezone.utc).timestamp())
    archive.addfile(info, stream)


def _check_archive(path: Path, gguf_name: str, digest: str) -> None:
    """The archive holds exactly the GGUF and the manifest, and its GGUF hashes to `digest`."""
    with tarfile.open(path, "r:gz") as archive:
        names = []
        for member in archive:
            names.append(member.name)
            if member.name == gguf_name:
                inside = sha256_of(archive.extractfile(member))
                if inside != digest:
                    raise PackagingRefused(f"the GGUF read back from {path} hashes to {inside}, not {digest}")
    if sorted(names) != sorted([gguf_name, MANIFEST_NAME]):
        raise PackagingRefused(f"{path} holds {names}, expected exactly {gguf_name} and {MANIFEST_NAME}")


def package(
    gguf: Path,
    output: Path,
    *,
    expected_sha256: str | None = None,
    manifest_path: Path | None = None,
    source: str | None = None,
    compresslevel: int = 1,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Check and package `gguf` into `output`; returns the manifest with the archive's facts."""
    if not gguf.is_file():
        raise PackagingRefused(f"{gguf} is not a file")
    if gguf.suffix.lower() != ".gguf":
        raise PackagingRefused(f"{gguf} does not end in .gguf (the decision container looks for *.gguf)")
    gguf_header(gguf)
    if gguf.name == MANIFEST_NAME:
        raise PackagingRefused(f"the GGUF may not be called {MANIFEST_NAME}")
    for target in (output, manifest_path):
        if target is not None and target.exists() and not overwrite:
            raise PackagingRefused(f"{target} exists; remove it or pass --overwrite")
    with gguf.open("rb") as handle:
        digest = sha256_of(handle)
    if expected_sha256 is not None and digest != expected_sha256:
        raise PackagingRefused(f"sha256 mismatch for {gguf.name}: expected {expected_sha256}, got {digest}; nothing was written")

    manifest = build_manifest(gguf, digest, expected_sha256, source)
    manifest_bytes = (json.dumps(manifest, indent=2) + "\n").encode()
    output.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
    os.close(handle)
    try:
        with tarfile.open(temporary, "w:gz", compresslevel=compresslevel) as archive:
            with gguf.open("rb") as stream:
                _add(archive, gguf.name, manifest["gguf"]["bytes"], stream)
            _add(archive, MANIFEST_NAME, len(manifest_bytes), io.BytesIO(manifest_bytes))
        _check_archive(Path(temporary), gguf.name, digest)
        os.chmod(temporary, 0o644)  # mkstemp makes it private; the archive is meant to be shared
        os.replace(temporary, output)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise

    with output.open("rb") as stream:
        archive_sha256 = sha256_of(stream)
    described = {**manifest, "archive": {"file": output.name, "bytes": output.stat().st_size, "sha256": archive_sha256,
                                         "members": [gguf.name, MANIFEST_NAME]}}
    if manifest_path is not None:
        manifest_path.parent.mkdir(parents=True, exist_ok=True)
        manifest_path.write_text(json.dumps(described, indent=2) + "\n")
    return described


def _sha256_argument(text: str) -> str:
    value = text.strip().lower()
    if not _SHA256.match(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a sha256 (64 hex digits)")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python container/package_model.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("gguf", type=Path, help="the GGUF file to package")
    p.add_argument("--sha256", type=_sha256_argument, help="expected sha256 of the GGUF; a different file is refused")
    p.add_argument("--output", type=Path, default=Path("model.tar.gz"), help="archive to write (default model.tar.gz)")
    p.add_argument("--manifest", type=Path, help="also write the manifest here, with the archive's size and sha256")
    p.add_argument("--source", help="where the GGUF came from (URL or s3:// URI), recorded in the manifest")
    p.add_argument("--compresslevel", type=int, choices=range(0, 10), default=1, metavar="0-9",
                   help="gzip level (default 1: GGUF weights barely compress, so higher levels mostly cost time)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing archive / manifest")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        described = package(
            args.gguf,
            args.output,
            expected_sha256=args.sha256,
            manifest_path=args.manifest,
            source=args.source,
            compresslevel=args.compresslevel,
            overwrite=args.overwrite,
        )
    except PackagingRefused as refused:
        print(f"refused: {refused}", file=sys.stderr)
        return 1
    print(json.dumps(described, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
