"""The model signals shipped for the shipped labelled sets: the compact file reads back as the
feature cache holds rows, seeds only what a cache lacks, refuses another model's file, and the
file shipped for the embedded model covers every decision of the shipped sets (a changed prompt,
question or item would leave rows missing: the file must then be made again)."""

from __future__ import annotations

import numpy as np
import pytest

from decision_server.model_files import describe, embedded_model_path
from evaluation.cases import load_file
from local.learn import SHIPPED_SIGNALS, signals_at_hand
from training import shipped_signals
from training.features import FeatureCache, request_key
from training.fitting import SHIPPED

MODEL = "c" * 64


def rows(n: int, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray, float, str]]:
    rng = np.random.default_rng(seed)
    return {f"{i:064x}": (rng.normal(0, 3, 8).astype(np.float32), rng.normal(0, 1, 3 + i % 3), float(rng.uniform()),
                          "direct-options-v1" if i % 2 else "lettered-v2") for i in range(n)}


def test_the_compact_file_reads_back_as_the_cache_holds_rows(tmp_path):
    written = rows(7)
    path = shipped_signals.signals_path(MODEL, tmp_path)
    shipped_signals.write(path, MODEL, written)
    read = shipped_signals.read(path, MODEL)
    assert set(read) == set(written)
    for key, (hidden, logits, mass, version) in written.items():
        got = read[key]
        assert np.allclose(got[0], hidden, rtol=1e-3, atol=1e-3) and got[0].dtype == np.float32  # float16 inside
        assert np.allclose(got[1], logits, rtol=1e-6) and len(got[1]) == len(logits)
        assert got[2] == pytest.approx(mass, rel=1e-6) and got[3] == version
    with pytest.raises(ValueError, match=f"signals of model {MODEL}, not {'d' * 64}"):
        shipped_signals.read(path, "d" * 64)


def test_seeding_adds_only_what_the_cache_lacks_and_nothing_for_another_model(tmp_path):
    shipped = rows(6)
    shipped_signals.write(shipped_signals.signals_path(MODEL, tmp_path), MODEL, shipped)
    cache = FeatureCache(tmp_path / "cache" / f"{MODEL}.npz")
    own = next(iter(shipped))
    cache.rows[own] = (np.zeros(8, np.float32), np.zeros(3), 1.0, "asked")  # asked of the endpoint: kept
    assert shipped_signals.seed(cache, MODEL, tmp_path) == 5 and cache.dirty
    assert cache.rows[own][3] == "asked" and set(cache.rows) == set(shipped)
    cache.save()
    assert set(FeatureCache(cache.path).rows) == set(shipped)
    other = FeatureCache(None)
    assert shipped_signals.seed(other, "e" * 64, tmp_path) == 0 and not other.rows and not other.dirty


def test_make_learn_trains_on_the_shipped_sets_when_the_model_s_signals_are_at_hand(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF not really")
    shipped, cache = tmp_path / "signals", tmp_path / "fit-cache"
    assert SHIPPED_SIGNALS == shipped_signals.SIGNALS_DIR
    assert not signals_at_hand(model, shipped, cache)
    shipped_signals.write(shipped_signals.signals_path(describe(model).sha256, shipped), describe(model).sha256, rows(2))
    assert signals_at_hand(model, shipped, cache)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"another model")
    assert not signals_at_hand(other, shipped, cache)


def test_the_file_shipped_for_the_embedded_model_covers_every_shipped_decision():
    sha256 = describe(embedded_model_path()).sha256
    path = shipped_signals.signals_path(sha256)
    assert path.is_file(), f"{path.name}: no signals shipped for the embedded model (python -m training.shipped_signals)"
    cases = [c for p in SHIPPED for c in load_file(p).cases if c.kind == "policy"]
    keys = {request_key(sha256, d.decision.model_copy(update={"return_hidden_state": True}))
            for c in cases for d in c.decisions}
    missing = keys - set(shipped_signals.read(path, sha256))
    assert not missing, f"{len(missing)} of {len(keys)} shipped decisions have no signals: make the file again"
