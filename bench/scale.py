"""How make fit-history's own steps grow with the export: seconds and peak memory for reading the
rows, preparing the signals and fitting the head, at 10,000, 100,000 and 1,000,000 rows.

    python -m bench.scale [--rows 10000,100000,1000000] [--labels 77] [--width 576]    (make bench runs it)

No model is needed: the export is synthetic (77 labels, a dozen words a row, some of them the
label's own) and its signals are stored beforehand as a scoring run would store them (one hidden
state a row, random around its label's centre, float16 shards in a signal cache). Each size runs
in a fresh process, so its peak memory (the process's maximum resident set, after each step) is
its own. The steps are fit-history's functions (training/history_export.py, history_scoring.py,
signals_store.py, history_fit.py):

- read: the training and test exports read as a stream, the labels turned into options;
- prepare: each row's evidence and request key, the cache asked which it lacks (none) and the
  signals gathered from its shards;
- fit: the head (model weight chosen on a held-out fifth, temperature, threshold, the text
  classifier beside it), on stratified samples above 20,000 rows (training/head_fit.py FIT_ROWS).

Prints a markdown table and writes reports/bench/history-scale.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from bench.memory import peak_mib
from decision_contract import ModelInfo
from decision_contract.signals import SHARD_SUFFIX, write_shard
from training import history_export, history_fit, history_scoring, signals_store
from training.history_policy import states

REPO = Path(__file__).resolve().parents[1]
MODEL = ModelInfo(file="synthetic.gguf", bytes=1, sha256="5" * 64, context_size=4096, threads=1, gpu_layers=0,
                  llama_cpp_python_version="bench", hidden_size=576)
TEST_ROWS = 2000
SHARD_ROWS = 50_000


def arguments(folder: Path, rows: int) -> SimpleNamespace:
    return SimpleNamespace(data=folder / "train.csv", test=folder / "test.csv", text="text", label="label", limit=None,
                           min_examples=10, rare="review", out=folder / "out", name="scale", targets="own", max_error=0.03,
                           encoding="utf-8", skip_unlabelled=False, merge_labels=False, destinations=None,
                           out_of_scope_label=None)


def write_export(path: Path, rows: int, labels: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(3000)]
    own = rng.integers(0, len(words), size=(labels, 12))
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for label in rng.integers(0, labels, size=rows):
            mine = [words[j] for j in rng.choice(own[label], size=2)]
            common = [words[j] for j in rng.integers(0, len(words), size=10)]
            writer.writerow([" ".join(mine + common), f"label_{label:03d}"])


def store_signals(folder: Path, args: SimpleNamespace, width: int, seed: int) -> None:
    """Every row's signals in the cache, as a scoring run leaves them (untimed)."""
    cache = folder / "cache" / MODEL.sha256
    export = history_export.read_export(history_export.ExportAsked.of(args), lambda text: None)
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(export.vocab.options), width)).astype(np.float32)
    for rows, labels in ((export.train_rows, export.gold), (export.test_rows, None)):
        item_states = states(export.raw, rows, export.fields)
        request = history_scoring.requests(export.question, item_states)
        keys = history_scoring.request_keys(request, len(item_states), MODEL.sha256)
        for start in range(0, len(keys), SHARD_ROWS):
            part = keys[start:start + SHARD_ROWS]
            centre = centres[labels[start:start + SHARD_ROWS]] if labels is not None else 0.0
            hidden = centre + rng.normal(scale=8.0, size=(len(part), width)).astype(np.float32)
            write_shard(cache / f"bench-{len(rows)}-{start}{SHARD_SUFFIX}", MODEL.sha256, part, hidden,
                        [[0.0, 0.0]] * len(part), [0.5] * len(part), ["direct-options-v1"] * len(part))


def one(folder: Path, rows: int) -> dict:
    """The three steps in this process: seconds and peak memory after each."""
    args = arguments(folder, rows)
    out: dict = {"rows": rows, "baseline_mib": round(peak_mib())}
    started = time.perf_counter()
    export = history_export.read_export(history_export.ExportAsked.of(args), lambda text: None)
    out["read"] = {"seconds": round(time.perf_counter() - started, 2), "peak_mib": round(peak_mib())}

    started = time.perf_counter()
    train_states = states(export.raw, export.train_rows, export.fields)
    test_states = states(export.raw, export.test_rows, export.fields)
    cache = signals_store.SignalsStore(folder / "cache" / MODEL.sha256)
    train_keys = history_scoring.request_keys(history_scoring.requests(export.question, train_states), len(train_states), MODEL.sha256)
    test_keys = history_scoring.request_keys(history_scoring.requests(export.question, test_states), len(test_states), MODEL.sha256)
    missing = len(cache.missing(train_keys)) + len(cache.missing(test_keys))
    train, test = cache.gather(train_keys), cache.gather(test_keys)
    out["prepare"] = {"seconds": round(time.perf_counter() - started, 2), "peak_mib": round(peak_mib()), "missing": missing}

    started = time.perf_counter()
    fitted = history_fit.fit(export.raw, train_states, train.hidden, export.gold, test_states, test.hidden.astype(np.float64),
                         model=MODEL, prompt_version="direct-options-v1", max_error=0.03, seed=0, data=["train.csv"],
                         say=lambda text: None)
    out["fit"] = {"seconds": round(time.perf_counter() - started, 2), "peak_mib": round(peak_mib()),
                  "fitted_rows": fitted.holdout["fitted_rows"], "grid_rows": fitted.holdout["grid_rows"],
                  "holdout_accuracy": round(fitted.holdout["accuracy"], 4),
                  "baseline_holdout_accuracy": round(fitted.holdout["baseline_accuracy"], 4)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10000,100000,1000000", help="comma-separated export sizes")
    parser.add_argument("--labels", type=int, default=77)
    parser.add_argument("--width", type=int, default=576, help="hidden state width (the embedded model's: 576)")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # a prepared folder: run the steps, print JSON
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.rows.split(",")]
    if args.one:
        print(json.dumps(one(args.one, sizes[0])))
        return 0
    results = []
    for rows in sizes:
        with tempfile.TemporaryDirectory(prefix="history-scale-") as tmp:
            folder = Path(tmp)
            started = time.perf_counter()
            write_export(folder / "train.csv", rows, args.labels, seed=1)
            write_export(folder / "test.csv", TEST_ROWS, args.labels, seed=2)
            store_signals(folder, arguments(folder, rows), args.width, seed=3)
            print(f"{rows} rows: export and signals stored in {time.perf_counter() - started:.0f} s", file=sys.stderr)
            done = subprocess.run([sys.executable, "-m", "bench.scale", "--rows", str(rows), "--one", str(folder)],
                                  capture_output=True, text=True, check=True)
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), file=sys.stderr)
    lines = ["| rows | read s | read peak MiB | prepare s | prepare peak MiB | fit s | fit peak MiB | fitted on | held-out accuracy |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['rows']:,} | {r['read']['seconds']:.1f} | {r['read']['peak_mib']:,} | {r['prepare']['seconds']:.1f} "
                     f"| {r['prepare']['peak_mib']:,} | {r['fit']['seconds']:.1f} | {r['fit']['peak_mib']:,} "
                     f"| {r['fit']['fitted_rows']:,} | {r['fit']['holdout_accuracy']:.3f} |")
    print("\n".join(lines))
    report = REPO / "reports/bench/history-scale.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps({"labels": args.labels, "width": args.width, "test_rows": TEST_ROWS, "sizes": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
