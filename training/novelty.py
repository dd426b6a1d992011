"""Fitting a head's novelty part (decision_router.domain.heads.NoveltyBlock): how unlike every
option it learned an item's hidden state is, so an item that belongs to no option goes to review.

The score is the class-conditional Mahalanobis distance with one shared covariance (Lee et al.
2018; Zhou et al. 2021 use it on a classifier's penultimate layer for out-of-scope intents): the
distance from the item's hidden state to the nearest option's mean, the covariance being the
options' pooled within-option covariance, shrunk by Ledoit-Wolf (a few labelled items a
dimension would make it singular). It is computed in a reduced space so the head file stays
under its size limit: the hidden state standardised, projected on its leading principal
directions (as many as the file's room allows, at most MAX_RANK), then whitened; all three fold
into one matrix the routing function applies in pure Python.

The head's own surprise at its answer, −ln of its top probability, catches other out-of-scope
items than the distance does (a query between two intents is near their means, yet the head
cannot choose). When the fitter gives it (out of fold, for the same training items), the score
is the distance plus `surprise_weight` times the surprise. The weight is chosen on training
items labelled as belonging to no option where there are some (the weight that catches most of
them at the budget); without them it puts both on one footing (the ratio of their spreads over
the in-scope items out of fold), a prior, not a fit.

The threshold is chosen out of fold on the training items alone: each fold's items scored by a
score fitted on the other folds, the threshold set so that at most `budget` of them (in scope by
construction) would go to review. Training items labelled as belonging to no option, when there
are any, are scored and reported; a test split is never looked at.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from sklearn.covariance import LedoitWolf

from decision_router.domain.heads import nearest_distance
from evaluation import metrics

#: The share of in-scope items the threshold sends to review, by default (`--novelty-budget`).
DEFAULT_BUDGET = 0.04
#: Reduced dimensions at most: beyond this, more rows cost file size for little separation.
MAX_RANK = 64
#: Fewer than this and the distance separates little: the head gets no novelty part.
MIN_RANK = 4
#: Significant digits kept of each stored value (the file's size; the score moves by < 1e-3).
DIGITS = 5
#: JSON bytes a stored value takes at most, at DIGITS ("-1.2345e-05,").
VALUE_BYTES = 12
#: The surprise weights tried where out-of-scope training items can choose, in units of the
#: spreads' ratio (1: both on one footing, the choice without such items).
SURPRISE_FACTORS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


@dataclass
class Space:
    """The fitted score: z = projection · (h − centre); distance to the nearest of `means`."""

    centre: np.ndarray
    projection: np.ndarray
    means: np.ndarray
    present: np.ndarray  # which options had training items (the others have no mean)

    @classmethod
    def fit(cls, hidden: np.ndarray, gold: np.ndarray, k: int, rank: int) -> "Space":
        centre = hidden.mean(axis=0)
        spread = hidden.std(axis=0)
        # a dimension that barely moves is not scaled up to the others' size (noise, not signal)
        spread = np.maximum(spread, 1e-3 * float(np.median(spread)) + 1e-12)
        x = (hidden - centre) / spread
        rank = min(rank, x.shape[0] - 1, x.shape[1])
        _, _, vt = np.linalg.svd(x, full_matrices=False)
        directions = vt[:rank]
        z = x @ directions.T
        present = np.bincount(gold, minlength=k) > 0
        means = np.zeros((k, rank))
        for o in np.flatnonzero(present):
            means[o] = z[gold == o].mean(axis=0)
        covariance = LedoitWolf(assume_centered=True).fit(z - means[gold]).covariance_
        # a ridge of a millionth of the mean variance keeps Cholesky defined on degenerate states
        covariance += np.eye(rank) * (1e-6 * float(np.trace(covariance)) / rank + 1e-12)
        whiten = np.linalg.inv(np.linalg.cholesky(covariance))  # whiten @ cov @ whiten.T = I
        return cls(centre, (whiten @ directions) / spread, means @ whiten.T, present)

    def score(self, hidden: np.ndarray) -> np.ndarray:
        z = (hidden - self.centre) @ self.projection.T
        nearest = np.min(((z[:, None, :] - self.means[None, self.present, :]) ** 2).sum(axis=2), axis=1)
        return np.sqrt(nearest)


def rank_for(room_bytes: int, hidden_size: int, k: int) -> int:
    """The most reduced dimensions whose projection and means fit in `room_bytes` (centre included)."""
    per_rank = (hidden_size + k) * VALUE_BYTES
    return int(max(0, min(MAX_RANK, (room_bytes - hidden_size * VALUE_BYTES) // per_rank)))


def threshold_for(scores: np.ndarray, budget: float) -> float:
    """The least score-threshold with at most `budget` of `scores` above it."""
    ordered = np.sort(scores)
    allowed = int(math.floor(budget * len(ordered) + 1e-9))
    return float(ordered[len(ordered) - 1 - allowed])


def _rounded(values: np.ndarray) -> Any:
    """Nested lists of floats at DIGITS significant digits (the file's size)."""
    if values.ndim == 1:
        return [float(f"{v:.{DIGITS}g}") for v in values]
    return [_rounded(row) for row in values]


@dataclass
class Surprise:
    """The head's surprise, −ln top probability: out of fold for the training items `rows` (their
    indices in the hidden states fitted on), and by the final head for the out-of-scope training
    items (in their order), when there are any."""

    rows: np.ndarray
    in_scope: np.ndarray
    out_of_scope: np.ndarray | None = None

    @staticmethod
    def of(probabilities: np.ndarray) -> np.ndarray:
        return -np.log(np.maximum(np.asarray(probabilities, dtype=np.float64).max(axis=1), 1e-300))


def surprise_weight(distance: np.ndarray, surprise: Surprise, oos_distance: np.ndarray | None,
                    budget: float) -> tuple[float, str]:
    """The weight of the surprise in the score (module docstring), and how it was chosen."""
    d, e = distance[surprise.rows], surprise.in_scope
    unit = float(d.std()) / max(float(e.std()), 1e-9)
    if oos_distance is None or surprise.out_of_scope is None or not len(oos_distance):
        return unit, "both on one footing (no out-of-scope training items to choose by)"
    caught = {}
    for factor in SURPRISE_FACTORS:
        threshold = threshold_for(d + factor * unit * e, budget)
        caught[factor] = float((oos_distance + factor * unit * surprise.out_of_scope > threshold).mean())
    best = max(SURPRISE_FACTORS, key=lambda f: (caught[f], -abs(f - 1.0)))
    tried = ", ".join(f"{f:g}: {caught[f]:.1%}" for f in SURPRISE_FACTORS)
    return best * unit, f"chosen on {len(oos_distance)} out-of-scope training items (their share caught by factor: {tried})"


def fit_novelty(hidden: np.ndarray, gold: np.ndarray, k: int, *, room_bytes: int, budget: float = DEFAULT_BUDGET,
                folds: int = 5, seed: int = 0, groups: Sequence[Any] | None = None,
                out_of_scope: np.ndarray | None = None, surprise: Surprise | None = None) -> tuple[dict[str, Any] | None, str]:
    """The head file's `novelty` section fitted on `hidden` (training items' hidden states) and
    their options `gold`, its threshold chosen out of fold for `budget`; or None and why not.
    `out_of_scope`: hidden states of training items labelled as belonging to no option (scored
    by the final fit, reported in the section). `surprise`: the head's, which then joins the
    score (module docstring)."""
    if not 0.0 < budget < 1.0:
        raise ValueError(f"novelty budget {budget}: a share of in-scope items between 0 and 1")
    hidden = np.asarray(hidden, dtype=np.float64)
    n, width = hidden.shape
    rank = min(rank_for(room_bytes, width, k), n - 1, width)
    if rank < MIN_RANK:
        return None, (f"no novelty part: room for {rank} reduced dimensions (of {MIN_RANK} at least) in the head "
                      f"file's size limit ({room_bytes} bytes left), over {n} items")
    if float(hidden.std(axis=0).max(initial=0.0)) == 0.0:
        return None, f"no novelty part: the {n} items' hidden states are all the same"
    parts = metrics.fold_indices(n, folds, seed, groups)
    if len(parts) < 2:
        return None, f"no novelty part: {n} items make no two folds"
    oof = np.zeros(n)
    for part in parts:
        rest = np.setdiff1d(np.arange(n), part)
        oof[part] = Space.fit(hidden[rest], gold[rest], k, rank).score(hidden[part])
    space = Space.fit(hidden, gold, k, rank)
    has_oos = out_of_scope is not None and len(out_of_scope) > 0
    oos_score = space.score(np.asarray(out_of_scope, dtype=np.float64)) if has_oos else None
    weight, how = 0.0, ""
    if surprise is not None and len(surprise.rows):
        weight, how = surprise_weight(oof, surprise, oos_score, budget)
        weight = float(f"{weight:.{DIGITS}g}")
        oof = oof[surprise.rows] + weight * surprise.in_scope  # the combined score, over the items that have both
        if oos_score is not None and surprise.out_of_scope is not None:
            oos_score = oos_score + weight * surprise.out_of_scope
    threshold = math.ceil(threshold_for(oof, budget) * 1e4) / 1e4  # rounded up: the budget holds as stored
    section: dict[str, Any] = {
        "score": "mahalanobis", "centre": _rounded(space.centre), "projection": _rounded(space.projection),
        "means": [row if present else [] for row, present in zip(_rounded(space.means), space.present)],
        **({"surprise_weight": weight} if weight > 0 else {}),
        "threshold": threshold, "in_scope_budget": budget,
        "out_of_fold_in_scope_review": round(float((oof > threshold).mean()), 4),
    }
    said = (f"novelty: Mahalanobis distance over {rank} reduced dimensions"
            + (f" plus {weight:g} × the head's surprise ({how})" if weight > 0 else "")
            + f", threshold {section['threshold']} "
            f"({section['out_of_fold_in_scope_review']:.1%} of training items above it out of fold, budget {budget:.1%})")
    if oos_score is not None and out_of_scope is not None:
        caught = float((oos_score > section["threshold"]).mean())
        section.update(out_of_scope_examples=len(out_of_scope), out_of_scope_caught=round(caught, 4))
        said += f"; {caught:.1%} of {len(out_of_scope)} out-of-scope training items above it"
    return section, said


def attach(document: dict[str, Any], gold: np.ndarray, *, max_bytes: int, sentences: np.ndarray | None = None,
           hidden: np.ndarray | None = None, binding: dict[str, Any] | None = None, budget: float = DEFAULT_BUDGET,
           folds: int = 5, seed: int = 0, groups: Sequence[Any] | None = None, out_of_scope: np.ndarray | None = None,
           surprise: Surprise | None = None) -> str:
    """Add a `novelty` section to a head file's `document` (before its version digest is taken),
    sized to what the file's `max_bytes` leave. A head with a sentence block gets it in the
    encoder's space (`sentences`: the training items' embeddings; `out_of_scope`: those of the
    training items labelled as no option), which binds it to no model; a head without one, over
    the model's hidden state (`hidden`, `out_of_scope` likewise), with the model binding it reads
    (`binding`: model_sha256, hidden_size, prompt_version). Returns what was done, for the fit's
    log. The one step `make fit`, relearning (training.fitting.fit_head) and `make fit-history` share."""
    room = max_bytes - len(json.dumps(document, separators=(",", ":")).encode()) - 4096  # the binding, the digest
    if "sentence" in document and sentences is not None:
        section, said = fit_nearest(sentences, gold, room_bytes=room, budget=budget, folds=folds, seed=seed,
                                    out_of_scope=out_of_scope, surprise=surprise)
        if section is not None:
            document["novelty"] = section
        return said
    if hidden is None or binding is None:
        return "no novelty part: the head reads neither a sentence embedding nor the hidden state"
    section, said = fit_novelty(hidden, gold, len(document["options"]), room_bytes=room, budget=budget, folds=folds,
                                seed=seed, groups=groups, out_of_scope=out_of_scope, surprise=surprise)
    if section is not None:
        for key in ("model_sha256", "hidden_size", "prompt_version"):
            document.setdefault(key, binding[key])
        document["novelty"] = section
    return said


# ----------------------------------------------------------------------------------- in the encoder's space
#: Nearest training items the encoder-space score averages (k-nearest-neighbour novelty, Sun et
#: al. 2022; k about 5 separated CLINC150's out-of-scope queries best in this project's tests).
NEAREST_K = 5
#: Training items kept in the file at most: each costs the routing function 512 multiply-adds
#: (about 3 ms for the lot, in numpy) and the file about 690 bytes (int8 values and a scale, base64).
MAX_NEAREST_ROWS = 8000
#: Room for fewer kept items than this (of more training items) and the distance says little: no
#: novelty part. A smaller training set is kept whole.
MIN_NEAREST_ROWS = 50


def _stored(vectors: np.ndarray) -> tuple[np.ndarray, str, str]:
    """The vectors as the file keeps them (each row int8 times its own scale: the largest value
    maps to 127), and the base64 of the values and of the scales."""
    vectors = np.asarray(vectors, dtype=np.float32)
    scales = (np.maximum(np.abs(vectors).max(axis=1), 1e-12) / 127.0).astype("<f4")
    values = np.clip(np.rint(vectors / scales[:, None]), -127, 127).astype(np.int8)
    return (values.astype(np.float32) * scales[:, None], base64.b64encode(values.tobytes()).decode("ascii"),
            base64.b64encode(scales.tobytes()).decode("ascii"))


def fit_nearest(sentences: np.ndarray, gold: np.ndarray, *, room_bytes: int, budget: float = DEFAULT_BUDGET,
                folds: int = 5, seed: int = 0, out_of_scope: np.ndarray | None = None,
                surprise: Surprise | None = None) -> tuple[dict[str, Any] | None, str]:
    """The head file's `novelty` section in the sentence encoder's space (heads.NearestNovelty):
    the training items kept (a sample, each option in proportion, as many as `room_bytes` allow),
    the threshold chosen out of fold for `budget` (each fold's items scored against a sample of
    the other folds' of the same size), the surprise weighed in as surprise_weight chooses."""
    from .learn import stratified_sample

    if not 0.0 < budget < 1.0:
        raise ValueError(f"novelty budget {budget}: a share of in-scope items between 0 and 1")
    sentences = np.asarray(sentences, dtype=np.float32)
    n, width = sentences.shape
    kept = int(min(MAX_NEAREST_ROWS, room_bytes // math.ceil((width + 4) * 4 / 3), n))
    if kept < min(MIN_NEAREST_ROWS, n):
        return None, (f"no novelty part: room for {kept} training items (of {MIN_NEAREST_ROWS} at least) in the head "
                      f"file's size limit ({room_bytes} bytes left), of {n}")
    parts = metrics.fold_indices(n, folds, seed)
    if len(parts) < 2:
        return None, f"no novelty part: {n} items make no two folds"
    oof = np.zeros(n)
    for part in parts:
        rest = np.setdiff1d(np.arange(n), part)
        sample = rest[stratified_sample(gold[rest], kept, seed, floor=NEAREST_K)]
        oof[part] = nearest_distance(_stored(sentences[sample])[0], sentences[part], NEAREST_K)
    index, encoded, scales = _stored(sentences[stratified_sample(gold, kept, seed, floor=NEAREST_K)])
    has_oos = out_of_scope is not None and len(out_of_scope) > 0
    oos_score = nearest_distance(index, np.asarray(out_of_scope, dtype=np.float32), NEAREST_K) if has_oos else None
    weight, how = 0.0, ""
    # Without out-of-scope training items to choose by, the distance alone: the head's confidence
    # threshold already sends the items it cannot choose between to review, and a surprise put on
    # one footing would spend the budget on them, raising the threshold for the confident ones.
    if surprise is not None and len(surprise.rows) and oos_score is not None and surprise.out_of_scope is not None:
        weight, how = surprise_weight(oof, surprise, oos_score, budget)
        weight = float(f"{weight:.{DIGITS}g}")
        oof = oof[surprise.rows] + weight * surprise.in_scope
        oos_score = oos_score + weight * surprise.out_of_scope
    threshold = math.ceil(threshold_for(oof, budget) * 1e4) / 1e4
    section: dict[str, Any] = {
        "score": "nearest", "k": NEAREST_K, "rows": len(index), "index": encoded, "scales": scales,
        **({"surprise_weight": weight} if weight > 0 else {}),
        "threshold": threshold, "in_scope_budget": budget,
        "out_of_fold_in_scope_review": round(float((oof > threshold).mean()), 4),
    }
    said = (f"novelty: cosine distance to the {NEAREST_K} nearest of {len(index)} training items in the sentence "
            f"encoder's space" + (f" plus {weight:g} × the head's surprise ({how})" if weight > 0 else "")
            + f", threshold {threshold} ({section['out_of_fold_in_scope_review']:.1%} of training items above it out "
            f"of fold, budget {budget:.1%})")
    if oos_score is not None and out_of_scope is not None:
        caught = float((oos_score > threshold).mean())
        section.update(out_of_scope_examples=len(out_of_scope), out_of_scope_caught=round(caught, 4))
        said += f"; {caught:.1%} of {len(out_of_scope)} out-of-scope training items above it"
    return section, said
