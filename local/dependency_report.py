"""What the policy's dependencies did to a run (`make demo`): incidents opened against pages sent
(a decision that escalates; a review is not a page), the children held under a paged parent,
those decided when their hold ended (and how many of them paged), those that resolved while held,
and any page missing: a child held under a parent that resolved, neither routed then nor resolved
itself. Read from the incident intake's answers, kept on each line's `Outcome`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from local.outcomes import Outcome

#: The intake's outcomes of a line that opened an incident.
OPENED = ("held", "grouped", "flapping", "suppressed")


def dependency_of(result: dict[str, Any]) -> dict[str, Any] | None:
    """What one incident-intake result says of dependencies (None: nothing)."""
    if result.get("outcome") == "held":  # incidents by their keys: a parent's resolution names its key
        return {"held": result.get("key"), "under": result.get("held_under")}
    if result.get("outcome") == "resolved":
        released = result.get("released") or []
        found: dict[str, Any] = {}
        if released:
            found["released"] = [{"key": r.get("key"), "outcome": r.get("outcome"), "under": r.get("held_under"),
                                  "escalate": bool(r.get("escalate"))} for r in released]
        if result.get("resolved_held_under"):
            found["resolved_held"] = result.get("key")
        if result.get("key"):
            found["resolved_key"] = result["key"]
        return found or None
    return None


@dataclass
class DependencyFigures:
    opened: int = 0
    pages: int = 0
    held: int = 0
    decided_after_hold: int = 0
    paged_after_hold: int = 0
    resolved_while_held: int = 0
    missing: list[str] = field(default_factory=list)

    def line(self) -> str:
        missing = (f"{len(self.missing)} page(s) missing ({', '.join(self.missing)})" if self.missing
                   else "no page missing")
        return (f"Dependencies: {self.pages} page(s) sent for {self.opened} incident(s) opened; {self.held} child "
                f"incident(s) held under a paged parent; {self.decided_after_hold} decided when their hold ended "
                f"({self.paged_after_hold} paged); {self.resolved_while_held} resolved while held; {missing}.")


def dependency_figures(outcomes: list["Outcome"]) -> DependencyFigures | None:
    """The run's figures, None when nothing was held (the line is not worth printing then)."""
    figures = DependencyFigures()
    parent_of: dict[str, str | None] = {}  # held child -> the parent it waits under
    released: set[str] = set()
    resolved_held: set[str] = set()
    resolved_parents: set[str] = set()
    for outcome in outcomes:
        info = outcome.dependency or {}
        if outcome.execution_arn is not None and outcome.source_outcome is None:
            figures.opened += 1
            figures.pages += bool(outcome.record is not None and outcome.record.escalate)
        elif outcome.source_outcome in OPENED:
            figures.opened += 1
        if "held" in info:
            figures.held += 1
            parent_of[info["held"]] = info["under"]
        for child in info.get("released", []):
            if child["outcome"] == "routed":
                figures.pages += child["escalate"]
                figures.paged_after_hold += child["escalate"]
                figures.decided_after_hold += 1
                released.add(child["key"])
            elif child["outcome"] == "held":  # held again, under another open parent
                parent_of[child["key"]] = child["under"]
        if info.get("resolved_held"):
            figures.resolved_while_held += 1
            resolved_held.add(info["resolved_held"])
        if info.get("resolved_key"):
            resolved_parents.add(info["resolved_key"])
    if not figures.held:
        return None
    figures.missing = sorted(child for child, parent in parent_of.items()
                             if parent in resolved_parents and child not in released and child not in resolved_held)
    return figures
