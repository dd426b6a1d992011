"""The batch scorer against today's per-request scoring, side by side in one run on one engine.

    PYTHONPATH=contract:container:functions:. .venv/bin/python -m bench.batch_scorer [-n 200] [--rounds 1]

The items are Banking77 test messages (bench/public/banking77), each asked as a signals decision
(the request a question with more than 16 options makes: a fixed criterion, the two
SIGNAL_OPTIONS, the hidden state returned), as `make fit-history` scores them. Two paths over the
same items and the same loaded engine:

- per request: what `training.scoring.RunnerScoring` does today for `make fit-history`, without its disk
  cache: 4 threads, each sending one decision through `EngineRunner.decide` and keeping its hidden
  state, logits, mass and prompt version (written out here: bench and training stand on one floor);
- batch: `decision_server.batch.score_folder` in-process over the same items written as input
  shards (`write_inputs`), its default requests in flight.

The prompt cache is cleared before each path, so neither answers the other's prompts. Prints a
markdown table and the cost of 1,000,000 items per Processing instance type (bench/data/
instance-prices.json, `processing`), scaled from the measured items/s per CPU thread linearly in
vCPUs: an optimistic upper bound on throughput, so a lower bound on cost. Then the figures as JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench.cost import PRICES
from decision_contract import Decision
from decision_router.domain.model_requests import SIGNAL_OPTIONS
from decision_server import batch
from decision_server.engine import DecisionEngine
from decision_server.model_files import embedded_model_path
from evaluation.runners import EngineRunner

BANKING77 = Path(__file__).resolve().parent / "public" / "banking77" / "test.csv"
CRITERION = "Which banking topic is this customer message about?"


def items(n: int) -> list[Decision]:
    """n messages spread over the test set (every k-th row, so every category shows up)."""
    with BANKING77.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    step = max(1, len(rows) // n)
    return [Decision(id=f"banking77-{i}", state=row["text"], question=CRITERION, options=list(SIGNAL_OPTIONS),
                     return_hidden_state=True)
            for i, row in enumerate(rows[::step][:n])]


def per_request(engine: DecisionEngine, decisions: list[Decision], workers: int = 4) -> float:
    runner = EngineRunner(engine)

    def one(decision: Decision) -> tuple[np.ndarray, np.ndarray, float, str]:
        result = runner.decide([decision]).results[0]
        return (np.asarray(result.hidden_state, dtype=np.float32), np.asarray(result.option_logits),
                result.allowed_token_mass, result.prompt_version)

    engine.scheduler.clear_cache()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        rows = list(pool.map(one, decisions))
    seconds = time.perf_counter() - started
    assert len(rows) == len(decisions)
    return seconds


def batch_scorer(engine: DecisionEngine, decisions: list[Decision], in_flight: int | None, shards: int) -> float:
    engine.scheduler.clear_cache()
    with tempfile.TemporaryDirectory() as folder:
        batch.write_inputs(decisions, Path(folder) / "in", shards)
        summary = batch.score_folder(engine, Path(folder) / "in", Path(folder) / "out", in_flight=in_flight,
                                     log=lambda line: None)
    assert summary.items == len(decisions) and summary.errors == 0
    return summary.seconds


def processing_costs(items_per_second: float, threads: int) -> list[dict[str, Any]]:
    prices = json.loads(PRICES.read_text())["processing"]
    rows = []
    for instance in prices["instances"]:
        row = dict(instance)
        if instance["gpu"] is None:
            scaled = items_per_second / threads * instance["vcpus"]
            row["items_per_second"] = scaled
            row["usd_per_million"] = instance["usd_per_hour"] / (scaled * 3600) * 1_000_000
            row["hours_per_million"] = 1_000_000 / scaled / 3600
        else:
            row["items_per_second"] = None  # unmeasured: no GPU run behind these rows
        rows.append(row)
    return rows


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200, help="items (default 200)")
    parser.add_argument("--rounds", type=int, default=1, help="each path this often, alternating (default 1)")
    parser.add_argument("--in-flight", type=int, default=None, help="the batch scorer's requests in flight (default its own)")
    parser.add_argument("--shards", type=int, default=4, help="input shards the items are written as (default 4)")
    args = parser.parse_args(argv)

    engine = DecisionEngine(model_path=embedded_model_path())
    decisions = items(args.n)
    engine.warm_up()
    timings: dict[str, list[float]] = {"per_request": [], "batch": []}
    for _ in range(args.rounds):
        timings["per_request"].append(per_request(engine, decisions))
        timings["batch"].append(batch_scorer(engine, decisions, args.in_flight, args.shards))
    rate = {path: len(decisions) * len(seconds) / sum(seconds) for path, seconds in timings.items()}
    threads = engine.settings.threads
    report = {
        "items": len(decisions), "rounds": args.rounds, "source": "Banking77 test messages as signals decisions",
        "model": engine.model_info.file, "threads": threads, "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)), "cpu": cpu_model(),
        "cpu_variant": engine.llama_build.cpu_variant, "parallel_sequences": engine.settings.parallel_sequences,
        "batch_in_flight": args.in_flight or batch.default_in_flight(engine),
        "per_request_workers": 4, "seconds": timings,
        "per_request_items_per_second": rate["per_request"], "batch_items_per_second": rate["batch"],
        "batch_over_per_request": rate["batch"] / rate["per_request"],
        "batch_items_per_second_per_thread": rate["batch"] / threads,
        "processing": processing_costs(rate["batch"], threads),
    }
    engine.close()

    print(f"\n{len(decisions)} items, {args.rounds} round(s); {report['cpu']}, {report['cpus_available']} CPUs "
          f"available, {threads} llama.cpp threads ({report['cpu_variant']} kernels)\n")
    print("| path | items/s | seconds per round |\n|---|---:|---|")
    print(f"| per request (as fit-history's score, 4 threads) | {rate['per_request']:.2f} | "
          f"{', '.join(f'{s:.1f}' for s in timings['per_request'])} |")
    print(f"| batch scorer (score_folder, {report['batch_in_flight']} in flight) | {rate['batch']:.2f} | "
          f"{', '.join(f'{s:.1f}' for s in timings['batch'])} |")
    print(f"| batch / per request | {report['batch_over_per_request']:.2f}x | |\n")
    print("| instance | vCPUs | $/hour | items/s (scaled) | hours per 1M | $ per 1M items |\n|---|---:|---:|---:|---:|---:|")
    for row in report["processing"]:
        if row["items_per_second"] is None:
            print(f"| {row['type']} | {row['vcpus']} | {row['usd_per_hour']:.3f} | unmeasured | | |")
        else:
            print(f"| {row['type']} | {row['vcpus']} | {row['usd_per_hour']:.3f} | {row['items_per_second']:.1f} | "
                  f"{row['hours_per_million']:.1f} | {row['usd_per_million']:.2f} |")
    print()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
