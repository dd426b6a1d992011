"""In-memory fakes of the ports the intake flows use (the ticket intake over SQS, the incident
intake over EventBridge), each behaving as its adapter does over AWS; `test_contract_intake.py`
runs the same behaviours against each fake and its adapter.

- `FakeOpenIncidents`: the open-incident store (`adapters/open_incidents.py` `OpenIncidents`),
  its rows kept as the DynamoDB items would be, as plain Python values.
- `FakeEndpoint`: the decision endpoint (`adapters/endpoint.py` `DecisionEndpoint`), answering
  from logits given per question (and optionally per item), or failing as the adapter fails.
- `RecordingWorkflow`: the routing workflow (`adapters/workflow.py` `WorkflowStarter`), keeping
  each execution's record, with Step Functions' rules for names started before.
- `FakeQueue`: an SQS queue (`adapters/queues.py` `Queue`): the `Sender` and `Waiting` ports.
- `FakeAlarmStates`: CloudWatch's word on alarms (`adapters/alarm_states.py` `AlarmStates`).
- `InMemoryIdempotency`: a Powertools idempotency persistence layer with the semantics of
  `DynamoDBPersistenceLayer` (`Wiring(idempotency_store=...)`).

A conditional write the adapter loses raises botocore's ConditionalCheckFailedException, which
the flows let through (the event is retried); the fakes raise `ConditionFailed`, a `ClientError`
with the same error code, so `except ClientError` and a check of the code treat both alike.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Mapping, Sequence

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS, DataRecord
from botocore.exceptions import ClientError

from decision_contract import Decision, DecisionResult, DecisionTiming, ModelInfo, softmax
from decision_router.adapters import expiry
from decision_router.adapters.direct_routes import (
    FAILED,
    LEASE_SECONDS,
    DeliveryInProgress,
    audit_row,
    entered_time,
    routed_detail,
    team_message,
)
from decision_router.adapters.endpoint import MIN_ATTEMPT_SECONDS
from decision_router.adapters.open_incidents import (
    BATCH_KEYS,
    EXECUTION_POINTER,
    FILED,
    FILED_COUNT,
    LOOKUP_ROW,
    MAX_RACES,
    OPEN_MARK,
    RETENTION_DAYS,
    instant_of,
    open_incident_of,
    open_mark,
)
from decision_router.adapters.queues import HOLD_SECONDS, MAX_ATTRIBUTE_CHARS
from decision_router.adapters.workflow import ENDED_UNROUTED, MAX_ATTEMPTS, execution_input
from decision_router.domain.dependencies import ParentEntry
from decision_router.domain.failures import EndpointFailure
from decision_router.domain.linking import MAX_DESCRIPTION, MAX_FILED, MAX_TITLE, OpenIncident, bounded, filing_keys
from decision_router.domain.ports.incidents import AlarmState, Claim, GroupRow, IncidentRow, Joined
from decision_router.domain.ports.routing import Delivery
from decision_router.domain.records import DecisionRecord, execution_name
from decision_router.sources.cloudwatch import parse_alarm_arn
from local.template import DEFAULT_ACCOUNT_ID

__all__ = [
    "ConditionFailed", "FakeAlarmStates", "FakeEndpoint", "FakeOpenIncidents", "FakeQueue", "InMemoryIdempotency",
    "RecordingWorkflow", "UnansweredDecision",
]


class ConditionFailed(ClientError):
    """A conditional write that did not hold: what DynamoDB answers with ConditionalCheckFailedException."""

    CODE = "ConditionalCheckFailedException"

    def __init__(self, operation: str):
        super().__init__({"Error": {"Code": self.CODE, "Message": "The conditional request failed"}}, operation)


def _validation(message: str, operation: str) -> ClientError:
    """DynamoDB's refusal of an update expression that cannot apply to the item."""
    return ClientError({"Error": {"Code": "ValidationException", "Message": message}}, operation)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _plain(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as the adapter reads an item: a string set as a sorted list."""
    return {name: sorted(value) if isinstance(value, set) else copy.deepcopy(value) for name, value in row.items()}


# --------------------------------------------------------------------------- the open-incident store
class FakeOpenIncidents:
    """The open-incident store (port `OpenIncidentStore`) in memory, with the adapter's conditional
    writes. `rows` holds one dict per key, as the DynamoDB item would be: its attribute names, a
    string set as a `set`, a number as an `int`, a list as a `list`; a test may read it, or put a
    row there as an older writer would have left it. An update with no condition writes a row that
    is not there, as DynamoDB's UpdateItem does. An open row carries its shard's mark
    (`open_mark`); the open-incident index is every row with a mark, whatever its value, by key."""

    def __init__(self, *, retention_days: int = RETENTION_DAYS) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.retention_days = retention_days
        #: Requests as the adapter would make them, by method (the link index's reads and writes).
        self.calls: Counter[str] = Counter()

    def _open_rows(self) -> list[dict[str, Any]]:
        """The rows of the open-incident index, by key (as the adapter's Query of every shard)."""
        return [row for _, row in sorted(self.rows.items()) if OPEN_MARK in row]

    def _row(self, key: str) -> dict[str, Any]:
        """The row of `key` for an unconditional update (made when missing, as UpdateItem does)."""
        return self.rows.setdefault(key, {"incident_key": key})

    def get(self, key: str) -> IncidentRow | None:
        row = self.rows.get(key)
        return IncidentRow.model_validate(_plain(row)) if row is not None else None

    def claim(self, key: str, delivery: str, *, incident_id: str, source: str, opens: list[str] | None = None,
              service: str | None = None, reported_at: str | None = None, title: str | None = None,
              description: str | None = None) -> Claim:
        for _ in range(MAX_RACES):
            existing = self.rows.get(key)
            # A resolved incident reopens (a flap), but not by a late copy of the delivery that opened it.
            if existing is None or (existing.get("status") == "resolved" and existing.get("opened_by") != delivery):
                item: dict[str, Any] = {"incident_key": key, "status": "open", OPEN_MARK: open_mark(key), "opened_by": delivery,
                                        "deliveries": {delivery}, "routed": False, "updates": 0,
                                        "incident_id": incident_id, "source": source, "opened_at": _now()}
                if opens:
                    item["opens"] = list(opens)
                if service and reported_at:
                    item["service"], item["reported_at"] = service, reported_at
                    for name, text, limit in (("title", title, MAX_TITLE), ("description", description, MAX_DESCRIPTION)):
                        kept = bounded(text, limit)
                        if kept:
                            item[name] = kept
                    item["filed_under"] = filing_keys(service, title, description)
                self.rows[key] = item  # a put replaces the whole item
                return "new"
            row = self.get(key)
            if row is None:
                continue
            if row.opened_by == delivery:
                return "retry" if row.status == "open" and not row.routed else "duplicate"
            if row.status == "open":
                return "update" if self.touch(key, delivery) else "duplicate"
        raise RuntimeError(f"open-incident store: {key!r} kept changing under {MAX_RACES} claims; the event is retried")

    # the link index: a row per lookup key (`LOOKUP_ROW` + key), each incident filed an attribute
    # `FILED` + incident key -> reported time, and their count `FILED_COUNT`
    def file(self, key: str, lookup_keys: Sequence[str], reported_at: str) -> None:
        self.calls["file"] += 1
        for lookup in lookup_keys:
            row = self.rows.get(LOOKUP_ROW + lookup, {})
            if FILED + key not in row and row.get(FILED_COUNT, 0) < MAX_FILED:
                row = self._row(LOOKUP_ROW + lookup)
                row[FILED + key] = reported_at
                row[FILED_COUNT] = row.get(FILED_COUNT, 0) + 1

    def unfile(self, key: str, lookup_keys: Sequence[str]) -> None:
        self.calls["unfile"] += 1
        for lookup in lookup_keys:
            row = self.rows.get(LOOKUP_ROW + lookup, {})
            if row.pop(FILED + key, None) is not None:
                row[FILED_COUNT] -= 1

    def filed_under(self, lookup_keys: Sequence[str]) -> dict[str, dict[str, datetime]]:
        """As the adapter's BatchGetItem of the lookup rows (`calls` counts one per BATCH_KEYS keys)."""
        unique = list(dict.fromkeys(lookup_keys))
        self.calls["filed_under"] += math.ceil(len(unique) / BATCH_KEYS)
        found = {}
        for lookup in unique:
            row = self.rows.get(LOOKUP_ROW + lookup)
            if row is not None:
                filed = {name[len(FILED):]: instant_of(text) for name, text in row.items() if name.startswith(FILED)}
                found[lookup] = {key: at for key, at in filed.items() if at is not None}
        return found

    def open_incidents(self, keys: Sequence[str]) -> list[OpenIncident]:
        """As the adapter's BatchGetItem of the incidents' rows (`calls` counts one per BATCH_KEYS keys;
        `read` counts the rows read)."""
        unique = list(dict.fromkeys(keys))
        self.calls["open_incidents"] += math.ceil(len(unique) / BATCH_KEYS)
        self.calls["rows_read"] += len(unique)
        rows = [self.rows[key] for key in sorted(unique) if key in self.rows]
        incidents = [open_incident_of(_plain(row)) for row in rows if row.get("status") == "open"]
        return [incident for incident in incidents if incident is not None]

    def open_now(self) -> list[OpenIncident]:
        incidents = []
        for row in self._open_rows():
            if "service" not in row:
                continue  # a row with no service kept
            incident = open_incident_of(row)
            if incident is not None:
                incidents.append(incident)
        return incidents

    def touch(self, key: str, delivery: str) -> bool:
        row = self.rows.get(key)
        if row is None or row.get("status") != "open" or delivery in row.get("deliveries", set()):
            return False
        if not isinstance(row.get("updates"), int):
            raise _validation("The provided expression refers to an attribute that does not exist in the item",
                              "UpdateItem")
        row["deliveries"] = row.get("deliveries", set()) | {delivery}
        row.update(updates=row["updates"] + 1, updated_at=_now(), last_delivery=delivery, **{OPEN_MARK: open_mark(key)})
        return True

    def routed(self, key: str, delivery: str, execution_name: str, *, group: str | None = None) -> None:
        row = self.rows.get(key)
        if row is None or row.get("opened_by") != delivery:
            raise ConditionFailed("UpdateItem")
        row.update(routed=True, execution_name=execution_name)
        if group:
            row["group"] = group

    def add_member(self, key: str, member: str) -> None:
        row = self._row(key)
        row["members"] = row.get("members", set()) | {member}

    def resolve(self, key: str, delivery: str, reason: str) -> IncidentRow | None:
        row = self.rows.get(key)
        if row is None or row.get("status") != "open":
            return None
        was = IncidentRow.model_validate(_plain(row))
        row.update(status="resolved", resolved_at=_now(), resolved_by=delivery, resolution=reason[:1000],
                   expires_at=expiry(self.retention_days))
        row.pop(OPEN_MARK, None)
        return was

    def held(self, key: str, delivery: str, why: str, **fields: str) -> None:
        row = self.rows.get(key)
        if row is None or row.get("opened_by") != delivery:
            raise ConditionFailed("UpdateItem")
        row.update(routed=True, held=why, **fields)

    def _expired_hold(self, row: Mapping[str, Any], now: str) -> bool:
        return (row.get("status") == "open" and isinstance(row.get("held_until"), str) and row["held_until"] <= now
                and "execution_name" not in row)

    def release(self, key: str, now: str) -> bool:
        row = self.rows.get(key)
        if row is None or not self._expired_hold(row, now):
            return False
        row["released_at"] = now
        return True

    def expired_holds(self, now: str) -> list[IncidentRow]:
        # The index's rows alone, as the adapter's Query reads them.
        return [IncidentRow.model_validate(_plain(row)) for row in self._open_rows() if self._expired_hold(row, now)]

    def released(self, key: str, execution_name: str) -> None:
        self._row(key).update(execution_name=execution_name,
                              held="held by a maintenance window until it ended; then routed")

    # ------------------------------------------------------------------ groups (grouping)
    def join_group(self, group_key: str, member: str, *, at: str, until: str, incident_id: str,
                   severity: str) -> Joined:
        for _ in range(MAX_RACES):
            row = self.rows.get(group_key)
            if (row is None or row.get("status") == "resolved"
                    or (isinstance(row.get("until"), str) and row["until"] <= at)):
                self.rows[group_key] = {"incident_key": group_key, "status": "open", "leader": member,
                                        "leader_incident_id": incident_id, "members": {member},
                                        "open_members": {member}, "opened_at": at, "until": until,
                                        "leader_severity": severity}
                return Joined(incident_key=group_key, status="open", leader=member, leader_incident_id=incident_id,
                              members=[member], open_members=[member], leader_severity=severity, is_leader=True)
            if not (row.get("status") == "open" and isinstance(row.get("until"), str) and row["until"] > at):
                continue  # it ended meanwhile: open a new one
            row["members"] = row.get("members", set()) | {member}
            row["open_members"] = row.get("open_members", set()) | {member}
            group = GroupRow.model_validate(_plain(row))
            return Joined(**group.model_dump(), is_leader=group.leader == member)
        raise RuntimeError(f"open-incident store: group {group_key!r} kept changing; the event is retried")

    def lead_group(self, group_key: str, member: str, *, incident_id: str, severity: str) -> None:
        row = self._row(group_key)
        row.update(leader=member, leader_incident_id=incident_id, leader_severity=severity)
        row.pop("execution_name", None)

    def group_routed(self, group_key: str, execution_name: str) -> None:
        self._row(group_key)["execution_name"] = execution_name

    def leave_group(self, group_key: str, member: str, delivery: str) -> GroupRow | None:
        row = self.rows.get(group_key)
        if row is None:
            return None
        still = row.get("open_members", set()) - {member}
        if still:
            row["open_members"] = still
        else:
            row.pop("open_members", None)  # DynamoDB keeps no empty set: the attribute goes
        group = GroupRow.model_validate(_plain(row))
        if not group.open_members and group.status == "open":
            row.update(status="resolved", resolved_at=_now(), resolved_by=delivery, expires_at=expiry(self.retention_days))
            return GroupRow.model_validate(_plain(row))
        return group

    # ------------------------------------------------------------------ dependencies
    def parents(self, slot: str) -> list[ParentEntry]:
        entries = self.rows.get(slot, {}).get("parents", {})
        return sorted((ParentEntry.model_validate({**value, "key": key}) for key, value in entries.items()),
                      key=lambda e: (e.opened_at, e.key))

    def register_parent(self, slot: str, entry: ParentEntry) -> None:
        self._row(slot).setdefault("parents", {})[entry.key] = entry.model_dump(exclude={"key"})
        row = self._row(entry.key)
        row["parent_slots"] = row.get("parent_slots", set()) | {slot}

    def unregister_parent(self, slot: str, key: str) -> None:
        self.rows.get(slot, {}).get("parents", {}).pop(key, None)

    def paged(self, key: str, execution_name: str) -> bool:
        row = self.rows.get(key)
        if row is None or row.get("status") != "open":
            return False
        row["paged_by"] = execution_name
        return True

    def link_child(self, parent_key: str, child_key: str) -> bool:
        row = self.rows.get(parent_key)
        if row is None or row.get("status") != "open" or "paged_by" not in row:
            return False
        row["held_children"] = row.get("held_children", set()) | {child_key}
        return True

    def unhold(self, key: str, delivery: str) -> None:
        row = self.rows.get(key)
        if row is None or row.get("opened_by") != delivery:
            raise ConditionFailed("UpdateItem")
        row["routed"] = False
        for name in ("held", "held_under", "held_item", "parent_severity"):
            row.pop(name, None)

    def point(self, execution_name: str, key: str) -> None:
        self.rows[EXECUTION_POINTER + execution_name] = {"incident_key": EXECUTION_POINTER + execution_name,
                                                         "points_to": key, "expires_at": expiry(self.retention_days)}

    def pointed(self, execution_name: str) -> str | None:
        return self.rows.get(EXECUTION_POINTER + execution_name, {}).get("points_to")

    def held_open(self) -> list[IncidentRow]:
        return [IncidentRow.model_validate(_plain(row)) for row in self._open_rows()
                if "held_under" in row and "execution_name" not in row and "group" not in row]

# --------------------------------------------------------------------------- the decision endpoint
#: The model the fake endpoint reports unless told another (as tests/functions/conftest.py's make_result).
FAKE_MODEL = ModelInfo(file="test.gguf", bytes=1, sha256="0" * 64, context_size=2048, threads=1, gpu_layers=0,
                       llama_cpp_python_version="test")
#: The adapter's failure kinds that it retries until its attempts are spent.
RETRIED_KINDS = frozenset({"retryable_model_error", "throttled", "unavailable", "timeout", "connection"})
#: The adapter's attempts per decide (DecisionEndpoint's default, Settings.endpoint_max_attempts).
ADAPTER_ATTEMPTS = 4


class UnansweredDecision(LookupError):
    """The test gave the fake endpoint no answer for a decision it was asked (a mistake in the
    test, not an endpoint fault: it is never turned into a review)."""


@dataclass(frozen=True)
class _Answer:
    logits: tuple[float, ...]
    where: Mapping[str, Any] | None
    mass: float | None
    hidden_state: tuple[float, ...] | None


class FakeEndpoint:
    """The decision endpoint (port `Endpoint`): each decision answered from the logits given for
    its question id, as the container answers (the letters' softmax at the decision's temperature,
    the hidden state only when the decision asks for it), in a dict keyed by decision id. `where`
    gives an item its own answer: the state fields a decision must carry for it (the state holds
    the evidence, not the item's id). Every call with decisions is kept in `requests`.

    `fail` makes the next calls raise the EndpointFailure the adapter raises once its retries are
    spent: a kind it retries (RETRIED_KINDS) after ADAPTER_ATTEMPTS attempts, any other after one.
    A decision that asks for the hidden state (its head reads it) gets its answer's `hidden_state`,
    else the endpoint's `hidden_state`; with neither, the fake raises UnansweredDecision. A head
    that reads the model applies only to a result of its model: give `model` and `prompt_version`
    (the head's `model_sha256`, `hidden_size`, `prompt_version`) to have it read; on another model
    it is skipped and the letters decide, as in the account."""

    def __init__(self, answers: Mapping[str, Sequence[float]] | None = None, *, mass: float = 0.9,
                 model: ModelInfo = FAKE_MODEL, prompt_version: str = "test",
                 hidden_state: Sequence[float] | None = None):
        self.mass, self.model, self.prompt_version = mass, model, prompt_version
        self._check_hidden("every question", hidden_state)
        self.hidden_state = tuple(hidden_state) if hidden_state is not None else None
        self._answers: dict[str, list[_Answer]] = {}
        self._failures: list[Callable[[], EndpointFailure]] = []
        self._fail_always: Callable[[], EndpointFailure] | None = None
        self.requests: list[list[Decision]] = []
        for question, logits in (answers or {}).items():
            self.answer(question, logits)

    @property
    def asked(self) -> list[Decision]:
        """Every decision asked, in order."""
        return [decision for request in self.requests for decision in request]

    def answer(self, question: str, logits: Sequence[float], *, where: Mapping[str, Any] | None = None,
               mass: float | None = None, hidden_state: Sequence[float] | None = None) -> FakeEndpoint:
        """Answer `question` with these option logits (for decisions whose state has the fields in
        `where`, when given: the latest matching answer wins, before any without `where`);
        `hidden_state`: for a decision that asks for it, of the model's hidden_size values."""
        if not logits or not all(math.isfinite(z) for z in logits):
            raise ValueError(f"answer for {question!r}: give one finite logit per option")
        self._check_hidden(repr(question), hidden_state)
        self._answers.setdefault(question, []).append(_Answer(
            tuple(logits), dict(where) if where is not None else None, mass,
            tuple(hidden_state) if hidden_state is not None else None))
        return self

    def _check_hidden(self, what: str, hidden_state: Sequence[float] | None) -> None:
        size = self.model.hidden_size
        if hidden_state is not None and size is not None and len(hidden_state) != size:
            raise ValueError(f"hidden state for {what}: {len(hidden_state)} values; the model's hidden_size is {size}")

    def fail(self, kind: str, message: str = "the fake endpoint fails", *, status_code: int | None = None,
             times: int | None = None, retry_after: float | None = None) -> FakeEndpoint:
        """Raise the adapter's EndpointFailure of `kind` on the next `times` calls (every call
        while None, until `recover`); `status_code` as the adapter would report it."""
        retried = kind in RETRIED_KINDS

        def failure() -> EndpointFailure:  # each raise its own, as the adapter's are
            return EndpointFailure(kind, message, status_code=status_code, attempts=ADAPTER_ATTEMPTS if retried else 1,
                                   retryable=retried, retry_after=retry_after if retried else None)

        if times is None:
            self._fail_always = failure
        else:
            self._failures += [failure] * times
        return self

    def recover(self) -> None:
        self._failures.clear()
        self._fail_always = None

    def decide(self, decisions: Sequence[Decision], *, deadline: float | None = None) -> dict[str, DecisionResult]:
        if not decisions:
            return {}
        if deadline is not None and deadline - time.monotonic() < MIN_ATTEMPT_SECONDS:
            raise EndpointFailure("timeout", f"less than {MIN_ATTEMPT_SECONDS:g} s left before the deadline; "
                                  "the endpoint was not called", attempts=0)
        self.requests.append(list(decisions))
        failure = self._failures.pop(0) if self._failures else self._fail_always
        if failure is not None:
            raise failure()
        return {decision.id: self._result(decision) for decision in decisions}

    def _given(self, decision: Decision) -> _Answer:
        given = self._answers.get(decision.id, [])
        state = decision.state if isinstance(decision.state, dict) else {}
        for answer in reversed(given):
            if answer.where is not None and all(state.get(k) == v for k, v in answer.where.items()):
                return answer
        for answer in reversed(given):
            if answer.where is None:
                return answer
        raise UnansweredDecision(f"the fake endpoint was asked {decision.id!r} with no answer given for it "
                                 f"(state {json.dumps(decision.state)[:200]}): call answer({decision.id!r}, logits)")

    def _result(self, decision: Decision) -> DecisionResult:
        answer = self._given(decision)
        if len(answer.logits) != len(decision.options):
            raise UnansweredDecision(f"answer for {decision.id!r} has {len(answer.logits)} logits; the decision has "
                                     f"{len(decision.options)} options ({', '.join(decision.option_ids)})")
        hidden = None
        if decision.return_hidden_state:
            given = answer.hidden_state if answer.hidden_state is not None else self.hidden_state
            if given is None:
                raise UnansweredDecision(
                    f"decision {decision.id!r} asks for the hidden state (its head reads it): give "
                    f"answer({decision.id!r}, logits, hidden_state=[...]) or FakeEndpoint(hidden_state=[...]) "
                    "with the head's hidden_size values")
            hidden = list(given)
        logits = list(answer.logits)
        prompt = json.dumps({"state": decision.state, "question": decision.question, "options": decision.option_ids},
                            sort_keys=True)
        return DecisionResult(
            id=decision.id, option_ids=decision.option_ids, probabilities=softmax(logits, decision.temperature),
            option_logits=logits, temperature=decision.temperature, input_tokens=100,
            allowed_token_mass=self.mass if answer.mass is None else answer.mass,
            prompt_sha256=hashlib.sha256(prompt.encode()).hexdigest(), prompt_version=self.prompt_version,
            model=self.model, timing=DecisionTiming(tokenize_seconds=0.0, prefill_seconds=0.0, total_seconds=0.0),
            hidden_state=hidden)


# --------------------------------------------------------------------------- the routing workflow
@dataclass
class Execution:
    """One execution of the routing workflow: its name, the record it was started with, its status."""

    name: str
    record: DecisionRecord
    input: str
    status: str = "RUNNING"


class RecordingWorkflow:
    """The routing workflow (port `Workflow`), keeping each execution it starts. As Step Functions
    does for a standard workflow, a start under a name already used starts nothing: with the same
    input while that execution runs, it is answered as a start (the adapter says started); with
    another input, or once it ended, it is refused, and the adapter says already routed, unless it
    FAILED, TIMED_OUT or was ABORTED: then the item starts under the next attempt's name (`-r2`).
    Executions stay RUNNING until `end` says otherwise (nothing runs)."""

    def __init__(self, *, audit_retention_days: int = 0) -> None:
        self.executions: dict[str, Execution] = {}
        self.audit_retention_days = audit_retention_days

    @property
    def records(self) -> dict[str, DecisionRecord]:
        """The record each execution was started with, by execution name, in the order started."""
        return {name: execution.record for name, execution in self.executions.items()}

    def start(self, record: DecisionRecord) -> tuple[str, bool]:
        given = execution_input(record, self.audit_retention_days)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            name = execution_name(record.item_kind, record.item_id, record.item_key, attempt)
            existing = self.executions.get(name)
            if existing is None:
                self.executions[name] = Execution(name, DecisionRecord.model_validate_json(given), given)
                return name, True
            if existing.input == given and existing.status == "RUNNING":
                return name, True  # Step Functions answers the same start with the running execution
            if existing.status not in ENDED_UNROUTED:
                return name, False
        raise RuntimeError(f"{record.item_kind} {record.item_id!r}: {MAX_ATTEMPTS} executions of this item "
                           "ended without routing it; see the workflow DLQ")

    def status(self, name: str) -> str | None:
        execution = self.executions.get(name)
        return execution.status if execution is not None else None

    def end(self, name: str, status: str) -> None:
        """The execution ended: SUCCEEDED, FAILED, TIMED_OUT or ABORTED."""
        if status not in {"SUCCEEDED", *ENDED_UNROUTED}:
            raise ValueError(f"an execution ends SUCCEEDED, FAILED, TIMED_OUT or ABORTED, not {status!r}")
        self.executions[name].status = status


# --------------------------------------------------------------------------- the direct routes
class FakeDirectRoutes:
    """The direct delivery of an automatic route (port `DirectRoutes`), as its adapter does it: the
    audit row claimed in `audit` (a `FakeAuditTrail`: the row's string columns, the pending mark
    beside them in `pending`), the team message onto the fake queue of its URL (`queue_at`), the
    `Item Routed` event's detail in `events`. `clock` is the adapter's; `fail_send`, an exception
    the next send raises (after the claim): an `Exception` hands the claim back, as the adapter
    does; a crash (a `BaseException`, a timeout) leaves it pending until its deadline."""

    def __init__(self, audit: Any, queue_at: Callable[[str], "FakeQueue"], *, retention_days: int = 0,
                 clock: Callable[[], float] = time.time) -> None:
        self.audit, self.queue_at, self.retention_days, self.clock = audit, queue_at, retention_days, clock
        self.pending: dict[tuple[str, str], float] = {}
        self.events: list[dict[str, Any]] = []
        self.records: dict[str, DecisionRecord] = {}
        self.fail_send: BaseException | None = None

    def deliver(self, record: DecisionRecord, name: str, *, holds_until: float | None = None) -> Delivery:
        now = self.clock()
        until = holds_until if holds_until is not None else now + LEASE_SECONDS
        key = (record.item_id, name)
        if key in self.audit.rows:
            held = self.pending.get(key)
            if held is None:
                return Delivery(False, ended_unrouted=self.audit.rows[key].get("outcome") == FAILED)
            if held > now:
                raise DeliveryInProgress(f"{record.item_kind} {record.item_id}: delivery claimed by another invocation")
        else:
            self.audit.rows[key] = audit_row(record, name, entered_time(now)).columns()
            if self.retention_days:
                self.audit.expires[key] = expiry(self.retention_days, datetime.fromisoformat(record.decided_at))
        self.pending[key] = until
        if self.fail_send is not None:
            failure, self.fail_send = self.fail_send, None
            if isinstance(failure, Exception):
                self.pending[key] = 0.0
            raise failure
        self.queue_at(record.destination.queue_url if record.destination else "").send(
            json.dumps(team_message(record, name), ensure_ascii=False))
        self.events.append(routed_detail(record, name))
        self.records[name] = record
        del self.pending[key]
        return Delivery(True)


# --------------------------------------------------------------------------- queues
@dataclass
class _Message:
    message_id: str
    body: str
    attributes: dict[str, str]
    visible_at: float = 0.0
    receipt_handles: set[str] = field(default_factory=set)
    receives: int = 0


class FakeQueue:
    """An SQS queue (ports `Sender` and `Waiting`, adapter `Queue`). `send` keeps the body and its
    attributes as the adapter sends them (empty values left out, each cut to MAX_ATTRIBUTE_CHARS);
    `sent` lists every message sent, as (body, attributes). `messages` receives as the adapter does
    (each message once, hidden HOLD_SECONDS), `hide`, `release` and `delete` act on a received
    message by its receipt handle, and a handle this queue never gave out is refused as SQS refuses
    it (ReceiptHandleIsInvalid). `received(body)` puts a message on the queue and receives it, as
    Lambda's event source does before the ticket intake sees it: its ReceiptHandle is the one the
    intake hides. Every `hide` is kept in `hidden`, as (receipt handle, seconds)."""

    def __init__(self, url: str = "https://sqs.us-east-1.amazonaws.com/123456789012/fake",
                 clock: Callable[[], float] = time.monotonic):
        self.url, self.clock = url, clock
        self._messages: list[_Message] = []
        self.sent: list[tuple[str, dict[str, str]]] = []
        self.hidden: list[tuple[str, int]] = []

    def send(self, body: str, attributes: dict[str, str] | None = None) -> None:
        kept = {name: value[:MAX_ATTRIBUTE_CHARS] for name, value in (attributes or {}).items() if value}
        self.sent.append((body, dict(kept)))
        self._messages.append(_Message(str(uuid.uuid4()), body, kept))

    def _receive(self, message: _Message, hold: int) -> dict:
        handle = f"{message.message_id}#{uuid.uuid4()}"
        message.receipt_handles.add(handle)
        message.receives += 1
        message.visible_at = self.clock() + hold
        received = {"MessageId": message.message_id, "ReceiptHandle": handle, "Body": message.body,
                    "MD5OfBody": hashlib.md5(message.body.encode()).hexdigest()}  # SQS's digest of the body
        if message.attributes:
            received["MessageAttributes"] = {name: {"DataType": "String", "StringValue": value}
                                             for name, value in message.attributes.items()}
        return received

    def messages(self, limit: int) -> Iterator[dict]:
        """Up to `limit` visible messages, each received once, then hidden HOLD_SECONDS."""
        count = 0
        for message in list(self._messages):
            if count >= limit:
                return
            if message.visible_at <= self.clock():
                count += 1
                yield self._receive(message, HOLD_SECONDS)

    def received(self, body: str, attributes: dict[str, str] | None = None, *, hold: int = 1800) -> dict:
        """`body` put on the queue and received as Lambda's event source receives it (hidden for
        the ticket queue's visibility timeout, `hold`): the message, with its ReceiptHandle."""
        self.send(body, attributes)
        return self._receive(self._messages[-1], hold)

    def _holding(self, receipt_handle: str) -> _Message:
        for message in self._messages:
            if receipt_handle in message.receipt_handles:
                return message
        raise ClientError({"Error": {"Code": "ReceiptHandleIsInvalid",
                                     "Message": f"The input receipt handle {receipt_handle!r} is not valid."}},
                          "ChangeMessageVisibility")

    def hide(self, receipt_handle: str, seconds: int) -> None:
        self.hidden.append((receipt_handle, seconds))
        self._holding(receipt_handle).visible_at = self.clock() + seconds

    def release(self, message: dict) -> None:
        self.hide(message["ReceiptHandle"], 0)

    def delete(self, message: dict) -> None:
        found = self._holding(message["ReceiptHandle"])
        self._messages.remove(found)

    def receive_count(self, message_id: str) -> int:
        """How often the message was received (SQS's ApproximateReceiveCount)."""
        return next(message.receives for message in self._messages if message.message_id == message_id)

    @property
    def waiting(self) -> list[tuple[str, dict[str, str]]]:
        """The messages still on the queue (received or not), as (body, attributes)."""
        return [(message.body, dict(message.attributes)) for message in self._messages]


# --------------------------------------------------------------------------- CloudWatch alarms
class FakeAlarmStates:
    """What CloudWatch says of an alarm now (port `AlarmStateReader`): the state given for its ARN
    (`states`, or `set`), "missing" for an alarm never given or an ARN that names no alarm, and
    "elsewhere" for an alarm of another account than `account` (it cannot be asked about). As
    CloudWatch, an alarm is known by its region and name. Every ARN asked is kept in `asked`."""

    def __init__(self, states: Mapping[str, AlarmState] | None = None, *, account: str = DEFAULT_ACCOUNT_ID):
        self.account = account
        self._states: dict[tuple[str, str], AlarmState] = {}
        self.asked: list[str] = []
        for arn, state in (states or {}).items():
            self.set(arn, state)

    def set(self, arn: str, state: AlarmState) -> None:
        parsed = parse_alarm_arn(arn)
        if parsed is None or state in ("missing", "elsewhere"):
            raise ValueError(f"set an alarm's state (OK, ALARM, INSUFFICIENT_DATA) by its ARN, not {state!r} of {arn!r}")
        region, _, name = parsed
        self._states[region, name] = state

    def state_of(self, arn: str) -> AlarmState:
        self.asked.append(arn)
        parsed = parse_alarm_arn(arn)
        if parsed is None:
            return "missing"
        region, account, name = parsed
        if account != self.account:
            return "elsewhere"
        return self._states.get((region, name), "missing")


# --------------------------------------------------------------------------- the idempotency store
class InMemoryIdempotency(BasePersistenceLayer):
    """Powertools' idempotency persistence in memory, as `DynamoDBPersistenceLayer` keeps it: a put
    succeeds only where there is no record, the record has expired, or it is INPROGRESS past its
    in-progress expiry (an invocation that died); otherwise IdempotencyItemAlreadyExistsError with
    the record there (as DynamoDB's ReturnValuesOnConditionCheckFailure hands it over). `items`
    holds the records as the table's items (id, expiration, status, in_progress_expiration, data,
    validation)."""

    def __init__(self) -> None:
        super().__init__()
        self.items: dict[str, dict[str, Any]] = {}

    @staticmethod
    def _record(item: Mapping[str, Any]) -> DataRecord:
        return DataRecord(idempotency_key=item["id"], status=item["status"], expiry_timestamp=item["expiration"],
                          in_progress_expiry_timestamp=item.get("in_progress_expiration"),
                          response_data=item.get("data"), payload_hash=item.get("validation"))

    def _get_record(self, idempotency_key: str) -> DataRecord:
        item = self.items.get(idempotency_key)
        if item is None:
            raise IdempotencyItemNotFoundError
        return self._record(item)

    def _put_record(self, data_record: DataRecord) -> None:
        item: dict[str, Any] = {"id": data_record.idempotency_key, "expiration": data_record.expiry_timestamp,
                                "status": data_record.status}
        if data_record.in_progress_expiry_timestamp is not None:
            item["in_progress_expiration"] = data_record.in_progress_expiry_timestamp
        if self.payload_validation_enabled and data_record.payload_hash:
            item["validation"] = data_record.payload_hash
        now = datetime.now()
        old = self.items.get(data_record.idempotency_key)
        if old is not None and not (
                old["expiration"] < int(now.timestamp())
                or (old["status"] == STATUS_CONSTANTS["INPROGRESS"] and old.get("in_progress_expiration") is not None
                    and old["in_progress_expiration"] < int(now.timestamp() * 1000))):
            old_record = self._record(old)
            self._validate_payload(data_payload=data_record, stored_data_record=old_record)  # IdempotencyValidationError
            self._save_to_cache(data_record=old_record)
            raise IdempotencyItemAlreadyExistsError(old_data_record=old_record)
        self.items[data_record.idempotency_key] = item  # a put replaces the whole item

    def _update_record(self, data_record: DataRecord) -> None:
        item = self.items.setdefault(data_record.idempotency_key, {"id": data_record.idempotency_key})
        item.update(data=data_record.response_data, expiration=data_record.expiry_timestamp, status=data_record.status)
        if self.payload_validation_enabled:
            item["validation"] = data_record.payload_hash

    def _delete_record(self, data_record: DataRecord) -> None:
        self.items.pop(data_record.idempotency_key, None)
