"""The text classifier a head is compared with (evaluation/text_classifier.py), on tiny texts: the
same TF-IDF as scikit-learn's vectorizers, a bounded number of columns, each text counted once."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from evaluation import text_classifier

TEXTS = ["my card has not arrived", "card arrived broken", "refund my payment please", "payment refund is late",
         "the app crashes at login", "login fails on the app"]
GOLD = np.array([0, 0, 1, 1, 2, 2])


def test_its_tfidf_is_scikit_learns_over_the_training_rows_ngrams():
    train, held = text_classifier.features(text_classifier.count(TEXTS[:4]), text_classifier.count(TEXTS[4:]))
    for analyzer, ngrams in (("word", (1, 2)), ("char", (2, 5))):
        vectorizer = TfidfVectorizer(analyzer=analyzer, ngram_range=ngrams, sublinear_tf=True)
        expected_train, expected_held = vectorizer.fit_transform(TEXTS[:4]), vectorizer.transform(TEXTS[4:])
        width = len(vectorizer.vocabulary_)
        ours = (train[:, :width], held[:, :width]) if analyzer == "word" else (train[:, -width:], held[:, -width:])
        for got, expected in zip(ours, (expected_train, expected_held)):
            # the same values in each row (columns in another order: hashed, not sorted by n-gram)
            for row in range(expected.shape[0]):
                assert np.allclose(np.sort(got[row].data), np.sort(expected[row].data))
    assert train.shape[1] == held.shape[1] == (len(TfidfVectorizer(ngram_range=(1, 2)).fit(TEXTS[:4]).vocabulary_)
                                               + len(TfidfVectorizer(analyzer="char", ngram_range=(2, 5)).fit(TEXTS[:4]).vocabulary_))


def test_it_reads_at_most_max_features_columns_of_each_kind_the_most_frequent(monkeypatch):
    monkeypatch.setattr(text_classifier, "MAX_FEATURES", 3)
    counts = text_classifier.count(TEXTS)
    train, held = text_classifier.features(counts, counts)
    assert train.shape[1] == held.shape[1] == 6
    words = text_classifier._kind_columns(counts, slice(0, 2**text_classifier.HASH_BITS))
    frequency = np.bincount(counts[:, :2**text_classifier.HASH_BITS].indices, minlength=2**text_classifier.HASH_BITS)
    assert sorted(frequency[words]) == sorted(frequency)[-3:]  # the three most frequent word n-grams
    read = text_classifier.columns_read(counts)  # what a report says it left out
    assert read["word"] == {"seen": int(np.count_nonzero(frequency)), "read": 3} and read["character"]["read"] == 3
    assert read["character"]["seen"] > 3


def test_each_text_is_counted_once_and_rows_come_in_the_order_asked():
    asked: list[int] = []

    def texts(rows):
        asked.extend(rows)
        return [TEXTS[r] for r in rows]

    counted = text_classifier.CountedTexts(texts)
    first = counted.rows([3, 1, 3])
    again = counted.rows([1, 5])
    assert sorted(asked) == [1, 3, 5]  # 3 and 1 once, though asked for twice
    assert (first != text_classifier.count([TEXTS[3], TEXTS[1], TEXTS[3]])).nnz == 0
    assert (again != text_classifier.count([TEXTS[1], TEXTS[5]])).nnz == 0


def test_it_learns_the_words_of_each_option_and_never_predicts_one_it_did_not_see():
    counts = text_classifier.count(TEXTS * 5)
    probabilities = text_classifier.probabilities(counts, np.tile(GOLD, 5), text_classifier.count(
        ["my card never arrived", "a refund of my payment", "the app crashes"]), n_options=4)
    assert probabilities.argmax(axis=1).tolist() == [0, 1, 2]
    assert np.allclose(probabilities.sum(axis=1), 1.0) and (probabilities[:, 3] == 0).all()


def test_one_option_seen_is_the_only_one_predicted_and_gold_must_match_the_rows():
    counts = text_classifier.count(TEXTS[:2])
    assert text_classifier.probabilities(counts, np.array([1, 1]), counts, 3).tolist() == [[0, 1, 0], [0, 1, 0]]
    with pytest.raises(ValueError, match="gold: 3 options for 2 training rows"):
        text_classifier.probabilities(counts, np.array([1, 1, 0]), counts, 3)
