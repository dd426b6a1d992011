"""Loading labelled decisions: both formats, every answer form, and bad rows named precisely."""

import json

import pytest

from evaluation.cases import load_file, parse_row

TICKET = {
    "ticket_id": "T-1",
    "subject": "Charged twice",
    "body": "Two charges for one invoice.",
    "customer": {"id": "C-1", "tier": "pro"},
    "channel": "email",
    "created_at": "2026-05-04T08:00:00Z",
}
INCIDENT = {
    "incident_id": "I-1",
    "title": "Checkout down",
    "description": "All checkouts fail with 500.",
    "service": "checkout-api",
    "severity": "sev2",
    "source": "datadog",
    "reported_at": "2026-06-01T00:05:00Z",
}


def row(**fields) -> str:
    return json.dumps(fields)


def test_a_ticket_row_becomes_the_policys_decision_with_its_gold():
    case = parse_row(row(policy="support-ticket", item=TICKET, gold="billing", note="easy"), "f.jsonl", 3)
    assert (case.case_id, case.kind, case.family, case.note, case.where) == ("T-1", "policy", "support-ticket", "easy", "f.jsonl:3")
    assert (case.split, case.group, case.unknown, case.cv_group) == (None, None, {}, "row f.jsonl:3")
    (labelled,) = case.decisions
    assert labelled.question == "queue" and labelled.gold == "billing"
    assert labelled.decision.option_ids[labelled.gold_index] == "billing"
    assert case.formulas == {"queue": "normalized_peak"}


def test_an_incident_row_keeps_both_questions_on_one_state():
    case = parse_row(row(policy="incident", item=INCIDENT, gold={"priority": "P1", "team": "application"}), "f", 1)
    assert [(d.question, d.gold) for d in case.decisions] == [("priority", "P1"), ("team", "application")]
    first, second = (d.decision for d in case.decisions)
    assert first.state == second.state


def test_gold_for_only_some_questions_scores_only_those():
    case = parse_row(row(policy="incident", item=INCIDENT, gold={"team": "data"}), "f", 1)
    assert [d.question for d in case.decisions] == ["team"]


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"policy": "nope", "item": TICKET, "gold": "billing"}, "policy", "no shipped policy named 'nope'"),
        ({"policy": "support-ticket", "item": TICKET, "gold": "refunds"}, "gold.queue", "'refunds' is not an option"),
        ({"policy": "incident", "item": INCIDENT, "gold": "P1"}, "gold", "give {question: option id}"),
        ({"policy": "incident", "item": INCIDENT, "gold": {"urgency": "P1"}}, "gold.urgency", "no such question"),
        ({"policy": "support-ticket", "item": {**TICKET, "channel": "fax"}, "gold": "billing"}, "item", "channel:"),
        ({"policy": "support-ticket", "gold": "billing"}, "item", "missing"),
        ({"policy": "support-ticket", "item": TICKET, "gold": "billing", "split": ""}, "split", "non-empty text"),
        ({"policy": "support-ticket", "item": TICKET, "gold": "billing", "group": True}, "group", "non-empty text or an integer"),
    ],
)
def test_bad_policy_rows_name_the_field(fields, field, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_row(json.dumps(fields), "f", 1)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        # clearly JevBench tasks: that format's error, with the task's id, never "neither format"
        ({"id": "t7", "family": "f", "state": "s", "expected": "yes"}, "question", "JevBench task 't7': missing"),
        ({"id": "t8", "family": "f", "question": {"type": "noul", "instructions": "Spam?"}, "expected": "yes"}, "state",
         "JevBench task 't8': missing"),
        ({"id": "t9", "state": "s", "question": {"type": "noul", "instructions": "Spam?"}}, "family",
         "JevBench task 't9': must be non-empty text"),
        # clearly a policy row without its policy
        ({"item": {"ticket_id": "T-1"}, "gold": "billing"}, "policy", "missing"),
        ({"colour": "blue"}, "(line)", "neither format"),
    ],
)
def test_a_row_clearly_of_one_format_gets_that_formats_error(fields, field, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_row(json.dumps(fields), "f", 1)
    assert info.value.field == field


NOUL = {"type": "noul", "instructions": "Is this spam?"}
CHOICE = {"type": "choice", "instructions": "Which intent?", "criteria": {"fee": "A fee", "lost_card": None}}
SCORE = {"type": "score", "instructions": "How many stars?", "criteria": ["bad", "ok", "good"]}


@pytest.mark.parametrize(
    ("question", "extra", "expected", "gold"),
    [
        (NOUL, {}, "yes", "yes"),
        (NOUL, {}, False, "no"),
        (NOUL, {}, "no", "no"),
        # JevBench lists noul labels no-first; the options stay yes, no: names decide, not positions
        (NOUL, {"labels": ["no", "yes"]}, "yes", "yes"),
        (NOUL, {"labels": ["no", "yes"]}, "no", "no"),
        (NOUL, {"labels": ["yes", "no"]}, "yes", "yes"),
        (CHOICE, {}, "lost_card", "lost_card"),
        (CHOICE, {"labels": ["lost_card", "fee"]}, "fee", "fee"),
        (SCORE, {}, 2, "2"),
        (SCORE, {}, 2.0, "2"),
        (SCORE, {"labels": ["0", "1", "2"]}, 1, "1"),
        (SCORE, {"labels": ["0", "1", "2"]}, "1", "1"),
        (SCORE, {}, "ok", "1"),
    ],
)
def test_jevbench_answers_in_every_form(question, extra, expected, gold):
    task = {"id": "t1", "family": "fam", "state": "some text", "question": question, "expected": expected, **extra}
    case = parse_row(json.dumps(task), "f", 1)
    (labelled,) = case.decisions
    assert (case.kind, case.family, labelled.gold) == ("jevbench", "fam", gold)
    assert labelled.decision.option_ids[labelled.gold_index] == gold
    assert case.formulas == {question["type"]: "normalized_peak"}


def test_jevbench_uses_the_system_one_mapping():
    from decision_server.systemone.mapping import question_decision
    from decision_server.systemone.models import ChoiceQuestion

    case = parse_row(json.dumps({"id": "t1", "family": "f", "state": {"a": 1}, "question": CHOICE, "expected": "fee"}), "f", 1)
    assert case.decisions[0].decision == question_decision("t1", ChoiceQuestion.model_validate(CHOICE), {"a": 1})


@pytest.mark.parametrize(
    ("task", "field", "message"),
    [
        ({"question": {"type": "choice", "criteria": {"only": None}}}, "question.criteria", "needs 2 to 16"),
        ({"question": {"type": "rank", "instructions": "x"}}, "question", "does not match any of the expected tags|Input tag"),
        ({"expected": 5, "question": SCORE}, "expected", "level 5 outside 0..2"),
        ({"expected": 1, "question": NOUL}, "expected", "only a score question"),
        ({"expected": "maybe", "question": NOUL}, "expected", "'maybe' names no answer"),
        ({"labels": ["a"], "question": NOUL}, "labels", "1 labels for 2 options"),
        # custom noul names cannot say which one is yes
        ({"labels": ["entailment", "not_entailment"], "question": NOUL}, "labels", r'noul task\'s labels are \["no", "yes"\]'),
        ({"labels": ["no", "no"], "question": NOUL}, "labels", "are not this task's answers"),
        ({"labels": ["fee", "lost"], "question": CHOICE, "expected": "fee"}, "labels", r'here \["fee", "lost_card"\]'),
        # positional star labels are not JevBench's: score labels are the level indices
        ({"labels": ["1", "2", "3"], "question": SCORE, "expected": 0}, "labels", r'\["0", "1", …\]'),
        ({"expected": None}, "expected", "missing or null"),
        ({"expected": 1.5, "question": SCORE}, "expected", "must be a label"),
        ({"split": 3}, "split", "non-empty text"),
        ({"group": ""}, "group", "non-empty text or an integer"),
        ({"provenance": "hand-written"}, "provenance", "must be an object"),
        ({"family": ""}, "family", "non-empty"),
        ({"state": ""}, "state", "at least 1 character|non-empty text"),
    ],
)
def test_bad_jevbench_rows_name_the_field(task, field, message):
    full = {"id": "t1", "family": "f", "state": "text", "question": NOUL, "expected": "yes", **task}
    with pytest.raises(ValueError, match=message) as info:
        parse_row(json.dumps(full), "f", 1)
    assert info.value.field == field


def test_a_file_with_bad_rows_keeps_the_good_ones(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join(
            [
                row(policy="support-ticket", item=TICKET, gold="billing"),
                "{not json",
                "",
                "[1, 2]",
                row(id="t1", family="f", state="x", question=NOUL, expected="no"),
                row(something="else"),
            ]
        )
        + "\n"
    )
    loaded = load_file(path)
    assert [c.case_id for c in loaded.cases] == ["T-1", "t1"]
    assert [(e.line, e.field) for e in loaded.errors] == [(2, "(line)"), (4, "(line)"), (6, "(line)")]
    assert "not valid JSON" in str(loaded.errors[0]) and str(loaded.errors[0]).startswith(f"{path}:2: (line):")


def test_limit_counts_usable_rows(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(row(id=f"t{i}", family="f", state="x", question=NOUL, expected="yes") for i in range(5)))
    assert len(load_file(path, limit=2).cases) == 2


def test_a_missing_file_is_a_row_error_not_a_crash(tmp_path):
    loaded = load_file(tmp_path / "absent.jsonl")
    assert loaded.cases == [] and loaded.errors[0].field == "(file)"


@pytest.mark.parametrize("name", ["support-tickets.jsonl", "incidents.jsonl", "jevbench-sample.jsonl"])
def test_the_shipped_sets_load_without_errors(name):
    from pathlib import Path

    loaded = load_file(Path(__file__).resolve().parents[2] / "bench/data" / name)
    assert loaded.errors == [] and loaded.warnings == []
    minimum = {"support-tickets.jsonl": 40, "incidents.jsonl": 30, "jevbench-sample.jsonl": 12}[name]
    assert len(loaded.cases) >= minimum
    golds = {d.gold for c in loaded.cases for d in c.decisions}
    options = {o for c in loaded.cases for d in c.decisions for o in d.decision.option_ids}
    assert golds <= options
    if name == "jevbench-sample.jsonl":
        assert {d.question for c in loaded.cases for d in c.decisions} == {"noul", "choice", "score"}
    else:
        # every option of every question appears as a gold answer somewhere
        per_question = {}
        for c in loaded.cases:
            for d in c.decisions:
                per_question.setdefault(d.question, (set(d.decision.option_ids), set()))[1].add(d.gold)
        assert all(offered == used for offered, used in per_question.values())


def test_the_pipelines_review_export_is_loadable_labelled_data():
    from decision_router.review.completion import labelled_example

    stored = {"policy_name": "incident", "item": json.dumps(INCIDENT), "answers": json.dumps({"priority": "P2", "team": "data"})}
    case = parse_row(json.dumps(labelled_example(stored)), "export.jsonl", 1)
    assert [(d.question, d.gold) for d in case.decisions] == [("priority", "P2"), ("team", "data")]


# --- the published JevBench row, metadata, split selection ------------------------------------

PUBLISHED = {
    "id": "pub-1",
    "family": "policy",
    "state": "Status: paid on 2026-05-04.",
    "question": {"type": "noul", "instructions": "Is the invoice paid?", "criteria": {"true": "PAID", "false": "OPEN"}},
    "labels": ["no", "yes"],
    "expected": "yes",
    "split": "public",
    "group": "invoice-7",
    "provenance": {"source": "hand-written", "license": "CC-BY-4.0", "label_basis": "rubric", "exclude_reason": None, "reviewer": "a"},
}


def test_a_published_jevbench_row_loads_with_its_metadata_and_no_warning(tmp_path):
    path = tmp_path / "published.jsonl"
    path.write_text(json.dumps(PUBLISHED) + "\n" + json.dumps({**PUBLISHED, "id": "pub-2", "expected": "no"}) + "\n")
    loaded = load_file(path)
    assert loaded.errors == [] and loaded.warnings == []
    first, second = loaded.cases
    assert (first.split, first.group, first.cv_group) == ("public", "invoice-7", "group invoice-7")
    assert first.provenance == PUBLISHED["provenance"]  # open-ended: extra provenance keys are kept
    # labels ["no", "yes"] against options (yes, no): "yes" is the yes option, not position 1
    assert first.decisions[0].decision.option_ids == ["yes", "no"]
    assert (first.decisions[0].gold, first.decisions[0].gold_index) == ("yes", 0)
    assert (second.decisions[0].gold, second.decisions[0].gold_index) == ("no", 1)


def test_unknown_fields_are_kept_with_a_warning_not_dropped(tmp_path):
    path = tmp_path / "extra.jsonl"
    path.write_text(
        json.dumps({**PUBLISHED, "difficulty": "hard", "tier": 2}) + "\n"
        + row(policy="support-ticket", item=TICKET, gold="billing", source="crm-export") + "\n"
    )
    loaded = load_file(path)
    assert loaded.errors == []
    assert [c.case_id for c in loaded.cases] == ["pub-1", "T-1"]
    assert loaded.cases[0].unknown == {"difficulty": "hard", "tier": 2}
    assert loaded.cases[1].unknown == {"source": "crm-export"}
    assert [(w.line, w.field) for w in loaded.warnings] == [(1, "difficulty"), (1, "tier"), (2, "source")]
    assert str(loaded.warnings[2]) == f"{path}:2: source: unknown field, kept as metadata (the row is scored)"


def test_policy_rows_take_a_split_and_a_group():
    case = parse_row(row(policy="incident", item=INCIDENT, gold={"team": "data"}, split="train", group=7), "f", 4)
    assert (case.split, case.group, case.cv_group, case.unknown) == ("train", "7", "group 7", {})


def test_split_selection_reads_only_the_chosen_splits_in_both_formats(tmp_path):
    path = tmp_path / "mixed.jsonl"
    rows = [
        row(policy="support-ticket", item={**TICKET, "ticket_id": "T-train"}, gold="billing", split="train"),
        row(policy="support-ticket", item={**TICKET, "ticket_id": "T-test"}, gold="billing", split="test"),
        row(policy="support-ticket", item={**TICKET, "ticket_id": "T-none"}, gold="billing"),
        json.dumps({**PUBLISHED, "id": "j-test", "split": "test"}),
        json.dumps({**PUBLISHED, "id": "j-public"}),
        "{broken",  # its split cannot be read: still a bad row
        row(policy="support-ticket", item={**TICKET, "channel": "fax"}, gold="billing", split="train"),  # not selected: not validated
        row(policy="support-ticket", item={**TICKET, "channel": "fax"}, gold="billing", split="test"),
    ]
    path.write_text("\n".join(rows) + "\n")

    test = load_file(path, splits=["test"])
    assert [c.case_id for c in test.cases] == ["T-test", "j-test"]
    assert test.skipped == {"train": 2, "(no split)": 1, "public": 1}
    assert [(e.line, e.field) for e in test.errors] == [(6, "(line)"), (8, "item")]

    both = load_file(path, splits=["train", "public"])
    assert [c.case_id for c in both.cases] == ["T-train", "j-public"]
    assert load_file(path, splits=["test"], limit=1).cases[0].case_id == "T-test"
    # without a selection every row is read
    assert [c.case_id for c in load_file(path).cases] == ["T-train", "T-test", "T-none", "j-test", "j-public"]


def test_the_shipped_jevbench_sample_is_in_the_published_format():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench/data/jevbench-sample.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for task in rows:
        assert set(task) == {"id", "family", "state", "question", "labels", "expected", "split", "group", "provenance"}
        assert {"source", "license", "label_basis", "exclude_reason"} <= set(task["provenance"])
        kind = task["question"]["type"]
        if kind == "noul":
            assert task["labels"] == ["no", "yes"] and task["expected"] in ("no", "yes")
        elif kind == "choice":
            assert task["labels"] == list(task["question"]["criteria"]) and task["expected"] in task["labels"]
        else:
            assert task["labels"] == [str(i) for i in range(len(task["question"]["criteria"]))]
            assert isinstance(task["expected"], int) and not isinstance(task["expected"], bool)
    # at least one group holds several rows (paraphrases), and they agree on the answer
    by_group = {}
    for task in rows:
        by_group.setdefault(task["group"], set()).add(json.dumps(task["expected"]))
    assert all(len(answers) == 1 for answers in by_group.values())
    assert len(by_group) < len(rows)
    loaded = load_file(path)
    assert {c.cv_group for c in loaded.cases} == {f"group {g}" for g in by_group}
