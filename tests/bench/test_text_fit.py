"""bench/text_fit.py's own parts (fast): the long documents it joins, and the share it reads as
answered at a precision."""

from __future__ import annotations

import numpy as np

from bench import text_fit

DOMAINS = {"pay_bill": "banking", "balance": "banking", "weather": "utility", "timer": "utility"}
PAIRS = [(f"{intent} query {i}", intent) for intent in DOMAINS for i in range(20)]


def test_each_long_document_joins_queries_of_its_own_domain_and_the_draw_is_seeded():
    rows = text_fit.long_documents(PAIRS, DOMAINS, 50, seed=3)
    assert len(rows) == 50 and rows == text_fit.long_documents(PAIRS, DOMAINS, 50, seed=3)
    for row in rows:
        queries = row["text"].rstrip(".").split(". ")
        low, high = text_fit.JOINED
        assert low <= len(queries) <= high and len(set(queries)) == len(queries)
        assert {DOMAINS[q.split(" query ")[0]] for q in queries} == {row["category"]}
    assert {row["category"] for row in rows} == {"banking", "utility"}


def test_the_share_answered_is_the_largest_most_probable_first_at_the_precision():
    top = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    right = np.array([True, True, True, False, True])
    assert text_fit.answered_at(top, right, precision=0.97) == 0.6  # the first three, all right
    assert text_fit.answered_at(top, right, precision=0.75) == 1.0  # four of five right
    assert text_fit.answered_at(top, ~right, precision=0.5) == 0.0  # none right at the top
