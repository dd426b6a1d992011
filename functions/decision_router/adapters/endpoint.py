"""The decision endpoint (SageMaker runtime `invoke_endpoint`) speaking the decision contract.

Retry policy, in one place: botocore's own retries are off (its `adaptive` mode still
rate-limits the client after throttling), and this adapter retries what is worth retrying
— throttling, SageMaker/container "busy" (the container's 503 arrives as ModelError with
OriginalStatusCode 503 or `"retryable": true`), model not ready, connection errors and read
timeouts — with capped exponential backoff and full jitter (never shorter than the
endpoint's Retry-After), within `max_attempts` and the caller's deadline. Everything else (a 400
from the container, a 500, a malformed answer) fails at once, and so does an endpoint scaled to
zero instances (kind `no_capacity`): it takes minutes to wake, not seconds. Callers get results or
an `EndpointFailure` naming the kind; they never lose the item.

With `inference_component` (ENDPOINT_INFERENCE_COMPONENT_NAME: the stack created a scale-to-zero
endpoint) every request names the inference component that holds the model.

Deadline: every attempt, the first included, waits at most for the time left before the
caller's deadline (never the configured read timeout when less time is left), so a hanging
endpoint cannot outlive the Lambda invocation. botocore fixes a client's timeouts, so one
client is kept per timeout step (`TIMEOUT_STEPS`): the attempt's timeout is the configured one
when it fits, else the largest step that fits.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any, Callable, Sequence

import boto3
from aws_lambda_powertools import Tracer
from botocore.config import Config
from botocore.exceptions import ClientError, ReadTimeoutError
from botocore.exceptions import ConnectionError as BotoConnectionError
from pydantic import ValidationError

from decision_contract import BatchDecisionResponse, Decision, DecisionRequest, DecisionResult, SingleDecisionResponse

from ..domain.failures import NO_CAPACITY, EndpointFailure
from . import AwsAdapter

THROTTLING_CODES = {"ThrottlingException", "Throttling", "TooManyRequestsException", "ModelNotReadyException"}
UNAVAILABLE_CODES = {"ServiceUnavailable", "ServiceUnavailableException", "InternalDependencyException"}
#: Per-attempt read timeouts (seconds) used when less than the configured one is left.
TIMEOUT_STEPS = (1, 2, 4, 8, 15, 30, 60, 120)
#: An attempt needs at least this long; with less left the endpoint is not called again.
MIN_ATTEMPT_SECONDS = 1.0
#: In SageMaker's ValidationError when the inference component has no copy (scaled to zero):
#: "Inference Component has no capacity to process this request. ApplicationAutoScaling may be
#: in-progress (if configured) or try to increase the capacity by invoking
#: UpdateInferenceComponentRuntimeConfig API."
NO_CAPACITY_MESSAGE = "no capacity to process this request"

tracer = Tracer()


class DecisionEndpoint(AwsAdapter):
    service = "sagemaker-runtime"

    def __init__(self, endpoint_name: str, *, inference_component: str = "", read_timeout: float = 70.0,
                 connect_timeout: float = 5.0, max_attempts: int = 4, client: Any = None,
                 sleep: Callable[[float], None] = time.sleep, base_delay: float = 0.5, max_delay: float = 8.0):
        super().__init__(client)
        self.endpoint_name = endpoint_name
        # The endpoint's model is an inference component (scale to zero): requests must name it.
        self.target = {"InferenceComponentName": inference_component} if inference_component else {}
        self.read_timeout, self.connect_timeout = read_timeout, connect_timeout
        self.max_attempts = max_attempts
        self.base_delay, self.max_delay = base_delay, max_delay
        self._sleep = sleep
        self._clients: dict[float, Any] = {}
        self._injected = client is not None

    def _new_client(self, read_timeout: float | None = None) -> Any:
        # Retries are this adapter's (it knows the container's retryable answers and the deadline).
        return boto3.client(self.service, config=Config(
            connect_timeout=self.connect_timeout, read_timeout=read_timeout or self.read_timeout,
            retries={"mode": "adaptive", "total_max_attempts": 1}))

    def attempt_timeout(self, deadline: float | None) -> float | None:
        """The read timeout of the next attempt: the configured one when it fits before the
        deadline, else the largest of TIMEOUT_STEPS that fits; None when under a second is left."""
        if deadline is None:
            return self.read_timeout
        left = deadline - time.monotonic()
        if left < MIN_ATTEMPT_SECONDS:
            return None
        if self.read_timeout <= left:
            return self.read_timeout
        return float(max(step for step in TIMEOUT_STEPS if step <= left))

    def _client_for(self, timeout: float) -> Any:
        # An injected client (a test's Stubber) serves every timeout: its config cannot change.
        if self._injected or timeout == self.read_timeout:
            return self.client
        if timeout not in self._clients:
            self._clients[timeout] = self._new_client(timeout)
        return self._clients[timeout]

    @tracer.capture_method(capture_response=False)  # results carry hidden states: not for traces
    def decide(self, decisions: Sequence[Decision], *, deadline: float | None = None) -> dict[str, DecisionResult]:
        """Score decisions sharing one state in one request; results keyed by decision id.

        `deadline` (time.monotonic()) bounds every attempt's wait and stops retrying when less than
        MIN_ATTEMPT_SECONDS would be left."""
        if not decisions:
            return {}
        request = DecisionRequest(decision=decisions[0]) if len(decisions) == 1 else DecisionRequest(decisions=list(decisions))
        body = request.model_dump_json(exclude_none=True)
        timeout = self.attempt_timeout(deadline)
        if timeout is None:
            raise EndpointFailure("timeout", f"less than {MIN_ATTEMPT_SECONDS:g} s left before the deadline; "
                                  "the endpoint was not called", attempts=0)
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._parse(self._invoke(body, timeout), decisions, attempt)
            except EndpointFailure as failure:
                failure.attempts = attempt
                if not failure.retryable or attempt >= self.max_attempts:
                    raise
                delay = self.backoff(attempt, failure.retry_after)
                timeout = self.attempt_timeout(None if deadline is None else deadline - delay)
                if timeout is None:
                    failure.message += " (no time left for another attempt)"
                    raise
                self._sleep(delay)

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before the next attempt: capped exponential backoff with full jitter, and
        never less than the endpoint's Retry-After (plus jitter, so a storm's retries spread out)."""
        delay = random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))
        if retry_after:
            delay = max(delay, retry_after + random.uniform(0, self.base_delay))
        return min(delay, self.max_delay)

    def _invoke(self, body: str, timeout: float) -> bytes:
        try:
            response = self._client_for(timeout).invoke_endpoint(
                EndpointName=self.endpoint_name, Body=body.encode("utf-8"),
                ContentType="application/json", Accept="application/json", **self.target)
            return response["Body"].read()
        except ClientError as error:
            raise classify(error) from error
        except ReadTimeoutError as error:
            raise EndpointFailure("timeout", f"no answer within {timeout:g} s: {error}", retryable=True) from error
        except BotoConnectionError as error:
            raise EndpointFailure("connection", str(error), retryable=True) from error

    @staticmethod
    def _parse(raw: bytes, decisions: Sequence[Decision], attempts: int) -> dict[str, DecisionResult]:
        try:
            data = json.loads(raw)
            if "results" in data:
                results = BatchDecisionResponse.model_validate(data).results
            else:
                results = [SingleDecisionResponse.model_validate(data).result]
        except (ValueError, TypeError, ValidationError) as error:
            raise EndpointFailure("bad_response", f"not a decision response: {str(error)[:300]}") from None
        by_id = {result.id: result for result in results}
        wanted = [d.id for d in decisions]
        if sorted(by_id) != sorted(wanted):
            raise EndpointFailure("bad_response", f"answered decision ids {sorted(by_id)}, asked {wanted}")
        return by_id


def classify(error: ClientError) -> EndpointFailure:
    """Turn a SageMaker runtime error into an EndpointFailure saying whether a retry may help."""
    response = error.response
    code = response.get("Error", {}).get("Code", "")
    message = response.get("Error", {}).get("Message", "") or str(error)
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    failure = _classify(response, code, message, status)
    failure.retry_after = _retry_after(response) if failure.retryable else None
    return failure


def _classify(response: dict, code: str, message: str, status: int | None) -> EndpointFailure:
    if code == "ModelError":
        original = response.get("OriginalStatusCode")
        detail = response.get("OriginalMessage") or message
        container = _container_error(detail)
        retryable = original == 503 or bool(container.get("retryable"))
        text = container.get("message") or detail
        if container.get("code"):
            text = f"{container['code']}: {text}"
        return EndpointFailure("retryable_model_error" if retryable else "model_error", text[:500],
                               status_code=original, retryable=retryable)
    if code in THROTTLING_CODES or status == 429:
        return EndpointFailure("throttled", f"{code}: {message}", status_code=status, retryable=True)
    if code in UNAVAILABLE_CODES or status in (502, 503, 504):
        return EndpointFailure("unavailable", f"{code}: {message}", status_code=status, retryable=True)
    if code == "ValidationError" and NO_CAPACITY_MESSAGE in message.lower():
        return EndpointFailure(NO_CAPACITY, "the endpoint has scaled to zero instances and is waking up "
                               f"(an instance starts within minutes); SageMaker: {message}"[:500], status_code=status)
    if code == "ValidationError":
        return EndpointFailure("validation", message, status_code=status)
    return EndpointFailure("endpoint_error", f"{code or 'error'}: {message}"[:500], status_code=status)


def _retry_after(response: dict) -> float | None:
    """The Retry-After header in seconds (the container sends it with 503 busy / not ready when
    reached directly; SageMaker's ModelError does not pass it on)."""
    value = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 < seconds < 3600 else None


def _container_error(text: str) -> dict:
    """The container's ErrorResponse body, when the message is one."""
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return {}
    return error if isinstance(error, dict) else {}
