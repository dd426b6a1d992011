"""The pending-review index's one writer: the routing workflow's RequestReview state invokes it
(`lambda:invoke.waitForTaskToken`) with its task token, its execution's name, the time the state
was entered and the decision record; it puts the review's row (adapters/pending_reviews.py) and
returns. The workflow then waits for the token, which the console, the review function or the
incident intake complete from the row. Its role alone may put rows, so a row is the workflow's.

Invoked synchronously by the workflow: a failure raises, and the state's Retry and Catch decide
(a request that cannot be indexed is dead-lettered, never left waiting unseen)."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.adapters import from_settings
from decision_router.composition import CompositionRoot, part
from decision_router.domain.policies import load_policy
from decision_router.domain.ports.review import PendingReviews
from decision_router.review.completion import PendingReview
from decision_router.review.pending import pending_row

logger = Logger()


class Wiring(CompositionRoot):
    @part
    def index(self) -> PendingReviews:
        return from_settings.pending_reviews(self.settings)


WIRING = Wiring()


def index_review(event: dict[str, Any], given: Wiring) -> dict[str, Any]:
    """Put the row of the review request `event` ({task_token, execution_name, requested_at,
    record}); InvalidReview names a field that does not read."""
    review = PendingReview.from_message(json.dumps(event))
    row = pending_row(review, load_policy(review.record.policy.name),
                      review_timeout_seconds=given.settings.review_timeout_seconds)
    written = given.index.put(row)
    return {"execution_name": row.execution_name, "lane": row.lane, "due_at": row.due_at, "written": written}


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    result = index_review(event, WIRING)
    logger.info("review indexed" if result["written"] else "review indexed already (a retried request)", extra=result)
    return result
