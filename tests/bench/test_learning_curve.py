"""bench/learning_curve.py's parts that need no model: the sizes it runs, the fit-history command
of each head (the prompt layout passed on), and a size's table row (each head's chosen C). The
runs themselves are `make fit-history`'s, tested in tests/training."""

from __future__ import annotations

import pytest

from bench import learning_curve


def test_sizes_are_counts_of_training_items_and_all_is_every_row():
    assert learning_curve.sizes_of("25,100, 1000,all", 10_003) == [25, 100, 1000, 10_003]


@pytest.mark.parametrize("spec, says", [
    ("25,ten", "'ten' is neither a positive number of training items nor 'all'"),
    ("0", "'0' is neither"),
    ("25,20000", "20000 is more training items than DATA's 10003 rows"),
])
def test_a_size_that_is_no_count_of_data_rows_is_refused_by_name(spec, says):
    with pytest.raises(ValueError, match=says):
        learning_curve.sizes_of(spec, 10_003)


def test_bad_sizes_stop_the_command_before_anything_runs(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "a", "label": "x"}\n', encoding="utf-8")
    with pytest.raises(SystemExit) as stopped:
        learning_curve.main(["--data", str(data), "--test", str(data), "--sizes", "all,5", "--out", str(tmp_path / "o")])
    assert stopped.value.code == 2 and "5 is more training items than DATA's 1 rows" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("layout", [None, "criterion-first", "evidence-first"])
def test_the_layout_is_passed_to_fit_history(tmp_path, layout):
    command = learning_curve.fit_history_command(tmp_path / "d", tmp_path / "t", tmp_path / "o", "1", layout=layout)
    assert command[1:3] == ["-m", "training.history"]
    assert command[command.index("--model-weight") + 1] == "1"
    assert ("--layout" in command) == (layout is not None)
    if layout:
        assert command[command.index("--layout") + 1] == layout


def test_a_layout_fit_history_does_not_know_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        learning_curve.main(["--data", str(tmp_path), "--test", str(tmp_path), "--layout", "options-last"])
    assert "--layout: invalid choice: 'options-last'" in capsys.readouterr().err


def report(accuracy: float, C: float, baseline: float = 0.5) -> dict:
    return {"n_test": 100, "options": 7, "in_scope_accuracy": accuracy, "auto_share": 0.25, "auto_precision": 0.975,
            "baseline": {"in_scope_accuracy": baseline}, "holdout": {"regularisation": C}, "out_of_scope": {"items": 20}}


def test_a_row_shows_each_heads_chosen_C_and_marks_the_full_set():
    row = learning_curve.row(1000, 10_003, report(0.7, 100.0), report(0.74, 30.0))
    assert row == "| 1,000 | 7 | 80 | 70.0 % | 74.0 % | 50.0 % | 100 / 30 | 25.0 % | 25.0 % (97.5 %) |"
    assert learning_curve.row(10_003, 10_003, report(0.9, 10.0), report(0.92, 10.0)).startswith("| 10,003 (all) |")
    assert len(row.split("|")) == len(learning_curve.HEADER[0].split("|"))
