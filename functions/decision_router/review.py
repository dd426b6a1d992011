"""Completing a review: the reviewer's answers, validated against the policy, become the
workflow's task output (destination and escalation are derived here, not trusted from input)."""

from __future__ import annotations

from typing import Annotated, Any, Mapping, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from .items import describe_errors
from .policies import Policy, PolicyError, load_policy
from .records import DecisionRecord, Destination, ReviewOutput

#: SendTaskSuccess accepts task tokens of 1-2048 characters.
MAX_TASK_TOKEN = 2048


class InvalidReview(ValueError):
    """Answers that do not fit the policy; the message names every problem."""


def complete_review(policy: Policy, answers: Mapping[str, str], reviewer: str, *,
                    destinations: Mapping[str, str], note: str | None = None) -> ReviewOutput:
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
    if problems:
        raise InvalidReview("; ".join(problems))
    routing = policy.routing_question
    target = routing.option(answers[routing.id]).target
    if target not in destinations:
        raise InvalidReview(f"target {target!r} has no configured destination queue")
    escalate = any(policy.question(q).option(a).escalate for q, a in answers.items())
    return ReviewOutput(reviewer=reviewer.strip(), answers=dict(answers),
                        destination=Destination(target=target, queue_url=destinations[target]),
                        escalate=escalate, note=(note or "").strip())


class ReviewCompletion(BaseModel):
    """A reviewer's answer to one pending review (the review function's event, or the CLI's input)."""

    model_config = ConfigDict(extra="forbid")

    task_token: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TASK_TOKEN)]
    policy: Annotated[str, StringConstraints(min_length=1)]
    reviewer: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=256)]
    answers: dict[str, str] = Field(min_length=1)
    note: Annotated[str, StringConstraints(max_length=2000)] = ""
    receipt_handle: str | None = Field(default=None, description="Review-queue message to delete once completed.")

    @classmethod
    def parse(cls, data: Any) -> "ReviewCompletion":
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise InvalidReview("invalid review completion: " + "; ".join(describe_errors(error))) from None


class PendingReview(BaseModel):
    """One message of the review queue, as the workflow's RequestReview state writes it."""

    task_token: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TASK_TOKEN)]
    execution_name: Annotated[str, StringConstraints(min_length=1, max_length=80)]
    requested_at: str | None = None
    record: DecisionRecord

    @classmethod
    def from_message(cls, body: str) -> "PendingReview":
        """Parse a review message; InvalidReview names what is wrong with it."""
        try:
            return cls.model_validate_json(body)
        except ValidationError as error:
            problems = describe_errors(error)
            if any(e["type"] == "json_invalid" for e in error.errors()):
                problems = ["not JSON"]
            raise InvalidReview("; ".join(problems)) from None


class TaskCompleter(Protocol):
    def complete(self, task_token: str, output: ReviewOutput) -> None: ...


def submit_review(completion: ReviewCompletion, *, destinations: Mapping[str, str],
                  tasks: TaskCompleter) -> ReviewOutput:
    """Validate the answers against the named policy, then hand the output to the waiting workflow."""
    try:
        policy = load_policy(completion.policy)
    except PolicyError as error:
        raise InvalidReview(f"policy: {error}") from None
    output = complete_review(policy, completion.answers, completion.reviewer,
                             destinations=destinations, note=completion.note)
    tasks.complete(completion.task_token, output)
    return output
