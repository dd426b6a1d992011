"""How sure a precision is: the one-sided Clopper–Pearson (exact binomial) lower confidence bound
of a precision measured on `n` answers, and the fewest answers that could show a target.

One definition for the fitter (thresholds are set so this bound meets the question's target),
the evaluation and the routing and review functions (the live precision of sampled checks,
domain/precision.py): pure Python (no scipy) so the Lambda zip can carry it. The bound is the `1 - level` quantile of
Beta(right, n - right + 1), found by bisection on the regularized incomplete beta function.
"""

from __future__ import annotations

import math

#: How sure a threshold must be that its automatic answers meet the target precision: the
#: one-sided confidence level of the Clopper–Pearson lower bound that must reach the target.
PRECISION_CONFIDENCE = 0.95
#: Bisection steps: the interval [0, 1] halved past double precision.
_STEPS = 64


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        for numerator in (m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
                          -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            return h
    raise ArithmeticError(f"incomplete beta ({a}, {b}, {x}) did not converge")


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b): the Beta(a, b) distribution function at x."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b


def precision_lower_bound(right: int, n: int, level: float = PRECISION_CONFIDENCE) -> float | None:
    """The one-sided Clopper–Pearson (exact binomial) lower confidence bound, at `level`, of a
    precision measured as `right` correct among `n` answers: the true precision is at least this
    with probability `level`. None when n is 0; 0.0 when none is right."""
    if not 0 <= right <= n:
        raise ValueError(f"{right} right among {n} answers")
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level {level} outside (0, 1)")
    if n == 0:
        return None
    if right == 0:
        return 0.0
    alpha = 1.0 - level
    if right == n:  # Beta(n, 1): the quantile in closed form
        return float(alpha ** (1.0 / n))
    low, high = 0.0, 1.0
    for _ in range(_STEPS):
        middle = (low + high) / 2.0
        if regularized_beta(right, n - right + 1, middle) < alpha:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def items_needed(target_precision: float, level: float = PRECISION_CONFIDENCE) -> int:
    """The fewest answers that, all of them right, have a lower bound (`precision_lower_bound`)
    of at least `target_precision`: fewer cannot show that target, however many are right."""
    if not 0.0 < target_precision < 1.0:
        raise ValueError(f"target precision {target_precision} outside (0, 1)")
    # all n right: the bound is (1 - level) ** (1 / n), so n >= log(1 - level) / log(target)
    n = max(1, math.ceil(math.log(1.0 - level) / math.log(target_precision)) - 1)
    while (precision_lower_bound(n, n, level) or 0.0) < target_precision:  # settle rounding on the exact bound
        n += 1
    return n
