"""A reviewer's answer counted for the live precision (domain/precision.py): the answer to a
sampled check compared with the automatic answers it was held with, and a correction of an
automatic route counted as corrections (never in the estimate: only wrong answers are reported).
Called by the functions that accept a reviewer's answer (the review function, the review
console's answers and corrections) once the answer was accepted; each publishes the question's
figure as metrics (`LivePrecision`, `LivePrecisionLowerBound`, `PrecisionBelowTarget`)."""

from __future__ import annotations

from typing import Mapping

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit

from ..domain.policies import Policy
from ..domain.ports.outcomes import PrecisionTallies
from ..domain.precision import PrecisionFigure, check_tally, corrected_answers, precision_figure, target_of
from ..domain.records import DecisionRecord
from ..question_metrics import question_metric

#: The metric an alarm watches: 1 when a question's checked answers no longer show its target.
BELOW_TARGET = "PrecisionBelowTarget"
#: A tally that could not be written (the answer stands; its count is missing).
TALLY_FAILED = "PrecisionTallyFailed"


def publish(policy: str, question: str, figure: PrecisionFigure) -> None:
    """The question's figure as metrics: its checks so far, the realized precision and its lower
    bound (only once there is one), and whether it is below the target (0 or 1)."""
    question_metric("LivePrecisionChecked", policy, question, float(figure.checked))
    if figure.precision is not None and figure.lower_bound is not None:
        question_metric("LivePrecision", policy, question, 100.0 * figure.precision, MetricUnit.Percent)
        question_metric("LivePrecisionLowerBound", policy, question, 100.0 * figure.lower_bound, MetricUnit.Percent)
    question_metric(BELOW_TARGET, policy, question, float(figure.below_target))


def count_check(record: DecisionRecord, answers: Mapping[str, str], policy: Policy,
                tally: PrecisionTallies | None, logger: Logger) -> dict[str, PrecisionFigure]:
    """Count a reviewer's answer to a sampled check, per checked question: checked, and right when
    the reviewer gave the automatic answer; the figures after it. A tally that cannot be written is
    logged and counted (`PrecisionTallyFailed`): the review stands all the same."""
    figures: dict[str, PrecisionFigure] = {}
    if tally is None:
        return figures
    for question, (option, right) in check_tally(record, answers).items():
        try:
            counts = tally.add(record.policy.name, question, option, checked=1, right=int(right))
            figures[question] = precision_figure(counts, target_of(policy.question(question)))
        except Exception as error:  # noqa: BLE001 - the review was accepted; only its count is missing
            question_metric(TALLY_FAILED, record.policy.name, question)
            logger.error("check not counted for the live precision", extra={
                "item_id": record.item_id, "question": question, "reason": f"{type(error).__name__}: {error}"})
            continue
        publish(record.policy.name, question, figures[question])
        logger.info("automatic answer checked", extra={"item_id": record.item_id, "question": question,
                                                        "right": right, "figure": figures[question].line()})
    return figures


def count_correction(record: DecisionRecord, answers: Mapping[str, str], tally: PrecisionTallies | None,
                     logger: Logger) -> None:
    """Count a correction of an automatic route: each model answer it changed, as `corrected` of
    its question and option (and the `AutomaticAnswerCorrected` metric). Not a check: the estimate
    reads the random sample alone."""
    for question, option in corrected_answers(record, answers).items():
        question_metric("AutomaticAnswerCorrected", record.policy.name, question)
        if tally is None:
            continue
        try:
            tally.add(record.policy.name, question, option, corrected=1)
        except Exception as error:  # noqa: BLE001 - the correction was accepted; only its count is missing
            question_metric(TALLY_FAILED, record.policy.name, question)
            logger.error("correction not counted for the live precision", extra={
                "item_id": record.item_id, "question": question, "reason": f"{type(error).__name__}: {error}"})
