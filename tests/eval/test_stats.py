"""The one percentile every benchmark and report uses."""

import numpy as np
import pytest

from evaluation.stats import percentile


def test_linear_interpolation_between_the_nearest_ranks_by_hand():
    # rank 0.95 · 4 = 3.8 → 4 + 0.8 · (10 − 4) = 8.8; rank 0.9 · 4 = 3.6 → 4 + 0.6 · 6 = 7.6
    values = [10, 1, 3, 2, 4]
    assert percentile(values, 0.95) == pytest.approx(8.8)
    assert percentile(values, 0.9) == pytest.approx(7.6)
    assert percentile(values, 0.5) == 3
    assert (percentile(values, 0.0), percentile(values, 1.0)) == (1, 10)
    assert percentile([7.5], 0.95) == 7.5


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 1.0])
def test_the_same_as_numpys_default_method(q):
    values = list(np.random.default_rng(7).lognormal(size=37))
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, 100 * q)))


@pytest.mark.parametrize("values, q, message", [([], 0.5, "no values"), ([1.0], 1.5, "between 0 and 1")])
def test_refuses_what_has_no_percentile(values, q, message):
    with pytest.raises(ValueError, match=message):
        percentile(values, q)
