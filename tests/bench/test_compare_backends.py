"""bench.compare_backends on the real embedded model: the same engine on both sides must agree
exactly, and the report must count every decision of every case (a shared-state batch too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.compare_backends import _parse_overrides, compare
from evaluation.cases import load_file

pytestmark = pytest.mark.model
DATA = Path(__file__).resolve().parents[2] / "bench" / "data"


def test_identical_backends_agree_exactly_over_singles_and_batches(embedded_engine):
    cases = load_file(DATA / "support-tickets.jsonl", limit=1).cases + load_file(DATA / "incidents.jsonl", limit=1).cases
    assert [len(case.decisions) for case in cases] == [1, 2]  # one single, one shared-state batch

    report = compare(embedded_engine, embedded_engine, cases)

    assert report["decisions"] == 3
    assert report["argmax_agreement"] == 1.0
    assert report["max_abs_probability_delta"] == 0.0
    assert set(report["latency_seconds_per_decision"]) == {"baseline", "candidate"}
    assert report["candidate_over_baseline_latency"] > 0


def test_engine_settings_are_parsed_as_typed_overrides():
    assert _parse_overrides("n_gpu_layers=999,threads=16") == {"n_gpu_layers": 999, "threads": 16}
    assert _parse_overrides("model_path=/m.gguf") == {"model_path": "/m.gguf"}
    with pytest.raises(SystemExit, match="not KEY=VALUE"):
        _parse_overrides("threads")
