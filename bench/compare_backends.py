"""Score the same labelled decisions on two engine configurations, side by side in one run.

Typical use: CPU vs full GPU offload of the same GGUF (do the GPU build's probabilities agree
with the CPU's, and how much faster is it?):

    python -m bench.compare_backends --baseline n_gpu_layers=0 --candidate n_gpu_layers=999

Each case (one request: a single decision or a shared-state batch) is scored by both engines
alternately, so machine noise hits both alike. Reported: argmax agreement, |Δp| (max and
median over all option probabilities), accuracy of each, median/p95 latency of each and the
candidate/baseline latency ratio. Every request is evaluated cold (the prompt cache cleared
first). JSON goes to --out (default: stdout summary only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from evaluation.cases import load_file
from evaluation.stats import percentile

DEFAULT_DATA = ["bench/data/support-tickets.jsonl", "bench/data/incidents.jsonl"]


def _parse_overrides(text: str) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if not _:
            raise SystemExit(f"engine setting {part!r} is not KEY=VALUE")
        overrides[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value.strip()
    return overrides


def compare(baseline: Any, candidate: Any, cases: list, repeats: int = 1) -> dict[str, Any]:
    latency = {"baseline": [], "candidate": []}
    deltas: list[float] = []
    agree = correct_base = correct_cand = total = 0
    for case in cases:
        decisions = [labelled.decision for labelled in case.decisions]
        responses = {}
        for _ in range(repeats):
            for name, engine in (("baseline", baseline), ("candidate", candidate)):
                # cold on both sides: a repeat (or the same engine twice) measures the backend, not the prompt cache
                engine.scheduler.clear_cache()
                started = time.perf_counter()
                responses[name] = engine.decide(decisions)
                latency[name].append((time.perf_counter() - started) / len(decisions))
        for labelled, base, cand in zip(case.decisions, responses["baseline"].results, responses["candidate"].results):
            total += 1
            agree += base.top_option_id == cand.top_option_id
            correct_base += base.top_option_id == labelled.gold
            correct_cand += cand.top_option_id == labelled.gold
            deltas.extend(abs(a - b) for a, b in zip(base.probabilities, cand.probabilities))
    return {
        "decisions": total,
        "argmax_agreement": agree / total,
        "max_abs_probability_delta": max(deltas),
        "median_abs_probability_delta": statistics.median(deltas),
        "accuracy": {"baseline": correct_base / total, "candidate": correct_cand / total},
        "latency_seconds_per_decision": {
            name: {"median": statistics.median(values), "p95": percentile(values, 0.95)}
            for name, values in latency.items()
        },
        "candidate_over_baseline_latency": statistics.median(latency["candidate"])
        / statistics.median(latency["baseline"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="n_gpu_layers=0", help="engine settings, KEY=VALUE,…")
    parser.add_argument("--candidate", default="n_gpu_layers=999", help="engine settings, KEY=VALUE,…")
    parser.add_argument("--model", help="GGUF path (default: the server's model discovery)")
    parser.add_argument("--data", nargs="+", default=DEFAULT_DATA, help="labelled JSONL files")
    parser.add_argument("--limit", type=int, help="at most this many cases per file")
    parser.add_argument("--repeats", type=int, default=1, help="timed repetitions per case")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    args = parser.parse_args(argv)

    from decision_server.engine import DecisionEngine

    cases = []
    for path in args.data:
        loaded = load_file(path, limit=args.limit)
        for error in loaded.errors:
            print(f"skipped {error}", file=sys.stderr)
        cases.extend(loaded.cases)
    common = {"model_path": args.model} if args.model else {}
    configs = {"baseline": _parse_overrides(args.baseline), "candidate": _parse_overrides(args.candidate)}
    engines = {name: DecisionEngine(**common, **overrides) for name, overrides in configs.items()}
    for engine in engines.values():
        engine.warm_up()
    report = {"configs": configs, **compare(engines["baseline"], engines["candidate"], cases, args.repeats)}
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
