"""A reviewer's answer counted for the shadow heads (domain/shadow.py): for each question of the
record a candidate answered in shadow, whether the reviewer gave the shadow's answer and whether
they gave the answer of the head in service. Called by the functions that complete a review (the
review function, the review console's answers and corrections) once the answer was accepted."""

from __future__ import annotations

from typing import Mapping

from aws_lambda_powertools import Logger

from ..domain.ports.outcomes import ShadowTallies
from ..domain.records import DecisionRecord
from ..domain.shadow import review_tally
from ..question_metrics import question_metric


def count_review(record: DecisionRecord, answers: Mapping[str, str], tally: ShadowTallies | None,
                 logger: Logger) -> None:
    """Count the review on each shadowed question it answers (nothing without a tally: the function
    is given no head history table); a tally that cannot be written is logged and counted
    (`ShadowTallyFailed`): the review stands all the same."""
    if not record.shadow or tally is None:
        return
    policy = record.policy.name
    for question, (answer, shadow_right, service_right) in review_tally(record, answers).items():
        question_metric("ShadowReviewed", policy, question)
        question_metric("ShadowRight", policy, question, float(shadow_right))
        question_metric("ServiceRight", policy, question, float(service_right))
        try:
            tally.add(policy, question, answer.sha256, reviewed=1, shadow_right=int(shadow_right),
                      service_right=int(service_right), reviewed_agreed=int(answer.agrees))
        except Exception as error:  # noqa: BLE001 - the review was accepted; only its count is missing
            question_metric("ShadowTallyFailed", policy, question)
            logger.error("review not counted for the shadow head", extra={
                "item_id": record.item_id, "question": question, "reason": f"{type(error).__name__}: {error}"})
