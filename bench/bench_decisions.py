"""Decision benchmark: every figure side by side in one run, in one process.

1. Single decisions: a ≈300-token prompt with 4 options, median and p95 over N decisions, next
   to the pure prefill of the same prompt tokens in a fresh sequence (the floor without prefix
   reuse), interleaved so that machine load hits both alike; their ratio. Cold: the prompt
   cache is cleared before each, so only the shared instruction prefix is reused.
2. Hidden state: the same decision with and without `return_hidden_state`, interleaved, cold; ratio.
3. Batch of 8 sharing a ≈400-token state vs the same 8 scored one by one, cold; the ratio against
   the ideal (P + 8·S) / (8·(P + S)) for P shared and S own tokens per question (both beyond the
   prompt prefix every decision already shares).
4. Prompt cache: a cold decision, the same decision again, and a second question on the state
   just asked about, interleaved; ratios to the cold one.
5. Load: 1, 4, 8, 16 concurrent clients, each sending fresh decisions (states no other request
   had) back to back, against the serial engine (DECISION_PARALLEL_SEQUENCES=1) and the batched
   one (the default): decisions per second, p50/p95 latency, share of 503 busy answers.
6. The stock llama-server beside ours over HTTP (bench/peer.py; skipped with a message where the
   `xllamacpp` wheel is not installed: bench/requirements-peer.txt).
7. The llama.cpp CPU variant chosen for this CPU against the AVX2 baseline variant, both over
   HTTP (bench/cpu_variants.py; skipped on a CPU whose best variant is the baseline).
8. What 1,000 decisions cost per instance type, from the measured throughput and the dated
   on-demand prices in bench/data/instance-prices.json (bench/cost.py).

Targets (CPU): single ≤ 1.15 × prefill; hidden state ≤ 1.05 × plain; batch ≤ 1.05 × ideal; a
repeated decision ≤ 0.05 × cold; a second question on a cached state ≤ 0.4 × a cold single; at 8
clients the batched engine's throughput ≥ the serial one's, no 503 below the queue bound, p95 ≤
(queue position × single latency) + 10 %.

    make bench            # or: PYTHONPATH=contract:container .venv/bin/python bench/bench_decisions.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for part in (ROOT / "contract", ROOT / "container", ROOT):
    if str(part) not in sys.path:
        sys.path.insert(0, str(part))

from bench import cost, cpu_variants, peer
from decision_contract import Decision
from decision_server.engine import DecisionEngine
from decision_server.errors import Busy
from decision_server.model_files import embedded_model_path
from evaluation.stats import percentile

SINGLE_TARGET = 1.15
REPEAT_TARGET = 0.05  # × a cold decision
SECOND_QUESTION_TARGET = 0.4  # × a cold single
HIDDEN_TARGET = 1.05
BATCH_TARGET = 1.05  # × the ideal ratio
LOAD_CLIENTS = (1, 4, 8, 16)
LOAD_SLACK = 1.10

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
        engine.scheduler.clear_cache()
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


def bench_hidden(engine: DecisionEngine, n: int) -> dict:
    question, options = QUESTIONS[0]
    plain = make_decision("plain", state_of(engine, question, options, 300), question, options)
    hidden = plain.model_copy(update={"return_hidden_state": True})
    for _ in range(2):
        engine.decide_one(plain)
        engine.decide_one(hidden)
    plain_s, hidden_s = [], []
    for i in range(n):
        engine.scheduler.clear_cache()
        plain_s.append(timed(lambda: engine.decide_one(plain)))
        engine.scheduler.clear_cache()
        hidden_s.append(timed(lambda: engine.decide_one(hidden)))
        progress(f"hidden {i + 1}/{n}: plain {plain_s[-1]:.3f}s with hidden state {hidden_s[-1]:.3f}s")
    return {
        "decisions": n,
        "plain_median_s": statistics.median(plain_s),
        "hidden_median_s": statistics.median(hidden_s),
        "ratio_hidden_to_plain": statistics.median(hidden_s) / statistics.median(plain_s),
        "target": HIDDEN_TARGET,
    }


def bench_batch(engine: DecisionEngine, rounds: int) -> dict:
    state = state_of(engine, *QUESTIONS[0], 400)
    decisions = [make_decision(f"q{i}", state, q, opts) for i, (q, opts) in enumerate(QUESTIONS)]
    engine.decide(decisions)  # warm-up
    batch_s, singles_s = [], []
    shared = 0
    def cold_single(decision: Decision) -> float:
        engine.scheduler.clear_cache()
        return timed(lambda: engine.decide_one(decision))

    for _ in range(rounds):
        engine.scheduler.clear_cache()
        started = time.perf_counter()
        response = engine.decide(decisions)
        batch_s.append(time.perf_counter() - started)
        shared = response.timing.shared_prefix_tokens
        singles_s.append(sum(cold_single(d) for d in decisions))
        progress(f"batch round {len(batch_s)}/{rounds}: batch {batch_s[-1]:.3f}s singles {singles_s[-1]:.3f}s")
    # Tokens each path evaluates beyond the prompt prefix every decision shares (cached at start).
    common = len(engine.scheduler.prefix_tokens)
    lengths = [len(engine.readout.prompt(d).tokens) for d in decisions]
    P = shared - common
    S = statistics.mean(n - shared for n in lengths)
    ideal = (P + len(decisions) * S) / (len(decisions) * (P + S))
    ratio = statistics.median(batch_s) / statistics.median(singles_s)
    return {
        "decisions": len(decisions),
        "state_prompt_tokens": lengths[0],
        "shared_prefix_tokens": shared,
        "own_tokens_mean": S,
        "rounds": rounds,
        "batch_median_s": statistics.median(batch_s),
        "eight_singles_median_s": statistics.median(singles_s),
        "ratio_batch_to_singles": ratio,
        "ideal_ratio": ideal,
        "ratio_to_ideal": ratio / ideal,
        "target": BATCH_TARGET,
    }


def bench_cache(engine: DecisionEngine, n: int) -> dict:
    """Cold, repeated and second-question latencies on ≈300-token prompts, interleaved."""
    question, options = QUESTIONS[0]
    base = state_of(engine, question, options, 300)
    cold_s, repeat_s, second_s = [], [], []
    for i in range(n + 2):
        first = make_decision(f"cache{i}", f"Ticket {i}. {base}", question, options)
        second = second_question(first)
        engine.scheduler.clear_cache()
        cold = timed(lambda d=first: engine.decide_one(d))
        repeat = timed(lambda d=first: engine.decide_one(d))
        following = timed(lambda d=second: engine.decide_one(d))
        if i < 2:
            continue  # warm-up
        cold_s.append(cold)
        repeat_s.append(repeat)
        second_s.append(following)
        progress(f"cache {i - 1}/{n}: cold {cold:.3f}s repeated {repeat:.3f}s second question {following:.3f}s")
    cold, repeat, second = (statistics.median(v) for v in (cold_s, repeat_s, second_s))
    return {
        "decisions": n,
        "cold_median_s": cold,
        "repeated_median_s": repeat,
        "second_question_median_s": second,
        "ratio_repeated_to_cold": repeat / cold,
        "ratio_second_question_to_cold": second / cold,
        "repeat_target": REPEAT_TARGET,
        "second_question_target": SECOND_QUESTION_TARGET,
        "stats": engine.prompt_cache_stats().model_dump(),
    }


def second_question(decision: Decision) -> Decision:
    """Another question about the same state."""
    question, options = QUESTIONS[1]
    return make_decision(f"{decision.id}-2", decision.state, question, options)


def bench_load(engine: DecisionEngine, clients: int, per_client: int, decisions: list[Decision]) -> dict:
    """`clients` threads, each sending `per_client` decisions back to back (in-process, through
    the same submit path the HTTP routes use); every request a state of its own, cache cleared
    first, so each is evaluated fresh."""
    latencies: list[float] = []
    busy = 0
    lock = threading.Lock()
    engine.scheduler.clear_cache()

    def client(k: int) -> None:
        nonlocal busy
        for j in range(per_client):
            decision = decisions[(k * per_client + j) % len(decisions)]
            started = time.perf_counter()
            try:
                engine.decide_one(decision)
            except Busy:
                with lock:
                    busy += 1
                continue
            with lock:
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    return {
        "clients": clients,
        "requests": clients * per_client,
        "decisions_per_second": len(latencies) / wall,
        "p50_s": percentile(latencies, 0.5) if latencies else None,
        "p95_s": percentile(latencies, 0.95) if latencies else None,
        "busy_share": busy / (clients * per_client),
    }


def load_decisions(engine: DecisionEngine, count: int = 16) -> list[Decision]:
    """Distinct ≈300-token decisions (different states), so no request reuses another's state."""
    question, options = QUESTIONS[0]
    base = state_of(engine, question, options, 300)
    return [make_decision(f"load{k}", f"Ticket {k}. {base}", question, options) for k in range(count)]


class FreshDecisions:
    """≈300-token decisions on states no earlier call gave: `fresh(n)`."""

    def __init__(self, engine: DecisionEngine) -> None:
        self.question, self.options = QUESTIONS[0]
        self.base = state_of(engine, self.question, self.options, 300)
        self.count = 0

    def __call__(self, n: int) -> list[Decision]:
        start, self.count = self.count, self.count + n
        return [make_decision(f"fresh{k}", f"Request {k}. {self.base}", self.question, self.options)
                for k in range(start, start + n)]


def batch_questions(state: object) -> list[Decision]:
    return [make_decision(f"q{i}", state, q, opts) for i, (q, opts) in enumerate(QUESTIONS)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--decisions", type=int, default=30, help="single decisions to time")
    parser.add_argument("--rounds", type=int, default=5, help="batch-vs-singles rounds")
    parser.add_argument("--per-client", type=int, default=4, help="decisions each load client sends")
    parser.add_argument("--clients", default=",".join(map(str, LOAD_CLIENTS)), help="concurrent clients to try")
    parser.add_argument("--model", type=Path, default=None, help="GGUF (default: the embedded SmolLM2)")
    parser.add_argument("--gpu-layers", type=int, default=0)
    parser.add_argument("--peer-requests", type=int, default=12,
                        help="serial requests per figure against the stock llama-server")
    parser.add_argument("--no-peer", action="store_true", help="leave the stock llama-server out")
    parser.add_argument("--no-variants", action="store_true", help="leave the CPU-variant comparison out")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench_decisions.json")
    args = parser.parse_args(argv)

    # Default threads and settings, as the server would use them; only the model is explicit.
    model = args.model or embedded_model_path()
    engine = DecisionEngine(model_path=model, n_gpu_layers=args.gpu_layers)
    serial = DecisionEngine(model_path=model, n_gpu_layers=args.gpu_layers, parallel_sequences=1)
    single = bench_single(engine, args.decisions)
    hidden = bench_hidden(engine, args.decisions)
    batch = bench_batch(engine, args.rounds)
    single_latency = single["decision_median_s"]
    cache = bench_cache(engine, args.decisions)
    clients = [int(c) for c in args.clients.split(",")]
    decisions = load_decisions(engine, max(clients) * args.per_client)
    load = []
    for n_clients in clients:
        for name, subject in (("serial", serial), ("batched", engine)):
            row = {"engine": name, **bench_load(subject, n_clients, args.per_client, decisions)}
            row["p95_bound_s"] = n_clients * single_latency * LOAD_SLACK
            load.append(row)
            progress(f"load {name} x{n_clients}: {row['decisions_per_second']:.2f}/s p95 {row['p95_s']:.3f}s busy {row['busy_share']:.0%}")
    serial.close()
    fresh = FreshDecisions(engine)
    settings = engine.settings
    engine.close()  # the side-by-side servers run in processes of their own
    peer_report = {"skipped": "--no-peer"} if args.no_peer else peer.compare(
        model, threads=settings.threads, parallel=settings.parallel_sequences, ctx_size=settings.ctx_size,
        gpu_layers=args.gpu_layers, fresh=fresh, second_question=second_question, batch_questions=batch_questions,
        serial=args.peer_requests, rounds=args.rounds, clients=clients, per_client=args.per_client,
        log_dir=args.out.parent / "bench-servers", progress=progress)
    build = engine.llama_build
    variants_report = {"skipped": "--no-variants"} if args.no_variants else {"skipped": "GPU offload"} \
        if args.gpu_layers else cpu_variants.compare(
            model, chosen=build.cpu_variant, available=build.cpu_variants_available, threads=settings.threads,
            parallel=settings.parallel_sequences, ctx_size=settings.ctx_size, fresh=fresh,
            batch_questions=batch_questions, serial=args.peer_requests, rounds=args.rounds,
            per_client=args.per_client, log_dir=args.out.parent / "bench-servers", progress=progress)
    # capacity: the batched engine's throughput at 8 concurrent clients (or the most measured)
    batched = {r["clients"]: r for r in load if r["engine"] == "batched"}
    busiest = batched.get(8) or batched[max(batched)]
    report = {
        "model": engine.model_info.model_dump(),
        "llama_build": build.model_dump(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0],
                    **cpu_variants.cpu_identity()},
        "single": single,
        "hidden_state": hidden,
        "batch": batch,
        "prompt_cache": cache,
        "load": load,
        "queue_size": settings.queue_size,
        "parallel_sequences": settings.parallel_sequences,
        "peer": peer_report,
        "cpu_variants": variants_report,
        "cost": cost.costs(busiest["decisions_per_second"], settings.threads, args.gpu_layers != 0, cost.load_prices()),
    }
    print_report(report)
    peer.print_report(report["peer"])
    cpu_variants.print_report(report["cpu_variants"])
    cost.print_report(report["cost"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def print_report(report: dict) -> None:
    single, hidden, batch, cache = report["single"], report["hidden_state"], report["batch"], report["prompt_cache"]
    rows = [
        ("single decision median / p95", f"{single['decision_median_s'] * 1000:.1f} / {single['decision_p95_s'] * 1000:.1f} ms"),
        ("prefill floor median / p95", f"{single['prefill_median_s'] * 1000:.1f} / {single['prefill_p95_s'] * 1000:.1f} ms"),
        ("decision / prefill", f"{single['ratio_decision_to_prefill']:.3f}  (target ≤ {SINGLE_TARGET}: "
         f"{verdict(single['ratio_decision_to_prefill'] <= SINGLE_TARGET)})"),
        ("with hidden state / plain", f"{hidden['ratio_hidden_to_plain']:.3f}  ({hidden['hidden_median_s'] * 1000:.1f} vs "
         f"{hidden['plain_median_s'] * 1000:.1f} ms; target ≤ {HIDDEN_TARGET}: "
         f"{verdict(hidden['ratio_hidden_to_plain'] <= HIDDEN_TARGET)})"),
        ("batch of 8 (shared state) median", f"{batch['batch_median_s'] * 1000:.1f} ms"),
        ("8 single decisions median", f"{batch['eight_singles_median_s'] * 1000:.1f} ms"),
        ("batch / 8 singles", f"{batch['ratio_batch_to_singles']:.3f}  (ideal {batch['ideal_ratio']:.3f}; "
         f"× ideal {batch['ratio_to_ideal']:.3f}, target ≤ {BATCH_TARGET}: {verdict(batch['ratio_to_ideal'] <= BATCH_TARGET)})"),
        ("repeated decision / cold", f"{cache['ratio_repeated_to_cold']:.3f}  ({cache['repeated_median_s'] * 1000:.1f} vs "
         f"{cache['cold_median_s'] * 1000:.1f} ms; target ≤ {REPEAT_TARGET}: "
         f"{verdict(cache['ratio_repeated_to_cold'] <= REPEAT_TARGET)})"),
        ("2nd question, cached state / cold", f"{cache['ratio_second_question_to_cold']:.3f}  "
         f"({cache['second_question_median_s'] * 1000:.1f} ms; target ≤ {SECOND_QUESTION_TARGET}: "
         f"{verdict(cache['ratio_second_question_to_cold'] <= SECOND_QUESTION_TARGET)})"),
        ("prompt cache hit rate (this run)", f"{cache['stats']['hit_rate']:.2f} of {cache['stats']['lookups']} lookups, "
         f"{cache['stats']['reused_tokens']} of {cache['stats']['prompt_tokens']} prompt tokens reused"),
    ]
    info = report["model"]
    print(f"model {info['file']}  threads={info['threads']}  n_ctx={info['context_size']}  gpu_layers={info['gpu_layers']}  "
          f"llama-cpp-python {info['llama_cpp_python_version']}  load(1m)={report['machine']['load_avg_1m']:.2f}")
    build = report["llama_build"]
    print(f"llama.cpp CPU backend {build['cpu_variant']} ({build['chosen_by']}; features {' '.join(build['cpu_features'])}); "
          f"machine {report['machine']['cpu_model']}, flags {' '.join(report['machine']['cpu_flags'])}")
    print(f"single: {single['prompt_tokens']}-token prompt, {single['options']} options, {single['decisions']} decisions; "
          f"batch: {batch['decisions']} questions, {batch['state_prompt_tokens']}-token prompts, "
          f"{batch['shared_prefix_tokens']} shared, {batch['rounds']} rounds")
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    print(f"\nload (queue {report['queue_size']}, batched engine: {report['parallel_sequences']} parallel sequences):")
    print("  clients  engine    decisions/s   p50 ms   p95 ms  p95 bound ms   503s")
    for row in report["load"]:
        print(f"  {row['clients']:>7}  {row['engine']:<8}  {row['decisions_per_second']:>11.2f}  {row['p50_s'] * 1000:>7.0f}  "
              f"{row['p95_s'] * 1000:>7.0f}  {row['p95_bound_s'] * 1000:>12.0f}  {row['busy_share']:>5.0%}")
    by = {(r["engine"], r["clients"]): r for r in report["load"]}
    if ("batched", 8) in by and ("serial", 8) in by:
        b, s = by[("batched", 8)], by[("serial", 8)]
        print(f"  at 8 clients: batched/serial throughput {b['decisions_per_second'] / s['decisions_per_second']:.2f}x "
              f"({verdict(b['decisions_per_second'] >= s['decisions_per_second'])}), "
              f"503s {b['busy_share']:.0%} ({verdict(b['busy_share'] == 0)}), "
              f"p95 {b['p95_s'] * 1000:.0f} ms ≤ {b['p95_bound_s'] * 1000:.0f} ms ({verdict(b['p95_s'] <= b['p95_bound_s'])})")


if __name__ == "__main__":
    sys.exit(main())
