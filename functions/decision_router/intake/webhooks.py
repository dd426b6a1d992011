"""Webhooks received over HTTPS (an API Gateway HTTP API, POST /webhooks/{source}): verified by
their source's scheme (decision_router.sources), recorded once, then handed on: a ticket webhook
(zendesk, jira, generic) is mapped to a `Ticket` and put on the ticket queue, where the ticket
intake decides it like any other; an incident webhook (pagerduty, grafana) is forwarded unchanged
to the event bus, where the incident intake takes it.

What is refused, before anything is queued (`Refused`: a 4xx with one short, fixed reason; the
precise reason is logged, never sent, since it may name what is configured):
- a body over MAX_BODY_BYTES (413), or not UTF-8 (400);
- an unknown source, a source without a signing key, a bad or missing signature, a signed time
  missing or outside its window (401, all with the same reason).

What is acknowledged (2xx) and not handed on: a delivery already handed on (`duplicate`: its
signed message or its sender's delivery id was seen; the sender stops retrying); an event of
another type (`ignored`). A delivery another invocation is handing on right now (`in_progress`)
is answered with a retryable status and the seconds to wait: its claim is a lease, so if that
invocation dies before handing it on, the retry takes the delivery over.

A verified payload that cannot be handed on (not JSON, nested deeper than MAX_DEPTH, a number out
of range, a field the policy needs missing, a field of another JSON type than its source sends,
a ticket claiming another source's system, too large for the queue or the bus) is parked in the
webhook DLQ with the reason.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from ..domain.ports.messaging import Bus, Sender
from ..domain.ports.webhooks import DeliveryRecord
from ..items import Ticket
from ..sources import INCIDENT_WEBHOOKS, TICKET_SOURCES
from ..sources.claims import claim_problem
from ..sources.webhook import FORWARDED_SOURCE, IncidentWebhook, TicketSource, Unauthorized, Unusable

#: The largest body accepted (160 KiB): parked as base64 it still fits one SQS message (256 KiB)
#: with its reason. PagerDuty guarantees deliveries up to 55 KB; tickets are far smaller.
MAX_BODY_BYTES = 160 * 1024
#: JSON nested deeper than this is parked, not parsed further.
MAX_DEPTH = 32
#: An integer with more digits than this is not a number any source sends.
MAX_INT_DIGITS = 40
#: SQS's limit on a message, and EventBridge's on an entry (what is larger is parked).
MAX_MESSAGE_BYTES = 256 * 1024 - 8 * 1024
MAX_EVENT_BYTES = 256 * 1024 - 1024
#: The characters SQS accepts in a message body (anything else is refused by SendMessage).
NOT_SQS_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
#: The one reason every unauthenticated request gets, whatever failed.
UNAUTHORIZED = "signature missing, invalid or expired"


class Refused(Exception):
    """Refused before anything was queued: `status` (4xx) and a fixed `reason` go back to the
    sender; the exception's message (the precise cause) is for the log only."""

    def __init__(self, status: int, reason: str, detail: str):
        super().__init__(detail)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class Received:
    status: str  # queued | forwarded | parked | ignored | duplicate | in_progress
    reason: str = ""
    ticket: Ticket | None = None
    retry_after: int = 0  #: in_progress: the seconds after which the sender's retry is answered


Scheme = TicketSource | IncidentWebhook


def scheme(source: str) -> Scheme:
    """The webhook source of the route's {source}: Unauthorized when there is none."""
    found = TICKET_SOURCES.get(source) or INCIDENT_WEBHOOKS.get(source)
    if found is None:
        raise Unauthorized(f"unknown webhook source {source[:40]!r}")
    return found


def verify(found: Scheme, headers: Mapping[str, str], body: bytes, secret: str, *, now: datetime, max_skew: int,
           payload: Any = None) -> bytes:
    """The message the signature covers, or Unauthorized unless `body` (JSON value `payload`) is
    signed by `secret` in `found`'s scheme, recently."""
    if not secret:
        raise Unauthorized(f"no signing secret is configured for {found.name}")
    return found.verify(headers, body, payload, secret.encode(), now, max_skew)


def sign(source: str, body: bytes, secret: str, *, at: float) -> dict[str, str]:
    """The headers a sender of `source` attaches (for your own senders of the generic webhook,
    and the local demo)."""
    return scheme(source).sign(body, secret.encode(), at)


def read_body(body: bytes) -> str:
    """The body as text, or Refused: too large (413) or not UTF-8 (400). Bytes are decoded before
    anything reads them as text."""
    if len(body) > MAX_BODY_BYTES:
        raise Refused(413, "body too large", f"{len(body)} bytes; at most {MAX_BODY_BYTES}")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Refused(400, "body is not UTF-8", str(error)) from None


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:20]}")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer of {len(text)} digits: at most {MAX_INT_DIGITS}")
    return int(text)


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def depth(value: Any) -> int:
    """How deeply `value` nests (iterative: no recursion limit to hit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        current, level = stack.pop()
        if isinstance(current, (dict, list)):
            deepest = max(deepest, level)
            children = current.values() if isinstance(current, dict) else current
            stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def read_json(text: str) -> Any:
    """The JSON value of `text`; Unusable when it is not JSON, nests deeper than MAX_DEPTH, or
    holds NaN, Infinity or a number out of range."""
    try:
        value = json.loads(text, parse_float=_finite, parse_int=_bounded_int, parse_constant=_no_constant)
    except RecursionError:
        raise Unusable(f"not JSON this intake reads: nested deeper than {MAX_DEPTH}") from None
    except ValueError as error:
        raise Unusable(f"not JSON: {str(error)[:200]}") from None
    if depth(value) > MAX_DEPTH:
        raise Unusable(f"not JSON this intake reads: nested deeper than {MAX_DEPTH}")
    return value


def map_ticket(found: TicketSource, payload: Any, default_tier: str) -> Ticket | str:
    """The ticket a verified payload maps to, validated; the reason text for an event not routed.
    Unusable says why a payload is no ticket the policy can decide (a ticket that claims another
    source's system among them)."""
    if not isinstance(payload, dict):
        raise Unusable(f"the body is a JSON {type(payload).__name__}, not an object")
    try:
        ticket = found.ticket(payload, default_tier)
    except Unusable:
        raise
    except (TypeError, AttributeError, ValueError, LookupError) as error:
        # A source's Shape names a field of the wrong type; anything it misses still parks the
        # body with the cause (never a 500 the sender retries for ever).
        raise Unusable(f"the {found.name} mapping cannot read this body: {type(error).__name__}: {str(error)[:200]}") from None
    if isinstance(ticket, str):
        return ticket
    problem = claim_problem(found.name, ticket)
    if problem:
        raise Unusable(problem)
    return ticket


def delivery_keys(source: str, found: Scheme, headers: Mapping[str, str], signed: bytes) -> list[str]:
    """What a delivery is recorded by: the message its signature covers (a replay cannot change it
    and stay signed), and the sender's delivery id where it sends one (the sender's retries carry
    it, re-signed or not)."""
    keys = [f"{source}#signed#{hashlib.sha256(signed).hexdigest()}"]
    if found.delivery_header:
        lowered = {k.lower(): v for k, v in headers.items()}
        given = str(lowered.get(found.delivery_header.lower(), "")).strip()
        if given:
            keys.append(f"{source}#id#{hashlib.sha256(given.encode('utf-8', 'replace')).hexdigest()}")
    return keys


def queue_text(ticket: Ticket) -> str:
    """The ticket's JSON in characters SQS accepts (escaped where it has others)."""
    text = ticket.model_dump_json(exclude_none=True)
    return json.dumps(json.loads(text)) if NOT_SQS_TEXT.search(text) else text


class WebhookIntake:
    """Verify, record, then queue, forward, park or ignore. The secrets, the queues, the bus, the
    delivery record and the clock are given (adapters)."""

    def __init__(self, *, secrets: Callable[[], Mapping[str, str]], tickets: Sender, dead_letters: Sender,
                 deliveries: DeliveryRecord, bus: Bus | None = None, max_skew_seconds: int, default_tier: str,
                 clock: Callable[[], datetime] | None = None):
        self.secrets, self.tickets, self.dead_letters = secrets, tickets, dead_letters
        self.deliveries, self.bus = deliveries, bus
        self.max_skew, self.default_tier = max_skew_seconds, default_tier
        self.clock = clock or (lambda: datetime.now(timezone.utc))

    def receive(self, source: str, headers: Mapping[str, str], body: bytes) -> Received:
        """Raises Refused (a 4xx, nothing queued); otherwise the delivery was queued, forwarded,
        parked, ignored, or recognised as a duplicate."""
        text = read_body(body)
        try:
            found = scheme(source)
            try:
                payload, unusable = read_json(text), None
            except Unusable as error:
                payload, unusable = None, error
            signed = verify(found, headers, body, str(self.secrets().get(source) or ""), now=self.clock(),
                            max_skew=self.max_skew, payload=payload)
        except Unauthorized as error:
            raise Refused(401, UNAUTHORIZED, str(error)) from None
        keys = delivery_keys(source, found, headers, signed)
        claim = self.deliveries.claim(keys, source)
        if claim.state == "done":
            return Received("duplicate", f"{source} delivery already accepted: acknowledged, not handed on again")
        if claim.state == "pending":
            return Received("in_progress", f"{source} delivery is being handed on by another request: retry later",
                            retry_after=claim.retry_after)
        try:
            received = self._hand_on(source, found, text, payload, unusable)
        except Exception:
            self.deliveries.forget(keys, claim.token)  # not handed on: the sender's retry must get through
            raise
        self.deliveries.done(keys, claim.token, source)
        return received

    def _hand_on(self, source: str, found: Scheme, text: str, payload: Any, unusable: Unusable | None) -> Received:
        try:
            if unusable is not None:
                raise unusable
            if isinstance(found, IncidentWebhook):
                return self._forward(found, payload)
            mapped = map_ticket(found, payload, self.default_tier)
            if isinstance(mapped, str):
                return Received("ignored", mapped)
            message = queue_text(mapped)
            if len(message.encode()) > MAX_MESSAGE_BYTES:
                raise Unusable(f"the ticket is {len(message.encode())} bytes as JSON: too large to queue")
        except Unusable as error:
            return self._park(source, text, f"{source} webhook: {error}")
        self.tickets.send(message)
        return Received("queued", ticket=mapped)

    def _forward(self, found: IncidentWebhook, payload: Any) -> Received:
        if not isinstance(payload, dict):
            raise Unusable(f"the body is a JSON {type(payload).__name__}, not an object")
        skipped = found.skipped(payload)
        if skipped:
            return Received("ignored", skipped)
        if len(json.dumps(payload).encode()) > MAX_EVENT_BYTES:
            raise Unusable("the body is too large for one event on the bus")
        if self.bus is None:
            raise RuntimeError("EVENT_BUS_NAME is not set: incident webhooks cannot be forwarded")
        self.bus.put(FORWARDED_SOURCE, found.detail_type, payload)
        return Received("forwarded", f"{found.detail_type} event put on the bus")

    def _park(self, source: str, text: str, reason: str) -> Received:
        """The verified body in the webhook DLQ with the reason (base64 when SQS would refuse its characters)."""
        attributes = {"failure_kind": "unusable_webhook", "failure_reason": reason, "source": source}
        if NOT_SQS_TEXT.search(text):
            text, attributes["body_encoding"] = base64.b64encode(text.encode()).decode(), "base64"
        self.dead_letters.send(text, attributes)
        return Received("parked", reason)
