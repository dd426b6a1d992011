"""Jira's `jira:issue_created` webhook. Signed in X-Hub-Signature: `sha256=<hex>` HMAC-SHA256 of
the body alone; the time checked is the body's `timestamp` (ms), the time of the event, not of
the delivery: Jira retries a failed delivery with the same body for up to half an hour (its
retry policy says "up to 30 minutes, subject to change"), so a Jira body is accepted up to
RETRY_WINDOW_SECONDS after its event, once: each delivery is recorded by its
X-Atlassian-Webhook-Identifier (unchanged on retries) and by its signature. The reporter is the
customer, a `tier-*` label their tier; the issue's browse URL is kept in the ticket's reference."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Mapping

from pydantic import Field

from ..items import Ticket
from .webhook import (
    NEEDED,
    Identifier,
    Needed,
    NeededId,
    Shape,
    TicketSource,
    Unauthorized,
    Unusable,
    build_ticket,
    check_time,
    header,
    hmac_sha256,
    read_shape,
    same,
    tier,
    unix_time,
)

NAME = "jira"
SIGNATURE = "X-Hub-Signature"
DELIVERY = "X-Atlassian-Webhook-Identifier"
#: How old a Jira body's event time may be: twice the half hour Jira says it retries for.
RETRY_WINDOW_SECONDS = 3600


class Reporter(Shape):
    accountId: Identifier = None
    key: Identifier = None
    name: Identifier = None
    emailAddress: Identifier = None


class Fields(Shape):
    """The parts of `issue.fields` the mapping reads, by JSON type (the text fields the ticket validates)."""

    summary: Needed
    description: Needed
    created: Needed
    reporter: Reporter | None = None
    labels: list[Any] | None = None


class Issue(Shape):
    key: NeededId
    self_url: str | None = Field(None, alias="self")
    fields: Annotated[Fields, NEEDED]


class IssueCreated(Shape):
    issue: Annotated[Issue, NEEDED]


class JiraWebhook(TicketSource):
    """Jira's webhooks (jira:issue_created)."""

    name = NAME
    delivery_header = DELIVERY
    owns = (NAME,)

    def verify(self, headers: Mapping[str, str], body: bytes, payload: Any, key: bytes, now: datetime, max_skew: int) -> bytes:
        if not same("sha256=" + hmac_sha256(key, body).hexdigest(), header(headers, SIGNATURE)):
            raise Unauthorized(f"{SIGNATURE} does not match the body")
        stamp_ms = payload.get("timestamp") if isinstance(payload, dict) else None
        if isinstance(stamp_ms, bool) or not isinstance(stamp_ms, (int, float)):
            raise Unauthorized("the signed Jira body carries no usable 'timestamp' (ms): replay cannot be ruled out")
        signed_at = unix_time(stamp_ms, "the Jira body's timestamp", scale=1000)
        check_time(signed_at, now, max_skew, max_age=max(max_skew, RETRY_WINDOW_SECONDS))
        return body

    def sign(self, body: bytes, key: bytes, at: float) -> dict[str, str]:
        """Jira signs the body alone: its time is the body's `timestamp`."""
        return {SIGNATURE: "sha256=" + hmac_sha256(key, body).hexdigest()}

    def ticket(self, payload: Mapping[str, Any], default_tier: str) -> Ticket | str:
        """The ticket a `jira:issue_created` webhook creates; the reason text for another event."""
        event = str(payload.get("webhookEvent", ""))
        if event != "jira:issue_created":
            return f"Jira event {event or '(no webhookEvent)'}: only jira:issue_created is routed"
        issue = read_shape(IssueCreated, payload).issue
        fields, reporter = issue.fields, issue.fields.reporter or Reporter()
        customer = reporter.accountId or reporter.key or reporter.name or reporter.emailAddress
        if not customer:
            raise Unusable("issue.fields.reporter has no accountId, key or name: the ticket's customer is unknown")
        key = str(issue.key)
        self_url = issue.self_url or ""
        browse = re.sub(r"/rest/api/.*$", f"/browse/{key}", self_url) if "/rest/api/" in self_url else None
        return build_ticket({
            "ticket_id": f"jira-{key}", "subject": fields.summary, "body": fields.description,
            "customer": {"id": str(customer), "tier": tier(fields.labels, default_tier)},
            "channel": "web", "created_at": fields.created,
            "reference": {"system": NAME, "id": key, "url": browse},
        })


TICKET_SOURCE = JiraWebhook()
