"""The embedded model's signals for the shipped labelled sets, shipped with the code, so a
relearning run (the local one of `make learn`, or a stack's first) trains on the shipped sets
without asking the model for them first (about an hour on two CPU cores).

    python -m training.shipped_signals              # score what the file lacks, then write it
    python -m training.shipped_signals --check      # say what it holds, write nothing
    python -m training.shipped_signals --neighbours # nearest train item by hidden state: its answer right?

One file per model, named by the GGUF's sha256 (`bench/data/signals/<sha256>.npz`): a run whose
model is another finds no file and asks its endpoint as before. Each row is keyed as `make fit`'s
cache keys it (`decision_contract.signals.request_key`: the model's sha256 and the decision's content), so a
changed prompt, question or item simply finds no row. The format is compact: the hidden state in
float16 (its values are far inside float16's range; the rounding moves a head's probabilities
slightly, which can tip a verdict taken on a handful of labels, never the sets' figures), the
letter logits in float32, one index per prompt version.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from decision_contract.signals import read_shard, request_key, write_shard
from evaluation.cases import load_file

from .features import FeatureCache, extract
from .fitting import REPO, SHIPPED

#: Where the shipped signals are, one file per model (its GGUF's sha256).
SIGNALS_DIR = REPO / "bench/data/signals"


def signals_path(model_sha256: str, directory: Path = SIGNALS_DIR) -> Path:
    return directory / f"{model_sha256}.npz"


def write(path: Path, model_sha256: str, rows: dict[str, tuple[np.ndarray, np.ndarray, float, str]]) -> None:
    """The rows (FeatureCache's: hidden state, letter logits, allowed-token mass, prompt version)
    as one compressed signals shard (decision_contract.signals)."""
    keys = sorted(rows)
    write_shard(path, model_sha256, keys, [rows[k][0] for k in keys], [rows[k][1] for k in keys],
                [rows[k][2] for k in keys], [rows[k][3] for k in keys], compress=True)


def read(path: Path, model_sha256: str) -> dict[str, tuple[np.ndarray, np.ndarray, float, str]]:
    """The file's rows as FeatureCache holds them; ValueError when it is another model's."""
    shard = read_shard(path)
    if shard.model_sha256 != model_sha256:
        raise ValueError(f"{path}: signals of model {shard.model_sha256}, not {model_sha256}")
    return {key: shard.row(i) for i, key in enumerate(shard.keys)}


def seed(cache: FeatureCache, model_sha256: str, directory: Path = SIGNALS_DIR) -> int:
    """The shipped rows the cache lacks added to it (marked to save); how many. None shipped for
    this model: 0."""
    path = signals_path(model_sha256, directory)
    if not path.is_file():
        return 0
    added = 0
    for key, row in read(path, model_sha256).items():
        if key not in cache.rows:
            cache.rows[key] = row
            added += 1
    cache.dirty = cache.dirty or added > 0
    return added


def nearest_agreement(path: Path, question: str, directory: Path = SIGNALS_DIR) -> float | None:
    """Share of the set's test items whose nearest train item by hidden state (cosine, centred on
    the train items' mean: the raw states share one large common direction) has their gold
    answer; None when no shipped signals cover the set."""
    files = sorted(directory.glob("*.npz"))
    if not files:
        return None
    sha = files[0].stem
    rows = read(files[0], sha)
    pairs: dict[str, list[tuple[np.ndarray, str]]] = {"train": [], "test": []}
    for case in load_file(path).cases:
        for d in case.decisions:
            key = request_key(sha, d.decision.model_copy(update={"return_hidden_state": True}))
            if d.question == question and key in rows and case.split in pairs:
                pairs[case.split].append((rows[key][0], d.gold))
    if not pairs["train"] or not pairs["test"]:
        return None
    train = np.stack([h for h, _ in pairs["train"]])
    mean = train.mean(axis=0)

    def unit(m: np.ndarray) -> np.ndarray:
        m = m - mean
        return m / np.linalg.norm(m, axis=-1, keepdims=True)

    nearest = (unit(np.stack([h for h, _ in pairs["test"]])) @ unit(train).T).argmax(axis=1)
    golds = [g for _, g in pairs["train"]]
    return sum(golds[j] == g for j, (_, g) in zip(nearest, pairs["test"])) / len(pairs["test"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.shipped_signals", description=__doc__.splitlines()[0])
    p.add_argument("--model", help="GGUF to load in-process (default: SM_LLAMA_CPP_MODEL or the embedded model)")
    p.add_argument("--cache", type=Path, default=REPO / "reports/fit/cache",
                   help="make fit's signal cache: what it holds is not asked again")
    p.add_argument("--check", action="store_true", help="say how many of the shipped decisions the file holds")
    p.add_argument("--neighbours", action="store_true",
                   help="print, as JSON, per shipped set and question, how often the nearest train item by hidden "
                        "state has a test item's gold answer (no model)")
    args = p.parse_args(argv)
    if args.neighbours:
        print(json.dumps({f"{path.name}/{q}": nearest_agreement(path, q) for path in SHIPPED
                          for q in sorted({d.question for c in load_file(path).cases for d in c.decisions})}))
        return 0
    from evaluation.runners import EngineRunner

    runner = EngineRunner.load(model_path=args.model)
    try:
        model = runner.model_info()
        cases = [c for path in SHIPPED for c in load_file(path).cases if c.kind == "policy"]
        keys = {request_key(model.sha256, d.decision.model_copy(update={"return_hidden_state": True}))
                for c in cases for d in c.decisions}
        path = signals_path(model.sha256)
        shipped = read(path, model.sha256) if path.is_file() else {}
        print(f"{path.relative_to(REPO)}: {len(keys & set(shipped))} of the {len(keys)} shipped decisions")
        if args.check:
            return 0
        started = time.perf_counter()
        cache = FeatureCache(args.cache / f"{model.sha256}.npz")
        cache.rows.update({k: v for k, v in shipped.items() if k not in cache.rows})
        cache.dirty = True
        cache.save()
        for start in range(0, len(cases), 40):  # saved every 40 items: an interrupted run resumes
            extract(runner, model, cases[start:start + 40], args.cache)
            print(f"  {min(start + 40, len(cases))}/{len(cases)} items, {time.perf_counter() - started:.0f}s",
                  flush=True)
        rows = FeatureCache(args.cache / f"{model.sha256}.npz").rows
        write(path, model.sha256, {k: rows[k] for k in keys if k in rows})
        print(f"wrote {path.relative_to(REPO)}: {len(keys & set(rows))} decisions, "
              f"{path.stat().st_size / 1e6:.1f} MB, in {time.perf_counter() - started:.0f}s")
    finally:
        runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
