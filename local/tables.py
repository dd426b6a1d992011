"""The demo's printed report: one table row per decision of each item (who decided, the top
option, the confidence against its minimum, the decision's reason in one line, where the item ended up) and a few lines that explain
the numbers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from local.outcomes import Outcome

if TYPE_CHECKING:
    from decision_router.domain.records import DecisionEntry


def _decision_cells(decision: DecisionEntry) -> list[str]:
    """decided by (question: readout), top option (p), confidence vs its minimum, why (the trace's line)."""
    option = decision.option_id or "-"
    readout: str
    if decision.source == "model":
        p = (decision.probabilities or {}).get(option)
        top = f"{option} ({p:.2f})" if p is not None else option
        minimum = decision.thresholds.min_confidence
        confidence = decision.confidence or 0.0  # a model decision always has one
        check = f"{confidence:.2f} {'>=' if confidence >= minimum else '<'} {minimum:.2f}"
        readout = decision.readout or "letters"
        if readout == "head":
            letters = decision.letter_probabilities or {}
            best = max(letters, key=letters.__getitem__) if letters else None
            readout = f"head (letters: {best} {letters[best]:.2f})" if best else "head"
        elif decision.head_skipped:
            readout = "letters (head skipped)"
    elif decision.source == "rule":
        top, check, readout = f"{option} (rule {decision.rule})", "rule", "rule"
    else:
        top, check, readout = "-", "endpoint error", "endpoint error"
    why = decision.why.line() if decision.why is not None else "-"
    return [f"{decision.question}: {readout}", top, check, why]


def table_rows(outcomes: list[Outcome]) -> list[list[str]]:
    rows = []
    for outcome in outcomes:
        where = ", ".join(outcome.queues) or ("(not sent)" if outcome.item.rejected else "(nowhere)")
        if outcome.escalated:
            where += " + escalated"
        decisions: list[DecisionEntry | None] = [*outcome.record.decisions] if outcome.record else []
        for index, decision in enumerate(decisions or [None]):
            cells = _decision_cells(decision) if decision else ["-", "-", "-", "-"]
            first = index == 0
            rows.append([outcome.item.label if first else "", *cells,
                         outcome.route if first else "", where if first else "",
                         _audit_cell(outcome) if first else "", outcome.reason if first else ""])
    return rows


def _audit_cell(outcome: Outcome) -> str:
    if outcome.audit:
        return outcome.audit
    return "after review" if outcome.status == "RUNNING" and outcome.route == "review" else "-"


HEADERS = ["item", "decided by", "top option (p)", "confidence vs min", "why", "route", "ended up in", "audit",
           "why (review / rejection)"]


def format_table(rows: list[list[str]], headers: list[str] = HEADERS) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    widths[-1] = len(headers[-1])  # the last column is free text: let it run on

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def explain(outcomes: list[Outcome], model: Path | None) -> list[str]:
    decided = [o.record for o in outcomes if o.record is not None]
    reviews = [r for r in decided if r.route == "review"]
    entries = [d for r in decided for d in r.decisions]
    lines = [f"{len(decided)} item(s) decided: {len(decided) - len(reviews)} routed automatically, "
             f"{len(reviews)} sent to human review; "
             f"{sum(1 for o in outcomes if o.route in ('rejected', 'failed') or o.problem)} rejected or dead-lettered."]
    quiet = [o.source_outcome for o in outcomes if o.source_outcome]
    if quiet:
        counts = ", ".join(f"{quiet.count(k)} {k}" for k in sorted(set(quiet)))
        lines.append(f"{len(quiet)} raw source event(s) routed nothing, as they should: {counts} "
                     "(an OK resolves its open incident, a re-delivery is routed once, an update pages nobody again; "
                     "grouped, flapping and suppressed: held by the policy's noise controls).")
    latencies = sorted(d.latency_seconds for d in entries if d.source == "model" and d.latency_seconds is not None)
    if latencies:
        lines.append(f"Model time per decision: median {latencies[len(latencies) // 2]:.2f}s, "
                     f"max {latencies[-1]:.2f}s over {len(latencies)} model decision(s).")
    by_head = [d for d in entries if d.readout == "head"]
    if by_head:
        lines.append(f"{len(by_head)} decision(s) read by a learned head over the model's hidden state (fitted on "
                     f"labelled items with make fit), {sum(d.passed for d in by_head)} confident enough to route alone.")
    skipped = {d.head_skipped for d in entries if d.head_skipped}
    if skipped:
        lines.append("Heads not applied, the letters decided instead: " + "; ".join(sorted(skipped))
                     + " (refit for this model: make fit FIT_ARGS=\"--model …\").")
    if reviews:
        if model is None:
            lines.append("Why still reviews: the embedded SmolLM2-135M is a 135M-parameter toy; its letters are "
                         "near chance, and the heads route only what they are confident of at the policies' "
                         "thresholds. Bring a real model: make demo MODEL=path/to/model.gguf (then make fit).")
        else:
            lines.append(f"Items under the policies' thresholds go to review; check {model.name}'s calibration "
                         "and the thresholds with make eval.")
    return lines

