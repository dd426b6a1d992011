"""End to end, as `make demo` does it: the demo's own code sends tickets through the ticket queue
and the real ticket-intake handler (SQS batches), incidents over the template's bus and rule to
the real incident-intake handler, with boto3's `sagemaker-runtime` calling a real decision server
(embedded model) and everything else a moto server whose Step Functions interpreter executes the
real routing ASL. Where each item ended up is read back from the queues, and its audit record
from the audit table.

The embedded model is tiny, so nothing here expects a particular model answer: items decided by
a policy rule have a known destination; model-decided ones are followed through their own
decision record (auto -> its target's queue; review -> the pending-review index, then the reviewer's
answer's queue once the review function completed it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from decision_router.domain.policies import load_policy
from local.cloudformation import REPO_ROOT
from local.items import EVENTS, classify, read_items
from local.outcomes import report_line, write_report
from local.settling import WAITING_FOR_REVIEW
from local.tables import format_table, table_rows

from .conftest import UNUSED_ENDPOINT


def sample(path: Path, item_id: str) -> str:
    """The line of an events/ file holding this item."""
    return next(line for line in path.read_text().splitlines() if f'"{item_id}"' in line)


# T-1006 comes through the billing portal: a policy rule routes it, the model is not asked.
# T-1001 is decided by the model. INC-2002 is sev1: a rule sets priority P1 (escalates), the model picks the team.
RULE_TICKET, MODEL_TICKET, SEV1_INCIDENT = "T-1006", "T-1001", "INC-2002"


@pytest.mark.model
@pytest.mark.stack
@pytest.mark.server  # the moto server and the decision container
def test_two_tickets_and_an_incident_end_in_their_queues_with_audit_records(local_pipeline, decision_server_url):
    pipeline = local_pipeline(decision_server_url)
    items = [classify(f"line:{n}", text, n) for n, text in enumerate([
        sample(EVENTS / "tickets.jsonl", RULE_TICKET),
        sample(EVENTS / "tickets.jsonl", MODEL_TICKET),
        sample(EVENTS / "incidents.jsonl", SEV1_INCIDENT)], start=1)]

    outcomes = {o.item.item_id: o for o in pipeline.run(items)}

    assert set(outcomes) == {RULE_TICKET, MODEL_TICKET, SEV1_INCIDENT}
    for item_id, outcome in outcomes.items():
        record = outcome.record
        assert record is not None and record.item_id == item_id, "the workflow received the decision record"
        if record.route == "auto":
            assert outcome.status == "SUCCEEDED"
            assert outcome.queues == [pipeline.queue_name(pipeline.destinations[record.destination.target])]
            assert outcome.audit == "auto_routed"
        else:  # waiting for a person: only in the pending-review index, audited once answered
            assert outcome.status == "RUNNING"
            assert outcome.queues == [WAITING_FOR_REVIEW]
            assert outcome.audit is None
            assert record.route_reason and outcome.reason == record.route_reason

    rule_ticket = outcomes[RULE_TICKET]
    assert [(d.source, d.option_id) for d in rule_ticket.record.decisions] == [("rule", "billing")]
    assert rule_ticket.queues == [pipeline.queue_name(pipeline.destinations["billing"])]
    model_sources = {d.question: d.source for d in outcomes[MODEL_TICKET].record.decisions}
    assert model_sources == {"queue": "model"}
    incident = {d.question: d for d in outcomes[SEV1_INCIDENT].record.decisions}
    assert (incident["priority"].source, incident["priority"].option_id) == ("rule", "P1")
    assert incident["team"].source == "model" and len(incident["team"].model.sha256) == 64

    # Close the loop for whatever went to review, through the real review function.
    for item_id, outcome in outcomes.items():
        if outcome.status == "RUNNING":
            answer = pipeline.complete_review(outcome)
            policy = load_policy(outcome.record.policy.name)
            target = policy.routing_question.option(answer["answers"][policy.routing_question.id]).target
            assert outcome.status == "SUCCEEDED"
            assert outcome.queues == [pipeline.queue_name(pipeline.destinations[target])]
            assert outcome.audit == "reviewed"
            assert pipeline.labelled_example(policy.name, item_id)["reviewer"] == answer["reviewer"]

    for item_id, outcome in outcomes.items():
        assert len(outcome.queues) == 1, f"{item_id} is in exactly one queue: {outcome.queues}"
        assert pipeline.audit(item_id) in ("auto_routed", "reviewed"), f"{item_id} has one audit record"
    assert outcomes[SEV1_INCIDENT].escalated, "P1 pages the on-call (Item Escalated, the template's rule)"
    assert not outcomes[RULE_TICKET].escalated

    table = format_table(table_rows(list(outcomes.values())))
    assert all(item_id in table for item_id in outcomes)
    assert "queue: rule" in table and "queue: rule billing-portal-to-billing → billing" in table
    assert max(len(line) for line in table.splitlines()) <= 120

    assert_report_lines(pipeline, outcomes, table)


@pytest.mark.model
@pytest.mark.stack
@pytest.mark.server  # the moto server and the decision container
def test_tickets_the_shipped_head_is_sure_of_are_routed_by_it_end_to_end(local_pipeline, decision_server_url):
    """The policy's head (fitted on the training split with make fit) reads the words alone
    (TF-IDF and the sentence encoder: it serves any model), decides beside the answer the real
    container returns, and the real workflow delivers; the record says so.

    That some ticket routes by the head is a discrete outcome, so its margin is wide: the head's
    confidence in each of the three tickets is 0.9996 or more against its min_confidence of 0.90
    (measured alone and batched together; the batch moved no demo ticket's by more than 0.002),
    far beyond what a last digit of the hidden state can move. Each routed record is also held to
    its own confidence/threshold relation."""
    policy = load_policy("support-ticket")
    head = policy.routing_question.learned_head
    assert head is not None and head.sentence is not None and not head.reads_model, "the shipped head reads the words alone"
    pipeline = local_pipeline(decision_server_url)
    ids = ["T-1001", "T-1002", "T-1005", "T-1001"]  # demo tickets: not in the labelled data; one sent twice
    outcomes = pipeline.run([classify(f"line:{n}", sample(EVENTS / "tickets.jsonl", item_id), n)
                             for n, item_id in enumerate(ids, 1)])

    report = [report_line(o) for o in outcomes]
    assert report[3]["outcome"] == "duplicate" and "line:1" in report[3]["reason"], report[3]
    assert report[0]["outcome"] in ("routed", "review")
    by_head = [o for o in outcomes if o.record and o.record.decisions[0].readout == "head" and o.record.route == "auto"
               and o.duplicate_of is None]  # the duplicate line joined the first one's execution
    assert by_head, "no demo ticket was confident enough for the shipped head"
    for outcome in by_head:
        (decision,) = outcome.record.decisions
        assert decision.head_version == head.version and decision.head_skipped is None
        assert decision.confidence is not None and decision.confidence >= head.thresholds.min_confidence
        assert decision.letter_probabilities and decision.head_probabilities
        assert set(decision.letter_probabilities) == set(decision.head_probabilities) == set(head.options)
        target = policy.target(decision.option_id)
        assert outcome.status == "SUCCEEDED" and outcome.audit == "auto_routed"
        assert outcome.queues == [pipeline.queue_name(pipeline.destinations[target])]
    assert "queue: head" in format_table(table_rows(outcomes))


# The demo's tickets that belong to no queue: a lasagna recipe, last night's football score.
OFF_TOPIC = ("T-1009", "T-1010", "T-1011")


@pytest.mark.model
@pytest.mark.stack
@pytest.mark.server  # the moto server and the decision container
def test_tickets_that_belong_to_no_queue_go_to_review_with_the_novelty_check_in_their_why(local_pipeline,
                                                                                         decision_server_url):
    """The shipped queue head has a novelty part; a ticket about no queue of the policy's waits for
    a person, and its why (the record's, the REPORT= line's) carries the novelty check, its value
    against the head's threshold; above it, the reason says the item is unlike any option it learned.

    The shipped head reads the words alone (TF-IDF and the sentence encoder), its novelty part
    in the encoder's space (measured: the lasagna recipe, how_to at 0.99, novelty 0.68 against
    0.63; the football score, 0.85 < 0.90, novelty 0.73): what this holds of the first two is
    what is true whichever check holds them. The Georgian small talk (T-1011) is the case the
    check is for: the head is sure of it (sales, 0.97 ≥ 0.90) and would route it alone, but its
    novelty, 0.72, is above the threshold, so the novelty check alone holds it."""
    head = load_policy("support-ticket").routing_question.learned_head
    assert head is not None and head.novelty is not None, "the shipped queue head carries a novelty part"
    pipeline = local_pipeline(decision_server_url)
    outcomes = pipeline.run([classify(f"line:{n}", sample(EVENTS / "tickets.jsonl", item_id), n)
                             for n, item_id in enumerate(OFF_TOPIC, 1)])

    assert [o.item.item_id for o in outcomes] == list(OFF_TOPIC)
    for outcome in outcomes:
        record = outcome.record
        assert record is not None and record.route == "review", f"{outcome.item.item_id} was routed alone: {record}"
        assert outcome.status == "RUNNING" and outcome.queues == [WAITING_FOR_REVIEW] and outcome.audit is None
        (decision,) = record.decisions
        assert decision.readout == "head" and decision.head_version == head.version and not decision.passed
        assert decision.novelty is not None and decision.max_novelty == head.novelty.threshold
        row = report_line(outcome)
        assert row["outcome"] == "review" and row["reason"] == record.route_reason
        why = row["decisions"]["queue"]["why"]
        (check,) = [c for c in why["checks"] if c["name"] == "novelty"]
        assert (check["value"], check["threshold"]) == (decision.novelty, head.novelty.threshold)
        unlike = f"unlike any option it learned: novelty {decision.novelty:.2f} > {head.novelty.threshold:.2f}"
        assert check["passed"] == (decision.novelty <= head.novelty.threshold)
        assert (unlike in decision.why.line()) == (not check["passed"])
        assert ("queue: unlike any option it learned: novelty " in record.route_reason) == (not check["passed"])
        if check["passed"]:  # then another check held it: the head's confidence, named in the reason
            assert decision.confidence is not None and decision.confidence < decision.thresholds.min_confidence
            assert "queue: confidence " in record.route_reason

    unlike_only = next(o for o in outcomes if o.item.item_id == "T-1011")
    (decision,) = unlike_only.record.decisions
    assert decision.novelty is not None and decision.novelty > head.novelty.threshold
    assert decision.confidence is not None and decision.confidence >= decision.thresholds.min_confidence
    assert unlike_only.record.route_reason == (
        f"queue: unlike any option it learned: novelty {decision.novelty:.2f} > {head.novelty.threshold:.2f}")


@pytest.mark.stack
@pytest.mark.server  # the moto server
def test_malformed_items_land_in_their_intake_dlq_or_are_rejected_with_the_reason(local_pipeline, tmp_path):
    # None of these reaches the endpoint: nothing listens at UNUSED_ENDPOINT.
    pipeline = local_pipeline(UNUSED_ENDPOINT)
    ticket = json.loads(sample(EVENTS / "tickets.jsonl", MODEL_TICKET))
    incident = json.loads(sample(EVENTS / "incidents.jsonl", SEV1_INCIDENT))
    items_file = tmp_path / "items.jsonl"
    items_file.write_text("\n".join([
        json.dumps({**ticket, "ticket_id": "T-BAD", "channel": "fax"}),
        json.dumps({**incident, "incident_id": "INC-BAD", "severity": "critical"}),
        "{not json",
        json.dumps({"order_id": "O-1"}),
        json.dumps({**ticket, "incident_id": "INC-3"}),
    ]) + "\n")

    outcomes = {o.item.source: o for o in pipeline.run(read_items([items_file]))}

    bad_ticket, bad_incident, not_json, unknown, both = (outcomes[f"items.jsonl:{n}"] for n in range(1, 6))
    # Ticket intake parked it in the ticket DLQ at once, the reason in its attributes.
    assert bad_ticket.queues == ["TicketDeadLetterQueue"]
    assert "channel" in bad_ticket.reason and "T-BAD" in bad_ticket.reason
    # Lambda's async retries (EventInvokeConfig) exhausted -> OnFailure destination.
    assert bad_incident.queues == ["IncidentDeadLetterQueue"]
    assert "severity" in bad_incident.reason and "3x" in bad_incident.reason
    assert not_json.route == "rejected" and "not JSON" in not_json.reason
    assert unknown.route == "rejected" and "neither ticket_id nor incident_id" in unknown.reason
    assert both.route == "rejected" and "both ticket_id and incident_id" in both.reason
    for outcome in (bad_ticket, bad_incident):
        assert outcome.record is None and outcome.audit is None and outcome.route == "failed"
    # Nothing reached a team or waits for a review.
    assert all(not pipeline.sqs.receive_message(QueueUrl=url).get("Messages") for url in pipeline.destinations.values())
    assert not pipeline.dynamodb.scan(TableName=pipeline.pending_reviews_table)["Items"]
    assert "TicketDeadLetterQueue" in format_table(table_rows(list(outcomes.values())))

    report_file = tmp_path / "report.jsonl"
    write_report(report_file, list(outcomes.values()))
    report = [json.loads(line) for line in report_file.read_text().splitlines()]
    assert [(r["line"], r["outcome"]) for r in report] == [
        (1, "dead_lettered"), (2, "dead_lettered"), (3, "rejected"), (4, "rejected"), (5, "rejected")]
    assert "channel" in report[0]["reason"] and report[0]["target"] is None and report[0]["decisions"] == {}
    assert "severity" in report[1]["reason"]
    assert "not JSON" in report[2]["reason"] and report[2]["kind"] is None


def assert_report_lines(pipeline, outcomes, table: str) -> None:
    """`make demo`'s report lines: one an item in input order, each decision's readout and why as
    its record has it, the nearest resolved items of its own policy, and the table agreeing."""
    incident = {d.question: d for d in outcomes[SEV1_INCIDENT].record.decisions}
    report = [report_line(o) for o in outcomes.values()]
    assert [r["line"] for r in report] == [1, 2, 3]
    by_id = {r["item_id"]: r for r in report}
    assert by_id[RULE_TICKET]["outcome"] == "routed" and by_id[RULE_TICKET]["target"] == "billing"
    rule_why = by_id[RULE_TICKET]["decisions"]["queue"].pop("why")
    assert by_id[RULE_TICKET]["decisions"] == {"queue": {"answer": "billing", "confidence": None, "readout": "rule",
                                                         "auto": True, "head_version": None}}
    assert rule_why["readout"] == "rule" and rule_why["rule"] == "billing-portal-to-billing"
    assert by_id[RULE_TICKET]["linked"] is None
    for row in report:  # the nearest resolved items of its own policy, never itself
        assert row["item_id"] not in row["similar"] and len(row["similar"]) <= 3
        assert all(outcomes[other].record.item_kind == row["kind"] for other in row["similar"] if other in outcomes)
    # the incident's team question: read by a head (its evidence fields scored) or the letters (its
    # thresholds compared), the reason in the report as the record has it
    team_why = by_id[SEV1_INCIDENT]["decisions"]["team"]["why"]
    team = incident["team"]
    assert team_why["readout"] == team.readout and team_why["option"] == team.option_id
    assert {c["name"]: c["value"] for c in team_why["checks"]}["confidence"] == team.confidence
    assert (team_why["fields"] is not None) == (team.readout == "head")
    assert f"team: {team.readout}" in table and " ".join(team.why.line().split()) in " ".join(table.split())
    assert by_id[SEV1_INCIDENT]["escalated"] is True
    assert by_id[SEV1_INCIDENT]["decisions"]["priority"]["readout"] == "rule"
    for row in report:
        outcome = outcomes[row["item_id"]]
        assert row["kind"] == outcome.record.item_kind
        assert row["outcome"] == ("routed" if outcome.record.route == "auto" else "review")
        assert row["target"] in pipeline.destinations, "a reviewed item's report names where the review sent it"
        assert all(d["auto"] == (row["outcome"] == "routed") for d in row["decisions"].values())


def test_classify_tells_items_apart_by_their_id_field():
    assert classify("f:1", '{"ticket_id": "T-1"}').kind == "ticket"
    assert classify("f:2", '{"incident_id": "INC-1", "x": 1}').kind == "incident"
    assert classify("f:3", '{"ticket_id": ""}').item_id is None  # the intake will name the field
    assert "expected a JSON object" in classify("f:4", "[1, 2]").rejected
    assert classify("f:5", '{"ticket_id": "T-1", "incident_id": "INC-1"}').rejected.startswith("has both")


# ------------------------------------------------------------------------------- processes
def demo_env() -> dict[str, str]:
    paths = [REPO_ROOT / "contract", REPO_ROOT / "container", REPO_ROOT / "functions", REPO_ROOT]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in paths)}


class DemoProcess:
    """`python -m local.demo` as `make demo` runs it, its output collected line by line."""

    def __init__(self, *args: str):
        self.process = subprocess.Popen([sys.executable, "-m", "local.demo", *args], cwd=REPO_ROOT, env=demo_env(),
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True)
        self._reader.start()

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if match := re.search(pattern, line):
                    return match
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.1)
        raise AssertionError(f"demo never printed {pattern!r}:\n{self.output}")

    def finish(self, timeout: float = 300) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def assert_gone(container_pid: int, port: int) -> None:
    """No process left in the container's process group, and its port is free again."""
    deadline = time.monotonic() + 5  # the demo has returned; its child was reaped before that
    while True:
        try:
            os.killpg(container_pid, 0)
        except ProcessLookupError:
            break
        if time.monotonic() > deadline:
            os.killpg(container_pid, signal.SIGKILL)  # do not leak it into the rest of the suite
            raise AssertionError(f"the decision container (pgid {container_pid}) outlived the demo")
        time.sleep(0.1)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is fine; a listener is not
        sock.bind(("127.0.0.1", port))


def started_container(demo: DemoProcess) -> tuple[int, int]:
    match = demo.wait_for(r"decision container starting \(pid (\d+), http://127\.0\.0\.1:(\d+)\)")
    return int(match.group(1)), int(match.group(2))


@pytest.mark.model
@pytest.mark.server  # `python -m local.demo`, with its container and moto server
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stopped_demo_leaves_no_process_and_the_next_run_works(stop, tmp_path):
    demo = DemoProcess("--log-dir", str(tmp_path / "first"))
    try:
        pid, port = started_container(demo)
        demo.wait_for(r"moto server on")
        demo.process.send_signal(stop)
        assert demo.finish(timeout=60) == 128 + stop, demo.output
        assert "every process it started has been stopped" in demo.output
        assert_gone(pid, port)
    finally:
        demo.kill()
    if stop != signal.SIGINT:
        return  # one full run after an interruption is enough

    items = tmp_path / "items.jsonl"
    items.write_text(sample(EVENTS / "tickets.jsonl", RULE_TICKET) + "\n")
    again = DemoProcess("--items", str(items), "--log-dir", str(tmp_path / "second"))
    try:
        pid, port = started_container(again)
        assert again.finish() == 0, again.output
        assert_gone(pid, port)
    finally:
        again.kill()
    assert re.search(rf"{RULE_TICKET}\s+queue: rule\s+billing\s+-\s+rule\s+auto\s+BillingQueue\s+auto_routed\n"
                     r"\s+queue: rule [^ ]+ → billing\n", again.output), again.output
    # the audit left for `make replay`: the one row the workflow wrote, as the audit table holds it
    from decision_router.domain.records import AuditRow

    assert "Audit: 1 row(s)" in again.output
    (row,) = [AuditRow.model_validate_json(line) for line in (tmp_path / "second/audit.jsonl").read_text().splitlines()]
    assert row.item_id == RULE_TICKET and row.outcome == "auto_routed"


@pytest.mark.server  # runs a script or a command as a process
def test_the_demo_refuses_missing_files_before_starting_anything(tmp_path):
    result = subprocess.run([sys.executable, "-m", "local.demo", "--model", str(tmp_path / "none.gguf"),
                             "--items", str(tmp_path / "none.jsonl")], cwd=REPO_ROOT, env=demo_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "--model" in result.stderr and "none.gguf: no such file" in result.stderr
    assert "none.jsonl: no such file" in result.stderr
    assert "decision container starting" not in result.stdout
