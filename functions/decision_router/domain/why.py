"""The reason for a decision (`Why`), carried by each decision of a record (`DecisionEntry.why`):
the rules evaluated for its question and the one that fired, the noise controls that applied to
an incident, the readout that decided and each threshold it was compared with, and, for a head,
the words of the ticket that moved its answer most (`top_words`) and the evidence fields that did.

A field's effect is the change in the chosen option's probability when the field is left out of
the evidence, scored by the head alone: no second model call. A head reads the model's hidden
state and the lexical features (word and character n-grams, categories) of the evidence's text
(heads.py); leaving a field out recomputes the lexical part without it and keeps the hidden state
(and the letters) of the one forward pass unchanged, although the model read that field too. So
the effect is the field's share through the head's lexical blocks only: a lower bound on what the
field means to the whole answer, cheap enough to compute for every decision.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from decision_contract import softmax

from ..items import Item
from .heads import Head
from .lexical import CHAR_PREFIX, WORD, WORD_PREFIX, State, evidence_text, normalized
from .policies import Policy

#: Fields kept in a trace, the largest effects first (a policy's evidence has a handful).
MAX_FIELDS = 8
#: Words kept in a trace, and named in its one line: the largest contributions first.
MAX_WORDS, LINE_WORDS = 5, 3


class _Why(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RuleCheck(_Why):
    """A rule that answers the question, evaluated against the item (file order)."""

    rule: str
    matched: bool
    fired: bool = Field(description="It answered the question (the first rule that matched).")


class Check(_Why):
    """One threshold the deciding readout's answer was compared with."""

    name: Literal["confidence", "margin", "allowed_token_mass", "novelty"]
    value: float
    threshold: float
    passed: bool = Field(description="The value met its threshold: at least it, or, for novelty (how unlike every "
                         "option the head learned the item is), at most it.")


class FieldEffect(_Why):
    """The chosen option's probability with one evidence field left out (lexical part recomputed,
    hidden state unchanged), and its change: `effect` = with − without (> 0: the field supported
    the answer)."""

    field: str
    without: float
    effect: float


class NoiseTrace(_Why):
    """The noise controls an incident met before it was decided (or held)."""

    grouping: str | None = Field(None, description="The grouping rule whose group the incident is in.")
    group_leader: str | None = Field(None, description="The incident id leading that group (itself when it leads).")
    took_over_from: str | None = Field(None, description="The leader it replaced, being more severe.")
    window: str | None = Field(None, description="The maintenance window that held it.")
    window_action: str | None = None
    flapping_opens: int | None = Field(None, description="Openings of its key within the flapping window.")
    flapping_max: int | None = None
    held: str | None = Field(None, description="grouped | flapping | suppressed | held when a control held it (no decision).")
    held_under: str | None = Field(None, description="The parent incident id it was held under (dependencies).")
    parent_service: str | None = None
    parent_opened: str | None = Field(None, description="When the parent opened (HH:MM, UTC).")
    released_after: str | None = Field(None, description="The parent incident it was held under, then released from.")
    hold_ended: str | None = Field(None, description="Why its hold ended: the parent resolved, is gone or not "
                                                     "paged; the hold's ceiling; or it would page past its parent.")

    def line(self) -> str:
        parts = []
        if self.grouping is not None:
            parts.append(f"group {self.grouping} led by {self.group_leader}"
                         + (f" (took over from {self.took_over_from})" if self.took_over_from else ""))
        if self.window is not None:
            parts.append(f"window {self.window} ({self.window_action})")
        if self.flapping_opens is not None:
            parts.append(f"opened {self.flapping_opens}x (flapping above {self.flapping_max})")
        if self.held_under is not None:
            parts.append(f"held under {self.parent_service} incident {self.held_under}, opened {self.parent_opened}")
        if self.released_after is not None:
            parts.append(f"released from under {self.released_after}: {self.hold_ended or 'it resolved'}")
        if self.held is not None:
            parts.append(f"held: {self.held}")
        return ", ".join(parts) or "no noise control applied"


class Why(_Why):
    rules: list[RuleCheck] = Field(default_factory=list, description="The rules that answer this question.")
    rule: str | None = Field(None, description="The rule that fired.")
    readout: Literal["rule", "letters", "head"] | None = Field(None, description="What decided; null: nothing could.")
    option: str | None = None
    checks: list[Check] = Field(default_factory=list)
    fields: list[FieldEffect] | None = Field(None, description="A head's evidence fields, largest effect first.")
    fields_note: str | None = Field(None, description="Why there are no field effects, when there are none.")
    words: list[str] | None = Field(None, description="A head's words of the evidence that pushed it most towards "
                                    "its answer (its TF-IDF weights for the option × their values), largest first.")
    noise: NoiseTrace | None = None
    linked: str | None = Field(None, description="The open incident the ticket is linked to, in one line.")

    def line(self) -> str:
        """The trace in one line, as the console and the demo table show it."""
        if self.readout == "rule":
            head = f"rule {self.rule} → {self.option}"
        elif self.readout is None:
            head = "not decided"
        else:
            head = f"{self.readout} → {self.option}"
            compared = [f"{c.name[:4]} {c.value:.2f}{'≥' if c.passed else '<'}{c.threshold:.2f}" for c in self.checks
                        if c.name not in ("allowed_token_mass", "novelty") or (c.name == "allowed_token_mass" and not c.passed)]
            compared += [f"novelty {c.value:.2f}≤{c.threshold:.2f}" for c in self.checks if c.name == "novelty" and c.passed]
            if compared:
                head += " (" + ", ".join(compared) + ")"
        parts = [head]
        parts += [f"unlike any option it learned: novelty {c.value:.2f} > {c.threshold:.2f}" for c in self.checks
                  if c.name == "novelty" and not c.passed]
        if self.words:
            parts.append("the words " + ", ".join(f'"{w}"' for w in self.words[:LINE_WORDS]))
        if self.fields is not None:
            moved = [f for f in self.fields if abs(f.effect) >= MOVED]
            # one field in play says nothing its words do not; several: which of them mattered
            if moved and (len(self.fields) > 1 or not self.words):
                parts.append("by " + ", ".join(f"{f.field} {f.effect:+.2f}" for f in moved[:2]))
            elif not moved and not self.words:
                parts.append("no evidence field moved it")
        if self.readout != "rule" and self.rules:
            parts.append(f"{sum(r.matched for r in self.rules)}/{len(self.rules)} rules matched")
        if self.noise is not None:
            parts.append(self.noise.line())
        if self.linked is not None:
            parts.append(self.linked)
        return "; ".join(parts)


#: The least change of the chosen option's probability that a field is said to have moved: what
#: shows as ±0.01 at two decimals (a smaller one printed `+0.00` and said nothing).
MOVED = 0.005


def rule_checks(policy: Policy, item: Item, question: str) -> tuple[list[RuleCheck], str | None]:
    """Each rule answering `question`, evaluated as rules.apply_rules does (file order, the first
    match answers), and the id of the one that fired."""
    checks, fired = [], None
    for rule in policy.rules:
        if question not in rule.answers:
            continue
        matched = rule.matches(item)
        first = matched and fired is None
        if first:
            fired = rule.id
        checks.append(RuleCheck(rule=rule.id, matched=matched, fired=first))
    return checks, fired


def threshold_checks(confidence: float, margin: float, mass: float | None, min_confidence: float,
                     min_margin: float, min_mass: float, novelty: float | None = None,
                     max_novelty: float | None = None) -> list[Check]:
    """The comparisons judging.threshold_reasons and judging.novelty_reasons make (a value at its
    threshold passes)."""
    checks = [Check(name="confidence", value=confidence, threshold=min_confidence, passed=confidence >= min_confidence),
              Check(name="margin", value=margin, threshold=min_margin, passed=margin >= min_margin)]
    if mass is not None and min_mass > 0:
        checks.append(Check(name="allowed_token_mass", value=mass, threshold=min_mass, passed=mass >= min_mass))
    if novelty is not None and max_novelty is not None:
        checks.append(Check(name="novelty", value=novelty, threshold=max_novelty, passed=novelty <= max_novelty))
    return checks


def evidence_fields(head: Head) -> list[str]:
    """The state keys a head's lexical blocks read, in order."""
    named = ((head.text.fields if head.text else []) + (head.sentence.fields if head.sentence else [])
             + (head.categorical.fields if head.categorical else []))
    return list(dict.fromkeys(named))


def field_effects(head: Head, state: State, hidden: Sequence[float] | None, letter_logits: Sequence[float] | None,
                  chosen: int, decided: Sequence[float] | None = None) -> tuple[list[FieldEffect] | None, str | None]:
    """The chosen option's probability change with each evidence field left out, scored by the
    head alone: its lexical part recomputed without the field, the model's part (hidden state,
    letters) computed once and kept. Largest |effect| first, at most MAX_FIELDS; or None and why.

    `decided`, the head's probabilities of the decision (in `options` order), saves recounting
    the text for a field the text block does not read: the head's logits are its temperature
    times their logarithms up to a constant (softmax ignores it), less the field's indicator."""
    if not isinstance(state, dict):
        return None, "the evidence is free text: no fields to leave out"
    fields = [f for f in evidence_fields(head) if state.get(f) is not None]
    if not fields:
        return None, "the head reads none of the evidence's fields"
    # the fields read as text (by TF-IDF or the sentence embedding): leaving one out recomputes them
    text_fields = set(head.text.fields if head.text else []) | set(head.sentence.fields if head.sentence else [])
    model: list[float] | None = None
    full: list[float] | None = None
    if decided is not None and all(p > 0.0 for p in decided):
        full = [head.temperature * math.log(p) for p in decided]
    else:
        model = head.model_logits(hidden, letter_logits)
        full = [a + b for a, b in zip(head.lexical_logits(state), model)]
    with_all = softmax(full, head.temperature)[chosen]
    effects = []
    for field in fields:
        if field not in text_fields:  # a category only: its indicator's weights come off
            column = head.indicator_logits(f"{field}={state[field]}")
            logits = full if column is None else [z - w for z, w in zip(full, column)]
        else:
            if model is None:
                model = head.model_logits(hidden, letter_logits)
            without = {k: v for k, v in state.items() if k != field}
            logits = [a + b for a, b in zip(head.lexical_logits(without), model)]
        p = softmax(logits, head.temperature)[chosen]
        effects.append(FieldEffect(field=field, without=p, effect=with_all - p))
    effects.sort(key=lambda e: -abs(e.effect))
    return effects[:MAX_FIELDS], None


def top_words(head: Head, state: State, chosen: int, limit: int = MAX_WORDS) -> list[str]:
    """The words of the evidence that pushed the head most towards option `chosen`: each TF-IDF
    feature's contribution, the head's weight for the option times the feature's value in the
    evidence's vector, given to the words it came from (a word pair's split between its two words,
    a character n-gram's among the words it lies within; one that spans a space, none). The words
    with a positive sum, largest first (ties: first in the text), at most `limit`; none when the
    head has no text block. Deterministic: the same evidence and head give the same words."""
    text = head.text
    if text is None:
        return []
    evidence = evidence_text(state, text.fields)
    words = list(dict.fromkeys(WORD.findall(normalized(evidence))))
    if not words:
        return []
    low, high = text.char_ngrams
    within: dict[str, list[str]] = {}  # a character n-gram → the words it lies within, in text order
    for word in words:
        grams = {word[i:i + n] for n in range(low, high + 1) for i in range(len(word) - n + 1)}
        for gram in grams:
            within.setdefault(gram, []).append(word)
    row = text.weights[chosen]
    score = dict.fromkeys(words, 0.0)
    for column, value in head.text_vector(state).items():
        term = text.terms[column]
        if term.startswith(WORD_PREFIX):
            parts = [w for w in term[len(WORD_PREFIX):].split(" ") if w in score]
        else:
            parts = within.get(term[len(CHAR_PREFIX):], []) if term.startswith(CHAR_PREFIX) else []
        for word in parts:
            score[word] += row[column] * value / len(parts)
    ranked = sorted((-s, i, w) for i, (w, s) in enumerate(score.items()) if s > 0.0)
    return [w for _, _, w in ranked[:limit]]
