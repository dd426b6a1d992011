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

# What a summary and a vector never keep, masked in this order (an email's digits are not a
# phone's, a card's groups are not a phone's). An email, also written out ("jane(at)example.org",
# "jane [at] example [dot] org", "jane at example dot org": the bare word "at" only with a dot
# spelled out, so "error at line.py" stays). A name where a sender gives it: after "my name is"
# (one to three capitalised words), "I am", "I'm" or "this is" (two or three: a first and a last
# name), and alone at the end of a line after a sign-off ("Regards,", "Thanks"); a name anywhere
# else stays. An IBAN: a country, two check digits, 11 to 30 letters or digits in groups, in
# capitals; in any other case only when it is written whole or in groups of four and its check
# digits hold (ISO 13616's mod 97: a token of letters and digits rarely passes). A card: 13 to
# 19 digits, run together or in groups with one separator throughout (a space, a dash, a dot or
# a slash); with dots or slashes (dates, versions, paths and addresses are written so too) only
# in groups of 3 to 7 digits and when its Luhn check holds. A phone: 9 to 15 digits in two or more groups (or after a "+"); a
# date (8 digits), a ticket id glued to its letters (T-12345, INC-2024-001) or a short number stays.
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_AT = r"\s*[(\[{<]\s*at\s*[)\]}>]\s*"
_DOT = r"\s*[(\[{<]\s*dot\s*[)\]}>]\s*|\s+dot\s+"
_EMAIL_WRITTEN = re.compile(rf"(?i)(?<![\w.+-])[\w.+-]+(?:{_AT}[\w-]+(?:(?:{_DOT}|\.)[\w-]+)+"
                            rf"|\s+at\s+[\w-]+(?:(?:{_DOT})[\w-]+)+)(?![\w-])")
_NAME_WORD = r"[A-ZÀ-ÖØ-Þ][a-zß-öø-ÿ]+(?:[-'’][A-ZÀ-ÖØ-Þ]?[a-zß-öø-ÿ]+)?"
#: Capitalised words after "this is" or "I am" that start a sentence, not a name.
_NOT_A_NAME = (r"(?!(?:Not|Very|Really|Still|So|Just|Also|Now|Again|The|An?|My|Our|Your|It|This|That|Urgent"
               r"|Unable|Getting|Having|Trying|Writing|Contacting|Following|Sorry|Happy|Glad|Sure)\b)")
_NAMES = rf"{_NOT_A_NAME}{_NAME_WORD}(?:[ \t]+{_NAME_WORD})"
_NAME = re.compile(rf"(?P<lead>\b(?i:my name is|name:)\s*){_NAMES}{{0,2}}\b"
                   rf"|(?P<lead2>\b(?i:i am|i'm|i’m|this is)\s+){_NAMES}{{1,2}}\b"
                   rf"|(?P<lead3>\b(?i:kind regards|best regards|best wishes|regards|many thanks|thank you|thanks"
                   rf"|cheers|sincerely|best)[ \t]*[,.!-]?\s*){_NAMES}{{0,2}}(?=[ \t]*(?:\n|$))")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_IBAN_ANY_CASE = re.compile(r"(?i)\b[a-z]{2}\d{2}(?:[a-z0-9]{11,30}|(?: [a-z0-9]{4}){2,7}(?: [a-z0-9]{1,4})?)\b")
_CARD = re.compile(r"(?<![\w./-])\d+(?:(?P<sep>[ ./-])\d+(?:(?P=sep)\d+)*)?(?!\w|[./-]\d)")
_PHONE = re.compile(r"(?<![\w-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,5}(?:[ .-]\d{2,5}){1,4}(?![\w-])"
                    r"|(?<![\w-])\+\d{9,15}(?![\w-])")


def _name(found: re.Match[str]) -> str:
    lead = found.group("lead") or found.group("lead2") or found.group("lead3")
    return f"{lead}[name]"


def _iban_any_case(found: re.Match[str]) -> str:
    return "[iban]" if _iban_checks(found.group()) else found.group()


def _iban_checks(text: str) -> bool:
    """ISO 13616: the country and check digits moved to the end, letters as 10 to 35, mod 97 is 1;
    and its account part has digits (a word with two digits in it is not an account)."""
    compact = text.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34 or not any(char.isdigit() for char in compact[4:]):
        return False
    return int("".join(str(int(char, 36)) for char in compact[4:] + compact[:4])) % 97 == 1


def _card(found: re.Match[str]) -> str:
    """The longest run of whole groups, leftmost first, that is a card number, as "[card]" (the
    groups around it stay): 13 to 19 digits; written with dots or slashes, also groups of 3 to 7
    digits (4-4-4-4, 4-6-5) and a Luhn check that holds."""
    text, sep = found.group(), found.group("sep")
    groups = text.split(sep) if sep else [text]
    for size in range(len(groups), 0, -1):
        for start in range(len(groups) - size + 1):
            window = groups[start:start + size]
            digits = "".join(window)
            if 13 <= len(digits) <= 19 and (sep not in (".", "/") or (
                    all(3 <= len(group) <= 7 for group in window) and _luhn(digits))):
                return (sep or "").join([*groups[:start], "[card]", *groups[start + size:]])
    return text


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char) * (2 if position % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


MASKS = (("[email]", _EMAIL), ("[email]", _EMAIL_WRITTEN), ("[name]", _NAME), ("[iban]", _IBAN),
         ("[iban]", _IBAN_ANY_CASE), ("[card]", _CARD), ("[phone]", _PHONE))
_REPLACE = {_NAME: _name, _IBAN_ANY_CASE: _iban_any_case, _CARD: _card}

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
    (then an item has no similar items). It is read from the evidence with its personal data
    masked as the summary's (`mask_personal`): a kept row's terms hold no piece of an email, a
    card, an IBAN, a phone number or a given name, only the mask's word ("w:email", "c:card")."""
    head = policy.routing_question.learned_head
    if head is None or head.text is None:
        return {}
    text = head.text
    evidence = mask_personal(evidence_text(build_state(policy, item), text.fields))
    counts = term_counts(evidence, text.word_ngrams, text.char_ngrams)
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
        text = pattern.sub(_phone if mask == "[phone]" else _REPLACE.get(pattern, mask), text)
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
