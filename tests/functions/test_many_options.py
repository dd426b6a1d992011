"""Questions with more options than the endpoint has letters: refused without a head, asked of the
endpoint as a signals decision (the 16-letter contract unchanged), answered by the head."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from decision_contract import MAX_OPTIONS, Decision, DecisionOption
from decision_router.domain.judging import build_record, model_entry
from decision_router.domain.model_requests import SIGNAL_OPTION_IDS, SIGNALS_LAYOUT, build_decisions, question_decision
from decision_router.domain.policies import MAX_QUESTION_OPTIONS, PolicyError, load_policy
from decision_router.items import parse_item

from .conftest import MODEL_INFO, TICKET_TARGETS, make_result
from .many_options import install, raw_policy

DESTINATIONS = {t: f"https://sqs/{t}" for t in TICKET_TARGETS}


def ticket(body: str) -> object:
    return parse_item("ticket", {"ticket_id": "T-9", "subject": "Help", "body": body, "customer": {"id": "C-1", "tier": "pro"},
                                 "channel": "email", "created_at": "2026-12-01T10:00:00Z"})


def signals_result(hidden: list[float] | None = None, model=MODEL_INFO):
    result = make_result("intent", SIGNAL_OPTION_IDS, [0.3, 0.1])
    return result.model_copy(update={"hidden_state": hidden, "model": model, "prompt_version": "direct-options-v1"})


def test_a_question_with_more_options_than_letters_and_no_head_is_refused_at_load(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(raw_policy(150)))
    with pytest.raises(PolicyError) as refused:
        load_policy(path)
    message = str(refused.value)
    assert "question 'intent': 150 options, more than the 16 letters (A…P)" in message
    assert "the letters cannot answer it; such a question needs a learned head" in message


def test_sixteen_options_still_load_without_a_head(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(raw_policy(MAX_OPTIONS)))
    assert len(load_policy(path).questions[0].options) == 16


def test_a_question_may_declare_two_hundred_options_with_a_head_but_not_more_than_the_limit(tmp_path):
    policy = load_policy(install(tmp_path, 200))
    assert len(policy.questions[0].options) == 200 and policy.questions[0].many_options
    path = tmp_path / "too-many.json"
    path.write_text(json.dumps(raw_policy(MAX_QUESTION_OPTIONS + 1)))
    with pytest.raises(PolicyError, match=f"at most {MAX_QUESTION_OPTIONS} items"):
        load_policy(path)


def test_a_many_option_head_that_reads_the_letters_is_refused(tmp_path):
    with pytest.raises(PolicyError, match="the head reads the letters, but a question with 40 options gets no letter"):
        load_policy(install(tmp_path, 40, letters=True))


def test_the_endpoint_is_asked_a_signals_decision_within_the_letter_contract(tmp_path):
    policy = load_policy(install(tmp_path, 150, model_sha256=MODEL_INFO.sha256, hidden_size=8))
    (decision,) = build_decisions(policy, ticket("intent42 please"))
    assert decision.option_ids == SIGNAL_OPTION_IDS and decision.return_hidden_state
    assert decision.question == policy.questions[0].question
    # the wire contract is unchanged: a decision still carries 2 to 16 options
    Decision.model_validate(decision.model_dump())
    with pytest.raises(ValidationError, match="at most 16 items"):
        Decision(id="x", state="s", question="q", options=[DecisionOption(id=f"o{i}", description="d") for i in range(17)])


@pytest.mark.parametrize("version, layout", [("direct-options-v1", "evidence-first"), ("criterion-first-v1", "criterion-first")])
def test_a_signals_decision_is_asked_in_the_layout_its_head_was_fitted_on(tmp_path, version, layout):
    # the head refuses hidden states of any other prompt version (heads.mismatch)
    policy = load_policy(install(tmp_path, 150, model_sha256=MODEL_INFO.sha256, hidden_size=8, prompt_version=version))
    (decision,) = build_decisions(policy, ticket("intent42 please"))
    assert decision.layout == layout
    # a caller fitting a head chooses (make fit-history --layout)
    other = "evidence-first" if layout == "criterion-first" else "criterion-first"
    assert question_decision(policy.questions[0], {"body": "x"}, other).layout == other


def test_a_signals_decision_whose_head_reads_no_model_is_asked_in_the_default_signals_layout(tmp_path):
    policy = load_policy(install(tmp_path, 150))  # a text-only head names no prompt version
    (decision,) = build_decisions(policy, ticket("intent42 please"))
    assert decision.layout == SIGNALS_LAYOUT


def test_the_head_answers_a_150_option_question_and_the_record_routes_to_its_target(tmp_path):
    policy = load_policy(install(tmp_path, 150, model_sha256=MODEL_INFO.sha256, hidden_size=8))
    item = ticket("intent42 please")
    (decision,) = build_decisions(policy, item)
    entry = model_entry(policy.questions[0], signals_result([0.1] * 8), decision.state)
    assert (entry.readout, entry.option_id, entry.passed) == ("head", "intent42", True)
    assert entry.letter_probabilities is None and len(entry.head_probabilities) == 150
    assert entry.thresholds.min_confidence == 0.9 and entry.head_version == "many-150"
    record = build_record(policy, item, [entry], destinations=DESTINATIONS,
                          review_timeout_seconds=60)
    assert record.route == "auto" and record.destination.target == TICKET_TARGETS[42 % 5]
    assert len(record.review.choices) == 150 and len(record.review.questions["intent"]) == 150


def test_an_unsure_head_sends_the_item_to_review_with_its_reasons(tmp_path):
    policy = load_policy(install(tmp_path, 77))
    entry = model_entry(policy.questions[0], signals_result(), {"subject": "Help", "message": "nothing known here"})
    assert entry.option_id == "intent0" and not entry.passed
    assert entry.reasons[0].startswith("confidence ") and "tie between intent0 and intent1" in entry.reasons


def test_a_head_bound_to_another_model_cannot_answer_and_nothing_else_can(tmp_path):
    policy = load_policy(install(tmp_path, 150, model_sha256="c" * 64, hidden_size=8))
    entry = model_entry(policy.questions[0], signals_result([0.1] * 8), {"subject": "x", "message": "intent3"})
    assert entry.option_id is None and not entry.passed and entry.readout is None
    assert entry.head_skipped.startswith("endpoint model sha256 000000000000… is not the head's cccccccccccc…")
    assert entry.reasons == [f"head not applied ({entry.head_skipped}); the letters cannot answer a question with 150 options"]
    item = ticket("intent3")
    record = build_record(policy, item, [entry], destinations=DESTINATIONS,
                          review_timeout_seconds=60)
    assert record.route == "review" and record.route_reason.startswith("intent: head not applied")


def test_an_answer_to_other_options_than_the_signals_decision_is_a_bad_response(tmp_path):
    from decision_router.domain.failures import EndpointFailure

    policy = load_policy(install(tmp_path, 20))
    with pytest.raises(EndpointFailure, match="expected its signals decision's"):
        model_entry(policy.questions[0], make_result("intent", ["intent0", "intent1"], [1.0, 0.0]), {"message": "x"})


def test_the_console_lists_a_many_option_question_best_first_by_the_head(tmp_path):
    from decision_router.review.console import decision_view

    policy = load_policy(install(tmp_path, 150, model_sha256=MODEL_INFO.sha256, hidden_size=8))
    item = ticket("intent97, intent42 or intent3")
    (decision,) = build_decisions(policy, item)
    entry = model_entry(policy.questions[0], signals_result([0.0] * 8), decision.state)
    record = build_record(policy, item, [entry], destinations=DESTINATIONS,
                          review_timeout_seconds=60)
    (view,) = decision_view(record, policy)
    ranked = view["ranked"]
    assert sorted(ranked) == sorted(policy.questions[0].option_ids)
    chances = [entry.probabilities[o] for o in ranked]
    assert chances == sorted(chances, reverse=True), "best first"
    assert set(ranked[:3]) == {"intent97", "intent42", "intent3"} and ranked[0] == view["suggested"]
    # equal probabilities keep the policy's order
    rest = ranked[3:]
    assert rest == [o for o in policy.questions[0].option_ids if o in rest]
