"""The gate a relearned head must pass before it decides in service.

The candidate and the head in service are scored on the SAME held-out slice, the newest labels
by time (what the router will meet next), through the routing function's own code
(`judging.model_entry`, at each head's own thresholds): accuracy, log loss, the share routed
automatically and how sure its automatic answers are (by the confidence bounds the fitter sets
thresholds with, `precision_lower_bound`: not shown under the question's target, 1 -
`learning.max_auto_error`, nor less sure than the head in service's: `_less_sure`), and, where the question
protects options (priority), how many protected gold answers were auto-assigned a less urgent
option. A candidate is promoted only when it is not worse on every one of them; otherwise the
verdict names each way it is worse. Too few labels to fit or to judge on, or a head that does
not beat always-the-commonest-answer on its own held-out folds (shuffled labels), is refused
before any comparison.

No option may lose recall: a candidate that finds fewer of any option's gold answers (a priority
it now calls something else) than the head in service, on the held-out slice or the shipped test
split, is refused with the figures.

Who labelled counts: no one reviewer may give more than MAX_REVIEWER_SHARE of the reviewed labels
a candidate trains on (with the shipped labels) nor of the held-out slice it is judged on, and
the held-out slice is drawn first from reviewers who do not dominate the reviews. A reviewer is an
authenticated identity (`Example.reviewer`: the console's Cognito `sub` or the IAM caller of the
review function, as relearning reads and verifies it), never a name the reviewer typed; labels
without a verified identity all count as one reviewer, UNAUTHENTICATED. A held-out slice one reviewer still dominates is refused: the
candidate would be judged by the labels it learned from. Where the shipped test split (labels
nobody can change from the console) is given, the candidate must also not be worse on it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from decision_contract import ModelInfo
from decision_router.domain.precision import target_of
from decision_router.domain.precision_bound import precision_lower_bound
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
#: The most one reviewer may give of the reviewed labels trained on, and of the held-out slice.
MAX_REVIEWER_SHARE = 0.5
#: Labels without a verified reviewer identity count as this one reviewer (nobody vouches for them apart).
UNAUTHENTICATED = "(unauthenticated)"


@dataclass(frozen=True)
class Verdict:
    promote: bool
    reason: str
    current: dict[str, Any]
    candidate: dict[str, Any]
    #: Both heads on the shipped test split ({"current", "candidate"}), where it was given.
    test_split: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"promoted": self.promote, "reason": self.reason, "current": self.current, "candidate": self.candidate,
                **({"test_split": self.test_split} if self.test_split else {})}


@dataclass(frozen=True)
class ReviewedSplit:
    """The reviewed labels of one question, split for the gate: `train` (oldest first), `held_out`,
    and per reviewer the labels trained on by nobody (over the reviewer's cap)."""

    train: list[Example]
    held_out: list[Example]
    not_trained: dict[str, int]


def reviewer_of(example: Example) -> str:
    return example.reviewer or UNAUTHENTICATED


def _check_share(max_share: float) -> float:
    if not 0 < max_share <= 1:
        raise ValueError(f"max reviewer share {max_share!r}: must be more than 0 and at most 1")
    return max_share


def reviewed_split(reviewed: Sequence[tuple[str, Example]], *, trusted: int = 0,
                   max_share: float = MAX_REVIEWER_SHARE) -> ReviewedSplit:
    """The reviewed examples (label time, example) split into what the candidate trains on and
    what it is judged on. The held-out slice: HELD_OUT_SHARE of them (at least MIN_HELD_OUT when
    there are enough), newest first, taken first from reviewers who would not give more than
    `max_share` of the training labels (`trusted`: the shipped labels trained on besides), then
    from the others; no reviewer more than `max_share` of it. The rest is trained on, each reviewer
    at most `max_share` of the training labels (its newest kept): `not_trained` counts the others."""
    max_share = _check_share(max_share)
    ordered = [e for _, e in sorted(reviewed, key=lambda pair: pair[0])]
    n_held = min(len(ordered), max(MIN_HELD_OUT, int(round(HELD_OUT_SHARE * len(ordered)))))
    counts = Counter(reviewer_of(e) for e in ordered)
    dominant = {r for r, n in counts.items() if n > max_share * (trusted + len(ordered)) + TOLERANCE}
    cap = max(1, math.floor(max_share * n_held + TOLERANCE))
    held: set[int] = set()  # positions in `ordered`
    taken: Counter[str] = Counter()
    for independent in (True, False):
        for position in range(len(ordered) - 1, -1, -1):
            reviewer = reviewer_of(ordered[position])
            if len(held) == n_held:
                break
            if (reviewer in dominant) == independent or taken[reviewer] >= cap or position in held:
                continue
            held.add(position)
            taken[reviewer] += 1
    rest = [e for i, e in enumerate(ordered) if i not in held]
    train, not_trained = _capped(rest, trusted, max_share)
    return ReviewedSplit(train, [e for i, e in enumerate(ordered) if i in held], not_trained)


def _capped(examples: list[Example], trusted: int, max_share: float) -> tuple[list[Example], dict[str, int]]:
    """The examples less each reviewer's oldest labels beyond `max_share` of all trained on."""
    kept = list(examples)
    dropped: Counter[str] = Counter()
    while max_share < 1:
        counts = Counter(reviewer_of(e) for e in kept)
        total = trusted + len(kept)
        over = [(n, r) for r, n in counts.items() if n > max_share * total + TOLERANCE]
        if not over:
            break
        n, reviewer = max(over)
        allowed = math.floor(max_share / (1 - max_share) * (total - n) + TOLERANCE)  # n <= share * (others + n)
        excess = n - allowed
        mine = [e for e in kept if reviewer_of(e) == reviewer][:excess]  # the oldest
        drop = {id(e) for e in mine}
        kept = [e for e in kept if id(e) not in drop]
        dropped[reviewer] += excess
    return kept, dict(dropped)


def held_out_slice(reviewed: Sequence[tuple[str, Example]], *, trusted: int = 0,
                   max_share: float = MAX_REVIEWER_SHARE) -> tuple[list[Example], list[Example]]:
    """(train, held out) of `reviewed_split`: the reviewed labels to train on (each reviewer
    capped) and to judge on (the newest, no reviewer dominating it)."""
    split = reviewed_split(reviewed, trusted=trusted, max_share=max_share)
    return split.train, split.held_out


def head_scores(question: Any, head: Any, examples: Sequence[Example], model: ModelInfo) -> dict[str, Any]:
    """A head (None: the letters) on held-out examples, as the routing function judges them, its
    novelty part aside: every labelled example is in scope, so novelty would only send the share of
    them its budget chose to review (a cost the budget sets, not a worse head), and a candidate
    with one would look as if it routed less than a head in service without one."""
    from decision_router.domain.judging import model_entry

    if head is not None and getattr(head, "novelty", None) is not None:
        head = head.model_copy(update={"novelty": None})
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
        "auto_routed_lower_bound": _bound(precision_lower_bound(sum(auto) - wrong_auto, sum(auto))),
        # the upper bound: one minus the lower bound of the wrong share, by the same definition
        "auto_routed_upper_bound": _bound(None if not any(auto) else 1.0 - (precision_lower_bound(wrong_auto, sum(auto)) or 0.0)),
        **({"protected_auto_assigned_lower": int(under)} if protected else {}),
        "recall": recall(question.option_ids, chosen, gold),
    }


def recall(option_ids: Sequence[str], chosen: Sequence[int], gold: Sequence[int]) -> dict[str, float]:
    """Per option with gold answers here: the share of them the head chose (options nobody gave: absent)."""
    found: dict[str, float] = {}
    for index, option in enumerate(option_ids):
        mine = [c for c, g in zip(chosen, gold) if g == index]
        if mine:
            found[option] = round(sum(c == index for c in mine) / len(mine), 4)
    return found


def promotion_verdict(question: Any, current_head: Any, candidate_head: Any, fit: Any, held_out: Sequence[Example],
          n_train: int, model: ModelInfo, *, test_split: Sequence[Example] = (),
          max_share: float = MAX_REVIEWER_SHARE) -> Verdict:
    """Whether the candidate may replace the head in service, and why (not). `test_split`: the
    shipped test split (trusted labels), a second gate where given."""
    max_share = _check_share(max_share)
    current = head_scores(question, current_head, held_out, model) if held_out else {}
    if n_train < MIN_TRAIN:
        return Verdict(False, f"too few labels: {n_train} to fit on, at least {MIN_TRAIN}", current, {})
    if len(held_out) < MIN_HELD_OUT:
        return Verdict(False, f"too few new labels to judge on: {len(held_out)} newest, at least {MIN_HELD_OUT}",
                       current, {})
    (top, n_top), = Counter(reviewer_of(e) for e in held_out).most_common(1)
    if n_top > max_share * len(held_out) + TOLERANCE:
        return Verdict(False, f"one reviewer ({top}) gave {n_top} of the {len(held_out)} labels to judge on, more "
                       f"than {max_share:.0%}: the candidate would be judged by the labels it learned from", current, {})
    candidate = head_scores(question, candidate_head, held_out, model)
    if fit is not None and not fit.beats_chance:
        return Verdict(False, "the candidate does not beat always-the-commonest-answer on its own held-out folds "
                       f"(chance {fit.chance_rate:.2f}): its labels carry no signal", current, candidate)
    worse = _worse(question, current, candidate)
    slice_ = f"on the {len(held_out)} newest labels"
    if worse:
        return Verdict(False, f"worse than the head in service {slice_}: " + "; ".join(worse), current, candidate)
    if not test_split:
        return Verdict(True, f"not worse than the head in service on any measure {slice_}", current, candidate)
    trusted = {"current": head_scores(question, current_head, test_split, model),
               "candidate": head_scores(question, candidate_head, test_split, model)}
    worse = _worse(question, trusted["current"], trusted["candidate"], safety_only=True)
    if worse:
        return Verdict(False, f"worse than the head in service on the {len(test_split)} labels of the shipped test "
                       "split: " + "; ".join(worse), current, candidate, trusted)
    return Verdict(True, f"not worse than the head in service on any measure {slice_}, nor on the "
                   f"{len(test_split)} labels of the shipped test split", current, candidate, trusted)


def _worse(question: Any, current: dict[str, Any], candidate: dict[str, Any], safety_only: bool = False) -> list[str]:
    """Each way the candidate's scores are worse than the head in service's. `safety_only`: each
    option's recall, accuracy, wrong automatic answers and protected answers only (a set the router no longer meets may be
    routed less automatically, or with less confidence, by a head that learned newer labels)."""
    worse = []
    if candidate["accuracy"] < current["accuracy"] - TOLERANCE:
        worse.append(f"accuracy {candidate['accuracy']:.3f} < {current['accuracy']:.3f}")
    if not safety_only and candidate["log_loss"] > current["log_loss"] + TOLERANCE:
        worse.append(f"log loss {candidate['log_loss']:.3f} > {current['log_loss']:.3f}")
    if not safety_only and candidate["auto_routed_share"] < current["auto_routed_share"] - TOLERANCE:
        worse.append(f"routes {candidate['auto_routed_share']:.0%} automatically < {current['auto_routed_share']:.0%}")
    unsure = _less_sure(question, current, candidate)
    if unsure:
        worse.append(unsure)
    if candidate.get("protected_auto_assigned_lower", 0) > current.get("protected_auto_assigned_lower", 0):
        worse.append(f"auto-assigns {candidate['protected_auto_assigned_lower']} protected answers "
                     f"({', '.join(question.learning.protect)}) a less urgent option > "
                     f"{current['protected_auto_assigned_lower']}")
    # Each option's gold answers found as often: a poisoned option (P2 learned as P4) shows here.
    for option, was in current.get("recall", {}).items():
        now = candidate.get("recall", {}).get(option, was)
        if now < was - TOLERANCE:
            worse.append(f"recall of {option} {now:.3f} < {was:.3f}")
    return worse


def _bound(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _less_sure(question: Any, current: dict[str, Any], candidate: dict[str, Any]) -> str | None:
    """The precision criterion, on the confidence bound the fitter sets thresholds with
    (`precision_lower_bound`), not on the point estimate: refused when the candidate's automatic
    answers show, with 95 % confidence, a precision under the question's target (their upper
    bound below it), or when they are less sure than the head in service's on the same labels
    (their lower bound under both the target and the head in service's). A held-out slice of a
    few dozen labels rarely shows a 95 % target by itself; it can show a candidate worse."""
    bound, upper = candidate.get("auto_routed_lower_bound"), candidate.get("auto_routed_upper_bound")
    if bound is None or upper is None:
        return None  # nothing routed automatically promises nothing
    target, serving = target_of(question), current.get("auto_routed_lower_bound")
    wrong = f"wrong {candidate['auto_routed_error']:.1%} of the time"
    if upper < target - TOLERANCE:
        return f"its automatic answers show under {upper:.1%} precision with 95 % confidence ({wrong}), under the target {target:.1%}"
    if serving is not None and bound < min(target, serving) - TOLERANCE:
        return (f"its automatic answers show {bound:.1%} precision with 95 % confidence ({wrong}), less than the head "
                f"in service's {serving:.1%} (target {target:.1%})")
    return None
