"""The model signals shipped for the shipped labelled sets: `make learn` finds them for its model
(or `make fit`'s store), and the file shipped for the embedded model covers every decision of the
shipped sets (a changed prompt, question or item would leave rows missing: the file must then be
made again). How the store reads the file: tests/training/test_signals_store.py."""

from __future__ import annotations

from decision_contract.signals import SHARD_SUFFIX, write_shard
from decision_server.model_files import describe, embedded_model_path
from evaluation.cases import load_file
from local.learn import SHIPPED_SIGNALS, signals_at_hand
from training.features import case_decisions
from training.fitting import SHIPPED
from training.signals_store import SHIPPED_SIGNALS as STORE_SHIPPED
from training.signals_store import SignalsStore, shipped_path


def two_rows(path, model_sha256):
    write_shard(path, model_sha256, ["a" * 64, "b" * 64], [[0.5, 1.0], [1.5, -1.0]], [[1.0, 0.0], [0.0, 1.0]], [0.5, 0.5],
                ["lettered-v2"] * 2, compress=True)


def test_make_learn_trains_on_the_shipped_sets_when_the_model_s_signals_are_at_hand(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF not really")
    shipped, cache = tmp_path / "signals", tmp_path / "fit-cache"
    assert SHIPPED_SIGNALS == STORE_SHIPPED
    assert not signals_at_hand(model, shipped, cache)
    two_rows(shipped_path(describe(model).sha256, shipped), describe(model).sha256)
    assert signals_at_hand(model, shipped, cache)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"another model")
    assert not signals_at_hand(other, shipped, cache)
    (cache / ("e" * 64)).mkdir(parents=True)
    (cache / f"{'e' * 64}.npz").write_bytes(b"make fit's cache of an earlier layout")
    assert not signals_at_hand(other, shipped, cache)  # neither an empty store folder nor the old file
    two_rows(cache / ("e" * 64) / f"local-1{SHARD_SUFFIX}", "e" * 64)
    assert signals_at_hand(other, shipped, cache)


def test_the_file_shipped_for_the_embedded_model_covers_every_shipped_decision():
    sha256 = describe(embedded_model_path()).sha256
    path = shipped_path(sha256)
    assert path.is_file(), f"{path.name}: no signals shipped for the embedded model (python -m training.shipped_signals)"
    cases = [c for p in SHIPPED for c in load_file(p).cases if c.kind == "policy"]
    keys = case_decisions(cases, sha256)[1]
    store = SignalsStore(None)
    store.include_shipped(sha256)
    missing = store.missing(keys)
    assert not missing, f"{len(missing)} of {len(set(keys))} shipped decisions have no signals: make the file again"
