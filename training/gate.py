"""The gate a relearned head must pass before it decides in service.

The candidate and the head in service are scored on the SAME held-out slice, the newest labels
by time (what the router will meet next), through the routing function's own code
(`judging.model_entry`, at each head's own thresholds): accuracy, log loss, the share routed
automatically and how often those automatic answers were wrong (at most the question's
`learning.max_auto_error`, or no worse than the head in service), and, where the question
protects options (priority), how many protected gold answers were auto-assigned a less urgent
option. A candidate is promoted only when it is not worse on every one of them; otherwise the
verdict names each way it is worse. Too few labels to fit or to judge on, or a head that does
not beat always-the-commonest-answer on its own held-out folds (shuffled labels), is refused
before any comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from decision_contract import ModelInfo
from evaluation import metrics

from .features import Example

#: Fewer labelled decisions than this to fit on: refused (a head needs several per option).
MIN_TRAIN = 40
#: Fewer newest labels than this to judge on: refused (the comparison would be noise).
MIN_HELD_OUT = 15
#: The newest share of a question's reviewed labels held out to judge on.
HELD_OUT_SHARE = 0.25
#: Differences smaller than this are ties (rounding of the head file's weights).
TOLERANCE = 1e-9


@dataclass(frozen=True)
class Verdict:
    promote: bool
    reason: str
    current: dict[str, Any]
    candidate: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"promoted": self.promote, "reason": self.reason, "current": self.current, "candidate": self.candidate}


def held_out_slice(reviewed: Sequence[tuple[str, Example]]) -> tuple[list[Example], list[Example]]:
    """(older, newest): the reviewed examples split by their label time, the newest
    HELD_OUT_SHARE (at least MIN_HELD_OUT when there are enough) held out."""
    ordered = [e for _, e in sorted(reviewed, key=lambda pair: pair[0])]
    n_held = min(len(ordered), max(MIN_HELD_OUT, int(round(HELD_OUT_SHARE * len(ordered)))))
    return ordered[:len(ordered) - n_held], ordered[len(ordered) - n_held:]


def score(question: Any, head: Any, examples: Sequence[Example], model: ModelInfo) -> dict[str, Any]:
    """A head (None: the letters) on held-out examples, as the routing function judges them."""
    from decision_router.domain.judging import model_entry

    q = question.with_head(head)
    entries = [model_entry(q, e.result(model), e.state) for e in examples]
    gold = [e.gold for e in examples]
    probabilities = [np.array([entry.probabilities[o] for o in e.option_ids]) for entry, e in zip(entries, examples)]
    chosen = [e.option_ids.index(entry.option_id) for entry, e in zip(entries, examples)]
    auto = [entry.passed for entry in entries]
    wrong_auto = sum(a and c != g for a, c, g in zip(auto, chosen, gold))
    protected = [question.option_ids.index(o) for o in question.learning.protect]
    under = sum(a and g in protected and c > g for a, c, g in zip(auto, chosen, gold))
    return {
        "head_version": head.version if head is not None else None,
        "decisions": len(examples),
        "accuracy": round(float(np.mean([c == g for c, g in zip(chosen, gold)])), 4),
        "log_loss": round(metrics.log_loss(probabilities, gold), 4),
        "auto_routed_share": round(sum(auto) / len(auto), 4),
        "auto_routed_error": round(wrong_auto / sum(auto), 4) if any(auto) else 0.0,
        **({"protected_auto_assigned_lower": int(under)} if protected else {}),
    }


def judge(question: Any, current_head: Any, candidate_head: Any, fit: Any, held_out: Sequence[Example],
          n_train: int, model: ModelInfo) -> Verdict:
    """Whether the candidate may replace the head in service, and why (not)."""
    current = score(question, current_head, held_out, model) if held_out else {}
    if n_train < MIN_TRAIN:
        return Verdict(False, f"too few labels: {n_train} to fit on, at least {MIN_TRAIN}", current, {})
    if len(held_out) < MIN_HELD_OUT:
        return Verdict(False, f"too few new labels to judge on: {len(held_out)} newest, at least {MIN_HELD_OUT}",
                       current, {})
    candidate = score(question, candidate_head, held_out, model)
    if fit is not None and not fit.beats_chance:
        return Verdict(False, "the candidate does not beat always-the-commonest-answer on its own held-out folds "
                       f"(chance {fit.chance_rate:.2f}): its labels carry no signal", current, candidate)
    worse = []
    if candidate["accuracy"] < current["accuracy"] - TOLERANCE:
        worse.append(f"accuracy {candidate['accuracy']:.3f} < {current['accuracy']:.3f}")
    if candidate["log_loss"] > current["log_loss"] + TOLERANCE:
        worse.append(f"log loss {candidate['log_loss']:.3f} > {current['log_loss']:.3f}")
    if candidate["auto_routed_share"] < current["auto_routed_share"] - TOLERANCE:
        worse.append(f"routes {candidate['auto_routed_share']:.0%} automatically < {current['auto_routed_share']:.0%}")
    allowed = max(question.learning.max_auto_error, current["auto_routed_error"])
    if candidate["auto_routed_error"] > allowed + TOLERANCE:
        worse.append(f"its automatic answers are wrong {candidate['auto_routed_error']:.1%} of the time "
                     f"> {allowed:.1%} (max_auto_error {question.learning.max_auto_error:.1%})")
    if candidate.get("protected_auto_assigned_lower", 0) > current.get("protected_auto_assigned_lower", 0):
        worse.append(f"auto-assigns {candidate['protected_auto_assigned_lower']} protected answers "
                     f"({', '.join(question.learning.protect)}) a less urgent option > "
                     f"{current['protected_auto_assigned_lower']}")
    slice_ = f"on the {len(held_out)} newest labels"
    if worse:
        return Verdict(False, f"worse than the head in service {slice_}: " + "; ".join(worse), current, candidate)
    return Verdict(True, f"not worse than the head in service on any measure {slice_}", current, candidate)
