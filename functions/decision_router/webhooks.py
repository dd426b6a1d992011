"""Ticket webhooks: Zendesk (`ticket.created`), Jira (`jira:issue_created`) and a generic JSON
webhook, received over HTTPS (an API Gateway HTTP API), verified, mapped to a `Ticket` and put on
the ticket queue, where the ticket intake decides it like any other.

Every request is signed with HMAC-SHA256 under its source's secret (one key per source in a
Secrets Manager secret) and carries a time inside the allowed skew, so a captured request cannot
be replayed later. A bad, missing or stale signature is refused (401) and nothing is queued.

| source  | signature header(s)                                        | signed text              | time checked        |
|---------|------------------------------------------------------------|--------------------------|---------------------|
| zendesk | X-Zendesk-Webhook-Signature (base64), ...-Signature-Timestamp | timestamp + body      | the timestamp header |
| jira    | X-Hub-Signature: sha256=<hex>                              | body                     | the body's `timestamp` (ms) |
| generic | X-Signature: sha256=<hex>, X-Signature-Timestamp (unix s)   | "<timestamp>.<body>"     | the timestamp header |

A verified payload that lacks what the policy needs (a subject, a body) is parked in the ticket
DLQ with the reason, never guessed; one of another event type is acknowledged and ignored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from pydantic import ValidationError

from .items import InvalidItem, Ticket, describe_errors, parse_item

SOURCES = ("zendesk", "jira", "generic")
#: Zendesk's `via.channel` → the ticket's channel (any other channel arrives as web).
ZENDESK_CHANNELS = {"email": "email", "mail": "email", "web": "web", "web_form": "web", "web_widget": "web",
                    "chat": "chat", "chat_transcript": "chat", "native_messaging": "chat", "voice": "phone",
                    "phone_call_inbound": "phone", "phone_call_outbound": "phone"}
#: A tag or label naming the customer's tier: tier-pro, tier_pro or tier:pro.
TIER_TAG = re.compile(r"^tier[-_:](free|pro|enterprise)$", re.IGNORECASE)


class Unauthorized(Exception):
    """The request is not proven to come from the source: 401, nothing queued."""


class Unusable(ValueError):
    """A verified payload that is no ticket the policy can decide: parked with this reason."""


@dataclass(frozen=True)
class Received:
    status: str  # queued | parked | ignored
    reason: str = ""
    ticket: Ticket | None = None


def _header(headers: Mapping[str, str], name: str) -> str:
    lowered = {k.lower(): v for k, v in headers.items()}
    value = lowered.get(name.lower(), "").strip()
    if not value:
        raise Unauthorized(f"missing {name} header")
    return value


def _same(expected: bytes | str, given: str) -> bool:
    expected_text = expected if isinstance(expected, str) else expected.decode()
    return hmac.compare_digest(expected_text.encode(), given.encode())


def _check_time(signed_at: datetime, now: datetime, max_skew: int) -> None:
    skew = abs((now - signed_at).total_seconds())
    if skew > max_skew:
        raise Unauthorized(f"request signed {skew:.0f} s from now; at most {max_skew} s allowed (replayed or clock skew)")


def verify(source: str, headers: Mapping[str, str], body: bytes, secret: str, *, now: datetime, max_skew: int) -> None:
    """Raise Unauthorized unless `body` is signed by `secret` in `source`'s scheme, recently."""
    if not secret:
        raise Unauthorized(f"no signing secret is configured for {source}")
    key = secret.encode()
    if source == "zendesk":
        signature = _header(headers, "X-Zendesk-Webhook-Signature")
        stamp = _header(headers, "X-Zendesk-Webhook-Signature-Timestamp")
        expected = base64.b64encode(hmac.new(key, stamp.encode() + body, hashlib.sha256).digest())
        if not _same(expected, signature):
            raise Unauthorized("X-Zendesk-Webhook-Signature does not match the body")
        _check_time(_parse_time(stamp, "X-Zendesk-Webhook-Signature-Timestamp"), now, max_skew)
    elif source == "jira":
        signature = _header(headers, "X-Hub-Signature")
        expected_hex = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
        if not _same(expected_hex, signature):
            raise Unauthorized("X-Hub-Signature does not match the body")
        try:
            stamp_ms = json.loads(body)["timestamp"]
            signed_at = datetime.fromtimestamp(int(stamp_ms) / 1000, timezone.utc)
        except (ValueError, KeyError, TypeError):
            raise Unauthorized("the signed Jira body carries no usable 'timestamp' (ms): replay cannot be ruled out") from None
        _check_time(signed_at, now, max_skew)
    elif source == "generic":
        signature = _header(headers, "X-Signature")
        stamp = _header(headers, "X-Signature-Timestamp")
        expected_hex = "sha256=" + hmac.new(key, stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
        if not _same(expected_hex, signature):
            raise Unauthorized("X-Signature does not match the timestamp and body")
        try:
            signed_at = datetime.fromtimestamp(int(stamp), timezone.utc)
        except ValueError:
            raise Unauthorized("X-Signature-Timestamp is not unix seconds") from None
        _check_time(signed_at, now, max_skew)
    else:
        raise Unauthorized(f"unknown webhook source {source!r} (known: {', '.join(SOURCES)})")


def sign(source: str, body: bytes, secret: str, *, at: float) -> dict[str, str]:
    """The headers a sender of `source` attaches (for your own senders of the generic webhook,
    and the local demo). Jira signs the body alone: its time is the body's `timestamp`."""
    key = secret.encode()
    if source == "zendesk":
        stamp = datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        digest = hmac.new(key, stamp.encode() + body, hashlib.sha256).digest()
        return {"X-Zendesk-Webhook-Signature": base64.b64encode(digest).decode(),
                "X-Zendesk-Webhook-Signature-Timestamp": stamp}
    if source == "jira":
        return {"X-Hub-Signature": "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()}
    stamp = str(int(at))
    return {"X-Signature": "sha256=" + hmac.new(key, stamp.encode() + b"." + body, hashlib.sha256).hexdigest(),
            "X-Signature-Timestamp": stamp}


def _parse_time(text: str, what: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise Unauthorized(f"{what} is not an ISO 8601 time: {text!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _tier(tags: list[Any], default: str) -> str:
    for tag in tags:
        match = TIER_TAG.match(str(tag))
        if match:
            return match.group(1).lower()
    return default


def _need(data: Mapping[str, Any], path: str, where: str = "") -> Any:
    """The value at `path` (named `where + path` when missing or empty: Unusable)."""
    value: Any = data
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None or (isinstance(value, str) and not value.strip()):
        raise Unusable(f"{where}{path} is missing or empty: the policy needs it and it is not guessed")
    return value


def zendesk_ticket(payload: Mapping[str, Any], default_tier: str) -> Ticket | str:
    """A Ticket from a Zendesk `ticket.created` webhook; the reason text for another event type."""
    kind = str(payload.get("type", ""))
    if not kind.endswith("ticket.created"):
        return f"Zendesk event {kind or '(no type)'}: only ticket.created is routed"
    detail = _need(payload, "detail")
    ticket_id = str(_need(detail, "id", "detail."))
    via = detail.get("via") if isinstance(detail.get("via"), Mapping) else {}
    channel = ZENDESK_CHANNELS.get(str(via.get("channel", "")).lower(), "web")
    return _ticket({
        "ticket_id": f"zendesk-{ticket_id}", "subject": _need(detail, "subject", "detail."),
        "body": _need(detail, "description", "detail."),
        "customer": {"id": str(_need(detail, "requester_id", "detail.")), "tier": _tier(detail.get("tags") or [], default_tier)},
        "channel": channel, "created_at": _need(detail, "created_at", "detail."),
        "reference": {"system": "zendesk", "id": ticket_id},
    })


def jira_ticket(payload: Mapping[str, Any], default_tier: str) -> Ticket | str:
    """A Ticket from a Jira `jira:issue_created` webhook; the reason text for another event."""
    event = str(payload.get("webhookEvent", ""))
    if event != "jira:issue_created":
        return f"Jira event {event or '(no webhookEvent)'}: only jira:issue_created is routed"
    issue = _need(payload, "issue")
    fields = _need(issue, "fields", "issue.")
    reporter = fields.get("reporter") if isinstance(fields.get("reporter"), Mapping) else {}
    customer = reporter.get("accountId") or reporter.get("key") or reporter.get("name") or reporter.get("emailAddress")
    if not customer:
        raise Unusable("issue.fields.reporter has no accountId, key or name: the ticket's customer is unknown")
    key = str(_need(issue, "key", "issue."))
    self_url = str(issue.get("self", ""))
    browse = re.sub(r"/rest/api/.*$", f"/browse/{key}", self_url) if "/rest/api/" in self_url else None
    return _ticket({
        "ticket_id": f"jira-{key}", "subject": _need(fields, "summary", "issue.fields."),
        "body": _need(fields, "description", "issue.fields."),
        "customer": {"id": str(customer), "tier": _tier(fields.get("labels") or [], default_tier)},
        "channel": "web", "created_at": _need(fields, "created", "issue.fields."),
        "reference": {"system": "jira", "id": key, "url": browse},
    })


def generic_ticket(payload: Mapping[str, Any], default_tier: str) -> Ticket:
    """The generic webhook's body is a ticket in the router's own shape (README: Ticket)."""
    return _ticket(dict(payload))


def _ticket(data: dict[str, Any]) -> Ticket:
    try:
        return parse_item("ticket", data)  # type: ignore[return-value]
    except InvalidItem as error:
        raise Unusable(str(error)) from None


MAPPERS: dict[str, Callable[[Mapping[str, Any], str], Ticket | str]] = {
    "zendesk": zendesk_ticket, "jira": jira_ticket, "generic": generic_ticket}


class WebhookIntake:
    """Verify, map, queue or park. The secret, the queues and the clock are given (adapters)."""

    def __init__(self, *, secrets: Callable[[], Mapping[str, str]], tickets: Any, dead_letters: Any,
                 max_skew_seconds: int, default_tier: str, clock: Callable[[], datetime] | None = None):
        self.secrets, self.tickets, self.dead_letters = secrets, tickets, dead_letters
        self.max_skew, self.default_tier = max_skew_seconds, default_tier
        self.clock = clock or (lambda: datetime.now(timezone.utc))

    def receive(self, source: str, headers: Mapping[str, str], body: bytes) -> Received:
        """Raises Unauthorized (401); otherwise the ticket was queued, parked or ignored."""
        if source not in MAPPERS:
            raise Unauthorized(f"unknown webhook source {source!r} (known: {', '.join(SOURCES)})")
        verify(source, headers, body, str(self.secrets().get(source) or ""), now=self.clock(), max_skew=self.max_skew)
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict):
                raise Unusable(f"the body is a JSON {type(payload).__name__}, not an object")
            mapped = MAPPERS[source](payload, self.default_tier)
        except (ValueError, ValidationError) as error:
            reason = (str(error) if isinstance(error, Unusable) else
                      "; ".join(describe_errors(error)) if isinstance(error, ValidationError) else f"not JSON: {error}")
            self.dead_letters.send(body.decode("utf-8", "replace"), {
                "failure_kind": "unusable_webhook", "failure_reason": f"{source} webhook: {reason}", "source": source})
            return Received("parked", f"{source} webhook: {reason}")
        if isinstance(mapped, str):
            return Received("ignored", mapped)
        self.tickets.send(mapped.model_dump_json(exclude_none=True))
        return Received("queued", ticket=mapped)
