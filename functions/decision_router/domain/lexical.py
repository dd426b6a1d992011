"""Lexical features of a decision's evidence: word and character n-grams, TF-IDF weighted.

The bag-of-words view of the same evidence the model reads. A head combines it with the
model's hidden state and letters (heads.py), so a router with a routing history is at least as
good as a plain text classifier. Pure Python on purpose: the routing function computes these
without scikit-learn or numpy, and the fitter builds its feature matrices with this same code,
so both see identical features.

- Text is NFKC-normalised and lower-cased; words are runs of two or more word characters
  (any script); word n-grams span `word_ngrams`; character n-grams span `char_ngrams` over the
  whole text with its whitespace runs collapsed to one space (so they also work for languages
  without a tokeniser, and catch pairs of words that the word n-grams split differently).
- Weights: sublinear term frequency (1 + ln tf) × the term's inverse document frequency, then
  each kind (words, characters) is scaled to unit length on its own.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from typing import Any, Mapping, Sequence

WORD = re.compile(r"\b\w\w+\b")
#: A decision's evidence: the policy's JSON object of item fields, or free text (or a JSON array).
State = Mapping[str, Any] | str | list[Any]
#: Prefixes that tell a word n-gram from a character n-gram in one vocabulary.
WORD_PREFIX, CHAR_PREFIX = "w:", "c:"


def evidence_text(state: State, fields: Sequence[str]) -> str:
    """The text the lexical features read: the named state fields' values, in order, one a line."""
    if isinstance(state, str):
        return state
    if not isinstance(state, Mapping):
        return json.dumps(state, ensure_ascii=False)
    return "\n".join(str(state[key]) for key in fields if state.get(key) is not None)


def normalized(text: str) -> str:
    """The text as the features read it: NFKC-normalised and lower-cased."""
    return unicodedata.normalize("NFKC", text).lower()


def term_counts(text: str, word_ngrams: tuple[int, int] = (1, 2), char_ngrams: tuple[int, int] = (2, 5)) -> Counter[str]:
    """How often each word and character n-gram occurs in `text` (prefixed `w:` / `c:`)."""
    text = normalized(text)
    counts: Counter[str] = Counter()
    words = WORD.findall(text)
    low, high = word_ngrams
    for n in range(low, high + 1):
        for i in range(len(words) - n + 1):
            counts[WORD_PREFIX + " ".join(words[i:i + n])] += 1
    low, high = char_ngrams
    flat = " ".join(text.split())
    for n in range(low, high + 1):
        for i in range(len(flat) - n + 1):
            counts[CHAR_PREFIX + flat[i:i + n]] += 1
    return counts


def tfidf(counts: Mapping[str, int], index: Mapping[str, int], idf: Sequence[float]) -> dict[int, float]:
    """Sparse TF-IDF vector (vocabulary index → weight) of `counts` over a vocabulary; terms
    outside it are dropped; words and characters are each scaled to unit length."""
    vector: dict[int, float] = {}
    norms = {WORD_PREFIX: 0.0, CHAR_PREFIX: 0.0}
    kinds: dict[int, str] = {}
    for term, count in counts.items():
        column = index.get(term)
        if column is None:
            continue
        value = (1.0 + math.log(count)) * idf[column]
        vector[column] = value
        kind = term[:2]
        kinds[column] = kind
        norms[kind] += value * value
    for column, value in vector.items():
        norm = norms[kinds[column]]
        vector[column] = value / math.sqrt(norm) if norm > 0 else 0.0
    return vector


def inverse_document_frequency(documents: int, frequency: int) -> float:
    """Smoothed idf: ln((1 + documents) / (1 + frequency)) + 1, never zero."""
    return math.log((1 + documents) / (1 + frequency)) + 1.0


def categorical_features(state: State, fields: Sequence[str]) -> list[str]:
    """The item's structured fields as `key=value` indicators (tier, channel, severity, …)."""
    if not isinstance(state, Mapping):
        return []
    return [f"{key}={state[key]}" for key in fields if state.get(key) is not None]
