"""What `make demo` prints under its run (local/tables.py), on records the real routing code makes
from the shipped incident policy: the table fits 120 columns, a reason names only the fields that
moved the answer, each head is said to read what it reads (the shipped priority head reads the
words alone), and the audit export says why it holds fewer rows than the input had lines."""

from __future__ import annotations

import json
from pathlib import Path

from decision_router.domain.judging import build_record, explain, model_entry
from decision_router.domain.model_requests import build_state
from decision_router.domain.policies import POLICY_DIR, load_policy
from decision_router.domain.records import AuditRow
from decision_router.items import parse_item
from local.items import InputItem
from local.outcomes import Outcome
from local.tables import WIDTH, audit_lines, format_table, head_reads, table_rows, wrapped
from local.tables import explain as report_lines
from tests.functions.conftest import make_result

POLICY = load_policy(POLICY_DIR / "incident.json")
INCIDENT = {"incident_id": "INC-2001", "title": "Checkout API error rate above 20%",
            "description": "5xx responses from checkout-api rose from 0.1% to 23% after the 11:50 deploy; customers "
                           "cannot complete purchases and support is getting calls.",
            "service": "checkout-api", "severity": "sev2", "source": "cloudwatch", "reported_at": "2026-11-29T12:00:00Z"}


def decided(incident_id: str, priority_logits: list[float]) -> Outcome:
    """An incident decided by the routing code: priority by its (text-only) head, team by the
    letters (the team head reads a hidden state these results do not carry)."""
    item = parse_item("incident", {**INCIDENT, "incident_id": incident_id})
    state = build_state(POLICY, item)
    results = {"priority": make_result("priority", ["P1", "P2", "P3", "P4"], priority_logits),
               "team": make_result("team", ["platform", "data", "security", "application"], [0.0, 0.0, 0.0, 5.0])}
    entries = [model_entry(POLICY.question(q), results[q], state) for q in ("priority", "team")]
    entries = explain(POLICY, item, entries, state, results)
    targets = {o.target or o.id for q in POLICY.questions for o in q.options}
    record = build_record(POLICY, item, entries, destinations={t: f"https://queue/{t}" for t in targets},
                          review_timeout_seconds=60)
    line = InputItem("incidents.jsonl:1", 1, "incident", incident_id, json.dumps(INCIDENT))
    status = "RUNNING" if record.route == "review" else "SUCCEEDED"
    queues = ["PendingReviewsTable"] if record.route == "review" else ["AppOncallQueueWithAVeryLongLogicalName"]
    return Outcome(item=line, record=record, status=status, queues=queues,
                   audit=None if record.route == "review" else "auto_routed")


def test_the_table_fits_120_columns_and_its_reasons_name_only_fields_that_moved_the_answer():
    outcomes = [decided("INC-" + "9" * 40, [0.0, 0.1, 0.0, 0.0]), decided("INC-2", [0.0, 9.0, 0.0, 0.0])]
    table = format_table(table_rows(outcomes))
    assert max(len(line) for line in table.splitlines()) <= WIDTH, table
    assert "+0.00" not in table and "-0.00" not in table
    assert "INC-" + "9" * 11 + "…" in table  # a long value is cut with an ellipsis; the report has it whole
    assert [line.strip()[:16] for line in table.splitlines() if line.startswith("    ") and line[4] != " "][:3] == [
        "priority: head →", "team: letters → ", "review: priority"], table
    for entry in outcomes[0].record.decisions:  # each reason is there in full, wrapped and never cut
        assert entry.why is not None
        assert " ".join(entry.why.line().split()) in " ".join(table.split())
    assert "team: letters → application" in table and "head skipped: endpoint model sha256" in table


def test_a_text_only_head_is_said_to_read_the_words_and_no_bigger_model_is_advised_for_it():
    priority = POLICY.question("priority").learned_head
    assert priority is not None and not priority.reads_model  # the shipped priority head: words alone
    assert head_reads(priority) == "the item's words (" + ", ".join(priority.text.fields) + ")" + (
        " and its categories (" + ", ".join(priority.categorical.fields) + ")" if priority.categorical else "")
    team = load_policy(POLICY_DIR / "incident.json").question("team").learned_head
    assert team is not None and "the model's hidden state" in head_reads(team)

    outcomes = [decided("INC-1", [0.0, 0.2, 0.0, 0.0])]  # unsure: to review, by the text-only head
    assert outcomes[0].record.route == "review"
    lines = report_lines(outcomes, None, head_of=lambda policy, question: load_policy(POLICY_DIR / f"{policy}.json")
                         .question(question).learned_head)
    text = "\n".join(lines)
    assert "incident priority: 1 decision(s) by a learned head (make fit) that reads the item's words" in text
    assert "hidden state" not in text.split("incident priority:")[1].split("\n")[0]
    assert "Reviews from text-only heads (incident priority)" in text and "a bigger model does not change them" in text
    assert "Bring a real model" not in text
    assert all(len(part) <= WIDTH for line in lines for part in wrapped(line).splitlines())  # as the demo prints them


def test_the_audit_lines_say_why_input_lines_have_no_row(tmp_path: Path):
    routed, waiting = decided("INC-1", [0.0, 9.0, 0.0, 0.0]), decided("INC-2", [0.0, 0.2, 0.0, 0.0])
    rejected = Outcome(item=InputItem("x.jsonl:3", 3, None, None, "{not json", rejected="not JSON"))
    resolved = Outcome(item=InputItem("x.jsonl:4", 4, "incident", "INC-1", "{}"), source_outcome="resolved")
    record = routed.record
    assert record is not None
    row = AuditRow(item_id="INC-1", execution_name="incident-INC-1", item_kind="incident", outcome="auto_routed",
                   outcome_detail="{}", route="auto", route_reason=record.route_reason, policy_name="incident",
                   policy_version="1", decisions="[]", item="{}", decided_at=record.decided_at,
                   audited_at=record.decided_at)
    lines = audit_lines([routed, waiting, rejected, resolved], [row], tmp_path / "audit.jsonl")
    assert lines[0] == f"Audit: 1 row(s) in {tmp_path / 'audit.jsonl'} for 4 input line(s) (1 auto_routed)."
    assert lines[1] == ("Input lines with no row of their own: 1 waiting for a person (audited when the review is "
                        "answered); 1 rejected before sending (never reached an intake); 1 resolved: a source event "
                        "that routed nothing new.")
