"""Our server against the stock llama-server, side by side in one run, both over HTTP.

Both serve the same GGUF with the same threads, parallel sequences (slots) and context, each
in its own process; both get the same prompts: ours a `decision`, llama-server the decision's
SemIf messages (`decision_server.readout.messages`) on `/v1/chat/completions` with one token
and `top_logprobs` 20, as a client of the stock server reads the letters out. Requests
alternate between the two, so machine noise hits both alike.

- serial: a fresh prompt; the same prompt again (a retry, a redelivery); a second question on
  the state just asked about;
- shared-state batch: 8 questions on a fresh state; ours as one `decisions` request, llama-server
  as 8 concurrent requests (it has no batch of its own);
- load: 1, 4, 8, 16 concurrent clients sending fresh prompts back to back: throughput, p50, p95.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import httpx

from bench.llama_server import LlamaServer, unavailable
from decision_contract import Decision
from decision_server.readout import messages
from evaluation.stats import percentile
from local.services import DecisionContainer

#: Targets against the stock server (CPU, one run).
REPEAT_TARGET = 1.5  # our repeated decision ≤ 1.5 × its repeated latency
FRESH_TARGET = 1.0  # serial fresh ≤ 1.0 × its latency
LOAD_THROUGHPUT_TARGET = 1.05  # at 8 clients, ≥ 1.05 × its throughput
LOAD_P95_TARGET = 0.8  # at 8 clients, p95 ≤ 0.8 × its p95


class Client:
    """One of the two servers, asked for decisions."""

    def __init__(self, name: str, http: httpx.Client, url: str) -> None:
        self.name, self.http, self.url = name, http, url

    def decide(self, decision: Decision) -> float:
        raise NotImplementedError

    def decide_batch(self, decisions: Sequence[Decision]) -> float:
        raise NotImplementedError


class Ours(Client):
    def decide(self, decision: Decision) -> float:
        return self._post({"decision": decision.model_dump(mode="json", exclude_none=True)})

    def decide_batch(self, decisions: Sequence[Decision]) -> float:
        return self._post({"decisions": [d.model_dump(mode="json", exclude_none=True) for d in decisions]})

    def _post(self, body: dict[str, Any]) -> float:
        started = time.perf_counter()
        response = self.http.post(f"{self.url}/invocations", json=body)
        response.raise_for_status()
        return time.perf_counter() - started


class Stock(Client):
    def decide(self, decision: Decision) -> float:
        started = time.perf_counter()
        response = self.http.post(f"{self.url}/v1/chat/completions", json={
            "messages": messages(decision), "max_tokens": 1, "temperature": 0.0,
            "logprobs": True, "top_logprobs": 20, "cache_prompt": True,
        })
        response.raise_for_status()
        return time.perf_counter() - started

    def decide_batch(self, decisions: Sequence[Decision]) -> float:
        started = time.perf_counter()
        concurrently([lambda d=d: self.decide(d) for d in decisions])
        return time.perf_counter() - started


def concurrently(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def load(client: Client, clients: int, decisions: Sequence[Decision]) -> dict[str, Any]:
    """`clients` threads sending `decisions` (split between them) back to back."""
    per_client = len(decisions) // clients
    latencies: list[float] = []
    lock = threading.Lock()

    def run(k: int) -> None:
        for decision in decisions[k * per_client:(k + 1) * per_client]:
            seconds = client.decide(decision)
            with lock:
                latencies.append(seconds)

    started = time.perf_counter()
    concurrently([lambda k=k: run(k) for k in range(clients)])
    wall = time.perf_counter() - started
    return {"clients": clients, "requests": len(latencies), "decisions_per_second": len(latencies) / wall,
            "p50_s": percentile(latencies, 0.5), "p95_s": percentile(latencies, 0.95)}


def compare(model: Path, *, threads: int, parallel: int, ctx_size: int, gpu_layers: int, fresh: Callable[[int], list[Decision]],
            second_question: Callable[[Decision], Decision], batch_questions: Callable[[str], list[Decision]],
            serial: int, rounds: int, clients: Sequence[int], per_client: int, log_dir: Path,
            progress: Callable[[str], None]) -> dict[str, Any]:
    """The side-by-side figures, or {"skipped": why} where llama-server cannot run here.
    `fresh(n)` gives n decisions on states no earlier call gave."""
    why = unavailable()
    if why is not None:
        return {"skipped": why}
    settings = {"SM_LLAMA_CPP_THREADS": str(threads), "DECISION_PARALLEL_SEQUENCES": str(parallel),
                "SM_LLAMA_CPP_CTX_SIZE": str(ctx_size), "SM_LLAMA_CPP_N_GPU_LAYERS": str(gpu_layers),
                "LOG_LEVEL": "WARNING"}
    with DecisionContainer(log_dir / "ours.log", model=model, settings=settings) as container, \
            LlamaServer(model, threads=threads, parallel=parallel, ctx_size=ctx_size, gpu_layers=gpu_layers,
                        log_path=log_dir / "llama-server.log") as stock, \
            httpx.Client(timeout=600, limits=httpx.Limits(max_connections=64)) as http:
        container.wait_ready()
        pair = [Ours("ours", http, container.url), Stock("llama-server", http, stock.url)]
        for client in pair:  # warm both
            for decision in fresh(2):
                client.decide(decision)
        figures: dict[str, dict[str, list[float]]] = {c.name: {"fresh": [], "repeated": [], "second_question": [],
                                                               "batch": []} for c in pair}
        for i, decision in enumerate(fresh(serial)):
            for client in pair:
                row = figures[client.name]
                row["fresh"].append(client.decide(decision))
                row["repeated"].append(client.decide(decision))
                row["second_question"].append(client.decide(second_question(decision)))
            progress(f"peer serial {i + 1}/{serial}: " + "  ".join(
                f"{c.name} fresh {figures[c.name]['fresh'][-1]:.3f}s repeated {figures[c.name]['repeated'][-1]:.3f}s "
                f"second question {figures[c.name]['second_question'][-1]:.3f}s" for c in pair))
        for r in range(rounds):
            questions = batch_questions(fresh(1)[0].state)
            for client in pair:
                figures[client.name]["batch"].append(client.decide_batch(questions))
            progress(f"peer batch {r + 1}/{rounds}: " + "  ".join(
                f"{c.name} {figures[c.name]['batch'][-1]:.3f}s" for c in pair))
        loads: list[dict[str, Any]] = []
        for n in clients:
            for client in pair:
                row = {"server": client.name, **load(client, n, fresh(n * per_client))}
                loads.append(row)
                progress(f"peer load {client.name} x{n}: {row['decisions_per_second']:.2f}/s p95 {row['p95_s']:.3f}s")
    medians = {name: {kind: statistics.median(values) for kind, values in rows.items()}
               for name, rows in figures.items()}
    ours, theirs = medians["ours"], medians["llama-server"]
    return {
        "servers": {"threads": threads, "parallel": parallel, "ctx_size": ctx_size, "gpu_layers": gpu_layers},
        "serial_requests": serial,
        "batch_rounds": rounds,
        "median_s": medians,
        "ratio_ours_to_llama_server": {kind: ours[kind] / theirs[kind] for kind in ours},
        "load": loads,
    }


def print_report(peer: dict[str, Any]) -> None:
    if "skipped" in peer:
        print(f"\nllama-server side by side: SKIPPED: {peer['skipped']}")
        return
    print(f"\nours vs the stock llama-server (both over HTTP, {peer['servers']['threads']} threads, "
          f"{peer['servers']['parallel']} slots, n_ctx {peer['servers']['ctx_size']}; medians of "
          f"{peer['serial_requests']} requests, batch {peer['batch_rounds']} rounds):")
    median, ratio = peer["median_s"], peer["ratio_ours_to_llama_server"]
    labels = {"fresh": "serial, fresh prompt", "repeated": "serial, the same prompt again",
              "second_question": "serial, 2nd question on that state",
              "batch": "8 questions on one state"}
    targets = {"fresh": FRESH_TARGET, "repeated": REPEAT_TARGET}
    print("  figure                               ours ms  llama-server ms   ours/theirs")
    for kind, label in labels.items():
        target = f"  (target ≤ {targets[kind]}: {'meets' if ratio[kind] <= targets[kind] else 'MISSES'})" \
            if kind in targets else ""
        print(f"  {label:<35} {median['ours'][kind] * 1000:>8.0f}  {median['llama-server'][kind] * 1000:>15.0f}"
              f"   {ratio[kind]:>11.3f}{target}")
    print("  clients  server         decisions/s   p50 ms   p95 ms")
    for row in peer["load"]:
        print(f"  {row['clients']:>7}  {row['server']:<13}  {row['decisions_per_second']:>11.2f}  "
              f"{row['p50_s'] * 1000:>7.0f}  {row['p95_s'] * 1000:>7.0f}")
    by = {(r["server"], r["clients"]): r for r in peer["load"]}
    for n in sorted({r["clients"] for r in peer["load"]}):
        o, t = by[("ours", n)], by[("llama-server", n)]
        line = (f"  at {n:>2} clients: throughput ours/theirs {o['decisions_per_second'] / t['decisions_per_second']:.2f}x, "
                f"p50 {o['p50_s'] / t['p50_s']:.2f}x, p95 {o['p95_s'] / t['p95_s']:.2f}x")
        if n == 8:
            tp = o["decisions_per_second"] / t["decisions_per_second"]
            p95 = o["p95_s"] / t["p95_s"]
            line += (f"  (targets throughput ≥ {LOAD_THROUGHPUT_TARGET}: {'meets' if tp >= LOAD_THROUGHPUT_TARGET else 'MISSES'}, "
                     f"p95 ≤ {LOAD_P95_TARGET}: {'meets' if p95 <= LOAD_P95_TARGET else 'MISSES'})")
        print(line)
