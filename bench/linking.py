"""How well tickets find the outage they describe: the link rule (decision_router.domain.linking)
over the labelled ticket-incident pairs of events/linking/.

`pairs.jsonl`: one ticket against one incident open at the same time, `describes` true when the
ticket is about that outage (written in customers' words); the near misses are labelled false:
another service's outage open at the same time (`other-outage`), a ticket about the same product
that is not about the outage (`same-product`), and tickets about nothing open (`unrelated`).
`incidents.json`: each scenario's open incidents and the ticket policy's `service_aliases`.

Each ticket is linked by `link_ticket` over all of its scenario's open incidents, and again over
those the link index finds for it (`looked_up`: what the ticket intake reads; the two agree unless
the index misses one, domain/linking.py says when); a pair counts as linked when the ticket is
linked to that incident. The threshold is
chosen on the `fit` half (best F1; ties, which link the same fit tickets: the lowest such
threshold, so a new ticket scoring between the fit half's scores is not lost) and the links'
precision and recall are reported on the `test` half. `python -m bench.linking [--json PATH]`.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from decision_router.domain.linking import (
    THRESHOLD,
    OpenIncident,
    candidates,
    filing_keys,
    link_scores,
    link_ticket,
    lookup_keys,
)
from decision_router.items import Ticket

DATA = Path(__file__).resolve().parents[1] / "events" / "linking"


@dataclass(frozen=True)
class Case:
    """A ticket, the incidents open when it came in, the aliases, and which pairs it describes."""

    ticket: Ticket
    split: str
    incidents: tuple[OpenIncident, ...]
    aliases: dict[str, list[str]]
    describes: frozenset[str]


def load(folder: Path = DATA) -> list[Case]:
    scenarios = json.loads((folder / "incidents.json").read_text())
    pairs: dict[str, list[dict]] = defaultdict(list)
    for line in (folder / "pairs.jsonl").read_text().splitlines():
        if line.strip():
            pair = json.loads(line)
            pairs[pair["ticket_id"]].append(pair)
    cases = []
    for ticket_id, rows in sorted(pairs.items()):
        first = rows[0]
        scenario = scenarios[first["scenario"]]
        opened = datetime.fromisoformat(scenario["at"].replace("Z", "+00:00"))
        incidents = tuple(OpenIncident(key=f"{first['scenario']}:{i['incident_id']}", opened_at=opened, **i)
                          for i in scenario["incidents"])
        ticket = Ticket(ticket_id=ticket_id, subject=first["subject"], body=first["body"], channel="email",
                        customer={"id": "C-1", "tier": "pro"}, created_at=opened + timedelta(minutes=5))
        cases.append(Case(ticket, first["split"], incidents, scenario.get("aliases", {}),
                          frozenset(r["incident_id"] for r in rows if r["describes"])))
    return cases


@dataclass(frozen=True)
class Figures:
    threshold: float
    pairs: int
    described: int
    linked: int
    right: int

    @property
    def precision(self) -> float:
        return self.right / self.linked if self.linked else 1.0

    @property
    def recall(self) -> float:
        return self.right / self.described if self.described else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def looked_up(case: Case) -> tuple[OpenIncident, ...]:
    """The case's open incidents the ticket intake reads through the link index: each filed under
    its keys (`filing_keys`), those filed under the ticket's `lookup_keys` chosen by `candidates`."""
    filed: dict[str, dict[str, datetime]] = defaultdict(dict)
    for incident in case.incidents:
        for key in filing_keys(incident.service, incident.title, incident.description):
            filed[key][incident.key] = incident.opened_at
    by_key = {incident.key: incident for incident in case.incidents}
    keys = lookup_keys(case.ticket, case.aliases)
    return tuple(by_key[key] for key in candidates(case.ticket, {key: filed[key] for key in keys if key in filed}))


def measure(cases: list[Case], threshold: float, *, lookup: bool = False) -> Figures:
    """The links' figures at `threshold`, each ticket against every open incident of its case, or
    (`lookup`) against those the link index finds for it, as the ticket intake reads them."""
    linked = right = pairs = described = 0
    for case in cases:
        incidents = looked_up(case) if lookup else case.incidents
        link = link_ticket(case.ticket, incidents, case.aliases, threshold=threshold)
        pairs += len(case.incidents)
        described += len(case.describes)
        if link is not None:
            linked += 1
            right += link.incident_id in case.describes
    return Figures(threshold, pairs, described, linked, right)


def choose(cases: list[Case]) -> Figures:
    """The threshold of the best F1 on `cases` among the scores they reach (ties: the lowest)."""
    candidates = sorted({s.value for case in cases for s in link_scores(case.ticket, case.incidents, case.aliases)
                         if s.value > 0})
    best = max((measure(cases, t) for t in candidates), key=lambda f: (round(f.f1, 6), -f.threshold))
    return best


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    cases = load()
    fit = [c for c in cases if c.split == "fit"]
    test = [c for c in cases if c.split == "test"]
    chosen = choose(fit)
    shipped = measure(test, THRESHOLD)
    named_only = measure(test, 1.0)  # a score never reaches 1: the old rule (the service's id named) alone
    lookup = {half: measure(cases, THRESHOLD, lookup=True) for half, cases in (("fit", fit), ("test", test))}
    out = {"fit": vars(chosen) | {"precision": chosen.precision, "recall": chosen.recall},
           "test": vars(shipped) | {"precision": shipped.precision, "recall": shipped.recall},
           "test_named_only": vars(named_only) | {"precision": named_only.precision, "recall": named_only.recall},
           "shipped_threshold": THRESHOLD,
           **{f"{half}_lookup": vars(f) | {"precision": f.precision, "recall": f.recall} for half, f in lookup.items()}}
    print(f"tickets: {len(fit)} fit, {len(test)} test; pairs: {chosen.pairs} fit, {shipped.pairs} test")
    print(f"fit:  best F1 at threshold {chosen.threshold:.2f}: precision {chosen.precision:.3f}, "
          f"recall {chosen.recall:.3f} ({chosen.right}/{chosen.linked} links right, {chosen.described} described)")
    print(f"test: threshold {THRESHOLD:.2f} (shipped): precision {shipped.precision:.3f}, recall {shipped.recall:.3f} "
          f"({shipped.right}/{shipped.linked} links right, {shipped.described} described)")
    print(f"test: the service's id named only: {named_only.linked} links, recall {named_only.recall:.3f}")
    for half, f in lookup.items():
        print(f"{half}: through the link index (the incidents filed under the ticket's names and words): "
              f"precision {f.precision:.3f}, recall {f.recall:.3f} ({f.right}/{f.linked} links right)")
    if abs(chosen.threshold - THRESHOLD) > 1e-9:
        print(f"NOTE: the fit half chooses {chosen.threshold:.2f}, not the shipped THRESHOLD {THRESHOLD:.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
