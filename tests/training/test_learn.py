"""The head fitter on hidden states drawn here (no model): determinism, the folded
standardisation, thresholds from held-out folds only, and the same probabilities as routing."""

from __future__ import annotations

import json
from datetime import date

import numpy as np
import pytest

from decision_router.heads import Head
from decision_router.policies import load_policy
from training import learn

OPTIONS = ["billing", "account_access", "technical_fault", "how_to", "sales"]


def separable(n: int = 120, width: int = 32, noise: float = 1.0, seed: int = 3):
    """Hidden states whose class shows in a few directions, on top of a large common offset
    (as real hidden states have), plus letter logits that know nothing."""
    rng = np.random.default_rng(seed)
    gold = np.arange(n) % len(OPTIONS)
    centres = rng.normal(0, 3, (len(OPTIONS), width))
    hidden = 50.0 + centres[gold] + rng.normal(0, noise, (n, width))
    letters = [rng.normal(0, 1, len(OPTIONS)) for _ in range(n)]
    groups = [f"row {i}" for i in range(n)]
    return hidden, letters, gold, groups


def fit(hidden, letters, gold, groups, **kw):
    return learn.fit_question("support-ticket/queue", OPTIONS, hidden, letters, gold, groups,
                              formula="normalized_peak", folds=5, seed=0, target_error=0.05, **kw)


def document(result, policy=None):
    policy = policy or load_policy("support-ticket")
    return learn.head_document(result, version="v", model_sha256="a" * 64, hidden_size=result.linear.weights.shape[1],
                               prompt_version="direct-options-v1", question_sha256="b" * 64, data=["x"],
                               fitted_on=date(2026, 11, 30))


def test_fitting_is_deterministic_byte_for_byte():
    data = separable()
    first = json.dumps(document(fit(*data)), sort_keys=True)
    second = json.dumps(document(fit(*data)), sort_keys=True)
    assert first == second


def test_a_head_beats_letters_that_know_nothing_and_is_written():
    result = fit(*separable())
    assert result.head.accuracy > 0.9 and result.letters.accuracy < 0.4
    assert result.beats_chance and result.head_wins
    assert result.head.min_confidence is not None and result.head.auto_routed_share > 0.5
    assert result.regularisation in learn.C_GRID


def test_noise_does_not_beat_chance_and_is_not_written():
    rng = np.random.default_rng(5)
    hidden = rng.normal(0, 1, (100, 16))
    gold = np.arange(100) % 5
    result = fit(hidden, [rng.normal(0, 1, 5) for _ in range(100)], gold, [str(i) for i in range(100)], curve=False)
    assert not result.beats_chance and not result.head_wins


def test_the_shipped_head_is_a_map_of_the_raw_hidden_state():
    # standardisation is folded into weights and bias: the map applies to raw states directly
    hidden, letters, gold, groups = separable()
    result = fit(hidden, letters, gold, groups, curve=False)
    predicted = result.linear.logits(hidden).argmax(axis=1)
    assert (predicted == gold).mean() > 0.95


def test_the_fitter_and_the_routing_function_compute_the_same_probabilities():
    hidden, letters, gold, groups = separable()
    result = fit(hidden, letters, gold, groups, curve=False)
    head = Head.model_validate(document(result))
    for h in hidden[:20]:
        ours = np.exp(result.linear.logits(h) / result.temperature)
        ours /= ours.sum()
        # the policy file's weights are rounded to 7 significant digits
        assert head.probabilities(h.tolist()) == pytest.approx(ours.tolist(), abs=1e-5)


def test_groups_never_straddle_folds_in_the_fit():
    hidden, letters, gold, _ = separable(n=60)
    groups = [f"g{i // 3}" for i in range(60)]  # paraphrase triples
    result = fit(hidden, letters, gold, groups, curve=False)
    assert result.folds == 5 and result.n_train == 60


def test_learning_curve_grows_with_examples():
    result = fit(*separable(n=200, noise=2.5))
    curve = result.learning_curve
    assert [p["examples"] for p in curve] == sorted(p["examples"] for p in curve)
    assert curve[-1]["accuracy"] >= curve[0]["accuracy"]
    assert curve[-1]["examples"] == 160  # the largest training fold
