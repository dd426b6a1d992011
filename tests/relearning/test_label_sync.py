"""Relearning reads only the labels new since its last run, and never asks the endpoint again for
an item whose signals its decision record kept: over the labelled-examples table's fake (held to
its adapter by tests/fakes/test_contract_console.py) and an in-memory head bucket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from aws_lambda_powertools import Logger

import relearning.labels as labels_module
from decision_contract import ModelInfo
from decision_contract.signals import request_key
from decision_router.domain.policies import load_policy
from decision_router.domain.records import DecisionRecord, with_signals_that_fit
from decision_router.domain.routing import Router
from decision_router.items import parse_item
from relearning.job import EndpointSignals, Relearning, read_labels
from relearning.labels import SETTLE_SECONDS, iso, labels_key, sync_labels
from tests.fakes.console import FakeLabelledExamples
from tests.fakes.intake import FakeEndpoint

REPO = Path(__file__).resolve().parents[2]
POLICY = "support-ticket"
DAY = 86400.0
NOW = 1_800_000_000.0  # 2027-01-15
MODEL = ModelInfo(file="test.gguf", bytes=1, sha256="1" * 64, context_size=2048, threads=1, gpu_layers=0,
                  llama_cpp_python_version="test", hidden_size=576)


class CountingTable(FakeLabelledExamples):
    """The fake table, counting the rows each read hands over (what DynamoDB bills a Query for)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows_read = 0

    def _counted(self, rows: Iterator[dict[str, str]]) -> Iterator[dict[str, str]]:
        for row in rows:
            self.rows_read += 1
            yield row

    def of_policy(self, policy_name: str) -> Iterator[dict[str, str]]:
        return self._counted(super().of_policy(policy_name))

    def since(self, policy_name: str, labelled_after: str) -> Iterator[dict[str, str]]:
        return self._counted(super().since(policy_name, labelled_after))


class MemoryBucket:
    """The head store as relearning's collect uses it, in memory."""

    history_table = "history"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def find(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def put(self, key: str, data: bytes) -> None:
        self.objects[key] = data

    def download(self, key: str, path: Path) -> bytes:
        data = self.objects.get(key, b"")
        if data:
            path.write_bytes(data)
        return data

    def upload(self, key: str, path: Path) -> None:
        self.objects[key] = path.read_bytes()


def label(n: int, at: float, *, shard: bool = True, **columns: str) -> dict[str, str]:
    row = {"policy_name": POLICY, "item_key": f"ticket:email:T-{n}:0", "item_id": f"T-{n}",
           "item": json.dumps({"id": f"T-{n}"}), "answers": json.dumps({"queue": "billing"}), "labelled_at": iso(at)}
    return {**row, **({"label_shard": f"{POLICY}#{n % 8}"} if shard else {}), **columns}


def sync(bucket: MemoryBucket, table: CountingTable, now: float, **kwargs: Any):
    return sync_labels(bucket, table, POLICY, now=now, retention_days=kwargs.get("retention_days", 365),
                       full_read_after_seconds=kwargs.get("full_read_after_seconds", DAY))


def test_a_run_with_no_new_labels_reads_no_old_rows():
    bucket, table = MemoryBucket(), CountingTable()
    for n in range(1000):
        table.put(label(n, NOW - 30 * DAY + n))
    first = sync(bucket, table, NOW - 10 * DAY)  # the first run reads the partition once
    assert (first.read, len(first.rows), first.full_read) == (1000, 1000, True)
    # and once more a review wait later (see the next tests), then never again
    assert sync(bucket, table, NOW - 8 * DAY).full_read

    table.rows_read = 0
    for step in ("count", "collect", "fit"):  # a run with nothing new: every step reads nothing
        again = sync(bucket, table, NOW + len(step))
        assert (again.read, len(again.rows), again.full_read) == (0, 1000, False), step
    assert table.rows_read == 0


def test_a_run_reads_the_new_labels_alone_and_keeps_the_earlier_ones():
    bucket, table = MemoryBucket(), CountingTable()
    for n in range(1000):
        table.put(label(n, NOW - 30 * DAY + n))
    sync(bucket, table, NOW - 10 * DAY), sync(bucket, table, NOW - 8 * DAY)  # the two whole reads
    for n in range(1000, 1010):
        table.put(label(n, NOW - 3600 + n))
    table.put(label(5, NOW - 3000))  # a later review of an old item replaces its row

    table.rows_read = 0
    steps = [sync(bucket, table, NOW + s) for s in range(3)]  # count, collect, fit of one run
    assert [s.read for s in steps] == [11, 0, 0]
    assert table.rows_read == 11
    rows = {row["item_key"]: row for row in steps[-1].rows}
    assert len(rows) == 1010 and rows["ticket:email:T-5:0"]["labelled_at"] == iso(NOW - 3000)


def test_labels_inside_the_settling_time_are_read_again_and_count_once():
    bucket, table = MemoryBucket(), CountingTable()
    table.put(label(1, NOW - 10 * DAY))
    sync(bucket, table, NOW - 9 * DAY), sync(bucket, table, NOW - 7 * DAY)
    table.put(label(2, NOW - 10))  # written moments before the run: read again by the next one
    assert sync(bucket, table, NOW).read == 1
    table.put(label(3, NOW - 20))  # labelled before label 2 but shown by the index after it
    later = sync(bucket, table, NOW + 60)
    assert later.read == 2 and sorted(r["item_id"] for r in later.rows) == ["T-1", "T-2", "T-3"]
    # read within the settling time of the last sync: once more by the next, then no more
    assert sync(bucket, table, NOW + SETTLE_SECONDS + 60).read == 2
    assert sync(bucket, table, NOW + SETTLE_SECONDS + 120).read == 0


def test_the_partition_is_read_whole_once_more_after_the_longest_review_wait():
    """A review answered by an execution started before the shard index carries no shard: the
    second whole read, a review wait after the first, finds it; then never again."""
    bucket, table = MemoryBucket(), CountingTable()
    table.put(label(1, NOW - 10 * DAY, shard=False))
    assert sync(bucket, table, NOW - 5 * DAY).full_read
    table.put(label(2, NOW - 4.9 * DAY, shard=False))  # answered in an old execution, after the first read
    assert sync(bucket, table, NOW - 4.8 * DAY).read == 0
    second = sync(bucket, table, NOW - 4 * DAY + 1)
    assert second.full_read and second.read == 2 and len(second.rows) == 2
    assert not sync(bucket, table, NOW).full_read


def test_labels_past_the_retention_are_dropped_from_those_kept():
    bucket, table = MemoryBucket(), CountingTable()
    table.put(label(1, NOW - 40 * DAY))
    table.put(label(2, NOW - 10 * DAY))
    kept = sync(bucket, table, NOW, retention_days=30)
    assert [row["item_id"] for row in kept.rows] == ["T-2"]
    assert b"T-1" not in __import__("gzip").decompress(bucket.objects[labels_key(POLICY)])


def test_past_the_cap_the_newest_labels_are_kept(monkeypatch):
    monkeypatch.setattr(labels_module, "MAX_KEPT_ROWS", 3)
    bucket, table = MemoryBucket(), CountingTable()
    for n in range(5):
        table.put(label(n, NOW - (10 - n) * DAY))
    kept = sync(bucket, table, NOW)
    assert sorted(row["item_id"] for row in kept.rows) == ["T-2", "T-3", "T-4"]
    table.put(label(9, NOW - DAY / 2))  # a newer one pushes the oldest kept out
    assert sorted(row["item_id"] for row in sync(bucket, table, NOW).rows) == ["T-3", "T-4", "T-9"]


def test_kept_labels_that_do_not_read_are_refused_naming_the_key():
    bucket, table = MemoryBucket(), CountingTable()
    bucket.put(labels_key(POLICY), b"not gzip")
    with pytest.raises(ValueError, match=r"labels/support-ticket.jsonl.gz: not the labels relearning keeps"):
        sync(bucket, table, NOW)


# ------------------------------------------------------------------------------ kept signals
# The incident team head reads the hidden state: its requests ask for it, and the record keeps it.
INCIDENTS = "incident"


def incidents(n: int) -> list[dict]:
    rows = [json.loads(line) for line in (REPO / "bench/data/incidents.jsonl").read_text().splitlines()]
    return [row for row in rows if row["policy"] == INCIDENTS and row["item"]["severity"] != "sev1"][:n]


def endpoint(hidden: float) -> FakeEndpoint:
    return FakeEndpoint({"team": [0.0] * 4, "priority": [0.0] * 4}, model=MODEL, hidden_state=[hidden] * 576)


def routed(at_decision: FakeEndpoint, item: dict) -> DecisionRecord:
    policy = load_policy(INCIDENTS)
    router = Router(at_decision, destinations={t: f"https://sqs/{t}" for t in policy.targets},
                    review_queue_url="https://sqs/review", review_timeout_seconds=60)
    record, _ = router.judge(parse_item("incident", item), policy)
    return with_signals_that_fit(record)


def stored(record: DecisionRecord, gold: dict[str, str], at: float) -> dict[str, str]:
    """The row the workflow's StoreLabelledExample writes for the record (its string columns)."""
    dumped = json.loads(record.model_dump_json())
    return {"policy_name": record.policy.name, "item_key": record.item_key, "item_id": record.item_id,
            "policy_version": record.policy.version, "item_kind": record.item_kind, "item": json.dumps(dumped["item"]),
            "answers": json.dumps(gold), "reviewer": "ana", "reviewer_id": "", "identity_signature": "",
            "model_decisions": json.dumps(dumped["decisions"]), "route_reason": record.route_reason,
            "execution_name": f"e-{record.item_id}", "labelled_at": iso(at), "label_shard": f"{INCIDENTS}#0",
            "signals": json.dumps(dumped["signals"])}


def test_the_record_keeps_the_signals_under_the_key_the_fitter_rebuilds():
    (incident,) = incidents(1)
    record = routed(endpoint(0.25), incident["item"])
    assert record.route == "review" and set(record.signals) == {"team"}  # the priority head reads no hidden state
    kept = record.signals["team"]
    assert kept.model_sha256 == MODEL.sha256 and len(kept.hidden) == 1536  # 576 float16 in base64

    (row,), problems = read_labels([stored(record, {"team": incident["gold"]["team"]}, NOW)])
    assert not problems
    (labelled,) = row.case.decisions
    assert request_key(MODEL.sha256, labelled.decision) == kept.request_key == row.signals["team"].request_key


def test_signals_are_kept_only_on_a_record_going_to_review():
    record = routed(endpoint(0.25), incidents(1)[0]["item"])
    assert record.signals
    assert with_signals_that_fit(record.model_copy(update={"route": "auto"})).signals == {}


def test_an_item_with_signals_is_never_sent_to_the_endpoint(tmp_path):
    with_signals, without = incidents(2)
    table = CountingTable()
    kept = routed(endpoint(0.25), with_signals["item"])
    table.put(stored(kept, {"team": with_signals["gold"]["team"]}, NOW - DAY))
    older = routed(endpoint(0.25), without["item"]).model_copy(update={"signals": {}})  # from before signals were kept
    table.put(stored(older, {"team": without["gold"]["team"]}, NOW - DAY + 1))

    now_serving = endpoint(0.5)
    job = Relearning(MemoryBucket(), table, lambda probe: EndpointSignals(now_serving, probe), shipped=[],
                     work_dir=tmp_path / "work", signals_dir=tmp_path / "none-shipped", tally=object(),
                     precision=object(), clock=lambda: NOW, logger=Logger(service="test"))
    collected = job.collect(INCIDENTS)

    assert collected["complete"] and collected["examples"] == 2 and collected["not_scored"] == []
    assert {d.state["title"] for d in now_serving.asked} == {without["item"]["title"]}
    examples, *_ = job._examples(load_policy(INCIDENTS), MODEL)
    hidden = {e.state["title"]: float(e.hidden[0]) for e in examples}
    assert hidden == {with_signals["item"]["title"]: 0.25, without["item"]["title"]: 0.5}  # as at decision time
