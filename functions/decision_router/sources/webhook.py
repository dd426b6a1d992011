"""What every ticket webhook source shares: the refusals and parking reasons, the HMAC and time
checks the source modules verify a request with, and the helpers that read a payload.

Every request is signed with HMAC-SHA256 under its source's secret (one key per source in a
Secrets Manager secret) and carries a time inside the allowed skew, so a captured request cannot
be replayed later. A bad, missing or stale signature is refused (401) and nothing is queued. A
verified payload that lacks what the policy needs (a subject, a body) is parked in the ticket DLQ
with the reason, never guessed; one of another event type is acknowledged and ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

#: A tag or label naming the customer's tier: tier-pro, tier_pro or tier:pro.
TIER_TAG = re.compile(r"^tier[-_:](free|pro|enterprise)$", re.IGNORECASE)


class Unauthorized(Exception):
    """The request is not proven to come from the source: 401, nothing queued."""


class Unusable(ValueError):
    """A verified payload that is no ticket the policy can decide: parked with this reason."""


#: A mapped payload: the ticket's fields (validated by the intake), or why it is not routed.
TicketFields = dict[str, Any]


@dataclass(frozen=True)
class TicketSource:
    """One ticket webhook source as the intake's table declares it."""

    name: str  #: the route's {source}
    #: Raise Unauthorized unless the body is signed by the secret, recently (headers, body, the body's
    #: JSON value or None when it is not JSON, secret, now, max skew).
    verify: Callable[[Mapping[str, str], bytes, Any, bytes, datetime, int], None]
    #: The headers a sender attaches (body, secret, unix time).
    sign: Callable[[bytes, bytes, float], dict[str, str]]
    #: The ticket's fields from a verified payload, or the reason text for an event not routed.
    ticket: Callable[[Mapping[str, Any], str], TicketFields | str]


def hmac_sha256(key: bytes, message: bytes) -> hmac.HMAC:
    return hmac.new(key, message, hashlib.sha256)


def header(headers: Mapping[str, str], name: str) -> str:
    lowered = {k.lower(): v for k, v in headers.items()}
    value = lowered.get(name.lower(), "").strip()
    if not value:
        raise Unauthorized(f"missing {name} header")
    return value


def same(expected: bytes | str, given: str) -> bool:
    expected_text = expected if isinstance(expected, str) else expected.decode()
    return hmac.compare_digest(expected_text.encode(), given.encode())


def check_time(signed_at: datetime, now: datetime, max_skew: int) -> None:
    skew = abs((now - signed_at).total_seconds())
    if skew > max_skew:
        raise Unauthorized(f"request signed {skew:.0f} s from now; at most {max_skew} s allowed (replayed or clock skew)")


def parse_time(text: str, what: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise Unauthorized(f"{what} is not an ISO 8601 time: {text!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def tier(tags: list[Any], default: str) -> str:
    for tag in tags:
        match = TIER_TAG.match(str(tag))
        if match:
            return match.group(1).lower()
    return default


def need(data: Mapping[str, Any], path: str, where: str = "") -> Any:
    """The value at `path` (named `where + path` when missing or empty: Unusable)."""
    value: Any = data
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None or (isinstance(value, str) and not value.strip()):
        raise Unusable(f"{where}{path} is missing or empty: the policy needs it and it is not guessed")
    return value
