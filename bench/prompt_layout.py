"""A many-option question's signals decision in its two prompt layouts, side by side in one run:
scoring speed and the fitted head's quality on Banking77 (77 intents).

    python bench/prompt_layout.py [--train-per-label 10] [--test-per-label 4] [--seed 0] [--work DIR]

The evidence-first layout (`direct-options-v1`) puts each item's text right after the fixed
header, so every item evaluates the criterion and the options again; the criterion-first layout
(`criterion-first-v1`) puts them first, so they are evaluated once and each item evaluates only
its own tokens. Both use one in-process engine (the embedded model) and the same stratified
subset of Banking77 (so many rows per label, drawn by `--seed`):

- speed: `--rounds` interleaved blocks of `--block` single-decision requests (four at a time, as
  `make fit-history` sends them) in each layout in turn, each block from a cleared prompt cache,
  on test rows the fits do not use; and the items per second of scoring the subset itself;
- quality: the subset's signals are scored in requests of `--batch` decisions (fewer forward
  passes than one request an item; a decision's numbers move by the drift batching allows, the
  same for both layouts) into `make fit-history`'s signal cache, then `training.history` itself
  fits on them, once per layout with the model's weight chosen on the held-out fifth, as it is by
  default, and once with the weight fixed at 1.0 (the hidden state always read); the figures are
  the head's on the test rows (accuracy, share answered automatically, precision of those).

Prints a table and writes `reports/prompt-layout.json`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for root in ("contract", "container", "functions", "."):
    sys.path.insert(0, str(REPO / root))

import numpy as np  # noqa: E402

from decision_contract import Decision, DecisionResult  # noqa: E402
from decision_contract.signals import request_key  # noqa: E402
from decision_router.domain.model_requests import SIGNAL_OPTIONS  # noqa: E402
from evaluation.runners import EngineRunner  # noqa: E402

DATA = REPO / "bench/public/banking77"
LAYOUTS = ("evidence-first", "criterion-first")
#: The criterion `make fit-history` asks of a CSV whose label column is `category`, and its evidence.
QUESTION = "Which category should handle this item?"


def ask(text: str, layout: str) -> Decision:
    """The signals decision make fit-history sends for one row (`--text text --label category`)."""
    return Decision(id="category", state={"text": text}, question=QUESTION, options=list(SIGNAL_OPTIONS),
                    return_hidden_state=True, layout=layout)  # type: ignore[arg-type]


def write_signals(folder: Path, rows: list[tuple[str, DecisionResult]]) -> None:
    """Rows as one shard of make fit-history's signals store (the format training.signals_store's
    SignalsStore reads: one folder per model, `shard-*.npz`)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = folder / f"shard-{time.time_ns()}.npz"
    np.savez(name, keys=np.array([k for k, _ in rows]),
             hidden=np.stack([np.asarray(r.hidden_state, dtype=np.float32) for _, r in rows]),
             logits=np.stack([np.asarray(r.option_logits) for _, r in rows]),
             mass=np.array([r.allowed_token_mass for _, r in rows]), version=np.array([r.prompt_version for _, r in rows]))


def stratified(path: Path, per_label: int, rng: random.Random) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """`per_label` rows of each label, drawn by `rng` (and the rows left over), in a shuffled order."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    by_label: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_label.setdefault(row["category"], []).append(row)
    chosen, rest = [], []
    for label in sorted(by_label):
        group = by_label[label][:]
        rng.shuffle(group)
        chosen += group[:per_label]
        rest += group[per_label:]
    rng.shuffle(chosen)
    rng.shuffle(rest)
    return chosen, rest


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "category"])
        writer.writeheader()
        writer.writerows({"text": r["text"], "category": r["category"]} for r in rows)
    return path


def clear_cache(runner: EngineRunner) -> None:
    runner.engine.scheduler.clear_cache()


def fit_history(train: Path, test: Path, out: Path, cache: Path, layout: str, weight: float | None,
                threads: int | None) -> dict[str, Any]:
    """make fit-history itself, as a user runs it; its report."""
    argv = [sys.executable, "-m", "training.history", "--data", str(train), "--test", str(test), "--text", "text",
            "--label", "category", "--out", str(out), "--cache", str(cache), "--layout", layout, "--no-progress"]
    argv += ["--model-weight", str(weight)] if weight is not None else []
    argv += ["--threads", str(threads)] if threads else []
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO / r) for r in ("contract", "container", "functions", "."))}
    subprocess.run(argv, cwd=REPO, env=environment, check=True)
    return json.loads((out / "report.json").read_text())


def block_speed(runner: EngineRunner, decisions: list[Decision], workers: int = 4) -> dict[str, float]:
    """Items per second of one block of single-decision requests (`workers` at a time) from a
    cleared prompt cache, and the median prefix each reused."""
    clear_cache(runner)
    reused: list[int] = []
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for scored in pool.map(lambda d: runner.decide([d]), decisions):
            reused.append(scored.results[0].reused_prefix_tokens)
    seconds = time.perf_counter() - started
    return {"items_per_second": len(decisions) / seconds, "median_reused_prefix_tokens": statistics.median(reused)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-per-label", type=int, default=10)
    p.add_argument("--test-per-label", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2, help="interleaved speed blocks per layout")
    p.add_argument("--block", type=int, default=32, help="items per speed block")
    p.add_argument("--batch", type=int, default=32, help="decisions per request when scoring the subset")
    p.add_argument("--threads", type=int)
    p.add_argument("--work", type=Path, default=Path("/tmp/prompt-layout"), help="subset files, heads, signal cache")
    p.add_argument("--report", type=Path, default=REPO / "reports/prompt-layout.json")
    args = p.parse_args(argv)

    rng = random.Random(args.seed)
    train_rows, _ = stratified(DATA / "train.csv", args.train_per_label, rng)
    test_rows, spare = stratified(DATA / "test.csv", args.test_per_label, rng)
    train = write_csv(args.work / "train.csv", train_rows)
    test = write_csv(args.work / "test.csv", test_rows)
    cache = args.work / f"signals-seed{args.seed}"
    runner = EngineRunner.load(threads=args.threads)
    model = runner.model_info()
    print(f"{len(train_rows)} training and {len(test_rows)} test rows of Banking77 (seed {args.seed}); "
          f"model {model.file}, {runner.engine.settings.threads} threads", flush=True)

    # Interleaved speed blocks on test rows the fits do not use.
    blocks: dict[str, list[dict[str, float]]] = {layout: [] for layout in LAYOUTS}
    for round_ in range(args.rounds):
        rows = spare[round_ * args.block:(round_ + 1) * args.block]
        for layout in (LAYOUTS if round_ % 2 == 0 else LAYOUTS[::-1]):
            blocks[layout].append(block_speed(runner, [ask(r["text"], layout) for r in rows]))
        print(f"speed round {round_ + 1}: " + ", ".join(f"{k} {v[-1]['items_per_second']:.2f} items/s" for k, v in blocks.items()),
              flush=True)
    runs: dict[str, Any] = {layout: {} for layout in LAYOUTS}
    for layout in LAYOUTS:
        clear_cache(runner)
        decisions = [ask(r["text"], layout) for r in train_rows + test_rows]
        scored = []
        started = time.perf_counter()
        for start in range(0, len(decisions), args.batch):
            part = decisions[start:start + args.batch]
            scored += [(request_key(model.sha256, d), r) for d, r in zip(part, runner.decide(part).results)]
        seconds = time.perf_counter() - started
        write_signals(cache / model.sha256, scored)
        runs[layout]["batched_scoring"] = {"items": len(decisions), "seconds": round(seconds, 1),
                                           "items_per_second": round(len(decisions) / seconds, 3)}
        print(f"{layout}: scored {len(decisions)} items in requests of {args.batch} in {seconds:.0f} s", flush=True)
    runner.engine.close()
    for layout in LAYOUTS:
        for name, weight in (("chosen_weight", None), ("weight_1", 1.0)):
            report = fit_history(train, test, args.work / f"{layout}-{name}", cache, layout, weight, args.threads)
            if report["seconds"]["scoring"] > 60:
                raise SystemExit(f"fit-history scored items itself ({report['seconds']['scoring']} s): the cache keys differ")
            runs[layout][name] = _quality(report)
            print(f"{layout}, {name}: {json.dumps(runs[layout][name])}", flush=True)

    for layout in LAYOUTS:
        runs[layout]["blocks_items_per_second"] = [round(b["items_per_second"], 3) for b in blocks[layout]]
        runs[layout]["blocks_median_reused_prefix_tokens"] = statistics.median(b["median_reused_prefix_tokens"] for b in blocks[layout])
    report = {"data": "Banking77", "seed": args.seed, "train_rows": len(train_rows), "test_rows": len(test_rows),
              "model": {"file": model.file, "sha256": model.sha256}, "threads": runner.engine.settings.threads,
              "runs": runs}
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2) + "\n")

    print(f"\n{'':34}" + "".join(f"{layout:>18}" for layout in LAYOUTS))
    rows_out = [("items/s, single requests (median)", lambda r: statistics.median(r["blocks_items_per_second"]), "{:.2f}"),
                ("items/s, subset in batches", lambda r: r["batched_scoring"]["items_per_second"], "{:.2f}"),
                ("median reused prefix tokens", lambda r: r["blocks_median_reused_prefix_tokens"], "{:.0f}")]
    for weight in ("chosen_weight", "weight_1"):
        for figure in ("model_weight", "accuracy", "auto_share", "auto_precision"):
            rows_out.append((f"{figure} ({weight})", lambda r, w=weight, f=figure: r[w][f], "{:.4f}"))
    for name, get, form in rows_out:
        print(f"{name:34}" + "".join(f"{form.format(get(runs[layout])) if get(runs[layout]) is not None else '-':>18}"
                                   for layout in LAYOUTS))
    print(f"\nwrote {args.report}")
    return 0


def _quality(report: dict[str, Any]) -> dict[str, Any]:
    return {"model_weight": report["head"]["model_weight"], "accuracy": report["accuracy"],
            "auto_share": report["auto_share"], "auto_precision": report["auto_precision"],
            "macro_f1": report["macro_f1"], "holdout_log_loss": report["holdout"]["log_loss"],
            "baseline_accuracy": report["baseline"]["accuracy"], "baseline_auto_share": report["baseline"]["auto_share"]}


if __name__ == "__main__":
    raise SystemExit(main())
