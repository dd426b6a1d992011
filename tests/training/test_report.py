"""`make fit`'s report: whether the test split's automatic answers kept the promised precision,
and why a question routes nothing alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from training import report


def fit(max_error: float = 0.03, min_confidence: float | None = 0.8, items_needed: int | None = None):
    return SimpleNamespace(targets=SimpleNamespace(max_error=max_error),
                           head=SimpleNamespace(min_confidence=min_confidence, items_needed=items_needed))


def test_a_test_split_below_the_target_is_flagged_with_by_how_much():
    q = report.kept_promise(fit(), {"head": {"auto_routed_accuracy": 0.955}})
    assert q["target_precision"] == pytest.approx(0.97)
    assert q["target_missed"] is True and q["missed_by"] == pytest.approx(0.015)
    assert q["routed_alone"] is True and q["items_needed"] is None
    assert "TARGET MISSED" in report.verdict(q) and "1.5% below the promised 97.0%" in report.verdict(q)


def test_a_kept_target_says_nothing():
    q = report.kept_promise(fit(), {"head": {"auto_routed_accuracy": 0.99}})
    assert q["target_missed"] is False and q["missed_by"] == 0.0 and report.verdict(q) == ""


def test_nothing_routed_alone_says_how_many_items_it_would_take():
    q = report.kept_promise(fit(min_confidence=None, items_needed=99), {"head": {"auto_routed_accuracy": None}})
    assert q["target_missed"] is False and q["routed_alone"] is False and q["items_needed"] == 99
    assert "NOTHING IS ROUTED ALONE" in report.verdict(q) and "at least 99 labelled items" in report.verdict(q)
    assert report.kept_promise(fit(), {})["target_missed"] is False  # no test split: nothing to miss


def summary_question(**promise) -> dict:
    cv = {"accuracy": 0.9, "log_loss": 0.3, "ece": 0.02, "auto_routed_share": 0.0, "auto_routed_accuracy": None,
          "auto_routed_lower_bound": None}
    return {"cross_validated": {r: cv for r in report.READOUTS}, "test": {}, "head_written": True, "beats_chance": True,
            "chance_rate": 0.25, "regularisation": 100.0, "model_weight": 0.5, "head_temperature": 0.7,
            "thresholds": {"min_confidence": 1.0, "min_margin": 0.0, "by_option": {}}, "max_auto_error": 0.03,
            "overtakes_letters_at": 25, "under_assignment": None, "learning_curve": [], **promise}


def test_the_markdown_report_says_the_head_was_written_and_the_verdict():
    """The Decisions section names the head written and, in bold, why nothing is routed alone (its
    verdict): the clause that broke `make fit` at its very end when a local name hid `verdict`."""
    kept = report.kept_promise(fit(min_confidence=None, items_needed=99), {})
    summary = {"run": {"command": "python -m training", "model": {"file": "m.gguf", "sha256": "0" * 64},
                       "data": ["bench/data/incidents.jsonl"], "seconds": 1.0},
               "questions": {"incident/team": summary_question(**kept)}, "policy_changes": []}
    text = report.markdown(summary)
    (line,) = [line for line in text.splitlines() if line.startswith("- **incident/team**")]
    assert line.startswith("- **incident/team**: head written. C = 100.0")
    assert line.endswith(f" **{report.verdict(kept)}**.") and "NOTHING IS ROUTED ALONE" in line
