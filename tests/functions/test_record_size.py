"""A record too large for Step Functions (256 KiB of input) is parked with its size, never started:
StartExecution would refuse it on every retry alike. The 256-option record of a long emoji ticket
(a policy at its option cap, a ticket at its text limits, 4 bytes a character), through the ticket
intake's own code; and what makes a record large without bound: a reference's URL, capped."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from decision_contract import DecisionResult, SingleDecisionResponse
from decision_contract.models import DecisionTiming
from decision_router.domain.heads import question_digest
from decision_router.domain.judging import build_record, explain, model_entry
from decision_router.domain.model_requests import SIGNAL_OPTION_IDS, build_state
from decision_router.domain.policies import MAX_QUESTION_OPTIONS, load_policy
from decision_router.domain.records import MAX_RECORD_BYTES, RecordTooLarge, check_size, record_bytes
from decision_router.intake.pipeline import Intake
from decision_router.intake.tickets import TicketIntake
from decision_router.items import InvalidItem, parse_item
from tests.functions.conftest import MODEL_INFO
from tests.functions.test_intake_handlers import (  # noqa: F401 - fixtures
    ON_THE_STACK,
    StubbedEndpoint,
    context,
    ticket_event,
    world,
)

REPO = Path(__file__).resolve().parents[2]
MANY = REPO / "events/many-options"
EMOJI = "\U0001F600"


def policy_at_the_option_cap(folder: Path) -> Path:
    """events/many-options (150 intents) grown to the cap of 256 options, its head grown with it."""
    raw = json.loads((MANY / "policy.json").read_text())
    head = json.loads((MANY / "heads/label.json").read_text())
    question = raw["questions"][0]
    grown = MAX_QUESTION_OPTIONS - len(question["options"])
    question["options"] += [{"id": f"extra_{i}", "description": f"extra intent {i}",
                             "target": question["options"][i % 5]["target"]} for i in range(grown)]
    head["options"] = [option["id"] for option in question["options"]]
    for block in (head["text"], head["hidden"]):
        block["weights"] += [block["weights"][0]] * grown
    head["bias"] += [min(head["bias"])] * grown
    head["question_sha256"] = question_digest(
        question["question"], [(o["id"], o["description"]) for o in question["options"]],
        [f"{s['key']}={s['field']}:{s.get('max_chars')}" for s in raw["state"]])
    (folder / "heads").mkdir()
    data = json.dumps(head).encode()
    (folder / "heads/label.json").write_bytes(data)
    question["head"]["sha256"] = hashlib.sha256(data).hexdigest()
    (folder / "policy.json").write_text(json.dumps(raw))
    return folder / "policy.json"


def emoji_ticket(ticket_id: str = "T-EMOJI", text: str = EMOJI * 20_000) -> dict:
    return {"ticket_id": ticket_id, "subject": text, "body": text, "customer": {"id": "C-1", "tier": "pro"},
            "channel": "email", "created_at": "2026-11-29T12:00:00Z"}


def answer(policy, item) -> DecisionResult:
    """What the endpoint answers for the policy's one question (more options than letters: its
    signals decision, the head reads the hidden state)."""
    question = policy.questions[0]
    head = question.learned_head
    ids = list(SIGNAL_OPTION_IDS)
    return DecisionResult(
        id=question.id, option_ids=ids, probabilities=[1 / len(ids)] * len(ids), option_logits=[0.0] * len(ids),
        temperature=1.0, input_tokens=10, allowed_token_mass=0.9, prompt_sha256="f" * 64,
        prompt_version=head.prompt_version or "v", timing=DecisionTiming(tokenize_seconds=0, prefill_seconds=0, total_seconds=0),
        model=MODEL_INFO.model_copy(update={"sha256": head.model_sha256, "hidden_size": head.hidden_size}),
        hidden_state=list(np.random.default_rng(0).normal(size=head.hidden_size)))


@pytest.fixture
def capped_path(tmp_path) -> Path:
    return policy_at_the_option_cap(tmp_path)


@pytest.fixture
def capped(capped_path):
    return load_policy(capped_path)


def test_the_256_option_record_of_a_long_emoji_ticket_is_too_large_and_says_why(capped):
    item = parse_item("ticket", emoji_ticket())
    destinations = {o.target: f"https://sqs.eu-west-1.amazonaws.com/123456789012/decision-router-{o.target}-Queue-1A2B3C4D"
                    for o in capped.questions[0].options}
    record = build_record(capped, item, explain(capped, item, [model_entry(capped.questions[0], answer(capped, item),
                                                                           build_state(capped, item))]),
                          destinations=destinations, review_timeout_seconds=3600)
    assert len(capped.questions[0].options) == 256 and record_bytes(record) > MAX_RECORD_BYTES
    with pytest.raises(RecordTooLarge) as refused:
        check_size(record)
    assert f"{record_bytes(record):,} bytes, over the {MAX_RECORD_BYTES:,}" in str(refused.value)
    assert "the item is 160," in str(refused.value) and "256 review choices" in str(refused.value)
    # The same ticket in ASCII fits: the limit is on bytes, not on a policy's size.
    ascii_item = parse_item("ticket", emoji_ticket(text="a" * 20_000))
    small = build_record(capped, ascii_item, explain(capped, ascii_item, [model_entry(
        capped.questions[0], answer(capped, ascii_item), build_state(capped, ascii_item))]),
        destinations=destinations, review_timeout_seconds=3600)
    check_size(small)


@ON_THE_STACK
def test_the_ticket_intake_parks_a_record_too_large_with_its_reason_and_starts_nothing(world, capped, capped_path,  # noqa: F811
                                                                                        context, monkeypatch):  # noqa: F811
    from ticket_intake import app

    stub = StubbedEndpoint()
    env = {**world.environment("TicketIntakeFunction"), "POLICY_NAME": str(capped_path)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    intake = Intake("ticket", logger=app.logger, metrics=app.metrics,
                    wiring=world.wiring("TicketIntakeFunction", endpoint=stub.endpoint, env=env))
    monkeypatch.setattr(app, "tickets", TicketIntake(intake, logger=app.logger, metrics=app.metrics))
    item = parse_item("ticket", emoji_ticket())
    # Twice: the idempotency store cannot keep a record this large (DynamoDB refuses the item), so
    # the intake decides again without it, as it does whenever the store is unusable.
    for _ in range(2):
        stub.answer(SingleDecisionResponse(result=answer(capped, item)).model_dump_json().encode())

    response = app.lambda_handler(ticket_event(emoji_ticket()), context)

    assert response == {"batchItemFailures": []}  # parked, not retried: no retry makes it smaller
    assert world.executions() == {}
    (parked,) = world.dead_letters("TicketDeadLetterQueue")
    attributes = {name: value["StringValue"] for name, value in parked["MessageAttributes"].items()}
    assert attributes["failure_kind"] == "record_too_large" and attributes["item_id"] == "T-EMOJI"
    assert "over the 229,376 a routing execution may start with" in attributes["failure_reason"]
    assert json.loads(parked["Body"])["ticket_id"] == "T-EMOJI"  # the ticket as it came, for a redrive


def test_a_references_url_is_capped_and_named():
    ticket = {**emoji_ticket(text="Charged twice"), "reference": {"system": "zendesk", "id": "48213",
                                                                  "url": "https://x.zendesk.com/" + "a" * 2_100}}
    with pytest.raises(InvalidItem) as refused:
        parse_item("ticket", ticket)
    assert "reference.url" in str(refused.value) and "2048" in str(refused.value)
    ticket["reference"]["url"] = "https://x.zendesk.com/agent/tickets/48213"
    assert parse_item("ticket", ticket).reference.url.endswith("/48213")  # type: ignore[attr-defined]
