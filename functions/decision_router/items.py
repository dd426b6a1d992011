"""The items the pipeline routes: support tickets (SQS) and incidents (EventBridge).

Validation is strict so a bad item fails alone with an error naming the field; it is
never half-routed. Field paths (``customer.tier``) let policies refer to item fields.

ITEM_MODELS is the one list of item kinds: policies and records accept exactly its keys
(`ItemKind`). A new kind is an Item model here, a policy file, a handler and its template
resources.

These models stand on the library's ground floor: the sources (decision_router.sources) build
them from their events, an incident with its source's evidence (decision_router.evidence), and
the domain decides them. Each is complete on import: nothing above this floor completes it.
"""

from __future__ import annotations

import hashlib
import json
import types
from datetime import datetime, timezone
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import AfterValidator, AwareDatetime, BaseModel, Field, StringConstraints, ValidationError
from pydantic_core import PydanticCustomError

from .evidence import Evidence
from .severity import Severity
from .validation import StrictModel, Url, describe_errors

ItemId = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=20_000)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
Language = Annotated[str, StringConstraints(pattern=r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")]


def _in_utc(at: datetime) -> datetime:
    try:
        at.astimezone(timezone.utc)
    except OverflowError:  # 0001-01-01T00:00:00+23:59: before year 1 in UTC, which every reader converts to
        raise PydanticCustomError("datetime_out_of_range", "the time is out of range once converted to UTC") from None
    return at


#: A time with its zone that converts to UTC (what the records, windows and sorting compare).
UtcDatetime = Annotated[AwareDatetime, AfterValidator(_in_utc)]

Tier = Literal["free", "pro", "enterprise"]
Channel = Literal["email", "chat", "web", "billing-portal", "phone"]


class Customer(StrictModel):
    """Who sent the ticket."""

    id: ItemId = Field(description="The customer's id in your systems.")
    tier: Tier = Field(description="The customer's plan; policy rules can name it (`customer.tier`).")


class Item(StrictModel):
    """What every item kind has: a kind, an id and a source, which make its key."""

    kind: ClassVar[str]
    id_field: ClassVar[str]
    source_field: ClassVar[str]  # where the item came from: ids are only unique per source
    #: Optional fields left out of the key while empty, so adding one keeps the keys of items without it.
    unkeyed_when_empty: ClassVar[tuple[str, ...]] = ()

    @property
    def item_id(self) -> str:
        return getattr(self, self.id_field)

    @property
    def origin(self) -> str:
        return getattr(self, self.source_field)

    @property
    def ref(self) -> str:
        """Which item this is: kind, source and id (`item_ref`)."""
        return item_ref(self.kind, self.origin, self.item_id)

    @property
    def key(self) -> str:
        """What makes two deliveries the same item: kind, source, id and the exact payload.
        A redelivery or duplicate is routed once; the same id from another source, or with
        other content (an updated ticket), is another item."""
        data = {k: v for k, v in self.model_dump(mode="json").items() if not (v is None and k in self.unkeyed_when_empty)}
        payload = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest = hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]
        return f"{self.ref}:{digest}"


def item_ref(kind: str, source: str, item_id: str) -> str:
    """One item's identity, `kind:source:id` (`Item.key` less its payload's digest): ids are only
    unique per source, so whatever looks an item up by its id compares this instead."""
    return f"{kind}:{source}:{item_id}"


class Reference(StrictModel):
    """Where a ticket came from in the system that holds it (a Zendesk ticket, a Jira issue), so
    what routes it can write back there (the `Item Routed` event carries it)."""

    system: Name = Field(description="zendesk, jira, or the generic webhook's `system`.")
    id: ItemId = Field(description="The ticket's id in that system.")
    url: Url | None = Field(None, description="A link to the ticket there, when the system sends one (at most 2,048 characters).")


class Ticket(Item):
    """A support ticket: the body of one SQS message."""

    kind: ClassVar[str] = "ticket"
    id_field: ClassVar[str] = "ticket_id"
    source_field: ClassVar[str] = "channel"
    unkeyed_when_empty: ClassVar[tuple[str, ...]] = ("reference",)

    ticket_id: ItemId = Field(description="Unique per channel: with the channel and the content, the ticket's key.")
    subject: Text = Field(description="What the model reads first.")
    body: Text = Field(description="The customer's message.")
    customer: Customer = Field(description="Who sent it.")
    channel: Channel = Field(description="Where it came in; ticket ids are unique per channel.")
    created_at: UtcDatetime = Field(description="ISO 8601 with a timezone, e.g. 2026-11-29T12:00:00Z.")
    language: Language | None = Field(default=None, description="BCP 47 tag such as 'en' or 'de-DE'.")
    reference: Reference | None = Field(default=None, description="The ticket in its own system (webhook intake).")


class Incident(Item):
    """An incident: the `detail` of an EventBridge `Incident Reported` event, or what a native
    source's event maps to (decision_router.sources), its own fields kept as `evidence` (its
    source's model of decision_router.evidence)."""

    kind: ClassVar[str] = "incident"
    id_field: ClassVar[str] = "incident_id"
    source_field: ClassVar[str] = "source"
    unkeyed_when_empty: ClassVar[tuple[str, ...]] = ("evidence",)

    incident_id: ItemId = Field(description="Unique per source: with the source and the content, the incident's key.")
    title: Text = Field(description="What the model reads first.")
    description: Text = Field(description="What happened, in the source's words.")
    service: Name = Field(description="The service affected; correlation and maintenance windows name it.")
    severity: Severity = Field(description="As reported by the monitoring source; not the routed priority.")
    source: Name = Field(description="The monitoring source that reported it (e.g. `datadog`; a native source sets "
                         "its own, such as `aws.cloudwatch`); incident ids are unique per source.")
    reported_at: UtcDatetime = Field(description="ISO 8601 with a timezone, e.g. 2026-11-29T12:00:00Z.")
    evidence: Evidence | None = Field(None, description="The native source's own fields (none for Incident Reported).")


#: Every item kind, by name: the registry the policies, records and demo read.
ITEM_MODELS: dict[str, type[Item]] = {model.kind: model for model in (Ticket, Incident)}


def ref_of(kind: str, data: Any) -> str | None:
    """The identity (`item_ref`) of an item as a record or a table row keeps it (its JSON, as
    validated when it came in), read without validating it again; None when `data` names no
    source or id of that kind."""
    model = ITEM_MODELS.get(kind)
    if model is None or not isinstance(data, dict):
        return None
    source, item_id = data.get(model.source_field), data.get(model.id_field)
    if not isinstance(source, str) or not isinstance(item_id, str):
        return None
    return item_ref(kind, source, item_id)


def _registered_kind(kind: str) -> str:
    if kind not in ITEM_MODELS:
        *others, last = (repr(k) for k in ITEM_MODELS)
        expected = f"{', '.join(others)} or {last}" if others else last
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
    return kind


#: The name of an item kind: one of ITEM_MODELS' keys.
ItemKind = Annotated[str, AfterValidator(_registered_kind)]


class InvalidItem(ValueError):
    """An item that failed validation; the message names every bad field and why."""

    def __init__(self, kind: str, item_id: str | None, errors: list[str]):
        self.kind, self.item_id, self.errors = kind, item_id, errors
        where = f"{kind} {item_id!r}" if item_id else f"{kind} (no usable id)"
        super().__init__(f"invalid {where}: " + "; ".join(errors))


def parse_item(kind: str, data: Any) -> Item:
    """Validate a ticket/incident from a dict or JSON text; raise InvalidItem naming the fields."""
    model = ITEM_MODELS[kind]
    try:
        if isinstance(data, (str, bytes)):
            return model.model_validate_json(data)
        return model.model_validate(data)
    except ValidationError as error:
        raise InvalidItem(kind, _claimed_id(data, model.id_field), describe_errors(error)) from None


def _claimed_id(data: Any, id_field: str) -> str | None:
    """The id an invalid item claims, so its error can name it (JSON text included)."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError:
            return None
    item_id = data.get(id_field) if isinstance(data, dict) else None
    return item_id if isinstance(item_id, str) and item_id.strip() else None


def field_annotation(model: type[BaseModel], path: str) -> Any:
    """The type annotation at a dotted field path; KeyError naming the bad part. Through a union
    of models (an incident's evidence: one model per source) a field of any of them counts."""
    current: Any = model
    for part in path.split("."):
        fields = _fields(current)
        if part not in fields:
            known = ", ".join(sorted(fields)) if fields else "none (not an object)"
            raise KeyError(f"{path!r}: no field {part!r} (fields here: {known})")
        current = _strip_optional(fields[part])
    return current


def _fields(annotation: Any) -> dict[str, Any]:
    """Field name → annotation of a model, or of every model in a union (the first one to declare a name)."""
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    fields: dict[str, Any] = {}
    for member in members:
        for name, info in (getattr(member, "model_fields", None) or {}).items():
            fields.setdefault(name, info.annotation)
    return fields


def literal_values(annotation: Any) -> tuple[Any, ...] | None:
    """The allowed values when the annotation is a Literal, else None."""
    return get_args(annotation) if get_origin(annotation) is Literal else None


def field_value(item: BaseModel, path: str) -> Any:
    """The value at a dotted field path; None when a part on the way is empty (no evidence) or
    does not have it (another source's evidence)."""
    value: Any = item
    for part in path.split("."):
        if value is None:
            return None
        value = getattr(value, part, None)
    return value


def _strip_optional(annotation: Any) -> Any:
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation
