"""Dependencies between services, and inhibition rules: while a parent incident is open and
covered (paged, or itself held under a covered parent), a new incident of a service that depends
on it is held under it instead of paging; when the parent resolves, each of its held children
still open is routed then. Pure code: the intake (decision_router.intake.dependency_holds) applies
it with the open-incident store.

Parents and children meet on *slots*, keys of the open-incident store read with one GetItem:
- a dependency `checkout -> orders-db`: an orders-db incident registers in `parent#service#orders-db`
  (every service that some service depends on has one), a checkout incident looks there;
- an inhibition rule (Alertmanager's `inhibit_rules`: a source match, a target match, the fields
  that must be equal): an incident matching its `source` registers in
  `parent#inhibit#<rule>#<digest of its equal fields>`, one matching its `target` looks in the slot
  of its own equal fields' values.

An incident is *covered* while it is open and either paged (routed by an execution) or held under
a covered parent; it is registered in its slots from the moment it is covered until it resolves.
So a chain follows the real state of the service in between: `search` is held under an open
checkout incident that was paged or is held under an open orders-db incident; once that checkout
incident resolves, a search incident still open pages, whatever orders-db does.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ..items import Item, field_value
from ..validation import StrictModel
from .conditions import Condition
from .noise import Id, Text, severity_rank

Service = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
SERVICE_SLOT = "parent#service#"
INHIBIT_SLOT = "parent#inhibit#"


class Inhibition(StrictModel):
    """While an incident matching `source` is open and covered, a new incident matching `target`
    whose `equal` fields have the same values is held under it (a sev1 only with `include_sev1`)."""

    id: Id
    description: Text
    source: list[Condition] = Field(min_length=1, description="the parent incidents (every condition)")
    target: list[Condition] = Field(min_length=1, description="the incidents it holds (every condition)")
    equal: list[str] = Field(default_factory=list, description="item fields whose values must be equal on both")
    include_sev1: bool = False

    def slot(self, item: Item) -> str | None:
        values = [field_value(item, f) for f in self.equal]
        if any(v is None or v == "" for v in values):
            return None  # a field it lacks: nothing to be equal to
        digest = hashlib.sha256(json.dumps(values, default=str).encode()).hexdigest()[:24]
        return f"{INHIBIT_SLOT}{self.id}#{digest}"


class ParentEntry(BaseModel):
    """A covered incident as registered in a slot: enough to name it in a held child's reason."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    key: str
    incident_id: str
    service: str
    severity: str
    opened_at: str = Field(description="the incident's reported time (ISO)")


class Candidate(BaseModel):
    """A slot a new incident looks in for its parent, and whether a sev1 may be held there."""

    model_config = ConfigDict(frozen=True)

    slot: str
    include_sev1: bool
    rule: str = Field(description="'dependencies' or the inhibition rule's id")


def find_cycle(dependencies: dict[str, list[str]]) -> list[str] | None:
    """A cycle of the dependency graph, as the services along it (first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(service: str, path: list[str]) -> list[str] | None:
        state[service] = 1
        for parent in dependencies.get(service, []):
            if state.get(parent) == 1:
                return path[path.index(parent):] + [parent] if parent in path else [service, parent]
            if state.get(parent) is None:
                found = visit(parent, path + [parent])
                if found:
                    return found
        state[service] = 2
        return None

    for service in sorted(dependencies):
        if state.get(service) is None:
            found = visit(service, [service])
            if found:
                return found
    return None


def unknown_services(dependencies: dict[str, list[str]]) -> list[str]:
    """Warnings: a parent that is not declared itself (each service the policy knows is a key of
    `dependencies.services`, a leaf with `[]`): a misspelt parent would hold nothing."""
    return [f"dependencies.services {child!r}: depends on {parent!r}, a service the policy does not declare "
            f"(declare it with \"{parent}\": [] if it depends on nothing)"
            for child, parents in sorted(dependencies.items()) for parent in parents if parent not in dependencies]


class Dependencies(StrictModel):
    """The policy's `dependencies`: which services depend on which, and the inhibition rules."""

    services: dict[Service, list[Service]] = Field(
        default_factory=dict, description="service -> the services it depends on (a leaf: [])")
    include_sev1: bool = Field(False, description="whether a sev1 child may be held under its dependency "
                                                   "(by default every sev1 pages)")
    inhibit: list[Inhibition] = Field(default_factory=list, description="Alertmanager-style inhibition rules")

    @model_validator(mode="after")
    def _acyclic(self) -> "Dependencies":
        cycle = find_cycle(self.services)
        if cycle:
            raise ValueError("dependencies.services: a cycle " + " -> ".join(cycle)
                             + " (a service cannot be held under itself)")
        return self

    @property
    def empty(self) -> bool:
        return not (self.services or self.inhibit)

    def warnings(self) -> list[str]:
        return unknown_services(self.services)

    def fields(self) -> list[tuple[str, str]]:
        """(where, field) of every field the inhibition rules name, for the policy's validation."""
        named = [(f"dependencies.inhibit {r.id!r} source", c.field) for r in self.inhibit for c in r.source]
        named += [(f"dependencies.inhibit {r.id!r} target", c.field) for r in self.inhibit for c in r.target]
        return named + [(f"dependencies.inhibit {r.id!r} equal", f) for r in self.inhibit for f in r.equal]

    def parent_slots(self, item: Item) -> list[str]:
        return parent_slots(self.services, self.inhibit, item)

    def candidates(self, item: Item) -> list[Candidate]:
        return candidates(self.services, self.include_sev1, self.inhibit, item)


def may_hold(severity: str | None, parent_severity: str | None, include_sev1: bool) -> bool:
    """Whether a child of `severity` may be held under a parent of `parent_severity`: never when it
    is more severe than its parent (its page would be lost), nor a sev1 unless the rule includes it."""
    if severity_rank(severity) < severity_rank(parent_severity):
        return False
    return severity_rank(severity) > 1 or include_sev1


def parent_slots(dependencies: dict[str, list[str]], inhibit: list[Inhibition], item: Item) -> list[str]:
    """The slots `item` registers in while it is covered (it may be a parent there)."""
    service = getattr(item, "service", None)
    slots = []
    if service and any(service in parents for parents in dependencies.values()):
        slots.append(SERVICE_SLOT + service)
    for rule in inhibit:
        slot = rule.slot(item) if all(c.holds(item) for c in rule.source) else None
        if slot is not None:
            slots.append(slot)
    return slots


def candidates(dependencies: dict[str, list[str]], include_sev1: bool, inhibit: list[Inhibition],
               item: Item) -> list[Candidate]:
    """The slots `item` looks in for a covered parent, in the policy's order."""
    service = getattr(item, "service", None)
    found = [Candidate(slot=SERVICE_SLOT + parent, include_sev1=include_sev1, rule="dependencies")
             for parent in dependencies.get(service or "", [])]
    for rule in inhibit:
        slot = rule.slot(item) if all(c.holds(item) for c in rule.target) else None
        if slot is not None:
            found.append(Candidate(slot=slot, include_sev1=rule.include_sev1, rule=rule.id))
    return found


def held_reason(parent: ParentEntry) -> str:
    """The held child's `why`: its parent named, and when that opened."""
    return f"held under {parent.service} incident {parent.incident_id}, opened {hhmm(parent.opened_at)}"


def hhmm(at: str) -> str:
    try:
        return datetime.fromisoformat(at).strftime("%H:%M")
    except ValueError:
        return at
