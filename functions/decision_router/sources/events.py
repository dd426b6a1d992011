"""What every native incident source shares: the EventBridge envelope, the outcomes an event
maps to, the errors that park an event, and the helpers the source modules build incidents with.

An event is validated once, as its source's model (`IncidentSource.read`): an EventBridge event as
the envelope with the detail of that source's model (`Envelope[Detail]`, an `EventBridgeSource`),
another shape as its own (an SNS notification, a Lambda alarm action); a failure names the
fields. A source's `adapt` method returns what the event means:

- `Opened`: an incident is happening (an alarm went to ALARM, a finding is active, a page
  triggered); `key` correlates every later event of the same incident (alarm ARN, Health event
  ARN, finding id, PagerDuty incident id); `incident` is the `Incident` (decision_router.items)
  the source built (`build_incident`), its `evidence` an instance of the source's evidence model.
- `Resolved`: the incident behind `key` is over (OK, closed, archived, resolve).
- `Ignored`: nothing to route (INSUFFICIENT_DATA, an acknowledgement); the reason is counted and
  logged. With a key, an open incident of that key is still touched (its update count).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Annotated, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from ..evidence import SourceEvidence
from ..items import Incident
from ..severity import SeverityTable
from ..validation import describe_errors


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
    """An incident is happening: `incident` validated (`build_incident`), correlated by `key`."""

    key: str
    incident: Incident
    #: The delivery this outcome counts as, when not the envelope's id: a change the source
    #: sends by several paths (an alarm on EventBridge and SNS) is one delivery on all of them.
    delivery: str | None = None


@dataclass(frozen=True)
class Resolved:
    key: str
    source: str
    reason: str
    delivery: str | None = None


@dataclass(frozen=True)
class Ignored:
    source: str
    reason: str
    key: str | None = None
    delivery: str | None = None


SourceOutcome = Opened | Resolved | Ignored


class SourceEvent(Protocol):
    """What the intake reads of any source's event, whatever its shape: the delivery (`id`) and
    where it comes from in words (an EventBridge envelope's source and detail-type)."""

    @property
    def id(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def detail_type(self) -> str: ...


class SourceModel(BaseModel):
    """A source's payload: only the fields the mapping reads are declared; others are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


Detail = TypeVar("Detail")


class Envelope(SourceModel, Generic[Detail]):
    """The EventBridge envelope every source arrives in, with its source's detail."""

    id: str
    source: str
    account: str = ""
    time: datetime
    region: str = ""
    resources: list[str] = []
    detail_type: str
    detail: Detail

    model_config = ConfigDict(extra="ignore", frozen=True, alias_generator=lambda n: n.replace("_", "-"),
                              populate_by_name=True)


#: An envelope whose detail is not read yet (our own `Incident Reported`, an unmapped kind).
AnyEnvelope = Envelope[dict[str, Any]]


def read_envelope(model: type[Envelope[Any]], event: Any) -> Envelope[Any]:
    """`event` validated once as `model`: a bad envelope is no EventBridge event; a bad detail
    is an InvalidSourceEvent naming the detail's fields."""
    try:
        return model.model_validate(event)
    except ValidationError as error:
        errors = error.errors(include_url=False)
        in_detail = [e for e in errors if len(e["loc"]) > 1 and e["loc"][0] == "detail"]
        if len(in_detail) < len(errors):
            raise SourceEventError("not an EventBridge event: " + "; ".join(describe_errors(error))) from None
        raise InvalidSourceEvent(str(event.get("source")), str(event.get("detail-type")),
                                 describe_errors(error)) from None


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


EvidenceModel = TypeVar("EvidenceModel", bound=SourceEvidence)


def build_evidence(model: type[EvidenceModel], event: SourceEvent, **fields: Any) -> EvidenceModel:
    """The source's evidence of an incident; a value out of bounds names its field."""
    try:
        return model(**fields)
    except ValidationError as error:
        raise InvalidSourceEvent(event.source, event.detail_type,
                                 [f"incident.evidence.{line}" for line in describe_errors(error)]) from None


def build_incident(event: SourceEvent, **fields: Any) -> Incident:
    """The incident the event opens, validated; a value out of bounds (an empty title) names its field."""
    try:
        return Incident(**fields)
    except ValidationError as error:
        raise InvalidSourceEvent(event.source, event.detail_type,
                                 [f"incident.{line}" for line in describe_errors(error)]) from None


def text(*parts: str | None) -> str:
    """Lines of description, the empty ones left out."""
    return "\n".join(p.strip() for p in parts if p and p.strip())


Event = TypeVar("Event", bound=SourceEvent)


class IncidentSource(ABC, Generic[Event]):
    """One native incident source: a class in its module, one instance in the table
    (decision_router.sources.INCIDENT_SOURCES)."""

    name: str  #: the incident's `source`, and the policy's `source_severity` key
    event_source: str  #: where its events come from (EventBridge `source`; a prefix when `partner`)
    detail_type: str  #: what they are (EventBridge `detail-type`, or the source's own name for its shape)
    #: The model of the evidence its incidents carry: a member of the incidents' `Evidence` union
    #: (decision_router.evidence).
    evidence: type[SourceEvidence] = SourceEvidence

    @abstractmethod
    def read(self, payload: Any) -> Event | None:
        """The raw payload validated once as this source's event; None when it is not this
        source's (SourceEventError, naming the fields, when it is and cannot be read)."""

    @abstractmethod
    def adapt(self, event: Event, table: SeverityTable) -> list[SourceOutcome]:
        """What the event means: an incident opened, resolved, or nothing to route (with why)."""

    @property
    def kind(self) -> str:
        return f"{self.event_source} {self.detail_type!r}"


class EventBridgeSource(IncidentSource[Envelope[Detail]], Generic[Detail]):
    """A source whose events come by EventBridge: known by their `source` and `detail-type`, read
    as the envelope with its detail's model."""

    detail: type[Any]  #: the model of its events' detail (Detail)
    partner: bool = False

    def maps(self, source: Any, detail_type: Any) -> bool:
        if detail_type != self.detail_type or not isinstance(source, str):
            return False
        return source.startswith(self.event_source) if self.partner else source == self.event_source

    def read(self, payload: Any) -> Envelope[Detail] | None:
        if not (isinstance(payload, dict) and self.maps(payload.get("source"), payload.get("detail-type"))):
            return None
        return read_envelope(Envelope[self.detail], payload)  # type: ignore[name-defined]
