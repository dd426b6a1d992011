"""Policies as data: what to ask the decision model about an item, and how to route the answer.

A policy file (``policies/<name>.json``) declares the item kind, how the model's evidence
(the decision ``state``) is built from item fields, one or more questions with their options,
calibration temperature, thresholds and confidence formula, and deterministic rules.
Everything is checked when the policy loads, so a broken policy fails at cold start with a
message naming the offending entry, never halfway through routing an item.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Annotated, Iterable, Literal

from pydantic import BaseModel, Field, PrivateAttr, StringConstraints, ValidationError, ValidationInfo, model_validator

from decision_contract import MAX_OPTIONS, MIN_OPTIONS, OPTION_LETTERS, ConfidenceFormula

from ..items import ITEM_MODELS, Item, ItemKind, field_annotation, literal_values
from ..severity import SeverityTable
from ..validation import StrictModel, describe_errors
from .conditions import Condition
from .dependencies import Dependencies
from .heads import Head, HeadFile, load_head, question_digest
from .linking import words
from .noise import NoiseControls
from .review_sla import ReviewSla

#: The shipped policies (and their heads/), data beside the package.
POLICY_DIR = Path(__file__).resolve().parent.parent / "policies"
Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
Target = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
#: Another name customers give a service ("payment page"): a few words, at most 10 per service.
Alias = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=60)]
Aliases = Annotated[list[Alias], Field(min_length=1, max_length=10)]
#: A service as incidents name it (`Incident.service`).
Service = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
#: A review offers every complete answer (the product of the questions' options) in the record.
MAX_REVIEW_CHOICES = 256
#: Options one question may declare. Up to MAX_OPTIONS (the endpoint's letters A…P) the letters
#: can answer it; beyond, only a learned head can (the endpoint is asked for its signals only).
MAX_QUESTION_OPTIONS = 256


class PolicyError(ValueError):
    """A policy that cannot be used; the message names the policy and the bad entry."""


class StateField(StrictModel):
    """One entry of the evidence shown to the model: `key` ← item field at `field`."""

    key: Id
    field: str
    max_chars: int | None = Field(default=None, ge=20, description="Longer text is cut (marked) to fit the context.")


class Option(StrictModel):
    id: Id
    description: Text = Field(description="What the model reads; letters replace ids on the wire.")
    target: Target | None = Field(default=None, description="Destination key (DESTINATION_QUEUES) when chosen.")
    escalate: bool = Field(default=False, description="Choosing this option escalates the item.")


class Thresholds(StrictModel):
    min_confidence: Unit
    min_margin: Unit
    min_allowed_token_mass: Unit


class Learning(StrictModel):
    """What `make fit` must keep when it chooses a head's thresholds on held-out folds."""

    max_auto_error: Unit = Field(0.05, description="Largest share of auto-routed answers allowed to be wrong.")
    protect: list[Id] = Field(default_factory=list, description="Options (listed most urgent first) whose gold "
                              "answer must rarely be auto-assigned a later, less urgent option, e.g. P1 and P2.")
    max_under_assignment: Unit = Field(0.01, description="Largest share of protected gold answers that may be "
                                       "auto-assigned a later option; the rest of those go to review.")


class PrecisionCheck(StrictModel):
    """Sampled checks of the automatic answers (domain/precision.py): a share of the items the router
    would route automatically is held for review instead, so the live precision of the automatic
    answers is measured on a random sample, not only on the mistakes someone reports."""

    sample_rate: float = Field(0.0, ge=0.0, le=1.0, allow_inf_nan=False, description=(
        "Share of automatically answered items held for review as a check (0: off, 0.02: one in fifty)."))


class Question(StrictModel):
    id: Id
    question: Text
    options: list[Option] = Field(min_length=MIN_OPTIONS, max_length=MAX_QUESTION_OPTIONS, description=(
        f"Up to {MAX_OPTIONS} options the letters can answer; more (up to {MAX_QUESTION_OPTIONS}) need a learned head."))
    temperature: float = Field(default=1.0, gt=0.0, allow_inf_nan=False, description="Calibration: softmax(logits / temperature).")
    confidence_formula: ConfidenceFormula = ConfidenceFormula.NORMALIZED_PEAK
    thresholds: Thresholds = Field(description="For the letter readout.")
    learning: Learning = Field(default_factory=Learning)
    precision_check: PrecisionCheck | None = Field(
        default=None, description="This question's sampled checks, in place of the policy's `precision_check`.")
    head: HeadFile | None = Field(
        default=None, description="A learned head (make fit): a file beside the policy, read when the policy "
        "loads; it decides when it fits the endpoint's model, else the letters do."
    )
    model: Literal["always", "when_unsure", "never"] = Field(
        default="always", description="When the endpoint is asked. always: for every item (its head, or its letters, "
        "decide). when_unsure: the head answers from the item's words alone (text and sentence embedding) when it "
        "passes its thresholds, and only the items it is unsure of go to the endpoint, whose letters then decide (a "
        "question of more options than letters sends them to review). never: the head alone; what it is unsure of goes "
        "to review. when_unsure and never need a head that reads no model signal (make fit-history MODEL=none).")
    _learned: Head | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _load_head(self, info: ValidationInfo) -> "Question":
        # Head files are resolved against the policy file's folder (load_policy passes it).
        if self.head is not None:
            base = Path((info.context or {}).get("policy_dir", POLICY_DIR))
            self._learned = load_head(base / self.head.file, self.head.sha256)
        return self

    @property
    def learned_head(self) -> Head | None:
        """The head the policy references, loaded and checked; None when it has none."""
        return self._learned

    def with_head(self, head: Head | None) -> "Question":
        """This question with `head` deciding in place of the one it references (None: the letters
        alone), for the fitter's test scoring, benchmarks and tests of the letter readout."""
        other = self.model_copy(update={"head": None})
        other._learned = head
        return other

    @property
    def option_ids(self) -> list[str]:
        return [option.id for option in self.options]

    @property
    def many_options(self) -> bool:
        """More options than the endpoint has letters: the endpoint is asked for the model's
        signals only (model_requests.signals_decision) and the head alone answers."""
        return len(self.options) > MAX_OPTIONS

    def option(self, option_id: str) -> Option:
        for option in self.options:
            if option.id == option_id:
                return option
        raise KeyError(f"question {self.id!r} has no option {option_id!r} (options: {', '.join(self.option_ids)})")

    @property
    def routes(self) -> bool:
        return any(option.target for option in self.options)


class Rule(StrictModel):
    """Deterministic answers applied before the model when every condition holds."""

    id: Id
    description: Text
    when: list[Condition] = Field(min_length=1)
    answers: dict[str, str] = Field(min_length=1, description="question id → option id")

    def matches(self, item: Item) -> bool:
        return all(condition.holds(item) for condition in self.when)


class Policy(StrictModel):
    name: Id
    version: Annotated[str, StringConstraints(min_length=1, max_length=32)]
    item_kind: ItemKind
    description: Text
    notes: str | None = None
    state: list[StateField] = Field(min_length=1)
    questions: list[Question] = Field(min_length=1)
    rules: list[Rule] = Field(default_factory=list)
    source_severity: dict[Id, SeverityTable] = Field(
        default_factory=dict, description="Native incident source (aws.cloudwatch, pagerduty, ...) → its severity table.")
    precision_check: PrecisionCheck = Field(
        default_factory=PrecisionCheck, description="Sampled checks of the automatic answers (off by default); a "
                                                    "question's own `precision_check` takes its place.")
    noise: NoiseControls = Field(
        default_factory=NoiseControls, description="Grouping, flapping and maintenance windows of native-source "
                                                   "incidents (an incident policy's only).")
    dependencies: Dependencies = Field(
        default_factory=Dependencies, description="Which services depend on which, and inhibition rules: a new "
                                                  "incident is held under its open parent (an incident policy's only).")
    service_aliases: dict[Service, Aliases] = Field(
        default_factory=dict, max_length=200, description=(
            "Service (as incidents name it) → the other names customers give it; their words count as the "
            "service's own when a ticket is linked to an open incident it describes (a ticket policy's only)."))
    review_sla: ReviewSla | None = Field(
        default=None, description="Time-to-first-review targets per priority (and queue); the review console "
                                  "lists items by breach risk. None: listed oldest first, no target.")

    @model_validator(mode="after")
    def _consistent(self) -> "Policy":
        model = ITEM_MODELS[self.item_kind]
        problems = [*self._state_problems(model), *self._option_problems(), *self._answering_problems(),
                    *self._shape_problems(), *self._noise_problems(model), *self._alias_problems(),
                    *self._sla_problems(), *self._rule_problems(model)]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _state_problems(self, model: type[BaseModel]) -> list[str]:
        """State keys named twice, and state fields the item does not have."""
        problems = _duplicates("state key", [s.key for s in self.state])
        for i, entry in enumerate(self.state):
            try:
                field_annotation(model, entry.field)
            except KeyError as error:
                problems.append(f"state[{i}].field: {self.item_kind} has no field {error.args[0]}")
        return problems

    def _option_problems(self) -> list[str]:
        """Each question's options: named twice, protected though not offered, or targets on some only."""
        problems = _duplicates("question id", [q.id for q in self.questions])
        for question in self.questions:
            where = f"question {question.id!r}"
            problems += [f"{where}: {p}" for p in _duplicates("option id", question.option_ids)]
            unknown = [o for o in question.learning.protect if o not in question.option_ids]
            if unknown:
                problems.append(f"{where}: learning.protect names {unknown}, not options of the question")
            with_target = [o.id for o in question.options if o.target]
            if with_target and len(with_target) != len(question.options):
                missing = [o.id for o in question.options if not o.target]
                problems.append(f"{where}: options {missing} have no target; a routing question needs one on every option")
        return problems

    def _answering_problems(self) -> list[str]:
        """Questions that nothing could answer as set (no head where one is needed), and learned
        heads that do not fit their question."""
        problems: list[str] = []
        for question in self.questions:
            if question.model != "always" and question.head is None:
                problems.append(f"question {question.id!r}: model {question.model!r} needs a head (one that reads the words "
                                "alone) to answer without the endpoint")
            if question.many_options and question.head is None:
                problems.append(
                    f"question {question.id!r}: {len(question.options)} options, more than the {MAX_OPTIONS} letters "
                    f"(A…{OPTION_LETTERS[-1]}) the endpoint labels options with, so the letters cannot answer it; "
                    "such a question needs a learned head (\"head\": a file written by make fit-history)")
            head = question.learned_head
            if head is not None:
                where = f"question {question.id!r}: head file {question.head.file if question.head else '?'}"
                problems += [f"{where}: {p}" for p in self.head_problems(question, head)]
        return problems

    def _shape_problems(self) -> list[str]:
        """Too many complete answers to offer a reviewer, or not exactly one routing question."""
        problems = []
        combinations = math.prod(len(q.options) for q in self.questions)
        if combinations > MAX_REVIEW_CHOICES:
            problems.append(f"the questions' options combine into {combinations} complete answers; at most "
                            f"{MAX_REVIEW_CHOICES} (each travels with the item as a reviewer's choice)")
        routing = [q.id for q in self.questions if q.routes]
        if len(routing) != 1:
            problems.append(f"exactly one question must carry targets (the routing question); found {routing or 'none'}")
        return problems

    def _noise_problems(self, model: type[BaseModel]) -> list[str]:
        """Noise controls and dependencies: on incidents only, ids named once, fields the item has."""
        problems = []
        if not self.noise.empty and self.item_kind != "incident":
            problems.append("noise: grouping, flapping and maintenance windows apply to incidents only")
        problems += _duplicates("noise.grouping id", [g.id for g in self.noise.grouping])
        problems += _duplicates("noise.maintenance id", [w.id for w in self.noise.maintenance])
        if not self.dependencies.empty and self.item_kind != "incident":
            problems.append("dependencies: they apply to incidents only")
        problems += _duplicates("dependencies.inhibit id", [r.id for r in self.dependencies.inhibit])
        for where, field in self.noise.fields() + self.dependencies.fields():
            try:
                field_annotation(model, field)
            except KeyError as error:
                problems.append(f"{where}: {self.item_kind} has no field {error.args[0]}")
        return problems

    def _rule_problems(self, model: type[BaseModel]) -> list[str]:
        """Rules named twice, conditions that can never match, answers the policy does not offer."""
        problems = _duplicates("rule id", [r.id for r in self.rules])
        questions = {q.id: q for q in self.questions}
        for rule in self.rules:
            where = f"rule {rule.id!r}"
            for j, condition in enumerate(rule.when):
                try:
                    allowed = literal_values(field_annotation(model, condition.field))
                except KeyError as error:
                    problems.append(f"{where}: when[{j}].field: {self.item_kind} has no field {error.args[0]}")
                    continue
                if allowed is not None:
                    for value in condition.values:
                        if value not in allowed:
                            problems.append(
                                f"{where}: when[{j}] value {value!r} can never match {condition.field} "
                                f"(allowed: {', '.join(map(str, allowed))})"
                            )
            for question_id, option_id in rule.answers.items():
                if question_id not in questions:
                    problems.append(f"{where}: answers a question {question_id!r} the policy does not ask")
                elif option_id not in questions[question_id].option_ids:
                    problems.append(
                        f"{where}: answer {option_id!r} is not an option of question {question_id!r} "
                        f"(options: {', '.join(questions[question_id].option_ids)})"
                    )
        return problems

    def _alias_problems(self) -> list[str]:
        if self.service_aliases and self.item_kind != "ticket":
            return ["service_aliases: the ticket intake reads them to link tickets; they apply to ticket policies only"]
        problems = []
        for service, aliases in self.service_aliases.items():
            where = f"service_aliases[{service!r}]"
            problems += [f"{where}: {p}" for p in _duplicates("alias", [a.lower() for a in aliases])]
            for i, alias in enumerate(aliases):
                if not words(alias):
                    problems.append(f"{where}[{i}]: {alias!r} has only stop words or numbers, so no ticket's words "
                                    "could ever match it")
        return problems

    def _sla_problems(self) -> list[str]:
        """review_sla's priorities and queues must be ones the policy can give an item."""
        sla = self.review_sla
        if sla is None:
            return []
        problems: list[str] = []
        allowed: list[str] | None = None
        source = sla.priority
        if source is not None and source.question is not None:
            questions = {q.id: q for q in self.questions}
            if source.question not in questions:
                problems.append(f"review_sla.priority.question: the policy asks no question {source.question!r} "
                                f"(questions: {', '.join(questions)})")
            else:
                allowed = questions[source.question].option_ids
        elif source is not None and source.field is not None:
            try:
                values = literal_values(field_annotation(ITEM_MODELS[self.item_kind], source.field))
            except KeyError as error:
                problems.append(f"review_sla.priority.field: {self.item_kind} has no field {error.args[0]}")
            else:
                allowed = [str(v) for v in values] if values is not None else None
        if allowed is not None:
            problems += [f"review_sla.by_priority[{key!r}]: not a priority the policy can give "
                         f"(allowed: {', '.join(allowed)})" for key in sla.by_priority if key not in allowed]
            escalated = sla.escalate.priorities if sla.escalate is not None else None
            problems += [f"review_sla.escalate.priorities[{key!r}]: not a priority the policy can give "
                         f"(allowed: {', '.join(allowed)})" for key in escalated or [] if key not in allowed]
        queues = self.routing_question.option_ids if any(q.routes for q in self.questions) else []
        problems += [f"review_sla.by_queue[{key!r}]: not an option of the routing question "
                     f"(options: {', '.join(queues)})" for key in sla.by_queue if key not in queues]
        return problems

    @property
    def warnings(self) -> list[str]:
        """What loads but is likely a mistake (an undeclared service in a dependency)."""
        return self.dependencies.warnings()

    def head_problems(self, question: Question, head: Head) -> list[str]:
        """Why `head` cannot decide `question` of this policy (its options, or the prompt it was
        fitted on); empty when it is bound to them. The one check for a shipped head and a head
        promoted into the head store."""
        if head.options != question.option_ids:
            return [f"options {head.options} are not the question's options {question.option_ids}"]
        if question.model != "always" and head.reads_model:
            return [f"the question's model is {question.model}, so its head answers without the endpoint, but the head "
                    "reads the model's signals; refit it on the words alone (make fit-history MODEL=none) or set "
                    "\"model\": \"always\""]
        if question.many_options and head.letters is not None:
            return [f"the head reads the letters, but a question with {len(question.options)} options gets no letter "
                    f"per option (at most {MAX_OPTIONS}); refit it without the letters block (make fit-history)"]
        if head.question_sha256 != self.question_sha256(question):
            return ["question_sha256 does not match the question's wording, options or evidence fields: "
                    "the head was fitted on another prompt; refit it (make fit)"]
        return []

    def with_heads(self, heads: dict[str, Head | None]) -> "Policy":
        """This policy with the given questions decided by these heads (None: the letters alone);
        the other questions keep theirs. Checked by `head_problems` first (ValueError)."""
        for question_id, head in heads.items():
            problems = self.head_problems(self.question(question_id), head) if head is not None else []
            if problems:
                raise ValueError(f"question {question_id!r}: " + "; ".join(problems))
        questions = [q.with_head(heads[q.id]) if q.id in heads else q for q in self.questions]
        return self.model_copy(update={"questions": questions})

    @property
    def categorical_keys(self) -> list[str]:
        """State keys read as categories by a head: the fields the policy does not cut to a length
        (channel, tier, severity, source); the others are free text."""
        return [s.key for s in self.state if s.max_chars is None]

    def question_sha256(self, question: Question) -> str:
        """The digest a head of `question` is bound to (see heads.question_digest)."""
        return question_digest(question.question, [(o.id, o.description) for o in question.options],
                               [f"{s.key}={s.field}:{s.max_chars}" for s in self.state])

    @property
    def routing_question(self) -> Question:
        return next(q for q in self.questions if q.routes)

    def target(self, option_id: str) -> str:
        """The destination key (DESTINATION_QUEUES) that the routing question's option routes to."""
        target = self.routing_question.option(option_id).target
        assert target is not None, "every option of the routing question has a target (checked at load)"
        return target

    @property
    def targets(self) -> set[str]:
        return {o.target for q in self.questions for o in q.options if o.target}

    def question(self, question_id: str) -> Question:
        for question in self.questions:
            if question.id == question_id:
                return question
        raise KeyError(f"policy {self.name!r} has no question {question_id!r}")


def _duplicates(what: str, values: Iterable[str]) -> list[str]:
    dupes = sorted(value for value, count in Counter(values).items() if count > 1)
    return [f"{what} {v!r} appears more than once" for v in dupes]


def load_policy(name_or_path: str | Path, known_targets: Iterable[str] | None = None) -> Policy:
    """Load and validate a shipped policy by name (``support-ticket``) or any policy file by path.

    With `known_targets` (the deployment's destination keys) every option target must be one of them.
    """
    text = str(name_or_path)
    by_name = not (text.endswith(".json") or "/" in text or "\\" in text)
    path = POLICY_DIR / f"{text}.json" if by_name else Path(text)
    if by_name and not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in POLICY_DIR.glob("*.json")))
        raise PolicyError(f"no shipped policy named {text!r} (shipped: {shipped})")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise PolicyError(f"cannot read policy file {path}: {error.strerror or error}") from None
    except json.JSONDecodeError as error:
        raise PolicyError(f"policy file {path} is not valid JSON: {error}") from None
    try:
        policy = Policy.model_validate(raw, context={"policy_dir": path.parent})
    except ValidationError as error:
        raise PolicyError(f"policy file {path} is invalid: " + "; ".join(describe_errors(error))) from None
    if by_name and policy.name != text:
        raise PolicyError(f"policy file {path} declares name {policy.name!r}, expected {text!r}")
    if known_targets is not None:
        check_targets(policy, known_targets)
    return policy


def check_targets(policy: Policy, known_targets: Iterable[str]) -> None:
    known = set(known_targets)
    unknown = sorted(policy.targets - known)
    if unknown:
        raise PolicyError(
            f"policy {policy.name!r}: unknown target(s) {', '.join(unknown)}; "
            f"configured destinations: {', '.join(sorted(known)) or 'none'}"
        )
