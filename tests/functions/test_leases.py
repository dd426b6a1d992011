"""The lease-claim rule (domain/leases.py): what an invocation that finds a claim does, and the
claim over a store's two conditional writes, with the races between them played out."""

from __future__ import annotations

from typing import Callable

import pytest

from decision_router.domain.leases import CLAIM_ATTEMPTS, DONE, SPENT, TAKE, Held, Placement, Verdict, claim_lease, verdict_on


@pytest.mark.parametrize(("found", "verdict"), [
    (None, TAKE),  # no live row
    (Held(lease_until=100.0), Verdict("wait", until=100.0)),  # its holder may still be working
    (Held(lease_until=None), DONE),
    (Held(lease_until=None, spent=True), SPENT),
])
def test_what_an_invocation_does_about_the_claim_it_finds(found, verdict):
    assert verdict_on(found, 99.0) == verdict


def test_a_lease_runs_to_its_last_second_and_is_taken_over_past_it():
    assert verdict_on(Held(lease_until=100.0), 100.0) == Verdict("wait", until=100.0)
    assert verdict_on(Held(lease_until=100.0), 100.5) == TAKE
    assert verdict_on(Held(lease_until=0.0), 1.0) == TAKE  # a claim handed back


def test_a_spent_mark_on_a_pending_claim_does_not_stop_its_lease():
    assert verdict_on(Held(lease_until=50.0, spent=True), 60.0) == TAKE


class Store:
    """One row's conditional writes, scripted: `rows` is what each `place` finds in turn."""

    def __init__(self, *found: Placement, take_over_wins: bool = True) -> None:
        self.found, self.take_over_wins = list(found), take_over_wins
        self.placed: list[Placement] = []
        self.taken_over: list[Held] = []

    def place(self) -> Placement:
        found = self.found.pop(0)
        self.placed.append(found)
        return found

    def take_over(self, theirs: Held) -> bool:
        self.taken_over.append(theirs)
        return self.take_over_wins


def run(store: Store, now: float = 10.0) -> Verdict:
    clock: Callable[[], float] = lambda: now  # noqa: E731 - a fixed clock
    return claim_lease(store.place, store.take_over, clock)


def test_a_free_row_is_placed_and_nothing_is_taken_over():
    store = Store("placed")
    assert run(store) == TAKE and store.taken_over == []


def test_a_running_lease_is_waited_for_and_a_finished_or_spent_row_is_left():
    assert run(Store(Held(lease_until=60.0))) == Verdict("wait", until=60.0)
    assert run(Store(Held(lease_until=None))) == DONE
    assert run(Store(Held(lease_until=None, spent=True))) == SPENT


def test_a_lapsed_lease_is_taken_over_by_the_writer_that_wins():
    lapsed = Held(lease_until=5.0)
    store = Store(lapsed)
    assert run(store) == TAKE and store.taken_over == [lapsed]


def test_the_loser_of_a_take_over_finds_the_winners_fresh_lease():
    store = Store(Held(lease_until=5.0), Held(lease_until=70.0), take_over_wins=False)
    assert run(store) == Verdict("wait", until=70.0)
    assert len(store.taken_over) == 1


def test_a_row_gone_between_the_write_and_the_read_is_placed_again():
    store = Store("gone", "placed")
    assert run(store) == TAKE and store.placed == ["gone", "placed"]


def test_a_row_that_keeps_changing_asks_to_come_back_at_once():
    store = Store(*["gone"] * CLAIM_ATTEMPTS)
    assert run(store, now=42.0) == Verdict("wait", until=42.0)
    assert len(store.placed) == CLAIM_ATTEMPTS
