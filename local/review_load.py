"""Reviewers working the review queue, simulated: how many items breach their first-review target
(the policy's review_sla) when the console lists them by breach risk, and when it lists them
oldest first, for the same arrivals and the same reviewers.

    python -m local.review_load [--rate 0.5] [--reviewers 3] [--review-minutes 4] [--seed 7]

`make soak` runs it on the items its run sent to review (their real decision records); alone, it
takes the labelled sets' items decided by their gold answers. The clock is simulated: items
arrive as a Poisson process whose rate keeps the reviewers USUAL_LOAD busy at their usual pace;
each review takes an exponential time of mean `review_minutes / rate` (rate 0.5: reviewers at
half their usual pace). A free reviewer takes the first item of the list, ordered by
`decision_router.review.console.pending_list` (the console's own order) or oldest first. An item
breaches when its review starts after its target.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Sequence, TextIO

from decision_router.domain.judging import build_record, rule_entry
from decision_router.domain.policies import Policy, load_policy
from decision_router.domain.records import DecisionRecord
from decision_router.domain.rules import RuleHit
from decision_router.items import parse_item
from decision_router.review.completion import PendingReview
from decision_router.review.console import PendingSummary, pending_list, pending_summary
from local.cloudformation import REPO_ROOT

#: Share of the reviewers' usual capacity the arrivals take (at half the pace: 0.9 of it).
USUAL_LOAD = 0.45
START = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)
ORDERS: dict[str, Callable[[Sequence[PendingSummary]], list[PendingSummary]]] = {
    "by SLA": lambda summaries: pending_list(summaries),
    "oldest first": lambda summaries: sorted(summaries, key=lambda s: (-(s.age_seconds or 0.0), s.execution_name)),
}


@dataclass
class Tally:
    """One ordering's run: items and breaches per priority, and the longest wait per priority."""

    items: Counter[str] = field(default_factory=Counter)
    breached: Counter[str] = field(default_factory=Counter)
    longest_wait_minutes: dict[str, float] = field(default_factory=dict)

    @property
    def total_breached(self) -> int:
        return sum(self.breached.values())


def simulate(records: Sequence[DecisionRecord], order: str, *, reviewers: int = 3, review_minutes: float = 4.0,
             rate: float = 0.5, seed: int = 7) -> Tally:
    """Every record reviewed once by `reviewers` working at `rate` of their usual pace, the list kept in `order`."""
    policies = {name: load_policy(name) for name in {r.policy.name for r in records}}
    rng = random.Random(seed)  # the same arrivals and review times for every order
    gap = review_minutes / reviewers / USUAL_LOAD
    arrivals, moment = [], START
    for index, record in enumerate(records):
        moment += timedelta(minutes=rng.expovariate(1.0 / gap))
        arrivals.append(PendingReview(task_token="-", execution_name=f"review-{index:05d}", record=record,
                                      requested_at=moment.isoformat().replace("+00:00", "Z")))
    durations = [timedelta(minutes=rng.expovariate(rate / review_minutes)) for _ in records]
    tally = Tally()
    waiting: list[PendingReview] = []
    free_at = [START] * reviewers  # a heap: when each reviewer is next free
    heapq.heapify(free_at)
    next_arrival = 0
    for done in range(len(records)):
        now = heapq.heappop(free_at)
        while next_arrival < len(arrivals) and (not waiting or _at(arrivals[next_arrival]) <= now):
            waiting.append(arrivals[next_arrival])
            now = max(now, _at(arrivals[next_arrival]))
            next_arrival += 1
        summaries = {s.execution_name: s for s in
                     (pending_summary(r, policies[r.record.policy.name], now) for r in waiting)}
        first = ORDERS[order](list(summaries.values()))[0]
        taken = next(r for r in waiting if r.execution_name == first.execution_name)
        waiting.remove(taken)
        priority = (first.sla.priority if first.sla else None) or "default"
        tally.items[priority] += 1
        if first.sla is not None and first.sla.time_left_seconds < 0:
            tally.breached[priority] += 1
        wait = (first.age_seconds or 0.0) / 60
        tally.longest_wait_minutes[priority] = max(wait, tally.longest_wait_minutes.get(priority, 0.0))
        heapq.heappush(free_at, now + durations[done])
    return tally


def _at(review: PendingReview) -> datetime:
    return datetime.fromisoformat((review.requested_at or "").replace("Z", "+00:00"))


def compare(records: Sequence[DecisionRecord], out: TextIO, **settings: float) -> dict[str, Tally]:
    """Both orders over the same arrivals, side by side; the last line is for scripts."""
    tallies = {order: simulate(records, order, **settings) for order in ORDERS}  # type: ignore[arg-type]
    priorities = sorted({p for t in tallies.values() for p in t.items})
    print(f"review SLA: {len(records)} reviews, {settings.get('reviewers', 3)} reviewer(s) at "
          f"{settings.get('rate', 0.5):.0%} of their usual pace ({settings.get('review_minutes', 4.0)} min a review "
          f"as usual; arrivals take {USUAL_LOAD:.0%} of the usual capacity)", file=out)
    print(f"  {'priority':<12}{'items':>6}" + "".join(f"{order + ' breached':>22}{'longest wait':>14}" for order in ORDERS),
          file=out)
    for priority in priorities:
        counts = "".join(f"{tallies[o].breached[priority]:>22}{tallies[o].longest_wait_minutes.get(priority, 0.0):>12.0f}m"
                         for o in ORDERS)
        print(f"  {priority:<12}{tallies['by SLA'].items[priority]:>6}{counts}", file=out)
    print("review sla: " + "; ".join(f"{order} breached {t.total_breached}" for order, t in tallies.items())
          + f"; P1 breached by SLA {tallies['by SLA'].breached['P1']}", file=out, flush=True)
    return tallies


def gold_records(seed: int = 7) -> list[DecisionRecord]:
    """The labelled sets' items as review records decided by their gold answers (for a run without the stack)."""
    records = []
    for name, path in (("support-ticket", "support-tickets.jsonl"), ("incident", "incidents.jsonl")):
        policy = load_policy(name)
        for line in (REPO_ROOT / "bench" / "data" / path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                records.append(_gold_record(policy, json.loads(line)))
    random.Random(seed).shuffle(records)
    return records


def _gold_record(policy: Policy, row: dict) -> DecisionRecord:
    """A review record of the labelled item whose suggestions are its gold answers (each held for
    review, as a doubtful answer is), built by the routing code."""
    gold = row["gold"]
    answers = gold if isinstance(gold, dict) else {policy.routing_question.id: gold}
    entries = [rule_entry(q, RuleHit("gold", q.id, answers[q.id])).model_copy(
        update={"passed": False, "reasons": ["the gold answer, held for review"]}) for q in policy.questions]
    return build_record(policy, parse_item(policy.item_kind, row["item"]), entries,
                        destinations={t: f"https://sqs.local/{t}" for t in policy.targets},
                        review_timeout_seconds=86_400, decided_at=START)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local.review_load", description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=0.5, help="reviewers' pace, a share of the usual (default 0.5)")
    parser.add_argument("--reviewers", type=int, default=3)
    parser.add_argument("--review-minutes", type=float, default=4.0, help="a review's usual minutes (default 4)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    tallies = compare(gold_records(args.seed), sys.stdout, reviewers=args.reviewers, review_minutes=args.review_minutes,
                      rate=args.rate, seed=args.seed)
    for problem in problems(tallies):
        print(f"PROBLEM {problem}")
    return 0 if not problems(tallies) else 1


def problems(tallies: dict[str, Tally]) -> list[str]:
    """What the ordering must never do: breach more often than oldest first, or breach a P1."""
    by_sla, oldest = tallies["by SLA"], tallies["oldest first"]
    found = []
    if by_sla.total_breached > oldest.total_breached:
        found.append(f"the SLA order breached {by_sla.total_breached} reviews, oldest first {oldest.total_breached}")
    if by_sla.breached["P1"]:
        found.append(f"the SLA order breached {by_sla.breached['P1']} P1 review(s)")
    return found


if __name__ == "__main__":
    sys.exit(main())
