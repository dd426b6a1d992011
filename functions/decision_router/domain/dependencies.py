"""Dependencies between services, and inhibition rules: while a parent incident is open and
paged, a new incident of a service that depends on it (directly or through services in between)
is held under it instead of paging; when the parent resolves, each of its held children still
open is decided and routed then, and none is held longer than the policy's `hold_minutes`. Pure
code: the intake (decision_router.intake.dependency_holds) applies it with the open-incident store.

Parents and children meet on *slots*, keys of the open-incident store read with one GetItem:
- a dependency `checkout -> orders-db`: an orders-db incident registers in `parent#service#orders-db`
  (every service that some service depends on has one), a checkout incident looks there;
- an inhibition rule (Alertmanager's `inhibit_rules`: a source match, a target match, the fields
  that must be equal): an incident matching its `source` registers in
  `parent#inhibit#<rule>#<digest of its equal fields>`, one matching its `target` looks in the slot
  of its own equal fields' values.

An incident *covers* its dependants only while it is open and a page went out for it; it is
registered in its slots from its page until it resolves. A held incident covers nothing (nobody
was paged for it), so holds never chain and never loop: `search` (which depends on checkout, which
depends on orders-db) is held under a paged checkout incident, or under a paged orders-db incident
when checkout has none. A target that matches both sides of an inhibition rule is never held under
a source that matches both sides too (Alertmanager's two-sided exclusion), and a policy whose
dependencies and rules together could hold A under B and B under A is refused when it loads.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ..items import Item, field_value
from ..validation import StrictModel
from .conditions import Condition
from .noise import Id, Minutes, Text, severity_rank

Service = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
SERVICE_SLOT = "parent#service#"
#: The ceiling of a hold by default (the policy's `dependencies.hold_minutes`).
HOLD_MINUTES = 30
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

    def is_source(self, item: Item) -> bool:
        return all(c.holds(item) for c in self.source)

    def is_target(self, item: Item) -> bool:
        return all(c.holds(item) for c in self.target)

    def slot(self, item: Item) -> str | None:
        values = [field_value(item, f) for f in self.equal]
        if any(v is None or v == "" for v in values):
            return None  # a field it lacks: nothing to be equal to
        digest = hashlib.sha256(json.dumps(values, default=str).encode()).hexdigest()[:24]
        return f"{INHIBIT_SLOT}{self.id}#{digest}"


class ParentEntry(BaseModel):
    """A paged incident as registered in a slot: enough to name it in a held child's reason, and
    whether it matches both sides of the slot's inhibition rule (a two-sided target skips it)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    key: str
    incident_id: str
    service: str
    severity: str
    opened_at: str = Field(description="the incident's reported time (ISO)")
    two_sided: bool = Field(False, description="it matches both the source and the target of the slot's rule")


class Slot(BaseModel):
    """A slot a paged incident registers in, and whether it matches both sides of its rule there."""

    model_config = ConfigDict(frozen=True)

    slot: str
    two_sided: bool = False


class Candidate(BaseModel):
    """A slot a new incident looks in for its parent, and whether a sev1 may be held there."""

    model_config = ConfigDict(frozen=True)

    slot: str
    include_sev1: bool
    rule: str = Field(description="'dependencies' or the inhibition rule's id")
    two_sided: bool = Field(False, description="the incident matches both sides of the rule: a parent that does "
                                               "too may not hold it (Alertmanager's two-sided exclusion)")

    def may_be_held_by(self, parent: ParentEntry) -> bool:
        return not (self.two_sided and parent.two_sided)


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


def ancestors(dependencies: dict[str, list[str]], service: str) -> list[str]:
    """The services `service` depends on, directly or through others, nearest first (the graph
    is acyclic: the policy refuses a cycle)."""
    found: list[str] = []
    level = list(dependencies.get(service, []))
    while level:
        found += [s for s in level if s not in found]
        level = [p for s in level for p in dependencies.get(s, []) if p not in found]
    return found


Values = frozenset | None  # the values one field may take (None: any)


def field_values(conditions: list[Condition]) -> dict[str, Values]:
    """What each field named by `conditions` may be for an item meeting all of them (an empty
    set: no item can)."""
    allowed: dict[str, Values] = {}
    for condition in conditions:
        values = frozenset(map(repr, condition.values))
        known = allowed.get(condition.field)
        allowed[condition.field] = values if known is None else known & values
    return allowed


def _meet(a: Values, b: Values) -> Values:
    return b if a is None else a if b is None else a & b


@dataclass(frozen=True)
class HoldEdge:
    """One way the policy can hold an incident: what the held one matches, what its parent
    matches, and which fields must be equal on both."""

    name: str
    held: list[Condition]
    holder: list[Condition]
    equal: tuple[str, ...] = ()
    rule: str | None = None  # an inhibition rule's id (its own two sides exclude each other)


def hold_edges(services: dict[str, list[str]], inhibit: list[Inhibition]) -> list[HoldEdge]:
    edges = [HoldEdge(f"dependency {child} -> {parent}", [Condition(field="service", equals=child)],
                      [Condition(field="service", equals=parent)])
             for child in sorted(services) for parent in ancestors(services, child)]
    return edges + [HoldEdge(f"inhibition rule {rule.id!r}", list(rule.target), list(rule.source), tuple(rule.equal),
                             rule.id) for rule in inhibit]


def could_hold_each_other(first: HoldEdge, second: HoldEdge) -> bool:
    """Whether some incident A could be held under some B by `first` while B is held under A by
    `second`: A meets first's held side and second's holder side, B the other two, and every field
    either names as equal has a value both can take. One rule with itself never does: a target
    matching both of its sides is never held under a source that does too."""
    if first.rule is not None and first.rule == second.rule:
        return False
    a, b = field_values(first.held + second.holder), field_values(first.holder + second.held)
    if any(v == frozenset() for v in (*a.values(), *b.values())):
        return False
    equal = set(first.equal) | set(second.equal)
    return all(_meet(a.get(f), b.get(f)) != frozenset() for f in equal)


def find_hold_cycle(services: dict[str, list[str]], inhibit: list[Inhibition]) -> list[str] | None:
    """Two ways of holding (dependencies, inhibition rules) that could hold A under B and B under
    A, named, or None. (The services' own cycles are refused by `find_cycle`; at run time a held
    incident holds nothing, so no longer loop can form either.)"""
    edges = hold_edges(services, inhibit)
    for i, first in enumerate(edges):
        for second in edges[i:]:
            if could_hold_each_other(first, second):
                return [first.name, second.name]
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
    hold_minutes: Minutes = Field(HOLD_MINUTES, description="the ceiling of a hold: a child still held this long "
                                                           "after it was first held is decided and routed, its "
                                                           "parent still open or not")

    @model_validator(mode="after")
    def _acyclic(self) -> "Dependencies":
        cycle = find_cycle(self.services)
        if cycle:
            raise ValueError("dependencies.services: a cycle " + " -> ".join(cycle)
                             + " (a service cannot be held under itself)")
        pair = find_hold_cycle(self.services, self.inhibit)
        if pair:
            raise ValueError(f"dependencies: {pair[0]} and {pair[1]} together can hold an incident A under B and B "
                             "under A: narrow a rule's source or target (or its equal fields) so that they cannot")
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

    def ceiling_passed(self, held_since: str, now: datetime) -> bool:
        """Whether a hold that began `held_since` (ISO) has lasted `hold_minutes` by `now`."""
        return now >= datetime.fromisoformat(held_since) + timedelta(minutes=self.hold_minutes)

    def parent_slots(self, item: Item) -> list[Slot]:
        return parent_slots(self.services, self.inhibit, item)

    def candidates(self, item: Item) -> list[Candidate]:
        return candidates(self.services, self.include_sev1, self.inhibit, item)


def may_hold(severity: str | None, parent_severity: str | None, include_sev1: bool) -> bool:
    """Whether a child of `severity` may be held under a parent of `parent_severity`: never when it
    is more severe than its parent (its page would be lost), nor a sev1 unless the rule includes it."""
    if severity_rank(severity) < severity_rank(parent_severity):
        return False
    return severity_rank(severity) > 1 or include_sev1


def parent_slots(dependencies: dict[str, list[str]], inhibit: list[Inhibition], item: Item) -> list[Slot]:
    """The slots `item` registers in once it paged (it may be a parent there)."""
    service = getattr(item, "service", None)
    slots = []
    if service and any(service in parents for parents in dependencies.values()):
        slots.append(Slot(slot=SERVICE_SLOT + service))
    for rule in inhibit:
        slot = rule.slot(item) if rule.is_source(item) else None
        if slot is not None:
            slots.append(Slot(slot=slot, two_sided=rule.is_target(item)))
    return slots


def candidates(dependencies: dict[str, list[str]], include_sev1: bool, inhibit: list[Inhibition],
               item: Item) -> list[Candidate]:
    """The slots `item` looks in for a paged parent, in the policy's order: the services it
    depends on, nearest first (through services in between: a held checkout incident covers
    nothing, so search looks at orders-db itself), then the inhibition rules."""
    service = getattr(item, "service", None)
    found = [Candidate(slot=SERVICE_SLOT + parent, include_sev1=include_sev1, rule="dependencies")
             for parent in ancestors(dependencies, service or "")]
    for rule in inhibit:
        slot = rule.slot(item) if rule.is_target(item) else None
        if slot is not None:
            found.append(Candidate(slot=slot, include_sev1=rule.include_sev1, rule=rule.id,
                                   two_sided=rule.is_source(item)))
    return found


def held_reason(parent: ParentEntry) -> str:
    """The held child's `why`: its parent named, and when that opened."""
    return f"held under {parent.service} incident {parent.incident_id}, opened {hhmm(parent.opened_at)}"


def hhmm(at: str) -> str:
    try:
        return datetime.fromisoformat(at).strftime("%H:%M")
    except ValueError:
        return at
