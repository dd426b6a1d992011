"""The relearning function: a Lambda container image that takes the relearning workflow's steps
from its queue (SQS event source, one message at a time) and answers each step's task token with
its output (SendTaskSuccess) or its failure (SendTaskFailure, error `RelearningStepFailed`, the
cause in words). A step that fails is never retried by SQS: the workflow decides (its Catch).

Message: `{"step": "count"|"collect"|"fit"|"shadow"|"judge_shadow"|"promote", "task_token",
"execution", "input": {...}}` (`execution`: the workflow's execution name, the run whose
candidates `fit` keeps, `shadow` serves in shadow, `judge_shadow` judges and `promote` names in
service). Before any step runs, its task token is checked with the workflow
(SendTaskHeartbeat): a message whose token the workflow is not waiting on (made up, or its task
timed out) runs nothing and answers nothing; it is logged. The queue takes messages from the
workflow's role only (template.yaml, RelearningQueuePolicy).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import boto3
from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from decision_router.adapters.endpoint import DecisionEndpoint
from decision_router.adapters.head_store import HeadStore
from decision_router.adapters.notices import PromotionNotices
from decision_router.adapters.review import LabelledExamples
from decision_router.adapters.signing_key import SigningKey
from decision_router.config import Settings
from decision_router.domain import shadow
from relearning.job import EndpointSignals, Relearning
from training.fitting import REPO, SHIPPED

logger = Logger(service="relearning")
_job: Relearning | None = None
#: The workflow's answers to a heartbeat with a token it is not (or no longer) waiting on.
DEAD_TOKEN = ("InvalidToken", "TaskTimedOut", "TaskDoesNotExist")


class StepMessage(BaseModel):
    """One step of the relearning workflow, as its state machine puts it on the queue."""

    model_config = ConfigDict(extra="forbid")

    step: Literal["count", "collect", "fit", "shadow", "judge_shadow", "promote"]
    task_token: str = Field(min_length=1, max_length=1024)
    execution: str | None = Field(default=None, min_length=1, max_length=80)
    input: dict[str, Any]


# The local runtime loads this module apart from sys.modules: resolve the annotations here.
StepMessage.model_rebuild(_types_namespace={"Literal": Literal, "Any": Any})


def parse_message(body: str) -> StepMessage:
    """The record's body as a step message, or a ValueError naming what is wrong with it."""
    try:
        return StepMessage.model_validate_json(body)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in error.errors())
        raise ValueError(f"not a relearning step message: {problems}") from None


def token_is_awaited(states: Any, token: str) -> tuple[bool, str]:
    """Whether the workflow waits on this task token (a heartbeat it accepts), and if not why."""
    try:
        states.send_task_heartbeat(taskToken=token)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code in DEAD_TOKEN:
            return False, code
        raise
    return True, ""


def shipped_sets() -> list[Path]:
    """RELEARNING_SHIPPED_SETS: comma-separated labelled sets (relative to the code's root); unset:
    the shipped ones; empty: none (the reviews alone)."""
    raw = os.environ.get("RELEARNING_SHIPPED_SETS")
    if raw is None:
        return list(SHIPPED)
    return [REPO / part.strip() for part in raw.split(",") if part.strip()]


def job() -> Relearning:
    global _job
    if _job is None:
        s = Settings.from_env().require("head_store_bucket", "head_parameter_prefix", "head_history_table",
                                        "labelled_examples_table", "endpoint_name")
        endpoint = DecisionEndpoint(s.endpoint_name, inference_component=s.inference_component_name,
                                    read_timeout=s.endpoint_read_timeout_seconds, max_attempts=s.endpoint_max_attempts)
        _job = Relearning(HeadStore(s.head_store_bucket, s.head_parameter_prefix, s.head_history_table),
                          LabelledExamples(s.labelled_examples_table), lambda probe: EndpointSignals(endpoint, probe),
                          shipped=shipped_sets(), min_new_labels=int(os.environ.get("RELEARNING_MIN_NEW_LABELS", "200")),
                          max_reviewer_share=float(os.environ.get("RELEARNING_MAX_REVIEWER_SHARE", "0.5")),
                          announce=PromotionNotices(os.environ.get("RELEARNING_TOPIC_ARN", "")).announce,
                          shadow_items=int(os.environ.get("RELEARNING_SHADOW_ITEMS", "0")),
                          shadow_timeout_seconds=float(os.environ.get("RELEARNING_SHADOW_TIMEOUT_SECONDS", "604800")),
                          shadow_check_seconds=int(os.environ.get("RELEARNING_SHADOW_CHECK_SECONDS", "900")),
                          signing_key=SigningKey.from_secret(s.signing_key_secret_arn) if s.signing_key_secret_arn else None,
                          head_signing_key=(SigningKey.from_secret(s.head_signing_key_secret_arn)
                                            if s.head_signing_key_secret_arn else None),
                          shadow_min_reviewed=int(os.environ.get("RELEARNING_SHADOW_MIN_REVIEWED",
                                                                 str(shadow.MIN_REVIEWED))),
                          shadow_max_disagreement=float(os.environ.get("RELEARNING_SHADOW_MAX_DISAGREEMENT",
                                                                       str(shadow.MAX_DISAGREEMENT))),
                          # a review answered by an execution started before the shard index is read
                          # by a second whole read, once its longest wait is over (relearning/labels.py)
                          label_retention_days=s.label_retention_days,
                          full_read_after_seconds=s.review_timeout_seconds + 3600,
                          logger=logger)
    return _job


def run_step(step: str, given: dict[str, Any], seconds_left: float | None = None,
             execution: str | None = None) -> dict[str, Any]:
    """One step of the workflow for the policy `given` names (`seconds_left`: the invocation's).
    `fit`, `shadow`, `judge_shadow` and `promote` act on the run named `execution` (the workflow's execution name)."""
    relearning = job()
    policy = given["policy"]
    if step == "count":
        return relearning.count(policy, given.get("trigger", "labels"))
    if step == "collect":
        return relearning.collect(policy, seconds_left)
    if step in ("fit", "shadow", "judge_shadow", "promote"):
        if execution is None:
            raise ValueError(f"step {step!r}: the message names no execution (the run it belongs to)")
        if given.get("run", execution) != execution:
            raise ValueError(f"step {step!r}: input names run {given.get('run')!r}, the execution is {execution!r}")
        if step == "fit":
            return relearning.fit(policy, execution, given["collect"]["model"])
        if step == "shadow":
            return relearning.shadow(policy, execution, given["fit"]["questions"])
        if step == "judge_shadow":
            return relearning.judge_shadow(policy, execution)
        return relearning.promote(policy, execution, given["shadow_judged"]["questions"])
    raise ValueError(f"step {step!r}: not a relearning step (count, collect, fit, shadow, judge_shadow, promote)")


@logger.inject_lambda_context
def lambda_handler(event: dict, context: Any) -> dict:
    states = boto3.client("stepfunctions")
    for record in event.get("Records", []):
        message = parse_message(record["body"])  # no token to answer: the message goes to the DLQ
        awaited, why = token_is_awaited(states, message.task_token)
        if not awaited:
            logger.warning("relearning step not run: the workflow is not waiting on its task token",
                           extra={"step": message.step, "execution": message.execution, "token_error": why,
                                  "policy": str(message.input.get("policy"))[:100]})
            continue
        try:
            left = context.get_remaining_time_in_millis() / 1000 if hasattr(context, "get_remaining_time_in_millis") else None
            output = run_step(message.step, message.input, left, message.execution)
        except Exception as error:
            logger.exception("relearning step failed", extra={"step": message.step})
            states.send_task_failure(taskToken=message.task_token, error="RelearningStepFailed",
                                     cause=f"{message.step}: {type(error).__name__}: {error}"[:32_000])
            continue
        states.send_task_success(taskToken=message.task_token, output=json.dumps(output))
    return {"batchItemFailures": []}
