"""The claim held under a lease, one rule for every store that hands work on once: a row is
claimed before the work (its holder's lease: the time by which the holder has finished or is
dead), marked finished after it, and handed back when the work could not be done.

Whoever finds a row decides with `verdict_on`: no row, take it; a lease that runs, wait until it runs
out; a lease that ran out (its holder died), take it over; a finished row, done; a row that says
its name was used and nothing was handed on, spent. A lease runs to its last second: it is taken
over only once `now` is past it.

`claim_lease` runs the rule over a store's two conditional writes: `place` (put the claim where no live
row is) and `take_over` (replace the claim read, only while its lease is still the one read), so of
the invocations that find the same lapsed claim exactly one takes it over. The stores
(adapters/deliveries.py, adapters/escalations.py, adapters/direct_routes.py) keep only those
writes, and the mark and the release, each conditional on the lease or owner being theirs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Literal

#: How many times `claim_lease` writes before giving up on a row other invocations keep changing.
CLAIM_ATTEMPTS = 3


@dataclass(frozen=True)
class Held:
    """A claim as found in its store: `lease_until` (epoch seconds) while its holder may still be
    working, None once the work is finished; `spent`: the name was used and nothing was handed on
    under it (it is never claimed again)."""

    lease_until: float | None
    spent: bool = False


@dataclass(frozen=True)
class Verdict:
    """What to do about a claim: `take` it (place it, or take a lapsed one over), `wait` until
    `until` (another invocation's lease), or nothing: `done` (finished) or `spent`."""

    action: Literal["take", "wait", "done", "spent"]
    until: float = 0.0


TAKE = Verdict("take")
DONE = Verdict("done")
SPENT = Verdict("spent")

#: What a store's `place` answers: "placed" (the claim is now this invocation's), "gone" (a row
#: stood in the way but had gone by the time it was read: place again), or the claim it found.
Placement = Held | Literal["placed", "gone"]


def verdict_on(found: Held | None, now: float) -> Verdict:
    """The rule: what an invocation that finds `found` (None: no live row) at `now` does."""
    if found is None:
        return TAKE
    if found.lease_until is not None:
        return TAKE if found.lease_until < now else Verdict("wait", until=found.lease_until)
    return SPENT if found.spent else DONE


def claim_lease(place: Callable[[], Placement], take_over: Callable[[Held], bool], clock: Callable[[], float],
          attempts: int = CLAIM_ATTEMPTS) -> Verdict:
    """Claim one row: TAKE once it is this invocation's; else the verdict on the claim that holds
    it. A row that keeps changing under every attempt (claims being made and released) answers
    `wait` until now: come back at once."""
    for _ in range(attempts):
        now = clock()
        found = place()
        if not isinstance(found, Held):
            if found == "placed":
                return TAKE
            continue  # gone between the write and the read: place again
        verdict = verdict_on(found, now)
        if verdict.action != "take":
            return verdict
        if take_over(found):
            return TAKE
    return Verdict("wait", until=clock())


class LeaseRows:
    """A store of claims kept as rows under keys, claimed by the rule: its two conditional writes,
    `_place` (put the row where no live row is) and `_take_over` (replace the row read, only while
    its lease is the one read), are the store's; `claim_key` runs `claim_lease` over them."""

    def now(self) -> int:
        return int(time.time())

    def _place(self, key: str, row: dict[str, Any]) -> Placement:
        raise NotImplementedError

    def _take_over(self, key: str, theirs: Held, row: dict[str, Any]) -> bool:
        raise NotImplementedError

    def claim_key(self, key: str, row_now: Callable[[int], dict[str, Any]]) -> Verdict:
        """Claim `key` with the row `row_now(now)` (each write its own `now`)."""
        return claim_lease(lambda: self._place(key, row_now(self.now())),
                           lambda theirs: self._take_over(key, theirs, row_now(self.now())), self.now)
