"""The one definition of a precision's lower bound (decision_router.domain.precision_bound), held to scipy's
exact Clopper–Pearson bound: the fitter, the evaluation and the routing functions' live checks read it."""

import pytest
from scipy.stats import beta, binomtest

from decision_router.domain.precision_bound import items_needed, precision_lower_bound, regularized_beta
from evaluation import metrics


@pytest.mark.parametrize("right,n", [(1, 2), (2, 4), (5, 6), (97, 100), (290, 295), (3, 1000), (1, 1_000_000),
                                     (999_000, 1_000_000), (500_000, 1_000_000), (4_321, 5_000)])
def test_the_bound_is_scipys_beta_quantile(right, n):
    assert precision_lower_bound(right, n) == pytest.approx(float(beta.ppf(0.05, right, n - right + 1)), rel=1e-9)
    assert precision_lower_bound(right, n, 0.99) == pytest.approx(float(beta.ppf(0.01, right, n - right + 1)), rel=1e-9)


def test_the_bound_is_the_two_sided_ninety_percent_interval_low_end():
    for right, n in ((2, 4), (97, 100), (30, 30)):
        assert precision_lower_bound(right, n) == pytest.approx(
            binomtest(right, n).proportion_ci(confidence_level=0.90, method="exact").low)


def test_the_edges():
    assert precision_lower_bound(0, 0) is None and precision_lower_bound(0, 10) == 0.0
    assert precision_lower_bound(30, 30) == pytest.approx(0.05 ** (1 / 30))
    assert regularized_beta(2, 3, 0.0) == 0.0 and regularized_beta(2, 3, 1.0) == 1.0
    assert regularized_beta(2.0, 3.0, 0.4) == pytest.approx(float(beta.cdf(0.4, 2, 3)))
    for bad in ((3, 2), (-1, 2)):
        with pytest.raises(ValueError, match="right among"):
            precision_lower_bound(*bad)
    with pytest.raises(ValueError, match="confidence level"):
        precision_lower_bound(1, 2, 1.0)


def test_the_evaluation_reads_the_same_definition():
    assert metrics.precision_lower_bound is precision_lower_bound and metrics.items_needed is items_needed
    assert items_needed(0.97) == 99
