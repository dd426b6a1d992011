"""The decision record (the routing workflow's input) and the review output: the shapes that
statemachine/routing.asl.json reads. The workflow only carries these out; it never recomputes routing."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from decision_contract import ModelInfo

from ..items import ItemKind, ref_of
from .kept_signals import KeptSignals
from .linking import LinkedIncident
from .policies import Thresholds
from .shard_keys import shard_of, sharded
from .why import Why

Source = Literal["rule", "model", "endpoint_error"]
#: Which tier answered a learned question: the head over the item's words alone, without asking
#: the endpoint (a question's `model`: when_unsure or never), or the endpoint.
Tier = Literal["words", "endpoint"]
#: What produced the decision: a rule, the option letters' logits, or a learned head over the
#: model's hidden state (see heads.py).
ReadoutKind = Literal["rule", "letters", "head"]


#: Days a labelled example is kept where the starter of an execution gives none (LabelRetentionDays' default).
LABEL_RETENTION_DAYS = 365


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class DecisionError(_Record):
    """Why the endpoint gave no usable answer (after retries)."""

    kind: str = Field(description="throttled | retryable_model_error | model_error | timeout | connection | …")
    message: str
    status_code: int | None = None
    attempts: int = 1


class DecisionEntry(_Record):
    question: str
    source: Source
    readout: ReadoutKind | None = Field(None, description="Which readout decided; null on endpoint_error.")
    tier: Tier | None = Field(None, description="For a learned answer (source model): 'words' when the head answered "
                              "from the item's words alone and the endpoint was not asked, 'endpoint' when it was.")
    option_id: str | None = Field(description="Chosen (auto) or suggested (review) option; null on endpoint_error.")
    probabilities: dict[str, float] | None = Field(None, description="The deciding readout's probabilities.")
    letter_probabilities: dict[str, float] | None = Field(None, description="The letters' (calibrated), always.")
    head_probabilities: dict[str, float] | None = Field(None, description="The head's, when a head decided.")
    head_version: str | None = None
    head_skipped: str | None = Field(None, description="Why the question's head did not decide (model mismatch, …).")
    confidence: float | None = None
    confidence_formula: str
    margin: float | None = None
    allowed_token_mass: float | None = None
    temperature: float
    thresholds: Thresholds
    novelty: float | None = Field(None, description="How unlike every option its head learned the item is, when the "
                                  "head has a novelty part (heads.NoveltyBlock).")
    max_novelty: float | None = Field(None, description="The head's novelty threshold: above it, the item goes to review.")
    passed: bool
    reasons: list[str] = Field(default_factory=list)
    rule: str | None = None
    error: DecisionError | None = None
    model: ModelInfo | None = None
    prompt_sha256: str | None = None
    latency_seconds: float | None = None
    why: Why | None = Field(None, description="The reason for the decision (why.py); null on records from before it.")
    check: bool = Field(False, description=(
        "Sampled for a precision check (domain/precision.py): an automatic answer held for a reviewer, "
        "whose answer is compared with it."))


class ShadowAnswer(_Record):
    """What a candidate head serving in shadow answered a question (domain/shadow.py): it decides
    nothing; the head in service's entry in `decisions` routed the item."""

    head_version: str
    sha256: str = Field(description="The shadow head's sha256 (its tally in the head history table is keyed by it).")
    option_id: str
    confidence: float | None = None
    passed: bool = Field(description="Whether the shadow head would have routed this answer automatically.")
    agrees: bool = Field(description="The same option as the head in service's answer.")


class PolicyRef(_Record):
    name: str
    version: str


class Destination(_Record):
    target: str
    queue_url: str


class ReviewChoice(_Record):
    """One complete answer a reviewer may give, with where it routes the item."""

    answers: dict[str, str]
    destination: Destination
    escalate: bool

    def wire(self) -> str:
        """The form the record and the reviewer's answer carry: canonical JSON text, so the
        workflow can check an answer by string equality (States.ArrayContains)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


#: A field records kept from before the pending-review index carry (the review queue's URL, which
#: nothing reads since): accepted on read and dropped, never written.
RETIRED_REVIEW_FIELDS = ("queue_url",)


class ReviewSpec(_Record):
    timeout_seconds: int
    questions: dict[str, list[str]] = Field(description="question id → its option ids, for the reviewer.")
    choices: list[str] = Field(description="Every answer the reviewer may give (ReviewChoice.wire()): the "
                                           "workflow accepts only one of these, so the policy, targets and "
                                           "queue URLs come from the record, never from the reviewer.")

    @model_validator(mode="before")
    @classmethod
    def _without_retired_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(name in data for name in RETIRED_REVIEW_FIELDS):
            return {key: value for key, value in data.items() if key not in RETIRED_REVIEW_FIELDS}
        return data


class SourceReference(_Record):
    """The item in the system it came from, for writing the outcome back there."""

    system: str = Field(description="zendesk, jira, aws.cloudwatch, pagerduty, ...")
    id: str = Field(description="Its id there: the Zendesk ticket id, the alarm ARN, the PagerDuty incident id, ...")
    url: str | None = None


class Announcement(_Record):
    """What the workflow's `Item Routed` event says of the decision, flat so an EventBridge rule or
    input transformer can read it: derived from the record itself (never given)."""

    reference: SourceReference | None = Field(description="null for items of our own shapes")
    answers: dict[str, str] = Field(description="question → the decided (auto) or suggested (review) option")
    confidence: dict[str, float | None]
    readout: dict[str, str | None]


def source_reference(item: dict[str, Any]) -> SourceReference | None:
    """A ticket's `reference`, or a native-source incident's evidence (source and source_ref)."""
    reference = item.get("reference")
    if isinstance(reference, dict):
        return SourceReference.model_validate(reference)
    evidence = item.get("evidence")
    if isinstance(evidence, dict) and evidence.get("source_ref"):
        return SourceReference(system=str(item.get("source", "")), id=evidence["source_ref"], url=evidence.get("source_url"))
    return None


class DecisionRecord(_Record):
    item_kind: ItemKind
    item_id: str
    item_key: str = Field(description="kind:source:id:payload-hash; names the executions (Item.key).")
    item: dict[str, Any]
    policy: PolicyRef
    route: Literal["auto", "review"]
    route_reason: str
    destination: Destination | None = Field(description="null when route=review")
    escalate: bool
    decisions: list[DecisionEntry]
    review: ReviewSpec
    decided_at: str
    announce: Announcement | None = Field(None, description="Derived from the rest on validation (Item Routed).")
    shadow: dict[str, ShadowAnswer] = Field(default_factory=dict, description=(
        "question → the answer of the candidate head serving in shadow beside the head in service, if any."))
    linked: LinkedIncident | None = Field(None, description=(
        "The open incident a ticket describes (domain/linking.py); null when none, or not a ticket."))
    audit_expires_at: int | None = Field(None, description=(
        "When the execution's audit row expires (the audit table's TTL, epoch seconds): set as the "
        "execution is started (AuditRetentionDays); null: kept."))
    label_expires_at: int | None = Field(None, description=(
        "When the item's labelled example expires (the labelled-examples table's TTL, epoch seconds): set as "
        "the execution is started (LabelRetentionDays); where none is given, LABEL_RETENTION_DAYS after decided_at."))
    signals: dict[str, KeptSignals] = Field(default_factory=dict, description=(
        "question → the endpoint's signals for it as they were at decision time (domain/kept_signals.py), kept "
        "on a record that goes to review: the labelled example carries them, so relearning need not ask again."))

    def item_ref(self) -> str | None:
        """Which item the record decides: kind, source and id (`items.item_ref`)."""
        return ref_of(self.item_kind, self.item)

    @property
    def checked(self) -> list[str]:
        """The questions whose automatic answer this item was held to check (domain/precision.py)."""
        return [d.question for d in self.decisions if d.check]

    @model_validator(mode="after")
    def _label_expiry(self) -> "DecisionRecord":
        # The workflow's StoreLabelledExample writes it as a number: a record always has one.
        if self.label_expires_at is None:
            try:
                decided = datetime.fromisoformat(self.decided_at)
            except ValueError:
                return self
            self.label_expires_at = int((decided + timedelta(days=LABEL_RETENTION_DAYS)).timestamp())
        return self

    @model_validator(mode="after")
    def _announce(self) -> "DecisionRecord":
        # Always recomputed: the event must say what the record says, whatever a caller passed.
        self.announce = Announcement(
            reference=source_reference(self.item),
            answers={d.question: d.option_id for d in self.decisions if d.option_id is not None},
            confidence={d.question: d.confidence for d in self.decisions},
            readout={d.question: d.readout for d in self.decisions})
        return self


class ReviewAnswer(_Record):
    """SendTaskSuccess output once a reviewer has answered every question. The workflow checks
    that it names its own execution and that `choice` is one of the record's `review.choices`."""

    execution_name: str
    #: Who answered, as shown: the console's reviewer by their token's `sub` (older answers: by the
    #: email the token carried); the review function's caller by the display name it gives.
    reviewer: str
    choice: str
    note: str = ""
    #: The console reviewer's user name, and their email only while the user pool had it verified.
    reviewer_username: str | None = None
    reviewer_email: str | None = None
    #: Who answered, authenticated (domain/signatures.py: `cognito:<sub>` or `iam:<ARN>`), and the
    #: stack key's signature of it for this execution; empty where nobody proved who answered.
    reviewer_id: str = ""
    identity_signature: str = ""

    @property
    def chosen(self) -> ReviewChoice:
        return ReviewChoice.model_validate_json(self.choice)


_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
MAX_EXECUTION_NAME = 80
#: Room kept at the end of a name for the attempt suffix ("-r2" … "-r99").
ATTEMPT_SUFFIX_ROOM = 4


def execution_name(item_kind: str, item_id: str, item_key: str, attempt: int = 1) -> str:
    """Deterministic per item key, ≤ 80 chars of [A-Za-z0-9-_]: starting the same item twice is
    refused by Step Functions (ExecutionAlreadyExists) for 90 days. Names cannot be reused, so
    routing an item again after its execution failed uses the next attempt's name (`-r2`, …).
    The readable part is the id; the hash of the key keeps items apart that share an id (another
    source, other content) or that sanitise or truncate to the same text."""
    digest = hashlib.sha256(item_key.encode("utf-8")).hexdigest()[:12]
    room = MAX_EXECUTION_NAME - ATTEMPT_SUFFIX_ROOM - len(item_kind) - len(digest) - 2
    readable = _UNSAFE.sub("-", item_id).strip("-")[:room].rstrip("-") or "item"
    base = f"{item_kind}-{readable}-{digest}"
    return base if attempt == 1 else f"{base}-r{attempt}"


class CorrectedRecord(DecisionRecord):
    """An automatically routed item sent through the workflow again with a reviewer's correction:
    the workflow takes `correction` as the review answer (checked like any other: this execution,
    one of the record's own choices) instead of waiting for one, then delivers, stores the
    labelled example and audits as it does after a review."""

    route: Literal["correction"] = "correction"  # type: ignore[assignment]
    correction: ReviewAnswer


def json_text(value: Any) -> str:
    """A structured audit column's text as the workflow's `States.JsonToString` writes it: compact,
    non-ASCII as it is. Step Functions is a Java service, so its floats and escapes may still differ
    in bytes: readers compare these columns parsed (`json.loads`), never as text."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


#: Partition keys of the audit table's index of recent rows (`outcome_shard`, `<outcome>#<n>`, n
#: from 0 to AUDIT_SHARDS - 1): every automatic route writes a row of `auto_routed`, and one key
#: of an index takes 1,000 writes a second. The workflow's WriteAuditRecord picks n at random
#: (States.MathRandom(0, AUDIT_SHARDS - 1)); the code's writers from a hash of the row's key. Raise
#: it, never lower it: a read asks shards 0 to AUDIT_SHARDS - 1 (docs/operations/hot-keys.md).
AUDIT_SHARDS = 10
_OUTCOME_SHARD = re.compile(r"^(?P<outcome>.*)#(?P<shard>0|[1-9][0-9]*)$")


def outcome_shard(outcome: str, item_id: str, execution_name: str) -> str:
    """The index key of an audit row the code writes: the outcome's shard from a hash of the row's
    key, the same in every process and for every retry of the row."""
    return sharded(outcome, shard_of(f"{item_id}/{execution_name}", AUDIT_SHARDS))


class AuditRow(_Record):
    """One row of the audit table, as DynamoDB holds it: every column a string (the structured
    ones, `outcome_detail`, `decisions` and `item`, as JSON text). The workflow's WriteAuditRecord
    state writes it (checked against this model in a test), so do the incident intake (an
    incident a noise control held, with no execution: `execution_arn` and `linked_incident`
    absent) and the redrive of
    a row the workflow could not write; the console reads it back."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    item_id: str
    execution_name: str
    item_kind: str
    outcome: str
    outcome_detail: str
    route: str
    route_reason: str
    policy_name: str
    policy_version: str
    decisions: str
    item: str
    decided_at: str
    audited_at: str
    execution_arn: str | None = None
    #: The record's `linked` as JSON text ("null": not linked); absent on rows from before it was
    #: kept and on the rows the incident intake writes itself.
    linked_incident: str | None = None
    #: The linked incident's id alone, on a linked ticket's row only: the key of the table's sparse
    #: index of links (`AuditTrail.linked_to`).
    linked_incident_id: str | None = None
    #: On a row the intake wrote as it delivered an automatic route itself (no execution holds its
    #: record): the decision record less `item` and `decisions` (columns of their own), as JSON
    #: text. A correction reads the record back from it (`routed_record`).
    routing_record: str | None = None
    #: The key of the index of recent rows (`<outcome>#<n>`, AUDIT_SHARDS): given here to a row
    #: that has none (one the code writes, or one kept from before the index), from its key.
    outcome_shard: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _with_outcome_shard(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("outcome_shard") is None:
            outcome, item_id, name = (data.get(key) for key in ("outcome", "item_id", "execution_name"))
            if isinstance(outcome, str) and isinstance(item_id, str) and isinstance(name, str):
                return {**data, "outcome_shard": outcome_shard(outcome, item_id, name)}
        return data

    @model_validator(mode="after")
    def _shard_of_its_outcome(self) -> "AuditRow":
        found = _OUTCOME_SHARD.match(self.outcome_shard or "")
        if found is None or found["outcome"] != self.outcome:
            raise ValueError(f"outcome_shard {self.outcome_shard!r}: must be the outcome and a shard, "
                             f"'{self.outcome}#<n>' (n from 0 to {AUDIT_SHARDS - 1})")
        return self

    def routed_record(self) -> DecisionRecord | None:
        """The decision record a directly delivered route was delivered from; None on a row the
        workflow wrote (its execution's input is the record)."""
        if self.routing_record is None:
            return None
        rest = json.loads(self.routing_record)
        if not isinstance(rest, dict):
            raise ValueError(f"audit row {self.item_id}/{self.execution_name}: routing_record is not a JSON object")
        return DecisionRecord.model_validate({**rest, "item": json.loads(self.item), "decisions": json.loads(self.decisions)})

    def columns(self) -> dict[str, str]:
        """The row's columns as written (an absent `execution_arn` is no column); a linked
        ticket's row with its link index's key, as the workflow writes it."""
        columns = {key: value for key, value in self.model_dump().items() if value is not None}
        if "linked_incident_id" not in columns:
            try:
                linked = self.link()
            except ValueError:  # pydantic's ValidationError too: a column that is no link
                linked = None
            if linked is not None:
                columns["linked_incident_id"] = linked.incident_id
        return columns

    def link(self) -> LinkedIncident | None:
        """The incident the row's ticket was linked to (None: not linked, or a row without the column)."""
        if not self.linked_incident or self.linked_incident == "null":
            return None
        return LinkedIncident.model_validate_json(self.linked_incident)

    def item_ref(self) -> str | None:
        """Which item the row is of: kind, source and id (`items.item_ref`), read from its `item`;
        None when that column does not say (not JSON, no source)."""
        try:
            return ref_of(self.item_kind, json.loads(self.item))
        except ValueError:
            return None

    def detail(self) -> dict[str, Any]:
        """`outcome_detail` read back (the workflow's `$.outcome`, with its status)."""
        value = json.loads(self.outcome_detail)
        if not isinstance(value, dict):
            raise ValueError(f"audit row {self.item_id}/{self.execution_name}: outcome_detail is not a JSON object")
        return value


#: Step Functions refuses an execution input (and any state's input or output) over 256 KiB.
STEP_FUNCTIONS_PAYLOAD_BYTES = 256 * 1024
#: What the routing workflow adds to the record on its way (the review's answer and note, the
#: outcome, the audit link): kept free, so a record that starts can also finish.
WORKFLOW_RESERVE_BYTES = 32 * 1024
#: The largest record an execution is started with.
MAX_RECORD_BYTES = STEP_FUNCTIONS_PAYLOAD_BYTES - WORKFLOW_RESERVE_BYTES


def with_signals_that_fit(record: DecisionRecord) -> DecisionRecord:
    """The record with its kept signals only where it goes to review (what becomes a labelled
    example), as many questions' as keep it within MAX_RECORD_BYTES, in the policy's order (about
    1.9 KB a question at a hidden size of 576, 7.2 KB at 2560); relearning asks the endpoint for the
    questions left out, as for an item kept before signals were. The labelled example and the
    pending-review row built from such a record stay under DynamoDB's 400 KB item limit."""
    if not record.signals:
        return record
    if record.route != "review":
        return record.model_copy(update={"signals": {}})
    if record_bytes(record) <= MAX_RECORD_BYTES:
        return record
    room = MAX_RECORD_BYTES - record_bytes(record.model_copy(update={"signals": {}}))
    kept: dict[str, KeptSignals] = {}
    for question, signals in record.signals.items():
        size = len(json.dumps(question).encode()) + len(signals.model_dump_json().encode()) + 2  # ':' and ','
        if size <= room:
            kept[question], room = signals, room - size
    return record.model_copy(update={"signals": kept})


class RecordTooLarge(ValueError):
    """A record too large to start the workflow with; no retry can make it smaller, so the item is
    parked with this reason."""

    failure_kind = "record_too_large"


def record_bytes(record: DecisionRecord) -> int:
    """The record's size as the workflow's input: its JSON in UTF-8 (what StartExecution counts)."""
    return len(record.model_dump_json().encode("utf-8"))


def check_size(record: DecisionRecord) -> None:
    """RecordTooLarge, naming the size and what makes it large, when the record is over MAX_RECORD_BYTES."""
    size = record_bytes(record)
    if size <= MAX_RECORD_BYTES:
        return
    item = len(json.dumps(record.item, ensure_ascii=False).encode("utf-8"))
    choices = len(json.dumps(record.review.choices).encode("utf-8"))
    raise RecordTooLarge(
        f"the decision record is {size:,} bytes, over the {MAX_RECORD_BYTES:,} a routing execution may start with "
        f"(Step Functions' {STEP_FUNCTIONS_PAYLOAD_BYTES:,}-byte input limit less {WORKFLOW_RESERVE_BYTES:,} kept for "
        f"the workflow): the item is {item:,} bytes, its {len(record.review.choices)} review choices {choices:,} bytes")
