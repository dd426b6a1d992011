"""The review side's ports: a reviewer's answer handed to its execution, the executions as the
review console and the review function read them, who signed a caller's proof and the proofs
already used, the review queue's answered messages and the review SLA's escalation marks."""

from __future__ import annotations

from typing import Any, Protocol

from ..callers import ProvenCaller
from ..records import DecisionRecord, ReviewAnswer


class TaskCompleter(Protocol):
    """The workflow's review task: a reviewer's answer handed to the execution that waits for it."""

    def complete(self, task_token: str, output: ReviewAnswer) -> None: ...


class Executions(Protocol):
    """The routing workflow's executions as the review console and the review function use them:
    a pending execution's record (its own input, the only copy they trust), any execution's status
    and input, and a correction started under its one name. A name without an execution (and, for
    `running_record`, an execution that waits for nothing) raises the adapter's ExecutionNotRunning."""

    def running_record(self, name: str) -> DecisionRecord: ...

    def review_task_token(self, name: str) -> str | None:
        """The task token of the latest review request the execution sent (None: it sent none)."""
        ...

    def describe(self, name: str) -> tuple[str, dict[str, Any]]: ...

    def start_named(self, name: str, record: DecisionRecord) -> bool: ...


class CallerIdentity(Protocol):
    """Who signed a review function caller's presigned GetCallerIdentity, made for the answer whose
    binding is `binding` (domain/callers.py); IdentityNotProven otherwise."""

    def identity(self, proof: str | None, *, binding: str) -> ProvenCaller: ...


class UsedProofs(Protocol):
    """The identity proofs already accepted: True the first time a proof is used while it is valid."""

    def first_use(self, proof_key: str, expires_at: int) -> bool: ...


class ReviewMessages(Protocol):
    """The review queue as a function that answered a review sees it: the answered message removed."""

    def remove(self, receipt_handle: str) -> None: ...


class EscalationMarks(Protocol):
    """The review SLA's escalations, one mark per execution: `claim` before the page is put (False:
    escalated already, or another sweep is putting it now), `sent` once it was."""

    def claim(self, execution_name: str) -> bool: ...

    def sent(self, execution_name: str) -> None: ...
