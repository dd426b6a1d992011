"""make bench-public on a LIMIT slice: both public sets through make fit-history with the real
embedded model, the scoreboard written beside the runs (how long a run takes is the benchmark's
to say, not a test's)."""

from __future__ import annotations

import json

import pytest

from bench import public_run

pytestmark = [pytest.mark.model, pytest.mark.server]


def test_a_limit_slice_of_both_public_sets_runs_through_fit_history_and_writes_the_table(tmp_path):
    assert public_run.main(["--limit", "16", "--out", str(tmp_path), "--cache", str(tmp_path / "cache")]) == 0
    table = (tmp_path / "RESULTS.md").read_text()
    assert "Casanueva et al., 2020, CC BY 4.0" in table and "Larson et al., 2019, CC BY 3.0" in table
    for name in ("banking77", "clinc150"):
        report = json.loads((tmp_path / name / "fit/report.json").read_text())
        assert report["n_train"] == 16 and report["options"] == 2
        assert {"accuracy", "macro_f1", "ece", "auto_share", "auto_precision"} <= set(report["baseline"])
        assert f"| {name} | 2 | **our head**" in table
    clinc = json.loads((tmp_path / "clinc150/fit/report.json").read_text())
    assert clinc["out_of_scope"]["items"] == 1  # oos_test queries are in TEST
    assert clinc["read"]["out_of_scope"] == {"label": "oos", "data": 1, "test": 1}  # and oos_train's in DATA, no option
    assert "auroc" in clinc["novelty"]
    assert "Novelty signals on clinc150's TEST" in table and "| the kept novelty score |" in table
    assert "Novelty signals on banking77" not in table  # no out-of-scope items to compare on


@pytest.mark.parametrize("name, named", [("clinc150", True), ("banking77", False)])
def test_the_out_of_scope_label_is_named_to_the_fitter_where_a_set_has_one(tmp_path, name, named):
    command = public_run.fit_history_command(name, tmp_path / "d", tmp_path / "t", tmp_path / "o", None, None, None)
    assert ("--out-of-scope-label" in command) == named
    if named:
        assert command[command.index("--out-of-scope-label") + 1] == "oos"


def test_the_novelty_signals_are_compared_on_the_runs_own_arguments(tmp_path):
    fitted = public_run.fit_history_command("clinc150", tmp_path / "d", tmp_path / "t", tmp_path / "o", None, None,
                                            tmp_path / "cache", "criterion-first")
    command = public_run.novelty_methods_command("clinc150", tmp_path / "d", tmp_path / "t", tmp_path / "o", None,
                                                 tmp_path / "cache", "criterion-first")
    assert command[1:3] == ["-m", "bench.novelty_methods"] and command[3:] == fitted[3:]


def test_the_out_of_scope_cell_says_what_novelty_added():
    figures = {"out_of_scope": {"items": 10, "caught": 0.8, "in_scope_sent_to_review": 0.05},
               "novelty": {"head_thresholds_alone": {"caught": 0.5, "in_scope_sent_to_review": 0.02}, "auroc": 0.9321}}
    assert public_run.out_of_scope_cell(figures) == "80.0 % / 5.0 % (without novelty: 50.0 % / 2.0 %; novelty AUROC 0.932)"
    assert public_run.out_of_scope_cell({"out_of_scope": figures["out_of_scope"]}) == "80.0 % / 5.0 %"
    assert public_run.out_of_scope_cell({}) == "–"


def test_clinc150_gives_its_out_of_scope_training_queries_as_data_labelled_oos():
    train, test = public_run.clinc150()
    assert len(train) == 15100 and sum(row["label"] == "oos" for row in train) == 100
    assert sum(row["label"] == "oos" for row in test) == 1000 and len(test) == 5500
    train, test = public_run.banking77()
    assert (len(train), len(test), len({row["label"] for row in train})) == (10003, 3080, 77)


def test_the_answered_cell_flags_a_precision_below_the_target():
    kept = {"auto_share": 0.871, "auto_precision": 0.975, "auto_precision_lower_bound": 0.968}
    assert public_run.answered_cell(kept, 0.97) == "87.1 % (97.5 %, ≥ 96.8 %)"
    missed = {"auto_share": 0.973, "auto_precision": 0.955, "auto_precision_lower_bound": 0.948}
    assert public_run.answered_cell(missed, 0.97) == "97.3 % (95.5 %, ≥ 94.8 %; **target missed by 1.5 points**)"
    assert public_run.answered_cell({"auto_share": 0.0, "auto_precision": None, "auto_precision_lower_bound": None},
                                    0.97) == "0.0 % (nothing answered alone)"
