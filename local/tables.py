"""The demo's printed report, 120 columns wide: one table row per decision of each item (who decided,
the top option, the confidence against its minimum, the route, where the item ended up, its audit
row), each decision's reason on an indented line below it (wrapped, never cut), and a few lines that
explain the numbers: what each head read, and why there are fewer audit rows than items."""

from __future__ import annotations

import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from local.outcomes import Outcome

if TYPE_CHECKING:
    from decision_router.domain.heads import Head
    from decision_router.domain.records import AuditRow, DecisionEntry

#: The terminal width the report is written for.
WIDTH = 120
#: The table's columns and the widest each may be: together with their separators, WIDTH.
COLUMNS = [("item", 16), ("decided by", 14), ("top option", 16), ("p", 4), ("conf vs min", 12), ("route", 9),
           ("ended up in", 24), ("audit", 11)]
HEADERS = [name for name, _ in COLUMNS]
INDENT = "    "
#: What the noise controls do with an incident instead of routing it (the intake audits it).
HELD = ("grouped", "flapping", "suppressed")


@dataclass
class Row:
    """One table row, and the lines printed under it (the decision's reason, the item's)."""

    cells: list[str]
    notes: list[str]


def _decision_cells(decision: DecisionEntry) -> tuple[list[str], str]:
    """(decided by (question: readout), top option, its p, confidence vs its minimum) and the
    decision's note: why (the trace's line) and, where the letters decided instead of a head, why."""
    option = decision.option_id or "-"
    extra = []
    probability = "-"
    if decision.source == "model":
        p = (decision.probabilities or {}).get(option)
        top = option
        probability = f"{p:.2f}" if p is not None else "-"
        minimum = decision.thresholds.min_confidence
        confidence = decision.confidence or 0.0  # a model decision always has one
        check = f"{confidence:.2f} {'>=' if confidence >= minimum else '<'} {minimum:.2f}"
        readout = decision.readout or "letters"
        if decision.tier == "words":  # the head answered from the words alone: the endpoint was not asked
            readout = "head (words, no endpoint)"
        # the model's letters are said only where they decided: a head's answer is told by its words
        if readout != "head" and decision.head_skipped:
            readout = "letters"
            extra.append(f"head skipped: {decision.head_skipped}")
    elif decision.source == "rule":
        top, check, readout = option, "rule", "rule"
    else:
        top, check, readout = "-", "-", "error"
        extra.append("the endpoint failed: " + "; ".join(decision.reasons))
    why = decision.why.line() if decision.why is not None else None
    note = f"{decision.question}: " + "; ".join(([why] if why else []) + extra) if why or extra else ""
    return [f"{decision.question}: {readout}", top, probability, check], note


def table_rows(outcomes: list[Outcome]) -> list[Row]:
    """One row per decision of each item; under the item's last row, each decision's note and the
    item's reason (why it went to review, was rejected or dead-lettered)."""
    rows = []
    for outcome in outcomes:
        where = ", ".join(outcome.queues) or ("(not sent)" if outcome.item.rejected else "(nowhere)")
        if outcome.escalated:
            where += " + paged"  # escalated: the on-call was paged
        decisions: list[DecisionEntry | None] = [*outcome.record.decisions] if outcome.record else []
        notes = []
        for index, decision in enumerate(decisions or [None]):
            cells, note = _decision_cells(decision) if decision else (["-", "-", "-", "-"], "")
            if note:
                notes.append(note)
            first = index == 0
            rows.append(Row([outcome.item.label if first else "", *cells, outcome.route if first else "",
                             where if first else "", _audit_cell(outcome) if first else ""], []))
        if outcome.reason:
            notes.append(f"{outcome.route}: {outcome.reason}")
        rows[-1].notes = notes
    return rows


def _audit_cell(outcome: Outcome) -> str:
    if outcome.audit:
        return outcome.audit
    return "at review" if outcome.status == "RUNNING" and outcome.route == "review" else "-"


def wrapped(text: str, width: int = WIDTH) -> str:
    """A line of prose under the table, wrapped to the report's width."""
    return textwrap.fill(text, width, break_on_hyphens=False, break_long_words=False)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def format_table(rows: list[Row], headers: list[str] = HEADERS, width: int = WIDTH) -> str:
    """The rows in columns no wider than COLUMNS allow (a longer value is cut, with `…`: the full
    text is in the report and the notes), each row's notes wrapped under it; no line over `width`."""
    caps = [cap for _, cap in COLUMNS]
    widths = [min(cap, max(len(h), *(len(r.cells[i]) for r in rows))) if rows else len(h)
              for i, (h, cap) in enumerate(zip(headers, caps))]

    def line(cells: list[str]) -> str:
        return "  ".join(_fit(c, w).ljust(w) for c, w in zip(cells, widths)).rstrip()

    lines = [line(headers), line(["-" * w for w in widths])]
    for row in rows:
        lines.append(line(row.cells))
        for note in row.notes:
            lines += textwrap.wrap(note, width, initial_indent=INDENT, subsequent_indent=INDENT + "  ",
                                   break_on_hyphens=False)
    return "\n".join(lines)


def head_reads(head: Head) -> str:
    """What a head reads, in words: the evidence's text and categories, and the model's hidden
    state or letters only where it has their blocks and its fit gave them weight."""
    parts = []
    if head.text is not None:
        parts.append("the item's words (" + ", ".join(head.text.fields) + ")")
    if head.categorical is not None:
        parts.append("its categories (" + ", ".join(head.categorical.fields) + ")")
    model_weight = head.fit.model_weight
    if head.reads_hidden_state and model_weight > 0:
        parts.append("the model's hidden state")
    if head.letters is not None and model_weight > 0:
        parts.append("the model's letters")
    return " and ".join(parts) if parts else "its bias alone"


def reads_model(head: Head) -> bool:
    """The head's answer depends on the model's signals (not a text-only head)."""
    return head.reads_model and head.fit.model_weight > 0


def explain(outcomes: list[Outcome], model: Path | None,
            head_of: Callable[[str, str], Head | None] = lambda policy, question: None) -> list[str]:
    """The lines under the table. `head_of(policy name, question)`: the head a record's question
    was decided by, so that what each head read is said as it is."""
    decided = [o.record for o in outcomes if o.record is not None]
    reviews = [r for r in decided if r.route == "review"]
    entries = [(r.policy.name, d) for r in decided for d in r.decisions]
    lines = [f"{len(decided)} item(s) decided: {len(decided) - len(reviews)} routed automatically, "
             f"{len(reviews)} sent to human review; "
             f"{sum(1 for o in outcomes if o.route in ('rejected', 'failed') or o.problem)} rejected or dead-lettered."]
    quiet = [o.source_outcome for o in outcomes if o.source_outcome]
    if quiet:
        counts = ", ".join(f"{quiet.count(k)} {k}" for k in sorted(set(quiet)))
        lines.append(f"{len(quiet)} raw source event(s) routed nothing, as they should: {counts} "
                     "(an OK resolves its open incident, a re-delivery is routed once, an update pages nobody again; "
                     "grouped, flapping and suppressed: held by the policy's noise controls).")
    latencies = sorted(d.latency_seconds for _, d in entries if d.source == "model" and d.latency_seconds is not None)
    if latencies:
        lines.append(f"Model time per decision: median {latencies[len(latencies) // 2]:.2f}s, "
                     f"max {latencies[-1]:.2f}s over {len(latencies)} model decision(s).")
    by_head: dict[tuple[str, str], list[DecisionEntry]] = {}
    for policy, d in entries:
        if d.readout == "head":
            by_head.setdefault((policy, d.question), []).append(d)
    heads = {key: head_of(*key) for key in by_head}
    for (policy, question), decisions in by_head.items():
        head = heads[(policy, question)]
        reads = head_reads(head) if head is not None else "what its file says"
        lines.append(f"{policy} {question}: {len(decisions)} decision(s) by a learned head (make fit) that reads "
                     f"{reads}; {sum(d.passed for d in decisions)} confident enough to route alone.")
    skipped = {d.head_skipped for _, d in entries if d.head_skipped}
    if skipped:
        lines.append("Heads not applied, the letters decided instead: " + "; ".join(sorted(skipped))
                     + " (refit for this model: make fit FIT_ARGS=\"--model …\").")
    if reviews:
        lines += _why_reviews(reviews, model, heads)
    return lines


def _why_reviews(reviews: list, model: Path | None, heads: dict) -> list[str]:
    """Why items still go to review, said of what decided them: a bigger model helps the letters and
    a head that reads the model, not a head that reads the words alone."""
    undecided = [(r.policy.name, d) for r in reviews for d in r.decisions if d.source == "model" and not d.passed]
    text_only = sorted({f"{p} {d.question}" for p, d in undecided if d.readout == "head"
                        and heads.get((p, d.question)) is not None and not reads_model(heads[(p, d.question)])})
    by_model = [(p, d) for p, d in undecided if f"{p} {d.question}" not in text_only]
    lines = []
    if text_only:
        lines.append(f"Reviews from text-only heads ({', '.join(text_only)}): they read the item's words, not the model, "
                     "so a bigger model does not change them; more labelled items do (answer reviews, then make fit).")
    if by_model:
        if model is None:
            lines.append("Reviews from the model's answers: the embedded SmolLM2-135M is a 135M-parameter toy; its "
                         "letters are near chance, and heads that read its hidden state route only what they are "
                         "confident of at the policies' thresholds. Bring a real model: make demo MODEL=path/to/model.gguf "
                         "(then make fit).")
        else:
            lines.append(f"Items under the policies' thresholds go to review; check {model.name}'s calibration "
                         "and the thresholds with make eval.")
    return lines


def audit_lines(outcomes: list[Outcome], rows: list[AuditRow], path: Path) -> list[str]:
    """The audit export in words: its rows by outcome, and each input line with no row of its own
    and why (rejected, a re-delivery, a raw event that routed nothing, a review still open ...)."""
    by_outcome = Counter(row.outcome for row in rows)
    audited_ids = {row.item_id for row in rows}
    missing: Counter[str] = Counter()
    for outcome in outcomes:
        if outcome.item.rejected:
            missing["rejected before sending (never reached an intake)"] += 1
        elif outcome.duplicate_of:
            missing[f"the same item as an earlier line ({outcome.duplicate_of}: one item, one row)"] += 1
        elif outcome.source_outcome:
            if outcome.source_outcome in HELD and outcome.item.item_id in audited_ids:
                continue  # the incident intake audits what a noise control holds
            missing[f"{outcome.source_outcome}: a source event that routed nothing new"] += 1
        elif outcome.item.item_id in audited_ids:
            continue
        elif outcome.record is not None and outcome.record.route == "review" and outcome.status == "RUNNING":
            missing["waiting for a person (audited when the review is answered)"] += 1
        elif outcome.audit_missing:
            missing["routed, but its row could not be written (the workflow DLQ keeps it for make redrive)"] += 1
        elif outcome.problem:
            missing["dead-lettered (its DLQ keeps it with the reason)"] += 1
        else:
            missing["not audited"] += 1
    lines = [f"Audit: {len(rows)} row(s) in {path} for {len(outcomes)} input line(s) ("
             + ", ".join(f"{n} {k}" for k, n in sorted(by_outcome.items())) + ")."]
    if missing:
        lines.append("Input lines with no row of their own: "
                     + "; ".join(f"{n} {why}" for why, n in missing.most_common()) + ".")
    lines.append("make replay POLICY=candidate.json replays a policy change over these rows.")
    return lines
