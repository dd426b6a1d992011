"""What the intakes route an item with: the decision model, the routing workflow, the audit and
the head store."""

from __future__ import annotations

from typing import Protocol, Sequence

from decision_contract import Decision, DecisionResult

from ..head_versions import HeadPointer
from ..records import AuditRow, DecisionRecord


class Endpoint(Protocol):
    def decide(self, decisions: Sequence[Decision], *, deadline: float | None = None) -> dict[str, DecisionResult]: ...


class Workflow(Protocol):
    def start(self, record: DecisionRecord) -> tuple[str, bool]: ...

    def status(self, name: str) -> str | None: ...


class AuditWriter(Protocol):
    def write(self, row: AuditRow) -> bool: ...


class PointerSource(Protocol):
    """The head store as the routing functions read it: which head serves (and which shadows) a question."""

    bucket: str  # the head store's bucket: the only one a pointer may name

    def pointer(self, policy: str, question: str) -> HeadPointer | None: ...

    def shadow_pointer(self, policy: str, question: str) -> HeadPointer | None: ...

    def read(self, pointer: HeadPointer) -> bytes: ...
