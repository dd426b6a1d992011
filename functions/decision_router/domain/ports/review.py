"""The review side's ports: a reviewer's answer handed to its execution, the executions as the
review console reads them, the pending-review index, who signed a caller's proof and the proofs
already used, and the review SLA's escalation marks."""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from pydantic import BaseModel, ConfigDict

from ..callers import ProvenCaller
from ..records import DecisionRecord, ReviewAnswer


class TaskCompleter(Protocol):
    """The workflow's review task: a reviewer's answer handed to the execution that waits for it."""

    def complete(self, task_token: str, output: ReviewAnswer) -> None: ...


class Executions(Protocol):
    """The routing workflow's executions as the review console uses them: any execution's status
    and input (where an answered item went), and a correction started under its one name. A name
    without an execution raises the adapter's ExecutionNotRunning. (A waiting review is read from
    the pending-review index, `PendingReviews`, never from its execution.)"""

    def describe(self, name: str) -> tuple[str, dict[str, Any]]: ...

    def start_named(self, name: str, record: DecisionRecord) -> bool: ...


class CallerIdentity(Protocol):
    """Who signed a review function caller's presigned GetCallerIdentity, made for the answer whose
    binding is `binding` (domain/callers.py); IdentityNotProven otherwise."""

    def identity(self, proof: str | None, *, binding: str) -> ProvenCaller: ...


class UsedProofs(Protocol):
    """The identity proofs already accepted: True the first time a proof is used while it is valid."""

    def first_use(self, proof_key: str, expires_at: int) -> bool: ...


class PendingReviewRow(BaseModel):
    """One waiting review as the pending-review index keeps it: the workflow's task token, the
    execution that waits, when the review was requested and when it is due, its lane (the
    console's partition: policy, SLA class, shard), the listing's summary (JSON, what the console
    lists without the record) and the decision record itself."""

    model_config = ConfigDict(frozen=True)

    execution_name: str
    task_token: str
    requested_at: str
    due_at: str
    lane: str
    summary: str
    record: DecisionRecord


class ListedReview(BaseModel):
    """A waiting review as the index's lane order hands it over: no token, no record."""

    model_config = ConfigDict(frozen=True)

    execution_name: str
    requested_at: str
    due_at: str
    summary: str


class PendingReviews(Protocol):
    """The pending-review index: one row per waiting review, put by its one writer (`put`, False
    when the execution has a row already), read by execution name (`get`), listed lane by lane in
    due order (`listing`: at most `limit` of each lane, one Query each), and removed once the wait
    is over (`remove`: False when there was no row, or it holds another token)."""

    def put(self, row: PendingReviewRow) -> bool: ...

    def get(self, execution_name: str) -> PendingReviewRow | None: ...

    def listing(self, lanes: Sequence[str], limit: int) -> list[ListedReview]: ...

    def remove(self, execution_name: str, task_token: str | None = None) -> bool: ...


class EscalationMarks(Protocol):
    """The review SLA's escalations, one mark per execution: `claim_page` before the page is put (False:
    escalated already, or another sweep is putting it now), `sent` once it was."""

    def claim_page(self, execution_name: str) -> bool: ...

    def sent(self, execution_name: str) -> None: ...
