"""Every question's signals kept on a record going to review (domain/kept_signals.py): what they
weigh at the embedded model's hidden size (576) and a 4B model's (2560), and the largest case,
many questions at 2560, kept within the record's limit question by question; the labelled example
and the pending-review row built from it put into the template's tables in moto (DynamoDB's
400 KB item limit) and the dead letter it would become within SQS's 256 KiB."""

from __future__ import annotations

import json

import numpy as np
import pytest
from moto import mock_aws

from decision_contract.signals import hidden_text
from decision_router.adapters.pending_reviews import PendingReviewTable
from decision_router.domain.kept_signals import KeptSignals
from decision_router.domain.policies import load_policy
from decision_router.domain.records import MAX_RECORD_BYTES, DecisionRecord, record_bytes, with_signals_that_fit
from decision_router.review.completion import MAX_TASK_TOKEN, PendingReview
from decision_router.review.pending import pending_row
from local.cloudformation import Stack
from tests.functions.conftest import ALL_TARGETS, unsure_ticket

DESTINATIONS = {t: f"https://sqs.us-east-1.amazonaws.com/123456789012/{t}" for t in ALL_TARGETS}
#: DynamoDB's item limit (attribute names and values, UTF-8) and SQS's message limit.
DYNAMODB_ITEM_BYTES, SQS_MESSAGE_BYTES = 400 * 1024, 256 * 1024


def kept(question: int, hidden_size: int, options: int = 5) -> KeptSignals:
    rng = np.random.default_rng(question)
    return KeptSignals(request_key=f"{question:064x}", model_sha256="a" * 64,
                       hidden=hidden_text(rng.normal(0, 3, hidden_size).tolist()),
                       letter_logits=rng.normal(0, 5, options).tolist(), allowed_token_mass=0.93,
                       prompt_version="direct-options-v1")


def with_signals(questions: int, hidden_size: int) -> DecisionRecord:
    record = unsure_ticket("T-1", destinations=DESTINATIONS)
    return record.model_copy(update={"signals": {f"q{n:02d}": kept(n, hidden_size) for n in range(questions)}})


def question_bytes(hidden_size: int) -> int:
    """What one question's kept signals add to a record's JSON."""
    return record_bytes(with_signals(1, hidden_size)) - record_bytes(with_signals(0, hidden_size))


def test_a_question_weighs_about_1_9_kb_at_576_and_7_2_kb_at_2560():
    """The figures docs/learning/relearning.md gives: base64 float16 (4/3 of 2 bytes a value), the
    logits and the keys."""
    assert 1_850 <= question_bytes(576) <= 1_950
    assert 7_100 <= question_bytes(2560) <= 7_250


def labelled_example(record: DecisionRecord) -> dict[str, dict[str, str]]:
    """The row the workflow's StoreLabelledExample puts (statemachine/routing.asl.json), its columns."""
    dumped = json.loads(record.model_dump_json())
    text = {"policy_name": record.policy.name, "item_key": record.item_key, "item_id": record.item_id,
            "policy_version": record.policy.version, "item_kind": record.item_kind, "item": json.dumps(dumped["item"]),
            "answers": json.dumps({"queue": "billing"}), "reviewer": "ana", "reviewer_id": "x" * 200,
            "identity_signature": "s" * 64, "model_decisions": json.dumps(dumped["decisions"]),
            "route_reason": record.route_reason, "execution_name": "e" * 80, "labelled_at": "2026-12-01T10:00:00.000Z",
            "label_shard": f"{record.policy.name}#7", "signals": json.dumps(dumped["signals"])}
    return {**{k: {"S": v} for k, v in text.items()}, "expires_at": {"N": str(record.label_expires_at)}}


def item_bytes(item: dict[str, dict[str, str]]) -> int:
    return sum(len(name.encode()) + len(next(iter(value.values())).encode()) for name, value in item.items())


@pytest.mark.parametrize("hidden_size", [576, 2560])
def test_many_questions_keep_as_many_signals_as_the_record_holds_and_every_row_fits(hidden_size):
    asked = 200  # more questions than any record could keep the signals of
    record = with_signals_that_fit(with_signals(asked, hidden_size))

    fits = len(record.signals)
    assert 0 < fits < asked and list(record.signals) == [f"q{n:02d}" for n in range(fits)]  # in order, none skipped
    assert record_bytes(record) <= MAX_RECORD_BYTES
    assert record_bytes(record) + question_bytes(hidden_size) > MAX_RECORD_BYTES  # one more would not fit
    assert fits == (119 if hidden_size == 576 else 31)  # about 224 KiB of them

    dead_letter = json.dumps({"error": {"Error": "States.TaskFailed", "Cause": "x" * 4096},
                              "execution_name": "e" * 80, "execution_arn": "a" * 200,
                              "failed_at": "2026-12-01T10:00:00.000Z", "record": json.loads(record.model_dump_json())})
    assert len(dead_letter.encode()) < SQS_MESSAGE_BYTES
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}).create(
            only=["LabelledExamplesTable", "PendingReviewsTable"])
        example = labelled_example(record)
        assert item_bytes(example) < DYNAMODB_ITEM_BYTES
        import boto3

        boto3.client("dynamodb").put_item(TableName=stack.ref("LabelledExamplesTable"), Item=example)
        review = PendingReview(task_token="t" * MAX_TASK_TOKEN, execution_name="ticket-T-1-0123456789abcdef",
                               requested_at="2026-12-01T10:00:00Z", record=record)
        row = pending_row(review, load_policy("support-ticket"), review_timeout_seconds=3600)
        assert PendingReviewTable(stack.ref("PendingReviewsTable")).put(row)


def test_a_record_not_going_to_review_keeps_none_and_one_that_fits_keeps_all():
    small = with_signals(3, 2560)
    assert with_signals_that_fit(small) == small
    assert with_signals_that_fit(small.model_copy(update={"route": "auto"})).signals == {}
