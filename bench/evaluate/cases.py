"""Labelled decisions read from JSONL: our policy format and the public JevBench task format.

A line becomes one `Case`: the decisions that share its state (one request; the incident policy's
two questions go as one batch) with the gold option of each. A bad line becomes a `RowError`
naming the file, line and field; the run goes on without it.

Policy format (one item as the pipeline receives it, plus its gold answers)::

    {"policy": "support-ticket", "item": {...ticket...}, "gold": "billing"}
    {"policy": "incident", "item": {...incident...}, "gold": {"priority": "P2", "team": "data"}}

`gold` is an option id when the policy has one question, else {question: option id} (questions
left out are not scored). An optional `note` (text) is carried into the report. This is also the
shape the pipeline's labelled-example export writes.

JevBench format (one task)::

    {"id", "family", "state", "question": {"type": "noul"|"choice"|"score", "instructions",
     "criteria"}, "labels"?, "expected"}

Questions map onto decisions through the System One mapping (`decision_server.systemone.mapping`,
one definition): noul → options yes, no; choice → the criteria in order; score → levels "0", "1", …
(index 0 lowest). `labels`, when given, names the answers in option order (noul: the yes label then
the no label, e.g. ["entailment", "not_entailment"]); `expected` is a label, a criteria name, a
level text, a boolean (noul) or an integer level (score).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Union

from pydantic import TypeAdapter, ValidationError

from decision_contract import Decision

POLICY_KEYS = {"policy", "item", "gold", "note"}
JEVBENCH_KEYS = {"id", "family", "state", "question", "labels", "expected", "note"}
JEVBENCH_CONFIDENCE = "normalized_peak"


@dataclass(frozen=True)
class Labelled:
    """One decision to score and the option id a person says is right."""

    question: str
    decision: Decision
    gold: str

    @property
    def gold_index(self) -> int:
        return self.decision.option_ids.index(self.gold)


@dataclass(frozen=True)
class Case:
    source: str
    line: int
    case_id: str
    kind: str  # "policy" or "jevbench"
    #: The policy name, or the JevBench family.
    group: str
    decisions: list[Labelled]
    #: Confidence formula name per question (the policy's; normalized peak for JevBench).
    formulas: dict[str, str]
    note: str | None = None

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


@dataclass(frozen=True)
class RowError:
    source: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.field}: {self.message}"


class _Bad(ValueError):
    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


@dataclass
class Loaded:
    cases: list[Case] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)


def load_file(path: str | Path, limit: int | None = None) -> Loaded:
    """Every usable case of a JSONL file (up to `limit`), and an error for every bad line."""
    path = Path(path)
    loaded = Loaded()
    policies: dict[str, Any] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        loaded.errors.append(RowError(str(path), 0, "(file)", f"cannot read: {exc.strerror or exc}"))
        return loaded
    for number, text in enumerate(lines, start=1):
        if limit is not None and len(loaded.cases) >= limit:
            break
        if not text.strip():
            continue
        try:
            loaded.cases.append(parse_row(text, str(path), number, policies))
        except _Bad as bad:
            loaded.errors.append(RowError(str(path), number, bad.field, str(bad)))
    return loaded


def parse_row(text: str, source: str, line: int, policies: dict[str, Any] | None = None) -> Case:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Bad("(line)", f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(row, dict):
        raise _Bad("(line)", "must be a JSON object")
    if "policy" in row:
        return _policy_case(row, source, line, {} if policies is None else policies)
    if "question" in row and "expected" in row:
        return _jevbench_case(row, source, line)
    raise _Bad(
        "(line)",
        "neither format: a policy row has 'policy', 'item', 'gold'; a JevBench task has "
        "'id', 'family', 'state', 'question', 'expected'",
    )


def _unknown_keys(row: dict, allowed: set[str]) -> None:
    extra = sorted(set(row) - allowed)
    if extra:
        raise _Bad(extra[0], f"unknown field (allowed: {', '.join(sorted(allowed))})")


def _note(row: dict) -> str | None:
    note = row.get("note")
    if note is not None and not isinstance(note, str):
        raise _Bad("note", "must be text")
    return note


# --- policy rows -------------------------------------------------------------------------------


def _policy_case(row: dict, source: str, line: int, policies: dict[str, Any]) -> Case:
    from decision_router.items import InvalidItem, parse_item
    from decision_router.policies import build_decisions, load_policy

    _unknown_keys(row, POLICY_KEYS)
    for key in ("item", "gold"):
        if key not in row:
            raise _Bad(key, "missing")
    name = row["policy"]
    if not isinstance(name, str) or not name:
        raise _Bad("policy", "must be a policy name such as 'support-ticket'")
    if name not in policies:
        try:
            policies[name] = load_policy(name)
        except Exception as exc:  # the policy loader's own message says what is wrong
            raise _Bad("policy", f"cannot load policy {name!r}: {exc}") from None
    policy = policies[name]
    questions = {q.id: q for q in policy.questions}

    gold = row["gold"]
    if isinstance(gold, str):
        if len(questions) != 1:
            raise _Bad("gold", f"policy {name!r} asks {', '.join(questions)}: give {{question: option id}}")
        gold = {next(iter(questions)): gold}
    if not isinstance(gold, dict) or not gold:
        raise _Bad("gold", "must be an option id or a non-empty object {question: option id}")
    for question, answer in gold.items():
        if question not in questions:
            raise _Bad(f"gold.{question}", f"policy {name!r} has no such question (it has {', '.join(questions)})")
        ids = [o.id for o in questions[question].options]
        if answer not in ids:
            raise _Bad(f"gold.{question}", f"{answer!r} is not an option (options: {', '.join(ids)})")

    if not isinstance(row["item"], dict):
        raise _Bad("item", f"must be a {policy.item_kind} object")
    try:
        item = parse_item(policy.item_kind, row["item"])
    except InvalidItem as exc:
        raise _Bad("item", "; ".join(exc.errors)) from None
    decisions = build_decisions(policy, item)
    labelled = [
        Labelled(question=q.id, decision=d, gold=gold[q.id])
        for q, d in zip(policy.questions, decisions)
        if q.id in gold
    ]
    return Case(
        source=source,
        line=line,
        case_id=item.item_id,
        kind="policy",
        group=name,
        decisions=labelled,
        formulas={q.id: str(getattr(q.confidence_formula, "value", q.confidence_formula)) for q in policy.questions},
        note=_note(row),
    )


# --- JevBench rows -----------------------------------------------------------------------------


def _question_adapter() -> TypeAdapter:
    from decision_server.systemone.models import Question

    return TypeAdapter(Question)


def _jevbench_case(row: dict, source: str, line: int) -> Case:
    from decision_server.systemone.mapping import question_decision

    _unknown_keys(row, JEVBENCH_KEYS)
    task_id = row.get("id")
    if not isinstance(task_id, str) or not task_id.strip():
        raise _Bad("id", "must be non-empty text")
    family = row.get("family")
    if not isinstance(family, str) or not family.strip():
        raise _Bad("family", "must be non-empty text")
    if "state" not in row:
        raise _Bad("state", "missing")
    try:
        question = _question_adapter().validate_python(row["question"])
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in ("question", *first["loc"]) if p not in ("noul", "choice", "score", "box"))
        raise _Bad(where, first["msg"]) from None
    try:
        decision = question_decision(task_id, question, row["state"])
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        # The top-level field is enough: deeper parts of the location are pydantic's union tags.
        raise _Bad(str(first["loc"][0]) if first["loc"] else "state", first["msg"]) from None

    option_ids = decision.option_ids
    labels = row.get("labels")
    if labels is not None:
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise _Bad("labels", "must be a list of text labels")
        if len(labels) != len(option_ids):
            raise _Bad("labels", f"has {len(labels)} labels for {len(option_ids)} options")
    gold = _expected_option(row.get("expected"), question.type, option_ids, labels, decision)
    return Case(
        source=source,
        line=line,
        case_id=task_id,
        kind="jevbench",
        group=family,
        decisions=[Labelled(question=question.type, decision=decision, gold=gold)],
        formulas={question.type: JEVBENCH_CONFIDENCE},
        note=_note(row),
    )


Expected = Union[str, int, bool, None]


def _expected_option(expected: Expected, qtype: str, option_ids: list[str], labels: list[str] | None, decision: Decision) -> str:
    """The option id `expected` names (label, option id, level text, boolean or level index)."""
    if expected is None:
        raise _Bad("expected", "missing")
    if isinstance(expected, bool):
        if qtype != "noul":
            raise _Bad("expected", f"a boolean answers only a noul question, not {qtype}")
        return "yes" if expected else "no"
    if isinstance(expected, int):
        if qtype != "score":
            raise _Bad("expected", f"an integer level answers only a score question, not {qtype}")
        if not 0 <= expected < len(option_ids):
            raise _Bad("expected", f"level {expected} outside 0..{len(option_ids) - 1}")
        return option_ids[expected]
    if not isinstance(expected, str):
        raise _Bad("expected", "must be a label, a boolean (noul) or an integer level (score)")
    if labels and expected in labels:
        return option_ids[labels.index(expected)]
    if expected in option_ids and qtype != "score":
        return expected
    if qtype == "noul" and expected.lower() in ("yes", "no", "true", "false"):
        return "yes" if expected.lower() in ("yes", "true") else "no"
    if qtype == "score":
        levels = [o.description for o in decision.options]
        if expected in levels:
            return option_ids[levels.index(expected)]
    known = labels or ([o.description for o in decision.options] if qtype == "score" else option_ids)
    raise _Bad("expected", f"{expected!r} names no answer of this task (answers: {', '.join(map(str, known))})")


def iter_decisions(cases: list[Case]) -> Iterator[tuple[Case, Labelled]]:
    for case in cases:
        for labelled in case.decisions:
            yield case, labelled
