"""make fit-history on exports as a help desk has them: a spreadsheet's CSV (byte order mark,
semicolons, Windows-1252, blank labels, one label spelled three ways), hostile ones (more than
256 labels, a 200 KB cell), labels that are not the deployment's destinations, an OUT folder
already used, the text alone fitted (and its learning curve) before anything is scored, and the
command's last line. Every run is the real `training.history.main`; where scoring must not be
reached a runner that refuses to be asked stands in for the model."""

from __future__ import annotations

import csv
import json
import tracemalloc

import pytest

from decision_router.domain.policies import load_policy
from local.cloudformation import REPO_ROOT
from training import history, history_outlook, history_report
from training.history_policy import HistoryError, iter_rows, label_key, spellings

from .test_history import WordRunner, export, write_csv, write_jsonl

SAMPLE = REPO_ROOT / "events/help-desk-export"
#: The ticket function's destinations in template.yaml (what make demo and a deployed stack have).
DESTINATIONS = ["account-access", "app-oncall", "billing", "data-oncall", "platform-oncall", "product-help", "sales",
                "security-oncall", "technical-support"]


class NoModel:
    """Fails the test if the command asks for the model's signals."""

    description = "no model"

    def model_info(self):
        raise AssertionError("the model was asked, where nothing should be scored")

    def close(self) -> None:
        pass


def fit(tmp_path, data, *extra, test=None, runner=None, text="Document", label="Topic_group", out=None):
    argv = ["--data", str(data), "--test", str(test or data), "--text", text, "--label", label,
            "--out", str(out or tmp_path / "out"), "--cache", str(tmp_path / "cache"), *extra]
    return history.main(argv, runner=runner or NoModel())


def desk_rows(n_per: int = 12) -> list[dict]:
    texts = {"Hardware": "my laptop screen is broken and the docking station does not charge",
             "Access": "I cannot log in, my password expired and the account is locked",
             "Purchase": "please order a second monitor, budget approved, purchase order"}
    return [{"Document": f"{text} ({i})", "Topic_group": group} for group, text in texts.items() for i in range(n_per)]


def desk_targets(tmp_path):
    path = tmp_path / "desk-targets.json"
    path.write_text(json.dumps({"Hardware": "technical-support", "Access": "account-access", "Purchase": "sales"}))
    return path


# ----------------------------------------------------------------------------------- destinations
def test_labels_that_are_no_destination_get_a_starting_map_to_edit_before_anything_is_scored(tmp_path, capsys):
    data = write_csv(tmp_path / "desk.csv", desk_rows())
    assert fit(tmp_path, data) == 2
    err = capsys.readouterr().err
    path = tmp_path / "out" / "targets.start.json"
    start = json.loads(path.read_text())
    # each label a destination of its own name (slugified), not most of them on one queue
    assert start == {"Access": "access", "Hardware": "hardware", "Purchase": "purchase"}
    assert f"wrote {path}" in err and f"TARGETS={path}" in err and "nothing was scored" in err
    # the new destinations named, the command that adds their queues, and the nearest existing ones as the other way
    assert "no queue for 3 of them (access, hardware, purchase)" in err
    assert f"Either give them queues: make queues TARGETS={path} adds their queues to template.yaml (access → " \
           "AccessQueue, hardware → HardwareQueue, purchase → PurchaseQueue)" in err
    assert "DESTINATION_QUEUES" not in err  # the five edits by hand are the docs', not the advice
    assert "or edit the map so those labels route to destinations the deployment has (nearest by name: " \
           "'Access' → account-access" in err
    # passed unedited, the map is refused with the same command
    assert fit(tmp_path, data, "--targets", str(path)) == 2
    err = capsys.readouterr().err
    assert "destination(s) the deployment does not have: access, hardware, purchase" in err
    assert f"make queues TARGETS={path} adds their queues" in err and "hardware → HardwareQueue" in err
    # the user edits it and passes it: the policy routes to the deployment's destinations
    start.update(Access="account-access", Hardware="technical-support", Purchase="sales")
    path.write_text(json.dumps(start))
    assert fit(tmp_path, data, "--targets", str(path), "--text-only") == 0
    policy = load_policy(tmp_path / "out" / "policy.json", known_targets=DESTINATIONS)  # the demo's own check
    assert {policy.target(o.id) for o in policy.questions[0].options} == {"account-access", "technical-support", "sales"}


def test_a_map_kept_outside_out_is_taken_though_the_starting_map_is_there(tmp_path, capsys):
    data = write_csv(tmp_path / "desk.csv", desk_rows())
    assert fit(tmp_path, data) == 2  # writes OUT/targets.start.json
    mine = tmp_path / "elsewhere" / "targets.json"
    mine.parent.mkdir()
    mine.write_text(json.dumps({"Access": "account-access", "*": "technical-support"}))
    assert fit(tmp_path, data, "--targets", str(mine), "--text-only") == 0
    assert "is not empty" not in capsys.readouterr().err
    # a map of the user's own named targets.json inside OUT is the user's, never the tool's
    other = tmp_path / "out2"
    other.mkdir()
    (other / "targets.json").write_text(mine.read_text())
    assert fit(tmp_path, data, "--targets", str(other / "targets.json"), "--text-only", out=other) == 0
    assert (other / "targets.json").read_text() == mine.read_text()


def test_a_map_naming_a_destination_the_deployment_lacks_is_refused_at_fit_time(tmp_path, capsys):
    data = write_csv(tmp_path / "desk.csv", desk_rows())
    (tmp_path / "map.json").write_text(json.dumps({"Access": "helpdesk-l1", "*": "technical-support"}))
    assert fit(tmp_path, data, "--targets", str(tmp_path / "map.json")) == 2
    err = capsys.readouterr().err
    assert "destination(s) the deployment does not have: helpdesk-l1 (its destinations: account-access," in err
    assert f"make queues TARGETS={tmp_path / 'map.json'} adds their queues to template.yaml (helpdesk-l1 → " \
           "HelpdeskL1Queue)" in err


def test_labels_named_as_destinations_route_there_without_a_map(tmp_path, capsys):
    rows = [{**row, "Topic_group": {"Hardware": "technical-support", "Access": "account-access",
                                     "Purchase": "sales"}[row["Topic_group"]]} for row in desk_rows()]
    data = write_csv(tmp_path / "desk.csv", rows)
    assert fit(tmp_path, data, "--text-only") == 0
    assert "each label is a destination's name: it routes there" in capsys.readouterr().err
    load_policy(tmp_path / "out" / "policy.json", known_targets=DESTINATIONS)


def test_the_demo_says_how_to_fix_a_policy_whose_targets_the_stack_lacks(tmp_path):
    from local.demo import read_policies

    data = write_csv(tmp_path / "desk.csv", desk_rows())
    assert fit(tmp_path, data, "--text-only", "--targets", "own") == 0
    _, problems = read_policies([tmp_path / "out" / "policy.json"])
    (problem,) = problems
    assert "unknown target(s) access, hardware, purchase" in problem
    assert "The stack has no queue for access, hardware, purchase" in problem
    # the command that adds each unknown target's queue, and the demo to run again after it
    assert "make queues TARGET=access,hardware,purchase adds their queues to template.yaml " \
           "(access → AccessQueue, hardware → HardwareQueue, purchase → PurchaseQueue)" in problem
    assert f"then make demo POLICY={tmp_path / 'out' / 'policy.json'} routes to them" in problem
    # or the other way: targets the stack has
    assert "Or route those options to a destination the stack has (nearest by name: access → account-access)." \
        in problem  # a hint only where a name is alike: hardware and purchase have none
    assert "TARGETS=map.json" in problem and "OUT/targets.start.json" in problem


def test_a_target_whose_queue_name_is_taken_gets_another():
    from local.destinations import queue_resource, template_resources

    taken = template_resources()
    assert "EscalationQueue" in taken
    assert queue_resource("escalation", taken) == "EscalationTeamQueue"
    assert queue_resource("it-hardware", taken) == "ItHardwareQueue"
    assert queue_resource("3d-print", taken) == "Team3dPrintQueue"


# ----------------------------------------------------------------------------------- the OUT folder, the name
def test_a_used_out_folder_is_refused_unless_replaced_and_the_default_name_is_announced(tmp_path, capsys):
    data = write_csv(tmp_path / "desk.csv", desk_rows())
    out = tmp_path / "IT Desk"
    (out / "heads").mkdir(parents=True)
    (out / "heads" / "old.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    argv = ["--targets", str(desk_targets(tmp_path)), "--text-only"]
    assert fit(tmp_path, data, *argv, out=out) == 2
    assert f"--out {out} is not empty (heads, notes.txt): name another folder, or pass --replace" in capsys.readouterr().err
    assert fit(tmp_path, data, *argv, "--replace", out=out) == 0
    err = capsys.readouterr().err
    assert "the policy is named 'it_desk', after the OUT folder (NAME= / --name to choose)" in err
    assert json.loads((out / "policy.json").read_text())["name"] == "it_desk"
    assert [p.name for p in (out / "heads").iterdir()] == ["Topic_group.json"]  # the stale head is gone
    assert (out / "notes.txt").read_text() == "mine"  # what is not fit-history's stays
    assert fit(tmp_path, data, *argv, "--replace", "--name", "it-desk", out=out) == 0
    assert "after the OUT folder" not in capsys.readouterr().err
    assert json.loads((out / "policy.json").read_text())["name"] == "it-desk"


# ----------------------------------------------------------------------------------- reading
def test_a_spreadsheets_csv_with_a_byte_order_mark_and_semicolons_is_read(tmp_path, capsys):
    path = tmp_path / "excel.csv"
    lines = ["Document;Topic_group"] + [f"\"{r['Document']}; from the desk\";{r['Topic_group']}" for r in desk_rows()]
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")
    rows = list(iter_rows(path, ["Document"], "Topic_group"))
    assert rows[0] == {"Document": "my laptop screen is broken and the docking station does not charge (0); from the desk",
                       "Topic_group": "Hardware"}
    assert fit(tmp_path, path, "--targets", str(desk_targets(tmp_path)), "--text-only") == 0
    assert f"{path}: 36 rows (semicolon-separated CSV)" in capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "report.json").read_text())["read"]["data"]["delimiter"] == ";"


def test_a_tab_separated_export_is_read(tmp_path):
    path = tmp_path / "tabs.csv"
    path.write_text("Document\tTopic_group\nthe printer jams, again\tHardware\n", encoding="utf-8")
    assert list(iter_rows(path, ["Document"], "Topic_group")) == [{"Document": "the printer jams, again",
                                                                     "Topic_group": "Hardware"}]


def test_a_windows_1252_export_is_named_as_such_and_read_with_its_encoding(tmp_path, capsys):
    path = tmp_path / "latin.csv"
    text = "Document,Topic_group\n" + "".join(f"écran cassé {i},Hardware\nmot de passe oublié {i},Access\n" for i in range(12))
    path.write_bytes(text.encode("cp1252"))
    with pytest.raises(HistoryError, match=r"latin.csv:2: not utf-8 text \(byte 0xe9 at byte 1 of the line\): pass the "
                                           r"export's encoding, e.g. --encoding cp1252"):
        list(iter_rows(path, ["Document"], "Topic_group"))
    assert fit(tmp_path, path, "--text-only") == 2 and "--encoding cp1252 (make fit-history ENCODING=cp1252" \
        in capsys.readouterr().err
    assert next(iter_rows(path, ["Document"], "Topic_group", encoding="cp1252")) == {"Document": "écran cassé 0",
                                                                                     "Topic_group": "Hardware"}
    with pytest.raises(HistoryError, match="--encoding 'klingon': no such encoding"):
        list(iter_rows(path, ["Document"], "Topic_group", encoding="klingon"))


def test_rows_without_a_label_stop_the_run_named_or_are_skipped_and_counted(tmp_path, capsys):
    rows = desk_rows() + [{"Document": "no one filed this one", "Topic_group": ""}] * 3
    data = write_csv(tmp_path / "desk.csv", rows)
    argv = ["--targets", str(desk_targets(tmp_path)), "--text-only"]
    assert fit(tmp_path, data, *argv) == 2
    assert f"{data}:38: field 'Topic_group' is missing or empty (to leave rows without a label out, counted in the " \
           "report: --skip-unlabelled, make fit-history SKIP_UNLABELLED=1)" in capsys.readouterr().err
    assert fit(tmp_path, data, *argv, "--skip-unlabelled") == 0
    assert "3 row(s) without a label left out" in capsys.readouterr().err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["read"]["data"] == {"rows": 36, "unlabelled_skipped": 3, "delimiter": ","}


def test_labels_spelled_several_ways_are_refused_named_or_merged_when_asked(tmp_path, capsys):
    rows = [{"text": f"invoice question {i}", "label": label} for i, label in
            enumerate(["Billing"] * 12 + ["billing"] * 4 + ["BILLING."] * 2)]
    rows += [{"text": f"cannot log in {i}", "label": "Tier 1"} for i in range(12)] + [{"text": "login", "label": "tier-1"}]
    data = write_jsonl(tmp_path / "labels.jsonl", rows)
    assert fit(tmp_path, data, text="text", label="label") == 2
    err = capsys.readouterr().err
    assert "2 label(s) spelled more than one way, which would each be an option: 'Billing' (24), 'billing' (8), " \
           "'BILLING.' (4); 'Tier 1' (24), 'tier-1' (2)" in err and "--merge-labels (make fit-history MERGE_LABELS=1)" in err
    assert fit(tmp_path, data, "--merge-labels", "--targets", "own", "--text-only", text="text", label="label") == 0
    assert "'billing' → 'Billing'" in capsys.readouterr().err
    options = json.loads((tmp_path / "out" / "policy.json").read_text())["questions"][0]["options"]
    assert [o["description"] for o in options] == ["Billing", "Tier 1"]
    assert label_key("B-I-L-L-ING ") == label_key("billing") and spellings({"a": 1, "b": 1}, merge=False) == {}


# ----------------------------------------------------------------------------------- hostile exports
def test_more_labels_than_a_question_holds_is_a_named_error(tmp_path, capsys):
    rows = [{"text": f"item {i} about group {g}", "label": f"group-{g}"} for g in range(300) for i in range(2)]
    data = write_jsonl(tmp_path / "many.jsonl", rows)
    assert fit(tmp_path, data, "--min-examples", "2", "--targets", "own", text="text", label="label") == 2
    assert "300 options from 300 labels (at least 2 training items each); a question has at most 256: raise " \
           "MIN_EXAMPLES" in capsys.readouterr().err


def test_a_cell_longer_than_the_csv_readers_limit_is_named_with_its_row(tmp_path, capsys):
    rows = desk_rows(3)
    rows.insert(4, {"Document": "x" * 200_000, "Topic_group": "Hardware"})
    data = write_csv(tmp_path / "big.csv", rows)
    assert fit(tmp_path, data) == 2
    assert f"{data}:6: row 5: a cell longer than the reader's limit of 131,072 characters (leave the row out of the " \
           "export or cut the cell)" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_limit_reads_no_more_of_the_export_than_it_keeps(tmp_path, suffix):
    path = tmp_path / f"big{suffix}"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if suffix == ".csv":
            writer.writerow(["text", "label"])
        for i in range(100_000):
            text, label = f"ticket number {i} " + "lorem ipsum " * 12, f"g{i % 20}"
            if suffix == ".csv":
                writer.writerow([text, label])
            else:
                handle.write(json.dumps({"text": text, "label": label}) + "\n")
    assert path.stat().st_size > 15_000_000
    tracemalloc.start()
    try:
        rows = list(iter_rows(path, ["text"], "label", limit=10))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(rows) == 10 and peak < 1_000_000, peak  # a few lines' worth, not the file's 15 MB


# ----------------------------------------------------------------------------------- before scoring, and the last line
def test_the_text_alone_is_fitted_first_and_its_curve_printed_before_the_model_scores(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", export(4, 60, seed=1))
    test = write_jsonl(tmp_path / "test.jsonl", export(4, 10, seed=2))
    code = fit(tmp_path, train, "--targets", "own", test=test, runner=WordRunner(), text="subject,body", label="label")
    assert code == 0
    err = capsys.readouterr().err
    curve_at, model_at = err.index("the text alone, by training rows"), err.index("model words.gguf")
    assert curve_at < model_at, err  # measured before the model is asked anything
    assert "the model's signals are likely to help" in err or "likely to add a point or two at most" in err
    assert "MODEL=none (--text-only) skips it" in err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    points = report["text_curve"]["points"]
    assert [p["rows"] for p in points] == [50, 100, 192] and all(0 <= p["accuracy"] <= 1 for p in points)
    assert report["text_curve"]["held_out"] == 48 and report["scoring"] == "model"
    assert report["model"]["sha256"] == "a" * 64


@pytest.mark.parametrize("layout, n_items, takes", [
    (None, 46_000, "takes about 2.8 h"),  # a lettered question's: 46,000 / 4.6 a second
    ("evidence-first", 46_000, "(evidence-first) takes about 2.8 h"),
    ("criterion-first", 46_000, "(criterion-first) takes about 1.1 h"),  # 46,000 / 11.5
    ("criterion-first", 13_083, "(criterion-first) takes about 19 min"),  # Banking77's, measured 18 min
])
def test_the_scoring_estimate_is_at_the_rate_of_the_layout_asked(layout, n_items, takes):
    curve = {"points": [{"rows": 50, "accuracy": 0.8}, {"rows": 100, "accuracy": 0.81}]}
    outlook = history_outlook.curve_outlook(curve, 1000, 10, n_items, False, layout)
    assert f"scoring {n_items} items {takes} on 2 cores" in outlook, outlook
    assert history_outlook.SCORING_ITEMS_PER_SECOND["criterion-first"] > 2 * history_outlook.SCORING_ITEMS_PER_SECOND["evidence-first"]


def test_the_outlook_of_a_lettered_question_takes_no_layout(tmp_path, capsys):
    # four options are asked lettered: --layout shapes only a many-option question's signals decision
    train = write_jsonl(tmp_path / "train.jsonl", export(4, 60, seed=1))
    test = write_jsonl(tmp_path / "test.jsonl", export(4, 10, seed=2))
    assert fit(tmp_path, train, "--targets", "own", "--layout", "criterion-first", test=test, runner=WordRunner(),
               text="subject,body", label="label") == 0
    err = capsys.readouterr().err
    assert "scoring 280 items takes about 1 min on 2 cores" in err, err  # (240 + 40) / 4.6 a second, no layout named


def test_text_only_scores_nothing_and_says_so_in_the_report(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", export(4, 30, seed=1))
    test = write_jsonl(tmp_path / "test.jsonl", export(4, 10, seed=2))
    # NoModel fails the test if anything is scored
    assert fit(tmp_path, train, "--targets", "own", "--text-only", test=test, text="subject,body", label="label") == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["scoring"] == "text-only" and report["model"] is None
    assert report["head"]["model_weight"] == 0.0 and not report["head"]["reads_model"]
    assert report["accuracy"] > 0.5
    load_policy(tmp_path / "out" / "policy.json")  # a head that reads no model loads on any endpoint


def test_the_last_line_states_the_verdict_plainly(tmp_path, capsys):
    data = write_csv(tmp_path / "desk.csv", desk_rows(8))
    assert fit(tmp_path, data, "--targets", str(desk_targets(tmp_path)), "--text-only", "--min-examples", "2") == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("fit-history: NOTHING IS ROUTED ALONE: out of fold, no threshold shows 97.0% precision"), last
    report = {"target_precision": 0.97, "target_missed": False, "missed_by": 0.0, "routed_alone": True,
              "items_needed": None, "auto_precision": 1.0, "auto_precision_lower_bound": 0.9}
    assert history_report.last_line(report) == ("TEST IS TOO SMALL TO CONFIRM the 97.0% target: its automatic answers were "
                                         "100.0% right, at least 90.0% with 95 % confidence")
    assert history_report.last_line({**report, "target_missed": True, "missed_by": 0.05, "auto_precision": 0.92}) \
        .startswith("TARGET MISSED: automatic answers 92.0% right on test, 5.0% below the promised 97.0%")
    assert history_report.last_line({**report, "auto_precision_lower_bound": 0.975}).startswith("target kept")


def test_the_vocabulary_itself_never_makes_two_options_of_one_label_spelled_two_ways():
    from training.history_policy import vocabulary

    with pytest.raises(HistoryError, match=r"'BILLING.' \(12\), 'Billing' \(12\); correct the export"):
        vocabulary(["Billing"] * 12 + ["BILLING."] * 12 + ["Sales"] * 12, 10, "review")


def test_text_only_refuses_what_would_score(tmp_path, capsys):
    data = write_csv(tmp_path / "desk.csv", desk_rows())
    with pytest.raises(SystemExit) as refused:  # when the arguments are read, as argparse refuses
        fit(tmp_path, data, "--text-only", "--model-weight", "1.0")
    assert refused.value.code == 2
    assert "python -m training.history: error: --text-only (MODEL=none) scores nothing" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["--on", "sagemaker"], "error: --on sagemaker needs --stack (make fit-history ON=sagemaker STACK=name)"),
    (["--on", "sagemaker", "--stack", "s", "--instances", "0"],
     "error: argument --instances: 0: a processing job runs on 1 to 100 instances"),
    (["--instances", "two"], "error: argument --instances: 'two' is not a whole number"),
])
def test_arguments_that_need_nothing_read_are_refused_when_they_are_read(tmp_path, capsys, argv, says):
    data = write_csv(tmp_path / "desk.csv", desk_rows())
    with pytest.raises(SystemExit) as refused:
        fit(tmp_path, data, *argv)
    assert refused.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
