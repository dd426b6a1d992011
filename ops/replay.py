"""What a candidate policy would have done to the items a stack already routed: replay over its audit.

    python -m ops.replay --policy candidate.json [--since 2026-11-01] [--table NAME | --stack NAME | --rows audit.jsonl]

Reads the audit rows (the stack's audit table, by name or from its stack's `AuditTableName` output,
or an export: one row per line as DynamoDB holds it, every column a string; `make demo` and `make
soak` leave theirs in `.demo/` and `.soak/`: `audit.jsonl`) and never writes anything. For each audited item of the
candidate's policy name, the candidate decides again from what the audit kept: its rules on the
item as the router saw it, and for a question the model answered, the probabilities that decided
then, judged against the candidate's thresholds (with the letters, a changed temperature rescales
them as the router would: p ** (T_then / T_now), renormalised). The model is not asked again. A
question whose deciding head the candidate replaces cannot be replayed from the audit (the hidden
state a head reads is not kept): such an item is counted as not replayable, with the reason, as is
one whose question no model answered then (a rule did, and the candidate drops the rule), and
one whose audit row does not read (a missing column, decisions that do not validate): each is
counted, with its reason, and the replay goes on.

Printed, candidate against what served: per question a table of the option served (rows) against
the option the candidate gives (columns), the share routed automatically, the precision of the
candidate's automatic answers on items a person reviewed (their answer is the truth; a Wilson 95 %
interval), and the escalations (pages) the candidate adds and removes. Markdown, to paste into a
pull request: every value that comes from the audit (an item id is its sender's text) is escaped by
`markdown_text`, so it reads as text and never as a heading, a table row or a link.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence, TextIO

from decision_contract import confidence, top_two_margin
from decision_router.adapters.review import Unreadable
from decision_router.domain.judging import build_record, rule_entry, threshold_reasons
from decision_router.domain.policies import Policy, Question, Thresholds, load_policy
from decision_router.domain.records import AuditRow, DecisionEntry, DecisionRecord
from decision_router.domain.rules import apply_rules
from decision_router.items import parse_item
from ops.command import DONE, Command, aws_session, stack_outputs

#: A policy, an export or a stack that does not read: bad input (a missing export has its own line).
COMMAND = Command("ops.replay", __doc__, "replay", (ValueError,))


@dataclass
class Replayed:
    """One audited item, as it served and as the candidate would decide it (None: not replayable)."""

    row: AuditRow | Unreadable
    served: list[DecisionEntry] = field(default_factory=list)
    served_route: str = ""
    served_escalate: bool = False
    reviewed: dict[str, str] | None = None  # a person's answers, where one answered
    candidate: DecisionRecord | None = None
    why_not: str | None = None


@dataclass
class Comparison:
    items: list[Replayed] = field(default_factory=list)

    @property
    def replayed(self) -> list[Replayed]:
        return [r for r in self.items if r.candidate is not None]


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|~])")


def markdown_text(value: object) -> str:
    """`value` as inline Markdown text that nothing reads into: one line (line breaks become spaces),
    every character Markdown or a table gives a meaning escaped (`|`, `#`, backticks, brackets,
    emphasis, HTML's `<`, `&`), so an item id cannot start a heading, end a table cell or make a link."""
    text = " ".join(str(value).split())
    text = text.replace("&", "&amp;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95 % by default)."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rethreshold(question: Question, then: DecisionEntry) -> DecisionEntry:
    """The model's answer of then, judged by the candidate's question (ValueError: not replayable)."""
    if not then.probabilities:
        raise ValueError(f"{question.id}: no model answer was kept (an endpoint error, or a rule answered it then)")
    if set(then.probabilities) != set(question.option_ids):
        raise ValueError(f"{question.id}: the options changed ({sorted(then.probabilities)} then)")
    head = question.learned_head
    if then.readout == "head":
        if head is None or head.version != then.head_version:
            raise ValueError(f"{question.id}: the deciding head {then.head_version} is replaced; a head reads the "
                             "model's hidden state, which the audit does not keep")
        probabilities = [then.probabilities[o] for o in question.option_ids]
    else:
        scale = then.temperature / question.temperature
        raw = [then.probabilities[o] ** scale for o in question.option_ids]
        probabilities = [p / sum(raw) for p in raw]
    ranked = sorted(range(len(probabilities)), key=lambda i: -probabilities[i])
    top = ranked[0]
    option = question.options[top].id
    if then.readout == "head" and head is not None:
        thresholds = Thresholds(min_confidence=head.thresholds.min_confidence_for(option),
                                min_margin=head.thresholds.min_margin, min_allowed_token_mass=0.0)
    else:
        thresholds = question.thresholds
    conf = confidence(probabilities, question.confidence_formula)
    margin = top_two_margin(probabilities)
    reasons = threshold_reasons(conf, margin, then.allowed_token_mass or 0.0, thresholds)
    return then.model_copy(update={
        "option_id": option, "probabilities": dict(zip(question.option_ids, probabilities)), "confidence": conf,
        "margin": margin, "temperature": question.temperature, "thresholds": thresholds, "passed": not reasons,
        "reasons": reasons, "why": None})


def replay_row(policy: Policy, row: AuditRow) -> Replayed:
    result = Replayed(row)
    try:
        served = _served(row)
    except ValueError as error:  # pydantic's ValidationError and JSON's decode error too
        result.why_not = f"the audit row does not read: {error}"
        return result
    detail = row.detail()
    reviewed = detail.get("answers") if detail.get("status") == "reviewed" else None
    result.served, result.served_route, result.served_escalate = served, row.route, bool(detail.get("escalated"))
    result.reviewed = reviewed if isinstance(reviewed, dict) else None
    try:
        item = parse_item(row.item_kind, json.loads(row.item))
        hits = apply_rules(policy, item)
        by_question = {d.question: d for d in served}
        entries = []
        for question in policy.questions:
            if question.id in hits:
                entries.append(rule_entry(question, hits[question.id]))
            elif question.id in by_question:
                entries.append(rethreshold(question, by_question[question.id]))
            else:
                raise ValueError(f"{question.id}: not asked then")
        targets = {policy.target(o.id) for q in policy.questions for o in q.options if q is policy.routing_question}
        result.candidate = build_record(policy, item, entries, destinations={t: t for t in targets},
                                        review_timeout_seconds=0)
    except (ValueError, KeyError) as error:
        result.why_not = str(error)
    return result


def _served(row: AuditRow) -> list[DecisionEntry]:
    """The decisions that served, read back (ValueError where they, or the outcome, do not read)."""
    decisions = json.loads(row.decisions)
    if not isinstance(decisions, list):
        raise ValueError(f"decisions: a JSON list expected, got {type(decisions).__name__}")
    row.detail()
    return [DecisionEntry.model_validate(d) for d in decisions]


def compare(policy: Policy, rows: Iterable[AuditRow | Unreadable], since: str | None = None) -> Comparison:
    """Every audited item of the policy's name decided at or after `since`, replayed; a row that
    does not read at all (its policy unknown) is counted as not replayable, with its problem."""
    out = Comparison()
    for row in rows:
        if isinstance(row, Unreadable):
            out.items.append(Replayed(row, why_not=f"the audit row does not read: {row.problem}"))
            continue
        if row.policy_name != policy.name or (since and row.decided_at < since):
            continue
        if not row.decisions or row.decisions == "null":
            continue  # a row without decisions (an incident a noise control held) has nothing to replay
        out.items.append(replay_row(policy, row))
    return out


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def report(policy: Policy, comparison: Comparison, out: TextIO) -> None:
    done = comparison.replayed
    md = markdown_text
    print(f"# Replay of policy {md(repr(policy.name))} version {md(repr(policy.version))} over {len(comparison.items)} "
          f"audited items ({len(done)} replayed)\n", file=out)
    skipped: dict[str, list[str]] = {}
    for r in comparison.items:
        if r.candidate is None:
            skipped.setdefault(str(r.why_not), []).append(r.row.item_id)
    for why, ids in sorted(skipped.items(), key=lambda kv: -len(kv[1])):
        print(f"- not replayable ({len(ids)}): {md(why)} (items: {', '.join(md(i) for i in ids[:10])}"
              f"{', …' if len(ids) > 10 else ''})", file=out)
    if not done:
        return
    auto_then = sum(r.served_route == "auto" for r in done) / len(done)
    auto_now = sum(r.candidate.route == "auto" for r in done if r.candidate) / len(done)
    print(f"\n| | served | candidate |\n|---|---:|---:|\n| routed automatically | {pct(auto_then)} | {pct(auto_now)} |",
          file=out)
    for question in policy.questions:
        rows = [(next((d.option_id for d in r.served if d.question == question.id), None),
                 next(d.option_id for d in r.candidate.decisions if d.question == question.id)) for r in done if r.candidate]
        options = question.option_ids
        counts = Counter(rows)
        print(f"\n**{md(question.id)}**: served (rows) against candidate (columns); {sum(a != b for a, b in rows)} "
              "changed\n", file=out)
        print("| served \\ candidate | " + " | ".join(md(o) for o in options) + " |", file=out)
        print("|---|" + "---:|" * len(options), file=out)
        for then in options:
            print(f"| {md(then)} | " + " | ".join(str(counts[(then, now)] or "") for now in options) + " |", file=out)
    judged = [r for r in done if r.reviewed and r.candidate and r.candidate.route == "auto"]
    right = sum(all(r.reviewed.get(d.question) == d.option_id for d in r.candidate.decisions)  # type: ignore[union-attr]
                for r in judged)
    low, high = wilson(right, len(judged))
    reviewed = sum(1 for r in done if r.reviewed)
    print(f"\nOn the {reviewed} items a person reviewed, the candidate routes {len(judged)} automatically, "
          f"{right} as the person answered" + (f" (precision {pct(right / len(judged))}, 95 % interval "
                                               f"{pct(low)}–{pct(high)})" if judged else "") + ".", file=out)
    added = [md(r.row.item_id) for r in done if r.candidate and r.candidate.escalate and not r.served_escalate]
    removed = [md(r.row.item_id) for r in done if r.candidate and not r.candidate.escalate and r.served_escalate]
    print(f"Pages (escalations) added: {len(added)}{' (' + ', '.join(added[:10]) + ')' if added else ''}; "
          f"removed: {len(removed)}{' (' + ', '.join(removed[:10]) + ')' if removed else ''}.", file=out)


# ------------------------------------------------------------------------------ reading rows
def rows_from_file(path: Path) -> list[AuditRow | Unreadable]:
    """Each line's row; a line that is no audit row is named (its line, its key where it has one)."""
    from pydantic import ValidationError

    from decision_router.validation import describe_errors

    rows: list[AuditRow | Unreadable] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(AuditRow.model_validate_json(line))
        except ValidationError as error:
            try:
                raw = json.loads(line)
            except ValueError:
                raw = None
            columns = raw if isinstance(raw, dict) else {}
            rows.append(Unreadable(str(columns.get("item_id", f"line {number}")), str(columns.get("execution_name", "?")),
                                   f"{path.name}:{number}: " + "; ".join(describe_errors(error))))
    return rows


def rows_from_table(table: str) -> list[AuditRow | Unreadable]:
    """Every row of the audit table (a read-only scan)."""
    from decision_router.adapters.review import AuditTrail

    return AuditTrail(table).all()


def table_of_stack(stack: str, client: Any = None) -> str:
    outputs = stack_outputs(stack, client or aws_session().client("cloudformation"))
    if "AuditTableName" not in outputs:
        raise ValueError(f"stack {stack} has no AuditTableName output")
    return str(outputs["AuditTableName"])


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = COMMAND.parser()
    parser.add_argument("--policy", required=True, help="the candidate policy file")
    parser.add_argument("--since", help="only items decided at or after this time (ISO 8601, e.g. 2026-11-01)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--table", help="the audit table's name")
    source.add_argument("--stack", help="a deployed stack's name (its AuditTableName output)")
    source.add_argument("--rows", type=Path, help="an export of audit rows, one JSON object per line")
    args = parser.parse_args(argv)

    def resolve() -> tuple[Policy, list[AuditRow | Unreadable]]:
        try:
            policy = load_policy(Path(args.policy).resolve())
            rows = (rows_from_file(args.rows) if args.rows else
                    rows_from_table(args.table or table_of_stack(args.stack)))
        except FileNotFoundError as error:
            raise ValueError(f"no audit export at {error.filename} (make demo or make soak writes one; or give "
                             "--stack or --table)") from error
        return policy, rows

    def work(resolved: tuple[Policy, list[AuditRow | Unreadable]]) -> int:
        policy, rows = resolved
        report(policy, compare(policy, rows, args.since), out or sys.stdout)
        return DONE

    return COMMAND.run_resolved(resolve, work)


if __name__ == "__main__":
    sys.exit(main())
