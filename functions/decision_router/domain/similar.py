"""Similar items: the resolved items nearest to one in review, so a reviewer sees how look-alikes
were answered, by whom and when.

The vector is the item's words, not the model's hidden state: with the embedded model the hidden
state finds worse neighbours than the text (docs/similar-items.md measures both). It is the
TF-IDF of the item's evidence over the vocabulary of the policy's routing head (the lexical block
the head reads anyway), cut to its `SIMILAR_TERMS` heaviest terms and kept by term, not by column:
two heads' vocabularies share their terms, so an item resolved under an older head stays
comparable after a relearning run promotes a new one. Cosine compares two of them.
"""

from __future__ import annotations

import math
import re
from typing import Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..items import Item, item_ref
from .lexical import evidence_text, term_counts, tfidf
from .model_requests import build_state
from .policies import Policy

#: Terms kept per item: the neighbours found with 32 agree with the gold answer about as often as
#: with all of an item's several hundred terms (docs/similar-items.md), at a tenth of the size.
SIMILAR_TERMS = 32
#: Resolved items shown beside an item in review.
NEAREST = 3
#: Characters of an item's text kept to show it.
SUMMARY_CHARS = 280
#: Who resolves an item without a person.
ROUTER = "router"
#: Days a resolved item is kept (DynamoDB's TTL removes it after): the stack's
#: ResolvedItemsRetentionDays, this when unset.
RETENTION_DAYS = 180

# What a summary never keeps, masked in this order (an email's digits are not a phone's). A card:
# 13 to 19 digits, spaces or dashes between. An IBAN: a country, two check digits, 11 to 30
# letters or digits in groups. A phone: 9 to 15 digits in two or more groups (or after a "+"); a
# date (8 digits), a ticket id glued to its letters (T-12345, INC-2024-001) or a short number stays.
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_CARD = re.compile(r"(?<![\w-])\d(?:[ -]?\d){12,18}(?![\w-])")
_PHONE = re.compile(r"(?<![\w-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,5}(?:[ .-]\d{2,5}){1,4}(?![\w-])"
                    r"|(?<![\w-])\+\d{9,15}(?![\w-])")
MASKS = (("[email]", _EMAIL), ("[iban]", _IBAN), ("[card]", _CARD), ("[phone]", _PHONE))

Kind = Literal["router", "reviewer"]

Terms = dict[str, float]


class ResolvedItem(BaseModel):
    """An item with its final answer: routed by the router, or answered by a reviewer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str
    item_kind: str
    item_id: str
    item_source: str | None = Field(None, description="Where the item came from (None: kept before it was).")
    summary: str = Field(description=f"The item's text, its first {SUMMARY_CHARS} characters.")
    answers: dict[str, str] = Field(description="question → the final answer.")
    target: str | None = Field(description="Where it went (the routing answer's queue).")
    resolved_by: str = Field(description=f"'{ROUTER}', or the reviewer as the audit names them.")
    resolved_at: str
    terms: Terms = Field(description=f"The item's vector: its {SIMILAR_TERMS} heaviest TF-IDF terms, unit length.")

    def ref(self) -> str:
        """Which item it is (`items.item_ref`; a row kept before its source was has none in it)."""
        return item_ref(self.item_kind, self.item_source or "", self.item_id)


class SimilarItem(BaseModel):
    """A resolved item as shown beside another: what it said, how it was answered, how alike."""

    model_config = ConfigDict(frozen=True)

    item_kind: str
    item_id: str
    summary: str
    answers: dict[str, str]
    target: str | None
    resolved_by: str
    resolved_at: str
    similarity: float = Field(description="Cosine of the two items' vectors, 0 to 1.")
    by: Kind


def item_terms(policy: Policy, item: Item) -> Terms:
    """The item's vector, or {} when the policy's routing question has no head with a text block
    (then an item has no similar items)."""
    head = policy.routing_question.learned_head
    if head is None or head.text is None:
        return {}
    text = head.text
    counts = term_counts(evidence_text(build_state(policy, item), text.fields), text.word_ngrams, text.char_ngrams)
    weights = tfidf(counts, head._index, text.idf)
    heaviest = sorted(weights.items(), key=lambda pair: (-pair[1], pair[0]))[:SIMILAR_TERMS]
    norm = math.sqrt(sum(value * value for _, value in heaviest))
    if norm == 0:
        return {}
    return {text.terms[column]: round(value / norm, 4) for column, value in heaviest}


def mask_personal(text: str) -> str:
    """`text` with its emails, card numbers, IBANs and phone numbers replaced by what they were
    ("[email]", "[card]", "[iban]", "[phone]"): a resolved item shows how a look-alike was
    answered, not whom it was about."""
    for mask, pattern in MASKS:
        text = pattern.sub(_phone if mask == "[phone]" else mask, text)
    return text


def _phone(found: re.Match[str]) -> str:
    return "[phone]" if _phone_digits(found.group()) else found.group()


def _phone_digits(found: str) -> bool:
    """Whether a phone-shaped match has a phone's 9 to 15 digits (a date or a version has fewer)."""
    return 9 <= sum(char.isdigit() for char in found) <= 15


def summary(policy: Policy, item: Item) -> str:
    """The item's text as a reviewer reads it: its free-text fields (those the policy cuts to a
    length: a subject, a body), one a line, personal data masked (`mask_personal`)."""
    state = build_state(policy, item)
    text = mask_personal("\n".join(str(state[entry.key]) for entry in policy.state
                                    if entry.max_chars is not None and isinstance(state.get(entry.key), str)))
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1].rstrip() + "…"


def kind(resolved: ResolvedItem) -> Kind:
    """Who answered it, as a kind: the router, or a reviewer (each kind has its own window)."""
    return "router" if resolved.resolved_by == ROUTER else "reviewer"


def cosine(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    if len(a) > len(b):
        a, b = b, a
    return sum(value * b.get(term, 0.0) for term, value in a.items())


def nearest(terms: Mapping[str, float], resolved: Sequence[ResolvedItem], *, exclude: str | None = None,
            k: int = NEAREST) -> list[SimilarItem]:
    """The `k` resolved items nearest to `terms`, nearest first; an item resolved twice (answered,
    then corrected) counts once, by its latest answer; nothing that shares no term. Items are
    told apart, and `exclude`d, by their identity (kind, source and id: `ResolvedItem.ref`)."""
    latest: dict[str, ResolvedItem] = {}
    for row in resolved:
        ref = row.ref()
        if ref != exclude and (ref not in latest or row.resolved_at > latest[ref].resolved_at):
            latest[ref] = row
    scored = [(cosine(terms, row.terms), row) for row in latest.values()]
    scored = [(score, row) for score, row in scored if score > 0]
    scored.sort(key=lambda pair: (-pair[0], pair[1].item_id))
    return [SimilarItem(item_kind=row.item_kind, item_id=row.item_id, summary=row.summary, answers=row.answers,
                        target=row.target, resolved_by=row.resolved_by, resolved_at=row.resolved_at,
                        similarity=round(score, 4), by=kind(row))
            for score, row in scored[:k]]


def resolved_item(policy: Policy, item: Item, answers: Mapping[str, str], *, resolved_by: str,
                  resolved_at: str) -> ResolvedItem | None:
    """What is kept of a resolved item, or None when the policy gives it no vector."""
    terms = item_terms(policy, item)
    if not terms:
        return None
    answer = answers.get(policy.routing_question.id)
    target = None
    if answer is not None and answer in policy.routing_question.option_ids:
        target = policy.target(answer)
    return ResolvedItem(policy=policy.name, item_kind=item.kind, item_id=item.item_id, item_source=item.origin,
                        summary=summary(policy, item),
                        answers=dict(answers), target=target, resolved_by=resolved_by, resolved_at=resolved_at,
                        terms=terms)
