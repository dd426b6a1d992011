"""What an answered item leaves behind, for the routing and review functions alike: the resolved
items kept for the console's similar items, the live precision's tallies and the shadow heads'."""

from __future__ import annotations

from typing import Protocol

from ..precision import CheckCounts
from ..shadow import ShadowCounts
from ..similar import ResolvedItem


class ResolvedItemStore(Protocol):
    """The resolved items kept for the console's similar items: one more kept, a policy's latest
    read (the latest `limit` of each kind, routed by the router and answered by a reviewer)."""

    def remember(self, resolved: ResolvedItem) -> None: ...

    def recent(self, policy: str, limit: int = ...) -> list[ResolvedItem]: ...


class PrecisionTallies(Protocol):
    """The live precision's tallies (domain/precision.py): a checked or corrected automatic answer
    counted for its question and its option (the question's counts after it), a tally read."""

    def add(self, policy: str, question: str, option: str, **counts: int) -> CheckCounts: ...

    def counts(self, policy: str, question: str, option: str | None = None) -> CheckCounts: ...

    def options(self, policy: str, question: str) -> dict[str, CheckCounts]: ...


class ShadowTallies(Protocol):
    """The shadow heads' tallies (domain/shadow.py): counts added to a shadow head's, by its
    policy, question and sha256 (names of `ShadowCounts`' fields), and its counts read."""

    def add(self, policy: str, question: str, sha256: str, **counts: int) -> None: ...

    def counts(self, policy: str, question: str, sha256: str) -> ShadowCounts: ...
