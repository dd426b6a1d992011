"""The rules of the open incidents (domain/open_incidents.py) over a scripted store: what a claim
whose put did not hold does, and how a group is joined and left when a concurrent writer wins.
(The stores' own semantics, which write holds, are held to DynamoDB by the contract tests in
tests/fakes/.)"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

import pytest

from decision_router.domain import open_incidents as rules
from decision_router.domain.linking import MAX_DESCRIPTION, MAX_TITLE, filing_keys
from decision_router.domain.ports.incidents import GroupRow, IncidentRow, NewGroup, Opening

KEY = "arn:aws:cloudwatch:us-east-1:123456789012:alarm:checkout-5xx"
T0, T1 = "2026-11-29T12:00:00.000+00:00", "2026-11-29T12:01:00.000+00:00"


def incident(status: str, opened_by: str, routed: bool = False) -> IncidentRow:
    return IncidentRow(incident_key=KEY, status=status, opened_by=opened_by, routed=routed)


class ScriptedClaims:
    """A store whose puts, reads and touches answer in the order given; every call is kept."""

    def __init__(self, puts: Sequence[bool], rows: Sequence[IncidentRow | None] = (), touches: Sequence[bool] = ()):
        self.puts, self.rows, self.touches = deque(puts), deque(rows), deque(touches)
        self.calls: list[str] = []

    def put_opening(self, row: Opening) -> bool:
        self.calls.append("put")
        return self.puts.popleft()

    def get(self, key: str) -> IncidentRow | None:
        self.calls.append("get")
        return self.rows.popleft()

    def touch(self, key: str, delivery: str) -> bool:
        self.calls.append("touch")
        return self.touches.popleft()


def claim(store: ScriptedClaims, delivery: str = "d1") -> str:
    return rules.claim(store, rules.opening(KEY, delivery, incident_id="INC-1", source="cloudwatch", opened_at=T0),
                       delivery)


def test_a_put_that_holds_opens_the_incident():
    store = ScriptedClaims([True])
    assert claim(store) == "new" and store.calls == ["put"]


@pytest.mark.parametrize("row, answer", [
    (incident("open", "d1"), "retry"),  # its routing did not finish: route it again
    (incident("open", "d1", routed=True), "duplicate"),
    (incident("resolved", "d1", routed=True), "duplicate"),  # a late copy does not reopen it
    (incident("resolved", "d1"), "duplicate"),  # resolved before its routing finished
])
def test_the_opening_delivery_again_is_retried_until_routed_then_a_duplicate(row, answer):
    store = ScriptedClaims([False], [row])
    assert claim(store) == answer and store.calls == ["put", "get"]


@pytest.mark.parametrize("counted, answer", [(True, "update"), (False, "duplicate")])
def test_another_delivery_of_an_open_incident_is_counted_once(counted, answer):
    store = ScriptedClaims([False], [incident("open", "d1")], [counted])
    assert claim(store, "d2") == answer and store.calls == ["put", "get", "touch"]


def test_a_row_removed_or_resolved_meanwhile_is_claimed_again():
    store = ScriptedClaims([False, False, True], [None, incident("resolved", "d0")])
    assert claim(store) == "new" and store.calls == ["put", "get", "put", "get", "put"]


def test_a_row_that_keeps_changing_raises_for_a_retry_after_max_races():
    store = ScriptedClaims([False] * rules.MAX_RACES, [None] * rules.MAX_RACES)
    with pytest.raises(rules.StoreRaced, match="kept changing"):
        claim(store)
    assert store.calls.count("put") == rules.MAX_RACES


def test_an_opening_keeps_the_service_time_and_bounded_text_only_together():
    title, description = "  Checkout 5xx  " + "x" * MAX_TITLE, "customers cannot pay " * 100
    row = rules.opening(KEY, "d1", incident_id="INC-1", source="cloudwatch", opened_at=T0, opens=[T0],
                        service="checkout-api", reported_at=T1, title=title, description=description)
    assert (row.service, row.reported_at, row.opens) == ("checkout-api", T1, [T0])
    assert row.title is not None and len(row.title) <= MAX_TITLE and row.title.startswith("Checkout 5xx")
    assert row.description is not None and len(row.description) <= MAX_DESCRIPTION
    assert row.filed_under == filing_keys("checkout-api", title, description)
    alone = rules.opening(KEY, "d1", incident_id="INC-1", source="cloudwatch", opened_at=T0, service="checkout-api",
                          title="Checkout 5xx")
    assert (alone.service, alone.title, alone.filed_under, alone.opens) == (None, None, [], [])


def group_row(leader: str, members: list[str], open_members: list[str], status: str = "open") -> GroupRow:
    return GroupRow(incident_key="group#g#1", status=status, leader=leader, leader_incident_id=f"INC-{leader}",
                    members=members, open_members=open_members, leader_severity="sev3")


class ScriptedGroups:
    """A store of groups whose conditional writes answer in the order given; every call is kept."""

    def __init__(self, **answers: list[Any]):
        self.answers = {name: deque(values) for name, values in answers.items()}
        self.calls: list[str] = []

    def _next(self, name: str) -> Any:
        self.calls.append(name)
        return self.answers[name].popleft()

    def group(self, group_key: str) -> GroupRow | None:
        return self._next("group")

    def open_group(self, group: NewGroup) -> bool:
        return self._next("open_group")

    def add_to_group(self, group_key: str, member: str, *, at: str) -> GroupRow | None:
        return self._next("add_to_group")

    def drop_open_member(self, group_key: str, member: str) -> GroupRow | None:
        return self._next("drop_open_member")

    def close_group(self, group_key: str, delivery: str) -> GroupRow | None:
        return self._next("close_group")


def joining(member: str) -> NewGroup:
    return NewGroup(incident_key="group#g#1", leader=member, leader_incident_id=f"INC-{member}",
                    leader_severity="sev3", opened_at=T0, until=T1)


def test_the_first_member_opens_and_leads_the_group():
    store = ScriptedGroups(open_group=[True])
    joined = rules.join_group(store, joining("a"))
    assert (joined.is_leader, joined.members, joined.open_members) == (True, ["a"], ["a"])


def test_the_next_member_joins_the_open_group_and_a_retried_leader_still_leads_it():
    store = ScriptedGroups(open_group=[False, False], add_to_group=[group_row("a", ["a", "b"], ["a", "b"]),
                                                                    group_row("a", ["a", "b"], ["a", "b"])])
    assert rules.join_group(store, joining("b")).is_leader is False
    assert rules.join_group(store, joining("a")).is_leader is True


def test_a_group_that_ended_meanwhile_is_opened_anew_and_one_that_keeps_changing_raises():
    store = ScriptedGroups(open_group=[False, True], add_to_group=[None])
    assert rules.join_group(store, joining("b")).is_leader is True
    assert store.calls == ["open_group", "add_to_group", "open_group"]
    racing = ScriptedGroups(open_group=[False] * rules.MAX_RACES, add_to_group=[None] * rules.MAX_RACES)
    with pytest.raises(rules.StoreRaced, match="group"):
        rules.join_group(racing, joining("b"))


def test_leaving_closes_the_group_with_its_last_open_member_only():
    assert rules.leave_group(ScriptedGroups(drop_open_member=[None]), "group#g#1", "a", "ok") is None
    store = ScriptedGroups(drop_open_member=[group_row("a", ["a", "b"], ["b"])])
    assert rules.leave_group(store, "group#g#1", "a", "ok").open_members == ["b"] and store.calls == ["drop_open_member"]
    closed = group_row("a", ["a"], [], status="resolved")
    store = ScriptedGroups(drop_open_member=[group_row("a", ["a"], [])], close_group=[closed])
    assert rules.leave_group(store, "group#g#1", "a", "ok") == closed


def test_a_close_lost_to_a_joining_member_hands_back_the_group_as_it_is_then():
    now = group_row("a", ["a", "c"], ["c"])
    store = ScriptedGroups(drop_open_member=[group_row("a", ["a"], [])], close_group=[None], group=[now])
    assert rules.leave_group(store, "group#g#1", "a", "ok") == now
    assert store.calls == ["drop_open_member", "close_group", "group"]
