"""The sentence encoder (decision_router.sentences): the pinned weights, what the original model is
published to do (unit vectors, translations near each other, unrelated sentences apart), one
vector for one text whether embedded alone or in a batch, and a head's sentence block read by the
routing function exactly as the fitter computed it."""

from __future__ import annotations

import numpy as np
import pytest

from decision_router import sentences
from decision_router.domain.heads import Head

CARD = ["My card has not arrived yet", "Mi tarjeta aún no ha llegado", "Meine Karte ist noch nicht angekommen",
        "Ma carte n'est pas encore arrivée"]
UNRELATED = "The printer on the third floor is jammed again"


def test_vectors_have_the_published_width_and_unit_length():
    vectors = sentences.embed_all(sentences.DEFAULT_ENCODER, CARD + [UNRELATED, ""])
    assert vectors.shape == (6, 512)
    assert np.allclose(np.linalg.norm(vectors[:5], axis=1), 1.0, atol=1e-5)


def test_a_sentence_is_nearer_its_translations_than_an_unrelated_sentence():
    vectors = sentences.embed_all(sentences.DEFAULT_ENCODER, CARD + [UNRELATED])
    similarity = vectors @ vectors.T
    translations = similarity[0, 1:4]
    assert translations.min() >= 0.75, translations
    assert similarity[:4, 4].max() <= 0.45, similarity[:4, 4]


def test_one_text_alone_and_in_a_batch_gives_the_same_vector():
    batch = sentences.embed_all(sentences.DEFAULT_ENCODER, CARD)
    alone = np.array([sentences.embed(sentences.DEFAULT_ENCODER, text) for text in CARD])
    assert np.abs(batch - alone).max() < 1e-6


def test_an_unknown_encoder_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown sentence encoder 'bert'"):
        sentences.encoder("bert")


def test_changed_weights_are_refused_naming_the_file(monkeypatch):
    monkeypatch.setitem(sentences.UniversalSentenceEncoder.files, "sp.model", "0" * 64)
    with pytest.raises(RuntimeError, match=r"sp\.model has sha256 .* not the pinned 000000000000"):
        sentences.UniversalSentenceEncoder()


def sentence_head(weights: list[list[float]]) -> Head:
    return Head.model_validate({
        "version": "v", "question_sha256": "a" * 64, "options": ["cards", "printers"],
        "sentence": {"encoder": "use-multilingual-v3", "fields": ["body"], "weights": weights},
        "bias": [0.0, 0.0], "thresholds": {"min_confidence": 0.5, "min_margin": 0.0},
        "fit": {"examples": 2, "fitted_on": "2026-12-06", "regularisation": 1.0, "folds": 2, "cv_accuracy": 1.0,
                "cv_ece": 0.0}})


def test_a_head_reads_the_evidence_embedding_as_the_fitter_computes_it():
    card, printer = sentences.embed_all(sentences.DEFAULT_ENCODER, [CARD[0], UNRELATED])
    head = sentence_head([[float(v) for v in card * 5], [float(v) for v in printer * 5]])
    assert not head.reads_model  # the words alone: it serves any model, and may answer without the endpoint
    for text, expected in ((CARD[1], "cards"), (CARD[2], "cards"), ("La impresora está atascada", "printers")):
        probabilities = head.probabilities({"body": text})
        assert head.options[int(np.argmax(probabilities))] == expected, (text, probabilities)
    vector = sentences.embed_all(sentences.DEFAULT_ENCODER, [CARD[3]])[0]
    assert head.logits({"body": CARD[3]}) == pytest.approx(head.logits({"body": "ignored"}, sentence=vector.tolist()))


def test_a_sentence_block_of_the_wrong_width_fails_at_load():
    with pytest.raises(ValueError, match=r"sentence\.weights\[0\] has 3 values; expected 512"):
        sentence_head([[0.0] * 3, [0.0] * 3])
