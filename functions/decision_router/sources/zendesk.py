"""Zendesk's `ticket.created` webhook. Signed in X-Zendesk-Webhook-Signature: base64 HMAC-SHA256
of the X-Zendesk-Webhook-Signature-Timestamp header and the body; that timestamp is the time
checked; each delivery is recorded by its X-Zendesk-Webhook-Id and its signature. The requester
is the customer, a `tier-*` tag their tier, `via.channel` the channel."""

from __future__ import annotations

import base64
from datetime import datetime, timezone
from typing import Any, Mapping

from ..items import Ticket
from .webhook import (
    Identifier,
    Shape,
    TicketSource,
    Unauthorized,
    build_ticket,
    check_shape,
    check_time,
    header,
    hmac_sha256,
    need,
    parse_time,
    same,
    tier,
)

NAME = "zendesk"
SIGNATURE = "X-Zendesk-Webhook-Signature"
TIMESTAMP = "X-Zendesk-Webhook-Signature-Timestamp"
DELIVERY = "X-Zendesk-Webhook-Id"
#: Zendesk's `via.channel` → the ticket's channel (any other channel arrives as web).
CHANNELS = {"email": "email", "mail": "email", "web": "web", "web_form": "web", "web_widget": "web",
            "chat": "chat", "chat_transcript": "chat", "native_messaging": "chat", "voice": "phone",
            "phone_call_inbound": "phone", "phone_call_outbound": "phone"}


class Via(Shape):
    channel: str | None = None


class Detail(Shape):
    """The parts of `detail` the mapping reads, by JSON type (the text fields the ticket validates)."""

    id: Identifier = None
    requester_id: Identifier = None
    tags: list[Any] | None = None
    via: Via | None = None


class TicketCreated(Shape):
    detail: Detail | None = None


class ZendeskWebhook(TicketSource):
    """Zendesk's webhooks (ticket.created)."""

    name = NAME
    delivery_header = DELIVERY
    owns = (NAME,)

    def verify(self, headers: Mapping[str, str], body: bytes, payload: Any, key: bytes, now: datetime, max_skew: int) -> bytes:
        signature, stamp = header(headers, SIGNATURE), header(headers, TIMESTAMP)
        if not same(base64.b64encode(hmac_sha256(key, stamp.encode() + body).digest()), signature):
            raise Unauthorized(f"{SIGNATURE} does not match the body")
        check_time(parse_time(stamp, TIMESTAMP), now, max_skew)
        return stamp.encode() + body

    def sign(self, body: bytes, key: bytes, at: float) -> dict[str, str]:
        stamp = datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {SIGNATURE: base64.b64encode(hmac_sha256(key, stamp.encode() + body).digest()).decode(), TIMESTAMP: stamp}

    def ticket(self, payload: Mapping[str, Any], default_tier: str) -> Ticket | str:
        """The ticket a `ticket.created` webhook creates; the reason text for another event type."""
        kind = str(payload.get("type", ""))
        if not kind.endswith("ticket.created"):
            return f"Zendesk event {kind or '(no type)'}: only ticket.created is routed"
        check_shape(TicketCreated, payload)
        detail = need(payload, "detail")
        ticket_id = str(need(detail, "id", "detail."))
        via = detail.get("via") or {}
        return build_ticket({
            "ticket_id": f"zendesk-{ticket_id}", "subject": need(detail, "subject", "detail."),
            "body": need(detail, "description", "detail."),
            "customer": {"id": str(need(detail, "requester_id", "detail.")), "tier": tier(detail.get("tags") or [], default_tier)},
            "channel": CHANNELS.get(str(via.get("channel", "")).lower(), "web"), "created_at": need(detail, "created_at", "detail."),
            "reference": {"system": NAME, "id": ticket_id},
        })


TICKET_SOURCE = ZendeskWebhook()
