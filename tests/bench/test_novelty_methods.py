"""python -m bench.novelty_methods: each novelty signal's separation on a fit-history run's
TEST, from the run's own cached signals (nothing scored again)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import novelty_methods
from tests.training.test_history import export, run, write_jsonl


def test_each_signal_is_read_off_the_runs_test_from_its_cache(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", export(8, 30, 1) + [{"subject": "zzz", "body": "qqq", "label": "oos"}] * 3)
    outside = [{"subject": f"weather {w}", "body": f"{w} forecast tomorrow {w}", "label": "oos"}
               for w in ("paris", "rome", "oslo", "lima", "kyiv", "baku", "pune", "nice")]
    test = write_jsonl(tmp_path / "test.jsonl", export(8, 6, 2) + outside)
    out = tmp_path / "out"
    argv = ["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
            "--out-of-scope-label", "oos", "--out", str(out), "--min-examples", "2", "--targets", "own"]
    code, _ = run(tmp_path, argv)
    assert code == 0
    capsys.readouterr()

    assert novelty_methods.main([*argv, "--cache", str(tmp_path / "cache")]) == 0  # the run's own arguments
    printed = capsys.readouterr().out
    assert "8 out-of-scope and 48 in-scope TEST items" in printed
    rows = [line for line in printed.splitlines() if line.startswith("| ") and "%" in line and "signal" not in line]
    names = [row.strip("|").split("|")[0].strip() for row in rows]
    assert names[:3] == ["the kept novelty score", "the head's confidence (1 − confidence)",
                         "its distance alone (cosine, 5 nearest training items, use-multilingual-v3)"]
    assert len(rows) == 8 + ("its surprise alone (−ln top probability)" in names)
    for row in rows:
        caught, auroc = (cell.strip() for cell in row.strip("|").split("|")[1:])
        assert 0.0 <= float(caught.rstrip(" %")) <= 100.0 and 0.0 <= float(auroc) <= 1.0

    with pytest.raises(SystemExit, match="not in"):  # it scores nothing: another cache lacks the run's signals
        novelty_methods.main([*argv, "--cache", str(tmp_path / "empty")])


def test_separation_counts_out_of_scope_items_above_the_in_scope_quantile():
    out_of_scope = np.array([False] * 100 + [True] * 10)
    score = np.concatenate([np.arange(100.0), [50.0] * 5 + [200.0] * 5])
    auroc, caught = novelty_methods.separation(out_of_scope, score, 0.04)
    assert caught == 0.5  # the 5 at 200 are above the 96th percentile of 0..99; the 5 at 50 are not
    assert auroc == pytest.approx((5 * 0.505 + 5 * 1.0) / 10)


def test_the_nearest_training_item_is_found_by_cosine_after_centring():
    train = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])  # centred at 0
    held = np.array([[2.0, 0.0], [1.0, 1.0]])
    assert novelty_methods.nearest_distance(train, held) == pytest.approx([0.0, 1 - np.sqrt(0.5)])
