"""The head fitter's parts on tiny data (fast): its TF-IDF is the routing function's, its solver
finds scikit-learn's LogisticRegression optimum, and C is searched outward from 10 while the
held-out loss falls."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from decision_router.domain.lexical import term_counts, tfidf
from training import head_fit, learn

WORDS = [["invoice", "refund", "charged"], ["password", "login", "locked"], ["error", "crash", "outage"]]
FILLER = ["hello", "please", "thanks", "team", "today", "need", "help"]


def tickets(n: int, options: int = 3, seed: int = 0) -> learn.Signals:
    rng = np.random.default_rng(seed)
    gold = np.arange(n) % options
    states = [{"body": " ".join([*rng.choice(FILLER, 4), *rng.choice(WORDS[g], 2)])} for g in gold]
    return learn.Signals.build(states, np.zeros((n, 1)), [np.zeros(options)] * n, gold, [str(i) for i in range(n)],
                               ["body"], [], encoder=None)


def test_the_fitters_tfidf_is_the_routing_functions_row_by_row():
    s = tickets(40)
    space = learn.FeatureSpace.fit(s, range(30), max_terms=60, min_df=2)
    design, _ = space.lexical(s, range(40))
    index = {t: i for i, t in enumerate(space.terms)}
    for row in range(40):
        expected = np.zeros(len(space.terms))
        for column, value in tfidf(term_counts(s.texts([row])[0]), index, space.idf).items():
            expected[column] = value
        assert np.allclose(design[row].toarray().ravel(), expected, rtol=1e-12, atol=0)


def test_the_vocabulary_keeps_the_most_frequent_terms_and_at_the_cut_the_first_alphabetically():
    s = tickets(40)
    kept, df = s.terms.vocabulary(range(30), max_terms=25, min_df=2)
    counts: dict[str, int] = {}
    for text in s.texts(range(30)):
        for term in term_counts(text):
            counts[term] = counts.get(term, 0) + 1
    expected = sorted(sorted((t for t, n in counts.items() if n >= 2), key=lambda t: (-counts[t], t))[:25])
    assert kept == expected and df == [counts[t] for t in expected]


@pytest.mark.parametrize("options", [3, 2])
def test_the_solver_finds_scikit_learns_logistic_regression(monkeypatch, options):
    monkeypatch.setattr(learn, "SOLVER_TOLERANCE", 1e-9)  # both solved to the optimum, not the fitter's stop
    s = tickets(60, options)
    space = learn.FeatureSpace.fit(s, range(60))
    linear = learn.fit_linear(s, range(60), options, 10.0, 0.0, space=space)
    reference = LogisticRegression(C=10.0, tol=1e-9, max_iter=5000).fit(space.matrix(s, range(60), 0.0), s.gold)
    expected = reference.predict_log_proba(space.matrix(s, range(60), 0.0))
    logits = learn.numpy_logits(linear, s, range(60))
    ours = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    assert np.abs(ours - expected).max() < 1e-5


@pytest.mark.parametrize("losses, tried", [
    ({1: 0.9, 3: 0.8, 10: 0.7, 30: 0.6, 100: 0.5}, [10, 30, 100]),  # falls upwards: never tries below 10
    ({1: 0.9, 3: 0.8, 10: 0.5, 30: 0.6, 100: 0.4}, [10, 30, 3]),  # lowest at 10 (100 is never tried)
    ({1: 0.7, 3: 0.4, 10: 0.5, 30: 0.6, 100: 0.7}, [10, 30, 3, 1]),  # falls downwards until it rises
])
def test_c_is_searched_outward_from_10_while_the_held_out_loss_falls(monkeypatch, losses, tried):
    monkeypatch.setattr(head_fit.metrics, "fit_temperature", lambda logits, gold: SimpleNamespace(temperature=1.0))
    monkeypatch.setattr(head_fit.metrics, "mean_nll_at", lambda logits, gold, at: losses[logits[0][0]])
    fitted: list[float] = []

    def fit_at(C):  # a "head" here is its C
        fitted.append(C)
        return C

    at_C, found = {10.0: 10.0}, {}
    head_fit.search_C(fit_at, lambda C: np.array([[C]]), [0], at_C, found, lambda *said: None)
    assert list(found) == tried and set(at_C) == set(tried)
    assert fitted == tried[1:]  # 10's head was there already
