"""`make fit-history`'s outlook before anything is scored: the text classifier fitted at a few
training sizes (`text_curve`, seconds where scoring takes hours), and whether the model's signals
are likely to help at this size and how long scoring takes (`curve_outlook`)."""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from decision_contract import DEFAULT_LAYOUT, Layout

from . import history_report, learn
from .history_fit import head_signals
from .learn import stratified_sample

#: Training rows at which the text alone is fitted before anything is scored (`text_curve`), at
#: most CURVE_ROWS of them, measured on a held-out fifth: seconds, where scoring takes hours.
CURVE_SIZES = (50, 100, 200, 400, 800, 1600, 3200)
CURVE_ROWS = 4000
#: What the embedded model's hidden state added over the same head on the text alone, Banking77,
#: criterion first, each head's C chosen (docs/benchmarks/public.md, bench/learning_curve.py):
#: (training items per label seen, accuracy points added).
HIDDEN_STATE_GAINS = ((1.25, 1.3), (1.7, 1.8), (13.0, 1.9), (130.0, 0.9))
#: Items a second the embedded model scores on this repository's 2-core machine, by the signals
#: decisions' prompt layout, for the outlook's estimate: the full public sets' runs
#: (docs/benchmarks/public.md), 11 to 12 items/s criterion first (the criterion is evaluated once
#: and kept in the prompt cache) against about 4.6 evidence first. A loaded machine is slower.
SCORING_ITEMS_PER_SECOND: dict[Layout, float] = {"evidence-first": 4.6, "criterion-first": 11.5}


def text_curve(raw: dict[str, Any], train_states: Sequence[Any], gold: np.ndarray, seed: int) -> dict[str, Any]:
    """The text classifier (learn.baseline_probabilities) fitted on nested samples of DATA of
    CURVE_SIZES rows and all (at most CURVE_ROWS), its accuracy on a held-out fifth: how the text
    alone learns with more rows, measured before the model scores anything."""
    started = time.perf_counter()
    k = len(raw["questions"][0]["options"])
    order = np.random.default_rng(seed).permutation(stratified_sample(gold, CURVE_ROWS + CURVE_ROWS // 4, seed))
    held_n = max(1, len(order) // 5)
    s = head_signals([train_states[i] for i in order], np.zeros((len(order), 1)), gold[order], [e["key"] for e in raw["state"]],
                 None)  # the text classifier reads the text alone
    held, pool = np.arange(held_n), np.arange(held_n, len(order))
    points = []
    with threadpool_limits(limits=1, user_api="blas"):  # small problems: threads cost more than they give
        for n in [size for size in CURVE_SIZES if size < len(pool)] + [len(pool)]:
            P = learn.baseline_probabilities(s, pool[:n], held, k)
            points.append({"rows": int(n), "accuracy": round(float((P.argmax(axis=1) == s.gold[held]).mean()), 4)})
    return {"held_out": int(held_n), "points": points, "seconds": round(time.perf_counter() - started, 1)}


def curve_outlook(curve: dict[str, Any], n_train: int, n_options: int, n_items: int, text_only: bool,
                  layout: Layout | None = None) -> str:
    """Whether the model's signals are likely to help at this size: the curve's last step, and what
    the hidden state added at about as many items per label on Banking77 (HIDDEN_STATE_GAINS); and,
    unless `text_only`, how long scoring `n_items` takes here, in the signals decisions' `layout`
    (None: a lettered question's, at the default layout's rate)."""
    points = curve["points"]
    per_label = n_train / max(1, n_options)
    gain = min(HIDDEN_STATE_GAINS, key=lambda g: abs(np.log(g[0]) - np.log(max(per_label, 0.1))))[1]
    curve_says = history_report.judge_curve(points)["says"]  # levelled off only below a stated gain a step
    likely = ("likely to help" if gain >= 2.5 else "likely to add a point or two at most")
    seconds = n_items / SCORING_ITEMS_PER_SECOND[layout or DEFAULT_LAYOUT]
    takes = f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{max(1, round(seconds / 60))} min"
    return (f"the text alone {curve_says}; at {per_label:.0f} training rows per label the model's signals are {likely} "
            f"(the embedded model's hidden state added {gain} points of accuracy at about as many per label on Banking77, "
            f"docs/benchmarks/public.md)"
            + ("; --text-only: the model scores nothing" if text_only else
               f"; scoring {n_items} items{f' ({layout})' if layout else ''} takes about {takes} on 2 cores when idle "
               "(timed here on its first items before it starts, cached after): MODEL=none (--text-only) skips it"))
