"""What the intakes route an item with: the decision model, the routing workflow, the direct
delivery of an automatic route, the audit and the head store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from decision_contract import Decision, DecisionResult

from ..head_versions import HeadPointer
from ..records import AuditRow, DecisionRecord


class Endpoint(Protocol):
    def decide(self, decisions: Sequence[Decision], *, deadline: float | None = None) -> dict[str, DecisionResult]: ...


class Workflow(Protocol):
    def start(self, record: DecisionRecord) -> tuple[str, bool]: ...

    def status(self, name: str) -> str | None: ...


@dataclass(frozen=True)
class Delivery:
    """What delivering an automatic route directly did: `delivered` False when the item was
    delivered before; `announce_error`, why its `Item Routed` event was not put (the route stands,
    as in the workflow)."""

    delivered: bool
    announce_error: str | None = None
    #: Why the claim could not be marked delivered (it stays pending until its deadline).
    mark_error: str | None = None
    #: The name's earlier route failed (its audit row says so, written by a failed execution):
    #: nothing was delivered under it, so the item is delivered under the next attempt's name.
    ended_unrouted: bool = False


class DirectRoutes(Protocol):
    """An automatic route that pages nobody, delivered without an execution: its audit row claimed,
    its team queue's message and its `Item Routed` event, as the workflow writes them."""

    def deliver(self, record: DecisionRecord, name: str, *, holds_until: float | None = None) -> Delivery: ...


class AuditWriter(Protocol):
    def write(self, row: AuditRow) -> bool: ...


class PointerSource(Protocol):
    """The head store as the routing functions read it: which head serves (and which shadows) a question."""

    bucket: str  # the head store's bucket: the only one a pointer may name

    def pointer(self, policy: str, question: str) -> HeadPointer | None: ...

    def shadow_pointer(self, policy: str, question: str) -> HeadPointer | None: ...

    def read(self, pointer: HeadPointer) -> bytes: ...
