"""Who answered a review is proven, never named: the review function takes its caller's identity
from STS (the caller's presigned GetCallerIdentity), the console from the verified token's `sub`,
and each answer carries that identity signed with the stack's key. A display name (`reviewer`,
`review_cli complete --reviewer`) is stored beside it and counts for nothing; an answer sent
straight to SendTaskSuccess cannot sign, so relearning counts it as unauthenticated. On the
fakes (the routing workflow played over them) and, as a smoke test, on the template's resources
in moto with the real workflow executing."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters.caller_identity import StsCallerIdentity, make_proof
from decision_router.adapters.signing_key import SigningKey
from decision_router.domain.records import ReviewAnswer
from decision_router.domain.signatures import IdentityNotProven, review_identity_signature, sign, verify
from local.settling import identity_proof
from relearning.job import read_labels
from tests.fakes.console_worlds import console_world
from tests.functions.test_intake_handlers import ON_THE_STACK, ONLY_ON_THE_STACK, FakeLambdaContext
from tests.functions.test_review_console import ALICE, TICKET, UNSURE_TICKET, decided

MOTO_CALLER = "iam:arn:aws:sts::123456789012:user/moto"  # moto's STS names every caller so


@pytest.fixture
def world(request, monkeypatch):
    monkeypatch.setattr("decision_router.adapters.review.POLL_SECONDS", 0)
    with console_world(getattr(request, "param", "fakes")) as world:
        world.review_function(monkeypatch)
        yield world


def ticket(n: int):
    return {**TICKET, "ticket_id": f"T-{n}"}


def answer_as(world, n: int, reviewer: str, **extra) -> tuple[str, dict]:
    """Put ticket T-n in review and answer it through the review function under `reviewer`."""
    from review import app

    (name,) = world.pending(decided(world.template, "ticket", ticket(n), UNSURE_TICKET))
    message = world.pending_message()
    event = {"execution_name": name, "task_token": message["task_token"], "reviewer": reviewer,
             "answers": {"queue": "sales"}, "receipt_handle": message["receipt_handle"], **extra}
    return name, app.lambda_handler(event, FakeLambdaContext())


@ON_THE_STACK
def test_one_caller_answering_as_three_names_counts_as_one_identity(world):
    """The review function once took `reviewer` from its caller, and the gate counted names: one
    operator answering as alice, bob and carol was three reviewers. Now the three labels carry
    the caller's proven identity, signed; the names are only shown."""
    for n, who in enumerate(["alice@example.com", "bob@example.com", "carol@example.com"]):
        name, out = answer_as(world, n, who, identity_proof=identity_proof())
        assert (out["status"], out["reviewer"], out["reviewer_id"]) == ("completed", who, MOTO_CALLER)
        assert world.finished(name) == "SUCCEEDED"
    rows = world.labelled_examples()
    assert sorted(r["reviewer"] for r in rows) == ["alice@example.com", "bob@example.com", "carol@example.com"]
    assert {r["reviewer_id"] for r in rows} == {MOTO_CALLER}
    labelled, problems = read_labels(rows, world.signing_key)
    assert problems == [] and {r.reviewer_id for r in labelled} == {MOTO_CALLER}
    # Without the stack's key nothing verifies: every label counts as the one unauthenticated reviewer.
    assert {r.reviewer_id for r in read_labels(rows, None)[0]} == {None}
    assert {r.reviewer_id for r in read_labels(rows, SigningKey(b"another-stack-key-" * 3))[0]} == {None}


@ON_THE_STACK
def test_an_answer_without_a_proof_of_its_caller_is_refused_and_nothing_is_sent(world):
    (name,) = world.pending(decided(world.template, "ticket", ticket(5), UNSURE_TICKET))
    message = world.pending_message()
    from review import app

    event = {"execution_name": name, "task_token": message["task_token"], "reviewer": "alice@example.com",
             "answers": {"queue": "sales"}}
    with pytest.raises(IdentityNotProven, match="identity_proof: missing"):
        app.lambda_handler(event, FakeLambdaContext())
    # a proof of another action, or signed for another service, proves nothing either
    forged = identity_proof().replace("Action=GetCallerIdentity", "Action=AssumeRole")
    with pytest.raises(IdentityNotProven, match="must presign STS GetCallerIdentity"):
        app.lambda_handler({**event, "identity_proof": forged}, FakeLambdaContext())
    assert world.status(name) == "RUNNING"
    assert world.labelled_examples() == []


@ON_THE_STACK
def test_the_consoles_reviewer_is_their_sub_signed(world):
    invoke = world.console_function()
    from local.event_sources import http_event

    (name,) = world.pending(decided(world.template, "ticket", ticket(7), UNSURE_TICKET))
    response = invoke(http_event("POST", f"/api/reviews/{name}", body=json.dumps({"answers": {"queue": "sales"}}),
                                 claims=ALICE))
    assert response["statusCode"] == 200, response["body"]
    assert world.finished(name) == "SUCCEEDED"
    (row,) = world.labelled_examples()
    assert (row["reviewer"], row["reviewer_id"]) == ("a-1", "cognito:a-1")
    (label,), _ = read_labels([row], world.signing_key)
    assert label.reviewer_id == "cognito:a-1"


@ONLY_ON_THE_STACK
@pytest.mark.parametrize("forgery", ["made up", "replayed from another execution"])
def test_task_success_sent_straight_to_step_functions_counts_as_unauthenticated(world, forgery):
    """Whoever may SendTaskSuccess with a token from the review queue may still answer (the
    workflow checks the answer), but cannot make the key's signature: the free name and the
    made-up identity count as the one unauthenticated reviewer."""
    record = decided(world.template, "ticket", ticket(8), UNSURE_TICKET)
    (name,) = world.pending(record)
    message = world.pending_message()
    choice = next(c for c in record.review.choices if json.loads(c)["answers"] == {"queue": "sales"})
    identity = "iam:arn:aws:iam::123456789012:user/mallory"
    signature = "0" * 64 if forgery == "made up" else world.signing_key.review_signature("another-execution", identity)
    forged = ReviewAnswer(execution_name=name, reviewer="mallory", choice=choice, reviewer_id=identity,
                          identity_signature=signature)
    boto3.client("stepfunctions").send_task_success(taskToken=message["task_token"], output=forged.model_dump_json())
    assert world.finished(name) == "SUCCEEDED"
    (row,) = world.labelled_examples()
    assert (row["reviewer"], row["reviewer_id"]) == ("mallory", identity)
    (label,), _ = read_labels([row], world.signing_key)
    assert label.reviewer_id is None  # gate.UNAUTHENTICATED
    assert world.signing_key.review_verified(name, identity, world.signing_key.review_signature(name, identity))


def test_the_review_function_logs_the_notes_length_not_its_words(world, caplog):
    note = "customer Jane Roe, card 4111 1111 1111 1111: refund"
    with caplog.at_level("INFO"):
        _, out = answer_as(world, 11, "alice@example.com", identity_proof=identity_proof(), note=note)
    assert out["note"] == note  # the caller gets it back; the log does not
    (record,) = [r for r in caplog.records if r.getMessage() == "review completed"]
    assert record.note_length == len(note) and not hasattr(record, "note")
    assert all("4111" not in str(value) for value in vars(record).values())


def test_a_proof_is_a_presigned_get_caller_identity_for_this_region_and_a_short_time():
    with mock_aws():
        sts = boto3.client("sts", region_name="us-east-1")
        verifier = StsCallerIdentity(region="us-east-1")
        proof = make_proof(sts)
        assert verifier.identity(proof) == MOTO_CALLER
        for bad, says in [
            ("", "identity_proof: missing"),
            (proof + "&Action=GetCallerIdentity", "unexpected parameters"),
            (proof + "&Host=evil.example", "unexpected parameters ['Host']"),
            (proof.replace("Version=2011-06-15", "Version=2099-01-01"), "must presign STS GetCallerIdentity"),
            (proof.replace("X-Amz-Expires=60", "X-Amz-Expires=3600"), "valid 3600 s, at most 300"),
            (proof.replace("%2Fus-east-1%2Fsts%2F", "%2Feu-west-1%2Fsts%2F"), "not sts in us-east-1"),
            (proof.replace("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=host%3Bx-forwarded-host"),
             "signing the host only"),
        ]:
            with pytest.raises(IdentityNotProven, match=says.replace("[", r"\[").replace("]", r"\]")):
                verifier.identity(bad)
        assert make_proof(boto3.client("sts", region_name="eu-west-1")) != proof  # scoped to its region


def test_a_signature_vouches_for_one_purpose_and_one_set_of_parts():
    key = b"k" * 32
    signature = sign(key, "review-identity", "exec-1", "iam:alice")
    assert verify(key, signature, "review-identity", "exec-1", "iam:alice")
    assert not verify(key, signature, "head", "exec-1", "iam:alice")  # another purpose
    assert not verify(key, signature, "review-identity", "exec-2", "iam:alice")  # another execution
    assert not verify(key, signature, "review-identity", "exec-1iam:", "alice")  # parts do not run together
    assert not verify(b"j" * 32, signature, "review-identity", "exec-1", "iam:alice")
    assert not verify(key, "", "review-identity", "exec-1", "iam:alice")
    with pytest.raises(ValueError, match="at least 32"):
        SigningKey(b"short")


def test_two_names_of_one_signed_identity_are_read_as_one_reviewer():
    """relearning reads the display names and the verified identity apart; the gate counts the
    identity (tests/training/test_gate.py: two names of one identity are refused)."""
    rows = []
    for n in range(40):
        rows.append({"policy_name": "support-ticket", "item_id": f"T-{n}", "item": json.dumps(ticket(n)),
                     "answers": json.dumps({"queue": "sales"}), "reviewer": ["mallory", "mallory.ops"][n % 2],
                     "reviewer_id": MOTO_CALLER, "execution_name": f"e-{n}", "labelled_at": f"2026-12-01T00:{n:02d}:00Z",
                     "identity_signature": review_identity_signature(b"k" * 32, f"e-{n}", MOTO_CALLER)})
    labelled, problems = read_labels(rows, SigningKey(b"k" * 32))
    assert problems == [] and {r.reviewer for r in labelled} == {"mallory", "mallory.ops"}
    assert {r.reviewer_id for r in labelled} == {MOTO_CALLER}
