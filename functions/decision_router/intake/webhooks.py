"""Ticket webhooks received over HTTPS (an API Gateway HTTP API): verified by their source's
scheme (decision_router.sources: zendesk, jira, generic), mapped to a `Ticket` and put on the
ticket queue, where the ticket intake decides it like any other.

A bad, missing or stale signature is refused (401) and nothing is queued. A verified payload that
lacks what the policy needs is parked in the ticket DLQ with the reason; one of another event
type is acknowledged and ignored. The body is parsed once, and the ticket validated once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from ..domain.items import InvalidItem, Ticket, parse_item
from ..sources import TICKET_SOURCES
from ..sources.webhook import TicketSource, Unauthorized, Unusable


@dataclass(frozen=True)
class Received:
    status: str  # queued | parked | ignored
    reason: str = ""
    ticket: Ticket | None = None


def ticket_source(source: str) -> TicketSource:
    found = TICKET_SOURCES.get(source)
    if found is None:
        raise Unauthorized(f"unknown webhook source {source!r} (known: {', '.join(TICKET_SOURCES)})")
    return found


def verify(source: str, headers: Mapping[str, str], body: bytes, secret: str, *, now: datetime, max_skew: int,
           payload: Any = None) -> None:
    """Raise Unauthorized unless `body` (JSON value `payload`) is signed by `secret` in `source`'s scheme, recently."""
    scheme = ticket_source(source)
    if not secret:
        raise Unauthorized(f"no signing secret is configured for {source}")
    scheme.verify(headers, body, payload, secret.encode(), now, max_skew)


def sign(source: str, body: bytes, secret: str, *, at: float) -> dict[str, str]:
    """The headers a sender of `source` attaches (for your own senders of the generic webhook,
    and the local demo)."""
    return ticket_source(source).sign(body, secret.encode(), at)


def map_ticket(source: str, payload: Any, default_tier: str) -> Ticket | str:
    """The ticket a verified payload maps to, validated; the reason text for an event not routed.
    Unusable says why a payload is no ticket the policy can decide."""
    if not isinstance(payload, dict):
        raise Unusable(f"the body is a JSON {type(payload).__name__}, not an object")
    fields = ticket_source(source).ticket(payload, default_tier)
    if isinstance(fields, str):
        return fields
    try:
        return parse_item("ticket", fields)  # type: ignore[return-value]
    except InvalidItem as error:
        raise Unusable(str(error)) from None


class WebhookIntake:
    """Verify, map, queue or park. The secret, the queues and the clock are given (adapters)."""

    def __init__(self, *, secrets: Callable[[], Mapping[str, str]], tickets: Any, dead_letters: Any,
                 max_skew_seconds: int, default_tier: str, clock: Callable[[], datetime] | None = None):
        self.secrets, self.tickets, self.dead_letters = secrets, tickets, dead_letters
        self.max_skew, self.default_tier = max_skew_seconds, default_tier
        self.clock = clock or (lambda: datetime.now(timezone.utc))

    def receive(self, source: str, headers: Mapping[str, str], body: bytes) -> Received:
        """Raises Unauthorized (401); otherwise the ticket was queued, parked or ignored."""
        ticket_source(source)
        try:
            payload, not_json = json.loads(body), None
        except ValueError as error:
            payload, not_json = None, error
        verify(source, headers, body, str(self.secrets().get(source) or ""), now=self.clock(), max_skew=self.max_skew,
               payload=payload)
        try:
            if not_json is not None:
                raise Unusable(f"not JSON: {not_json}")
            mapped = map_ticket(source, payload, self.default_tier)
        except Unusable as error:
            self.dead_letters.send(body.decode("utf-8", "replace"), {
                "failure_kind": "unusable_webhook", "failure_reason": f"{source} webhook: {error}", "source": source})
            return Received("parked", f"{source} webhook: {error}")
        if isinstance(mapped, str):
            return Received("ignored", mapped)
        self.tickets.send(mapped.model_dump_json(exclude_none=True))
        return Received("queued", ticket=mapped)
