"""The evaluation CLI end to end on the shipped sets with the real embedded model: in-process
(the shared `embedded_engine`) and through a real decision server over HTTP
(`decision_server_url`). `--limit` keeps the runtime modest; `make eval` runs the full sets."""

import json
import shutil

import pytest

from bench.evaluate.__main__ import main
from bench.evaluate.runners import EngineRunner

pytestmark = pytest.mark.model

GROUPS = {"support-ticket/queue", "incident/priority", "incident/team", "jevbench"}


def test_cli_in_process_on_the_shipped_sets(embedded_engine, tmp_path, capsys):
    from decision_router.policies import POLICY_DIR

    shipped = {p.name: p.read_text() for p in POLICY_DIR.glob("*.json")}
    out = tmp_path / "report"
    argv = ["--limit", "2", "--decode-limit", "2", "--no-progress", "--out", str(out)]
    assert main(argv, runner=EngineRunner(embedded_engine)) == 0

    report = json.loads((out / "report.json").read_text())
    # 2 tickets, 2 incidents × 2 questions, 2 JevBench tasks
    assert (report["decisions"], report["requests"]) == (8, 6)
    assert report["row_errors"] == [] and report["scoring_failures"] == []
    assert set(report["calibration"]) == GROUPS
    for group in report["calibration"].values():
        assert len(group["threshold_table"]) == 21
        assert 0.05 <= group["temperature_fit"]["temperature"] <= 20.0
        assert group["temperature_fit"]["log_loss"] <= group["temperature_fit"]["log_loss_at_1"] + 1e-9
        assert sum(b["count"] for b in group["reliability_before"]) == group["decisions"]
    assert report["calibration"]["incident/team"]["policy_now"]["temperature"] == 1.0

    # The report's numbers are the model's: a ticket scored alone gives the same logits again.
    row = next(r for r in report["rows"] if r["group"] == "support-ticket")
    from bench.evaluate.cases import load_file

    case = next(c for c in load_file(POLICY_DIR.parents[2] / "bench/data/support-tickets.jsonl", 2).cases if c.case_id == row["case"])
    again = embedded_engine.decide_one(case.decisions[0].decision)
    assert again.option_logits == pytest.approx(row["option_logits"], abs=1e-4)
    correct = sum(r["option_ids"][max(range(len(r["probabilities_t1"])), key=r["probabilities_t1"].__getitem__)] == r["gold"] for r in report["rows"])
    assert report["overall"]["accuracy"] == pytest.approx(correct / 8)
    assert len(report["misses"]) == 8 - correct

    decode = report["decode_comparison"]
    assert decode["decisions"] == 2 and decode["failed"] == 0
    assert decode["ratio_median"] > 0 and len(decode["generation"]["examples"]) == 2

    for name in ("reliability.png", "latency.png", "thresholds.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (out / "report.md").read_text()
    for heading in ("## Temperature", "## Thresholds", "## Latency", "## Decode comparison", "## Policy change: incident"):
        assert heading in markdown

    printed = capsys.readouterr().out
    assert "policy support-ticket: proposed" in printed and '+      "temperature":' in printed
    # without --write-policy nothing is written
    assert {p.name: p.read_text() for p in POLICY_DIR.glob("*.json")} == shipped


def test_cli_over_http_with_bad_rows_and_policy_write(decision_server_url, tmp_path, capsys):
    from decision_router.policies import POLICY_DIR, load_policy

    policy = tmp_path / "support-ticket.json"
    shutil.copy(POLICY_DIR / "support-ticket.json", policy)
    data = tmp_path / "tickets.jsonl"
    rows = [json.loads(line) for line in (POLICY_DIR.parents[2] / "bench/data/support-tickets.jsonl").read_text().splitlines()]
    lines = [json.dumps({**row, "policy": str(policy)}) for row in (rows[0], rows[20], rows[30])]
    lines.insert(1, json.dumps({"policy": str(policy), "item": rows[1]["item"], "gold": "refunds"}))
    # valid row, but its prompt is far over the container's token limit: the server refuses it
    huge = {"id": "huge", "family": "f", "state": "word " * 6000, "question": {"type": "noul", "instructions": "Long?"}, "expected": "yes"}
    lines.append(json.dumps(huge))
    data.write_text("\n".join(lines) + "\n")

    out = tmp_path / "report"
    argv = [str(data), "--url", decision_server_url, "--decode-limit", "1", "--no-progress", "--out", str(out), "--write-policy", "--strict"]
    assert main(argv) == 1  # --strict: a bad row was skipped

    report = json.loads((out / "report.json").read_text())
    assert report["decisions"] == 3
    assert report["row_errors"] == [f"{data}:2: gold.queue: 'refunds' is not an option (options: billing, account_access, technical_fault, how_to, sales)"]
    (failure,) = report["scoring_failures"]
    assert failure.startswith(f"{data}:5: (scoring): HTTP 400") and "token" in failure
    err = capsys.readouterr().err
    assert "bad row, skipped" in err and "not scored" in err
    assert report["run"]["runner"].startswith("decision container at http://127.0.0.1:")
    assert report["decode_comparison"]["decisions"] == 1

    group = report["calibration"][f"{policy}/queue"]
    written = load_policy(policy).question("queue")
    assert written.temperature == round(group["temperature_fit"]["temperature"], 3)
    assert written.thresholds.min_confidence == group["recommended_min_confidence"]
    assert report["policy_changes"][0]["written"] is True


def test_cli_without_usable_rows_exits_2(tmp_path, capsys):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"policy": "support-ticket"}\n')
    assert main([str(data), "--no-progress", "--out", str(tmp_path / "r")]) == 2
    assert "item: missing" in capsys.readouterr().err
