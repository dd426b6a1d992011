"""The one signals store (training/signals_store.py) that `make fit`, relearning and `make
fit-history` read: float16 shards found by sorted keys, what is put written as one more shard,
shards written elsewhere moved in or read where they are (the shipped file, relearning's kept
one), and one compressed file of any keys written back out."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from decision_contract import DecisionResult, ModelInfo
from decision_contract.signals import SHARD_SUFFIX, read_shard, write_shard
from evaluation.runners import RunFailure
from training.signals_store import SignalsStore, shipped_path

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


def shard(path, indexes, model=MODEL.sha256, version="direct-options-v1"):
    return write_shard(path, model, [key(i) for i in indexes], [[i, 0.5, -0.5, 2.0] for i in indexes],
                       [[i, -1.0] for i in indexes], [0.25] * len(indexes), [version] * len(indexes))


def test_the_store_finds_each_key_in_its_shard_and_gathers_rows_in_the_order_asked(tmp_path):
    folder = tmp_path / MODEL.sha256
    for start in (0, 5):
        shard(folder / f"part-{start}{SHARD_SUFFIX}", range(start, start + 5))
    (folder / "notes.txt").write_text("not a shard")
    store = SignalsStore(folder)
    assert len(store) == 10 and key(3) in store and key(11) not in store
    asked = [key(7), key(2), key(11), key(7), key(12), key(11)]
    assert store.missing(asked) == [2, 4]  # the first of each key it lacks, once
    store.put(key(11), result(11))
    store.put(key(12), result(12))
    gathered = store.gather(asked)
    assert gathered.hidden.dtype == np.float16
    assert [float(h[0]) for h in gathered.hidden] == [7, 2, 11, 7, 12, 11]
    assert [float(z[0]) for z in gathered.logits] == [7, 2, 11, 7, 12, 11]
    assert gathered.versions == ["direct-options-v1"] * 6 and float(gathered.mass[0]) == 0.25
    # what was put is a shard now, and a new store over the folder finds everything
    assert len(list(folder.glob(f"*{SHARD_SUFFIX}"))) == 3
    assert SignalsStore(folder).missing(asked) == []


def test_a_key_no_shard_holds_is_refused_when_gathered(tmp_path):
    store = SignalsStore(tmp_path / "none")
    with pytest.raises(RunFailure, match="1 item"):
        store.gather([key(1)])


def test_without_a_folder_the_store_keeps_answers_in_memory():
    store = SignalsStore(None)
    store.put(key(1), result(1))
    assert store.missing([key(1), key(2)]) == [1]
    assert float(store.gather([key(1)]).hidden[0][0]) == 1.0
    assert set(store.rows([key(1), key(2)])) == {key(1)}  # the rows it holds, the others left out


def test_shards_written_elsewhere_join_the_store_under_their_own_name_or_a_fresh_one(tmp_path):
    made = tmp_path / "batch"
    write_shard(made / f"part-00000{SHARD_SUFFIX}", MODEL.sha256, [key(1)], [[1.0, 0, 0, 0]], [[1.0, 0.0]], [0.5], ["v"])
    store = SignalsStore(tmp_path / "store")
    store.adopt([made / f"part-00000{SHARD_SUFFIX}"])
    write_shard(made / f"part-00000{SHARD_SUFFIX}", MODEL.sha256, [key(2)], [[2.0, 0, 0, 0]], [[1.0, 0.0]], [0.5], ["v"])
    store.adopt([made / f"part-00000{SHARD_SUFFIX}"])
    assert len(list((tmp_path / "store").glob(f"*{SHARD_SUFFIX}"))) == 2
    assert store.missing([key(1), key(2)]) == []
    assert [read_shard(p).keys[0] for p in sorted((tmp_path / "store").glob(f"*{SHARD_SUFFIX}"))] in (
        [key(1), key(2)], [key(2), key(1)])


def test_the_shipped_file_is_read_where_it_is_and_counts_only_what_the_store_lacked(tmp_path):
    shipped = tmp_path / "shipped"
    shard(shipped_path(MODEL.sha256, shipped), range(6))
    before = shipped_path(MODEL.sha256, shipped).read_bytes()
    store = SignalsStore(tmp_path / "store")
    store.put(key(0), result(0))  # asked of the endpoint already
    store.save()
    assert store.include_shipped(MODEL.sha256, shipped) == 5
    assert store.missing([key(i) for i in range(6)]) == []
    assert shipped_path(MODEL.sha256, shipped).read_bytes() == before  # never moved or changed
    assert len(list((tmp_path / "store").glob("*"))) == 1  # the shard put; the shipped file not copied in
    assert SignalsStore(tmp_path / "other").include_shipped("e" * 64, shipped) == 0  # none shipped for that model


def test_a_file_of_another_model_or_not_a_shard_is_refused_by_name(tmp_path):
    path = shard(tmp_path / f"kept{SHARD_SUFFIX}", range(2))
    with pytest.raises(ValueError, match=f"signals of model {MODEL.sha256}, not {'d' * 64}"):
        SignalsStore(None).include(path, "d" * 64)
    (tmp_path / "old.npz").write_bytes(b"an earlier layout")
    with pytest.raises(ValueError, match="old.npz: not a signals shard"):
        SignalsStore(None).include(tmp_path / "old.npz", MODEL.sha256)


def test_rows_known_without_asking_are_written_per_model_and_read_back_in_float16(tmp_path):
    store = SignalsStore(tmp_path / "store")
    hidden = np.array([0.1, -3.25, 7.5, 1e-3], dtype=np.float32)
    store.put_row(key(1), MODEL.sha256, (hidden, np.array([0.5, -0.5, 1.5]), 0.75, "lettered-v2"))
    store.put_row(key(2), "e" * 64, (hidden, np.array([1.0, 0.0]), 0.5, "lettered-v2"))
    store.save()
    models = sorted(read_shard(p).model_sha256 for p in (tmp_path / "store").glob(f"*{SHARD_SUFFIX}"))
    assert models == sorted([MODEL.sha256, "e" * 64])  # one shard a model: a shard holds one model's rows
    got_hidden, logits, mass, version = SignalsStore(tmp_path / "store").rows([key(1)])[key(1)]
    assert got_hidden.dtype == np.float32 and np.array_equal(got_hidden, hidden.astype(np.float16).astype(np.float32))
    assert list(logits) == [0.5, -0.5, 1.5] and mass == 0.75 and version == "lettered-v2"


def test_one_compressed_file_of_the_keys_asked_reads_back_as_the_store_holds_them(tmp_path):
    shard(tmp_path / "store" / f"a{SHARD_SUFFIX}", range(4))
    store = SignalsStore(tmp_path / "store")
    store.put(key(9), result(9))
    out = store.write_file(tmp_path / "kept.npz", MODEL.sha256, [key(1), key(9), key(3), key(42)])
    written = read_shard(out)
    assert sorted(written.keys) == sorted([key(1), key(9), key(3)]) and written.model_sha256 == MODEL.sha256
    again = SignalsStore(None)
    assert again.include(out, MODEL.sha256) == 3
    for k in (key(1), key(9), key(3)):
        a, b = again.rows([k])[k], store.rows([k])[k]
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2:] == b[2:]
