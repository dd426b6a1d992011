"""Contract tests of the open-incident store's link index (`file`, `unfile`, `filed_under`,
`open_incidents`): each behaviour on the fake (tests/fakes/open_incidents.py `FakeLinkIndex`, in
`FakeOpenIncidents`) and on the adapter (`adapters/link_index.py` `LinkIndexStore`, in
`OpenIncidents`) over moto's OpenIncidentsTable, and the adapter's requests counted: a ticket's
reads are the same however many incidents are open, and an incident's writes one a key (and a
delete for a row it leaves listing none)."""

from __future__ import annotations

import copy
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Iterator

import pytest

from decision_router.adapters.incident_table import BATCH_KEYS, plain
from decision_router.adapters.link_index import FILED_COUNT, LOOKUP_ROW
from decision_router.adapters.open_incidents import OpenIncidents
from decision_router.domain.linking import MAX_FILED, filing_keys
from tests.fakes.open_incidents import FakeOpenIncidents
from tests.fakes.test_contract_intake import SIDES, created, open_incident_stores

T0, T1 = "2026-11-29T12:00:00.000+00:00", "2026-11-29T12:05:00.000+00:00"
AT0, AT1 = (datetime(2026, 11, 29, 12, m, tzinfo=timezone.utc) for m in (0, 5))


@pytest.fixture(params=SIDES)
def store(request) -> Iterator[FakeOpenIncidents | OpenIncidents]:
    yield from open_incident_stores(request.param)


def opened(store: Any, key: str, service: str, *, at: str = T0, title: str | None = None,
           description: str | None = None) -> list[str]:
    """Open an incident as the incident intake does (claim, then file it): the keys it is filed under."""
    assert store.claim(key, "d-" + key, incident_id="INC-" + key, source="cloudwatch", service=service,
                       reported_at=at, title=title, description=description) == "new"
    keys = filing_keys(service, title, description)
    store.file(key, keys, at)
    return keys


def test_a_claim_keeps_the_keys_the_incident_is_filed_under_and_its_resolution_hands_them_back(store):
    keys = opened(store, "a", "checkout-api", title="Checkout 5xx", description="customers cannot pay")
    assert keys == ["name#checkout-api", "word#checkout", "word#customer", "word#pay"]
    was = store.resolve("a", "ok", "over")
    assert was is not None and was.filed_under == keys


def test_filed_under_lists_each_keys_open_incidents_with_their_reported_time(store):
    opened(store, "a", "checkout-api", at=T0, description="card payments fail")
    opened(store, "b", "billing-api", at=T1, description="invoices fail, card payments too")
    found = store.filed_under(["name#checkout-api", "word#card", "word#invoice", "word#nothing"])
    assert found == {"name#checkout-api": {"a": AT0}, "word#card": {"a": AT0, "b": AT1}, "word#invoice": {"b": AT1}}


def test_unfile_takes_the_incident_off_its_keys_and_leaves_the_others(store):
    keys = opened(store, "a", "checkout-api", description="card payments fail")
    opened(store, "b", "billing-api", description="card payments fail")
    store.unfile("a", keys)
    store.unfile("a", ["word#never-filed"])  # nothing there: nothing to do
    assert store.filed_under(["word#card", "name#checkout-api"]) == {"word#card": {"b": AT0}}


def test_unfile_deletes_a_row_it_leaves_listing_none_and_keeps_the_others(store):
    """A resolved incident's words do not stay behind as keys: its rows that listed it alone go."""
    keys = opened(store, "a", "checkout-api", description="card payments fail")
    others = opened(store, "b", "billing-api", description="card payments fail")
    store.unfile("a", keys)
    assert "name#checkout-api" in keys and {"word#card", "word#payment"} <= set(others)
    lookup_rows = {key for key in rows(store) if key.startswith(LOOKUP_ROW)}
    assert lookup_rows == {LOOKUP_ROW + key for key in others}
    assert rows(store)[LOOKUP_ROW + "word#card"][FILED_COUNT] == 1
    store.unfile("b", others)
    assert not {key for key in rows(store) if key.startswith(LOOKUP_ROW)}
    store.file("c", ["word#card"], T1)  # filed again from nothing: a new row
    assert store.filed_under(["word#card"]) == {"word#card": {"c": AT1}}


def test_a_row_someone_files_under_while_it_empties_is_kept():
    """The delete holds only while the row's count is 0: an incident filed between the unfiling
    update and the delete keeps the row (and is listed on it)."""
    with created("OpenIncidentsTable") as stack:
        store = OpenIncidents(stack.ref("OpenIncidentsTable"))
        store.file("a", ["word#disk"], T0)
        other = OpenIncidents(store.table_name)

        def file_meanwhile(**_: Any) -> None:
            other.file("b", ["word#disk"], T1)

        store.client.meta.events.register("before-call.dynamodb.DeleteItem", file_meanwhile)
        store.unfile("a", ["word#disk"])
        assert store.filed_under(["word#disk"]) == {"word#disk": {"b": AT1}}


def test_filing_again_is_idempotent_and_a_full_key_takes_no_more(store):
    for n in range(MAX_FILED):
        store.file(f"k{n:03}", ["word#latency"], T0)
    store.file("k000", ["word#latency"], T1)  # already listed: kept as it is, counted once
    store.file("late", ["word#latency", "word#search"], T0)  # full: left off that key only
    found = store.filed_under(["word#latency", "word#search"])
    assert len(found["word#latency"]) == MAX_FILED and "late" not in found["word#latency"]
    assert found["word#latency"]["k000"] == AT0 and found["word#search"] == {"late": AT0}
    store.unfile("k001", ["word#latency"])  # room again: the next one is filed
    store.file("late", ["word#latency"], T1)
    found = store.filed_under(["word#latency"])["word#latency"]
    assert len(found) == MAX_FILED and "k001" not in found and found["late"] == AT1


def test_unfiling_twice_counts_the_incident_out_once(store):
    for key in ("a", "b"):
        store.file(key, ["word#disk"], T0)
    store.unfile("a", ["word#disk"])
    store.unfile("a", ["word#disk"])  # not listed any more: nothing to do
    for n in range(MAX_FILED - 1):
        store.file(f"k{n:03}", ["word#disk"], T0)
    store.file("over", ["word#disk"], T0)  # "b" and MAX_FILED - 1 others: full
    found = store.filed_under(["word#disk"])["word#disk"]
    assert len(found) == MAX_FILED and "b" in found and "over" not in found


def test_open_incidents_reads_the_open_ones_of_the_keys_given(store):
    opened(store, "b", "billing-api", title="Billing 5xx", description="invoices fail")
    opened(store, "a", "checkout-api")
    opened(store, "gone", "search")
    store.resolve("gone", "ok", "over")
    store.claim("no-service", "d", incident_id="INC-x", source="cloudwatch")
    found = store.open_incidents(["b", "a", "gone", "no-service", "missing", "a"])
    assert [(i.key, i.incident_id, i.service, i.title, i.description) for i in found] == [
        ("a", "INC-a", "checkout-api", None, None), ("b", "INC-b", "billing-api", "Billing 5xx", "invoices fail")]


def test_more_keys_than_one_batch_are_all_read(store):
    keys = [f"k{n:03}" for n in range(BATCH_KEYS + 5)]
    for key in keys:
        opened(store, key, f"svc-{key}")
    assert [i.key for i in store.open_incidents(keys)] == keys
    assert len(store.filed_under([f"name#svc-{key}" for key in keys])) == len(keys)


def counted(store: OpenIncidents) -> Counter[str]:
    """The adapter's requests by operation, from botocore's own events."""
    calls: Counter[str] = Counter()
    store.client.meta.events.register("before-call.dynamodb.*", lambda model, **_: calls.update([model.name]))
    return calls


@pytest.mark.parametrize("open_count", [3, 150])
def test_a_tickets_reads_do_not_grow_with_the_open_incidents(open_count):
    """The same requests and the same incidents read for one ticket's keys, with 3 or 150 open."""
    with created("OpenIncidentsTable") as stack:
        store = OpenIncidents(stack.ref("OpenIncidentsTable"))
        opened(store, "checkout", "checkout-api", description="customers cannot pay")
        for n in range(open_count - 1):
            opened(store, f"other-{n}", f"service-{n}", description=f"queue{n} backlog grows")
        calls = counted(store)
        filed = store.filed_under(["name#checkout-api", "word#checkout", "word#pay", "word#broken"])
        read = store.open_incidents(sorted({key for each in filed.values() for key in each}))
        assert [i.key for i in read] == ["checkout"]
        assert calls == Counter({"BatchGetItem": 2})


def rows(store: FakeOpenIncidents | OpenIncidents) -> dict[str, dict[str, Any]]:
    """Every row of the table, as Python values, by key."""
    if isinstance(store, FakeOpenIncidents):
        return copy.deepcopy(store.rows)
    items = store.client.scan(TableName=store.table_name, ConsistentRead=True)["Items"]
    return {item["incident_key"]["S"]: plain(item) for item in items}


def _row_of(state: str, store: OpenIncidents) -> None:
    """The link index's row of `word#disk` missing, with room (one incident listed), or full."""
    for n in range({"missing": 0, "with room": 1, "full": MAX_FILED}[state]):
        store.file(f"k{n:03}", ["word#disk"], T0)


@pytest.mark.parametrize("state", ["missing", "with room", "full"])
def test_filing_and_unfiling_take_one_update_a_key_whatever_the_row_holds(state):
    """One UpdateItem a key, whether the row is missing, has room or is full; filing again and
    unfiling (listed or not) too, and unfiling one DeleteItem more for each row it leaves listing
    none: the calls an incident makes do not grow with the open incidents."""
    with created("OpenIncidentsTable") as stack:
        store = OpenIncidents(stack.ref("OpenIncidentsTable"))
        _row_of(state, store)
        calls = counted(store)
        store.file("new", ["word#disk", "name#disk-api"], T1)
        assert calls == Counter({"UpdateItem": 2})
        store.file("new", ["word#disk", "name#disk-api"], T1)  # a retry
        assert calls == Counter({"UpdateItem": 4})
        store.unfile("new", ["word#disk", "name#disk-api"])
        emptied = 2 if state == "missing" else 1  # name#disk-api listed "new" alone, and word#disk when it was missing
        assert calls == Counter({"UpdateItem": 6, "DeleteItem": emptied})
        listed = store.filed_under(["word#disk", "name#disk-api"])
        assert "name#disk-api" not in listed and "new" not in listed.get("word#disk", {})
        assert len(listed.get("word#disk", {})) == {"missing": 0, "with room": 1, "full": MAX_FILED}[state]
