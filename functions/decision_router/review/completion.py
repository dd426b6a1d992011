"""Completing a review: the reviewer's answers, validated against the pending record's own
policy, become the workflow's task output.

Nothing the reviewer (or whoever calls the review function) supplies decides the policy, the
destination queue or the escalation: the answer is matched to one of the complete answers the
record offers (`record.review.choices`, built by the intake from its policy and the deployment's
queues), and the workflow accepts nothing else. The output also names the execution the record
belongs to; the workflow checks that it is its own, which binds the task token to the record.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Callable, Mapping

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ..domain.policies import Policy, PolicyError, load_policy
from ..domain.ports.review import TaskCompleter
from ..domain.records import DecisionRecord, ReviewAnswer, ReviewChoice
from ..validation import describe_errors

#: SendTaskSuccess accepts task tokens of 1-2048 characters.
MAX_TASK_TOKEN = 2048
ExecutionName = Annotated[str, StringConstraints(min_length=1, max_length=80)]


class InvalidReview(ValueError):
    """Answers that do not fit the pending review; the message names every problem."""


class ReviewNotWaiting(LookupError):
    """The named execution waits for no review: the pending-review index has no row for it
    (answered, closed at its source or timed out already, or never sent to review)."""


def not_waiting(execution_name: str) -> ReviewNotWaiting:
    return ReviewNotWaiting(f"execution_name: {execution_name!r} waits for no review (already answered, "
                            "closed or timed out; the list shows the reviews still waiting)")


def answer_problems(policy: Policy, answers: Mapping[str, str], reviewer: str) -> list[str]:
    """Every way the answers miss the policy's questions and options, in words for the reviewer."""
    problems = []
    if not reviewer or not reviewer.strip():
        problems.append("reviewer: must name who decided (e.g. an email address)")
    asked = {q.id: q for q in policy.questions}
    for question_id in answers:
        if question_id not in asked:
            problems.append(f"answers.{question_id}: policy {policy.name!r} asks no such question "
                            f"(questions: {', '.join(asked)})")
    for question in policy.questions:
        answer = answers.get(question.id)
        if answer is None:
            problems.append(f"answers.{question.id}: missing; choose one of {', '.join(question.option_ids)}")
        elif answer not in question.option_ids:
            problems.append(f"answers.{question.id}: {answer!r} is not an option "
                            f"(options: {', '.join(question.option_ids)})")
    return problems


#: Signs (execution name, reviewer identity) with the stack's key (adapters.signing_key.SigningKey.review_signature).
IdentitySigner = Callable[[str, str], str]


def complete_review(record: DecisionRecord, execution_name: str, answers: Mapping[str, str], reviewer: str, *,
                    note: str | None = None, username: str | None = None, email: str | None = None,
                    reviewer_id: str = "", sign: IdentitySigner | None = None) -> ReviewAnswer:
    """The task output for a reviewer's answers to the pending `record`, or InvalidReview.
    `username` and `email` (verified only) name the reviewer for people; `reviewer` is the audit's key.
    `reviewer_id`: the authenticated identity (domain/signatures.py), signed with `sign` for the
    labelled example; an answer without one counts as unauthenticated for relearning."""
    try:
        policy = load_policy(record.policy.name)
    except PolicyError as error:
        raise InvalidReview(f"record.policy: {error}") from None
    problems = answer_problems(policy, answers, reviewer)
    if problems:
        raise InvalidReview("; ".join(problems))
    for wire in record.review.choices:
        if ReviewChoice.model_validate_json(wire).answers == dict(answers):
            signature = sign(execution_name, reviewer_id) if sign is not None and reviewer_id else ""
            return ReviewAnswer(execution_name=execution_name, reviewer=reviewer.strip(), choice=wire,
                                note=(note or "").strip(), reviewer_username=username, reviewer_email=email,
                                reviewer_id=reviewer_id, identity_signature=signature)
    # The record was decided under another version of the policy: only its own choices count.
    raise InvalidReview(f"answers: {dict(answers)} is not one of the answers this review offers "
                        f"(policy {record.policy.name!r} version {record.policy.version})")


class ReviewCompletion(BaseModel):
    """A reviewer's answer to one pending review, with who answered as the calling function
    established it: the console from the verified token, the review function from its caller's
    proven identity (review/caller.py, whose event is a `CallerAnswer`)."""

    model_config = ConfigDict(extra="forbid")

    execution_name: ExecutionName = Field(description="The pending review's execution (review_cli list shows it).")
    task_token: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TASK_TOKEN)]
    reviewer: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=256)] = Field(
        description="Who answered, as the audit keys it: the console's `sub`, the review function's proven "
                    "principal's name; never a name the reviewer typed.")
    answers: dict[str, str] = Field(min_length=1)
    note: Annotated[str, StringConstraints(max_length=2000)] = ""
    policy: str | None = Field(default=None, description="Optional check: the policy the reviewer believes "
                                                         "applies; refused when it is not the record's.")
    reviewer_username: str | None = Field(default=None, max_length=256,
                                          description="The name shown for the reviewer (from the token's claims, "
                                                      "or the proven principal's user or session name).")
    reviewer_email: str | None = Field(default=None, max_length=256,
                                       description="Their email, only when the user pool has it verified.")

    @classmethod
    def parse(cls, data: Any) -> "ReviewCompletion":
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise InvalidReview("invalid review completion: " + "; ".join(describe_errors(error))) from None


class PendingReview(BaseModel):
    """One review request, as the workflow's RequestReview state hands it to the index writer
    (the pending-review index keeps it: review/pending.py)."""

    task_token: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TASK_TOKEN)]
    execution_name: ExecutionName
    requested_at: str | None = None
    record: DecisionRecord

    @classmethod
    def from_message(cls, body: str) -> "PendingReview":
        """Parse a review request (JSON); InvalidReview names what is wrong with it."""
        try:
            return cls.model_validate_json(body)
        except ValidationError as error:
            problems = describe_errors(error)
            if any(e["type"] == "json_invalid" for e in error.errors()):
                problems = ["not JSON"]
            raise InvalidReview("; ".join(problems)) from None


def review_output(completion: ReviewCompletion, record: DecisionRecord, *, reviewer_id: str = "",
                  sign: IdentitySigner | None = None) -> ReviewAnswer:
    """The task output for `completion`, validated against the pending record (never a policy the
    caller names), or InvalidReview; nothing is sent."""
    if completion.policy is not None and completion.policy != record.policy.name:
        raise InvalidReview(f"policy: {completion.policy!r} is not this review's policy "
                            f"({record.policy.name!r}, from the pending record)")
    return complete_review(record, completion.execution_name, completion.answers, completion.reviewer,
                           note=completion.note, username=completion.reviewer_username,
                           email=completion.reviewer_email, reviewer_id=reviewer_id, sign=sign)


def submit_review(completion: ReviewCompletion, record: DecisionRecord, *, tasks: TaskCompleter,
                  reviewer_id: str = "", sign: IdentitySigner | None = None) -> ReviewAnswer:
    """Validate the answers against the pending record (`review_output`), then hand the output
    to the waiting workflow. `record` must come from a trusted source: the review's row of the
    pending-review index, which only the workflow's index writer puts. `reviewer_id`: the identity the calling
    function authenticated (never a field of `completion`)."""
    output = review_output(completion, record, reviewer_id=reviewer_id, sign=sign)
    tasks.complete(completion.task_token, output)
    return output


def labelled_example(row: Mapping[str, str]) -> dict[str, Any]:
    """A stored review (JSON strings, as the workflow writes them) → the JSONL line that
    `make fit REVIEWS=` and the eval tool read."""
    return {"policy": row["policy_name"], "item": json.loads(row["item"]), "gold": json.loads(row["answers"])}
