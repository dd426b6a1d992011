"""fit-history's parts that must hold at a help desk's size: the export read as a stream and the
stratified samples a large history is fitted on (the signals store's, float16 shards found by
sorted keys: tests/training/test_signals_store.py). How their time and memory grow is measured
by `python -m bench.scale` (make bench), not here."""

from __future__ import annotations

import json

import numpy as np
import pytest

from training import learn
from training.history_policy import HistoryError, iter_rows


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
