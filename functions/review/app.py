"""Review completion: a reviewer's answers for a pending review → validated against the record
its review's row of the pending-review index holds (put by the workflow's writer, never taken from the caller)
→ SendTaskSuccess with {execution_name, reviewer, reviewer_id, identity_signature, choice, note}; the
workflow checks the answer, routes the item, stores the labelled example and writes the audit
record. Invalid answers raise with every problem named; nothing is sent then, so the review stays
pending.

Who answered is the principal that signed the event's `identity_proof` for this very answer (STS
says who: adapters/caller_identity.py), admitted only when it is of this stack's account and one
its ReviewerPrincipals lists, and named to people by its own user or session name; the event
names nobody. The task token must be the one the named execution waits on, and a proof answers
once (decision_router/review/caller.py). The answer carries that identity signed with the stack's
key, which is what relearning counts."""

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.domain.policies import load_policy
from decision_router.intake.resolved_items import remember_resolved
from decision_router.review.caller import answer_as_caller
from decision_router.review.precision_checks import count_check
from decision_router.review.shadow_reviews import count_review
from review.wiring import Wiring

logger = Logger()
tracer = Tracer()
#: This execution environment's settings and parts (made on first use, kept between invocations).
WIRING = Wiring()


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)  # the reviewer's note: not for traces
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    given = WIRING
    output, record = answer_as_caller(
        event, function_arn=context.invoked_function_arn, reviewer_principals=given.settings.reviewer_principals,
        identities=given.caller_identity, reviews=given.pending_reviews, tasks=given.tasks, proofs=given.used_proofs,
        sign=given.identity_signer)
    chosen = output.chosen
    count_review(record, chosen.answers, given.shadow_tally, logger)
    count_check(record, chosen.answers, load_policy(record.policy.name), given.precision_tally, logger)
    remember_resolved(record, chosen.answers, output.reviewer, given.resolved_items, logger)
    result = {"status": "completed", "execution_name": output.execution_name, "reviewer": output.reviewer,
              "reviewer_id": output.reviewer_id, "note": output.note, **chosen.model_dump(mode="json")}
    # The note is the reviewer's free text: its length is logged, never its words.
    logger.info("review completed", extra={**{k: v for k, v in result.items() if k != "note"},
                                           "note_length": len(output.note)})
    return result
