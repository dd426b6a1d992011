"""The relearning function: a Lambda container image that takes the relearning workflow's steps
from its queue (SQS event source, one message at a time) and answers each step's task token with
its output (SendTaskSuccess) or its failure (SendTaskFailure, error `RelearningStepFailed`, the
cause in words). A step that fails is never retried by SQS: the workflow decides (its Catch).

Message: `{"step": "count"|"collect"|"fit"|"promote", "task_token", "input": {...}}`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import boto3
from aws_lambda_powertools import Logger

from decision_router.adapters.endpoint import DecisionEndpoint
from decision_router.adapters.head_store import HeadStore
from decision_router.adapters.review import LabelledExamples
from decision_router.config import Settings
from relearning.job import EndpointSignals, Relearning
from training.fitting import REPO, SHIPPED

logger = Logger(service="relearning")
_job: Relearning | None = None


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
                          logger=logger)
    return _job


def run_step(step: str, given: dict[str, Any], seconds_left: float | None = None) -> dict[str, Any]:
    """One step of the workflow for the policy `given` names (`seconds_left`: the invocation's)."""
    relearning = job()
    policy = given["policy"]
    if step == "count":
        return relearning.count(policy, given.get("trigger", "labels"))
    if step == "collect":
        return relearning.collect(policy, seconds_left)
    if step == "fit":
        return relearning.fit(policy, given["run"], given["collect"]["model"])
    if step == "promote":
        return relearning.promote(policy, given["run"], given["fit"]["questions"])
    raise ValueError(f"step {step!r}: not a relearning step (count, collect, fit, promote)")


@logger.inject_lambda_context
def lambda_handler(event: dict, context: Any) -> dict:
    states = boto3.client("stepfunctions")
    for record in event.get("Records", []):
        message = json.loads(record["body"])
        token = message["task_token"]
        try:
            left = context.get_remaining_time_in_millis() / 1000 if hasattr(context, "get_remaining_time_in_millis") else None
            output = run_step(message["step"], message["input"], left)
        except Exception as error:
            logger.exception("relearning step failed", extra={"step": message.get("step")})
            states.send_task_failure(taskToken=token, error="RelearningStepFailed",
                                     cause=f"{message.get('step')}: {type(error).__name__}: {error}"[:32_000])
            continue
        states.send_task_success(taskToken=token, output=json.dumps(output))
    return {"batchItemFailures": []}
