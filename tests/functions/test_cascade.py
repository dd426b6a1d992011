"""The cascade (a question's `model`): with when_unsure the head over the words answers alone when
it is sure, and only the items it is unsure of go to the endpoint, whose letters then decide;
with never, the endpoint is never asked; a head that reads the model may not answer without it."""

from __future__ import annotations

import json

import pytest

from decision_router.domain.policies import PolicyError, load_policy
from decision_router.domain.routing import Router
from decision_router.items import parse_item
from tests.fakes.intake import FakeEndpoint

from .conftest import MODEL_INFO, TICKET_TARGETS
from .many_options import install

DESTINATIONS = {t: f"https://sqs/{t}" for t in TICKET_TARGETS}
OPTIONS = 6


def ticket(body: str, ticket_id: str = "T-1") -> object:
    return parse_item("ticket", {"ticket_id": ticket_id, "subject": "Help", "body": body,
                                 "customer": {"id": "C-1", "tier": "pro"}, "channel": "email",
                                 "created_at": "2026-12-01T10:00:00Z"})


def policy_with(tmp_path, model: str, **head):
    path = install(tmp_path, OPTIONS, **head)
    raw = json.loads(path.read_text())
    raw["questions"][0]["model"] = model
    path.write_text(json.dumps(raw))
    return load_policy(path)


def router(endpoint: FakeEndpoint) -> Router:
    return Router(endpoint, destinations=DESTINATIONS, review_timeout_seconds=60)


def test_when_unsure_a_sure_head_answers_from_the_words_and_the_endpoint_is_not_asked(tmp_path):
    policy = policy_with(tmp_path, "when_unsure")
    endpoint = FakeEndpoint({"intent": [0.0] * OPTIONS})
    record, seconds = router(endpoint).decision_record(ticket("intent3 please"), policy)
    (entry,) = record.decisions
    assert (entry.tier, entry.readout, entry.option_id, entry.passed) == ("words", "head", "intent3", True)
    assert record.route == "auto" and record.destination.target == TICKET_TARGETS[3 % len(TICKET_TARGETS)]
    assert endpoint.requests == [] and seconds is None
    assert entry.why is not None and entry.why.fields  # what moved the answer, from the words alone


def test_when_unsure_an_unsure_head_asks_the_endpoint_and_the_letters_decide(tmp_path):
    policy = policy_with(tmp_path, "when_unsure")
    endpoint = FakeEndpoint({"intent": [0.0, 0.0, 0.0, 0.0, 9.0, 0.0]})
    record, seconds = router(endpoint).decision_record(ticket("nothing the head knows"), policy)
    (entry,) = record.decisions
    assert len(endpoint.requests) == 1 and seconds is not None
    assert (entry.tier, entry.readout, entry.option_id, entry.passed) == ("endpoint", "letters", "intent4", True)
    assert record.route == "auto"


def test_when_unsure_an_item_neither_tier_is_sure_of_goes_to_review(tmp_path):
    policy = policy_with(tmp_path, "when_unsure")
    endpoint = FakeEndpoint({"intent": [0.0] * OPTIONS})
    record, _ = router(endpoint).decision_record(ticket("nothing the head knows"), policy)
    assert record.route == "review" and record.decisions[0].tier == "endpoint"


def test_never_sends_what_the_head_is_unsure_of_to_review_without_asking_the_endpoint(tmp_path):
    policy = policy_with(tmp_path, "never")
    endpoint = FakeEndpoint({"intent": [9.0] + [0.0] * (OPTIONS - 1)})
    record, _ = router(endpoint).decision_record(ticket("nothing the head knows"), policy)
    (entry,) = record.decisions
    assert endpoint.requests == [] and record.route == "review"
    assert entry.tier == "words" and not entry.passed and entry.reasons[0].startswith("confidence ")


def test_always_asks_the_endpoint_even_when_the_head_is_sure(tmp_path):
    policy = policy_with(tmp_path, "always")
    endpoint = FakeEndpoint({"intent": [0.0] * OPTIONS})
    record, _ = router(endpoint).decision_record(ticket("intent3 please"), policy)
    assert len(endpoint.requests) == 1 and record.decisions[0].tier == "endpoint"


def test_a_head_that_reads_the_model_cannot_answer_without_the_endpoint(tmp_path):
    with pytest.raises(PolicyError, match="model is when_unsure, so its head answers without the endpoint, but the head "
                                          "reads the model's signals"):
        policy_with(tmp_path, "when_unsure", model_sha256=MODEL_INFO.sha256, hidden_size=8)


def test_a_question_that_never_asks_the_model_needs_a_head(tmp_path):
    path = install(tmp_path, OPTIONS)
    raw = json.loads(path.read_text())
    raw["questions"][0].pop("head")
    raw["questions"][0]["model"] = "never"
    path.write_text(json.dumps(raw))
    with pytest.raises(PolicyError, match="model 'never' needs a head"):
        load_policy(path)


def test_when_the_endpoint_fails_the_words_answer_stands_beside_the_questions_it_left(tmp_path):
    """A policy of two questions: the routing one settled by its head over the words, the other
    asked of the endpoint, which fails: the words' answer stays in the record, the other question
    says the endpoint failed, and the item goes to review (before, the words' answer was dropped
    with the failure and the record could not be built)."""
    path = install(tmp_path, OPTIONS)
    raw = json.loads(path.read_text())
    raw["questions"][0]["model"] = "when_unsure"
    raw["questions"].append({"id": "urgency", "question": "How urgent is it?",
                             "options": [{"id": "low", "description": "It can wait."},
                                         {"id": "high", "description": "It cannot wait."}],
                             "thresholds": {"min_confidence": 0.6, "min_margin": 0.1, "min_allowed_token_mass": 0.5}})
    path.write_text(json.dumps(raw))
    policy = load_policy(path)
    endpoint = FakeEndpoint().fail("model_error", "the model broke")
    record, _ = router(endpoint).decision_record(ticket("intent3 please"), policy)
    by_question = {d.question: d for d in record.decisions}
    assert (by_question["intent"].tier, by_question["intent"].option_id, by_question["intent"].passed) == ("words", "intent3", True)
    assert by_question["urgency"].source == "endpoint_error" and record.route == "review"
    assert [d.id for d in endpoint.asked] == ["urgency"]  # the words settled the routing question


def test_a_shadow_on_the_words_answers_beside_the_head_the_words_settled(tmp_path):
    from decision_router.domain.routing import ShadowHead

    policy = policy_with(tmp_path, "when_unsure")
    head = policy.questions[0].learned_head
    endpoint = FakeEndpoint({"intent": [0.0] * OPTIONS})
    record, _ = router(endpoint).decision_record(ticket("intent3 please"), policy,
                                       shadows={"intent": ShadowHead(head=head, sha256="e" * 64)})
    shadow = record.shadow["intent"]
    assert (shadow.option_id, shadow.passed, shadow.agrees, shadow.sha256) == ("intent3", True, True, "e" * 64)
    assert endpoint.requests == []
