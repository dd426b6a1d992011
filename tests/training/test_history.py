"""make fit-history: a labelled export becomes a policy the router loads, a head, predictions and a
report. Most tests take the model's signals from a small deterministic runner (a hidden state drawn
from the evidence's words), so they need no GGUF; one (marked `model`) scores a tiny slice of real
queries with the embedded model, and tests/bench/test_public.py runs both public sets."""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from collections import Counter

import numpy as np
import pytest

from decision_contract import LAYOUT_PROMPT_VERSIONS, DecisionResult, ModelInfo, softmax
from decision_router.domain.judging import model_entry
from decision_router.domain.model_requests import SIGNAL_OPTION_IDS, build_decisions
from decision_router.domain.policies import load_policy
from decision_router.items import parse_item
from evaluation.runners import Scored
from training import head_fit, history, history_policy, thresholds

MODEL = ModelInfo(file="words.gguf", bytes=1, sha256="a" * 64, context_size=2048, threads=1, gpu_layers=0,
                  llama_cpp_python_version="test", hidden_size=16)
WORDS = ["card", "refund", "transfer", "pin", "atm", "cash", "fee", "limit", "exchange", "top", "up", "lost", "stolen",
         "declined", "pending", "verify", "identity", "account", "close", "app", "phone", "country", "rate", "charge"]


class WordRunner:
    """A runner whose hidden state is a fixed projection of the evidence's words (what the test
    needs of a model: a signal that depends on the text, the same every time)."""

    description = "word runner"

    def __init__(self) -> None:
        self.calls = 0

    def model_info(self) -> ModelInfo:
        return MODEL

    def decide(self, decisions) -> Scored:
        self.calls += len(decisions)
        results = []
        for d in decisions:
            text = json.dumps(d.state).lower()
            hidden = np.zeros(16)
            for word in text.replace('"', " ").split():
                seed = int(hashlib.sha256(word.encode()).hexdigest()[:8], 16)
                hidden += np.random.default_rng(seed).normal(size=16)
            logits = [0.0] * len(d.options)
            results.append(DecisionResult(
                id=d.id, option_ids=d.option_ids, probabilities=softmax(logits), option_logits=logits, temperature=1.0,
                input_tokens=10, allowed_token_mass=0.5, prompt_sha256="0" * 64, prompt_version=LAYOUT_PROMPT_VERSIONS[d.layout],
                model=MODEL, timing={"tokenize_seconds": 0, "prefill_seconds": 0, "total_seconds": 0},
                hidden_state=hidden.tolist()))
        return Scored(results, 0.0)

    def close(self) -> None:
        pass


def export(n_labels: int, per_label: int, seed: int, extra: dict[str, int] | None = None) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    counts = {f"intent_{i:02d}": per_label for i in range(n_labels)} | (extra or {})
    for label, count in counts.items():
        i = int(label.rsplit("_", 1)[-1]) if label[-1].isdigit() else 99
        own = [WORDS[i % len(WORDS)], WORDS[(3 * i + 1) % len(WORDS)], f"topic{i}"]
        for _ in range(count):
            words = [rng.choice(own) for _ in range(4)] + [rng.choice(WORDS) for _ in range(3)]
            rng.shuffle(words)
            rows.append({"subject": " ".join(words[:3]), "body": " ".join(words[3:]), "label": label})
    rng.shuffle(rows)
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_csv(path, rows):
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def run(tmp_path, argv, runner=None):
    runner = runner or WordRunner()
    own = [] if "--targets" in argv else ["--targets", "own"]  # these labels are no destination's name
    code = history.main([*argv, *own, "--cache", str(tmp_path / "cache"), "--no-progress"], runner=runner)
    return code, runner


def test_an_export_of_twenty_labels_becomes_a_policy_the_router_loads_with_its_report(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", export(20, 12, 1))  # 240 rows: the fast tier's limit is 300
    test_rows = export(20, 4, 2) + [{"subject": "weather", "body": "what is the weather in paris", "label": "unknown_thing"}]
    test = write_csv(tmp_path / "test.csv", test_rows)
    out = tmp_path / "out"
    code, runner = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                                  "--out", str(out)])
    assert code == 0
    policy = load_policy(out / "policy.json")  # the routing function's own loader
    question = policy.questions[0]
    assert question.many_options and len(question.options) == 20 and question.learned_head is not None
    assert [s.field for s in policy.state] == ["subject", "body"]
    report = json.loads((out / "report.json").read_text())
    for key in ("n_train", "n_test", "options", "accuracy", "macro_f1", "ece", "auto_share", "auto_precision",
                "auto_precision_lower_bound", "target_precision", "target_missed", "missed_by", "routed_alone", "items_needed"):
        assert key in report, key
    assert set(report["baseline"]) >= {"accuracy", "auto_share", "auto_precision", "auto_precision_lower_bound"}
    assert report["holdout"]["folds"] == 5 and report["holdout"]["grid_rows"] == 240
    assert (report["n_train"], report["n_test"], report["options"]) == (240, 81, 20)
    assert report["accuracy"] > 0.6 and report["baseline"]["accuracy"] > 0.6
    assert report["out_of_scope"]["items"] == 1
    lines = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(lines) == 81 and all(set(line) == {"text", "gold", "answer", "confidence", "auto", "novelty"} for line in lines)
    assert lines[-1]["gold"] == "unknown_thing"

    # the written policy routes a ticket through the routing function's own request and judging
    item = parse_item("ticket", {"ticket_id": "T-1", "subject": "card topic0 card", "body": "card topic0",
                                 "customer": {"id": "C", "tier": "pro"}, "channel": "email", "created_at": "2026-12-01T00:00:00Z"})
    (decision,) = build_decisions(policy, item)
    assert decision.option_ids == SIGNAL_OPTION_IDS
    entry = model_entry(question, runner.decide([decision]).results[0], decision.state)
    assert entry.readout == "head" and entry.option_id == "intent_00"

    # a second run scores nothing again: the signals are cached per model
    code, again = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                                 "--out", str(tmp_path / "again")])
    assert code == 0 and again.calls == 0
    assert list((tmp_path / "cache").iterdir()) == [tmp_path / "cache" / MODEL.sha256]


def test_a_head_fitted_on_criterion_first_signals_is_asked_in_that_layout(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", export(20, 12, 1))
    test = write_jsonl(tmp_path / "test.jsonl", export(20, 2, 2))
    out = tmp_path / "out"
    code, runner = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                                  "--out", str(out), "--layout", "criterion-first", "--model-weight", "1.0"])
    assert code == 0
    outlook = json.loads((out / "report.json").read_text())["text_curve"]["outlook"]
    assert "scoring 280 items (criterion-first) takes about 1 min" in outlook  # estimated at that layout's rate
    policy = load_policy(out / "policy.json")
    assert policy.questions[0].learned_head.prompt_version == "criterion-first-v1"
    item = parse_item("ticket", {"ticket_id": "T-1", "subject": "card topic0 card", "body": "card topic0",
                                 "customer": {"id": "C", "tier": "pro"}, "channel": "email", "created_at": "2026-12-01T00:00:00Z"})
    (decision,) = build_decisions(policy, item)
    assert decision.layout == "criterion-first"
    entry = model_entry(policy.questions[0], runner.decide([decision]).results[0], decision.state)
    assert entry.readout == "head"  # not refused: the request's prompt version is the head's
    # the other layout's signals are other requests: nothing cached serves them
    code, again = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                                 "--out", str(tmp_path / "again"), "--layout", "evidence-first", "--model-weight", "1.0"])
    assert code == 0 and again.calls == 20 * 14
    outlook = json.loads((tmp_path / "again" / "report.json").read_text())["text_curve"]["outlook"]
    assert "scoring 280 items (evidence-first) takes about 1 min" in outlook


@pytest.mark.parametrize("mode", ["merge", "review"])
def test_rare_labels_are_reported_and_merged_or_left_to_review(tmp_path, mode):
    rows = export(4, 20, 3, extra={"rare_a": 3, "rare_b": 2})
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    test = write_jsonl(tmp_path / "test.jsonl", export(4, 3, 4, extra={"rare_a": 2}))
    out = tmp_path / mode
    code, _ = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "body", "--label", "label", "--out", str(out),
                             "--min-examples", "5", "--rare", mode])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["rare"] == {"min_examples": 5, "mode": mode, "labels": {"rare_a": 3, "rare_b": 2}}
    options = load_policy(out / "policy.json").questions[0].option_ids
    if mode == "merge":
        assert options[-1] == "other" and len(options) == 5 and report["n_train"] == 85
    else:
        assert "other" not in options and len(options) == 4 and report["n_train"] == 80
        assert report["out_of_scope"]["items"] == 2  # the rare label's test items must go to review


def test_a_missing_field_is_named_with_its_file_and_line(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": "a b", "label": "x"}, {"text": "", "label": "y"}])
    code, _ = run(tmp_path, ["--data", str(train), "--test", str(train), "--text", "text", "--label", "label", "--out",
                             str(tmp_path / "o")])
    assert code == 2
    assert f"{train}:2: field 'text' is missing or empty" in capsys.readouterr().err
    test = write_csv(tmp_path / "t.csv", [{"body": "a", "group": "x"}])
    code, _ = run(tmp_path, ["--data", str(test), "--test", str(test), "--text", "text", "--label", "group", "--out",
                             str(tmp_path / "o")])
    assert code == 2 and "no column 'text' (columns: body, group; delimiter: comma)" in capsys.readouterr().err


def test_targets_map_the_labels_onto_the_deployments_destinations(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", export(4, 12, 5))
    test = write_jsonl(tmp_path / "test.jsonl", export(4, 2, 6))
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"intent_00": "billing", "intent_01": "billing", "*": "product-help"}))
    argv = ["--data", str(train), "--test", str(test), "--text", "body", "--label", "label"]
    code, _ = run(tmp_path, [*argv, "--out", str(tmp_path / "mapped"), "--targets", str(targets)])
    assert code == 0
    policy = load_policy(tmp_path / "mapped/policy.json", known_targets=["billing", "product-help"])
    assert [o.target for o in policy.questions[0].options] == ["billing", "billing", "product-help", "product-help"]

    targets.write_text(json.dumps({"intent_00": "billing", "intnet_01": "sales"}))
    code, _ = run(tmp_path, [*argv, "--out", str(tmp_path / "typo"), "--targets", str(targets)])
    assert code == 2 and "1 label(s) that are no option: intnet_01" in capsys.readouterr().err
    targets.write_text(json.dumps({"intent_00": "billing"}))
    code, _ = run(tmp_path, [*argv, "--out", str(tmp_path / "partial"), "--targets", str(targets)])
    assert code == 2 and 'option(s) without a destination and no "*": intent_01, intent_02, intent_03' in capsys.readouterr().err


def test_a_fixed_model_weight_of_zero_fits_the_text_alone(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", export(4, 12, 7))
    test = write_jsonl(tmp_path / "test.jsonl", export(4, 2, 8))
    code, _ = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "body", "--label", "label",
                             "--out", str(tmp_path / "text"), "--model-weight", "0"])
    assert code == 0
    report = json.loads((tmp_path / "text/report.json").read_text())
    assert report["head"]["model_weight"] == 0.0 and not report["head"]["reads_model"]
    assert list(report["holdout"]["log_loss"]) == ["0.0"]
    head = load_policy(tmp_path / "text/policy.json").questions[0].learned_head
    assert head.hidden is None and head.model_sha256 is None


def test_option_ids_and_targets_are_made_valid_and_unique():
    ids = history_policy.option_ids(["Billing & Refunds", "billing_refunds", "__x", "Kündigung"])
    assert ids == {"Billing & Refunds": "Billing_Refunds", "billing_refunds": "billing_refunds", "__x": "x",
                   "Kündigung": "K_ndigung"}
    assert history_policy.target_of("Billing_Refunds") == "billing-refunds"


class CountingRunner:
    """The real embedded engine in this process (evaluation.runners.EngineRunner), counting the
    decisions it is asked."""

    def __init__(self, engine) -> None:
        from evaluation.runners import EngineRunner

        self.runner, self.calls = EngineRunner(engine), 0
        self.description = self.runner.description

    def model_info(self) -> ModelInfo:
        return self.runner.model_info()

    def decide(self, decisions) -> Scored:
        self.calls += len(decisions)
        return self.runner.decide(decisions)

    def close(self) -> None:
        self.runner.close()


def clinc150_slice(labels: int, per_label: int, offset: int) -> list[dict]:
    """`per_label` queries of each of the first `labels` CLINC150 intents (the shipped copy, real text)."""
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[2] / "bench/public/clinc150/data_full.json").read_text())
    by_label: dict[str, list[str]] = {}
    for text, label in data["train"]:
        by_label.setdefault(label, []).append(text)
    return [{"text": text, "label": label} for label in sorted(by_label)[:labels]
            for text in by_label[label][offset:offset + per_label]]


@pytest.mark.model
def test_the_real_model_scores_a_tiny_export_and_the_head_it_writes_reads_that_model(tmp_path, embedded_engine):
    """17 intents (one more than the letters) of real queries, 2 each to fit and 1 each to test:
    every item scored by the embedded model, the head bound to it, and a ticket routed by the
    written policy through the same engine answered by that head."""
    train = write_jsonl(tmp_path / "train.jsonl", clinc150_slice(17, 2, 0))
    test = write_jsonl(tmp_path / "test.jsonl", clinc150_slice(17, 1, 50))
    out = tmp_path / "out"
    runner = CountingRunner(embedded_engine)
    code, _ = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "text", "--label", "label",
                             "--out", str(out), "--min-examples", "2"], runner=runner)
    assert code == 0 and runner.calls == 34 + 17
    model = embedded_engine.model_info
    policy = load_policy(out / "policy.json")
    question = policy.questions[0]
    head = question.learned_head
    assert question.many_options and len(question.options) == 17
    assert head.model_sha256 == model.sha256 and head.hidden_size == model.hidden_size and head.hidden is not None
    report = json.loads((out / "report.json").read_text())
    assert (report["n_train"], report["n_test"], report["options"]) == (34, 17, 17)
    assert 0.0 <= report["accuracy"] <= 1.0 and 0.0 <= report["baseline"]["accuracy"] <= 1.0
    lines = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [line["gold"] for line in lines] == [row["label"] for row in clinc150_slice(17, 1, 50)]

    item = parse_item("ticket", {"ticket_id": "T-1", "subject": "x", "body": lines[0]["text"], "customer": {"id": "C", "tier": "pro"},
                                 "channel": "email", "created_at": "2026-12-01T00:00:00Z"})
    (decision,) = build_decisions(policy, item)
    result = runner.decide([decision]).results[0]
    assert len(result.hidden_state) == model.hidden_size
    entry = model_entry(question, result, decision.state)
    assert entry.readout == "head" and entry.head_skipped is None and entry.option_id in question.option_ids

    # the same export again: every signal comes from the cache, under the model's sha256
    again = CountingRunner(embedded_engine)
    code, _ = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "text", "--label", "label",
                             "--out", str(tmp_path / "again"), "--min-examples", "2"], runner=again)
    assert code == 0 and again.calls == 0
    assert list((tmp_path / "cache").iterdir()) == [tmp_path / "cache" / model.sha256]
    first, second = (json.loads((folder / "report.json").read_text()) for folder in (out, tmp_path / "again"))
    figures = ("accuracy", "macro_f1", "ece", "auto_share", "auto_precision", "baseline")
    assert [first[k] for k in figures] == [second[k] for k in figures]


@pytest.mark.model
@pytest.mark.server
def test_by_default_the_batch_scorer_scores_in_a_child_process_into_the_store_the_engine_reads(tmp_path, capsys,
                                                                                                 embedded_engine):
    """No runner given: the batch scorer's command scores the export in a child process (no engine
    loads in the fitting process), its probe's rate leaves the model's load out, and its signals are
    the store's under the model's keys, so the engine in this process asks nothing again."""
    train = write_jsonl(tmp_path / "train.jsonl", clinc150_slice(3, 4, 0))
    test = write_jsonl(tmp_path / "test.jsonl", clinc150_slice(3, 1, 50))
    argv = ["--data", str(train), "--test", str(test), "--text", "text", "--label", "label", "--min-examples", "2",
            "--targets", "own", "--cache", str(tmp_path / "cache"), "--no-progress"]
    assert history.main([*argv, "--out", str(tmp_path / "out")]) == 0
    promise = next(line for line in capsys.readouterr().err.splitlines() if "items here takes about" in line)
    assert promise.startswith("fit-history: scoring 15 items here takes about ")
    assert re.search(r"from the first 8 items here: [\d.]+ items/s, not counting the \d+ s the batch scorer in a child "
                     r"process took to start and load the model, which each of its 2 run\(s\) still to come takes again\)$",
                     promise), promise
    model = embedded_engine.model_info
    assert load_policy(tmp_path / "out" / "policy.json").questions[0].learned_head.model_sha256 == model.sha256
    again = CountingRunner(embedded_engine)
    assert history.main([*argv, "--out", str(tmp_path / "again")], runner=again) == 0 and again.calls == 0


@pytest.mark.server
def test_a_model_file_that_is_not_there_stops_the_run_with_the_batch_scorer_s_words(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", export(4, 10, 1))
    test = write_jsonl(tmp_path / "test.jsonl", export(4, 3, 2))
    missing = tmp_path / "missing.gguf"
    code = history.main(["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                         "--targets", "own", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
                         "--min-examples", "2", "--no-progress", "--model", str(missing)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"fit-history: the batch scorer (python -m decision_server.batch --describe --model-file {missing}) exited " \
           "with status 2; its last lines on stderr:\n" in err
    assert err.rstrip().endswith(f"decision-server batch: error: argument --model-file: {missing} is not a file")
    assert not (tmp_path / "out" / "policy.json").exists()


def test_a_tiny_export_routes_nothing_alone_and_says_how_many_items_it_would_take(tmp_path):
    # 60 rows: out of fold, no threshold can show 97 % precision with 95 % confidence (that takes 99)
    train = write_jsonl(tmp_path / "train.jsonl", export(4, 15, 11))
    test = write_jsonl(tmp_path / "test.jsonl", export(4, 5, 12))
    out = tmp_path / "tiny"
    code, _ = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                             "--out", str(out)])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["n_train"] == 60 and report["holdout"]["folds"] == 5 and report["holdout"]["grid_rows"] == 60
    assert report["holdout"]["min_confidence"] is None and report["head"]["min_confidence"] == 1.0
    assert report["routed_alone"] is False and report["items_needed"] == 99 == report["holdout"]["items_needed"]
    assert report["auto_share"] == 0.0 and report["auto_precision"] is None and report["auto_precision_lower_bound"] is None
    assert report["target_missed"] is False and report["missed_by"] == 0.0
    assert load_policy(out / "policy.json").questions[0].learned_head.thresholds.min_confidence == 1.0
    assert "NOTHING IS ROUTED ALONE" in thresholds.verdict(report) and "99 labelled items" in thresholds.verdict(report)


def test_the_report_flags_a_missed_target_and_by_how_much():
    kept = thresholds.promise(0.98, 0.97, None)
    assert kept == {"target_precision": 0.97, "target_missed": False, "missed_by": 0.0, "routed_alone": True,
                    "items_needed": None}
    missed = thresholds.promise(0.955, 0.97, None)
    assert missed["target_missed"] is True and missed["missed_by"] == pytest.approx(0.015)
    nothing = thresholds.promise(None, 0.97, 99)
    assert nothing["target_missed"] is False and nothing["routed_alone"] is False and nothing["items_needed"] == 99
    assert thresholds.verdict({"auto_precision": 0.98, **kept}) == ""
    assert "TARGET MISSED" in thresholds.verdict({"auto_precision": 0.955, **missed})
    assert "1.5% below the promised 97.0%" in thresholds.verdict({"auto_precision": 0.955, **missed})
    assert "NOTHING IS ROUTED ALONE" in thresholds.verdict({"auto_precision": None, **nothing})
    assert "at least 99 labelled items" in thresholds.verdict({"auto_precision": None, **nothing})


def test_with_a_row_or_two_an_option_the_head_keeps_terms_seen_once_and_chooses_nothing_on_unseen_options(tmp_path):
    """Twenty labels of one row each: a term of one row is often all its option has, so the head
    keeps it (as the text classifier does); and every held-out row's option is one the fitting rows
    never saw, so no held-out log loss can choose C or the model's weight (it would favour the
    flattest head): both stay at their defaults, and the report says so."""
    rows = export(20, 1, 3)
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    test = write_jsonl(tmp_path / "test.jsonl", export(20, 2, 4))
    out = tmp_path / "out"
    code, _ = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                             "--out", str(out), "--min-examples", "1"])
    assert code == 0
    holdout = json.loads((out / "report.json").read_text())["holdout"]
    assert holdout["min_df"] == 1 and holdout["judged_rows"] == 0
    assert holdout["regularisation"] == head_fit.HEAD_C and holdout["log_loss_by_C"] == {} and holdout["log_loss"] == {}
    assert holdout["model_weight"] == max(head_fit.MODEL_WEIGHTS)
    head = json.loads((out / "heads/label.json").read_text())
    seen_in = Counter(word for r in rows for word in set(f"{r['subject']} {r['body']}".split()))
    once = {word for word, n in seen_in.items() if n == 1}
    assert once and {f"w:{word}" for word in once} <= set(head["text"]["terms"])


def test_with_many_rows_an_option_only_terms_of_two_rows_are_kept_and_c_is_chosen_on_seen_options(tmp_path):
    rows = export(4, 30, 5) + [{"subject": "card card", "body": "zyzzyva refund", "label": "intent_00"}]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    test = write_jsonl(tmp_path / "test.jsonl", export(4, 3, 6))
    out = tmp_path / "out"
    code, _ = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                             "--out", str(out)])
    assert code == 0
    holdout = json.loads((out / "report.json").read_text())["holdout"]
    assert holdout["min_df"] == 2 and holdout["judged_rows"] == holdout["rows"]  # every held-out option was seen
    tried = holdout["log_loss_by_C"]  # searched outward from 10 while the held-out loss falls
    assert "10" in tried and len(tried) >= 3 and set(tried) <= {f"{c:g}" for c in head_fit.C_CHOICES}
    assert tried[f"{holdout['regularisation']:g}"] == min(tried.values())
    assert "w:zyzzyva" not in json.loads((out / "heads/label.json").read_text())["text"]["terms"]
