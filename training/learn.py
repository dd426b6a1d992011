"""The head's signals, its design and its linear fit: what the one head fitter (training/head_fit.py)
fits for `make fit`, relearning and `make fit-history`, and the one head writer of their files.

The head is one multinomial logistic regression (L2) over every signal the routing function
has (decision_router.domain.heads): TF-IDF word and character n-grams of the evidence, the item's
structured fields as indicators, the sentence embedding, the model's final hidden state and its
letter logits. The model's two blocks are standardised and scaled by one `model_weight` against
the lexical ones (chosen, with C, by training/head_fit.py). Standardisation is folded into the
weights, so the shipped head reads raw hidden states and logits. Beside it, the text-only classifier
a user would compare us with (evaluation/text_classifier.py). Everything is seeded and
deterministic: the same data gives the same head, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import math
from array import array
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Sequence

import numpy as np
from scipy import optimize, sparse
from scipy.special import logsumexp

from decision_router import sentences as sentence_encoders
from decision_router.domain.heads import FORMAT
from decision_router.domain.lexical import WORD_PREFIX, categorical_features, evidence_text, inverse_document_frequency, term_counts
from evaluation import metrics, text_classifier

#: A term must occur in this many training items to enter the vocabulary; at most MAX_TERMS
#: (the most frequent) are kept, so a head file stays well under 2 MB.
MIN_DF, MAX_TERMS = 2, 25000
#: The structured-field indicators, as one block, weigh this much against the unit-length text
#: blocks (the values are in the evidence text too; at full weight they drown it out on held-out folds).
CATEGORY_SCALE = 0.15
#: The sentence embedding, as one block, weighs this much against the text blocks (each of unit
#: length, like the embedding itself).
SENTENCE_SCALE = 1.0
#: The head's solver (`_minimise`), set as scikit-learn's LogisticRegression was here: it stops when no
#: gradient component exceeds SOLVER_TOLERANCE, or after SOLVER_STEPS, and keeps SOLVER_MEMORY past
#: steps (5 is a quarter faster on small exports, but its heads are not the same: on CLINC150 a held-out
#: log loss of 0.0945 against 0.0939 at C 100).
SOLVER_TOLERANCE, SOLVER_STEPS, SOLVER_MEMORY = 1e-5, 1000, 10
#: Significant digits written for head weights.
WEIGHT_DIGITS = 5
#: The bias of an option never seen in training: never predicted.
UNSEEN_BIAS = -30.0
#: A label keeps at least this many rows (all it has, if fewer) in a sample.
SAMPLE_FLOOR = 20


def stratified_sample(gold: np.ndarray, size: int, seed: int, floor: int = SAMPLE_FLOOR) -> np.ndarray:
    """Sorted row indexes of a sample of about `size` rows, each label in proportion (and at
    least `floor` of its rows, or all of them); every row when there are no more than `size`."""
    n = len(gold)
    if n <= size:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    labels, counts = np.unique(gold, return_counts=True)
    picked = []
    for label, count in zip(labels, counts):
        rows = np.flatnonzero(gold == label)
        take = min(count, max(floor, int(count * size / n)))
        picked.append(rng.choice(rows, size=take, replace=False))
    return np.sort(np.concatenate(picked))


# ----------------------------------------------------------------------------------- signals
@dataclass(frozen=True)
class Terms:
    """Each row's word and character n-gram counts (the routing function's `term_counts`), as one
    sparse matrix over every term the rows have: counted once, then every space's vocabulary is
    chosen from it and its TF-IDF computed from it with matrix operations."""

    names: list[str]
    index: dict[str, int] = field(repr=False)
    counts: sparse.csr_matrix = field(repr=False)  # rows x names

    @classmethod
    def of(cls, texts: Sequence[str]) -> "Terms":
        index: dict[str, int] = {}
        columns, counts, ends = array("i"), array("f"), array("q", [0])  # 8 bytes a count, not a Counter's 100
        for text in texts:
            found = term_counts(text)
            new = [term for term in found if term not in index]
            index.update(zip(new, range(len(index), len(index) + len(new))))
            columns.extend(map(index.__getitem__, found))
            counts.extend(found.values())
            ends.append(len(columns))
        matrix = sparse.csr_matrix((np.frombuffer(counts, dtype=np.float32), np.frombuffer(columns, dtype=np.int32),
                                    np.frombuffer(ends, dtype=np.int64)), shape=(len(ends) - 1, len(index)))
        return cls(list(index), index, matrix)

    def frequencies(self, rows: Sequence[int]) -> np.ndarray:
        """How many of `rows` each term occurs in."""
        return np.bincount(self.counts[np.asarray(rows, dtype=np.int64)].indices, minlength=len(self.names))

    def vocabulary(self, rows: Sequence[int], max_terms: int, min_df: int) -> tuple[list[str], list[int]]:
        """The terms of at least `min_df` of `rows`, at most `max_terms` of the most frequent (at the
        cut, alphabetical order), sorted; and each one's document frequency."""
        df = self.frequencies(rows)
        candidates = np.flatnonzero(df >= min_df)
        if len(candidates) > max_terms:
            cut = np.sort(df[candidates])[len(candidates) - max_terms]  # the smallest frequency kept
            above = candidates[df[candidates] > cut]
            tied = sorted(self.names[j] for j in candidates[df[candidates] == cut])
            kept = [self.names[j] for j in above] + tied[:max_terms - len(above)]
        else:
            kept = [self.names[j] for j in candidates]
        kept.sort()
        return kept, [int(df[self.index[t]]) for t in kept]

    def tfidf(self, rows: Sequence[int], terms: Sequence[str], idf: Sequence[float]) -> sparse.csr_matrix:
        """The rows' TF-IDF over a vocabulary (rows x terms), as the routing function's `tfidf`
        computes it: (1 + ln tf) x idf, words and characters each scaled to unit length; terms
        outside the vocabulary dropped."""
        position = np.full(len(self.names), -1, dtype=np.int32)
        for column, term in enumerate(terms):
            if term in self.index:
                position[self.index[term]] = column
        sub = self.counts[np.asarray(rows, dtype=np.int64)]
        column = position[sub.indices]
        kept = column >= 0
        row = np.repeat(np.arange(sub.shape[0], dtype=np.int32), np.diff(sub.indptr))[kept]
        column = column[kept]
        value = (1.0 + np.log(sub.data[kept].astype(np.float64))) * np.asarray(idf, dtype=np.float64)[column]
        word = np.array([t.startswith(WORD_PREFIX) for t in terms], dtype=bool)[column]
        squares = value * value
        norms = {kind: np.sqrt(np.bincount(row[mask], weights=squares[mask], minlength=sub.shape[0]))
                 for kind, mask in ((True, word), (False, ~word))}
        value /= np.where(word, norms[True][row], norms[False][row])
        ends = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=sub.shape[0]))])  # rows stay in order
        return sparse.csr_matrix((value, column, ends), shape=(sub.shape[0], len(terms)))


@dataclass(frozen=True)
class Signals:
    """What the head reads for each labelled decision, and its gold answer."""

    states: list[Any]  # the decision's state (dict, or text)
    hidden: np.ndarray  # n x hidden width
    letters: np.ndarray  # n x options: raw letter logits
    gold: np.ndarray
    groups: list[str]
    text_fields: list[str]
    categorical_fields: list[str]
    indicators: list[list[str]] = field(repr=False)
    encoder: str | None = None  # the sentence encoder (decision_router.sentences); None: no sentence block
    sentences: np.ndarray | None = field(default=None, repr=False)  # n x its width: the evidence's embeddings

    @cached_property
    def terms(self) -> Terms:
        """Every row's n-gram counts, counted when a head's space first asks (the text classifier
        reads its own)."""
        return Terms.of(self.texts(range(len(self))))

    @cached_property
    def classifier_counts(self) -> text_classifier.CountedTexts:
        """The text classifier's n-gram counts of these rows, each row counted the first time a fit asks."""
        return text_classifier.CountedTexts(self.texts)

    @classmethod
    def build(cls, states: Sequence[Any], hidden: np.ndarray, letters: Sequence[np.ndarray], gold: np.ndarray,
              groups: Sequence[str], text_fields: Sequence[str], categorical_fields: Sequence[str],
              encoder: str | None = sentence_encoders.DEFAULT_ENCODER, embedded: np.ndarray | None = None) -> "Signals":
        """`encoder`: the sentence encoder whose embedding of the evidence joins the text (None:
        none); `embedded`: those embeddings when the caller has them already (in `states` order)."""
        states = list(states)
        texts = [evidence_text(s, text_fields) for s in states]
        if encoder is not None and embedded is None:
            embedded = sentence_encoders.embed_all(encoder, texts)
        return cls(states, np.asarray(hidden, dtype=np.float64), np.asarray(letters, dtype=np.float64),
                   np.asarray(gold), list(groups), list(text_fields), list(categorical_fields),
                   [categorical_features(s, categorical_fields) for s in states],
                   encoder, None if encoder is None else np.asarray(embedded, dtype=np.float64))

    def __len__(self) -> int:
        return len(self.gold)

    def texts(self, rows: Sequence[int]) -> list[str]:
        return [evidence_text(self.states[i], self.text_fields) for i in rows]


def centre(letters: np.ndarray) -> np.ndarray:
    return letters - letters.mean(axis=1, keepdims=True)


@dataclass(frozen=True)
class FeatureSpace:
    """The feature space fitted on training rows: vocabulary with idf, indicators, and the
    standardisation of the model's blocks."""

    terms: list[str]
    idf: list[float]
    values: list[str]
    hidden_mean: np.ndarray
    hidden_scale: np.ndarray
    letters_mean: np.ndarray
    letters_scale: np.ndarray
    use_text: bool = True
    sentence_width: int = 0  # the sentence embedding's width (0: the space has no sentence block)
    #: Lexical matrices already built, per (signals, rows): the grid reuses them for every C and weight.
    built: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def fit(cls, s: Signals, rows: Sequence[int], use_text: bool = True, max_terms: int = MAX_TERMS,
            min_df: int = MIN_DF) -> "FeatureSpace":
        kept, df = s.terms.vocabulary(rows, max_terms, min_df) if use_text else ([], [])
        idf = [inverse_document_frequency(len(rows), frequency) for frequency in df]
        values = sorted({v for i in rows for v in s.indicators[i]}) if use_text and CATEGORY_SCALE > 0 else []
        hidden = s.hidden[list(rows)]
        centred = centre(s.letters[list(rows)])
        width = s.sentences.shape[1] if use_text and s.sentences is not None else 0
        return cls(kept, idf, values, hidden.mean(axis=0), _scale(hidden), centred.mean(axis=0), _scale(centred), use_text,
                   width)

    @property
    def evidence_width(self) -> int:
        """The columns read from the evidence: terms, indicators, the sentence embedding."""
        return len(self.terms) + len(self.values) + self.sentence_width

    def lexical(self, s: Signals, rows: Sequence[int]) -> tuple[sparse.csr_matrix, np.ndarray]:
        """The evidence's columns of `rows`: terms and indicators (sparse), the sentence embedding
        (dense: rows x 0 without one)."""
        key = (id(s), tuple(rows))
        if key not in self.built:
            self.built[key] = self._lexical(s, rows)
        return self.built[key]

    @staticmethod
    def indicator_value(s: Signals) -> float:
        """An indicator's value in the design: the block of all an item's fields has length CATEGORY_SCALE."""
        return CATEGORY_SCALE / math.sqrt(max(1, len(s.categorical_fields)))

    def _lexical(self, s: Signals, rows: Sequence[int]) -> tuple[sparse.csr_matrix, np.ndarray]:
        value_index = {v: i for i, v in enumerate(self.values)}
        cols, indptr = [], [0]
        for i in rows:
            cols += [value_index[v] for v in s.indicators[i] if v in value_index]
            indptr.append(len(cols))
        indicators = sparse.csr_matrix((np.full(len(cols), self.indicator_value(s)), cols, indptr),
                                       shape=(len(rows), len(self.values)))
        lexical = sparse.hstack([s.terms.tfidf(rows, self.terms, self.idf), indicators], format="csr")
        if not self.sentence_width:
            return lexical, np.zeros((len(rows), 0))
        assert s.sentences is not None
        return lexical, s.sentences[list(rows)] * SENTENCE_SCALE

    def design(self, s: Signals, rows: Sequence[int], model_weight: float) -> tuple[sparse.csr_matrix, np.ndarray]:
        """The design's columns of `rows`, sparse (terms, indicators) and dense (the sentence
        embedding; with `model_weight`, the standardised hidden state and letters scaled by it)."""
        lexical, dense = self.lexical(s, rows)
        if model_weight == 0:
            return lexical, dense
        hidden = (s.hidden[list(rows)] - self.hidden_mean) / self.hidden_scale * (model_weight / math.sqrt(s.hidden.shape[1]))
        letters = (centre(s.letters[list(rows)]) - self.letters_mean) / self.letters_scale * (
            model_weight / math.sqrt(s.letters.shape[1]))
        return lexical, np.hstack([dense, hidden, letters])

    def matrix(self, s: Signals, rows: Sequence[int], model_weight: float) -> sparse.csr_matrix:
        """The design of `rows` as one sparse matrix (terms, indicators, then the dense blocks)."""
        lexical, dense = self.design(s, rows, model_weight)
        return sparse.hstack([lexical, sparse.csr_matrix(dense)], format="csr")


def _scale(values: np.ndarray) -> np.ndarray:
    scale = values.std(axis=0)
    scale[scale < 1e-8] = 1.0
    return scale


# ----------------------------------------------------------------------------------- the linear map
@dataclass(frozen=True)
class Linear:
    """A fitted head, as weights over the raw inputs (what the head file stores)."""

    space: FeatureSpace
    model_weight: float
    text: np.ndarray  # options x terms
    categorical: np.ndarray  # options x values
    sentence: np.ndarray | None  # options x the embedding's width (None: no sentence block)
    hidden: np.ndarray | None  # options x hidden width (None: the model's blocks are not read)
    letters: np.ndarray | None  # options x options, over centred letter logits
    bias: np.ndarray

    def blocks(self, s: Signals) -> dict[str, Any]:
        """The head file's blocks (decision_router.domain.heads.Head), weights rounded for the file."""
        def rows(matrix: np.ndarray) -> list[list[float]]:
            return [[float(f"{v:.{WEIGHT_DIGITS}g}") for v in row] for row in matrix]

        out: dict[str, Any] = {}
        if self.space.terms:
            out["text"] = {"fields": s.text_fields, "word_ngrams": [1, 2], "char_ngrams": [2, 5], "terms": self.space.terms,
                           "idf": [float(f"{v:.{WEIGHT_DIGITS + 1}g}") for v in self.space.idf], "weights": rows(self.text)}
        if self.space.values:
            out["categorical"] = {"fields": s.categorical_fields, "values": self.space.values,
                                  "weights": rows(self.categorical)}
        if self.sentence is not None:
            out["sentence"] = {"encoder": s.encoder, "fields": s.text_fields, "weights": rows(self.sentence)}
        if self.hidden is not None and self.letters is not None:
            out["hidden"] = {"weights": rows(self.hidden)}
            out["letters"] = {"weights": rows(self.letters)}
        out["bias"] = [float(f"{v:.{WEIGHT_DIGITS}g}") for v in self.bias]
        return out


def fit_linear(s: Signals, rows: Sequence[int], n_options: int, C: float, model_weight: float,
               use_text: bool = True, space: FeatureSpace | None = None) -> Linear:
    """The head fitted on `rows`: the one fitter of `make fit`, relearning and `make fit-history`."""
    rows = list(rows)
    space = space or FeatureSpace.fit(s, rows, use_text)
    lexical, dense = space.design(s, rows, model_weight)
    gold = s.gold[rows]
    width = lexical.shape[1] + dense.shape[1]
    coef = np.zeros((n_options, width))
    bias = np.full(n_options, UNSEEN_BIAS)
    classes, y = np.unique(gold, return_inverse=True)
    if len(classes) == 1:  # one answer seen: it is the only one predicted
        bias[classes[0]] = 0.0
    else:
        # scikit-learn's binomial regression of two classes at C is this two-row one at C / 2
        coef[classes], intercept = _minimise(lexical, dense, y, len(classes), C if len(classes) > 2 else C / 2)
        bias[classes] = intercept - intercept.mean()  # softmax is blind to a common shift
    lexical_width = space.evidence_width
    text = coef[:, :len(space.terms)]
    categorical = coef[:, len(space.terms):len(space.terms) + len(space.values)] * FeatureSpace.indicator_value(s)  # applied as 1.0
    sentence = coef[:, len(space.terms) + len(space.values):lexical_width] * SENTENCE_SCALE if space.sentence_width else None
    hidden = letters = None
    if model_weight > 0:
        hidden_width, k = s.hidden.shape[1], s.letters.shape[1]
        hidden = coef[:, lexical_width:lexical_width + hidden_width] * (model_weight / math.sqrt(hidden_width)) / space.hidden_scale
        letters = coef[:, lexical_width + hidden_width:] * (model_weight / math.sqrt(k)) / space.letters_scale
        bias = bias - hidden @ space.hidden_mean - letters @ space.letters_mean
    return Linear(space, model_weight, text, categorical, sentence, hidden, letters, bias)


def _minimise(lexical: sparse.csr_matrix, dense: np.ndarray, y: np.ndarray, n_classes: int,
              C: float) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression on scikit-learn's LogisticRegression objective (the mean
    log loss plus |W|^2 / (2 C n), intercepts free), by scipy's L-BFGS-B: the coefficients
    (classes x columns, the sparse ones then the dense) and intercepts. Written out rather than
    scikit-learn's estimator so that the dense columns (the sentence embedding, the hidden state:
    most of each row's values) are multiplied by BLAS, not as sparse entries. From zero, as scikit-
    learn's estimator starts, it takes the same steps to the same head: a start from another C's or
    other rows' head would stop elsewhere, short of the optimum, and one that had seen a fold's
    rows would leave them in that fold's out-of-fold answers."""
    n, sparse_width = lexical.shape
    width = sparse_width + dense.shape[1]
    transposed = lexical.T.tocsr()
    onehot = np.zeros((n, n_classes))
    onehot[np.arange(n), y] = 1.0
    strength = 1.0 / (C * n)

    def loss_and_gradient(x: np.ndarray) -> tuple[float, np.ndarray]:
        W, b = x[:-n_classes].reshape(width, n_classes), x[-n_classes:]
        z = lexical @ W[:sparse_width] + dense @ W[sparse_width:] + b
        normaliser = logsumexp(z, axis=1)
        loss = float(np.mean(normaliser - z[np.arange(n), y])) + 0.5 * strength * float(np.vdot(W, W))
        residual = (np.exp(z - normaliser[:, None]) - onehot) / n
        gradient = np.empty_like(W)
        gradient[:sparse_width] = transposed @ residual
        gradient[sparse_width:] = dense.T @ residual
        gradient += strength * W
        return loss, np.concatenate([gradient.ravel(), residual.sum(axis=0)])

    found = optimize.minimize(loss_and_gradient, np.zeros((width + 1) * n_classes), jac=True, method="L-BFGS-B",
                              options={"maxiter": SOLVER_STEPS, "maxcor": SOLVER_MEMORY, "gtol": SOLVER_TOLERANCE,
                                       "ftol": 64 * np.finfo(float).eps, "maxls": 50})
    return found.x[:-n_classes].reshape(width, n_classes).T, found.x[-n_classes:]


def numpy_logits(linear: Linear, s: Signals, rows: Sequence[int]) -> np.ndarray:
    """The head's logits computed with matrices (fast, for the grid search)."""
    rows = list(rows)
    lexical, embedded = linear.space.lexical(s, rows)
    # the design holds indicators at FeatureSpace.indicator_value and the embedding at SENTENCE_SCALE; the
    # head's weights apply them as they are
    out = lexical @ np.hstack([linear.text, linear.categorical / FeatureSpace.indicator_value(s)]).T + linear.bias
    if linear.sentence is not None:
        out = out + embedded @ (linear.sentence / SENTENCE_SCALE).T
    if linear.hidden is not None and linear.letters is not None:
        out = out + s.hidden[rows] @ linear.hidden.T + centre(s.letters[rows]) @ linear.letters.T
    return np.asarray(out)


# ----------------------------------------------------------------------------------- the comparison
def baseline_probabilities(s: Signals, train: Sequence[int], held: Sequence[int], n_options: int,
                           held_signals: Signals | None = None) -> np.ndarray:
    """The text-only classifier a user would compare with (evaluation/text_classifier.py: TF-IDF
    of word 1-2-grams and character 2-5-grams, sublinear tf, + logistic regression, C=10), fitted
    on `train` rows, predicting `held` rows (of `held_signals`, by default the same). Each row's
    n-grams are counted once per Signals, whatever the number of fits that read it."""
    other = held_signals if held_signals is not None else s
    return text_classifier.probabilities(s.classifier_counts.rows(train), s.gold[list(train)],
                                         other.classifier_counts.rows(held), n_options)


def softmax_rows(logits: np.ndarray, temperature: float = 1.0) -> list[np.ndarray]:
    return metrics.probabilities_at(list(logits), temperature)


#: The head file's keys that bind it to the model whose hidden state it reads.
MODEL_BINDING = ("model_sha256", "hidden_size", "prompt_version")


def head_file(linear: Linear, s: Signals, *, options: list[str], binding: dict[str, Any], temperature: float,
              min_confidence: float | None, fit: dict[str, Any], min_margin: float = 0.0,
              by_option: dict[str, float] | None = None, letters: bool = True) -> dict:
    """The head file (decision_router.domain.heads.Head) over fitted weights: the one writer of
    `make fit`, relearning and `make fit-history`, so their files cannot drift apart. Its version
    is left empty for `stamp_version`, once every part (the novelty part too) is in. `letters`:
    False for a head whose letter weights read nothing (fit-history's: a constant column);
    `by_option`: the per-option minimums, where the fit chose them."""
    blocks = linear.blocks(s)
    if not letters:
        blocks.pop("letters", None)
    return {
        "format": FORMAT,
        "version": "",
        "question_sha256": binding["question_sha256"],
        **({key: binding[key] for key in MODEL_BINDING} if "hidden" in blocks else {}),
        "options": options,
        **blocks,
        "temperature": round(temperature, 4),
        "thresholds": {"min_confidence": min_confidence if min_confidence is not None else 1.0, "min_margin": min_margin,
                       **({"by_option": by_option} if by_option is not None else {})},
        "fit": fit,
    }


def stamp_version(document: dict[str, Any], policy: str, question: str) -> dict[str, Any]:
    """The head's version, `<policy>.<question>.<fitted_on>.<digest of its content>`, written into
    `document` (and returned): the same weights fitted the same day get the same version."""
    digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:10]
    document["version"] = f"{policy}.{question}.{document['fit']['fitted_on']}.{digest}"
    return document


def head_bytes(document: dict[str, Any]) -> bytes:
    """A head file's bytes, as `make fit`, relearning and `make fit-history` write it (one JSON line)."""
    return (json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
