"""Failures the routing domain knows about, without knowing which client produced them."""

from __future__ import annotations

from .records import DecisionError

#: The EndpointFailure kind of an endpoint that has scaled to zero instances and is starting one
#: (EndpointScaleToZero in template.yaml): no retry within minutes can help.
NO_CAPACITY = "no_capacity"


class EndpointFailure(Exception):
    """The decision endpoint gave no usable answer after its retries; the item goes to review."""

    def __init__(self, kind: str, message: str, *, status_code: int | None = None,
                 attempts: int = 1, retryable: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.kind, self.message, self.status_code = kind, message, status_code
        self.attempts, self.retryable = attempts, retryable
        self.retry_after = retry_after  # seconds the endpoint asked us to wait (Retry-After), if any

    def describe(self) -> DecisionError:
        return DecisionError(kind=self.kind, message=self.message, status_code=self.status_code,
                             attempts=self.attempts)

    def __str__(self) -> str:
        status = f" {self.status_code}" if self.status_code else ""
        return f"{self.kind}{status} after {self.attempts} attempt(s): {self.message}"


class WaitingForCapacity(Exception):
    """The item waits for the endpoint to wake from zero instances instead of going to review
    (Router(wait_for_capacity=True)): raised so the item is retried later; a ticket's SQS record
    fails and is received again after `wake_up_wait` seconds."""

    def __init__(self, failure: EndpointFailure):
        super().__init__(str(failure))
        self.failure = failure


#: How long a waiting ticket stays hidden before it is received again, by receive: an endpoint at
#: zero instances takes about 5 to 6 minutes to answer again (the wake alarm's minute, instance
#: launch, container start and model load), so the 2nd receive comes after 6 minutes and the 4th
#: (the ticket queue's maxReceiveCount) 31 minutes after the 1st, past the GPU pool's 30-minute
#: provisioning timeout; a ticket still waiting then goes to the ticket DLQ 15 minutes later.
WAKE_UP_WAITS = (360, 600, 900)


def wake_up_wait(receive_count: int) -> int:
    """Seconds until a ticket received `receive_count` times (1 on the first) is received again."""
    return WAKE_UP_WAITS[min(max(receive_count, 1), len(WAKE_UP_WAITS)) - 1]
