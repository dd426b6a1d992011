"""In-memory fakes of the ports the intake flows use (the ticket intake over SQS, the incident
intake over EventBridge), each behaving as its adapter does over AWS; `test_contract_intake.py`
runs the same behaviours against each fake and its adapter.

- `FakeOpenIncidents`: the open-incident store (`adapters/open_incidents.py` `OpenIncidents`),
  one store per concern over its rows as plain Python values (tests/fakes/open_incidents.py).
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

import hashlib
import json
import math
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterator, Mapping, Sequence

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS, DataRecord
from botocore.exceptions import ClientError

from decision_contract import Decision, DecisionResult, DecisionTiming, ModelInfo, softmax
from decision_router.adapters.alarm_states import alarm_state
from decision_router.adapters.direct_routes import DirectDelivery, routed_detail
from decision_router.adapters.direct_routes import held as direct_held
from decision_router.adapters.endpoint import MIN_ATTEMPT_SECONDS
from decision_router.adapters.queues import HOLD_SECONDS, MAX_ATTRIBUTE_CHARS
from decision_router.adapters.workflow import ENDED_UNROUTED, MAX_ATTEMPTS, execution_input
from decision_router.domain.failures import EndpointFailure
from decision_router.domain.leases import Held, Placement
from decision_router.domain.ports.incidents import AlarmState
from decision_router.domain.ports.routing import Delivery
from decision_router.domain.records import AuditRow, DecisionRecord, execution_name
from decision_router.sources.cloudwatch import parse_alarm_arn
from local.template import DEFAULT_ACCOUNT_ID
from tests.fakes.open_incidents import ConditionFailed, FakeOpenIncidents

__all__ = [
    "ConditionFailed", "FakeAlarmStates", "FakeEndpoint", "FakeOpenIncidents", "FakeQueue", "InMemoryIdempotency",
    "RecordingWorkflow", "UnansweredDecision",
]


# --------------------------------------------------------------------------- the decision endpoint
#: The model the fake endpoint reports unless told another (as tests/functions/conftest.py's make_result).
FAKE_MODEL = ModelInfo(file="test.gguf", bytes=1, sha256="0" * 64, context_size=2048, threads=1, gpu_layers=0,
                       llama_cpp_python_version="test")
#: The adapter's failure kinds that it retries until its attempts are spent.
RETRIED_KINDS = frozenset({"retryable_model_error", "throttled", "unavailable", "timeout", "connection"})
#: The adapter's attempts per decide (DecisionEndpoint's default, Settings.endpoint_max_attempts).
ADAPTER_ATTEMPTS = 4


#: The width of the fake's own hidden state for a model that names no hidden_size.
DEFAULT_HIDDEN_SIZE = 8


def fake_prompt(decision: Decision) -> str:
    """What the fakes take for a decision's prompt: its state, question and options."""
    return json.dumps({"state": decision.state, "question": decision.question, "options": decision.option_ids},
                      sort_keys=True)


def default_hidden(decision: Decision, hidden_size: int | None) -> list[float]:
    """A hidden state for a decision no test gave one for: `hidden_size` values (DEFAULT_HIDDEN_SIZE
    where the model names none) in [-1, 1), drawn from its prompt's hash, so that two items differ
    and the same item reads the same every time."""
    digest = hashlib.sha256(fake_prompt(decision).encode()).digest()
    size = hidden_size or DEFAULT_HIDDEN_SIZE
    return [digest[i % len(digest)] / 128 - 1 for i in range(size)]


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
    A decision that asks for the hidden state (every decision the router builds does) gets its
    answer's `hidden_state`, else the endpoint's `hidden_state`, else `default_hidden` of its prompt
    (the container always returns one when asked: a test whose head reads it gives its own). A head
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
        logits = list(answer.logits)
        prompt = fake_prompt(decision)
        hidden = None
        if decision.return_hidden_state:
            given = answer.hidden_state if answer.hidden_state is not None else self.hidden_state
            hidden = list(given) if given is not None else default_hidden(decision, self.model.hidden_size)
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
class FakeDirectRoutes(DirectDelivery):
    """The direct delivery of an automatic route (port `DirectRoutes`): the adapter's delivery over
    the audit row claimed in `audit` (a `FakeAuditTrail`: the row's string columns, the pending mark
    beside them in `pending`), with the table's conditional writes; the team message onto the fake
    queue of its URL (`queue_at`), the `Item Routed` event's detail in `events`, each record
    delivered in `records` by name. `clock` is the adapter's; `fail_send`, an exception the next
    send raises (after the claim): an `Exception` hands the claim back, as the adapter does; a
    crash (a `BaseException`, a timeout) leaves it pending until its deadline."""

    def __init__(self, audit: Any, queue_at: Callable[[str], "FakeQueue"], *, retention_days: int = 0,
                 clock: Callable[[], float] = time.time) -> None:
        self.audit, self.queue_at, self.retention_days, self.clock = audit, queue_at, retention_days, clock
        self.pending: dict[tuple[str, str], float] = {}
        self.events: list[dict[str, Any]] = []
        self.records: dict[str, DecisionRecord] = {}
        self.fail_send: BaseException | None = None

    def deliver(self, record: DecisionRecord, name: str, *, holds_until: float | None = None) -> Delivery:
        delivery = super().deliver(record, name, holds_until=holds_until)
        if delivery.delivered:
            self.records[name] = record
        return delivery

    def _place(self, row: AuditRow, expires_at: int | None, until: float) -> Placement:
        key = (row.item_id, row.execution_name)
        if key in self.audit.rows:
            return direct_held(self.audit.rows[key].get("outcome"), self.pending.get(key))
        self.audit.rows[key] = row.columns()
        if expires_at is not None:
            self.audit.expires[key] = expires_at
        self.pending[key] = until
        return "placed"

    def _take_over(self, item_id: str, name: str, theirs: Held, until: float) -> bool:
        return self._swap((item_id, name), theirs.lease_until, until)

    def _mark_delivered(self, item_id: str, name: str, until: float) -> str | None:
        if self.pending.get((item_id, name)) == until:
            del self.pending[item_id, name]
        return None

    def _release(self, item_id: str, name: str, until: float) -> None:
        self._swap((item_id, name), until, 0.0)

    def _swap(self, key: tuple[str, str], theirs: float | None, mine: float) -> bool:
        """The pending mark set to `mine` while it is `theirs` (a conditional update)."""
        if key not in self.pending or self.pending[key] != theirs:
            return False
        self.pending[key] = mine
        return True

    def _send(self, queue_url: str, body: str) -> None:
        if self.fail_send is not None:
            failure, self.fail_send = self.fail_send, None
            raise failure
        self.queue_at(queue_url).send(body)

    def _announce(self, record: DecisionRecord, name: str) -> str | None:
        self.events.append(routed_detail(record, name))
        return None


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
        return alarm_state(arn, lambda: self.account, lambda region, name: self._states.get((region, name)))


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
