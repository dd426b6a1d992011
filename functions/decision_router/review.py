"""Completing a review: the reviewer's answers, validated against the policy, become the
workflow's task output (destination and escalation are derived here, not trusted from input)."""

from __future__ import annotations

from typing import Mapping

from .policies import Policy
from .records import Destination, ReviewOutput


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
