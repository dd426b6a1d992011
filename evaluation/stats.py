"""Percentiles for every benchmark and report: one definition, so a p95 means the same
everywhere. Linear interpolation between the closest ranks (numpy's default method)."""

from __future__ import annotations

from typing import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0 ≤ q ≤ 1) of `values`: at rank q·(n − 1), between the two nearest
    ranks. ValueError on no values."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q={q} is not between 0 and 1")
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
