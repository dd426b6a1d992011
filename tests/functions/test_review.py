"""Review completion: validation (pure), then the review function over a ticket the ticket intake
sent to review (task token from its pending-review row): on template.yaml's names over the fakes
of the ports with the routing workflow played over them (tests/fakes/console_worlds.py), and as a
smoke test also on the template's resources in moto with the real workflow executing. The reviewer
CLI makes its own adapters from the environment: those run on the stack only."""

from __future__ import annotations

import json

import pytest

from decision_router.adapters.review import ReviewTaskGone
from decision_router.domain.judging import build_record, model_entry
from decision_router.domain.policies import POLICY_DIR, load_policy
from decision_router.domain.records import DecisionRecord
from decision_router.items import parse_item
from decision_router.review.caller import CallerAnswer
from decision_router.review.completion import InvalidReview, ReviewCompletion, complete_review, submit_review
from ops import review_cli
from tests.fakes.console_worlds import console_world
from tests.functions.conftest import EVENTS, letters_only, make_result
from tests.functions.sts_stand_in import ALICE, FUNCTION_NAME
from tests.functions.test_intake_handlers import (
    ON_THE_STACK,
    ONLY_ON_THE_STACK,
    TICKET_OPTIONS,
    FakeLambdaContext,
    StubbedEndpoint,
    body,
    make_intake,
)

QUEUES = {t: f"https://sqs/{t}" for t in ["billing", "account-access", "technical-support", "product-help", "sales",
                                          "platform-oncall", "data-oncall", "security-oncall", "app-oncall"]}


# ---------------------------------------------------------------------------- validation
def pending_record(kind: str = "incident") -> DecisionRecord:
    """A record sent to review by the real routing code (model unsure about every question)."""
    policy = letters_only(load_policy("incident" if kind == "incident" else "support-ticket"))
    data = {"incident_id": "INC-1", "title": "DB down", "description": "primary unreachable", "service": "db",
            "severity": "sev2", "source": "cloudwatch", "reported_at": "2026-11-29T12:00:00Z"} if kind == "incident" else \
        {"ticket_id": "T-1", "subject": "Charged twice", "body": "refund one", "customer": {"id": "C-1", "tier": "pro"},
         "channel": "email", "created_at": "2026-11-29T12:00:00Z"}
    unsure = [model_entry(q, make_result(q.id, q.option_ids, [0.1] * len(q.options))) for q in policy.questions]
    return build_record(policy, parse_item(kind, data), unsure, destinations=QUEUES,
                        review_timeout_seconds=60)


def test_answers_become_destination_and_escalation_from_the_records_own_choices():
    record = pending_record("incident")
    out = complete_review(record, "incident-INC-1-x", {"priority": "P1", "team": "data"}, " bob@example.com ",
                          note="db primary down")
    assert (out.execution_name, out.reviewer, out.note) == ("incident-INC-1-x", "bob@example.com", "db primary down")
    assert out.choice in record.review.choices
    assert out.chosen.model_dump() == {"answers": {"priority": "P1", "team": "data"}, "escalate": True,
                                       "destination": {"target": "data-oncall", "queue_url": "https://sqs/data-oncall"}}
    assert not complete_review(record, "x", {"priority": "P3", "team": "data"}, "b").chosen.escalate


def test_every_problem_is_named():
    with pytest.raises(InvalidReview) as info:
        complete_review(pending_record("incident"), "x", {"priority": "urgent", "colour": "red"}, "")
    message = str(info.value)
    assert "reviewer: must name who decided" in message
    assert "answers.colour: policy 'incident' asks no such question" in message
    assert "answers.priority: 'urgent' is not an option (options: P1, P2, P3, P4)" in message
    assert "answers.team: missing; choose one of platform, data, security, application" in message


def test_a_ticket_review_is_judged_by_the_ticket_policy_whatever_the_caller_names():
    """Before: the caller's `policy` decided the questions, so a ticket could be answered as an
    incident (security-oncall, escalate=true)."""
    ticket = pending_record("ticket")
    completion = ReviewCompletion.parse({"execution_name": "ticket-T-1-x", "task_token": "t", "reviewer": "m",
                                         "answers": {"priority": "P1", "team": "security"}})
    sent = []
    with pytest.raises(InvalidReview, match="answers.priority: policy 'support-ticket' asks no such question"):
        submit_review(completion, ticket, tasks=type("T", (), {"complete": lambda self, *a: sent.append(a)})())
    named = completion.model_copy(update={"policy": "incident"})
    with pytest.raises(InvalidReview, match="policy: 'incident' is not this review's policy"):
        submit_review(named, ticket, tasks=type("T", (), {"complete": lambda self, *a: sent.append(a)})())
    assert sent == []


def test_completion_event_is_validated():
    with pytest.raises(InvalidReview, match="execution_name: Field required.*task_token: Field required.*"
                                            "answers: Dictionary should have at least 1 item"):
        CallerAnswer.parse({"answers": {}})
    sample = CallerAnswer.parse(json.loads((EVENTS / "review_completion.json").read_text()))
    assert sample.answers == {"queue": "billing"} and sample.identity_proof == ""  # the sample carries no proof


# ---------------------------------------------------------------------------- with the workflow
@pytest.fixture
def world(request):
    """The fakes, or, for a test marked `ON_THE_STACK`, also the template's resources in moto with
    the routing workflow executing."""
    with console_world(getattr(request, "param", "fakes")) as world:
        yield world


@pytest.fixture
def pending_ticket(monkeypatch, world, ticket_data, tmp_path):
    """T-1001 sent to review by an unsure model answer, the workflow waiting on its review (its row in the index);
    the review function wired as the world wires it (its fakes, or cold-started on its environment)."""
    from ticket_intake import app

    stub = StubbedEndpoint()
    stub.answer(body(TICKET_OPTIONS, [1.0, 0.9, 0.8, 0.0, 0.0]))
    # the letters decide (the shipped head is sure of T-1001 from its words alone)
    raw = json.loads((POLICY_DIR / "support-ticket.json").read_text())
    for question in raw["questions"]:
        question.pop("head", None)
    letters = tmp_path / "support-ticket.json"
    letters.write_text(json.dumps(raw))
    make_intake(monkeypatch, world, app, "ticket", "TicketIntakeFunction", stub.endpoint, env={"POLICY_NAME": str(letters)})
    event = {"Records": [dict(json.loads((EVENTS / "ticket_batch.json").read_text())["Records"][0])]}
    assert app.lambda_handler(event, FakeLambdaContext()) == {"batchItemFailures": []}
    world.wait_for(lambda: len(world.review_requests()) == 1, "the review request")
    world.review_function(monkeypatch)
    return world


@ON_THE_STACK
def test_review_function_completes_the_workflow(world, pending_ticket):
    from review import app

    message = world.pending_message()
    assert message["record"]["route"] == "review" and message["record"]["item_id"] == "T-1001"
    event = json.loads((EVENTS / "review_completion.json").read_text())
    event.update(task_token=message["task_token"], execution_name=message["execution_name"])

    result = app.lambda_handler(ALICE.prove(event), FakeLambdaContext())

    assert result["status"] == "completed" and result["destination"]["queue_url"] == world.ref("BillingQueue")
    assert world.finished(message["execution_name"]) == "SUCCEEDED"
    assert world.depth("BillingQueue") == 1
    assert world.review_requests() == []  # the answered review's row is removed


def test_invalid_answer_sends_nothing_and_the_review_stays_pending(world, pending_ticket):
    from review import app

    message = world.pending_message()
    event = dict(json.loads((EVENTS / "review_completion.json").read_text()), task_token=message["task_token"],
                 execution_name=message["execution_name"], answers={"queue": "refunds"})
    with pytest.raises(InvalidReview, match="answers.queue: 'refunds' is not an option"):
        app.lambda_handler(ALICE.prove(event), FakeLambdaContext())
    assert world.status(message["execution_name"]) == "RUNNING"


def test_unknown_task_token_is_reported(world, pending_ticket):
    from review import app

    message = world.pending_message()
    event = dict(json.loads((EVENTS / "review_completion.json").read_text()),  # the sample's token is not a live one
                 execution_name=message["execution_name"])
    with pytest.raises(InvalidReview, match="task_token: not the token execution .* review waits on"):
        app.lambda_handler(ALICE.prove(event), FakeLambdaContext())


def test_a_review_that_can_no_longer_be_answered_is_reported(world, pending_ticket):
    from review import app

    message = world.pending_message()
    event = dict(json.loads((EVENTS / "review_completion.json").read_text()), task_token=message["task_token"],
                 execution_name=message["execution_name"])
    world.tasks.time_out(message["task_token"])  # its review timed out a moment ago
    with pytest.raises(ReviewTaskGone, match="can no longer be completed"):
        app.lambda_handler(ALICE.prove(event), FakeLambdaContext())


@ONLY_ON_THE_STACK
def test_cli_lists_shows_completes_and_exports(monkeypatch, world, pending_ticket, capsys, tmp_path):
    from review import app

    # The review function the CLI invokes: the template's, run in process (moto runs no Lambda code),
    # under the name its context gives it; the reviewer's credentials are alice's (the Reviewer role's).
    monkeypatch.setattr(review_cli, "_review_function", lambda args: lambda event: app.lambda_handler(
        event, FakeLambdaContext()))
    monkeypatch.setenv("REVIEW_FUNCTION_NAME", FUNCTION_NAME)
    for variable, value in [("AWS_ACCESS_KEY_ID", ALICE.access_key), ("AWS_SECRET_ACCESS_KEY", ALICE.secret_key),
                            ("AWS_SESSION_TOKEN", ALICE.token)]:
        monkeypatch.setenv(variable, value)
    assert review_cli.main(["list"]) == 0
    listed = capsys.readouterr().out
    name = listed.split()[0]
    assert name.startswith("ticket-T-1001-") and "[support-ticket]" in listed and "suggested: queue=billing" in listed
    assert "why: queue: confidence" in listed

    assert review_cli.main(["show", name]) == 0
    shown = capsys.readouterr().out
    assert "Charged twice" in shown and "* billing" in shown and "technical_fault" in shown

    assert review_cli.main(["complete", name, "--answer", "queue=nonsense"]) == 2
    assert "'nonsense' is not an option" in capsys.readouterr().err
    assert review_cli.main(["complete", name, "--answer", "queue=billing", "--note", "refund"]) == 0
    completed = json.loads(capsys.readouterr().out)
    assert completed["destination"]["target"] == "billing" and completed["reviewer"] == "alice@example.com"
    assert completed["reviewer_id"] == f"iam:{ALICE.arn}"  # who STS (the signature-checking stand-in) says signed
    ((method, url, headers),) = world.sts.requests  # the proof: for GET, at the regional host, bound to the answer
    assert (method, url.split("/?")[0], "host%3Bx-decision-router-answer" in url) == (
        "GET", "https://sts.us-east-1.amazonaws.com", True)
    assert world.finished(name) == "SUCCEEDED"
    assert world.review_requests() == []  # the answered review's row is gone
    assert review_cli.main(["show", name]) == 2  # answered: nothing waits
    assert f"no pending review named {name!r}" in capsys.readouterr().err

    out = tmp_path / "labelled.jsonl"
    assert review_cli.main(["export", "--out", str(out)]) == 0
    (line,) = out.read_text().splitlines()
    example = json.loads(line)
    assert example["policy"] == "support-ticket" and example["gold"] == {"queue": "billing"}
    assert example["item"]["ticket_id"] == "T-1001" and example["item"]["customer"] == {"id": "C-4102", "tier": "pro"}


def test_task_tokens_up_to_the_step_functions_limit_are_accepted():
    # SendTaskSuccess takes tokens of 1-2048 characters.
    event = json.loads((EVENTS / "review_completion.json").read_text())
    assert len(CallerAnswer.parse(dict(event, task_token="t" * 2048)).task_token) == 2048
    with pytest.raises(InvalidReview, match="task_token: String should have at most 2048 characters"):
        CallerAnswer.parse(dict(event, task_token="t" * 2049))
