"""The text classifier a head is compared with: what a user would fit on the same words.

TF-IDF of word 1–2-grams and character 2–5-grams (scikit-learn's tokens, lower-cased; sublinear
tf; each kind scaled to unit length, over the n-grams its training rows have), then an
L2-regularised logistic regression of strength C=10, one-vs-rest, its probabilities normalised.

Held to the fitter's budget (seconds for thousands of rows, bounded memory at any size):

- each text's n-grams are counted once (`CountedTexts`), hashed into 2**20 columns of each kind
  (scikit-learn's HashingVectorizer: no vocabulary is kept, so a row costs the same memory
  whatever the export), and re-used by every fit on other rows of the same texts (the folds, the
  learning curve);
- a fit reads at most MAX_FEATURES columns of each kind, the most frequent in its training rows,
  so the weights are at most options x 2 x MAX_FEATURES;
- the regression is fitted by stochastic gradient descent (SGDClassifier, log loss, its penalty
  alpha = 1 / (C n), the same objective as C for n training rows): a few passes over the rows, where
  L-BFGS over every n-gram of every option took minutes and gigabytes (docs/learning/fit-history.md).
"""

from __future__ import annotations

import warnings
from typing import Callable, Sequence

import numpy as np
from scipy import sparse
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.linear_model import SGDClassifier

#: The regression's strength: the C users of scikit-learn's logistic regression typically leave.
C = 10.0
WORD_NGRAMS, CHAR_NGRAMS = (1, 2), (2, 5)
#: Hashed columns of each kind (words, characters): collisions stay rare at a few hundred
#: thousand distinct n-grams.
HASH_BITS = 20
#: At most this many columns of each kind, the most frequent in the training rows, are read.
MAX_FEATURES = 2**18
#: The gradient descent's seed (the same rows give the same classifier).
SEED = 0

_WORDS = HashingVectorizer(ngram_range=WORD_NGRAMS, n_features=2**HASH_BITS, alternate_sign=False, norm=None,
                           dtype=np.float32)
_CHARS = HashingVectorizer(analyzer="char", ngram_range=CHAR_NGRAMS, n_features=2**HASH_BITS, alternate_sign=False,
                           norm=None, dtype=np.float32)


def count(texts: Sequence[str]) -> sparse.csr_matrix:
    """Each text's hashed n-gram counts: word columns, then character columns."""
    return sparse.hstack([_WORDS.transform(texts), _CHARS.transform(texts)], format="csr")


class CountedTexts:
    """The counts of a collection's texts, each text counted the first time a fit asks for it
    (`texts(rows)` gives the texts of those rows)."""

    def __init__(self, texts: Callable[[Sequence[int]], list[str]]) -> None:
        self._texts = texts
        self._bank = sparse.csr_matrix((0, 2 * 2**HASH_BITS), dtype=np.float32)
        self._at: dict[int, int] = {}  # row -> its line in the bank

    def rows(self, rows: Sequence[int]) -> sparse.csr_matrix:
        new = sorted({int(r) for r in rows} - self._at.keys())
        if new:
            start = len(self._at)
            self._at.update((row, start + i) for i, row in enumerate(new))
            self._bank = sparse.vstack([self._bank, count(self._texts(new))], format="csr")
        return self._bank[[self._at[int(r)] for r in rows]]


#: The column ranges of each kind of n-gram in `count`'s matrix.
KINDS = {"word": slice(0, 2**HASH_BITS), "character": slice(2**HASH_BITS, 2 * 2**HASH_BITS)}


def _kind_columns(train: sparse.csr_matrix, kind: slice) -> np.ndarray:
    """The columns of one kind the training rows have, at most MAX_FEATURES of the most frequent
    (ties: the lower column), in column order."""
    frequency = np.bincount(train[:, kind].indices, minlength=kind.stop - kind.start)
    seen = np.flatnonzero(frequency)
    if len(seen) > MAX_FEATURES:
        seen = np.sort(seen[np.argsort(-frequency[seen], kind="stable")[:MAX_FEATURES]])
    return seen + kind.start


def columns_read(train: sparse.csr_matrix) -> dict[str, dict[str, int]]:
    """Per kind of n-gram, the columns the training rows have and those a fit on them reads (all,
    or the MAX_FEATURES most frequent): what a report says when the classifier left some out."""
    return {name: {"seen": int(np.count_nonzero(np.bincount(train[:, kind].indices, minlength=kind.stop - kind.start))),
                   "read": len(_kind_columns(train, kind))} for name, kind in KINDS.items()}


def features(train: sparse.csr_matrix, held: sparse.csr_matrix) -> tuple[sparse.csr_matrix, sparse.csr_matrix]:
    """TF-IDF of the training and held rows' counts over the columns the training rows have,
    each kind weighted and scaled to unit length on its own (idf from the training rows)."""
    train_blocks, held_blocks = [], []
    for kind in KINDS.values():
        columns = _kind_columns(train, kind)
        tfidf = TfidfTransformer(sublinear_tf=True)
        train_blocks.append(tfidf.fit_transform(train[:, columns]))
        held_blocks.append(tfidf.transform(held[:, columns]))
    return (sparse.hstack(train_blocks, format="csr", dtype=np.float64),
            sparse.hstack(held_blocks, format="csr", dtype=np.float64))


def probabilities(train: sparse.csr_matrix, gold: np.ndarray, held: sparse.csr_matrix, n_options: int) -> np.ndarray:
    """The classifier fitted on the `train` rows' counts (`count`) with their `gold` options,
    its probabilities of each of `n_options` on the `held` rows (0 for an option it never saw)."""
    gold = np.asarray(gold)
    if len(gold) != train.shape[0]:
        raise ValueError(f"gold: {len(gold)} options for {train.shape[0]} training rows")
    out = np.zeros((held.shape[0], n_options))
    classes = np.unique(gold)
    if len(classes) == 1:  # one answer seen: it is the only one predicted
        out[:, classes[0]] = 1.0
        return out
    X, H = features(train, held)
    model = SGDClassifier(loss="log_loss", alpha=1.0 / (C * len(gold)), random_state=SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, gold)
    out[:, model.classes_] = model.predict_proba(H)
    return out
