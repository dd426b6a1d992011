"""An answer through the review function: the caller proves who they are, for this one answer.

The event (`CallerAnswer`, what `review_cli complete` sends) names the execution, its task token,
the answers and a note, and carries `identity_proof`: an STS GetCallerIdentity the caller
presigned, signing this answer's binding (domain/callers.py). Before anything is sent:

1. the proof is checked and sent to STS with the binding recomputed from the event: STS names
   the principal that signed this very answer (adapters/caller_identity.py);
2. that principal must be of the stack's own account and one the stack's ReviewerPrincipals
   lists: it is the reviewer, named by its ARN (`iam:<ARN>`) and shown by its user or session
   name; the event names nobody;
3. the task token must be the one the named execution's review waits on (its row of the
   pending-review index, which only the workflow's index writer puts);
4. the answers must be one of the answers the row's record offers;
5. the proof must never have been used (it is remembered until it expires).

Then the answer goes to the waiting workflow, and the review's row is removed (the workflow
removes it too, once the wait is over).
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ..domain.callers import Invoked, Reviewer, ReviewerPrincipals, answer_binding
from ..domain.ports.review import CallerIdentity, PendingReviews, TaskCompleter, UsedProofs
from ..domain.records import DecisionRecord, ReviewAnswer
from ..domain.signatures import IdentityNotProven
from ..validation import describe_errors
from .completion import (
    MAX_TASK_TOKEN,
    ExecutionName,
    IdentitySigner,
    InvalidReview,
    ReviewCompletion,
    not_waiting,
    review_output,
)

#: Fields an earlier review function took from its caller, and why they are refused now.
NOT_TAKEN = {
    "reviewer": "who answered is your proven AWS identity, shown by its user or role session name; send no name",
    "reviewer_username": "the name shown is your proven AWS identity's; send none",
    "reviewer_email": "the name shown is your proven AWS identity's; send none",
    "receipt_handle": "reviews are no longer read from a queue: the review's row of the pending-review index "
                      "is removed once answered; send none",
}


class CallerAnswer(BaseModel):
    """The review function's event: one answer, and its caller's proof made for it."""

    model_config = ConfigDict(extra="forbid")

    execution_name: ExecutionName = Field(description="The pending review's execution (review_cli list shows it).")
    task_token: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TASK_TOKEN)] = Field(
        description="The token the execution's review waits on (review_cli list shows it, from the index).")
    answers: dict[str, str] = Field(min_length=1)
    note: Annotated[str, StringConstraints(max_length=2000)] = ""
    policy: str | None = Field(default=None, description="Optional check: the policy the reviewer believes "
                                                         "applies; refused when it is not the record's.")
    identity_proof: str = Field(default="", max_length=8192, description=(
        "An STS GetCallerIdentity presigned for GET with the caller's credentials, signing this answer's "
        "X-Decision-Router-Answer binding (adapters/caller_identity.py make_proof)."))

    @classmethod
    def parse(cls, data: Any) -> CallerAnswer:
        if isinstance(data, dict):
            refused = [f"{name}: {why}" for name, why in NOT_TAKEN.items() if name in data]
            if refused:
                raise InvalidReview("invalid review completion: " + "; ".join(refused))
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise InvalidReview("invalid review completion: " + "; ".join(describe_errors(error))) from None

    def binding(self, audience: str) -> str:
        """What this answer's proof must sign (domain/callers.py answer_binding)."""
        return answer_binding(audience, self.execution_name, self.task_token, self.answers, self.note)

    def completion(self, reviewer: Reviewer) -> ReviewCompletion:
        return ReviewCompletion(execution_name=self.execution_name, task_token=self.task_token, reviewer=reviewer.shown,
                                reviewer_username=reviewer.shown, answers=self.answers, note=self.note,
                                policy=self.policy)


def answer_as_caller(event: Any, *, function_arn: str, reviewer_principals: str, identities: CallerIdentity,
                     reviews: PendingReviews, tasks: TaskCompleter, proofs: UsedProofs | None,
                     sign: IdentitySigner | None) -> tuple[ReviewAnswer, DecisionRecord]:
    """Check the event's answer and its caller (module docstring), hand it to the waiting
    workflow; the answer sent and the execution's record. IdentityNotProven (the caller),
    InvalidReview (the answer or the token), ReviewNotWaiting (no row: nothing waits) or the
    TaskCompleter's ReviewTaskGone: nothing is sent."""
    answer = CallerAnswer.parse(event)
    invoked = Invoked.of(function_arn)
    reviewers = ReviewerPrincipals.parse(reviewer_principals, account=invoked.account,
                                         partition=invoked.partition).require_some()
    if proofs is None:  # before STS or the execution is asked: no answer can be taken without it
        raise IdentityNotProven("identity_proof: this function has no table to remember proofs in "
                                "(IDEMPOTENCY_TABLE_NAME), so it cannot refuse a replayed one: refused")
    proven = identities.identity(answer.identity_proof, binding=answer.binding(invoked.function_name))
    reviewer = reviewers.admit(proven.arn)
    name = answer.execution_name
    row = reviews.get(name)
    if row is None:
        raise not_waiting(name)
    record, waiting = row.record, row.task_token
    if not hmac.compare_digest(waiting.encode("utf-8"), answer.task_token.encode("utf-8")):
        raise InvalidReview(f"task_token: not the token execution {name!r}'s review waits on "
                            "(review_cli list shows each review with its own)")
    output = review_output(answer.completion(reviewer), record, reviewer_id=reviewer.identity, sign=sign)
    if not proofs.first_use(proven.proof_key, proven.expires_at):
        raise IdentityNotProven("identity_proof: used before: a proof answers once; make a new one "
                                "(review_cli complete does, for each answer)")
    tasks.complete(answer.task_token, output)
    # The workflow removes the row as its wait ends; removing it now keeps a second answer from finding it.
    reviews.remove(name, answer.task_token)
    return output, record
