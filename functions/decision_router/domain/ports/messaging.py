"""Queues and the decision bus, as the webhook, the intakes and the console send to them."""

from __future__ import annotations

from typing import Protocol


class Sender(Protocol):
    """A queue (SQS): the ticket queue, a dead-letter queue (the reason in the attributes)."""

    def send(self, body: str, attributes: dict[str, str] | None = None) -> None: ...


class Waiting(Protocol):
    """The ticket queue as its consumer sees it: a received message hidden for a while (the
    endpoint is waking from zero: the ticket is decided again later, not sent to review)."""

    def hide(self, receipt_handle: str, seconds: int) -> None: ...


class Bus(Protocol):
    def put(self, source: str, detail_type: str, detail: dict) -> None: ...
