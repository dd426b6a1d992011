"""The CPU variant this machine gets against the AVX2 baseline, side by side in one run.

The build ships one CPU backend per x86 microarchitecture and loads the best this CPU supports
(decision_server/ggml_backends.py). This compares that choice with `haswell` (AVX2, FMA, F16C:
the portable baseline every x86 server of the last decade runs) in two of our servers, each in
its own process (a process loads one variant), same model, threads and slots, requests
alternating so that machine noise hits both alike:

- serial: a fresh ≈300-token decision, medians of N;
- batch: 8 questions on a fresh state as one `decisions` request;
- load: 8 concurrent clients sending fresh decisions, on the batched engine and on the serial
  one (DECISION_PARALLEL_SEQUENCES=1), so the batched engine's gain over the serial one is
  seen on both variants.

Skipped with a message where the chosen variant is the baseline itself (an AVX2-only CPU).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Callable, Sequence

import httpx

from bench.peer import Ours, load
from decision_contract import Decision
from local.services import DecisionContainer

BASELINE = "haswell"
LOAD_CLIENTS = 8
#: The /proc/cpuinfo flags that tell the x86 variants apart, printed beside every figure.
VARIANT_FLAGS = ("sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx_vnni", "avx512f", "avx512vbmi",
                 "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")


def cpu_identity() -> dict[str, Any]:
    """The CPU's model name and which of the variant-relevant flags it reports."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {"cpu_model": "unknown", "cpu_flags": []}
    fields = dict(line.split(":", 1) for line in text.split("\n\n")[0].splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    return {"cpu_model": fields.get("model name", "unknown"), "cpu_flags": [f for f in VARIANT_FLAGS if f in flags]}


def compare(model: Path, *, chosen: str, available: Sequence[str], threads: int, parallel: int, ctx_size: int,
            fresh: Callable[[int], list[Decision]], batch_questions: Callable[[str], list[Decision]],
            serial: int, rounds: int, per_client: int, log_dir: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    if chosen == BASELINE or BASELINE not in available:
        return {"skipped": f"this CPU gets the {chosen} variant; nothing to compare it with here"}
    common = {"SM_LLAMA_CPP_THREADS": str(threads), "SM_LLAMA_CPP_CTX_SIZE": str(ctx_size), "LOG_LEVEL": "WARNING"}
    servers = {(variant, engine): DecisionContainer(
        log_dir / f"variant-{variant}-{engine}.log", model=model,
        settings={**common, "DECISION_CPU_VARIANT": variant,
                  "DECISION_PARALLEL_SEQUENCES": str(parallel if engine == "batched" else 1)})
        for variant in (chosen, BASELINE) for engine in ("batched", "serial")}
    for server in servers.values():
        server.start()
    try:
        with httpx.Client(timeout=600, limits=httpx.Limits(max_connections=64)) as http:
            for server in servers.values():
                server.wait_ready()
            clients = {key: Ours(f"{key[0]}/{key[1]}", http, server.url) for key, server in servers.items()}
            for client in clients.values():  # warm every server
                client.decide(fresh(1)[0])
            pair = [clients[(chosen, "batched")], clients[(BASELINE, "batched")]]
            figures: dict[str, dict[str, list[float]]] = {c.name: {"fresh": [], "batch": []} for c in pair}
            for decision in fresh(serial):
                for client in pair:
                    figures[client.name]["fresh"].append(client.decide(decision))
            for _ in range(rounds):
                questions = batch_questions(fresh(1)[0].state)
                for client in pair:
                    figures[client.name]["batch"].append(client.decide_batch(questions))
            loads = []
            for key, client in clients.items():
                row = {"variant": key[0], "engine": key[1], **load(client, LOAD_CLIENTS, fresh(LOAD_CLIENTS * per_client))}
                loads.append(row)
                progress(f"variants load {client.name} x{LOAD_CLIENTS}: {row['decisions_per_second']:.2f}/s")
    finally:
        for server in servers.values():
            server.stop()
    medians = {name: {kind: statistics.median(values) for kind, values in rows.items()} for name, rows in figures.items()}
    ours, base = medians[pair[0].name], medians[pair[1].name]
    by = {(r["variant"], r["engine"]): r for r in loads}
    return {
        "chosen": chosen, "baseline": BASELINE, "serial_requests": serial, "batch_rounds": rounds,
        "median_s": {"chosen": ours, "baseline": base},
        "ratio_chosen_to_baseline": {kind: ours[kind] / base[kind] for kind in ours},
        "load": loads,
        "throughput_chosen_to_baseline": {
            engine: by[(chosen, engine)]["decisions_per_second"] / by[(BASELINE, engine)]["decisions_per_second"]
            for engine in ("batched", "serial")},
        "batched_to_serial": {
            variant: by[(variant, "batched")]["decisions_per_second"] / by[(variant, "serial")]["decisions_per_second"]
            for variant in (chosen, BASELINE)},
    }


def print_report(report: dict[str, Any]) -> None:
    if "skipped" in report:
        print(f"\nCPU variants side by side: SKIPPED: {report['skipped']}")
        return
    chosen, base = report["chosen"], report["baseline"]
    print(f"\nCPU variant {chosen} (chosen for this CPU) vs {base} (the AVX2 baseline), both over HTTP; "
          f"medians of {report['serial_requests']} requests, batch {report['batch_rounds']} rounds:")
    print(f"  figure                         {chosen:>14} ms  {base:>10} ms   ratio")
    for kind, label in (("fresh", "serial, fresh prompt"), ("batch", "8 questions on one state")):
        print(f"  {label:<30} {report['median_s']['chosen'][kind] * 1000:>17.0f}  "
              f"{report['median_s']['baseline'][kind] * 1000:>13.0f}   {report['ratio_chosen_to_baseline'][kind]:.3f}")
    print(f"  at {LOAD_CLIENTS} clients        decisions/s: " + ", ".join(
        f"{r['variant']} {r['engine']} {r['decisions_per_second']:.2f}" for r in report["load"]))
    tp, bs = report["throughput_chosen_to_baseline"], report["batched_to_serial"]
    print(f"  throughput {chosen}/{base}: batched {tp['batched']:.2f}x, serial {tp['serial']:.2f}x; "
          f"batched/serial engine: {chosen} {bs[chosen]:.2f}x, {base} {bs[base]:.2f}x")
