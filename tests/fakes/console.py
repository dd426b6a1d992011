"""In-memory fakes of what the webhook flow, the review console and the review function work
with: each a plain class that behaves as its adapter does over AWS, hands over the adapter's own
values (`Claim`, `PendingReviewRow`, `ListedReview`, `AuditRow`, `Unreadable`, `ResolvedItem`)
and raises the adapter's own errors. `test_contract_console.py` runs the same behaviours against
each fake and its adapter over moto (the review tasks: over botocore's Stubber). The head store's
fake, which the console's tests read pointers from too: tests/fakes/head_store.py.

Beside the port's methods, each fake has what a test needs to play the other side: the workflow
ending a review's task, a row an older release wrote, a clock to move, and what was sent, to look
at. Module constants of the adapters are read when used, so a test that patches one patches the
fake too.
"""

from __future__ import annotations

import json
import time
import uuid
from bisect import bisect_right
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Mapping, Sequence

from botocore.exceptions import ClientError
from pydantic import ValidationError

from decision_router.adapters import deliveries as deliveries_adapter
from decision_router.adapters import escalations as escalations_adapter
from decision_router.adapters import expiry
from decision_router.adapters import pending_reviews as pending_reviews_adapter
from decision_router.adapters import review as review_adapter
from decision_router.adapters import used_proofs as used_proofs_adapter
from decision_router.adapters.deliveries import LEASE_SECONDS, RECORD_SECONDS, DeliveryClaims
from decision_router.adapters.review import ReviewTaskGone, Unreadable
from decision_router.adapters.shards import every_shard
from decision_router.adapters.similar_items import RECENT, partition, partitions, resolved_key
from decision_router.adapters.workflow import ExecutionNotRunning, execution_input
from decision_router.domain.leases import Held, Placement
from decision_router.domain.ports.review import ListedReview, PendingReviewRow
from decision_router.domain.precision import CheckCounts
from decision_router.domain.records import AUDIT_SHARDS, AuditRow, DecisionRecord, ReviewAnswer
from decision_router.domain.similar import ResolvedItem
from decision_router.validation import describe_errors

#: Epoch seconds now (`time.time` by default); a test passes its own to move time.
Clock = Callable[[], float]


def _client_error(code: str, message: str, operation: str) -> ClientError:
    """The error botocore raises for this AWS error answer, as a plain ClientError: a real client
    raises its modelled subclass (`sqs.exceptions.ReceiptHandleIsInvalid`), which no fake has, so
    code that must tell the errors apart catches ClientError and reads the code."""
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


# ------------------------------------------------------------------------------ webhook deliveries
class DictLeaseRows:
    """A table of claims under leases as a dictionary (`rows` by key, numbers as int) with the
    table's conditional writes: a claim placed where no live row is (none, or one whose
    `expires_column` is before the new row's `written_column`), taken over only while its
    `lease_until` is the one read. `held` reads a row as the lease rule does."""

    rows: dict[str, dict[str, Any]]
    clock: Clock
    expires_column = "expires_at"
    written_column = "received_at"

    def held(self, row: dict[str, Any]) -> Held:
        raise NotImplementedError

    def now(self) -> int:
        return int(self.clock())

    def _place(self, key: str, row: dict[str, Any]) -> Placement:
        found = self.rows.get(key)
        if found is None or _before(found.get(self.expires_column), row[self.written_column]):
            self.rows[key] = row
            return "placed"
        return self.held(found)

    def _take_over(self, key: str, theirs: Held, row: dict[str, Any]) -> bool:
        found = self.rows.get(key)
        if found is None or found.get("lease_until") is None or found["lease_until"] != theirs.lease_until:
            return False
        self.rows[key] = row
        return True


class FakeDeliveries(DictLeaseRows, DeliveryClaims):
    """The webhook deliveries taken (port `DeliveryRecord`, adapter `adapters.deliveries.Deliveries`):
    the adapter's claims over a dictionary with the table's conditional writes.

    `rows`: the table, by delivery key, each row its columns as the adapter writes them (numbers
    as int): `source`, `received_at`, `expires_at`, `state` (pending | done), `owner` (the claim's
    token) and, while pending, `lease_until`. A test may put a row of an older release there (no
    `state`: it counts as handed on). Time is `clock()`, read where the adapter reads `time.time()`."""

    def __init__(self, clock: Clock = time.time, record_seconds: int = RECORD_SECONDS,
                 lease_seconds: int = LEASE_SECONDS):
        self.clock, self.record_seconds, self.lease_seconds = clock, record_seconds, lease_seconds
        self.rows = {}

    def held(self, row: dict[str, Any]) -> Held:
        return deliveries_adapter.held(row)

    def _finish(self, key: str, token: str, row: dict[str, Any]) -> None:
        if self.rows.get(key, {}).get("owner") == token:
            self.rows[key] = row

    def _release(self, key: str, token: str) -> None:
        if self.rows.get(key, {}).get("owner") == token:
            del self.rows[key]


def _before(value: Any, now: int) -> bool:
    return value is not None and int(value) < now


# ------------------------------------------------------------------------------ the decision bus
class FakeBus:
    """The decision bus (port `Bus`, adapter `adapters.queues.EventBus`): `events`, each event put
    as (source, detail_type, detail) in order, the detail as it crosses the wire (JSON text read
    back: a detail JSON cannot carry raises TypeError, as the adapter's `json.dumps` does)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict]] = []
        self.refusing = 0  # the next puts EventBridge refuses (the adapter raises RuntimeError)

    def put(self, source: str, detail_type: str, detail: dict) -> None:
        text = json.dumps(detail)
        if self.refusing:
            self.refusing -= 1
            raise RuntimeError("EventBridge refused the event: InternalFailure: (the fake refuses it)")
        self.events.append((source, detail_type, json.loads(text)))


# ------------------------------------------------------------------------------ review SLA escalations
class FakeSlaEscalations(DictLeaseRows, escalations_adapter.EscalationClaims):
    """The review SLA's escalation marks (port `EscalationMarks`, adapter
    `adapters.escalations.SlaEscalations`): the adapter's marks over a dictionary with the table's
    conditional writes. `rows`: the table's rows of this use, by key (`mark_key(execution_name)`),
    each its columns as the adapter writes them (numbers as int): `state` (claimed | sent),
    `marked_at`, `expiration` and, while claimed, `lease_until`. Time is `clock()`, read where the
    adapter reads `time.time()`."""

    expires_column, written_column = "expiration", "marked_at"

    def __init__(self, *, review_timeout_seconds: int, clock: Clock = time.time) -> None:
        self.clock = clock
        self.keep_seconds = review_timeout_seconds + escalations_adapter.MARGIN_SECONDS
        self.rows = {}

    def held(self, row: dict[str, Any]) -> Held:
        return escalations_adapter.held(row)

    def _put(self, key: str, row: dict[str, Any]) -> None:
        self.rows[key] = row


# ------------------------------------------------------------------------------ the pending-review index
class FakePendingReviews:
    """The pending-review index (adapter `adapters.pending_reviews.PendingReviewTable`): `rows` by
    execution name, each with the shard of its lane the adapter would write it under. `put` only
    where none is; `listing` takes the first `limit` by due time of each shard of each lane, as
    one Query each would, and merges them in due order; `remove` only a row there (holding the
    token, when one is given)."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, PendingReviewRow]] = {}  # execution name -> (sharded lane, row)

    def put(self, row: PendingReviewRow) -> bool:
        if row.execution_name in self.rows:
            return False
        shard = pending_reviews_adapter.shard_of(row.execution_name, pending_reviews_adapter.LANE_SHARDS)
        self.rows[row.execution_name] = (pending_reviews_adapter.sharded(row.lane, shard), row)
        return True

    def get(self, execution_name: str) -> PendingReviewRow | None:
        found = self.rows.get(execution_name)
        return found[1] if found else None

    def listing(self, lanes: Sequence[str], limit: int) -> list[ListedReview]:
        keys = {key for base in lanes for key in pending_reviews_adapter.every_shard(base, pending_reviews_adapter.LANE_SHARDS)}
        listed: list[ListedReview] = []
        for key in keys:
            in_lane = sorted((row for lane, row in self.rows.values() if lane == key), key=lambda row: row.due_at)
            listed += [ListedReview(execution_name=row.execution_name, requested_at=row.requested_at,
                                    due_at=row.due_at, summary=row.summary) for row in in_lane[:limit]]
        return sorted(listed, key=lambda row: (row.due_at, row.execution_name))

    def remove(self, execution_name: str, task_token: str | None = None) -> bool:
        found = self.rows.get(execution_name)
        if found is None or (task_token is not None and found[1].task_token != task_token):
            return False
        del self.rows[execution_name]
        return True


def entered_time(at: float) -> str:
    """A time as Step Functions writes `$$.State.EnteredTime` (ISO 8601, milliseconds, Z)."""
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ------------------------------------------------------------------------------ the audit table
class FakeAuditTrail:
    """The audit table (port `AuditWriter`, and the reads of `adapters.review.AuditTrail`).

    `rows`: by (item_id, execution_name), the table's key, each its string columns. `write` is the
    conditional put of the adapter and of the workflow's WriteAuditRecord (never over an existing
    row); `put_columns` a row as any writer put it, however it reads back (an `Unreadable` where it
    does not fit `AuditRow`; `row` raises on it, as the adapter's does)."""

    def __init__(self, *, retention_days: int = 0, unsharded_index: str | None = None) -> None:
        self.rows: dict[tuple[str, str], dict[str, str]] = {}
        #: The unsharded index of recent rows, read where the stack keeps it (the adapter's).
        self.unsharded_index = unsharded_index
        #: Each written row's expiry (the TTL attribute, a number: no string column), by key.
        self.expires: dict[tuple[str, str], int] = {}
        self.retention_days = retention_days

    def write(self, row: AuditRow) -> bool:
        """False when the row's key exists already (a retry's), which is left as it was."""
        key = (row.item_id, row.execution_name)
        if key in self.rows:
            return False
        self.rows[key] = row.columns()
        if self.retention_days:
            self.expires[key] = expiry(self.retention_days)
        return True

    def put_columns(self, columns: Mapping[str, str]) -> None:
        self.rows[(columns["item_id"], columns["execution_name"])] = dict(columns)

    def recent(self, outcome: str, limit: int = 50) -> list[AuditRow | Unreadable]:
        """The latest `limit` rows of this outcome, newest first, ties by key: a row in one of the
        outcome's shards as the sharded index projects it (its keys and RECENT_COLUMNS), a row
        without a shard whole (the unsharded index, where its outcome is, if it is read)."""
        trail = review_adapter.AuditTrail
        shards = set(every_shard(outcome, AUDIT_SHARDS))
        projected = {"item_id", "execution_name", "outcome_shard", "audited_at", *trail.RECENT_COLUMNS}
        listed = []
        for row in self.rows.values():
            if "audited_at" not in row:
                continue  # in no index
            if row.get("outcome_shard") in shards:
                listed.append({name: value for name, value in row.items() if name in projected})
            elif self.unsharded_index and row.get("outcome") == outcome:
                listed.append(row)
        newest = sorted(listed, key=lambda r: (r["audited_at"], r["item_id"], r["execution_name"]), reverse=True)
        return [_read(r) for r in newest[:max(limit, 0)]]

    def of_item(self, item_id: str) -> list[AuditRow | Unreadable]:
        """Every row of one item, in execution-name order."""
        return [_read(self.rows[key]) for key in sorted(k for k in self.rows if k[0] == item_id)]

    def all(self) -> list[AuditRow | Unreadable]:
        return [_read(r) for r in self.rows.values()]

    def linked_to(self, incident_id: str) -> list[AuditRow]:
        """The readable rows whose linked incident is `incident_id` exactly, oldest first."""
        rows = []
        for columns in sorted(self.rows.values(), key=lambda r: r.get("audited_at", "")):
            if columns.get("linked_incident_id") != incident_id:
                continue  # not in the adapter's sparse link index under that id
            row = _read(columns)
            if isinstance(row, Unreadable):
                continue
            try:
                linked = row.link()
            except ValueError:
                continue
            if linked is not None and linked.incident_id == incident_id:
                rows.append(row)
        return rows

    def row(self, item_id: str, execution_name: str) -> AuditRow | None:
        found = self.rows.get((item_id, execution_name))
        return AuditRow.model_validate(found) if found else None


def _read(columns: Mapping[str, str]) -> AuditRow | Unreadable:
    try:
        return AuditRow.model_validate(dict(columns))
    except ValidationError as error:
        return Unreadable(columns.get("item_id", "?"), columns.get("execution_name", "?"),
                          "; ".join(describe_errors(error)))


# ------------------------------------------------------------------------------ labelled examples
class FakeLabelledExamples:
    """The labelled-examples table (adapter `adapters.review.LabelledExamples`): `put` is the
    workflow's StoreLabelledExample (one row per policy and item key, a later review of the item
    replacing it), every column a string.

    Rows are read in key order (policy, then item), as moto scans them; DynamoDB scans in an
    order of its own, so nothing may count on it. A page ends the walk (no next key) as soon as
    nothing is left after it, as moto answers; DynamoDB may hand over one more key, whose page is empty."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict[str, str]] = {}

    def put(self, row: Mapping[str, str]) -> None:
        self.rows[(row["policy_name"], row["item_key"])] = dict(row)

    def scan(self) -> Iterator[dict[str, str]]:
        for key in sorted(self.rows):
            yield dict(self.rows[key])

    def page(self, limit: int, after: dict[str, str] | None = None) -> tuple[list[dict[str, str]], dict[str, str] | None]:
        keys = sorted(self.rows)
        start = bisect_right(keys, (after["policy_name"], after["item_key"])) if after else 0
        taken = keys[start:start + limit]
        more = start + limit < len(keys)
        last = {"policy_name": taken[-1][0], "item_key": taken[-1][1]} if taken and more else None
        return [dict(self.rows[k]) for k in taken], last

    def of_policy(self, policy_name: str) -> Iterator[dict[str, str]]:
        for key in sorted(k for k in self.rows if k[0] == policy_name):
            yield dict(self.rows[key])

    def since(self, policy_name: str, labelled_after: str) -> Iterator[dict[str, str]]:
        """The shard index's rows of the policy labelled after `labelled_after` (a row without a
        `label_shard` of the policy is not in the index), shard by shard, oldest first in each."""
        indexed = [row for row in self.rows.values()
                   if row.get("label_shard", "").rpartition("#")[0] == policy_name and "labelled_at" in row]
        for row in sorted(indexed, key=lambda r: (r["label_shard"], r["labelled_at"])):
            if row["labelled_at"] > labelled_after:
                yield dict(row)


# ------------------------------------------------------------------------------ review tasks
class FakeReviewTasks:
    """The workflow's review tasks (port `TaskCompleter`, adapter `adapters.review.ReviewTasks`).

    A task token must be `issue`d first (the workflow's RequestReview waiting on it); it takes one
    answer (`complete`) or one close (`close_resolved`), recorded in `answered` and `closed`.
    Anything else raises the adapter's `ReviewTaskGone`, with the code Step Functions gives: a
    token never issued `TaskDoesNotExist`, a task answered, closed or timed out `TaskTimedOut`."""

    def __init__(self) -> None:
        self.waiting: set[str] = set()
        self.answered: dict[str, ReviewAnswer] = {}
        self.closed: dict[str, str] = {}
        self.timed_out: set[str] = set()

    def issue(self, task_token: str | None = None) -> str:
        """A task waiting for its answer under this token (a new one when none is given)."""
        token = task_token or uuid.uuid4().hex
        self.waiting.add(token)
        return token

    def time_out(self, task_token: str) -> None:
        """The task's review timeout ran out (the workflow escalates it): it takes no answer now."""
        self.waiting.discard(task_token)
        self.timed_out.add(task_token)

    def _gone(self, task_token: str) -> str | None:
        if task_token in self.waiting:
            return None
        ended = task_token in self.answered or task_token in self.closed or task_token in self.timed_out
        return "TaskTimedOut" if ended else "TaskDoesNotExist"

    def complete(self, task_token: str, output: ReviewAnswer) -> None:
        code = self._gone(task_token)
        if code:
            raise ReviewTaskGone(f"the review can no longer be completed ({code}): it timed out, "
                                 "was already completed, or the token is wrong")
        self.waiting.discard(task_token)
        self.answered[task_token] = output

    def close_resolved(self, task_token: str, reason: str) -> None:
        code = self._gone(task_token)
        if code:
            raise ReviewTaskGone(f"the review can no longer be closed ({code})")
        self.waiting.discard(task_token)
        self.closed[task_token] = reason[:32_000]  # the cause as SendTaskFailure takes it


# ------------------------------------------------------------------------------ the routing workflow
class ConsoleWorkflow:
    """The routing workflow as the review console and the review function use it (port
    `Executions`, adapter `adapters.workflow.WorkflowStarter`): `executions`, by name, each its
    status and input (JSON text, as Step Functions keeps it). Nothing runs: a started execution is
    RUNNING until the test `end`s it."""

    def __init__(self, *, audit_retention_days: int = 0) -> None:
        self.executions: dict[str, tuple[str, str]] = {}
        self.audit_retention_days = audit_retention_days

    def start_named(self, name: str, record: DecisionRecord) -> bool:
        """Start one execution of exactly this name; False when one exists (whatever its status)."""
        if name in self.executions:
            return False
        self.executions[name] = ("RUNNING", execution_input(record, self.audit_retention_days))
        return True

    def end(self, name: str, status: str = "SUCCEEDED") -> None:
        """The execution ended (SUCCEEDED, FAILED, TIMED_OUT or ABORTED): Step Functions' part."""
        self.executions[name] = (status, self.executions[name][1])

    def describe(self, name: str) -> tuple[str, dict[str, Any]]:
        if name not in self.executions:
            raise ExecutionNotRunning(f"no routing execution named {name!r}")
        status, given = self.executions[name]
        return status, json.loads(given)


# ------------------------------------------------------------------------------ identity proofs used
class FakeUsedProofs:
    """The identity proofs the review function accepted (port `UsedProofs`, adapter
    `adapters.used_proofs.UsedProofs`). `rows`: by proof key, each `used_at` and `expiration`
    (epoch seconds, as the adapter writes them). Time is `clock()`, read where the adapter reads
    `time.time()`."""

    def __init__(self, clock: Clock = time.time) -> None:
        self.clock = clock
        self.rows: dict[str, dict[str, int]] = {}

    def first_use(self, proof_key: str, expires_at: int) -> bool:
        now = int(self.clock())
        row = self.rows.get(proof_key)
        if row is not None and not _before(row.get("expiration"), now):
            return False
        self.rows[proof_key] = {"used_at": now, "expiration": max(expires_at, now) + used_proofs_adapter.MARGIN_SECONDS}
        return True


# ------------------------------------------------------------------------------ resolved items
class FakeResolvedItems:
    """The resolved-items store (port `ResolvedItemStore`, adapter `adapters.similar_items.ResolvedItems`):
    `rows` by (partition, resolved_key), the keys the adapter writes (the policy's shard of the item
    id, `<policy>#<n>`; `<kind>#<resolved_at>#<item_id>`: the same item resolved at the same moment
    by the same kind is one row). A test may put a row under the policy's name alone, as a stack
    kept it before sharding: it is read too."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], ResolvedItem] = {}

    def remember(self, resolved: ResolvedItem) -> None:
        self.rows[(partition(resolved), resolved_key(resolved))] = resolved

    def recent(self, policy: str, limit: int = RECENT) -> list[ResolvedItem]:
        """The policy's latest `limit` resolved items of each kind over all its partitions, newest first."""
        kept: list[ResolvedItem] = []
        read = set(partitions(policy))
        for kind in ("router#", "reviewer#"):
            keys = sorted((k for k in self.rows if k[0] in read and k[1].startswith(kind)), key=lambda k: k[1], reverse=True)
            kept.extend(self.rows[k] for k in keys[:limit])
        return sorted(kept, key=lambda row: (row.resolved_at, row.item_id), reverse=True)


# ------------------------------------------------------------------------------ precision tallies
class FakePrecisionTally:
    """The live precision's tallies (port `PrecisionTallies`, adapter
    `adapters.precision_tally.PrecisionTally`): `rows`, by (policy, question, option or None for
    the question's row), each a `CheckCounts`."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str | None], CheckCounts] = {}

    def add(self, policy: str, question: str, option: str, **counts: int) -> CheckCounts:
        unknown = set(counts) - set(CheckCounts.model_fields)
        if unknown or not counts:
            raise ValueError(f"precision counts {sorted(counts)}: name one or more of {sorted(CheckCounts.model_fields)}")
        for key in ((policy, question, option), (policy, question, None)):
            row = self.rows.get(key, CheckCounts()).model_dump()
            self.rows[key] = CheckCounts(**{name: row[name] + int(counts.get(name, 0)) for name in row})
        return self.rows[(policy, question, None)]

    def counts(self, policy: str, question: str, option: str | None = None) -> CheckCounts:
        return self.rows.get((policy, question, option), CheckCounts())

    def options(self, policy: str, question: str) -> dict[str, CheckCounts]:
        return {option: counts for (p, q, option), counts in self.rows.items()
                if (p, q) == (policy, question) and option is not None}
