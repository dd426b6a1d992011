"""Decision latency benchmark (issue 2 §7), all figures from one run in one process.

1. Single decisions: a ≈300-token prompt with 4 options, latency median and p95 over N
   decisions, next to the pure prefill of the same prompt tokens (the floor a decision cannot
   beat), measured interleaved so that machine load hits both alike; their ratio.
2. Batches: 8 decisions sharing a ≈400-token state, one batch request vs the same 8 decisions
   scored one by one; their ratio.

Targets: single ≤ 1.15 × prefill floor; batch of 8 ≤ 0.45 × eight singles.

    make bench            # or: PYTHONPATH=contract:container .venv/bin/python bench/bench_decisions.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for part in ("contract", "container"):
    if str(ROOT / part) not in sys.path:
        sys.path.insert(0, str(ROOT / part))

from decision_contract import Decision  # noqa: E402
from decision_server.engine import DecisionEngine  # noqa: E402
from decision_server.model_files import embedded_model_path  # noqa: E402

SINGLE_TARGET = 1.15
BATCH_TARGET = 0.45

SENTENCES = [
    "The customer reports that invoices since March show a double charge for the Pro plan.",
    "They tried to update the card on file but the billing portal returned an error page.",
    "Their team of twelve cannot log in since the password reset email never arrives.",
    "They mention a deadline with their own client on Friday and ask for a call back.",
    "Earlier tickets from this account were about API rate limits on the reporting endpoint.",
    "The account is on the enterprise tier with a dedicated success manager assigned.",
]

QUESTIONS = [
    ("Which support queue should handle this ticket?", ["Billing", "Technical support", "Account access", "Sales"]),
    ("How urgent is this ticket?", ["Low", "Normal", "High", "Critical"]),
    ("What is the customer's sentiment?", ["Positive", "Neutral", "Frustrated", "Angry"]),
    ("Does the ticket mention a deadline?", ["Yes", "No"]),
    ("Is this a possible security incident?", ["Yes", "No", "Unclear"]),
    ("Which product area is affected most?", ["Payments", "Authentication", "API", "Reporting"]),
    ("Should a human call the customer back?", ["Yes", "No"]),
    ("Which language should the reply use?", ["English", "German", "French", "Spanish"]),
]


def state_of(engine: DecisionEngine, question: str, options: list[str], target_tokens: int) -> str:
    """Free-text evidence sized so that the rendered prompt is about `target_tokens` long."""
    sentences: list[str] = []
    while True:
        sentences.append(SENTENCES[len(sentences) % len(SENTENCES)])
        decision = make_decision("probe", " ".join(sentences), question, options)
        if len(engine.readout.prompt(decision).tokens) >= target_tokens:
            return " ".join(sentences)


def make_decision(decision_id: str, state: str, question: str, options: list[str]) -> Decision:
    return Decision(
        id=decision_id,
        state=state,
        question=question,
        options=[{"id": f"o{i}", "description": text} for i, text in enumerate(options)],
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def bench_single(engine: DecisionEngine, n: int) -> dict:
    question, options = QUESTIONS[0]
    decision = make_decision("single", state_of(engine, question, options, 300), question, options)
    tokens = engine.readout.prompt(decision).tokens
    for _ in range(3):  # warm caches and thread pools
        engine.decide_one(decision)
        engine.prefill(tokens)
    decide_s, prefill_s = [], []
    for i in range(n):
        decide_s.append(timed(lambda: engine.decide_one(decision)))
        prefill_s.append(engine.prefill(tokens))
        progress(f"single {i + 1}/{n}: decision {decide_s[-1]:.3f}s prefill {prefill_s[-1]:.3f}s")
    median_decide = statistics.median(decide_s)
    median_prefill = statistics.median(prefill_s)
    return {
        "prompt_tokens": len(tokens),
        "options": len(options),
        "decisions": n,
        "decision_median_s": median_decide,
        "decision_p95_s": percentile(decide_s, 0.95),
        "prefill_median_s": median_prefill,
        "prefill_p95_s": percentile(prefill_s, 0.95),
        "ratio_decision_to_prefill": median_decide / median_prefill,
        "target": SINGLE_TARGET,
    }


def bench_batch(engine: DecisionEngine, rounds: int) -> dict:
    state = state_of(engine, *QUESTIONS[0], 400)
    decisions = [make_decision(f"q{i}", state, q, opts) for i, (q, opts) in enumerate(QUESTIONS)]
    engine.decide(decisions)  # warm-up
    batch_s, singles_s = [], []
    shared = 0
    for _ in range(rounds):
        started = time.perf_counter()
        response = engine.decide(decisions)
        batch_s.append(time.perf_counter() - started)
        shared = response.timing.shared_prefix_tokens
        singles_s.append(sum(timed(lambda d=d: engine.decide_one(d)) for d in decisions))
        progress(f"batch round {len(batch_s)}/{rounds}: batch {batch_s[-1]:.3f}s singles {singles_s[-1]:.3f}s")
    median_batch = statistics.median(batch_s)
    median_singles = statistics.median(singles_s)
    return {
        "decisions": len(decisions),
        "state_prompt_tokens": len(engine.readout.prompt(decisions[0]).tokens),
        "shared_prefix_tokens": shared,
        "rounds": rounds,
        "batch_median_s": median_batch,
        "eight_singles_median_s": median_singles,
        "ratio_batch_to_singles": median_batch / median_singles,
        "target": BATCH_TARGET,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--decisions", type=int, default=50, help="single decisions to time (≥ 50 for §7)")
    parser.add_argument("--rounds", type=int, default=5, help="batch-vs-singles rounds")
    parser.add_argument("--model", type=Path, default=None, help="GGUF (default: the embedded SmolLM2)")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench_decisions.json")
    args = parser.parse_args(argv)

    # Default threads and settings, as the server would use them; only the model is explicit.
    engine = DecisionEngine(model_path=args.model or embedded_model_path())
    single = bench_single(engine, args.decisions)
    batch = bench_batch(engine, args.rounds)
    report = {
        "model": engine.model_info.model_dump(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]},
        "single": single,
        "batch": batch,
    }

    def verdict(ratio: float, target: float) -> str:
        return "meets" if ratio <= target else "MISSES"

    rows = [
        ("single decision median / p95", f"{single['decision_median_s'] * 1000:.1f} / {single['decision_p95_s'] * 1000:.1f} ms"),
        ("prefill floor median / p95", f"{single['prefill_median_s'] * 1000:.1f} / {single['prefill_p95_s'] * 1000:.1f} ms"),
        ("decision / prefill", f"{single['ratio_decision_to_prefill']:.3f}  (target ≤ {SINGLE_TARGET}: "
         f"{verdict(single['ratio_decision_to_prefill'], SINGLE_TARGET)})"),
        ("batch of 8 (shared state) median", f"{batch['batch_median_s'] * 1000:.1f} ms"),
        ("8 single decisions median", f"{batch['eight_singles_median_s'] * 1000:.1f} ms"),
        ("batch / 8 singles", f"{batch['ratio_batch_to_singles']:.3f}  (target ≤ {BATCH_TARGET}: "
         f"{verdict(batch['ratio_batch_to_singles'], BATCH_TARGET)})"),
    ]
    info = engine.model_info
    print(f"model {info.file}  threads={info.threads}  n_ctx={info.context_size}  "
          f"llama-cpp-python {info.llama_cpp_python_version}  load(1m)={report['machine']['load_avg_1m']:.2f}")
    print(f"single: {single['prompt_tokens']}-token prompt, {single['options']} options, {single['decisions']} decisions; "
          f"batch: {batch['decisions']} questions, {batch['state_prompt_tokens']}-token prompts, "
          f"{batch['shared_prefix_tokens']} shared, {batch['rounds']} rounds")
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
