"""The generic JSON webhook, for your own senders: the body is a ticket in the router's own shape
(docs/sources/generic-webhook.md). Signed in X-Signature: `sha256=<hex>` HMAC-SHA256 of "<timestamp>.<body>", the
timestamp (unix seconds) in X-Signature-Timestamp, which is the time checked. Its deliveries are
told apart by their signature. It may not pose as another source: a `ticket_id` or a
`reference.system` that another source owns is parked (decision_router.sources.claims)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from ..items import Ticket
from .webhook import TicketSource, Unauthorized, build_ticket, check_time, header, hmac_sha256, same, unix_time

NAME = "generic"
SIGNATURE = "X-Signature"
TIMESTAMP = "X-Signature-Timestamp"


class GenericWebhook(TicketSource):
    """Any system that posts a ticket's fields as they are."""

    name = NAME

    def verify(self, headers: Mapping[str, str], body: bytes, payload: Any, key: bytes, now: datetime, max_skew: int) -> bytes:
        signature, stamp = header(headers, SIGNATURE), header(headers, TIMESTAMP)
        if not same("sha256=" + hmac_sha256(key, stamp.encode() + b"." + body).hexdigest(), signature):
            raise Unauthorized(f"{SIGNATURE} does not match the timestamp and body")
        if not stamp.isdigit():
            raise Unauthorized(f"{TIMESTAMP} is not unix seconds")
        check_time(unix_time(stamp, TIMESTAMP), now, max_skew)
        return stamp.encode() + b"." + body

    def sign(self, body: bytes, key: bytes, at: float) -> dict[str, str]:
        stamp = str(int(at))
        return {SIGNATURE: "sha256=" + hmac_sha256(key, stamp.encode() + b"." + body).hexdigest(), TIMESTAMP: stamp}

    def ticket(self, payload: Mapping[str, Any], default_tier: str) -> Ticket | str:
        """The body is the ticket's fields as they are."""
        return build_ticket(payload)


TICKET_SOURCE = GenericWebhook()
