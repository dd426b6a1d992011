"""Labelled decisions read from JSONL: our policy format and the public JevBench task format.

A line becomes one `Case`: the decisions that share its state (one request; the incident policy's
two questions go as one batch) with the gold option of each. A bad line becomes a `RowError`
naming the file, line and field; the run goes on without it. A field this tool does not know is
kept with the case as metadata and reported as a `RowWarning`; the row is still scored.

Both formats take two optional metadata fields: `split` (text, e.g. "train", "test", JevBench's
"public") selects rows (`load_file(..., splits=...)`, the CLI's `--split`), and `group` (text or
integer) names rows that belong together (paraphrases of one item, one customer's thread): the
cross-validation folds never split a group.

Policy format (one item as the pipeline receives it, plus its gold answers)::

    {"policy": "support-ticket", "item": {...ticket...}, "gold": "billing"}
    {"policy": "incident", "item": {...incident...}, "gold": {"priority": "P2", "team": "data"}}

`gold` is an option id when the policy has one question, else {question: option id} (questions
left out are not scored). An optional `note` (text) is carried into the report. This is also the
shape the pipeline's labelled-example export writes.

JevBench format (one task, as published)::

    {"id", "family", "state", "question": {"type": "noul"|"choice"|"score", "instructions",
     "criteria"}, "labels", "expected", "split", "group", "provenance": {"source", "license",
     "label_basis", "exclude_reason", ...}}

Questions map onto decisions through the System One mapping (`decision_server.systemone.mapping`,
one definition): noul → options yes, no; choice → the criteria in order; score → levels "0", "1", …
(index 0 lowest). `labels` is the task's answer set *by name*: noul ["no", "yes"] (JevBench's
order; the options stay yes, no, and the names say which is which), choice the criteria names,
score ["0", "1", …]. Labels are matched to options by name, never by position. `expected` is a
label, a boolean (noul), an integer level (score; JSON 2 or 2.0) or a level's text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Union

from pydantic import TypeAdapter, ValidationError

from decision_contract import Decision

#: Metadata both formats may carry; `split` selects rows, `group` keeps rows in one CV fold.
METADATA_KEYS = {"split", "group", "note"}
POLICY_KEYS = {"policy", "item", "gold"} | METADATA_KEYS
JEVBENCH_OWN = {"id", "family", "state", "question", "labels", "expected", "provenance"}
JEVBENCH_KEYS = JEVBENCH_OWN | METADATA_KEYS
JEVBENCH_CONFIDENCE = "normalized_peak"
#: How `Loaded.skipped` counts rows that carry no split when `--split` selects some.
NO_SPLIT = "(no split)"


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
    #: The policy name, or the JevBench family: what accuracy is broken down by.
    family: str
    decisions: list[Labelled]
    #: Confidence formula name per question (the policy's; normalized peak for JevBench).
    formulas: dict[str, str]
    note: str | None = None
    split: str | None = None
    #: The row's declared `group` (rows of one group stay in one cross-validation fold).
    group: str | None = None
    #: JevBench `provenance` ({source, license, label_basis, exclude_reason, …}), as given.
    provenance: dict[str, Any] | None = None
    #: Fields this tool does not know, kept as they were (each one is also a `RowWarning`).
    unknown: dict[str, Any] = field(default_factory=dict)
    #: The item's language where it declares one (accuracy is also broken down by it).
    language: str | None = None

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"

    @property
    def cv_group(self) -> str:
        """The fold unit: the declared group, else the row itself."""
        return f"group {self.group}" if self.group is not None else f"row {self.where}"


@dataclass(frozen=True)
class RowError:
    source: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.field}: {self.message}"


class RowWarning(RowError):
    """Something about a row that was kept and scored anyway (e.g. an unknown field)."""


class _Bad(ValueError):
    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


@dataclass
class Loaded:
    cases: list[Case] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)
    warnings: list[RowWarning] = field(default_factory=list)
    #: Rows left out by a split selection, counted per split (`NO_SPLIT` for rows without one).
    skipped: dict[str, int] = field(default_factory=dict)


def load_file(path: str | Path, limit: int | None = None, splits: Iterable[str] | None = None) -> Loaded:
    """Every usable case of a JSONL file (up to `limit`), an error for every bad line and a
    warning for every unknown field. With `splits`, only rows whose `split` is one of them are
    read; the others are counted in `Loaded.skipped` (a bad line still counts as an error when
    its split cannot be read)."""
    path = Path(path)
    selected = set(splits) if splits is not None else None
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
            row = decode_row(text)
            if selected is not None and not _selected(row, selected):
                split = row.get("split")
                key = split if isinstance(split, str) else NO_SPLIT if split is None else json.dumps(split)
                loaded.skipped[key] = loaded.skipped.get(key, 0) + 1
                continue
            case = case_from_row(row, str(path), number, policies)
        except _Bad as bad:
            loaded.errors.append(RowError(str(path), number, bad.field, str(bad)))
            continue
        loaded.cases.append(case)
        for name in case.unknown:
            loaded.warnings.append(RowWarning(str(path), number, name, "unknown field, kept as metadata (the row is scored)"))
    return loaded


def _selected(row: dict, splits: set[str]) -> bool:
    return isinstance(row.get("split"), str) and row["split"] in splits


def decode_row(text: str) -> dict[str, Any]:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Bad("(line)", f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(row, dict):
        raise _Bad("(line)", "must be a JSON object")
    return row


def parse_row(text: str, source: str, line: int, policies: dict[str, Any] | None = None) -> Case:
    return case_from_row(decode_row(text), source, line, policies)


def case_from_row(row: dict[str, Any], source: str, line: int, policies: dict[str, Any] | None = None) -> Case:
    if "policy" in row or {"item", "gold"} <= set(row):
        return _policy_case(row, source, line, {} if policies is None else policies)
    # A row with two or more of JevBench's own fields is a JevBench task: its errors are that format's.
    if "question" in row or "expected" in row or len(set(row) & JEVBENCH_OWN) >= 2:
        try:
            return _jevbench_case(row, source, line)
        except _Bad as bad:
            task = row.get("id")
            if isinstance(task, str) and task.strip():
                raise _Bad(bad.field, f"JevBench task {task!r}: {bad}") from None
            raise
    raise _Bad(
        "(line)",
        "neither format: a policy row has 'policy', 'item', 'gold'; a JevBench task has "
        "'id', 'family', 'state', 'question', 'labels', 'expected'",
    )


def _metadata(row: dict, known: set[str]) -> dict[str, Any]:
    """The metadata fields every format shares, checked; unknown fields kept as they are."""
    note = row.get("note")
    if note is not None and not isinstance(note, str):
        raise _Bad("note", "must be text")
    split = row.get("split")
    if split is not None and (not isinstance(split, str) or not split.strip()):
        raise _Bad("split", "must be non-empty text such as 'train', 'test' or 'public'")
    group = row.get("group")
    if group is not None:
        if isinstance(group, bool) or not isinstance(group, (str, int)) or (isinstance(group, str) and not group.strip()):
            raise _Bad("group", "must be non-empty text or an integer naming rows that belong together")
        group = str(group)
    return {
        "note": note,
        "split": split,
        "group": group,
        "unknown": {key: row[key] for key in sorted(set(row) - known)},
    }


# --- policy rows -------------------------------------------------------------------------------


def _policy_case(row: dict, source: str, line: int, policies: dict[str, Any]) -> Case:
    from decision_router.domain.model_requests import build_decisions
    from decision_router.domain.policies import load_policy
    from decision_router.items import InvalidItem, parse_item

    metadata = _metadata(row, POLICY_KEYS)
    for key in ("policy", "item", "gold"):
        if key not in row:
            raise _Bad(key, "missing")
    name = row["policy"]
    if not isinstance(name, str) or not name:
        raise _Bad("policy", "must be a policy name such as 'support-ticket'")
    if name not in policies:
        try:
            policies[name] = load_policy(name)
        except Exception as exc:  # noqa: BLE001 - the policy loader's own message says what is wrong
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
        family=name,
        decisions=labelled,
        formulas={q.id: str(getattr(q.confidence_formula, "value", q.confidence_formula)) for q in policy.questions},
        language=getattr(item, "language", None),
        **metadata,
    )


# --- JevBench rows -----------------------------------------------------------------------------


def _question_adapter() -> TypeAdapter:
    from decision_server.systemone.models import Question

    return TypeAdapter(Question)


def _jevbench_case(row: dict, source: str, line: int) -> Case:
    from decision_server.systemone.mapping import question_decision

    metadata = _metadata(row, JEVBENCH_KEYS)
    task_id = row.get("id")
    if not isinstance(task_id, str) or not task_id.strip():
        raise _Bad("id", "must be non-empty text")
    family = row.get("family")
    if not isinstance(family, str) or not family.strip():
        raise _Bad("family", "must be non-empty text")
    for key in ("state", "question"):
        if key not in row:
            raise _Bad(key, "missing")
    provenance = row.get("provenance")
    if provenance is not None and not isinstance(provenance, dict):
        raise _Bad("provenance", "must be an object such as {source, license, label_basis, exclude_reason}")
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
    _check_labels(row.get("labels"), question.type, option_ids)
    gold = _expected_option(row.get("expected"), question.type, option_ids, decision)
    return Case(
        source=source,
        line=line,
        case_id=task_id,
        kind="jevbench",
        family=family,
        decisions=[Labelled(question=question.type, decision=decision, gold=gold)],
        formulas={question.type: JEVBENCH_CONFIDENCE},
        provenance=provenance,
        **metadata,
    )


#: The label set each question type publishes, as JevBench writes it (for messages).
_LABEL_FORMS = {"noul": '["no", "yes"]', "choice": "the criteria names", "score": '["0", "1", …] (one per level)'}


def _check_labels(labels: Any, qtype: str, option_ids: list[str]) -> None:
    """`labels` names the task's answers; they must be exactly the options' names (any order).

    The names carry the meaning: JevBench lists noul labels as ["no", "yes"] while the decision
    offers yes first, so a label's position says nothing about its option.
    """
    if labels is None:
        return
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise _Bad("labels", "must be a list of text labels")
    if len(labels) != len(option_ids):
        raise _Bad("labels", f"has {len(labels)} labels for {len(option_ids)} options")
    if len(set(labels)) != len(labels) or set(labels) != set(option_ids):
        canonical = ["no", "yes"] if qtype == "noul" else option_ids
        raise _Bad(
            "labels",
            f"{labels} are not this task's answers: a {qtype} task's labels are {_LABEL_FORMS[qtype]}, "
            f"here {json.dumps(canonical)}",
        )


Expected = Union[str, int, float, bool, None]


def _expected_option(expected: Expected, qtype: str, option_ids: list[str], decision: Decision) -> str:
    """The option id `expected` names: a label, a boolean (noul), a level index (score) or a level's text."""
    if expected is None:
        raise _Bad("expected", "missing or null: a task without a gold answer cannot be scored")
    if isinstance(expected, bool):
        if qtype != "noul":
            raise _Bad("expected", f"a boolean answers only a noul question, not {qtype}")
        return "yes" if expected else "no"
    if isinstance(expected, float) and expected.is_integer():
        expected = int(expected)  # JSON 2.0 is the level 2
    if isinstance(expected, int):
        if qtype != "score":
            raise _Bad("expected", f"an integer level answers only a score question, not {qtype}")
        if not 0 <= expected < len(option_ids):
            raise _Bad("expected", f"level {expected} outside 0..{len(option_ids) - 1}")
        return option_ids[expected]
    if not isinstance(expected, str):
        raise _Bad("expected", "must be a label, a boolean (noul) or an integer level (score)")
    if expected in option_ids:
        return expected
    if qtype == "noul" and expected.lower() in ("yes", "no", "true", "false"):
        return "yes" if expected.lower() in ("yes", "true") else "no"
    if qtype == "score":
        levels = [o.description for o in decision.options]
        if expected in levels:
            return option_ids[levels.index(expected)]
    known = option_ids + ([o.description for o in decision.options] if qtype == "score" else [])
    raise _Bad("expected", f"{expected!r} names no answer of this task (answers: {', '.join(map(str, known))})")

