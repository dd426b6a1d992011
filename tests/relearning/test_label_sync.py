"""Relearning reads only the labels new since its last run, and never asks the endpoint again for
an item whose signals its decision record kept: over the labelled-examples table's fake (held to
its adapter by tests/fakes/test_contract_console.py) and the head store's (held to its adapter by
tests/fakes/test_contract_head_store.py)."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any, Iterator

import pytest
from aws_lambda_powertools import Logger

import relearning.labels as labels_module
from decision_contract import ModelInfo
from decision_contract.signals import request_key
from decision_router.domain.kept_labels import KeptLabels
from decision_router.domain.policies import load_policy
from decision_router.domain.records import DecisionRecord, with_signals_that_fit
from decision_router.domain.routing import Router
from decision_router.items import parse_item
from local.template import load_template
from relearning.job import EndpointSignals, Relearning, read_labels
from relearning.labels import SETTLE_SECONDS, iso, labels_key, sync_labels
from tests.fakes.console import FakeLabelledExamples
from tests.fakes.head_store import FakeHeadStore
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


def label(n: int, at: float, *, shard: bool = True, **columns: str) -> dict[str, str]:
    row = {"policy_name": POLICY, "item_key": f"ticket:email:T-{n}:0", "item_id": f"T-{n}",
           "item": json.dumps({"id": f"T-{n}"}), "answers": json.dumps({"queue": "billing"}), "labelled_at": iso(at)}
    return {**row, **({"label_shard": f"{POLICY}#{n % 8}"} if shard else {}), **columns}


def sync(bucket: FakeHeadStore, table: CountingTable, now: float, **kwargs: Any):
    return sync_labels(bucket, table, POLICY, now=now, retention_days=kwargs.get("retention_days", 365),
                       full_read_after_seconds=kwargs.get("full_read_after_seconds", DAY))


def test_a_run_with_no_new_labels_reads_no_old_rows():
    bucket, table = FakeHeadStore(), CountingTable()
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
    bucket, table = FakeHeadStore(), CountingTable()
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
    bucket, table = FakeHeadStore(), CountingTable()
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
    bucket, table = FakeHeadStore(), CountingTable()
    table.put(label(1, NOW - 10 * DAY, shard=False))
    assert sync(bucket, table, NOW - 5 * DAY).full_read
    table.put(label(2, NOW - 4.9 * DAY, shard=False))  # answered in an old execution, after the first read
    assert sync(bucket, table, NOW - 4.8 * DAY).read == 0
    second = sync(bucket, table, NOW - 4 * DAY + 1)
    assert second.full_read and second.read == 2 and len(second.rows) == 2
    assert not sync(bucket, table, NOW).full_read


def test_labels_past_the_retention_are_dropped_from_those_kept():
    bucket, table = FakeHeadStore(), CountingTable()
    table.put(label(1, NOW - 40 * DAY))
    table.put(label(2, NOW - 10 * DAY))
    kept = sync(bucket, table, NOW, retention_days=30)
    assert [row["item_id"] for row in kept.rows] == ["T-2"]
    assert b"T-1" not in __import__("gzip").decompress(bucket.get(labels_key(POLICY)))


def test_past_the_cap_the_newest_labels_are_kept(monkeypatch):
    monkeypatch.setattr(labels_module, "MAX_KEPT_ROWS", 3)
    bucket, table = FakeHeadStore(), CountingTable()
    for n in range(5):
        table.put(label(n, NOW - (10 - n) * DAY))
    kept = sync(bucket, table, NOW)
    assert sorted(row["item_id"] for row in kept.rows) == ["T-2", "T-3", "T-4"]
    table.put(label(9, NOW - DAY / 2))  # a newer one pushes the oldest kept out
    assert sorted(row["item_id"] for row in sync(bucket, table, NOW).rows) == ["T-3", "T-4", "T-9"]


def test_past_the_bytes_budget_the_newest_labels_that_fit_are_kept():
    """Rows with a large model's kept signals: the budget, not the row cap, bounds what is kept."""
    table = CountingTable()
    for n in range(6):
        table.put(label(n, NOW - (10 - n) * DAY, signals="s" * (n % 2) * 10_000))  # odd rows are large
    line = {row["item_id"]: len(json.dumps(row, sort_keys=True)) + 1 for row in table.rows.values()}
    newest_four = sum(line[f"T-{n}"] for n in (2, 3, 4, 5))

    def synced(bucket: FakeHeadStore, max_bytes: int):
        return sync_labels(bucket, table, POLICY, now=NOW, retention_days=365, full_read_after_seconds=DAY,
                           max_bytes=max_bytes)

    exact = synced(FakeHeadStore(), newest_four)  # the budget holds the newest four exactly
    assert sorted(row["item_id"] for row in exact.rows) == ["T-2", "T-3", "T-4", "T-5"] and exact.capped == 2
    bucket = FakeHeadStore()
    short = synced(bucket, newest_four - 1)  # a byte short: T-2 is left out, and with it every older row
    assert sorted(row["item_id"] for row in short.rows) == ["T-3", "T-4", "T-5"] and short.capped == 3
    stored_rows = KeptLabels.load(bucket.get(labels_key(POLICY)), "kept").rows
    assert sorted(stored_rows) == sorted(f"ticket:email:T-{n}:0" for n in (3, 4, 5))
    # what was left out stays out (the table keeps it until its TTL): the watermark is past it
    again = synced(bucket, 10 * newest_four)
    assert (len(again.rows), again.read, again.capped) == (3, 0, 0)


def test_a_whole_read_stays_within_twice_the_budget_and_keeps_what_one_cut_at_the_end_would():
    """The partition's rows in no time order (DynamoDB hands them by item key): the rows held never
    pass twice the budget while they come, and the rows kept are the newest that fit, as if all
    had been held and cut once."""
    rows = [label(n, NOW - random.Random(n).uniform(0, 300) * DAY, signals="s" * random.Random(-n).randrange(0, 5000))
            for n in range(400)]
    line = {row["item_key"]: len(json.dumps(row, sort_keys=True)) + 1 for row in rows}
    budget = sum(line.values()) // 7
    bounded = labels_module._NewestRows(oldest=iso(NOW - 200 * DAY), max_bytes=budget)
    for row in rows:
        bounded.add(row)
        assert bounded.total <= 2 * budget and bounded.total == sum(line[k] for k in bounded.rows)
    bounded.bound()

    newest_first = sorted((r for r in rows if r["labelled_at"] >= iso(NOW - 200 * DAY)),
                          key=lambda r: (r["labelled_at"], r["item_key"]), reverse=True)
    cut, used = [], 0
    for row in newest_first:
        used += line[row["item_key"]]
        if used > budget:
            break
        cut.append(row["item_key"])
    assert sorted(bounded.rows) == sorted(cut) and 0 < len(cut) < len(newest_first)
    assert bounded.capped == len(newest_first) - len(cut)


def test_the_bytes_budget_is_a_share_of_the_function_memory(monkeypatch):
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "3008")
    at_3008 = labels_module.kept_bytes_budget()
    assert at_3008 == labels_module.kept_bytes_budget(3008) == int(3008 * 2**20 * 0.4 / 5)  # about 240 MiB
    # a 4B model's label (two questions, 2,560 values) is about 15 KB: about 16,000 of them fit
    assert 15_000 < at_3008 // 15_400 < 17_000
    assert abs(labels_module.kept_bytes_budget(6016) - 2 * at_3008) <= 1  # proportional to the memory
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "lots")
    with pytest.raises(ValueError, match="AWS_LAMBDA_FUNCTION_MEMORY_SIZE 'lots': not a whole number of MB"):
        labels_module.kept_bytes_budget()
    with pytest.raises(ValueError, match="memory_mb 0: must be 1 MB or more"):
        labels_module.kept_bytes_budget(0)
    with pytest.raises(ValueError, match="max_bytes 0: must be 1 or more"):
        sync_labels(FakeHeadStore(), CountingTable(), POLICY, now=NOW, retention_days=365, full_read_after_seconds=DAY,
                    max_bytes=0)


def test_the_template_gives_the_relearning_function_the_memory_its_budget_assumes():
    function = load_template(REPO / "template.yaml")["Resources"]["RelearningFunction"]
    assert function["Properties"]["MemorySize"] == labels_module.FUNCTION_MEMORY_MB


def test_kept_labels_that_do_not_read_are_refused_naming_the_key():
    bucket, table = FakeHeadStore(), CountingTable()
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
                    review_timeout_seconds=60)
    record, _ = router.decision_record(parse_item("incident", item), policy)
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
    # every question's, the priority head's too though it reads no hidden state
    assert record.route == "review" and set(record.signals) == {"team", "priority"}
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
    job = Relearning(FakeHeadStore(), table, lambda probe: EndpointSignals(now_serving, probe), shipped=[],
                     work_dir=tmp_path / "work", signals_dir=tmp_path / "none-shipped", tally=object(),
                     precision=object(), clock=lambda: NOW, logger=Logger(service="test"))
    collected = job.collect(INCIDENTS)

    assert collected["complete"] and collected["examples"] == 2 and collected["not_scored"] == []
    assert {d.state["title"] for d in now_serving.asked} == {without["item"]["title"]}
    examples, *_ = job._examples(load_policy(INCIDENTS), MODEL)
    hidden = {e.state["title"]: float(e.hidden[0]) for e in examples}
    assert hidden == {with_signals["item"]["title"]: 0.25, without["item"]["title"]: 0.5}  # as at decision time


@pytest.mark.parametrize("labels", [1, 3, 5])
def test_a_run_on_records_with_kept_signals_asks_the_endpoint_once_which_model_it_serves(tmp_path, capsys, labels):
    """Every reviewed item kept its signals at decision time: collect asks the endpoint one small
    decision (no hidden state) to learn which model it serves, whatever the number of labels, and
    takes the signals from the records; fit takes collect's model and asks nothing."""
    table = CountingTable()
    for n, incident in enumerate(incidents(labels)):
        record = routed(endpoint(0.25 * n), incident["item"])
        table.put(stored(record, incident["gold"], NOW - DAY + n))
    now_serving = endpoint(0.5)
    job = Relearning(FakeHeadStore(), table, lambda probe: EndpointSignals(now_serving, probe), shipped=[],
                     work_dir=tmp_path / "work", signals_dir=tmp_path / "none-shipped", tally=object(),
                     precision=object(), clock=lambda: NOW, logger=Logger(service="test"))

    collected = job.collect(INCIDENTS)
    examples, *_ = job._examples(load_policy(INCIDENTS), ModelInfo.model_validate(collected["model"]))

    [(probe,)] = now_serving.requests  # one request of one decision, for collect and fit together
    assert not probe.return_hidden_state
    assert collected["complete"] and collected["examples"] == 2 * labels and collected["not_scored"] == []
    assert ModelInfo.model_validate(collected["model"]) == MODEL
    assert sorted({float(e.hidden[0]) for e in examples}) == [0.25 * n for n in range(labels)]  # each item's own, as kept
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"LabelsAskedOfEndpoint"' in line]
    assert [line["LabelsAskedOfEndpoint"] for line in emitted] == [[0.0], [0.0]]  # collect's and fit's


def test_labels_whose_signals_another_model_answered_are_asked_of_the_model_served_now(tmp_path, capsys):
    """A new model deployed since the items were decided: the one request says so, and every
    label is asked again of it (counted and logged), so the head is fitted for the model served."""
    table = CountingTable()
    chosen = incidents(3)
    for n, incident in enumerate(chosen):
        table.put(stored(routed(endpoint(0.25), incident["item"]), incident["gold"], NOW - DAY + n))
    deployed = MODEL.model_copy(update={"file": "new.gguf", "sha256": "2" * 64})
    now_serving, logged = FakeEndpoint({"team": [0.0] * 4, "priority": [0.0] * 4}, model=deployed,
                                       hidden_state=[0.5] * 576), io.StringIO()
    job = Relearning(FakeHeadStore(), table, lambda probe: EndpointSignals(now_serving, probe), shipped=[],
                     work_dir=tmp_path / "work", signals_dir=tmp_path / "none-shipped", tally=object(),
                     precision=object(), clock=lambda: NOW, logger=Logger(service="model-changed", stream=logged))

    collected = job.collect(INCIDENTS)
    examples, *_ = job._examples(load_policy(INCIDENTS), ModelInfo.model_validate(collected["model"]))

    assert ModelInfo.model_validate(collected["model"]) == deployed
    assert collected["complete"] and collected["examples"] == 6 and collected["not_scored"] == []
    probe, *asked = now_serving.requests
    assert len(probe) == 1 and not probe[0].return_hidden_state
    assert sorted(d.state["title"] for request in asked for d in request) == sorted(
        i["item"]["title"] for i in chosen for _ in ("team", "priority"))
    assert {float(e.hidden[0]) for e in examples} == {0.5}  # the deployed model's, none of the old one's
    [warning] = [line for line in map(json.loads, logged.getvalue().splitlines())
                 if line["message"] == "labelled examples without kept signals: asked of the endpoint"]
    assert (warning["items"], warning["kept_for_another_model"], warning["model_sha256"]) == (3, 3, deployed.sha256)
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"LabelsAskedOfEndpoint"' in line]
    assert [line["LabelsAskedOfEndpoint"] for line in emitted] == [[3.0], [0.0]]  # collect asked them; fit has them


def test_an_item_without_kept_signals_is_asked_counted_and_logged(tmp_path, capsys):
    """A record from before every question asked for the hidden state: the one fallback left."""
    kept_item, older_item = incidents(2)
    table = CountingTable()
    table.put(stored(routed(endpoint(0.25), kept_item["item"]), kept_item["gold"], NOW - DAY))
    older = routed(endpoint(0.25), older_item["item"]).model_copy(update={"signals": {}})
    table.put(stored(older, older_item["gold"], NOW - DAY + 1))
    now_serving, logged = endpoint(0.5), io.StringIO()
    job = Relearning(FakeHeadStore(), table, lambda probe: EndpointSignals(now_serving, probe), shipped=[],
                     work_dir=tmp_path / "work", signals_dir=tmp_path / "none-shipped", tally=object(),
                     precision=object(), clock=lambda: NOW, logger=Logger(service="relearning-fallback", stream=logged))
    assert job.collect(INCIDENTS)["complete"]

    assert {d.state["title"] for d in now_serving.asked} == {older_item["item"]["title"]}
    [warning] = [line for line in map(json.loads, logged.getvalue().splitlines())
                 if line["message"] == "labelled examples without kept signals: asked of the endpoint"]
    assert (warning["level"], warning["items"], warning["model_sha256"]) == ("WARNING", 1, MODEL.sha256)
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"LabelsAskedOfEndpoint"' in line]
    assert [line["LabelsAskedOfEndpoint"] for line in emitted] == [[1.0]]


# ------------------------------------------------------------------------------ erased meanwhile
class ErasedMeanwhile(FakeHeadStore):
    """The head bucket as `make erase` leaves it between a sync's read and its write: the item's
    table row deleted, then the kept labels rewritten without it (a new version, `erased_at` set)."""

    def __init__(self, table: CountingTable, item_key: str, erasures: int = 1) -> None:
        super().__init__()
        self.table, self.item_key, self.erasures, self.conflicts = table, item_key, erasures, 0

    def put_unless_changed(self, key: str, data: bytes, etag: str | None) -> bool:
        if self.erasures:
            self.erasures -= 1
            self.table.rows.pop((POLICY, self.item_key), None)
            found = self.find(key)
            kept = KeptLabels.load(found, key) if found is not None else KeptLabels()
            kept.remove(lambda row: row["item_key"] == self.item_key)
            kept.erased_at = NOW + self.erasures  # each erasure's own time: another version
            self.put(key, kept.dump())
        written = super().put_unless_changed(key, data, etag)
        self.conflicts += not written
        return written


@pytest.mark.parametrize("kept_before", [True, False], ids=["kept-labels", "first-sync"])
def test_a_sync_that_read_before_an_erasure_starts_over_and_never_writes_the_item_back(kept_before):
    table = CountingTable()
    for n in range(3):
        table.put(label(n, NOW - DAY + n))
    erased = "ticket:email:T-1:0"
    bucket = ErasedMeanwhile(table, erased, erasures=0)
    if kept_before:
        sync(bucket, table, NOW - DAY / 2)
    table.put(label(3, NOW - 3600))  # a new label: this sync writes
    bucket.erasures = 1

    synced = sync(bucket, table, NOW)

    assert (bucket.conflicts, synced.restarts) == (1, 1)
    assert erased not in {row["item_key"] for row in synced.rows} and len(synced.rows) == 3
    written = KeptLabels.load(bucket.get(labels_key(POLICY)), "kept")
    assert erased not in written.rows and written.erased_at == NOW
    # an erasure before the first sync leaves only a marker: this sync still read the partition whole
    assert synced.full_read is not kept_before
    assert written.full_read_at == (NOW + DAY / 2 if kept_before else NOW + DAY)  # the second whole read to come


def test_a_sync_that_meets_a_change_every_time_gives_up_naming_the_object():
    table = CountingTable()
    table.put(label(1, NOW - DAY))
    bucket = ErasedMeanwhile(table, "ticket:email:T-9:0", erasures=labels_module.WRITE_ATTEMPTS)
    with pytest.raises(labels_module.LabelsKeptChanging, match="labels/support-ticket.jsonl.gz: changed under each of 5"):
        sync(bucket, table, NOW)
