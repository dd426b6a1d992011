"""Failures the routing domain knows about, without knowing which client produced them."""

from __future__ import annotations

from .records import DecisionError


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
