"""`make soak`: volume through the whole local pipeline while faults happen, then a ledger.

    python -m local.soak [--n 2000] [--faults 0.1] [--seed 7] [--stub-share 0.8] [--report out.jsonl]

1. Builds N seeded inputs: tickets and incidents of the labelled sets (bench/data/*.jsonl, each
   under a fresh id), raw events of every source in events/sources.jsonl (fresh event ids and
   resources), duplicates (the very same line again: an SQS message or an EventBridge event id
   delivered twice) and invalid lines (a ticket without its body, an incident with an unknown
   severity, a line that is not JSON).
2. Runs them through `local.pipeline.LocalPipeline` (real decision container on the embedded model,
   moto server, the real handlers and workflow; CONCURRENCY execution environments per intake)
   with faults injected, each at FAULTS of its calls:
   - the endpoint, through `local.faults.FaultProxy` on loopback in front of the container: 503 busy with
     Retry-After, no answer within the read timeout, a slow answer; and the container is
     restarted once, when 40 % of the expected calls are through (503 while it loads);
   - AWS calls (`local.faults.AwsFaults`, at botocore's HTTP send: below the SDK's retries, as a throttled
     request reaches a Lambda function's boto3 client): StartExecution throttled
     (ThrottlingException), DynamoDB throttled (ProvisionedThroughputExceededException) on the
     idempotency table and on the audit table (the workflow's own PutItem, whose Retry then
     applies); a twentieth of the throttles last OUTAGE_SECONDS for that API, past the SDK's
     retries; and an invocation (FAULTS of them) that dies right after it started an
     execution (its whole batch, or event, is delivered again);
   - a review answered twice (the second answer must be refused, the item delivered once).
   Lambda's retries come sooner here (`REDELIVERY_SECONDS`, `ASYNC_RETRY_SECONDS`), the
   invocations keep the template's timeout.
   Faults are drawn per call from the seed and what the call is about (its item, its attempt),
   not from call order, so concurrent runs of one seed draw the same faults.
3. Reconciles a ledger from what the stack holds (team queues, escalation pages, review queue,
   DLQs with their reasons, audit table, executions): where every input ended. Exits 1 when an
   input is lost, delivered to team queues under two item keys (a second delivery under the same
   key is at-least-once delivery a consumer recognises: it is listed, not failed), or
   dead-lettered without a reason.

Volume on 2 cores: the embedded model takes ~0.5-1.5 s a decision, so with --stub-share S the proxy
answers that share of the endpoint calls itself by replaying the container's latest real answer
to the same question (the numbers of another item: for volume, not accuracy). The output says how
many calls each answered. `--load 2` is the overload check instead: every call real, and twice as
many execution environments as requests the container holds at once (in its sequences and its
queue; past that it answers 503 busy). The last line is for scripts:
    soak: 2000 inputs; routed 812, review 903, resolved 41, ignored 60, dead-lettered 184; lost 0; duplicated 0; 3.1 items/s
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import sys
import threading
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

from local.cloudformation import REPO_ROOT
from local.faults import READ_TIMEOUT_SECONDS, AwsFaults, FaultProxy
from local.items import classify
from local.outcomes import Outcome, report_line, write_report
from local.pipeline import LocalPipeline
from local.review_load import compare, problems
from local.settling import WAITING_FOR_REVIEW, proved

DATA = REPO_ROOT / "bench" / "data"
SOURCES = REPO_ROOT / "events" / "sources.jsonl"
LOG_DIR = REPO_ROOT / ".soak"
#: The identifiers in events/sources.jsonl that make one incident or ticket: suffixed per variant,
#: so the same shapes arrive as different alarms, resources, findings and tickets.
SOURCE_IDENTIFIERS = ("checkout-api-5xx-rate", "orders-queue-depth", "orders-primary",
                      "8ec6a1f0d2b34c5e9f7a6b5c4d3e2f10", "b7c9d1e3-2f4a-11f1-8b6c-0a1b2c3d4e5f",
                      "T-2001", "48213", "SUP-1187")
#: Share of the inputs by kind (the rest are labelled tickets and incidents).
RAW_SHARE, DUPLICATE_SHARE, INVALID_SHARE = 0.15, 0.05, 0.05
#: Lambda's retries, sooner: a failed ticket is visible again after REDELIVERY_SECONDS (the queue's
#: VisibilityTimeout is 1,800 s), a failed event retried after ASYNC_RETRY_SECONDS (Lambda waits
#: about 1 and 2 minutes). The invocation keeps the template's timeout (300 s: each batch's
#: endpoint budget), so a retry may meet the idempotency lock the failed invocation left (it holds
#: until that invocation's deadline), as an incident's retry can in AWS.
REDELIVERY_SECONDS = 35
ASYNC_RETRY_SECONDS = (6.0, 12.0)
#: When the container is restarted: after this share of the expected endpoint calls.
RESTART_AT = 0.4
#: The overload check: the container holds this many requests at once, in sequences and queue.
LOAD_PARALLEL_SEQUENCES, LOAD_QUEUE_SIZE = 2, 2
#: Execution environments per intake function (Lambda scales a function out as items arrive).
CONCURRENCY = 8


# ----------------------------------------------------------------------------------- inputs
def build_inputs(n: int, rng: random.Random) -> list[str]:
    """N input lines, seeded: labelled items under fresh ids, raw source events, duplicates, invalid."""
    labelled = [json.loads(line)["item"] for path in ("support-tickets.jsonl", "incidents.jsonl")
                for line in (DATA / path).read_text(encoding="utf-8").splitlines() if line.strip()]
    raw = [line for line in SOURCES.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines: list[str] = []
    for index in range(n):
        roll = rng.random()
        if lines and roll < DUPLICATE_SHARE:
            lines.append(rng.choice(lines))  # the same message, or the same event id, again
        elif roll < DUPLICATE_SHARE + INVALID_SHARE:
            lines.append(_invalid(rng.choice(labelled), index, rng))
        elif roll < DUPLICATE_SHARE + INVALID_SHARE + RAW_SHARE:
            lines.append(_raw_variant(rng.choice(raw), rng))
        else:
            item = dict(rng.choice(labelled))
            field = "ticket_id" if "ticket_id" in item else "incident_id"
            item[field] = f"SOAK-{index:05d}-{item[field]}"
            lines.append(json.dumps(item))
    return lines


def _invalid(item: dict[str, Any], index: int, rng: random.Random) -> str:
    choice = rng.randrange(3)
    if choice == 0:
        return "{not json " + str(index)
    item = dict(item)
    if "ticket_id" in item:
        item["ticket_id"] = f"SOAK-BAD-{index:05d}"
        item.pop("body", None)
    else:
        item["incident_id"] = f"SOAK-BAD-{index:05d}"
        item["severity"] = "sev9"
    return json.dumps(item)


def _raw_variant(line: str, rng: random.Random) -> str:
    """The source's event under a fresh event id, about one of ten resources (so an OK sometimes
    finds the ALARM it resolves)."""
    variant = rng.randrange(10)
    for identifier in SOURCE_IDENTIFIERS:
        line = line.replace(identifier, f"{identifier}-v{variant}")
    data = json.loads(line)
    if "id" in data and "detail-type" in data:
        data["id"] = str(uuid.UUID(int=rng.getrandbits(128)))
    elif data.get("Type") == "Notification":
        data["MessageId"] = str(uuid.UUID(int=rng.getrandbits(128)))
    return json.dumps(data)

# ----------------------------------------------------------------------------------- ledger
LEDGER_ORDER = ("routed", "review", "resolved", "ignored", "dead-lettered")


def ledger_place(line: dict[str, Any]) -> str:
    """The last line's column an input's report line falls in."""
    kind = line["outcome"]
    if kind == "dead_lettered":
        return "dead-lettered"
    if kind in ("routed", "review", "resolved"):
        return kind
    return "ignored"  # duplicate (routed once by its first line), updated, ignored, rejected, or held by a noise
    # control (grouped, flapping, suppressed): each with its reason


def logged_failures(log_path: Path) -> dict[str, str]:
    """The last reason the ticket intake logged per SQS message id: what a ticket the queue's
    redrive policy moved to the DLQ failed of (the queue moves it without one; CloudWatch Logs has it)."""
    reasons = {}
    for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        if '"message_id"' in line and '"reason"' in line:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                reasons[entry["message_id"]] = str(entry["reason"])
    return reasons


def reconcile(pipeline: LocalPipeline, outcomes: list[Outcome], log_path: Path | None = None) -> dict[str, Any]:
    """Where every input ended, and what is wrong: lost, delivered under two item keys,
    dead-lettered without a reason."""
    logged = logged_failures(log_path) if log_path else {}
    for outcome in outcomes:
        # The demo's stand-in when the DLQ message has no reason attribute: look in the function's log.
        if outcome.problem and outcome.problem.endswith("(see .demo/lambda.log)"):
            reason = logged.get(outcome.message_id or "")
            outcome.problem = f"intake failed, moved to the DLQ by the queue's redrive policy: {reason}" if reason else ""
    team_queues = {pipeline.queue_name(url) for url in pipeline.destinations.values()}
    lines = [report_line(o) for o in outcomes]
    lost, duplicated, no_reason = [], [], []
    delivered_by_item: dict[str, list[str]] = {}
    for outcome, line in zip(outcomes, lines):
        kind = line["outcome"]
        teams = [q for q in outcome.queues if q in team_queues]
        if kind == "routed" and not (teams or outcome.escalated):
            lost.append(f"{outcome.item.source}: routed, but in no team queue and not escalated")
        elif kind == "review" and WAITING_FOR_REVIEW not in outcome.queues and not teams and not outcome.audit:
            lost.append(f"{outcome.item.source}: sent to review, but neither waiting for its reviewer nor audited")
        elif kind == "rejected" and not outcome.item.rejected:
            lost.append(f"{outcome.item.source}: sent, then found nowhere ({outcome.reason or 'no reason'})")
        elif kind == "dead_lettered" and not (line["reason"] or "").strip():
            no_reason.append(f"{outcome.item.source}: dead-lettered without a reason")
        if outcome.item.item_id and not outcome.duplicate_of and outcome.delivered_by:
            delivered_by_item.setdefault(outcome.item.item_id, []).extend(outcome.delivered_by)
    # At least once, as SQS: a second delivery under the same item key is one a consumer recognises
    # (the execution's name carries the key; -r2 … are later attempts of the same key).
    duplicated, redelivered = [], []
    for item_id, names in delivered_by_item.items():
        keys = {re.sub(r"-r\d+$", "", name) for name in names}
        if len(keys) > 1:
            duplicated.append(f"{item_id}: delivered {len(names)}x to team queues under {len(keys)} item keys")
        elif len(names) > 1:
            redelivered.append(f"{item_id}: delivered {len(names)}x under one item key ({', '.join(names)})")
    unaudited = [f"{o.item.item_id}: {o.audit_missing}" for o in outcomes if o.audit_missing]
    return {"lines": lines, "totals": Counter(ledger_place(line) for line in lines),
            "outcomes": Counter(line["outcome"] for line in lines), "lost": lost, "duplicated": duplicated,
            "redelivered": redelivered, "unaudited": unaudited, "no_reason": no_reason}


def answer_reviews_twice(pipeline: LocalPipeline, outcomes: list[Outcome], rate: float, rng: random.Random) -> Counter[str]:
    """Complete a share of the pending reviews, then send the same answer again: the second one
    must be refused (the task token is spent) and the item delivered once."""
    counts: Counter[str] = Counter()
    pending = [o for o in outcomes if o.item.item_id in pipeline.pending_reviews and o.status == "RUNNING"
               and not o.duplicate_of]
    for outcome in pending:
        if rng.random() >= rate:
            continue
        review = pipeline.pending_reviews[outcome.item.item_id]
        answer = pipeline.complete_review(outcome)
        counts["answered"] += 1
        try:
            pipeline.reviews.invoke(proved({"task_token": review.task_token,
                                            "execution_name": review.execution_name, "answers": answer["answers"],
                                            "note": "the same review answered again (soak fault)"}, pipeline.reviews.name))
            counts["second answer accepted"] += 1
        except Exception:  # noqa: BLE001 - what must happen: the spent token is refused
            counts["second answer refused"] += 1
    return counts


# ----------------------------------------------------------------------------------- run
@dataclass
class _Routed:
    """What a soak's routing left behind for its summary."""

    outcomes: list[Outcome]
    reviews: Counter[str]
    seconds: float
    ledger: dict[str, Any]
    audited: int
    endpoint_calls: dict[str, int]
    aws_faults: dict[str, int]
    restarts: list[float]


class _ContainerKeeper:
    """Restarts the decision container once when asked (by the fault proxy, partway through the
    run), then lives as long as the run: the kernel stops a child when the thread that started it
    ends (PR_SET_PDEATHSIG)."""

    def __init__(self, log_dir: Path, progress: Callable[[str], None]):
        self.log_dir, self.progress = log_dir, progress
        self.restart_now, self.finished = threading.Event(), threading.Event()
        self.restarts: list[float] = []

    def start(self, container: Any, proxy: FaultProxy) -> None:
        threading.Thread(target=self._keep, args=(container, proxy), name="container-keeper", daemon=True).start()

    def _keep(self, container: Any, proxy: FaultProxy) -> None:
        self.restart_now.wait()
        if self.finished.is_set():
            return
        self.progress("restarting the decision container (its log: decision-server.log, then decision-server-2.log)")
        proxy.down.set()
        stopping = time.monotonic()
        container.stop()
        container.log_path = self.log_dir / "decision-server-2.log"
        container.start().wait_ready()
        proxy.down.clear()
        self.restarts.append(time.monotonic() - stopping)
        self.progress(f"the decision container answers again, {self.restarts[-1]:.1f}s after it was stopped")
        self.finished.wait()


def run_soak(n: int, faults: float, seed: int, stub_share: float, out: TextIO,
             report: Path | None = None, log_dir: Path = LOG_DIR, *, concurrency: int = CONCURRENCY,
             load: float | None = None, restart: bool = True, review_rate: float = 0.5, reviewers: int = 3) -> int:
    """`load`: the overload check (every call real, `load` times the requests the container holds);
    `review_rate`, `reviewers`: the reviewers working the run's reviews afterwards (local/review_load.py)."""
    began = time.monotonic()

    def progress(message: str) -> None:
        print(f"[{time.monotonic() - began:6.1f}s] {message}", file=out, flush=True)

    settings: dict[str, str] = {}
    if load:
        settings = {"DECISION_PARALLEL_SEQUENCES": str(LOAD_PARALLEL_SEQUENCES), "DECISION_QUEUE_SIZE": str(LOAD_QUEUE_SIZE)}
        concurrency, stub_share = max(1, round(load * (LOAD_PARALLEL_SEQUENCES + LOAD_QUEUE_SIZE))), 0.0
    rng = random.Random(seed)
    texts = build_inputs(n, rng)
    items = [classify(f"soak:{number}", text, number) for number, text in enumerate(texts, start=1)]
    log_dir.mkdir(parents=True, exist_ok=True)
    keeper = _ContainerKeeper(log_dir, progress)
    routed = _route(items, faults, seed, stub_share, settings, concurrency, keeper, began=began,
                    load=load, restart=restart)
    if report:
        write_report(report, routed.outcomes)
    _print_ledger(routed, log_dir, out)
    print(f"{routed.seconds:.1f}s routing, {time.monotonic() - began:.1f}s wall; "
          f"{_model_decisions(routed.outcomes) / routed.seconds:.2f} model decisions/s", file=out)
    sla_problems = _review_sla_problems(routed.outcomes, out, reviewers=reviewers, rate=review_rate, seed=seed)
    ledger, reviews = routed.ledger, routed.reviews
    totals = ledger["totals"]
    print(f"soak: {n} inputs; " + ", ".join(f"{place} {totals[place]}" for place in LEDGER_ORDER)
          + f"; lost {len(ledger['lost'])}; duplicated {len(ledger['duplicated'])}; {n / routed.seconds:.1f} items/s",
          file=out, flush=True)
    failed = (ledger["lost"] or ledger["duplicated"] or ledger["no_reason"] or reviews["second answer accepted"]
              or sla_problems)
    return 1 if failed else 0


def _route(items: list[Any], faults: float, seed: int, stub_share: float, settings: dict[str, str],
           concurrency: int, keeper: _ContainerKeeper, *, began: float, load: float | None, restart: bool) -> _Routed:
    """The container, moto and the pipeline started with their faults; the items routed, their
    reviews answered twice, and the ledger reconciled from what the run logged."""
    from local.services import DecisionContainer, MotoServer, local_aws_environ, patched_environ

    n, log_dir, progress = len(items), keeper.log_dir, keeper.progress
    with ExitStack() as cleanup:
        cleanup.callback(keeper.restart_now.set)  # last, after the container stopped: the keeper may end
        cleanup.callback(keeper.finished.set)
        container = cleanup.enter_context(DecisionContainer(log_dir / "decision-server.log", settings=settings))
        moto = cleanup.enter_context(MotoServer())
        restart_after = (max(1, int(n * 0.8 * RESTART_AT)), keeper.restart_now.set) if restart and faults > 0 else None
        proxy = FaultProxy(container.url, rate=faults, stub_share=stub_share, seed=seed + 1, restart=restart_after)
        keeper.start(container, proxy)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        cleanup.callback(proxy.shutdown)
        cleanup.enter_context(patched_environ(local_aws_environ(moto, proxy.url)))
        lambda_log = cleanup.enter_context(open(log_dir / "lambda.log", "w", encoding="utf-8"))
        pipeline = cleanup.enter_context(LocalPipeline(log=lambda_log, concurrency=concurrency))
        aws = _aws_faults(pipeline, faults, seed)
        loaded = container.wait_ready()
        progress(f"container ready in {loaded:.1f}s; {n} inputs, faults {faults:.0%} of calls each, seed {seed}, "
                 f"stub share {stub_share:.0%} of endpoint calls, {concurrency} execution environment(s) per intake"
                 + (f"; load {load:g}x: the container holds {LOAD_PARALLEL_SEQUENCES} sequences + {LOAD_QUEUE_SIZE} "
                    "queued requests" if load else ""))
        started = time.monotonic()
        steps = cleanup.enter_context(open(log_dir / "progress.log", "w", encoding="utf-8"))

        def step(message: str) -> None:  # every batch and event, for a look afterwards
            print(f"[{time.monotonic() - began:7.1f}s] {message}", file=steps, flush=True)

        progress(f"routing; each batch and event in {log_dir / 'progress.log'}")
        with aws.installed():
            outcomes = pipeline.run(items, step, timeout=max(300.0, n * 0.5), redelivery_seconds=REDELIVERY_SECONDS,
                                    retry_delays=ASYNC_RETRY_SECONDS)
        reviews = answer_reviews_twice(pipeline, outcomes, faults, random.Random(seed + 3))
        seconds = time.monotonic() - started
        lambda_log.flush()
        ledger = reconcile(pipeline, outcomes, log_dir / "lambda.log")
        audited = len(pipeline.export_audit(log_dir / "audit.jsonl"))  # what make replay reads afterwards
    return _Routed(outcomes, reviews, seconds, ledger, audited, proxy.counts, aws.counts, keeper.restarts)


def _aws_faults(pipeline: LocalPipeline, faults: float, seed: int) -> AwsFaults:
    """The AWS faults over every function of the pipeline (the idempotency and audit tables named),
    each function's endpoint read timeout shortened to the soak's."""
    aws = AwsFaults(faults, seed + 2, {pipeline.tickets.env["IDEMPOTENCY_TABLE_NAME"]: "idempotency",
                                       pipeline.audit_table: "audit"})
    for function in pipeline.ticket_pool.functions + pipeline.incident_pool.functions + [pipeline.webhooks]:
        function.env["ENDPOINT_READ_TIMEOUT_SECONDS"] = str(READ_TIMEOUT_SECONDS)
        aws.wrap(function)
    return aws


def _model_decisions(outcomes: list[Outcome]) -> int:
    return sum(1 for o in outcomes if o.record for d in o.record.decisions if d.source == "model")


def _print_ledger(routed: _Routed, log_dir: Path, out: TextIO) -> None:
    """What the run called and injected, and what became of every input (each problem named)."""
    ledger, reviews = routed.ledger, routed.reviews
    print(f"audit: {routed.audited} row(s) in {log_dir / 'audit.jsonl'} (make replay POLICY=candidate.json)", file=out)
    print(f"endpoint calls: {dict(sorted(routed.endpoint_calls.items()))}", file=out)
    print("  (real: the decision container on the embedded model; stub: its latest real answer to the same question, "
          "replayed; busy/timeout/slow: injected; container down: during its restart)", file=out)
    if routed.restarts:
        print(f"container restarted once: no answers for {routed.restarts[0]:.1f}s", file=out)
    print(f"AWS faults injected: {dict(sorted(routed.aws_faults.items()))}", file=out)
    print(f"reviews answered twice: {dict(sorted(reviews.items()))}", file=out)
    print(f"outcomes: {dict(sorted(ledger['outcomes'].items()))}", file=out)
    for problem in ledger["lost"] + ledger["duplicated"] + ledger["no_reason"]:
        print(f"PROBLEM {problem}", file=out)
    for note in ledger["redelivered"]:
        print(f"redelivered {note}", file=out)
    for note in ledger["unaudited"]:
        print(f"routed, audit row in the workflow DLQ (make redrive DLQ=workflow writes it): {note}", file=out)
    if reviews["second answer accepted"]:
        print(f"PROBLEM {reviews['second answer accepted']} second review answer(s) accepted", file=out)


def _review_sla_problems(outcomes: list[Outcome], out: TextIO, *, reviewers: int, rate: float, seed: int) -> list[str]:
    """The run's reviews, worked by reviewers at `rate` of their pace: by SLA and oldest first
    (each problem printed). Once per item: a duplicate input line carries the record of the
    execution it joined."""
    in_review = list({o.record.item_key: o.record for o in outcomes
                      if o.record is not None and o.record.route == "review"}.values())
    sla_problems = problems(compare(in_review, out, reviewers=reviewers, rate=rate, seed=seed)) if in_review else []
    for problem in sla_problems:
        print(f"PROBLEM {problem}", file=out)
    return sla_problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="inputs (default 2000)")
    parser.add_argument("--faults", type=float, default=0.1, help="rate of each fault, per call (default 0.1)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--stub-share", type=float, default=0.8,
                        help="share of the endpoint calls answered by replaying a real answer (default 0.8)")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY,
                        help=f"execution environments per intake function (default {CONCURRENCY})")
    parser.add_argument("--load", type=float, help="the overload check: every call real, this many times the "
                        "requests the container holds at once (e.g. 2)")
    parser.add_argument("--no-restart", action="store_true", help="do not restart the container mid-run "
                        "(with --faults 0 it is not restarted either)")
    parser.add_argument("--review-rate", type=float, default=0.5, help="the reviewers' pace working the run's "
                        "reviews afterwards, a share of the usual (default 0.5: half; local/review_load.py)")
    parser.add_argument("--reviewers", type=int, default=3, help="reviewers working the run's reviews (default 3)")
    parser.add_argument("--report", type=Path, help="one JSON line per input: what became of it")
    parser.add_argument("--log-dir", type=Path, default=LOG_DIR)
    args = parser.parse_args(argv)
    return run_soak(args.n, args.faults, args.seed, args.stub_share, sys.stdout, args.report, args.log_dir,
                    concurrency=args.concurrency, load=args.load, restart=not args.no_restart,
                    review_rate=args.review_rate, reviewers=args.reviewers)


if __name__ == "__main__":
    sys.exit(main())
