"""Who answered a review is proven, never named: the review function takes its caller's identity
from STS (the caller's GetCallerIdentity, presigned for this one answer), the console from the
verified token's `sub`, and each answer carries that identity signed with the stack's key. The
review function's STS here is a stand-in that verifies the signature as STS does
(tests/functions/sts_stand_in.py; moto's STS checks none). What a proof can do is held here:

- it is signed for GET, the method the function sends it with;
- it answers one answer: this stack's review function, this execution, this task token, these
  answers and this note (a signed header STS verifies), and only once;
- only principals of the stack's own account that its ReviewerPrincipals lists are admitted, and
  each is named to people by its own user or session name, never by a name the caller sends;
- the task token must be the one the named execution's review waits on (its row of the
  pending-review index); a receipt handle the caller hands over is refused;
- both sides talk to STS's regional host, whatever AWS_STS_REGIONAL_ENDPOINTS says.

On the fakes (the routing workflow played over them) and, as a smoke test, on the template's
resources in moto with the real workflow executing."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters.caller_identity import StsCallerIdentity, make_proof, sts_client
from decision_router.adapters.signing_key import SigningKey
from decision_router.config import Settings
from decision_router.domain.callers import ANSWER_HEADER, ReviewerPrincipals, answer_binding, shown_name
from decision_router.domain.records import ReviewAnswer
from decision_router.domain.signatures import IdentityNotProven, review_identity_signature, sign, verify
from decision_router.review.completion import InvalidReview
from local.cloudformation import Stack
from local.event_sources import http_event
from relearning.job import read_labels
from tests.fakes.console_worlds import console_world
from tests.functions.sts_stand_in import ALICE, BOB, CAROL, FOREIGN, FUNCTION_NAME, MALLORY, StsStandIn
from tests.functions.test_intake_handlers import ON_THE_STACK, ONLY_ON_THE_STACK, FakeLambdaContext
from tests.functions.test_review_console import ALICE as CONSOLE_ALICE
from tests.functions.test_review_console import TICKET, UNSURE_TICKET, decided


@pytest.fixture
def world(request, monkeypatch):
    with console_world(getattr(request, "param", "fakes")) as world:
        world.review_function(monkeypatch)
        yield world


def ticket(n: int):
    return {**TICKET, "ticket_id": f"T-{n}"}


def in_review(world, *ns: int) -> list[tuple[str, str]]:
    """Tickets T-n put in review: (execution name, the task token its review waits on) each."""
    names = world.pending(*(decided(world.template, "ticket", ticket(n), UNSURE_TICKET) for n in ns))
    messages = {m["execution_name"]: m for m in world.review_requests()}
    return [(name, messages[name]["task_token"]) for name in names]


def event(name: str, token: str, answers: dict | None = None, **extra) -> dict:
    return {"execution_name": name, "task_token": token, "answers": answers or {"queue": "sales"}, **extra}


def invoke(event_: dict) -> dict:
    from review import app

    return app.lambda_handler(event_, FakeLambdaContext())


def answer_as(world, n: int, principal=ALICE, **extra) -> tuple[str, dict]:
    """Put ticket T-n in review and answer it through the review function as `principal`."""
    ((name, token),) = in_review(world, n)
    return name, invoke(principal.prove(event(name, token, **extra)))


# ------------------------------------------------------------------------------ who answered
@ON_THE_STACK
def test_each_proven_principal_counts_as_itself_and_is_shown_by_its_own_name(world):
    """Two sessions of the listed role and a listed user: three identities, each label signed; the
    name shown is the principal's session or user name (no name is sent)."""
    for n, who in enumerate([ALICE, BOB, CAROL]):
        name, out = answer_as(world, n, who)
        assert (out["status"], out["reviewer_id"]) == ("completed", f"iam:{who.arn}")
        assert out["reviewer"] == shown_name(who.arn)
        assert world.finished(name) == "SUCCEEDED"
    rows = world.labelled_examples()
    assert sorted(r["reviewer"] for r in rows) == ["alice@example.com", "bob@example.com", "carol"]
    labelled, problems = read_labels(rows, world.signing_key)
    assert problems == [] and {r.reviewer_id for r in labelled} == {f"iam:{p.arn}" for p in (ALICE, BOB, CAROL)}
    # Without the stack's key nothing verifies: every label counts as the one unauthenticated reviewer.
    assert {r.reviewer_id for r in read_labels(rows, None)[0]} == {None}
    assert {r.reviewer_id for r in read_labels(rows, SigningKey(b"another-stack-key-" * 3))[0]} == {None}


@ON_THE_STACK
def test_an_answer_without_a_proof_of_its_caller_is_refused_and_nothing_is_sent(world):
    ((name, token),) = in_review(world, 5)
    with pytest.raises(IdentityNotProven, match="identity_proof: missing"):
        invoke(event(name, token))
    # a proof of another action proves nothing either
    forged = ALICE.prove(event(name, token))
    forged["identity_proof"] = forged["identity_proof"].replace("Action=GetCallerIdentity", "Action=AssumeRole")
    with pytest.raises(IdentityNotProven, match="must presign STS GetCallerIdentity"):
        invoke(forged)
    assert world.status(name) == "RUNNING"
    assert world.labelled_examples() == []


@ON_THE_STACK
def test_only_principals_of_this_account_that_the_stack_lists_may_answer(world):
    """A caller could once sign proofs with principals of any account (one they own: any number
    of "verified" reviewers). Now the principal must be of the stack's account and listed."""
    ((name, token),) = in_review(world, 3)
    with pytest.raises(IdentityNotProven, match=r"not of this stack's account \(123456789012\)"):
        invoke(FOREIGN.prove(event(name, token)))  # the listed role's name, in another account
    with pytest.raises(IdentityNotProven, match="not one of the reviewer principals the stack's ReviewerPrincipals"):
        invoke(MALLORY.prove(event(name, token)))  # this account's, not listed
    assert world.status(name) == "RUNNING" and world.labelled_examples() == []


def test_a_stack_that_lists_no_reviewers_refuses_every_answer_through_the_function(world, monkeypatch):
    """The parameter's default is empty: answers through the function are refused, naming it."""
    from review import app

    default = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})
    assert default.function_environment("ReviewCompletionFunction")["REVIEWER_PRINCIPALS"] == ""
    monkeypatch.setattr(app.WIRING, "settings", Settings.from_env({
        **world.environment("ReviewCompletionFunction"), "REVIEWER_PRINCIPALS": ""}))
    ((name, token),) = in_review(world, 4)
    with pytest.raises(IdentityNotProven, match="lists no reviewer principals.*ReviewerPrincipals parameter"):
        invoke(ALICE.prove(event(name, token)))
    assert world.sts.requests == []  # refused before STS is asked


def test_names_the_caller_sends_are_refused_and_the_console_shows_the_proven_ones(world):
    """The console once showed `reviewer_email` / `reviewer_username` as who answered, and the
    review function took them from its caller: an IAM caller was shown as alice@example.com."""
    ((name, token),) = in_review(world, 7)
    for field in ("reviewer_email", "reviewer_username", "reviewer"):
        with pytest.raises(InvalidReview, match=f"{field}: .*proven AWS identity"):
            invoke(BOB.prove(event(name, token, **{field: "alice@example.com"})))
    out = invoke(CAROL.prove(event(name, token)))
    assert (out["reviewer"], out["reviewer_id"]) == ("carol", f"iam:{CAROL.arn}")
    assert world.finished(name) == "SUCCEEDED"
    page = world.console_function()(http_event("GET", f"/api/executions/{name}", claims=CONSOLE_ALICE))
    assert json.loads(page["body"])["reviewer"] == "carol"
    (resolved,) = [r for r in world.resolved_items.recent("support-ticket") if r.item_id == "T-7"]
    assert resolved.resolved_by == "carol"


# ------------------------------------------------------------------------------ what a proof answers
def test_a_proof_answers_only_the_answer_it_was_made_for(world):
    """A proof was once a bearer token for its minute: whoever saw alice's answered other reviews
    as alice. Now it signs this answer's binding, which the function recomputes from the event."""
    (first, token_1), (second, token_2) = in_review(world, 0, 1)
    proof = ALICE.prove(event(first, token_1))["identity_proof"]
    replays = [event(second, token_2),  # another review
               event(first, token_1, {"queue": "billing"}),  # other answers
               event(first, token_1, note="changed")]  # another note
    for replayed in replays:
        with pytest.raises(IdentityNotProven, match="STS refused it .*SignatureDoesNotMatch"):
            invoke({**replayed, "identity_proof": proof})
    # made for another stack's review function (its name is bound too)
    elsewhere = ALICE.prove(event(first, token_1), function="another-stacks-review-function")
    with pytest.raises(IdentityNotProven, match="SignatureDoesNotMatch"):
        invoke(elsewhere)
    assert world.status(first) == world.status(second) == "RUNNING" and world.labelled_examples() == []
    out = invoke({**event(first, token_1), "identity_proof": proof})
    assert (out["status"], out["reviewer_id"]) == ("completed", f"iam:{ALICE.arn}")


def test_a_proof_that_signs_no_binding_or_another_header_set_is_refused(world):
    ((name, token),) = in_review(world, 2)
    unbound = ALICE.sts().generate_presigned_url("get_caller_identity", ExpiresIn=60, HttpMethod="GET")
    binding = answer_binding(FUNCTION_NAME, name, token, {"queue": "sales"})
    for proof in (unbound.partition("?")[2],
                  make_proof(ALICE.sts(), binding).replace("x-decision-router-answer", "x-other")):
        with pytest.raises(IdentityNotProven, match="signing exactly 'host;x-decision-router-answer'"):
            invoke({**event(name, token), "identity_proof": proof})
    assert world.sts.requests == []  # refused before STS is asked


def test_a_proof_answers_once(world):
    """Accepted once, remembered until it expires: the same event again is refused, even while
    its review's row is still there (the replay came before the first answer removed it)."""
    ((name, token),) = in_review(world, 9)
    proved = ALICE.prove(event(name, token))
    waiting = world.pending_reviews.get(name)
    assert invoke(proved)["status"] == "completed"
    world.pending_reviews.put(waiting)
    with pytest.raises(IdentityNotProven, match="used before: a proof answers once"):
        invoke(proved)
    (row,) = world.used_proofs.rows.values()
    assert row["expiration"] > row["used_at"] + 60  # past the proof's own minute


def test_the_proof_is_signed_for_get_and_sts_refuses_one_signed_for_post():
    """boto3 presigns an STS operation for POST by default; the function sends the proof as GET,
    and STS verifies the method it gets: a POST-signed proof never verified in AWS."""
    sts = StsStandIn()
    checker = StsCallerIdentity(region="us-east-1")
    sts.attach(checker.client)
    binding = answer_binding(FUNCTION_NAME, "ticket-T-1-x", "token", {"queue": "sales"})
    client = ALICE.sts()
    client.meta.events.register("before-sign.sts.GetCallerIdentity",
                                lambda request, **_: request.headers.__setitem__(ANSWER_HEADER, binding))
    post = client.generate_presigned_url("get_caller_identity", ExpiresIn=60).partition("?")[2]
    with pytest.raises(IdentityNotProven, match="SignatureDoesNotMatch"):
        checker.identity(post, binding=binding)
    proof = make_proof(ALICE.sts(), binding)
    assert checker.identity(proof, binding=binding).arn == ALICE.arn
    assert [method for method, _, _ in sts.requests] == ["GET", "GET"]


def test_both_sides_use_stss_regional_host_whatever_the_environment_says(monkeypatch):
    """With AWS_STS_REGIONAL_ENDPOINTS=legacy, boto3 sends us-east-1 to the global host: a proof
    signed there would not verify at the function's regional host (the host is signed)."""
    monkeypatch.setenv("AWS_STS_REGIONAL_ENDPOINTS", "legacy")
    assert boto3.client("sts", region_name="us-east-1").meta.endpoint_url == "https://sts.amazonaws.com"
    assert sts_client("us-east-1").meta.endpoint_url == "https://sts.us-east-1.amazonaws.com"  # the CLI's
    checker = StsCallerIdentity(region="us-east-1")  # the function's
    assert checker.client.meta.endpoint_url == "https://sts.us-east-1.amazonaws.com"
    sts = StsStandIn()
    sts.attach(checker.client)
    binding = answer_binding(FUNCTION_NAME, "ticket-T-1-x", "token", {"queue": "sales"})
    assert checker.identity(make_proof(sts_client("us-east-1", aws_access_key_id=ALICE.access_key,
                                                  aws_secret_access_key=ALICE.secret_key,
                                                  aws_session_token=ALICE.token), binding), binding=binding).arn == ALICE.arn
    ((_, url, _),) = sts.requests
    assert url.startswith("https://sts.us-east-1.amazonaws.com/?")


def test_a_proof_is_a_presigned_get_caller_identity_for_this_region_and_a_short_time():
    sts = StsStandIn()
    verifier = StsCallerIdentity(region="us-east-1")
    sts.attach(verifier.client)
    binding = answer_binding(FUNCTION_NAME, "ticket-T-1-x", "token", {"queue": "sales"})
    proof = make_proof(ALICE.sts(), binding)
    assert verifier.identity(proof, binding=binding).arn == ALICE.arn
    for bad, says in [
        ("", "identity_proof: missing"),
        (proof + "&Action=GetCallerIdentity", "unexpected parameters"),
        (proof + "&Host=evil.example", "unexpected parameters ['Host']"),
        (proof.replace("Version=2011-06-15", "Version=2099-01-01"), "must presign STS GetCallerIdentity"),
        (proof.replace("X-Amz-Expires=60", "X-Amz-Expires=3600"), "valid 3600 s, at most 300"),
        (proof.replace("%2Fus-east-1%2Fsts%2F", "%2Feu-west-1%2Fsts%2F"), "not sts in us-east-1"),
        (make_proof(ALICE.sts("eu-west-1"), binding), "not sts in us-east-1"),
        (proof.replace("X-Amz-SignedHeaders=host%3B", "X-Amz-SignedHeaders=host%3Bx-forwarded-host%3B"),
         "signing exactly 'host;x-decision-router-answer'"),
        (proof.replace("X-Amz-Date=2", "X-Amz-Date=3"), "ahead of this function's clock"),
        (proof[:-4] + ("0000" if not proof.endswith("0000") else "1111"), "SignatureDoesNotMatch"),
    ]:
        with pytest.raises(IdentityNotProven, match=says.replace("[", r"\[").replace("]", r"\]")):
            verifier.identity(bad, binding=binding)


# ------------------------------------------------------------------------------ the task token and the message
@ON_THE_STACK
def test_a_task_token_of_another_execution_is_refused_and_nothing_is_sent(world):
    """The function once sent any token it was given: an answer to T-10 sent with T-11's token
    completed T-11's task with T-10's answer, which the workflow dead-lettered."""
    (t10, _), (t11, token_11) = in_review(world, 10, 11)
    with pytest.raises(InvalidReview, match=f"task_token: not the token execution '{t10}'"):
        invoke(ALICE.prove(event(t10, token_11)))
    assert world.status(t10) == world.status(t11) == "RUNNING"
    assert world.labelled_examples() == []


@ON_THE_STACK
def test_a_receipt_handle_is_refused_and_only_the_answered_review_leaves_the_index(world):
    """The function once deleted whatever receipt handle it was given: a caller removed another
    pending review's message (it waited, listed nowhere, until its timeout). Now the answered
    review's own row alone is removed."""
    (t8, token_8), (t9, _) = in_review(world, 8, 9)
    with pytest.raises(InvalidReview, match="receipt_handle: reviews are no longer read from a queue"):
        invoke(ALICE.prove(event(t8, token_8, receipt_handle="AQEB-another-reviews-handle")))
    assert invoke(ALICE.prove(event(t8, token_8)))["status"] == "completed"
    assert world.finished(t8) == "SUCCEEDED"
    assert {m["execution_name"] for m in world.review_requests()} == {t9}


# ------------------------------------------------------------------------------ the reviewers' list
def test_reviewer_principals_are_this_accounts_roles_users_or_exact_principals():
    listed = ReviewerPrincipals.parse("arn:aws:iam::123456789012:role/reviewers/Reviewer, role/Ops*, "
                                      "user/reviewers/carol,arn:aws:sts::123456789012:assumed-role/Audit/dan",
                                      account="123456789012")
    session = "arn:aws:sts::123456789012:assumed-role/{}/{}"
    assert listed.admit(session.format("Reviewer", "alice")).identity == f"iam:{session.format('Reviewer', 'alice')}"
    assert listed.admit(session.format("OpsOnCall", "erin")).shown == "erin"
    assert listed.admit("arn:aws:iam::123456789012:user/reviewers/carol").shown == "carol"
    assert listed.admit(session.format("Audit", "dan")).shown == "dan"
    for refused in (session.format("Audit", "eve"), session.format("ReviewerX", "alice"), session.format("Op", "x"),
                    "arn:aws:iam::123456789012:user/carol", "arn:aws:iam::123456789012:role/reviewers/Reviewer"):
        with pytest.raises(IdentityNotProven, match="not one of the reviewer principals"):
            listed.admit(refused)
    with pytest.raises(IdentityNotProven, match="not of this stack's account"):
        listed.admit("arn:aws:sts::999999999999:assumed-role/Reviewer/alice")
    with pytest.raises(IdentityNotProven, match="not of this stack's account"):
        listed.admit("arn:aws-cn:sts::123456789012:assumed-role/Reviewer/alice")
    for entry, says in [("arn:aws:iam::999999999999:role/Reviewer", "not of this stack's account"),
                        ("role/reviewers/*", "a path cannot be matched"), ("user/*", "only a role name may end in"),
                        ("Reviewer", "not an ARN")]:
        with pytest.raises(IdentityNotProven, match=says):
            ReviewerPrincipals.parse(entry, account="123456789012")
    assert not ReviewerPrincipals.parse(" , ", account="123456789012")


def test_the_binding_changes_with_every_part_of_the_answer():
    base = ("review-fn", "ticket-T-1-x", "token", {"queue": "sales"}, "")
    seen = {answer_binding(*base)}
    for index, other in [(0, "other-fn"), (1, "ticket-T-2-x"), (2, "token2"), (3, {"queue": "billing"}), (4, "note")]:
        changed = list(base)
        changed[index] = other
        seen.add(answer_binding(*changed))
    assert len(seen) == 6
    assert answer_binding("f", "e", "t", {"a": "1", "b": "2"}) == answer_binding("f", "e", "t", {"b": "2", "a": "1"})


# ------------------------------------------------------------------------------ the console, and SendTaskSuccess
@ON_THE_STACK
def test_the_consoles_reviewer_is_their_sub_signed(world):
    invoke_console = world.console_function()
    ((name, _),) = in_review(world, 12)
    response = invoke_console(http_event("POST", f"/api/reviews/{name}", body=json.dumps({"answers": {"queue": "sales"}}),
                                         claims=CONSOLE_ALICE))
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
        _, out = answer_as(world, 11, ALICE, note=note)
    assert out["note"] == note  # the caller gets it back; the log does not
    (record,) = [r for r in caplog.records if r.getMessage() == "review completed"]
    assert record.note_length == len(note) and not hasattr(record, "note")
    assert all("4111" not in str(value) for value in vars(record).values())


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
    identity = f"iam:{ALICE.arn}"
    rows = []
    for n in range(40):
        rows.append({"policy_name": "support-ticket", "item_id": f"T-{n}", "item": json.dumps(ticket(n)),
                     "answers": json.dumps({"queue": "sales"}), "reviewer": ["mallory", "mallory.ops"][n % 2],
                     "reviewer_id": identity, "execution_name": f"e-{n}", "labelled_at": f"2026-12-01T00:{n:02d}:00Z",
                     "identity_signature": review_identity_signature(b"k" * 32, f"e-{n}", identity)})
    labelled, problems = read_labels(rows, SigningKey(b"k" * 32))
    assert problems == [] and {r.reviewer for r in labelled} == {"mallory", "mallory.ops"}
    assert {r.reviewer_id for r in labelled} == {identity}


def test_moto_is_not_what_checks_a_proof_here():
    """moto's STS answers any request, signed or not, with one caller: the tests' review function
    asks the signature-checking stand-in instead (tests/functions/sts_stand_in.py)."""
    with mock_aws():
        binding = answer_binding(FUNCTION_NAME, "e", "t", {"queue": "sales"})
        forged = make_proof(ALICE.sts(), binding)[:-4] + "0000"
        assert StsCallerIdentity(region="us-east-1").identity(forged, binding=binding).arn.endswith(":user/moto")
        checker = StsCallerIdentity(region="us-east-1")
        StsStandIn().attach(checker.client)
        with pytest.raises(IdentityNotProven, match="SignatureDoesNotMatch"):
            checker.identity(forged, binding=binding)
