"""Calibration, thresholds and the decision record, on hand-built endpoint results."""

import math
from datetime import datetime, timezone

import pytest

from decision_router.domain.failures import EndpointFailure
from decision_router.domain.judging import build_record, error_entry, model_entry, rule_entry, shortfall, threshold_reasons
from decision_router.domain.policies import Thresholds, load_policy
from decision_router.domain.records import DecisionRecord, execution_name
from decision_router.domain.rules import RuleHit
from decision_router.items import parse_item
from tests.functions.conftest import letters_only, make_result

QUEUES = {t: f"https://sqs.us-east-1.amazonaws.com/123456789012/{t}" for t in
          ["billing", "account-access", "technical-support", "product-help", "sales",
           "platform-oncall", "data-oncall", "security-oncall", "app-oncall"]}
T = Thresholds(min_confidence=0.6, min_margin=0.15, min_allowed_token_mass=0.5)


def record(policy, item, entries):
    return build_record(policy, item, entries, destinations=QUEUES,
                        review_timeout_seconds=86400, decided_at=datetime(2026, 11, 29, 12, tzinfo=timezone.utc))


def test_exactly_at_every_threshold_passes():
    assert threshold_reasons(0.6, 0.15, 0.5, T) == []


def test_just_below_each_threshold_fails_with_readable_reasons():
    assert threshold_reasons(0.5999, 0.1499, 0.4999, T) == [
        "confidence 0.5999 < 0.6000", "margin 0.1499 < 0.1500", "allowed_token_mass 0.4999 < 0.5000"]
    assert threshold_reasons(0.12, 0.5, 0.9, T) == ["confidence 0.12 < 0.60"]


def test_shortfall_never_prints_equal_numbers():
    assert shortfall("confidence", 0.599999, 0.6) == "confidence 0.599999 < 0.600000"


def test_tie_is_never_auto_routed_even_with_zero_thresholds():
    policy = letters_only(load_policy("support-ticket"))
    zero = Thresholds(min_confidence=0, min_margin=0, min_allowed_token_mass=0)
    question = policy.questions[0].model_copy(update={"thresholds": zero})
    entry = model_entry(question, make_result("queue", question.option_ids, [3.0, 3.0, 0.0, 0.0, 0.0]))
    assert entry.option_id == "billing"  # first in option order
    assert not entry.passed and entry.reasons == ["tie between billing and account_access"]


def test_temperature_recalibrates_the_raw_logits():
    policy = letters_only(load_policy("support-ticket"))
    hot = policy.questions[0].model_copy(update={"temperature": 2.0})
    logits = [4.0, 1.0, 0.0, 0.0, 0.0]
    entry = model_entry(hot, make_result("queue", hot.option_ids, logits))  # container used T=1
    expected = [math.exp(z / 2) for z in logits]
    assert entry.probabilities["billing"] == pytest.approx(expected[0] / sum(expected))
    assert entry.temperature == 2.0 and entry.option_id == "billing"
    cold = model_entry(policy.questions[0], make_result("queue", hot.option_ids, logits))
    assert cold.confidence > entry.confidence  # higher temperature → less confident, same argmax


def test_confident_answer_routes_automatically(ticket_data):
    policy = letters_only(load_policy("support-ticket"))
    question = policy.questions[0]
    entry = model_entry(question, make_result("queue", question.option_ids, [0.0, 0.0, 0.0, 6.0, 0.0]))
    assert entry.passed and entry.source == "model" and entry.option_id == "how_to"
    rec = record(policy, parse_item("ticket", ticket_data), [entry])
    assert rec.route == "auto" and rec.route_reason == "all thresholds met"
    assert rec.destination.target == "product-help" and rec.destination.queue_url == QUEUES["product-help"]
    assert rec.review.questions == {"queue": ["billing", "account_access", "technical_fault", "how_to", "sales"]}
    assert rec.decided_at == "2026-11-29T12:00:00Z" and rec.item["ticket_id"] == "T-1001"


def test_low_mass_sends_to_review_even_when_peaked(ticket_data):
    policy = letters_only(load_policy("support-ticket"))
    question = policy.questions[0]
    entry = model_entry(question, make_result("queue", question.option_ids, [9.0, 0, 0, 0, 0], mass=0.2))
    rec = record(policy, parse_item("ticket", ticket_data), [entry])
    assert rec.route == "review" and rec.destination is None
    assert rec.route_reason == "queue: allowed_token_mass 0.20 < 0.50"
    assert rec.decisions[0].option_id == "billing"  # kept as the reviewer's suggestion


def test_option_mismatch_is_a_bad_response():
    question = letters_only(load_policy("support-ticket")).questions[0]
    with pytest.raises(EndpointFailure, match="bad_response"):
        model_entry(question, make_result("queue", ["a", "b"], [1.0, 0.0]))


def test_incident_rule_p1_escalates_even_when_team_goes_to_review(incident_data):
    policy = letters_only(load_policy("incident"))
    item = parse_item("incident", incident_data)
    team = policy.question("team")
    entries = [rule_entry(policy.question("priority"), RuleHit("sev1-is-p1", "priority", "P1")),
               model_entry(team, make_result("team", team.option_ids, [1.0, 0.9, 0.0, 0.8]))]
    rec = record(policy, item, entries)
    assert rec.route == "review" and rec.escalate is True
    assert rec.decisions[0].source == "rule" and rec.decisions[0].rule == "sev1-is-p1" and rec.decisions[0].passed
    assert rec.route_reason.startswith("team: confidence ")


def test_incident_auto_p2_does_not_escalate(incident_data):
    policy = letters_only(load_policy("incident"))
    p, t = policy.question("priority"), policy.question("team")
    entries = [model_entry(p, make_result("priority", p.option_ids, [0, 8.0, 0, 0])),
               model_entry(t, make_result("team", t.option_ids, [0, 0, 0, 8.0]))]
    rec = record(policy, parse_item("incident", incident_data), entries)
    assert (rec.route, rec.escalate, rec.destination.target) == ("auto", False, "app-oncall")


def test_endpoint_error_goes_to_review_with_the_reason(ticket_data):
    policy = letters_only(load_policy("support-ticket"))
    failure = EndpointFailure("retryable_model_error", "busy", status_code=503, attempts=4, retryable=True)
    rec = record(policy, parse_item("ticket", ticket_data), [error_entry(policy.questions[0], failure)])
    assert rec.route == "review" and rec.decisions[0].source == "endpoint_error"
    assert rec.decisions[0].option_id is None and rec.decisions[0].error.attempts == 4
    assert rec.route_reason == "queue: endpoint error: retryable_model_error 503 after 4 attempt(s): busy"


def test_record_is_plain_json_of_the_interface_shape(ticket_data):
    policy = letters_only(load_policy("support-ticket"))
    q = policy.questions[0]
    rec = record(policy, parse_item("ticket", ticket_data), [model_entry(q, make_result("queue", q.option_ids, [1, 0, 0, 0, 0]))])
    data = rec.model_dump(mode="json")
    assert set(data) == {"item_kind", "item_id", "item_key", "item", "policy", "route", "route_reason", "destination",
                         "escalate", "decisions", "review", "decided_at", "announce", "shadow", "linked",
                         "audit_expires_at", "label_expires_at", "signals"}
    assert data["audit_expires_at"] is None  # set as its execution is started
    assert data["signals"] == {}  # a result without a hidden state keeps no signals
    assert data["linked"] is None  # a ticket linked to no open incident
    assert data["announce"] == {"reference": None, "answers": {"queue": "billing"},
                                "confidence": {"queue": rec.decisions[0].confidence}, "readout": {"queue": "letters"}}
    assert set(data["decisions"][0]) >= {"question", "source", "option_id", "probabilities", "confidence",
                                         "confidence_formula", "margin", "allowed_token_mass", "temperature",
                                         "thresholds", "passed", "reasons", "rule", "error", "model",
                                         "prompt_sha256", "latency_seconds"}
    assert DecisionRecord.model_validate_json(rec.model_dump_json()) == rec


def test_a_record_kept_with_the_retired_review_queue_still_reads_and_is_written_without_it(ticket_data):
    policy = letters_only(load_policy("support-ticket"))
    q = policy.questions[0]
    rec = record(policy, parse_item("ticket", ticket_data), [model_entry(q, make_result("queue", q.option_ids, [1, 0, 0, 0, 0]))])
    assert set(rec.model_dump(mode="json")["review"]) == {"timeout_seconds", "questions", "choices"}
    kept = rec.model_dump(mode="json")
    kept["review"]["queue_url"] = "https://sqs.us-east-1.amazonaws.com/123456789012/decision-router-ReviewQueue"
    read = DecisionRecord.model_validate(kept)
    assert read == rec and "queue_url" not in read.model_dump(mode="json")["review"]
    kept["review"]["queue"] = "a field no release wrote"
    with pytest.raises(ValueError, match="review.queue"):
        DecisionRecord.model_validate(kept)


def test_missing_question_is_refused(incident_data):
    policy = letters_only(load_policy("incident"))
    with pytest.raises(ValueError, match="no decision for question\\(s\\) \\['team'\\]"):
        record(policy, parse_item("incident", incident_data),
               [rule_entry(policy.question("priority"), RuleHit("r", "priority", "P1"))])


@pytest.mark.parametrize("item_id", ["T-1001", "tick et/ü#1", "x" * 300, "---"])
def test_execution_names_are_valid_and_deterministic(item_id):
    key = f"incident:cloudwatch:{item_id}:0123456789abcdef"
    names = [execution_name("incident", item_id, key, attempt) for attempt in (1, 2, 99)]
    for name in names:
        assert len(name) <= 80 and all(c.isalnum() and c.isascii() or c in "-_" for c in name)
    assert names[0] == execution_name("incident", item_id, key)
    assert names[1] == names[0] + "-r2" and names[2] == names[0] + "-r99"
    assert names[0] != execution_name("incident", item_id, key.replace("cloudwatch", "datadog"))


def test_the_item_key_is_kind_source_id_and_payload(ticket_data, incident_data):
    ticket = parse_item("ticket", ticket_data)
    assert ticket.key.startswith("ticket:email:T-1001:")
    assert parse_item("ticket", dict(ticket_data)).key == ticket.key  # a duplicate
    assert parse_item("ticket", dict(ticket_data, body="updated text")).key != ticket.key
    first = parse_item("incident", dict(incident_data, incident_id="123", source="cloudwatch"))
    second = parse_item("incident", dict(incident_data, incident_id="123", source="datadog"))
    assert first.key != second.key and first.key.startswith("incident:cloudwatch:123:")
