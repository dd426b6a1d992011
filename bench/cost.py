"""What 1,000 decisions cost per instance type: measured throughput × dated on-demand prices.

The prices are data (bench/data/instance-prices.json: region, date, where to check them), not
code. An instance-hour is paid whether or not requests arrive, so the cost of a decision is the
hour's price over the decisions the instance serves in it:

    cost of 1,000 = usd_per_hour / (decisions_per_second × 3600) × 1000   (at full load)

The measured throughput belongs to the machine the benchmark ran on. For CPU instance types the
report scales it by vCPUs over the threads measured: llama.cpp prefill scales at best linearly
with cores, so this is a lower bound on the cost. A GPU type's cost needs a throughput measured
on a GPU; for each, the report says how many times the CPU type's throughput it must deliver to
cost less per decision.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PRICES = Path(__file__).resolve().parent / "data" / "instance-prices.json"


def load_prices(path: Path = PRICES) -> dict[str, Any]:
    prices = json.loads(path.read_text())
    for row in prices["instances"]:
        if not row["usd_per_hour"] > 0 or not row["vcpus"] > 0:
            raise ValueError(f"{path}: {row['type']} needs a positive usd_per_hour and vcpus")
    return prices


def per_thousand(usd_per_hour: float, decisions_per_second: float) -> float:
    return usd_per_hour / (decisions_per_second * 3600.0) * 1000.0


def costs(decisions_per_second: float, threads: int, on_gpu: bool, prices: dict[str, Any]) -> dict[str, Any]:
    """Cost of 1,000 decisions per instance type at the measured throughput (`threads` CPU threads,
    or a GPU when `on_gpu`)."""
    rows = []
    for instance in prices["instances"]:
        row: dict[str, Any] = {"type": instance["type"], "vcpus": instance["vcpus"], "gpu": instance["gpu"],
                               "usd_per_hour": instance["usd_per_hour"]}
        if instance["gpu"] is None and not on_gpu:
            scaled = decisions_per_second * instance["vcpus"] / threads
            row["decisions_per_second"] = scaled
            row["usd_per_1000"] = per_thousand(instance["usd_per_hour"], scaled)
            row["basis"] = f"measured {decisions_per_second:.2f}/s on {threads} threads × {instance['vcpus']}/{threads} vCPUs"
        elif instance["gpu"] is not None and on_gpu:
            row["decisions_per_second"] = decisions_per_second
            row["usd_per_1000"] = per_thousand(instance["usd_per_hour"], decisions_per_second)
            row["basis"] = "measured on this run's GPU (not necessarily this type's)"
        rows.append(row)
    cheapest_cpu = min((r for r in rows if r["gpu"] is None and "usd_per_1000" in r),
                       key=lambda r: r["usd_per_1000"], default=None)
    if cheapest_cpu is not None:
        for row in rows:
            if row["gpu"] is not None:
                # the GPU type costs less per decision only beyond this many times the CPU type's throughput
                row["break_even_x_cpu"] = row["usd_per_hour"] / cheapest_cpu["usd_per_hour"]
                row["break_even_decisions_per_second"] = row["break_even_x_cpu"] * cheapest_cpu["decisions_per_second"]
    return {"as_of": prices["as_of"], "region": prices["region"], "currency": prices["currency"],
            "throughput_decisions_per_second": decisions_per_second, "threads": threads, "on_gpu": on_gpu,
            "cheapest_cpu": cheapest_cpu["type"] if cheapest_cpu else None, "instances": rows}


def print_report(report: dict[str, Any]) -> None:
    print(f"\ncost of 1,000 decisions at full load ({report['region']} on-demand prices as of {report['as_of']}, "
          f"{report['currency']}; measured {report['throughput_decisions_per_second']:.2f} decisions/s):")
    print("  instance          vCPUs  GPU           $/hour   decisions/s   $ per 1,000")
    for row in report["instances"]:
        gpu = row["gpu"] or "-"
        if "usd_per_1000" in row:
            tail = f"{row['decisions_per_second']:>12.2f}   {row['usd_per_1000']:>11.4f}"
        elif "break_even_decisions_per_second" in row:
            tail = (f"   cheaper than {report['cheapest_cpu']} only above "
                    f"{row['break_even_decisions_per_second']:.1f}/s ({row['break_even_x_cpu']:.1f}× its throughput)")
        else:
            tail = "   (not measured on this kind of device)"
        print(f"  {row['type']:<16}  {row['vcpus']:>5}  {gpu:<12}  {row['usd_per_hour']:>6.3f}{tail}")
    print("  CPU rows scale the measured throughput by vCPUs (at best linear: a lower bound on the cost).")
