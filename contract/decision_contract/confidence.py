"""Confidence over a probability vector: the named formulas the product uses.

Probabilities from the readout are conditional on the offered options and
uncalibrated, so every consumer names the formula it applies.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Sequence


class ConfidenceFormula(str, Enum):
    NORMALIZED_PEAK = "normalized_peak"
    ONE_MINUS_NORMALIZED_ENTROPY = "one_minus_normalized_entropy"


FORMULA_TEXT = {
    ConfidenceFormula.NORMALIZED_PEAK: "clamp((n*max(p) - 1)/(n - 1), 0, 1)",
    ConfidenceFormula.ONE_MINUS_NORMALIZED_ENTROPY: "1 - H(p)/ln(n)",
}


def normalized_peak(probabilities: Sequence[float]) -> float:
    """0 when the top option is no likelier than uniform, 1 when it holds all the mass."""
    n = len(probabilities)
    if n < 2:
        raise ValueError("confidence needs at least two probabilities")
    return min(1.0, max(0.0, (n * max(probabilities) - 1.0) / (n - 1.0)))


def one_minus_normalized_entropy(probabilities: Sequence[float]) -> float:
    n = len(probabilities)
    if n < 2:
        raise ValueError("confidence needs at least two probabilities")
    entropy = -sum(p * math.log(p) for p in probabilities if p > 0.0)
    return min(1.0, max(0.0, 1.0 - entropy / math.log(n)))


def confidence(probabilities: Sequence[float], formula: ConfidenceFormula | str) -> float:
    formula = ConfidenceFormula(formula)
    if formula is ConfidenceFormula.NORMALIZED_PEAK:
        return normalized_peak(probabilities)
    return one_minus_normalized_entropy(probabilities)


def top_two_margin(probabilities: Sequence[float]) -> float:
    """Probability of the top option minus that of the runner-up."""
    first, second = sorted(probabilities, reverse=True)[:2]
    return first - second


def softmax(logits: Sequence[float], temperature: float = 1.0) -> list[float]:
    """Numerically stable softmax of `logits / temperature`."""
    if temperature <= 0 or not math.isfinite(temperature):
        raise ValueError("temperature must be a finite number > 0")
    # Shift before dividing: every exponent is <= 0 and the peak's is exactly 0, so a tiny
    # temperature gives a one-hot vector instead of inf - inf = NaN.
    peak = max(logits)
    exps = [math.exp((z - peak) / temperature) for z in logits]
    total = sum(exps)
    return [e / total for e in exps]
