"""Live precision: the automatic answers checked on a random sample of items, and their figure.

A policy's `precision_check.sample_rate` (or a question's own) holds that share of the items the
router would route automatically for a reviewer instead (`sampled`, applied by
`judging.build_record`): the item waits for the reviewer's answer, which routes it, like any
review, and is compared with the automatic answer it was held with (`check_tally`). Holding the
item, rather than routing it and opening a second kind of review task beside it, keeps one review
path (the task token, the review queue, the console, the overdue escalation, the labelled example);
it costs the sampled items (say 2 %) the reviewer's latency, and a check nobody answers in time
goes the way of any overdue review (the escalation queue).

Which items are sampled is decided by a draw from the policy and the item's full key
(`check_draw`): a retry, a redelivery or a second judgement of the same item draws the same, and a
question's rate compares with the same draw, so questions with equal rates are checked together.
The item's key is the sender's to choose (its id, and a digest of what it sent), so in a stack the
draw is an HMAC under a key the sender never sees (the stack's head signing key, with a purpose of
its own: domain/signatures.py CHECK_DRAW): no sender can work out which of its variants would be
checked, or never be. Without a key (a local run, a test without a stack) it is a plain hash.

A check is blind: the console shows its reviewer neither the automatic answer it measures nor what
would reveal it (`blinded`), so the reviewer's answer is their own, not a confirmation.

The tally (`CheckCounts`, one row per question and one per option, adapters/precision_tally.py)
counts the checked answers and those the reviewer confirmed; its figure (`PrecisionFigure`) is the
realized precision and its lower bound by the fitter's own definition
(`precision_bound.precision_lower_bound`), against the question's target
(1 - `learning.max_auto_error`, what the fitter set its thresholds for). Corrections of automatic
routes (the console's "This was wrong") are counted beside it (`corrected`) but never in it: only
wrong answers get reported, so they would bias any estimate; they are a count to watch.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from .policies import Policy, Question
from .precision_bound import PRECISION_CONFIDENCE, items_needed, precision_lower_bound
from .records import DecisionEntry, DecisionRecord
from .signatures import CHECK_DRAW, sign

#: The route reason of an item held to check its automatic answers.
CHECK_REASON = "precision check"


#: What `sampled` gets the stack's draw key from: bytes, or None where no key is configured.
DrawKey = Callable[[], "bytes | None"]


class DrawKeyUnavailable(RuntimeError):
    """The stack's draw key could not be read: no item is sampled (each routes as its thresholds
    say) rather than one drawn by what its sender controls."""


def check_draw(policy: str, item_key: str, key: bytes | None = None) -> float:
    """The item's draw in [0, 1), the same for every judgement of the same item under the same
    policy: HMAC-SHA256 under the stack's `key` (CHECK_DRAW's purpose) of the policy and the item's
    full key, which no sender can compute; None (no key configured: a local run) the sha256 alone."""
    if key is None:
        digest = hashlib.sha256(f"{policy}\n{item_key}".encode("utf-8")).digest()
    else:
        digest = bytes.fromhex(sign(key, CHECK_DRAW, policy, item_key))
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def sample_rate(policy: Policy, question: Question) -> float:
    """The question's share of checked automatic answers: its own setting, else the policy's."""
    return (question.precision_check or policy.precision_check).sample_rate


def sampled(policy: Policy, item_key: str, entries: Sequence[DecisionEntry], key: DrawKey | None = None) -> list[str]:
    """The questions of an automatically routed item whose answer is to be checked: those the model
    answered (a rule's answer is the policy's, not a guess) whose rate exceeds the item's draw.
    `key` gives the stack's draw key (read only when some rate could sample the item); a key that
    cannot be read (DrawKeyUnavailable) samples nothing."""
    rates = {e.question: sample_rate(policy, policy.question(e.question)) for e in entries if e.source == "model"}
    if not any(rate > 0 for rate in rates.values()):
        return []
    try:
        secret = key() if key is not None else None
    except DrawKeyUnavailable:
        return []
    draw = check_draw(policy.name, item_key, secret)
    return [question for question, rate in rates.items() if draw < rate]


def check_reason(policy: Policy, questions: Sequence[str]) -> str:
    """The route reason of an item held for a check: which questions, at which rates."""
    rates = ", ".join(f"{q} at {sample_rate(policy, policy.question(q)):g}" for q in questions)
    return f"{CHECK_REASON}: the automatic answer is sampled for review ({rates})"


def check_tally(record: DecisionRecord, answers: Mapping[str, str]) -> dict[str, tuple[str, bool]]:
    """Per checked question the reviewer answered: (the automatic answer, whether the reviewer gave it)."""
    return {d.question: (d.option_id, answers[d.question] == d.option_id)
            for d in record.decisions if d.check and d.option_id is not None and d.question in answers}


def corrected_answers(record: DecisionRecord, answers: Mapping[str, str]) -> dict[str, str]:
    """Per question the model answered automatically and a correction changed: the wrong answer."""
    return {d.question: d.option_id for d in record.decisions
            if d.source == "model" and d.option_id is not None and answers.get(d.question, d.option_id) != d.option_id}


class CheckCounts(BaseModel):
    """A question's (or one of its options') tally of checked automatic answers."""

    model_config = ConfigDict(extra="forbid")

    checked: int = Field(0, ge=0, description="Automatic answers a reviewer checked (the random sample).")
    right: int = Field(0, ge=0, description="Of those, the reviewer gave the automatic answer.")
    corrected: int = Field(0, ge=0, description="Automatic answers a reviewer corrected (reported, not sampled).")


class PrecisionFigure(BaseModel):
    """The live precision of a question's automatic answers, as the metric and the gate read it."""

    checked: int
    right: int
    corrected: int
    precision: float | None = Field(description="right / checked; None before any check.")
    lower_bound: float | None = Field(description="Its one-sided Clopper–Pearson bound at `confidence`.")
    confidence: float
    target: float = Field(description="The precision the question's thresholds promise (1 - max_auto_error).")
    items_needed: int = Field(description="The fewest checks, all right, whose bound could reach the target.")
    below_target: bool = Field(description="At least `items_needed` checks, and their lower bound under the target.")

    def line(self) -> str:
        if not self.checked:
            return f"no automatic answer checked yet (target {self.target:.1%}); {self.corrected} corrected"
        return (f"{self.right} of {self.checked} checked automatic answers right ({self.precision:.1%}, at least "
                f"{self.lower_bound:.1%} with {self.confidence:.0%} confidence; target {self.target:.1%}); "
                f"{self.corrected} corrected")


def precision_figure(counts: CheckCounts, target: float, level: float = PRECISION_CONFIDENCE) -> PrecisionFigure:
    """The figure of a tally against `target`. Fewer checks than `items_needed` never read as below
    the target: so few could not show it even all right."""
    if counts.right > counts.checked:
        raise ValueError(f"{counts.right} right among {counts.checked} checked answers")
    bound = precision_lower_bound(counts.right, counts.checked, level)
    needed = items_needed(target, level)
    return PrecisionFigure(checked=counts.checked, right=counts.right, corrected=counts.corrected,
                           precision=counts.right / counts.checked if counts.checked else None,
                           lower_bound=bound, confidence=level, target=target, items_needed=needed,
                           below_target=counts.checked >= needed and bound is not None and bound < target)


def target_of(question: Question) -> float:
    """The precision the question's automatic answers promise (what `make fit` sets thresholds for)."""
    return 1.0 - question.learning.max_auto_error
