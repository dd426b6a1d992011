"""Jira's `jira:issue_created` webhook. Signed in X-Hub-Signature: `sha256=<hex>` HMAC-SHA256 of
the body alone; the time checked is the body's `timestamp` (ms). The reporter is the customer, a
`tier-*` label their tier; the issue's browse URL is kept in the ticket's reference."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Mapping

from .webhook import TicketFields, TicketSource, Unauthorized, Unusable, check_time, header, hmac_sha256, need, same, tier

NAME = "jira"
SIGNATURE = "X-Hub-Signature"


def verify(headers: Mapping[str, str], body: bytes, payload: Any, key: bytes, now: datetime, max_skew: int) -> None:
    if not same("sha256=" + hmac_sha256(key, body).hexdigest(), header(headers, SIGNATURE)):
        raise Unauthorized(f"{SIGNATURE} does not match the body")
    try:
        stamp_ms = payload["timestamp"]
        signed_at = datetime.fromtimestamp(int(stamp_ms) / 1000, timezone.utc)
    except (ValueError, KeyError, TypeError):
        raise Unauthorized("the signed Jira body carries no usable 'timestamp' (ms): replay cannot be ruled out") from None
    check_time(signed_at, now, max_skew)


def sign(body: bytes, key: bytes, at: float) -> dict[str, str]:
    """Jira signs the body alone: its time is the body's `timestamp`."""
    return {SIGNATURE: "sha256=" + hmac_sha256(key, body).hexdigest()}


def ticket(payload: Mapping[str, Any], default_tier: str) -> TicketFields | str:
    """A ticket's fields from a `jira:issue_created` webhook; the reason text for another event."""
    event = str(payload.get("webhookEvent", ""))
    if event != "jira:issue_created":
        return f"Jira event {event or '(no webhookEvent)'}: only jira:issue_created is routed"
    issue = need(payload, "issue")
    fields = need(issue, "fields", "issue.")
    reporter = fields.get("reporter") if isinstance(fields.get("reporter"), Mapping) else {}
    customer = reporter.get("accountId") or reporter.get("key") or reporter.get("name") or reporter.get("emailAddress")
    if not customer:
        raise Unusable("issue.fields.reporter has no accountId, key or name: the ticket's customer is unknown")
    key = str(need(issue, "key", "issue."))
    self_url = str(issue.get("self", ""))
    browse = re.sub(r"/rest/api/.*$", f"/browse/{key}", self_url) if "/rest/api/" in self_url else None
    return {
        "ticket_id": f"jira-{key}", "subject": need(fields, "summary", "issue.fields."),
        "body": need(fields, "description", "issue.fields."),
        "customer": {"id": str(customer), "tier": tier(fields.get("labels") or [], default_tier)},
        "channel": "web", "created_at": need(fields, "created", "issue.fields."),
        "reference": {"system": NAME, "id": key, "url": browse},
    }


TICKET_SOURCE = TicketSource(NAME, verify, sign, ticket)
