"""Zendesk's `ticket.created` webhook. Signed in X-Zendesk-Webhook-Signature: base64 HMAC-SHA256
of the X-Zendesk-Webhook-Signature-Timestamp header and the body; that timestamp is the time
checked; each delivery is recorded by its X-Zendesk-Webhook-Id and its signature. The requester
is the customer, a `tier-*` tag their tier, `via.channel` the channel."""

from __future__ import annotations

import base64
from datetime import datetime, timezone
from typing import Annotated, Any, Mapping

from ..items import Ticket
from .webhook import (
    NEEDED,
    Needed,
    NeededId,
    Shape,
    TicketSource,
    Unauthorized,
    build_ticket,
    check_time,
    header,
    hmac_sha256,
    parse_time,
    read_shape,
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

    id: NeededId
    subject: Needed
    description: Needed
    requester_id: NeededId
    created_at: Needed
    tags: list[Any] | None = None
    via: Via | None = None


class TicketCreated(Shape):
    detail: Annotated[Detail, NEEDED]


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
        detail = read_shape(TicketCreated, payload).detail
        ticket_id = str(detail.id)
        channel = detail.via.channel if detail.via is not None else None
        return build_ticket({
            "ticket_id": f"zendesk-{ticket_id}", "subject": detail.subject, "body": detail.description,
            "customer": {"id": str(detail.requester_id), "tier": tier(detail.tags, default_tier)},
            "channel": CHANNELS.get((channel or "").lower(), "web"), "created_at": detail.created_at,
            "reference": {"system": NAME, "id": ticket_id},
        })


TICKET_SOURCE = ZendeskWebhook()
