"""What a SageMaker Processing job of the batch scorer takes and costs, before anything is
started: an instance type's vCPUs, price and throughput (`offer`, the one place that reads
bench/data/instance-prices.json; `python -m bench.prices` refreshes it from the AWS Price List API,
and a row not found there stays marked estimated), the hours, dollars and time limit of a job
(`estimate_for`), and how many input shards it is given (`shard_count`)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from .history_policy import HistoryError

#: Decisions a second per vCPU of a CPU instance, for the estimate: the batch scorer's 1.26 items/s
#: on 2 threads of a shared 2-CPU machine (docs/benchmarks/batch-scoring.md), scaled linearly with
#: vCPUs. A figure in the price file's processing list wins over it.
MEASURED_ITEMS_PER_SECOND_PER_VCPU = 0.63
#: Instances starting, the image pulled and the model archive fetched and extracted, before a decision.
STARTUP_SECONDS = 600
#: The job stops itself after the estimate times this (a slower instance than measured is not cut off).
RUNTIME_HEADROOM = 2.0
#: SageMaker Processing's longest run (ProcessingMaxRuntimeInSeconds), and a GPU job's limit (unmeasured).
MAX_RUNTIME_SECONDS = 777_600
UNMEASURED_RUNTIME_SECONDS = 24 * 3600
#: Items a shard: a shard is the unit of progress and of what a failed instance loses.
ITEMS_PER_SHARD = 2_000

PRICES = Path(__file__).resolve().parents[1] / "bench" / "data" / "instance-prices.json"

_SIZE = re.compile(r"^(\d*)xlarge$")


@dataclass(frozen=True)
class Offer:
    """What an instance type has and costs, and how fast it scores (None: not known)."""

    instance_type: str
    vcpus: int
    gpu: bool
    usd_per_hour: float | None
    items_per_second_per_vcpu: float | None
    basis: str  # where the price and the throughput come from, in words


def is_gpu(instance_type: str) -> bool:
    return instance_type.split(".")[1].startswith(("g", "p")) if instance_type.count(".") >= 2 else False


def vcpus_of(instance_type: str) -> int:
    """vCPUs of an instance type from its size (large 2, xlarge 4, Nxlarge 4N; medium 2)."""
    size = instance_type.rsplit(".", 1)[-1]
    if size in ("medium", "large"):
        return 2
    match = _SIZE.match(size)
    if not match:
        raise HistoryError(f"{instance_type}: cannot tell its vCPUs from its size {size!r}")
    return 4 * int(match.group(1) or 1)


def offer(instance_type: str, prices_path: Path = PRICES) -> Offer:
    """The one lookup of prices and throughput: the price file's `processing` list first (its price
    and, where measured, items/s per vCPU), else its real-time inference price (an upper bound:
    processing instances cost no more), else no price."""
    try:
        prices = json.loads(prices_path.read_text())
    except (OSError, ValueError):
        prices = {}
    processing = prices.get("processing") or {}
    if isinstance(processing, list):
        processing = {"instances": processing}
    measured = processing.get("items_per_second_per_vcpu")
    row = next((r for r in processing.get("instances", []) if r.get("type") == instance_type), None)
    if row is not None:
        measured = row.get("items_per_second_per_vcpu", measured)
        # a row's own flag and date win: `python -m bench.prices` refreshes rows one by one
        region = processing.get("region", prices.get("region", "?"))
        as_of = row.get("as_of", processing.get("as_of", prices.get("as_of", "?")))
        estimated = row.get("estimated", processing.get("estimated"))
        basis = (f"SageMaker Processing price{' (estimated, not published)' if estimated else ''}, "
                 f"{region} on-demand as of {as_of}{', ' + row['source'] if row.get('source') else ''}")
    else:
        row = next((r for r in prices.get("instances", []) if r.get("type") == instance_type), None)
        basis = (f"real-time inference price, {prices.get('region', '?')} on-demand as of {prices.get('as_of', '?')}: "
                 "no processing price listed" if row else f"no price for {instance_type} in {prices_path.name}")
    price = float(row["usd_per_hour"]) if row and row.get("usd_per_hour") else None
    vcpus = int(row["vcpus"]) if row and row.get("vcpus") else vcpus_of(instance_type)
    gpu = bool(row.get("gpu")) if row and "gpu" in row else is_gpu(instance_type)
    rate = None if gpu else float(measured or MEASURED_ITEMS_PER_SECOND_PER_VCPU)
    if rate is not None:
        basis += f"; {rate:g} items/s per vCPU ({'from the price file' if measured else 'measured, docs/benchmarks/batch-scoring.md'})"
    return Offer(instance_type, vcpus, gpu, price, rate, basis)


@dataclass(frozen=True)
class Estimate:
    hours: float | None  # each instance's, startup included; None: throughput unknown
    usd: float | None
    max_runtime_seconds: int
    text: str


def estimate_for(items: int, instances: int, found: Offer) -> Estimate:
    """Hours, dollars and the job's time limit for `items` decisions on `instances` of `found`."""
    head = f"{instances} x {found.instance_type} ({found.vcpus} vCPUs{', GPU' if found.gpu else ''}) for {items:,} items"
    price = f"${found.usd_per_hour:.3f}/h" if found.usd_per_hour else "price unknown"
    if found.items_per_second_per_vcpu is None:
        return Estimate(None, None, UNMEASURED_RUNTIME_SECONDS, (
            f"{head}: throughput on a GPU processing instance is unmeasured, so time and cost are unknown\n"
            f"  ({price} an instance while it runs; the job stops itself after {UNMEASURED_RUNTIME_SECONDS / 3600:.0f} h; "
            f"{found.basis})"))
    per_instance = found.items_per_second_per_vcpu * found.vcpus
    seconds = math.ceil(items / instances) / per_instance + STARTUP_SECONDS
    hours = seconds / 3600
    limit = int(min(MAX_RUNTIME_SECONDS, max(3600, RUNTIME_HEADROOM * seconds)))
    usd = instances * hours * found.usd_per_hour if found.usd_per_hour else None
    cost = f"{instances} x {hours:.1f} h x {price} = ${usd:,.2f}" if usd is not None else f"{instances} x {hours:.1f} h, {price}"
    return Estimate(hours, usd, limit, (
        f"{head}: about {per_instance:.1f} items/s an instance, {hours:.1f} h each: {cost}\n"
        f"  ({found.basis}; the job stops itself after {limit / 3600:.1f} h)"))


def shard_count(items: int, instances: int) -> int:
    """How many input shards to write: about ITEMS_PER_SHARD items each, as many for every
    instance, and at least one an instance (never more shards than items)."""
    shards = max(instances, math.ceil(items / ITEMS_PER_SHARD))
    shards = math.ceil(shards / instances) * instances
    return max(1, min(shards, items))


def check_instances(instances: int) -> None:
    """HistoryError unless a processing job may run on `instances` instances."""
    if not 1 <= instances <= 100:
        raise HistoryError(f"--instances {instances}: a processing job runs on 1 to 100 instances")
