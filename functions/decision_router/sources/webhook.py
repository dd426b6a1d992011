"""What every ticket webhook source shares: the refusals and parking reasons, the HMAC and time
checks the source modules verify a request with, and the helpers that read a payload.

Every request is signed with HMAC-SHA256 under its source's secret (one key per source in a
Secrets Manager secret); where the source signs a time, it must be inside the allowed window.
Each accepted delivery is recorded (its sender's delivery id and its signature), so a replay
inside the window is acknowledged and not queued twice (decision_router.intake.webhooks). A bad,
missing or stale signature is refused (401) and nothing is queued; the answer gives one fixed
reason, the log the precise one. A verified payload that lacks what the policy needs (a subject,
a body), or whose field has another JSON type than the source sends (checked against the
source's `Shape`), is parked in the ticket DLQ with the reason, never guessed; one of another
event type is acknowledged and ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from abc import ABC, abstractmethod
from datetime import datetime, timezone
from typing import Annotated, Any, Mapping, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from ..items import InvalidItem, Ticket, parse_item

#: A tag or label naming the customer's tier: tier-pro, tier_pro or tier:pro.
TIER_TAG = re.compile(r"^tier[-_:](free|pro|enterprise)$", re.IGNORECASE)


class Unauthorized(Exception):
    """The request is not proven to come from the source: 401, nothing queued. The message is
    logged, never sent back (it may name what is configured)."""


class Unusable(ValueError):
    """A verified payload that is no ticket the policy can decide: parked with this reason."""


def build_ticket(fields: Mapping[str, Any]) -> Ticket:
    """The ticket a source mapped, validated; Unusable names every bad field and why."""
    try:
        return cast(Ticket, parse_item("ticket", dict(fields)))
    except InvalidItem as error:
        raise Unusable(str(error)) from None


class SignedWebhook(ABC):
    """A webhook source on the route POST /webhooks/{source}: how its sender signs a body."""

    name: str  #: the route's {source}
    #: The header naming the delivery, unchanged on the sender's retries ("" when it sends none).
    delivery_header: str = ""

    @abstractmethod
    def verify(self, headers: Mapping[str, str], body: bytes, payload: Any, key: bytes, now: datetime,
               max_skew: int) -> bytes:
        """Raise Unauthorized unless `body` is signed by `key`, recently (`payload`: the body's JSON
        value, or None when it is not JSON); else return the message the signature covers (a
        delivery is recorded by it: a replay cannot change it and stay signed)."""

    @abstractmethod
    def sign(self, body: bytes, key: bytes, at: float) -> dict[str, str]:
        """The headers a sender attaches at unix time `at` (the demo's and the tests' senders)."""


class TicketSource(SignedWebhook):
    """A ticket webhook source: a class in its module, one instance in the table
    (decision_router.sources.TICKET_SOURCES)."""

    #: The systems of `reference` this source may name, and the `ticket_id` prefixes it may use
    #: (empty: any that is not another source's, decision_router.sources.claims).
    owns: tuple[str, ...] = ()

    @abstractmethod
    def ticket(self, payload: Mapping[str, Any], default_tier: str) -> Ticket | str:
        """The ticket a verified payload maps to (`build_ticket`), or the reason text for an event not routed."""


class IncidentWebhook(SignedWebhook):
    """An incident webhook source (PagerDuty, Grafana): verified like a ticket source, its body
    forwarded unchanged to the event bus for the incident intake, never put on the ticket queue."""

    detail_type: str  #: the event's detail-type on the bus (its source is FORWARDED_SOURCE)

    @abstractmethod
    def skipped(self, payload: Any) -> str | None:
        """Why a verified payload is not forwarded (a ping, another resource), or None to forward it."""


#: The EventBridge source of the incident webhooks' forwarded bodies.
FORWARDED_SOURCE = "decision-router.webhooks"


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
    # A header may carry any text (a lone surrogate too): compared as bytes, never an error.
    return hmac.compare_digest(expected_text.encode(), given.encode("utf-8", "replace"))


def check_time(signed_at: datetime, now: datetime, max_skew: int, *, max_age: int | None = None) -> None:
    """Refuse a time more than `max_skew` s ahead of now, or older than `max_age` s (default: max_skew)."""
    age = (now - signed_at).total_seconds()
    oldest = max_skew if max_age is None else max_age
    if age > oldest or -age > max_skew:
        raise Unauthorized(f"request signed {abs(age):.0f} s {'ago' if age > 0 else 'ahead'}; at most "
                           f"{oldest if age > 0 else max_skew} s allowed (replayed or clock skew)")


def unix_time(value: Any, what: str, *, scale: float = 1.0) -> datetime:
    """A unix time (seconds, or what `scale` makes seconds of), or Unauthorized: never an
    OverflowError or a year out of range from a signed 1e400."""
    try:
        number = float(value) / scale
        return datetime.fromtimestamp(number, timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        raise Unauthorized(f"{what} is not a unix time: {str(value)[:40]!r}") from None


def parse_time(text: str, what: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise Unauthorized(f"{what} is not an ISO 8601 time: {text[:40]!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def hex_signatures(header_value: str, prefix: str) -> list[str]:
    """The `prefix<hex>` entries of a comma-separated signature header (several during a key rotation)."""
    return [part.strip()[len(prefix):] for part in header_value.split(",") if part.strip().startswith(prefix)]


def json_kind(value: Any) -> str:
    """The JSON name of a parsed value's type (what a sender sent, in its own words)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _identifier(value: Any) -> Any:
    if value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"is a JSON {json_kind(value)}, not a string or an integer")


#: An id a source sends as a string or an integer (kept as sent; the mapping makes it text).
Identifier = Annotated[Any, AfterValidator(_identifier)]

#: What each pydantic type error expects, in JSON's words.
EXPECTED = {"dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
            "list_type": "an array", "string_type": "a string", "int_type": "an integer", "bool_type": "a boolean"}


class Shape(BaseModel):
    """The JSON types of the parts of a payload a source's mapping reads (other keys are allowed
    and not read): a body whose field has another type is parked naming the field and what it
    is, instead of failing in the mapping. Strict: nothing is coerced."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True, populate_by_name=True)


def check_shape(model: type[Shape], payload: Any, where: str = "") -> None:
    """Unusable (naming the first field at fault, `where` + its path) unless `payload` has the
    JSON types `model` declares."""
    try:
        model.model_validate(payload)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        path = where + ".".join(str(part) for part in first["loc"])
        expected = EXPECTED.get(first["type"])
        if expected:
            why = f"is a JSON {json_kind(first.get('input'))}, not {expected}"
        elif first["type"] == "value_error":
            why = str(first.get("ctx", {}).get("error", first["msg"]))
        else:
            why = first["msg"][:200]
        raise Unusable(f"{path or 'the body'} {why}: the ticket cannot be mapped from it") from None


def tier(tags: list[Any], default: str) -> str:
    """The tier a `tier-*` tag names, else `default`. `tags` is a list (the source's Shape checks it)."""
    if not isinstance(tags, list):
        raise Unusable(f"the tags are a JSON {json_kind(tags)}, not an array")
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
