"""What every ticket webhook source shares: the refusals and parking reasons, the HMAC and time
checks the source modules verify a request with, and the helpers that read a payload.

Every request is signed with HMAC-SHA256 under its source's secret (one key per source in a
Secrets Manager secret); where the source signs a time, it must be inside the allowed window.
Each accepted delivery is recorded (its sender's delivery id and its signature), so a replay
inside the window is acknowledged and not queued twice (decision_router.intake.webhooks). A bad,
missing or stale signature is refused (401) and nothing is queued; the answer gives one fixed
reason, the log the precise one. A verified payload that lacks what the policy needs (a subject,
a body), or whose field has another JSON type than the source sends, is parked in the ticket DLQ
with the reason, never guessed; one of another event type is acknowledged and ignored. A source
reads its body once, as its `Shape` (`read_shape`: the JSON types of what the mapping reads, and
what the ticket needs, `Needed`), and maps the ticket from that model.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from abc import ABC, abstractmethod
from datetime import datetime, timezone
from typing import Annotated, Any, Mapping, TypeVar, cast

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

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

def _present(value: Any) -> Any:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise PydanticCustomError("needed", "is missing or empty")
    return value


#: What marks a part the ticket needs (`Annotated[Model, NEEDED]`): missing, null or blank, the
#: body is parked naming it, never guessed.
NEEDED = BeforeValidator(_present)
#: A text the ticket needs (a subject, a body); its text is the ticket's to validate.
Needed = Annotated[Any, NEEDED]
#: An id the ticket needs, sent as a string or an integer.
NeededId = Annotated[Identifier, NEEDED]

#: What each pydantic type error expects, in JSON's words.
EXPECTED = {"dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
            "list_type": "an array", "string_type": "a string", "int_type": "an integer", "bool_type": "a boolean"}


class Shape(BaseModel):
    """The parts of a payload a source's mapping reads, by JSON type (other keys are allowed and
    not read): a body whose field has another type, or lacks what the ticket needs, is parked
    naming the field and what is wrong, instead of failing in the mapping. Strict: nothing is
    coerced."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True, populate_by_name=True)


ShapeModel = TypeVar("ShapeModel", bound=Shape)


def read_shape(model: type[ShapeModel], payload: Any) -> ShapeModel:
    """`payload` read as `model`, what the source maps the ticket from; Unusable naming the first
    field at fault."""
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        path = ".".join(str(part) for part in first["loc"]) or "the body"
        if first["type"] in ("missing", "needed"):
            raise Unusable(f"{path} is missing or empty: the policy needs it and it is not guessed") from None
        expected = EXPECTED.get(first["type"])
        if expected:
            why = f"is a JSON {json_kind(first.get('input'))}, not {expected}"
        elif first["type"] == "value_error":
            why = str(first.get("ctx", {}).get("error", first["msg"]))
        else:
            why = first["msg"][:200]
        raise Unusable(f"{path} {why}: the ticket cannot be mapped from it") from None


def tier(tags: list[Any] | None, default: str) -> str:
    """The tier a `tier-*` tag names, else `default` (the source's Shape reads `tags` as a list)."""
    for tag in tags or []:
        match = TIER_TAG.match(str(tag))
        if match:
            return match.group(1).lower()
    return default
