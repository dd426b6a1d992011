"""Native incident sources: what CloudWatch alarms, AWS Health, GuardDuty, Security Hub and
PagerDuty put on EventBridge, mapped to the router's `Incident` (pure code, no AWS).

Each source module has pydantic models of its event's shape (unknown fields ignored: sources add
fields over time) and an `adapt(event, table)` that returns what the event means:

- `Opened`: an incident is happening (an alarm went to ALARM, a finding is active, a page
  triggered); `key` correlates every later event of the same incident (alarm ARN, Health event
  ARN, finding id, PagerDuty incident id).
- `Resolved`: the incident behind `key` is over (OK, closed, archived, resolve).
- `Ignored`: nothing to route (INSUFFICIENT_DATA, an acknowledgement); the reason is counted and
  logged. With a key, an open incident of that key is still touched (its update count).

An event of a kind no adapter knows raises `UnknownEvent`; one that misses a field the mapping
needs raises `InvalidSourceEvent` naming the fields. The intake parks both in its DLQ with that
reason (decision_router.incidents); nothing is dropped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Annotated, Any, Callable, Mapping

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from ..items import Incident, describe_errors
from ..policies import SeverityTable


class SourceEventError(ValueError):
    """An event the intake cannot map; parked with this reason."""

    failure_kind = "invalid_source_event"


class UnknownEvent(SourceEventError):
    failure_kind = "unknown_event"


class InvalidSourceEvent(SourceEventError):
    def __init__(self, source: str, detail_type: str, errors: list[str]):
        self.errors = errors
        super().__init__(f"{source} {detail_type!r} event: " + "; ".join(errors))


@dataclass(frozen=True)
class Opened:
    key: str
    incident: Incident


@dataclass(frozen=True)
class Resolved:
    key: str
    source: str
    reason: str


@dataclass(frozen=True)
class Ignored:
    source: str
    reason: str
    key: str | None = None


SourceOutcome = Opened | Resolved | Ignored


class SourceModel(BaseModel):
    """A source's payload: only the fields the mapping reads are declared; others are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class Envelope(SourceModel):
    """The EventBridge envelope every source arrives in."""

    id: str
    source: str
    account: str = ""
    time: datetime
    region: str = ""
    resources: list[str] = []
    detail_type: str
    detail: dict[str, Any]

    model_config = ConfigDict(extra="ignore", frozen=True, alias_generator=lambda n: n.replace("_", "-"),
                              populate_by_name=True)


def _rfc1123(value: Any) -> Any:
    """AWS Health writes 'Fri, 27 Jan 2023 06:02:51 GMT' (RFC 1123), which ISO 8601 parsers refuse."""
    if isinstance(value, str) and value[:3].isalpha() and "," in value[:5]:
        try:
            return parsedate_to_datetime(value)
        except (TypeError, ValueError):
            raise ValueError(f"not an RFC 1123 time: {value!r}") from None
    return value


#: A time in ISO 8601 or RFC 1123 form.
HttpTime = Annotated[datetime, BeforeValidator(_rfc1123)]

MAX_ID = 128


def incident_id(key: str) -> str:
    """The incident id for a correlation key: the key itself when it fits `ItemId` (128), else
    its start and a digest (Security Hub finding ids can be longer); the whole key stays in
    `evidence.source_ref`."""
    if len(key) <= MAX_ID:
        return key
    return f"{key[:MAX_ID - 17]}~{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def parse_detail(model: type[BaseModel], envelope: Envelope) -> Any:
    try:
        return model.model_validate(envelope.detail)
    except ValidationError as error:
        raise InvalidSourceEvent(envelope.source, envelope.detail_type,
                                 [f"detail.{line}" for line in describe_errors(error)]) from None


def build_incident(data: dict[str, Any], envelope: Envelope) -> Incident:
    """The Incident an adapter built; a value out of bounds (an empty title) names its field."""
    try:
        return Incident.model_validate(data)
    except ValidationError as error:
        raise InvalidSourceEvent(envelope.source, envelope.detail_type,
                                 [f"incident.{line}" for line in describe_errors(error)]) from None


def text(*parts: str | None) -> str:
    """Lines of description, the empty ones left out."""
    return "\n".join(p.strip() for p in parts if p and p.strip())


Adapter = Callable[[Envelope, SeverityTable], list[SourceOutcome]]


def _adapters() -> dict[tuple[str, str], tuple[str, Adapter]]:
    from . import cloudwatch, guardduty, health, pagerduty, securityhub

    return {
        ("aws.cloudwatch", cloudwatch.DETAIL_TYPE): (cloudwatch.SOURCE, cloudwatch.adapt),
        ("aws.health", health.DETAIL_TYPE): (health.SOURCE, health.adapt),
        ("aws.guardduty", guardduty.DETAIL_TYPE): (guardduty.SOURCE, guardduty.adapt),
        ("aws.securityhub", securityhub.DETAIL_TYPE): (securityhub.SOURCE, securityhub.adapt),
        (pagerduty.PARTNER_PREFIX, pagerduty.DETAIL_TYPE): (pagerduty.SOURCE, pagerduty.adapt),
    }


def known_kinds() -> list[str]:
    return [f"{source} {detail_type!r}" for source, detail_type in _adapters()]


def parse_envelope(event: Any) -> Envelope:
    try:
        return Envelope.model_validate(event)
    except ValidationError as error:
        raise SourceEventError("not an EventBridge event: " + "; ".join(describe_errors(error))) from None


def adapt(envelope: Envelope, tables: Mapping[str, SeverityTable]) -> list[SourceOutcome]:
    """What a native source's event means (one outcome per finding it carries)."""
    from . import pagerduty

    source = pagerduty.PARTNER_PREFIX if envelope.source.startswith(pagerduty.PARTNER_PREFIX) else envelope.source
    found = _adapters().get((source, envelope.detail_type))
    if found is None:
        raise UnknownEvent(f"source {envelope.source!r} detail-type {envelope.detail_type!r} is not an incident "
                           f"event this intake maps (it maps: {', '.join(known_kinds())}, and 'Incident Reported')")
    name, adapter = found
    table = tables.get(name)
    if table is None:
        raise LookupError(f"the incident policy has no source_severity table for {name!r}")
    return adapter(envelope, table)
