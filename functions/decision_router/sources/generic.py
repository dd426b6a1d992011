"""The generic JSON webhook, for your own senders: the body is a ticket in the router's own shape
(README: Ticket). Signed in X-Signature: `sha256=<hex>` HMAC-SHA256 of "<timestamp>.<body>", the
timestamp (unix seconds) in X-Signature-Timestamp, which is the time checked."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

from .webhook import TicketFields, TicketSource, Unauthorized, check_time, header, hmac_sha256, same

NAME = "generic"
SIGNATURE = "X-Signature"
TIMESTAMP = "X-Signature-Timestamp"


def verify(headers: Mapping[str, str], body: bytes, payload: Any, key: bytes, now: datetime, max_skew: int) -> None:
    signature, stamp = header(headers, SIGNATURE), header(headers, TIMESTAMP)
    if not same("sha256=" + hmac_sha256(key, stamp.encode() + b"." + body).hexdigest(), signature):
        raise Unauthorized(f"{SIGNATURE} does not match the timestamp and body")
    try:
        signed_at = datetime.fromtimestamp(int(stamp), timezone.utc)
    except ValueError:
        raise Unauthorized(f"{TIMESTAMP} is not unix seconds") from None
    check_time(signed_at, now, max_skew)


def sign(body: bytes, key: bytes, at: float) -> dict[str, str]:
    stamp = str(int(at))
    return {SIGNATURE: "sha256=" + hmac_sha256(key, stamp.encode() + b"." + body).hexdigest(), TIMESTAMP: stamp}


def ticket(payload: Mapping[str, Any], default_tier: str) -> TicketFields | str:
    """The body is the ticket's fields as they are."""
    return dict(payload)


TICKET_SOURCE = TicketSource(NAME, verify, sign, ticket)
