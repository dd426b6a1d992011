"""The ports: what the routing code needs from the world, as protocols, and the values they hand
over. The adapters (`decision_router.adapters`) implement them over AWS; the intakes and the router
are wired with them (each function's handler builds its own, once per execution environment), and
tests wire the same adapters over moto.

- `Endpoint`: the decision model's signals for a batch of decisions (SageMaker).
- `Workflow`: start the routing workflow for a decision record, and read an execution's status.
- `OpenIncidentStore`: which incidents are open, correlated by their source's key; the groups.
- `AlarmStateReader`: what CloudWatch says of an alarm now (only CloudWatch can say it is OK).
- `Sender`: a queue: the ticket queue, a dead-letter queue (what can never be routed, with the
  reason in its attributes).
- `Waiting`: a received ticket hidden on its queue until the endpoint is up again.
- `Bus`: an event on the decision bus (an incident webhook forwards its alert there).
- `EscalationMarks`: which pending reviews the review SLA's sweep has escalated (once each).
- `DeliveryRecord`, `Claimed`: the webhook deliveries already taken (a replay is refused).
- `AuditWriter`: one audit row (what became of an item, and why).
- `TaskCompleter`: a reviewer's answer handed to the execution waiting for it.
- `Executions`: the routing workflow's executions as the review side reads them (a pending
  execution's own record and the task token its review waits on, any execution's status and
  input) and a correction started by name.
- `CallerIdentity`, `UsedProofs`: who signed a review function caller's proof (STS), and the
  proofs already accepted (each answers once).
- `ReviewMessages`: the review queue as a function that answered a review sees it.
- `ResolvedItemStore`: the resolved items kept for the console's similar items.
- `PrecisionTallies`: the live precision's tallies of checked and corrected automatic answers.
- `PointerSource`: which head serves (or shadows) a question, and its bytes (the head store).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, Field

from decision_contract import Decision, DecisionResult

from .callers import ProvenCaller
from .dependencies import ParentEntry
from .head_versions import HeadPointer
from .linking import OpenIncident
from .precision import CheckCounts
from .records import AuditRow, DecisionRecord, ReviewAnswer
from .similar import ResolvedItem


class Endpoint(Protocol):
    def decide(self, decisions: Sequence[Decision], *, deadline: float | None = None) -> dict[str, DecisionResult]: ...


class Workflow(Protocol):
    def start(self, record: DecisionRecord) -> tuple[str, bool]: ...

    def status(self, name: str) -> str | None: ...


#: new: this delivery opens the incident (route it); retry: this delivery opened it but its
#: routing did not finish (route it again; the execution name makes that safe); update: another
#: delivery of an open incident (route nothing); duplicate: this delivery was seen already.
Claim = Literal["new", "retry", "update", "duplicate"]
#: What CloudWatch says of an alarm now; "missing": no such alarm; "elsewhere": an alarm of
#: another account or region, which cannot be asked about.
AlarmState = Literal["OK", "ALARM", "INSUFFICIENT_DATA", "missing", "elsewhere"]


class IncidentRow(BaseModel):
    """An incident's row, as the incident intake reads it (its other columns are the store's own)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    incident_key: str
    status: Literal["open", "resolved"]
    opened_by: str | None = None
    incident_id: str | None = None
    routed: bool = False
    execution_name: str | None = Field(None, description="The execution that routed it.")
    group: str | None = Field(None, description="The group it leads or was held in (grouping).")
    opens: list[str] = Field(default_factory=list, description="Its recent openings (flapping).")
    held_item: str | None = Field(None, description="The incident a maintenance window or a parent holds, as JSON.")
    resolved_by: str | None = Field(None, description="The delivery that resolved it.")
    held_under: str | None = Field(None, description="The parent incident's key it is held under (dependencies).")
    held_children: list[str] = Field(default_factory=list, description="The incidents held under it (dependencies).")
    parent_slots: list[str] = Field(default_factory=list, description="The slots it is registered in as a parent.")
    paged_by: str | None = Field(None, description="The execution that paged for it: only then does it hold "
                                                   "its dependants (dependencies).")
    held_at: str | None = Field(None, description="When a parent first held it (the hold's ceiling counts from then).")
    parent_severity: str | None = Field(None, description="The severity of the parent it is held under.")

    @property
    def held_by_parent(self) -> bool:
        """Held under a parent now: neither routed since (an execution) nor grouped when released."""
        return self.held_under is not None and self.execution_name is None and self.group is None


class GroupRow(BaseModel):
    """A group's row (`group#<rule>#<digest>`): its leader, its members and those still open."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    incident_key: str
    status: Literal["open", "resolved"]
    leader: str
    leader_incident_id: str
    members: list[str] = Field(default_factory=list)
    open_members: list[str] = Field(default_factory=list)
    execution_name: str | None = Field(None, description="The leader's execution (its review closes with the group).")
    leader_severity: str | None = Field(None, description="None on a row written before it was kept.")


class Joined(GroupRow):
    """The group an incident joined (or opened), as it is now; `is_leader`: whether it leads it."""

    is_leader: bool


class OpenIncidentStore(Protocol):
    def get(self, key: str) -> IncidentRow | None: ...

    def claim(self, key: str, delivery: str, *, incident_id: str, source: str, opens: list[str] | None = None,
              service: str | None = None, reported_at: str | None = None, title: str | None = None,
              description: str | None = None) -> Claim: ...

    def open_now(self) -> list[OpenIncident]: ...

    def touch(self, key: str, delivery: str) -> bool: ...

    def routed(self, key: str, delivery: str, execution_name: str, *, group: str | None = None) -> None: ...

    def add_member(self, key: str, member: str) -> None: ...

    def resolve(self, key: str, delivery: str, reason: str) -> IncidentRow | None: ...

    def held(self, key: str, delivery: str, why: str, **fields: str) -> None: ...

    def release(self, key: str, now: str) -> bool: ...

    def expired_holds(self, now: str) -> list[IncidentRow]: ...

    def released(self, key: str, execution_name: str) -> None: ...

    def join_group(self, group_key: str, member: str, *, at: str, until: str, incident_id: str,
                   severity: str) -> Joined: ...

    def lead_group(self, group_key: str, member: str, *, incident_id: str, severity: str) -> None: ...

    def group_routed(self, group_key: str, execution_name: str) -> None: ...

    def leave_group(self, group_key: str, member: str, delivery: str) -> GroupRow | None: ...

    # dependencies (domain/dependencies.py): covered incidents registered in slots, held children linked
    def parents(self, slot: str) -> list[ParentEntry]: ...

    def register_parent(self, slot: str, entry: ParentEntry) -> None: ...

    def unregister_parent(self, slot: str, key: str) -> None: ...

    def paged(self, key: str, execution_name: str) -> bool: ...

    def link_child(self, parent_key: str, child_key: str) -> bool: ...

    def unhold(self, key: str, delivery: str) -> None: ...

    def held_open(self) -> list[IncidentRow]: ...

    def point(self, execution_name: str, key: str) -> None: ...

    def pointed(self, execution_name: str) -> str | None: ...


class AlarmStateReader(Protocol):
    def state_of(self, arn: str) -> AlarmState: ...


class Sender(Protocol):
    """A queue (SQS): the ticket queue, a dead-letter queue (the reason in the attributes)."""

    def send(self, body: str, attributes: dict[str, str] | None = None) -> None: ...


class Waiting(Protocol):
    """The ticket queue as its consumer sees it: a received message hidden for a while (the
    endpoint is waking from zero: the ticket is decided again later, not sent to review)."""

    def hide(self, receipt_handle: str, seconds: int) -> None: ...


class Bus(Protocol):
    def put(self, source: str, detail_type: str, detail: dict) -> None: ...


class EscalationMarks(Protocol):
    """The review SLA's escalations, one mark per execution: `claim` before the page is put (False:
    escalated already, or another sweep is putting it now), `sent` once it was."""

    def claim(self, execution_name: str) -> bool: ...

    def sent(self, execution_name: str) -> None: ...


class Claimed(Protocol):
    """A webhook delivery claimed in the delivery record."""

    @property
    def state(self) -> str: ...  # new | done | pending

    @property
    def token(self) -> str: ...

    @property
    def retry_after(self) -> int: ...


class DeliveryRecord(Protocol):
    """The webhook deliveries already taken, by their keys (a replay is refused)."""

    def claim(self, keys: list[str], source: str) -> Claimed: ...

    def done(self, keys: list[str], token: str, source: str) -> None: ...

    def forget(self, keys: list[str], token: str) -> None: ...


class AuditWriter(Protocol):
    def write(self, row: AuditRow) -> bool: ...


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


class PointerSource(Protocol):
    """The head store as the routing functions read it: which head serves (and which shadows) a question."""

    bucket: str  # the head store's bucket: the only one a pointer may name

    def pointer(self, policy: str, question: str) -> HeadPointer | None: ...

    def shadow_pointer(self, policy: str, question: str) -> HeadPointer | None: ...

    def read(self, pointer: HeadPointer) -> bytes: ...
