"""The walk docs/learning/fit-history.md takes, on the sample export in events/help-desk-export/:
export → `make fit-history` (the text alone, MODEL=none, to keep it fast) → a policy whose
options route to the stack's destinations → tickets written as the page says routed by it: in
the router's own judging (fast), and through `make demo`'s local pipeline (marked: it starts the
decision container on the embedded model and the stack in moto)."""

from __future__ import annotations

import json

import pytest

from decision_contract import DecisionResult, ModelInfo
from decision_router.domain.judging import EMPTY_EVIDENCE, explain, model_entry
from decision_router.domain.model_requests import build_decisions
from decision_router.domain.policies import Policy, load_policy
from decision_router.items import parse_item
from local.cloudformation import REPO_ROOT
from training import history

SAMPLE = REPO_ROOT / "events/help-desk-export"
#: What each sample ticket is about (events/help-desk-export/README.md).
EXPECTED = {"HD-001": "Hardware", "HD-002": "Access", "HD-003": "Administrative rights", "HD-004": "Purchase",
            "HD-005": "Storage"}
#: The walk is the page's own: its command on the whole 400-row sample (a real-sized fit, the text
#: classifier beside it on every fold), so its tests are `make test`'s, not the fast tier's.
WALKS_THE_PAGE = pytest.mark.fit
ENDPOINT_MODEL = ModelInfo(file="any.gguf", bytes=1, sha256="b" * 64, context_size=2048, threads=1, gpu_layers=0,
                           llama_cpp_python_version="test", hidden_size=8)


def fit_sample(out) -> int:
    """The page's command: make fit-history DATA=… TEST=… TEXT=Document LABEL=Topic_group OUT=… TARGETS=…
    MODEL=none HISTORY_ARGS="--max-error 0.05"."""
    return history.main(["--data", str(SAMPLE / "tickets.csv"), "--test", str(SAMPLE / "held-out.csv"),
                         "--text", "Document", "--label", "Topic_group", "--out", str(out),
                         "--targets", str(SAMPLE / "targets.json"), "--text-only", "--max-error", "0.05", "--no-progress"])


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    out = tmp_path_factory.mktemp("walk") / "it-desk"
    assert fit_sample(out) == 0
    return out


def judged(policy: Policy, ticket: dict):
    """The ticket as the ticket intake judges it: its decision (the evidence the policy reads) and
    the head's entry over an endpoint answer (the head reads the text alone: the answer's letters
    and hidden state are not read)."""
    item = parse_item("ticket", ticket)
    (decision,) = build_decisions(policy, item)
    question = policy.questions[0]
    result = DecisionResult(id=question.id, option_ids=question.option_ids, probabilities=[1 / len(question.options)]
                            * len(question.options), option_logits=[0.0] * len(question.options), temperature=1.0,
                            input_tokens=1, allowed_token_mass=1.0, prompt_sha256="0" * 64, prompt_version="v",
                            model=ENDPOINT_MODEL, timing={"tokenize_seconds": 0, "prefill_seconds": 0, "total_seconds": 0},
                            hidden_state=[0.0] * 8)
    return item, decision, result, model_entry(question, result, decision.state)


def sample_tickets() -> list[dict]:
    return [json.loads(line) for line in (SAMPLE / "tickets.jsonl").read_text().splitlines()]


@WALKS_THE_PAGE
def test_the_sample_export_fits_a_policy_the_demo_accepts(fitted):
    from local.demo import read_policies

    report = json.loads((fitted / "report.json").read_text())
    assert (report["n_train"], report["n_test"], report["options"], report["scoring"]) == (400, 100, 5, "text-only")
    assert report["routed_alone"] and not report["target_missed"]
    policies, problems = read_policies([fitted / "policy.json"])  # make demo's own check of the stack's destinations
    assert problems == [] and set(policies) == {"ticket"}
    raw = json.loads((fitted / "policy.json").read_text())
    assert raw["state"] == [{"key": "Document", "field": "body", "max_chars": 3000}]  # TEXT=Document: the ticket's body


@WALKS_THE_PAGE
def test_tickets_written_as_the_docs_say_route_on_their_text(fitted):
    policy = load_policy(fitted / "policy.json")
    question = policy.questions[0]
    answers = {}
    for ticket in sample_tickets():
        _, decision, _, entry = judged(policy, ticket)
        assert decision.state == {"Document": ticket["body"]}
        answers[ticket["ticket_id"]] = question.options[question.option_ids.index(entry.option_id)].description
        if ticket["ticket_id"] in EXPECTED:
            assert entry.passed, entry.reasons
    assert {k: v for k, v in answers.items() if k in EXPECTED} == EXPECTED
    assert policy.target(question.option_ids[question.option_ids.index(
        next(o.id for o in question.options if o.description == "Purchase"))]) == "sales"


@WALKS_THE_PAGE
def test_a_ticket_whose_read_fields_are_empty_is_held_and_its_why_says_so(fitted):
    policy = load_policy(fitted / "policy.json")
    item, _, result, _ = judged(policy, sample_tickets()[0])
    question = policy.questions[0]
    entry = model_entry(question, result, {})  # the evidence the policy reads: nothing
    assert not entry.passed
    assert f"{EMPTY_EVIDENCE} (Document): its answer would be any such item's" in entry.reasons
    (why,) = explain(policy, item, [entry], {}, {question.id: result})
    assert why.why is not None and why.why.fields_note is not None and why.why.fields_note.startswith(EMPTY_EVIDENCE)


@WALKS_THE_PAGE
@pytest.mark.model
@pytest.mark.stack
@pytest.mark.server  # `python -m local.demo`, with its container and moto server
def test_the_walk_ends_with_make_demo_routing_the_sample_tickets(tmp_path):
    from tests.e2e.test_demo_pipeline import DemoProcess

    out = tmp_path / "it-desk"
    assert fit_sample(out) == 0
    report_file = tmp_path / "routed.jsonl"
    demo = DemoProcess("--policy", str(out / "policy.json"), "--items", str(SAMPLE / "tickets.jsonl"),
                       "--report", str(report_file), "--log-dir", str(tmp_path / "logs"), "--no-review")
    try:
        assert demo.finish() == 0, demo.output
    finally:
        demo.kill()
    policy = load_policy(out / "policy.json")
    question = policy.questions[0]
    lines = {line["item_id"]: line for line in map(json.loads, report_file.read_text().splitlines())}
    assert set(lines) == {t["ticket_id"] for t in sample_tickets()}
    for ticket_id, group in EXPECTED.items():
        line = lines[ticket_id]
        decision = line["decisions"][question.id]
        assert decision["readout"] == "head" and decision["auto"], line
        answer = question.options[question.option_ids.index(decision["answer"])]
        assert answer.description == group and line["outcome"] == "routed" and line["target"] == policy.target(answer.id)
