"""`make capacity`: what one item costs in AWS calls, path by path, at two sizes of the state that
can grow; what a month of items costs at that; and which quota each path meets first.

    python -m bench.capacity [--mix automatic=0.7,review=0.2,page=0.05,correction=0.03,incident resolved=0.02]
                             [--peak 3] [--endpoint-seconds 1] [--call-seconds 0.02] [--listings-per-review 1]
                             [--ledger reports/capacity.json] [--out reports/capacity.json] [--record-ledger]
    python -m bench.capacity --recommend [--ledger bench/data/capacity-ledger.json]

1. The ledger (`local.capacity`, `local.ledger`): each path run for one item on the local stack
   seeded small (10 pending reviews, 10 open incidents, 100 audit rows, 10 shadowed items) and
   large (1,000, 5,000, 100,000, 1,000): its AWS calls by service and operation, the workflow's
   state transitions, DynamoDB request units, Lambda invocations and GB-seconds. `--ledger`
   prices a ledger measured before (the JSON `--out` wrote) instead of measuring.
2. The price of a month (30 days) of N items a day (1, 10 and 100 million) under the mix (shares of
   the item paths, summing to 1), by service, from bench/data/aws-prices.json and the endpoint's
   instance-hours (bench/data/instance-prices.json; EndpointMinInstances of CpuInstanceType, the
   template's defaults, all month). Priced at the large state. A reviewed item adds
   `--listings-per-review` console listings. Lambda duration is modelled, not the local run's wall
   time: `--endpoint-seconds` for every InvokeEndpoint (no model answers here: the stand-in answers
   at once) and `--call-seconds` for every other AWS call the function makes.
3. Quotas (bench/data/aws-quotas.json, and the stack's own limits read from template.yaml): the
   rate the mix asks of each at its daily peak (`--peak` times the day's average), the volume at
   which it is reached, and for each path the first one it meets, with the headroom at each scale.
4. The stack parameters that carry each scale (template.yaml's defaults are those of 1M items a
   day): the endpoint's instance bounds from its throughput per instance
   (bench/data/endpoint-throughput.json, estimates derived from make bench's figures), the
   intakes' concurrency, the console API's throttle. `--recommend` prints them (and the scaling
   targets' mapping as template.yaml writes it) from the recorded ledger (`--record-ledger`
   records the ledger in hand as bench/data/capacity-ledger.json).

Every figure says what it is measured or assumed from; the price and quota tables carry their
sources and whether they were checked against them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from local.capacity import ITEM_PATHS, LARGE, LISTING, SMALL, LocalWorld

DATA = Path(__file__).resolve().parent / "data"
PRICES = DATA / "aws-prices.json"
QUOTAS = DATA / "aws-quotas.json"
INSTANCE_PRICES = DATA / "instance-prices.json"
DEFAULT_MIX = {"automatic": 0.70, "review": 0.20, "page": 0.05, "correction": 0.03, "incident resolved": 0.02}
SCALES = (1_000_000, 10_000_000, 100_000_000)
DAYS_PER_MONTH = 30
HOURS_PER_MONTH = 730
SECONDS_PER_DAY = 86_400
REQUIRED_UNITS = ("stepfunctions_standard_transition", "stepfunctions_express_request", "stepfunctions_express_gb_second",
                  "dynamodb_read_request_unit", "dynamodb_write_request_unit", "lambda_gb_second_arm64")


class TableError(ValueError):
    """A price or quota table, or a mix, that cannot be used: the message names the field and why."""


# ---------------------------------------------------------------------------------- the tables
@dataclass(frozen=True)
class Price:
    usd: float
    unit: str
    source: str


@dataclass(frozen=True)
class Prices:
    region: str
    recorded: str
    checked: bool
    calls: dict[str, Price]
    units: dict[str, Price]

    def of_call(self, service: str, operation: str) -> float:
        """The price of one call; KeyError naming it when the table prices neither the call nor its service."""
        for key in (f"{service}:{operation}", f"{service}:*"):
            if key in self.calls:
                return self.calls[key].usd
        raise KeyError(f"{PRICES.name} prices no {service}:{operation} (add it, or {service}:*, to `calls`)")


def _price(where: str, raw: Any) -> Price:
    if not isinstance(raw, dict):
        raise TableError(f"{where}: must be an object with usd, unit and source")
    usd, unit, source = raw.get("usd"), raw.get("unit"), raw.get("source")
    if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd < 0:
        raise TableError(f"{where}.usd: must be a number of dollars >= 0, not {usd!r}")
    if not isinstance(unit, str) or not unit.strip():
        raise TableError(f"{where}.unit: must say what is priced (text)")
    if not isinstance(source, str) or not source.startswith("https://"):
        raise TableError(f"{where}.source: must be the https:// address of the published price, not {source!r}")
    return Price(float(usd), unit, source)


def _dated(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise TableError(f"{path}: {error}") from None
    if not isinstance(raw, dict):
        raise TableError(f"{path}: must be a JSON object")
    for name in ("region", "recorded"):
        if not isinstance(raw.get(name), str) or not raw[name]:
            raise TableError(f"{path}: {name}: missing (text)")
    if not isinstance(raw.get("checked_against_source"), bool):
        raise TableError(f"{path}: checked_against_source: must be true or false")
    return raw


def load_prices(path: Path = PRICES) -> Prices:
    raw = _dated(path)
    tables = {}
    for group in ("calls", "units"):
        if not isinstance(raw.get(group), dict) or not raw[group]:
            raise TableError(f"{path}: {group}: must be a non-empty object of prices")
        tables[group] = {key: _price(f"{path.name}: {group}.{key}", value) for key, value in raw[group].items()}
    missing = [u for u in REQUIRED_UNITS if u not in tables["units"]]
    if missing:
        raise TableError(f"{path}: units: missing {', '.join(missing)}")
    return Prices(raw["region"], raw["recorded"], raw["checked_against_source"], tables["calls"], tables["units"])


@dataclass(frozen=True)
class Quota:
    id: str
    what: str
    counts: tuple[str, ...]
    limit: float | None  # per second (a rate) or at once (a concurrency); None: no quota
    concurrent: bool
    scope: str
    raise_how: str
    source: str


def _quota(where: str, raw: Any) -> Quota:
    if not isinstance(raw, dict):
        raise TableError(f"{where}: must be an object")
    for name in ("id", "what", "scope", "raise", "source"):
        if not isinstance(raw.get(name), str) or not raw[name]:
            raise TableError(f"{where}.{name}: missing (text)")
    counts = raw.get("counts")
    if not isinstance(counts, list) or not counts or not all(isinstance(c, str) and c for c in counts):
        raise TableError(f"{where}.counts: must list what it counts (service:operation, transitions, ...)")
    concurrent = "concurrent" in raw
    limit = raw.get("concurrent" if concurrent else "per_second")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0):
        raise TableError(f"{where}.{'concurrent' if concurrent else 'per_second'}: must be a number > 0 (or null: no quota)")
    if not raw["source"].startswith("https://"):
        raise TableError(f"{where}.source: must be the https:// address of the documented quota")
    return Quota(raw["id"], raw["what"], tuple(counts), None if limit is None else float(limit), concurrent,
                 raw["scope"], raw["raise"], raw["source"])


def load_quotas(path: Path = QUOTAS) -> tuple[dict[str, Any], list[Quota]]:
    raw = _dated(path)
    if not isinstance(raw.get("quotas"), list) or not raw["quotas"]:
        raise TableError(f"{path}: quotas: must be a non-empty list")
    quotas = [_quota(f"{path.name}: quotas[{i}]", q) for i, q in enumerate(raw["quotas"])]
    seen: set[str] = set()
    for quota in quotas:
        if quota.id in seen:
            raise TableError(f"{path}: quotas: id {quota.id!r} twice")
        seen.add(quota.id)
    return raw, quotas


def parse_mix(text: str) -> dict[str, float]:
    """`automatic=0.7,review=0.2,...`: each item path's share of the items; the shares sum to 1."""
    mix: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep:
            raise TableError(f"mix: {part!r}: write path=share")
        if name not in ITEM_PATHS:
            raise TableError(f"mix: {name!r} is no path (the paths: {', '.join(ITEM_PATHS)})")
        if name in mix:
            raise TableError(f"mix: {name} given twice")
        try:
            share = float(value)
        except ValueError:
            raise TableError(f"mix: {name}: share {value!r} is not a number") from None
        if not 0 <= share <= 1:
            raise TableError(f"mix: {name}: share {share} is not between 0 and 1")
        mix[name] = share
    if not math.isclose(sum(mix.values()), 1.0, abs_tol=1e-6):
        raise TableError(f"mix: the shares sum to {sum(mix.values()):g}, not 1")
    return {name: mix.get(name, 0.0) for name in ITEM_PATHS}


# ---------------------------------------------------------------------------------- the ledger
@dataclass
class PathRecord:
    """One path of one item, as measured (`local.ledger.PathLedger`), in a form JSON keeps."""

    calls: list[tuple[str, str, str, int]]  # (caller, service, operation, count)
    transitions: int = 0
    read_units: float = 0.0
    write_units: float = 0.0
    invocations: dict[str, int] = field(default_factory=dict)
    gb_seconds: dict[str, float] = field(default_factory=dict)
    memory_mb: dict[str, int] = field(default_factory=dict)
    keys: list[tuple[str, str, str, str, float]] = field(default_factory=list)  # (table, index, key, read|write, units)
    dynamodb_requests: int = 0  # as moto's DynamoDB answered them (a check on `calls`)
    outcome: str = ""  # what the item came to (each execution's status and audit outcomes)
    waiting: int = 0  # executions still waiting for a person when the path ended

    @classmethod
    def of(cls, ledger: Any, outcome: str = "") -> PathRecord:
        return cls(outcome=outcome, waiting=len(ledger.waiting), dynamodb_requests=ledger.dynamodb_requests,
                   calls=sorted((c, s, o, n) for (c, s, o), n in ledger.calls.items()), transitions=ledger.transitions,
                   read_units=ledger.read_units, write_units=ledger.write_units, invocations=dict(ledger.invocations),
                   gb_seconds=dict(ledger.gb_seconds), memory_mb=dict(ledger.memory_mb),
                   keys=sorted((t, i, k, kind, u) for (t, i, k, kind), u in ledger.keys.items()))

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PathRecord:
        return cls(**{**raw, "calls": [tuple(c) for c in raw["calls"]], "keys": [tuple(k) for k in raw["keys"]]})

    def total(self) -> int:
        return sum(n for *_, n in self.calls)

    def count(self, service: str, operation: str = "*", caller: str | None = None) -> int:
        return sum(n for c, s, o, n in self.calls
                   if s == service and operation in ("*", o) and (caller is None or c == caller))

    def operations(self) -> dict[tuple[str, str], int]:
        counted: dict[tuple[str, str], int] = {}
        for _, service, operation, n in self.calls:
            counted[(service, operation)] = counted.get((service, operation), 0) + n
        return counted

    def busy_seconds(self, endpoint_seconds: float, call_seconds: float) -> dict[str, float]:
        """Each function's seconds per item, modelled: `endpoint_seconds` for each decision it asked
        the endpoint for, `call_seconds` for each other AWS call it made (one after another). The
        local run's wall time is no measure of AWS's: moto, two cores and a thousand waiting
        executions answer far more slowly."""
        busy = {}
        for function in self.memory_mb:
            decisions = self.count("sagemaker-runtime", "InvokeEndpoint", caller=function)
            others = sum(n for c, s, o, n in self.calls if c == function and s not in ("lambda", "sagemaker-runtime"))
            busy[function] = decisions * endpoint_seconds + others * call_seconds
        return busy


@dataclass
class Measured:
    """The ledger at both sizes: {"small"|"large": {path: PathRecord}}, and the sizes."""

    sizes: dict[str, dict[str, int]]
    paths: dict[str, dict[str, PathRecord]]

    def to_json(self) -> dict[str, Any]:
        return {"sizes": self.sizes, "paths": {size: {p: asdict(r) for p, r in paths.items()} for size, paths in self.paths.items()}}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Measured:
        return cls(sizes=raw["sizes"], paths={size: {p: PathRecord.from_json(r) for p, r in paths.items()}
                                              for size, paths in raw["paths"].items()})

    def growing(self) -> dict[str, list[str]]:
        """For each path whose calls differ between the sizes: each operation that differs, small → large."""
        grown = {}
        for path, large in self.paths["large"].items():
            small, changes = self.paths["small"][path].operations(), []
            for op in sorted(set(small) | set(large.operations())):
                before, after = small.get(op, 0), large.operations().get(op, 0)
                if before != after:
                    changes.append(f"{op[0]} {op[1]} {before} → {after}")
            if changes:
                grown[path] = changes
        return grown


def measure(sizes: Mapping[str, Any], progress: Any = print) -> Measured:
    """Both worlds, one after the other (each its own stack)."""
    paths: dict[str, dict[str, PathRecord]] = {}
    for name, size in sizes.items():
        progress(f"== {name} state: {size.describe()}")
        with LocalWorld(size, progress=progress) as world:
            paths[name] = {path: PathRecord.of(ledger, world.outcomes[path]) for path, ledger in world.measure().items()}
    return Measured({name: asdict(size) for name, size in sizes.items()}, paths)


# ---------------------------------------------------------------------------------- prices
@dataclass(frozen=True)
class Assumptions:
    mix: dict[str, float]
    peak: float = 3.0
    endpoint_seconds: float = 1.0
    listings_per_review: float = 1.0
    call_seconds: float = 0.02

    def shares(self) -> dict[str, float]:
        """Each measured path's count per item: the item paths' shares, and the review's listings."""
        return {**self.mix, LISTING: self.mix.get("review", 0.0) * self.listings_per_review}


def item_cost(record: PathRecord, prices: Prices, endpoint_seconds: float, call_seconds: float) -> dict[str, float]:
    """Dollars one item of the path costs, by service (the endpoint's instance-hours apart)."""
    cost: dict[str, float] = {}

    def add(service: str, usd: float) -> None:
        cost[service] = cost.get(service, 0.0) + usd

    for (service, operation), n in record.operations().items():
        add(service, n * prices.of_call(service, operation))
    units = prices.units
    add("stepfunctions", record.transitions * units["stepfunctions_standard_transition"].usd)
    add("dynamodb", record.read_units * units["dynamodb_read_request_unit"].usd
        + record.write_units * units["dynamodb_write_request_unit"].usd)
    gb_seconds = sum(seconds * record.memory_mb[f] / 1024
                     for f, seconds in record.busy_seconds(endpoint_seconds, call_seconds).items())
    add("lambda", gb_seconds * units["lambda_gb_second_arm64"].usd)
    return {service: usd for service, usd in cost.items() if usd}


def endpoint_month(instances_file: Path = INSTANCE_PRICES) -> tuple[float, str]:
    """The endpoint's month: the template's EndpointMinInstances of CpuInstanceType, all month."""
    from local.cloudformation import Stack

    parameters = Stack.load().template["Parameters"]
    instance_type, count = parameters["CpuInstanceType"]["Default"], int(parameters["EndpointMinInstances"]["Default"])
    table = json.loads(instances_file.read_text(encoding="utf-8"))
    row = next((r for r in table["instances"] if r["type"] == instance_type), None)
    if row is None:
        raise TableError(f"{instances_file}: no price for {instance_type} (the template's CpuInstanceType)")
    return (count * row["usd_per_hour"] * HOURS_PER_MONTH,
            f"{count} × {instance_type} × ${row['usd_per_hour']}/h × {HOURS_PER_MONTH} h ({table['region']}, as of {table['as_of']})")


def month(costs: Mapping[str, Mapping[str, float]], assumptions: Assumptions, items_per_day: int,
          endpoint_usd: float) -> dict[str, float]:
    """A month of `items_per_day` under the mix, by service."""
    total: dict[str, float] = {"sagemaker (endpoint instance-hours)": endpoint_usd}
    for path, share in assumptions.shares().items():
        for service, usd in costs[path].items():
            total[service] = total.get(service, 0.0) + usd * share * items_per_day * DAYS_PER_MONTH
    return total


def express_month(record: PathRecord, prices: Prices, items_per_day: float, seconds: float = 1.0,
                  memory_mb: int = 64) -> tuple[float, float]:
    """A path's workflow on Standard (its transitions) and on Express (per execution, `seconds` at
    `memory_mb`, Express's least): dollars a month at `items_per_day` of that path. A what-if for a
    path with no person in it (Express runs 5 minutes at most)."""
    executions = record.count("stepfunctions", "StartExecution")
    units = prices.units
    standard = record.transitions * units["stepfunctions_standard_transition"].usd
    express = executions * (units["stepfunctions_express_request"].usd
                            + max(seconds, 0.1) * max(memory_mb, 64) / 1024 * units["stepfunctions_express_gb_second"].usd)
    return standard * items_per_day * DAYS_PER_MONTH, express * items_per_day * DAYS_PER_MONTH


# ---------------------------------------------------------------------------------- quotas
@dataclass(frozen=True)
class Demand:
    """What one quota is asked at the daily peak of one item a day (multiply by the items a day),
    and by which paths."""

    quota: Quota
    per_item_a_day: float  # calls/s (or concurrent executions) per item a day
    paths: frozenset[str]
    detail: str = ""

    def reached_at(self) -> float | None:
        """Items a day at which the quota is reached; None: never (no quota, or nothing asked)."""
        if self.quota.limit is None or self.per_item_a_day <= 0:
            return None
        return self.quota.limit / self.per_item_a_day


def stack_limits() -> list[Quota]:
    """The stack's own limits, from template.yaml's defaults: the intakes' concurrency and the
    review console's API throttle."""
    from local.cloudformation import Stack

    parameters = Stack.load().template["Parameters"]
    source = "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html"
    return [
        Quota("ticket-intake-concurrency", "ticket intake concurrency (TicketMaxConcurrency: the SQS event source's "
              "MaximumConcurrency)", ("lambda:concurrency:TicketIntakeFunction",),
              float(parameters["TicketMaxConcurrency"]["Default"]), True, "this stack (template.yaml)",
              "raise the TicketMaxConcurrency parameter (the endpoint must take it)", source),
        Quota("incident-intake-concurrency", "incident intake concurrency (IncidentMaxConcurrency: reserved)",
              ("lambda:concurrency:IncidentIntakeFunction",), float(parameters["IncidentMaxConcurrency"]["Default"]), True,
              "this stack (template.yaml)", "raise the IncidentMaxConcurrency parameter (the endpoint must take it)",
              "https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html"),
        Quota("console-api-throttle", "review console API throttle (ReviewConsoleThrottlingRateLimit)",
              ("apigateway:HTTP API request",), float(parameters["ReviewConsoleThrottlingRateLimit"]["Default"]), False,
              "this stack (template.yaml)", "raise the ReviewConsoleThrottlingRateLimit parameter (and the reviewers with it)",
              "https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html"),
    ]


def demands(records: Mapping[str, PathRecord], quotas: Sequence[Quota], assumptions: Assumptions) -> list[Demand]:
    """Each quota's demand at the daily peak, per item a day (for a shared DynamoDB key or a
    table: the busiest one)."""
    shares = assumptions.shares()
    rate = assumptions.peak / SECONDS_PER_DAY  # calls/s at the peak, per item a day, per call an item makes
    found = []
    for quota in quotas:
        per_path = {path: _asked(record, quota, assumptions) for path, record in records.items() if path in shares}
        if quota.counts[0].startswith("dynamodb:"):
            found.append(_busiest(quota, records, shares, rate))
            continue
        asked = {path: sum(amounts.values()) for path, amounts in per_path.items()}
        total = sum(shares[p] * n for p, n in asked.items()) * rate
        found.append(Demand(quota, total, frozenset(p for p, n in asked.items() if n > 0)))
    return found


def _asked(record: PathRecord, quota: Quota, assumptions: Assumptions) -> dict[str, float]:
    """What one item of the path asks of the quota, by what it counts."""
    asked = {}
    for counted in quota.counts:
        service, _, rest = counted.partition(":")
        if counted == "transitions":
            asked[counted] = float(record.transitions)
        elif service == "lambda" and rest.startswith("concurrency"):
            function = rest.partition(":")[2]
            busy = record.busy_seconds(assumptions.endpoint_seconds, assumptions.call_seconds)
            asked[counted] = sum(s for f, s in busy.items() if not function or f == function)
        else:
            asked[counted] = float(record.count(service, rest or "*"))
    return asked


#: A key spread over shards (`<key>#<n>`): each item writes one of them.
SHARD = re.compile(r"^(?P<base>.*)#(?P<shard>\d+)$")


def shared_keys(records: Mapping[str, PathRecord]) -> dict[tuple[str, str, str, str], dict[str, float]]:
    """DynamoDB partition keys that more than one path's item used (each path's item is another
    item: a key they share is one every item uses), with each path's units on it a partition
    sees. The writes of a sharded key (`<key>#<n>`) are one partition's share: their units over the
    shards seen written (at least that many shards exist); a read is of the key it names."""
    used: dict[tuple[str, str, str, str], dict[str, float]] = {}
    shards: dict[tuple[str, str, str, str], set[str]] = {}
    for path, record in records.items():
        for table, index, key, kind, units in record.keys:
            sharded = SHARD.match(key) if kind == "write" else None
            name = (table, index, f"{sharded['base']}#<shard>" if sharded else key, kind)
            used.setdefault(name, {})
            used[name][path] = used[name].get(path, 0.0) + units
            if sharded:
                shards.setdefault(name, set()).add(sharded["shard"])
    for name, seen in shards.items():
        used[name] = {path: units / len(seen) for path, units in used[name].items()}
    return {k: by_path for k, by_path in used.items() if len(by_path) > 1 and k[2] not in ("*", "?")}


def _busiest(quota: Quota, records: Mapping[str, PathRecord], shares: Mapping[str, float], rate: float) -> Demand:
    kind = "read" if "read" in quota.counts[0] else "write"
    if "shared-key" in quota.counts[0]:
        groups = {f"{t}{'/' + i if i else ''} key {k!r}": by_path for (t, i, k, kd), by_path in shared_keys(records).items()
                  if kd == kind}
    else:
        groups = {}
        for path, record in records.items():
            for table, _, _, kd, units in record.keys:
                if kd == kind:
                    groups.setdefault(table, {})
                    groups[table][path] = groups[table].get(path, 0.0) + units
    best = Demand(quota, 0.0, frozenset())
    for name, by_path in groups.items():
        demand = sum(shares.get(p, 0.0) * u for p, u in by_path.items()) * rate
        if demand > best.per_item_a_day:
            best = Demand(quota, demand, frozenset(p for p, u in by_path.items() if u and shares.get(p)), name)
    return best


def first_quotas(found: Sequence[Demand]) -> dict[str, Demand]:
    """For each path, the quota (among those it asks of) that the mix reaches first."""
    first: dict[str, Demand] = {}
    for demand in found:
        at = demand.reached_at()
        if at is None:
            continue
        for path in demand.paths:
            if path not in first or at < (first[path].reached_at() or math.inf):
                first[path] = demand
    return first


# ---------------------------------------------------------------------------------- sizing
THROUGHPUT = DATA / "endpoint-throughput.json"
#: The ledger the recommended parameters are computed from (make capacity's, recorded: --record-ledger).
LEDGER = DATA / "capacity-ledger.json"
#: The scale template.yaml's defaults are sized for (items a day).
DEFAULT_SCALE = SCALES[0]
#: The mapping's key for the template's GPU instance pool (EndpointCompute=GPU): auto scaling counts
#: instances of whichever type of the pool SageMaker gives.
GPU_POOL = "GPU"
#: A throttle's burst holds this many seconds of its steady rate (the webhook API's 50 over 20).
BURST_SECONDS = 2.5
#: The parameters the capacity table sizes, in the order it shows them.
SIZED = ("EndpointMinInstances", "EndpointMaxInstances", "TicketMaxConcurrency", "IncidentMaxConcurrency",
         "ReviewConsoleThrottlingRateLimit", "ReviewConsoleThrottlingBurstLimit")
ENDPOINT_INVOCATIONS = Quota("endpoint-invocations", "endpoint invocations", ("sagemaker-runtime:InvokeEndpoint",),
                             None, False, "this stack", "more endpoint instances",
                             "https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling.html")


@dataclass(frozen=True)
class Throughput:
    """Decisions a second one endpoint instance serves (an estimate: see `basis`)."""

    instance: str
    model: str
    decisions_per_second: float
    basis: str

    def invocations_target(self, safety_factor: float) -> int:
        """SageMaker's target of invocations per instance per minute: the rate × the safety factor × 60."""
        return max(1, math.floor(self.decisions_per_second * safety_factor * 60))


@dataclass(frozen=True)
class ThroughputTable:
    safety_factor: float
    rows: dict[tuple[str, str], Throughput]

    def of(self, instance: str, model: str) -> Throughput:
        if (instance, model) not in self.rows:
            raise TableError(f"{THROUGHPUT.name}: no throughput for instance {instance!r} with model {model!r} "
                             f"(instances: {', '.join(sorted({i for i, _ in self.rows}))})")
        return self.rows[(instance, model)]

    def mapping(self) -> dict[str, dict[str, int]]:
        """template.yaml's EndpointInvocationsPerMinute: {instance: {model: target per instance per minute}}."""
        found: dict[str, dict[str, int]] = {}
        for (instance, model), row in self.rows.items():
            found.setdefault(instance, {})[model] = row.invocations_target(self.safety_factor)
        return found


def _positive(where: str, value: Any, integer: bool = False) -> float:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value) or value <= 0:
        raise TableError(f"{where}: must be a{'n integer' if integer else ' number'} > 0, not {value!r}")
    return float(value)


def load_throughput(path: Path = THROUGHPUT) -> ThroughputTable:
    """The per-instance rates, each derived from the measurements in the file (`derivation` says how)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        measured, models, cpus = raw["measured"], raw["models"], raw["cpu_instances"]
        cpu, gpu = measured["cpu"], measured["gpu"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise TableError(f"{path}: needs measured.cpu, measured.gpu, models and cpu_instances ({error!r})") from None
    safety = _positive(f"{path.name}: safety_factor", raw.get("safety_factor"))
    if safety > 1:
        raise TableError(f"{path.name}: safety_factor: {safety} is over 1 (the target must stay below the most an instance serves)")
    for name, at in (("cpu", cpu), ("gpu", gpu)):
        if at.get("model") not in models:
            raise TableError(f"{path.name}: measured.{name}.model: {at.get('model')!r} is none of models ({', '.join(models)})")
    per_thread = _positive(f"{path.name}: measured.cpu.decisions_per_second", cpu.get("decisions_per_second")) / \
        _positive(f"{path.name}: measured.cpu.threads", cpu.get("threads"), integer=True)
    gpu_rate = 1 / _positive(f"{path.name}: measured.gpu.seconds_per_decision", gpu.get("seconds_per_decision"))
    size = {m: _positive(f"{path.name}: models.{m}.parameters", spec.get("parameters")) for m, spec in models.items()}
    rows: dict[tuple[str, str], Throughput] = {}
    for model, parameters in size.items():
        for instance, vcpus in cpus.items():
            shrink = size[cpu["model"]] / parameters
            rate = per_thread * _positive(f"{path.name}: cpu_instances.{instance}", vcpus, integer=True) * shrink
            rows[(instance, model)] = Throughput(instance, model, rate, (
                f"estimate: the {cpu['model']} at {cpu['decisions_per_second']:g}/s on {cpu['threads']} threads "
                f"(make bench) × {vcpus}/{cpu['threads']} vCPUs" + _scaled(cpu["model"], model)))
        shrink = size[gpu["model"]] / parameters
        rows[(GPU_POOL, model)] = Throughput(GPU_POOL, model, gpu_rate * shrink, (
            f"estimate: the {gpu['model']} at {gpu['seconds_per_decision'] * 1000:g} ms a decision on an {gpu['device']} "
            f"(bench.compare_backends; the pool has no {gpu['device'].split()[-1]}: taken for each of its cards)"
            + _scaled(gpu["model"], model)))
    return ThroughputTable(safety, rows)


def _scaled(measured: str, model: str) -> str:
    return "" if measured == model else f" × {measured}/{model} parameters"


@dataclass(frozen=True)
class Recommendation:
    """The sized parameters at one scale, and what the daily peak asks of each before rounding
    and before the parameter's bounds."""

    scale: int
    throughput: Throughput
    target: int  # invocations per instance per minute
    values: dict[str, int]
    needed: dict[str, float]

    def capped(self, name: str) -> bool:
        return self.values[name] < math.ceil(self.needed[name])


def recommend(records: Mapping[str, PathRecord], assumptions: Assumptions, table: ThroughputTable, scale: int,
              instance: str, model: str, parameters: Mapping[str, Any]) -> Recommendation:
    """The endpoint's bounds, the intakes' concurrency and the console's throttle that carry
    `scale` items a day at the daily peak. The endpoint's floor serves the day's average at the
    instance's full rate (an instance takes minutes to start); its ceiling holds the peak at the
    scaling target. An intake's concurrency is its invocations in flight at the peak (Little's
    law over the modelled busy seconds); the throttle is the console's requests a second at the peak."""
    throughput = table.of(instance, model)
    target = throughput.invocations_target(table.safety_factor)
    asked = {d.quota.id: d.per_item_a_day * scale
             for d in demands(records, [*stack_limits(), ENDPOINT_INVOCATIONS], assumptions)}
    peak = asked[ENDPOINT_INVOCATIONS.id]  # invocations a second at the daily peak
    rate = asked["console-api-throttle"]
    needed = {"EndpointMinInstances": peak / assumptions.peak / throughput.decisions_per_second,
              "EndpointMaxInstances": peak * 60 / target,
              "TicketMaxConcurrency": asked["ticket-intake-concurrency"],
              "IncidentMaxConcurrency": asked["incident-intake-concurrency"],
              "ReviewConsoleThrottlingRateLimit": rate,
              "ReviewConsoleThrottlingBurstLimit": math.ceil(rate) * BURST_SECONDS}
    values = {name: _within(name, parameters[name], math.ceil(n)) for name, n in needed.items()}
    values["EndpointMaxInstances"] = max(values["EndpointMaxInstances"], values["EndpointMinInstances"])
    return Recommendation(scale, throughput, target, values, needed)


def _within(name: str, spec: Mapping[str, Any], value: int) -> int:
    """`value` held to the parameter's MinValue and MaxValue."""
    if "MinValue" not in spec:
        raise TableError(f"template.yaml: {name}: needs a MinValue")
    value = max(value, int(spec["MinValue"]))
    return min(value, int(spec["MaxValue"])) if "MaxValue" in spec else value


def template_sizing() -> tuple[dict[str, Any], str, str]:
    """template.yaml's parameters, and its default instance key and model (GPU_POOL for EndpointCompute=GPU)."""
    from local.cloudformation import Stack

    parameters = Stack.load().template["Parameters"]
    gpu = parameters["EndpointCompute"]["Default"] == "GPU"
    instance = GPU_POOL if gpu else parameters["CpuInstanceType"]["Default"]
    return parameters, instance, parameters["DecisionModelSize"]["Default"]


def recommendations(measured: Measured, assumptions: Assumptions, table: ThroughputTable) -> list[Recommendation]:
    """At each scale, for the template's default instance type and model, at the large state."""
    parameters, instance, model = template_sizing()
    return [recommend(measured.paths["large"], assumptions, table, scale, instance, model, parameters) for scale in SCALES]


def sizing_lines(found: Sequence[Recommendation], table: ThroughputTable) -> list[str]:
    """The recommended parameters per scale as a Markdown table, and the scaling targets per
    instance and model (template.yaml's EndpointInvocationsPerMinute)."""
    first = found[0].throughput
    lines = [f"For {first.instance} with the {first.model} model: {first.decisions_per_second:.3g} decisions/s an "
             f"instance ({first.basis}); InvocationsPerInstanceTarget 0 takes {found[0].target} a minute "
             f"(× {table.safety_factor:g}, SageMaker's safety factor)", "",
             "| parameter | " + " | ".join(f"{volume(r.scale)} items/day" for r in found) + " |",
             "|---|" + "---:|" * len(found)]
    for name in SIZED:
        cells = [f"{r.values[name]:,}" + (f" (needs {math.ceil(r.needed[name]):,})" if r.capped(name) else "")
                 for r in found]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    lines += ["", "| instance | model | decisions/s an instance | invocations a minute (target) | rests on |",
              "|---|---|---:|---:|---|"]
    for (instance, model), row in table.rows.items():
        lines.append(f"| {instance} | {model} | {row.decisions_per_second:.3g} | "
                     f"{row.invocations_target(table.safety_factor)} | {row.basis} |")
    return lines


def mapping_yaml(table: ThroughputTable) -> list[str]:
    """The EndpointInvocationsPerMinute mapping as template.yaml writes it."""
    return ["  EndpointInvocationsPerMinute:"] + [
        f"    {instance}: {{" + ", ".join(f'"{model}": {n}' for model, n in by_model.items()) + "}"
        for instance, by_model in table.mapping().items()]


# ---------------------------------------------------------------------------------- the report
def money(usd: float) -> str:
    return f"${usd:,.0f}" if usd >= 100 else f"${usd:,.2f}"


def volume(items: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if items >= size:
            return f"{items / size:.3g}{unit}"
    return f"{items:.3g}"


def ledger_lines(measured: Measured) -> list[str]:
    small, large = measured.paths["small"], measured.paths["large"]
    lines = [f"state: small = {_sizes(measured.sizes['small'])}; large = {_sizes(measured.sizes['large'])}", "",
             f"{'path':<18} {'calls/item':>14} {'transitions':>12} {'DynamoDB RRU':>14} {'DynamoDB WRU':>14} {'invocations':>12}"]
    for path, s in small.items():
        b = large[path]
        lines.append(f"{path:<18} {_pair(s.total(), b.total()):>14} {_pair(s.transitions, b.transitions):>12} "
                     f"{_pair(s.read_units, b.read_units):>14} {_pair(s.write_units, b.write_units):>14} "
                     f"{_pair(sum(s.invocations.values()), sum(b.invocations.values())):>12}")
    for path, s in small.items():
        b = large[path]
        lines += ["", f"{path}: service operation (caller) small → large",
                  f"  the item came to: {s.outcome or '-'} (small); {b.outcome or '-'} (large)"]
        callers: dict[tuple[str, str], set[str]] = {}
        for caller, service, operation, _ in s.calls + b.calls:
            callers.setdefault((service, operation), set()).add(caller)
        before, after = s.operations(), b.operations()
        for op in sorted(callers):
            flag = "   ← grows" if after.get(op, 0) > before.get(op, 0) else "   ← shrinks" if after.get(op, 0) < before.get(op, 0) else ""
            lines.append(f"  {op[0] + ' ' + op[1]:<44} {_pair(before.get(op, 0), after.get(op, 0)):>12}   "
                         f"({', '.join(sorted(callers[op]))}){flag}")
    grown = measured.growing()
    lines += ["", "paths whose calls per item differ between the sizes:" if grown else "no path's calls differ between the sizes"]
    lines += [f"  {path}: {'; '.join(changes)}" for path, changes in grown.items()]
    return lines


def _sizes(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{n:,} {name.replace('_', ' ')}" for name, n in sizes.items())


def _pair(small: float, large: float) -> str:
    shown = [f"{v:g}" if isinstance(v, int) or float(v).is_integer() else f"{v:.1f}" for v in (small, large)]
    return shown[0] if small == large else f"{shown[0]} → {shown[1]}"


def cost_lines(measured: Measured, prices: Prices, assumptions: Assumptions) -> tuple[list[str], dict[str, Any]]:
    records = measured.paths["large"]
    costs = {path: item_cost(record, prices, assumptions.endpoint_seconds, assumptions.call_seconds)
             for path, record in records.items()}
    endpoint_usd, endpoint_basis = endpoint_month()
    months = {scale: month(costs, assumptions, scale, endpoint_usd) for scale in SCALES}
    services = sorted({s for m in months.values() for s in m}, key=lambda s: -months[SCALES[0]].get(s, 0.0))
    mix = ", ".join(f"{p} {share:.0%}" for p, share in assumptions.mix.items())
    lines = [f"mix: {mix}; {assumptions.listings_per_review:g} console listing(s) per reviewed item; "
             f"Lambda duration: {assumptions.endpoint_seconds:g} s per InvokeEndpoint, {assumptions.call_seconds:g} s per other "
             "AWS call; priced at the large state",
             f"{'service':<38}" + "".join(f"{volume(s) + ' items/day':>18}" for s in SCALES)]
    for service in services:
        lines.append(f"{service:<38}" + "".join(f"{money(months[s].get(service, 0.0)):>18}" for s in SCALES))
    lines.append(f"{'total a month':<38}" + "".join(f"{money(sum(months[s].values())):>18}" for s in SCALES))
    lines += [f"endpoint: {endpoint_basis}; its throughput bounds the items a day it can decide (make bench), "
              "not priced here", "", "one item, by path (large state):"]
    for path, by_service in costs.items():
        detail = ", ".join(f"{s} {money(u * 1e6)}" for s, u in sorted(by_service.items(), key=lambda kv: -kv[1]))
        lines.append(f"  {path:<18} {money(sum(by_service.values()) * 1e6)} per million ({detail})")
    auto = records["automatic"]
    if auto.transitions:  # an automatic path that still runs the Standard workflow: what Express would cost
        standard, express = express_month(auto, prices, SCALES[0] * assumptions.mix["automatic"])
        lines.append(f"what if the automatic path's workflow ran as Express (1 s at 64 MB an execution, assumed): "
                     f"{money(express)} a month instead of {money(standard)} on Standard at {volume(SCALES[0])} items/day")
    return lines, {"months": {str(s): m for s, m in months.items()}, "per_item": costs, "endpoint": endpoint_basis}


def quota_lines(measured: Measured, quotas: Sequence[Quota], assumptions: Assumptions) -> tuple[list[str], dict[str, Any]]:
    found = demands(measured.paths["large"], quotas, assumptions)
    small = {d.quota.id: d.reached_at() for d in demands(measured.paths["small"], quotas, assumptions)}
    lines = [f"at the daily peak ({assumptions.peak:g}× the day's average); headroom at the large state",
             f"{'quota':<58} {'limit':>9} {'reached at (items/day) small | large':>37}   headroom at "
             + " / ".join(volume(s) for s in SCALES)]
    for demand in sorted(found, key=lambda d: d.reached_at() or math.inf):
        at, at_small = demand.reached_at(), small.get(demand.quota.id)
        limit = "none" if demand.quota.limit is None else f"{demand.quota.limit:g}{'' if demand.quota.concurrent else '/s'}"
        heads = " / ".join("-" if at is None else f"{at / s:.2g}×" for s in SCALES)
        reached = f"{'-' if at_small is None else volume(at_small)} | {'-' if at is None else volume(at)}"
        lines.append(f"{demand.quota.what[:58]:<58} {limit:>9} {reached:>37}   {heads}")
        if demand.detail:
            lines.append(f"    the busiest: {demand.detail}")
    lines += ["", "the first quota each path meets:"]
    first = first_quotas(found)
    for path in [*ITEM_PATHS, LISTING]:
        met = first.get(path)
        if met is None:
            lines.append(f"  {path:<18} none it asks of has a limit")
            continue
        at = met.reached_at() or math.inf
        lines.append(f"  {path:<18} {met.quota.what}{' [' + met.detail + ']' if met.detail else ''}: reached at "
                     f"{volume(at)} items/day; headroom " + ", ".join(f"{at / s:.2g}× at {volume(s)}" for s in SCALES)
                     + f" (raise: {met.quota.raise_how})")
    table = [{"quota": d.quota.id, "what": d.quota.what, "detail": d.detail, "limit": d.quota.limit,
              "reached_at_items_a_day": d.reached_at(), "paths": sorted(d.paths)} for d in found]
    return lines, {"quotas": table, "first": {p: d.quota.id for p, d in first.items()}}


def sources_lines(prices: Prices, quotas_raw: Mapping[str, Any]) -> list[str]:
    checked = {True: "checked against its sources", False: "NOT checked against its sources: refresh before relying on it"}
    return [f"prices: {PRICES.relative_to(DATA.parent.parent)} ({prices.region}, recorded {prices.recorded}, "
            f"{checked[prices.checked]}); each row names its source",
            f"quotas: {QUOTAS.relative_to(DATA.parent.parent)} ({quotas_raw['region']}, recorded {quotas_raw['recorded']}, "
            f"{checked[quotas_raw['checked_against_source']]}); the stack's own limits are template.yaml's defaults",
            f"endpoint throughput: {THROUGHPUT.relative_to(DATA.parent.parent)} (each row an ESTIMATE derived from "
            "the benchmarks' figures, none measured on its instance type)"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__.splitlines()[0])
    parser.add_argument("--mix", default=",".join(f"{p}={s}" for p, s in DEFAULT_MIX.items()),
                        help="each item path's share of the items (summing to 1)")
    parser.add_argument("--peak", type=float, default=3.0, help="the daily peak's rate over the day's average (3)")
    parser.add_argument("--endpoint-seconds", type=float, default=1.0,
                        help="seconds a function waits for each decision of the endpoint (1; the stand-in answers at once)")
    parser.add_argument("--call-seconds", type=float, default=0.02,
                        help="seconds a function waits for each other AWS call (0.02: an in-region round trip)")
    parser.add_argument("--listings-per-review", type=float, default=1.0,
                        help="console listings a reviewed item costs (1: the list is loaded again after each answer)")
    parser.add_argument("--ledger", type=Path, help="price this ledger (what --out wrote) instead of measuring")
    parser.add_argument("--out", type=Path, default=Path("reports/capacity.json"), help="the ledger and report as JSON")
    parser.add_argument("--recommend", action="store_true",
                        help=f"print only the stack parameters per scale and the scaling targets' mapping, from --ledger "
                             f"(default {LEDGER.relative_to(DATA.parent.parent)}); nothing measured or written")
    parser.add_argument("--record-ledger", action="store_true",
                        help=f"write the ledger in hand to {LEDGER.relative_to(DATA.parent.parent)}, which the "
                             "template's defaults are sized from")
    return parser


def read_ledger(path: Path) -> Measured:
    """A ledger `--out` (or `--record-ledger`) wrote."""
    try:
        return Measured.from_json(json.loads(path.read_text(encoding="utf-8"))["ledger"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise TableError(f"--ledger {path}: not a ledger `make capacity` wrote ({type(error).__name__}: {error})") from None


def record_ledger(measured: Measured, path: Path = LEDGER) -> None:
    path.write_text(json.dumps({"recorded": f"{datetime.date.today()}", "measured_by": "make capacity",
                                "ledger": measured.to_json()}, indent=1) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        mix = parse_mix(args.mix)
        for name in ("peak", "endpoint_seconds", "listings_per_review", "call_seconds"):
            if not (getattr(args, name) >= (1 if name == "peak" else 0)) or not math.isfinite(getattr(args, name)):
                raise TableError(f"--{name.replace('_', '-')}: {getattr(args, name)} is out of range")
        prices, (quotas_raw, quotas), throughput = load_prices(), load_quotas(), load_throughput()
        assumptions = Assumptions(mix, args.peak, args.endpoint_seconds, args.listings_per_review, args.call_seconds)
        if args.recommend:
            measured = read_ledger(args.ledger or LEDGER)
            print("\n".join([*sizing_lines(recommendations(measured, assumptions, throughput), throughput), "",
                             *mapping_yaml(throughput)]))
            return 0
        measured = read_ledger(args.ledger) if args.ledger else measure(
            {"small": SMALL, "large": LARGE}, progress=lambda m: print(m, flush=True))
        sized = recommendations(measured, assumptions, throughput)
    except TableError as error:
        print(f"capacity: {error}", file=sys.stderr)
        return 2
    sections: list[tuple[str, list[str], dict[str, Any]]] = [
        ("1. AWS calls per item, by path, measured on the local stack", ledger_lines(measured), {})]
    lines, costs = cost_lines(measured, prices, assumptions)
    sections.append((f"2. A month ({DAYS_PER_MONTH} days) of items, by service (USD, {prices.region} list prices)", lines, costs))
    lines, quota_report = quota_lines(measured, [*quotas, *stack_limits()], assumptions)
    sections.append(("3. Quotas", lines, quota_report))
    sections.append(("4. Stack parameters for each scale (template.yaml; its defaults are sized for "
                     f"{volume(DEFAULT_SCALE)} items/day)", sizing_lines(sized, throughput),
                     {"recommended": {str(r.scale): r.values for r in sized}}))
    sections.append(("Sources", sources_lines(prices, quotas_raw), {}))
    for title, lines, _ in sections:
        print(f"\n{title}\n" + "\n".join(lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"ledger": measured.to_json(), "assumptions": asdict(assumptions), "costs": costs,
                                    "quotas": quota_report, **sections[3][2]}, indent=1, default=str), encoding="utf-8")
    print(f"\nwritten: {args.out}")
    if args.record_ledger:
        record_ledger(measured)
        print(f"recorded: {LEDGER}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
