"""fit-history's parts that must hold at a help desk's size: the export read as a stream, the
signal cache (float16 shards, found by sorted keys), and the stratified samples a large history
is fitted on. How their time and memory grow is measured by `python -m bench.scale` (make bench), not here."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from decision_contract import DecisionResult, ModelInfo
from decision_contract.signals import SHARD_SUFFIX, read_shard, write_shard
from training import history_signals, learn
from training.history_policy import HistoryError, iter_rows

MODEL = ModelInfo(file="m.gguf", bytes=1, sha256="c" * 64, context_size=2048, threads=1, gpu_layers=0,
                  llama_cpp_python_version="test", hidden_size=4)


def key(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def result(i: int) -> DecisionResult:
    return DecisionResult(id="q", option_ids=["known", "unknown"], probabilities=[0.5, 0.5], option_logits=[float(i), -1.0],
                          temperature=1.0, input_tokens=1, allowed_token_mass=0.25, prompt_sha256="0" * 64,
                          prompt_version="direct-options-v1", model=MODEL,
                          timing={"tokenize_seconds": 0, "prefill_seconds": 0, "total_seconds": 0},
                          hidden_state=[float(i), 0.5, -0.5, 2.0])


def test_the_cache_finds_each_key_in_its_shard_and_gathers_rows_in_the_order_asked(tmp_path):
    folder = tmp_path / MODEL.sha256
    for start in (0, 5):
        keys = [key(i) for i in range(start, start + 5)]
        write_shard(folder / f"part-{start}{SHARD_SUFFIX}", MODEL.sha256, keys, [[i, 0.5, -0.5, 2.0] for i in range(start, start + 5)],
                    [[i, -1.0] for i in range(start, start + 5)], [0.25] * 5, ["direct-options-v1"] * 5)
    (folder / "notes.txt").write_text("not a shard")
    cache = history_signals.SignalCache(folder)
    assert len(cache) == 10
    asked = [key(7), key(2), key(11), key(7), key(12), key(11)]
    assert cache.missing(asked) == [2, 4]  # the first of each key it lacks, once
    cache.put(key(11), result(11))
    cache.put(key(12), result(12))
    gathered = cache.gather(asked)
    assert gathered.hidden.dtype == np.float16
    assert [float(h[0]) for h in gathered.hidden] == [7, 2, 11, 7, 12, 11]
    assert [float(z[0]) for z in gathered.logits] == [7, 2, 11, 7, 12, 11]
    assert gathered.versions == ["direct-options-v1"] * 6 and float(gathered.mass[0]) == 0.25
    # what was put is a shard now, and a new cache over the folder finds everything
    assert len(list(folder.glob(f"*{SHARD_SUFFIX}"))) == 3
    assert history_signals.SignalCache(folder).missing(asked) == []


def test_a_key_no_shard_holds_is_refused_when_gathered(tmp_path):
    cache = history_signals.SignalCache(tmp_path / "none")
    with pytest.raises(Exception, match="1 item"):
        cache.gather([key(1)])


def test_without_a_folder_the_cache_keeps_answers_in_memory(tmp_path):
    cache = history_signals.SignalCache(None)
    cache.put(key(1), result(1))
    assert cache.missing([key(1), key(2)]) == [1]
    assert float(cache.gather([key(1)]).hidden[0][0]) == 1.0


def test_shards_written_elsewhere_join_the_cache_under_their_own_name_or_a_fresh_one(tmp_path):
    made = tmp_path / "batch"
    write_shard(made / f"part-00000{SHARD_SUFFIX}", MODEL.sha256, [key(1)], [[1.0, 0, 0, 0]], [[1.0, 0.0]], [0.5], ["v"])
    cache = history_signals.SignalCache(tmp_path / "cache")
    cache.adopt([made / f"part-00000{SHARD_SUFFIX}"])
    write_shard(made / f"part-00000{SHARD_SUFFIX}", MODEL.sha256, [key(2)], [[2.0, 0, 0, 0]], [[1.0, 0.0]], [0.5], ["v"])
    cache.adopt([made / f"part-00000{SHARD_SUFFIX}"])
    assert len(list((tmp_path / "cache").glob(f"*{SHARD_SUFFIX}"))) == 2
    assert cache.missing([key(1), key(2)]) == []
    assert [read_shard(p).keys[0] for p in sorted((tmp_path / "cache").glob(f"*{SHARD_SUFFIX}"))] in (
        [key(1), key(2)], [key(2), key(1)])


def test_a_stratified_sample_keeps_every_label_in_proportion_and_a_floor_of_the_rare_ones():
    gold = np.array([0] * 9000 + [1] * 900 + [2] * 100 + [3] * 5)
    rows = learn.stratified_sample(gold, 2000, seed=0)
    counts = np.bincount(gold[rows])
    assert list(counts) == [1799, 179, learn.SAMPLE_FLOOR, 5]
    assert list(rows) == sorted(set(rows))
    assert list(learn.stratified_sample(gold[:50], 2000, seed=0)) == list(range(50))
    assert list(learn.stratified_sample(gold, 2000, seed=0)) == list(rows)  # seeded


def test_the_export_is_read_as_a_stream_and_a_limit_stops_reading(tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps({"text": f"t{i}", "label": "a", "unused": "x" * 50}) + "\n" for i in range(3))
                    + "this line is not JSON\n")
    rows = iter_rows(path, ["text"], "label", limit=3)
    assert next(rows) == {"text": "t0", "label": "a"}  # only the named fields are kept
    assert len(list(rows)) == 2
    with pytest.raises(HistoryError, match=r"export.jsonl:4: not JSON"):
        list(iter_rows(path, ["text"], "label"))
