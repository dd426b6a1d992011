"""What applying a learned head costs the routing function, per item, warm, model excluded.

    python bench/bench_heads.py [-n 300]

For every shipped policy question with a head: the routing function's own judging
(`judging.model_entry`) of labelled items' evidence, once with the head and once with the
letters alone, on the same endpoint answers (a hidden state of the head's width; the values do
not change the cost), and once with the head and its reason (`judging.explain`: the rules, the
thresholds, each evidence field left out and scored by the head). Reports the median and p95 per
item of each, the head's extra cost, the reason's cost against the head's judging, and the policy
load (head files read and checked), which a Lambda container pays once.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for root in ("contract", "functions", "."):
    sys.path.insert(0, str(REPO / root))

from decision_contract import DecisionResult, ModelInfo
from decision_router.domain.judging import explain, model_entry
from decision_router.domain.model_requests import build_state
from decision_router.domain.policies import POLICY_DIR, load_policy
from decision_router.domain.similar import item_terms
from decision_router.items import parse_item
from evaluation.stats import percentile

DATA = {"support-ticket": REPO / "bench/data/support-tickets.jsonl", "incident": REPO / "bench/data/incidents.jsonl"}


def endpoint_answer(question, head, rng: random.Random) -> DecisionResult:
    width = head.hidden_size or 1
    model = ModelInfo(file="bench.gguf", bytes=1, sha256=head.model_sha256 or "0" * 64, context_size=8192, threads=1,
                      gpu_layers=0, llama_cpp_python_version="bench", hidden_size=width)
    logits = [rng.gauss(0, 1) for _ in question.options]
    return DecisionResult.from_signals(
        question.id, question.option_ids, logits, model=model, prompt_version=head.prompt_version or "direct-options-v1",
        allowed_token_mass=0.9, hidden_state=[rng.gauss(0, 1) for _ in range(width)] if head.reads_hidden_state else None)


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("-n", type=int, default=300, help="items per question")
    opts = args.parse_args(argv)
    rng = random.Random(0)
    started = time.perf_counter()
    policies = {name: load_policy(name) for name in DATA}
    load_ms = (time.perf_counter() - started) * 1000
    sizes = {p.name: p.stat().st_size for p in (POLICY_DIR / "heads").glob("*.json")} if (POLICY_DIR / "heads").is_dir() else {}
    print(f"policies loaded and head files checked in {load_ms:.0f} ms (once per Lambda container); head files: "
          + ", ".join(f"{name} {size / 1024:.0f} KiB" for name, size in sorted(sizes.items())))
    rows = []
    for name, policy in policies.items():
        items = [json.loads(line)["item"] for line in DATA[name].read_text().splitlines()][: opts.n]
        states = [build_state(policy, parse_item(policy.item_kind, item)) for item in items]
        for question in policy.questions:
            head = question.learned_head
            if head is None:
                continue
            letters_only = question.with_head(None)
            answers = [endpoint_answer(question, head, rng) for _ in states]
            timings = {}
            for label, q in (("letters", letters_only), ("head", question)):
                for state, answer in zip(states[:20], answers[:20]):  # warm up
                    model_entry(q, answer, state)
                samples = []
                for state, answer in zip(states, answers):
                    t0 = time.perf_counter()
                    model_entry(q, answer, state)
                    samples.append((time.perf_counter() - t0) * 1000)
                timings[label] = samples
            samples = []
            for item, state, answer in zip(items, states, answers):
                parsed = parse_item(policy.item_kind, item)
                t0 = time.perf_counter()
                entry = model_entry(question, answer, state)
                explain(policy, parsed, [entry], state, {question.id: answer})
                samples.append((time.perf_counter() - t0) * 1000)
            timings["why"] = samples
            head_p50, letters_p50 = statistics.median(timings["head"]), statistics.median(timings["letters"])
            why_p50 = statistics.median(timings["why"])
            rows.append((f"{name}/{question.id}", letters_p50, head_p50, percentile(timings["head"], 0.95),
                         head_p50 - letters_p50, why_p50, why_p50 / head_p50, len(states)))
    print(f"{'question':28} {'letters p50':>12} {'head p50':>10} {'head p95':>10} {'head adds':>10} "
          f"{'+why p50':>10} {'x head':>7} {'items':>6}")
    for name, letters_p50, head_p50, head_p95, extra, why_p50, ratio, n in rows:
        print(f"{name:28} {letters_p50:10.3f}ms {head_p50:8.3f}ms {head_p95:8.3f}ms {extra:8.3f}ms "
              f"{why_p50:8.3f}ms {ratio:6.2f}x {n:6d}")
    # An item routed on its own is kept for similar items: its vector, computed once per item (the
    # routing question's head), measured beside the whole item's judging (every question, with its reason).
    for name, policy in policies.items():
        items = [parse_item(policy.item_kind, json.loads(line)["item"]) for line in DATA[name].read_text().splitlines()][: opts.n]
        vector, judged = [], []
        for parsed in items:
            state = build_state(policy, parsed)
            answers = {q.id: endpoint_answer(q, q.learned_head, rng) for q in policy.questions if q.learned_head}
            t0 = time.perf_counter()
            entries = [model_entry(q, answers[q.id], state) for q in policy.questions if q.id in answers]
            explain(policy, parsed, entries, state, answers)
            t1 = time.perf_counter()
            item_terms(policy, parsed)
            t2 = time.perf_counter()
            judged.append((t1 - t0) * 1000)
            vector.append((t2 - t1) * 1000)
        print(f"{name}: the kept vector p50 {statistics.median(vector):.3f} ms, judging the item with its reason p50 "
              f"{statistics.median(judged):.3f} ms: {statistics.median(vector) / statistics.median(judged):.2f}x "
              f"(one DynamoDB write besides, for an item routed on its own)")
    worst = max((r[3] for r in rows), default=0.0)
    print(f"head: p95 {worst:.2f} ms per item at most (target <= 5 ms)")
    print(f"head and its reason: at most {max((r[6] for r in rows), default=0.0):.2f}x the head's judging alone "
          "(model time excluded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
