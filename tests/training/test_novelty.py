"""Fitting a head's novelty part (training/novelty.py): a class far from every learned one is
flagged, the threshold keeps its in-scope budget out of fold, the part fits the head file's size
limit, and the routing function's pure-Python score is the fitter's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decision_router.domain.heads import Head, nearest_distance
from training import history_judging, history_report, novelty


def clusters(seed: int, k: int = 4, per: int = 60, width: int = 48, far: int = 100):
    """k in-scope classes around their own centres, and `far` items of a class none of them is."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, (k + 1, width))
    gold = np.repeat(np.arange(k), per)
    hidden = centres[gold] + rng.normal(0, 1, (len(gold), width))
    fresh = centres[gold] + rng.normal(0, 1, (len(gold), width))  # new in-scope items, never fitted on
    return hidden, gold, fresh, centres[k] + rng.normal(0, 1, (far, width))


def space_of(section: dict) -> novelty.Space:
    means = np.array([row if row else [0.0] * len(section["projection"]) for row in section["means"]])
    return novelty.Space(np.array(section["centre"]), np.array(section["projection"]), means,
                         np.array([bool(row) for row in section["means"]]))


def test_a_class_far_from_every_learned_one_is_flagged_and_the_in_scope_budget_holds():
    hidden, gold, fresh, far = clusters(0)
    section, said = novelty.fit_novelty(hidden, gold, 4, room_bytes=400_000, budget=0.04, out_of_scope=far[:20])
    assert section is not None and "threshold" in said
    assert section["out_of_fold_in_scope_review"] <= 0.04  # chosen out of fold on the training items alone
    space = space_of(section)
    assert (space.score(far) > section["threshold"]).mean() == 1.0
    assert (space.score(fresh) > section["threshold"]).mean() < 0.10  # about the budget on new in-scope items
    assert (section["out_of_scope_examples"], section["out_of_scope_caught"]) == (20, 1.0)


@pytest.mark.parametrize("budget", [0.01, 0.04, 0.10, 0.25])
def test_the_threshold_sends_at_most_its_budget_of_training_items_to_review_out_of_fold(budget):
    hidden, gold, _, _ = clusters(1)
    section, _ = novelty.fit_novelty(hidden, gold, 4, room_bytes=400_000, budget=budget)
    assert section is not None
    assert budget - 1 / len(gold) - 0.005 <= section["out_of_fold_in_scope_review"] <= budget
    assert section["in_scope_budget"] == budget


def test_threshold_for_lets_at_most_the_budget_above_it():
    scores = np.arange(100, dtype=float)
    assert novelty.threshold_for(scores, 0.04) == 95.0  # 96..99 above: 4 %
    assert novelty.threshold_for(scores, 0.0) == 99.0
    with pytest.raises(ValueError, match="novelty budget 1.5: a share of in-scope items between 0 and 1"):
        novelty.fit_novelty(np.zeros((10, 4)), np.zeros(10, dtype=int), 2, room_bytes=10_000, budget=1.5)


def test_the_part_is_sized_to_the_room_the_head_file_leaves():
    hidden, gold, _, _ = clusters(2)
    wide = novelty.fit_novelty(hidden, gold, 4, room_bytes=400_000)[0]
    narrow = novelty.fit_novelty(hidden, gold, 4, room_bytes=6 * (48 + 4) * novelty.VALUE_BYTES + 48 * novelty.VALUE_BYTES)[0]
    assert wide is not None and narrow is not None
    assert len(wide["projection"]) == 48 and len(narrow["projection"]) == 6
    assert len(json.dumps(narrow, separators=(",", ":"))) <= 6 * (48 + 4) * novelty.VALUE_BYTES + 48 * novelty.VALUE_BYTES + 300
    none, said = novelty.fit_novelty(hidden, gold, 4, room_bytes=1000)
    assert none is None and said.startswith("no novelty part: room for 0 reduced dimensions")
    same, said = novelty.fit_novelty(np.zeros_like(hidden), gold, 4, room_bytes=400_000)
    assert same is None and said == "no novelty part: the 240 items' hidden states are all the same"


def test_attach_writes_a_part_the_routing_function_scores_as_the_fitter_does():
    hidden, gold, _, far = clusters(3, width=24)
    document = {"format": "decision-router-head/2", "version": "v", "question_sha256": "b" * 64,
                "options": ["a", "b", "c", "d"], "text": {"fields": ["body"], "terms": ["w:x"], "idf": [1.0],
                                                          "weights": [[0.1], [0.2], [0.3], [0.4]]},
                "bias": [0.0] * 4, "thresholds": {"min_confidence": 0.5, "min_margin": 0.0},
                "fit": {"examples": 240, "fitted_on": "2026-12-05", "regularisation": 1.0, "folds": 5,
                        "cv_accuracy": 0.9, "cv_ece": 0.02}}
    binding = {"model_sha256": "c" * 64, "hidden_size": 24, "prompt_version": "signals-v1"}
    said = novelty.attach(document, gold, hidden=hidden, binding=binding, max_bytes=2 * 1024 * 1024, budget=0.04)
    assert "24 reduced dimensions" in said
    head = Head.model_validate(document)  # a text head now bound to the model whose hidden state it reads
    assert head.model_sha256 == "c" * 64 and head.hidden_size == 24 and head.novelty is not None
    expected = space_of(document["novelty"]).score(np.vstack([hidden[:5], far[:5]]))
    assert [head.novelty_score(list(h)) for h in np.vstack([hidden[:5], far[:5]])] == pytest.approx(expected, rel=1e-9)


def test_novelty_figures_compare_with_the_head_thresholds_alone_and_give_the_auroc():
    gold = ["a", "b", "a", None, None, None]
    auto = [True, True, False, False, False, True]
    unlike_only = [False, False, True, True, False, False]  # held for novelty alone
    scores = [1.0, 2.0, 5.0, 6.0, 7.0, 1.5]
    found = history_judging.novelty_figures(gold, auto, unlike_only, scores, threshold=4.0)
    assert found["threshold"] == 4.0 and found["in_scope_above_threshold"] == pytest.approx(1 / 3)
    assert found["out_of_scope_above_threshold"] == pytest.approx(2 / 3)
    # without novelty the third in-scope item and the first out-of-scope one would have been answered
    assert found["head_thresholds_alone"] == {"caught": pytest.approx(1 / 3), "in_scope_sent_to_review": 0.0}
    assert found["auroc"] == pytest.approx(7 / 9)
    report = {"in_scope_accuracy": 0.9, "auto_share": 0.5, "auto_precision": 0.96,
              "out_of_scope": {"items": 3, "caught": 2 / 3, "in_scope_sent_to_review": 1 / 3}, "novelty": found}
    assert history_report.out_of_scope_line(report) == (
        "in scope 90.0% right; answered 50.0% at precision 96.0%; out of scope: 66.7% of 3 caught at 33.3% of "
        "in-scope sent to review (head thresholds alone: 33.3% at 0.0%); novelty AUROC 0.778")
    assert history_report.out_of_scope_line({**report, "out_of_scope": None}) is None


OTHER = ["weather", "paris", "movie", "recipe", "song", "flight", "hotel", "joke", "president", "calendar"]


def unlike(n: int, seed: int) -> list[dict]:
    """Rows of the label that means "none of these": words no option's rows have."""
    rng = np.random.default_rng(seed)
    return [{"subject": " ".join(rng.choice(OTHER, 3)), "body": " ".join(rng.choice(OTHER, 4)), "label": "none"}
            for _ in range(n)]


def test_fit_history_fits_novelty_and_reports_what_it_catches_of_the_out_of_scope_label(tmp_path, capsys):
    from tests.training.test_history import export, run, write_jsonl

    train = write_jsonl(tmp_path / "train.jsonl", export(6, 30, 1) + unlike(12, 1))
    test = write_jsonl(tmp_path / "test.jsonl", export(6, 6, 2) + unlike(30, 2))
    out = tmp_path / "out"
    code, _ = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                             "--out", str(out), "--out-of-scope-label", "none", "--novelty-budget", "0.05"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["read"]["out_of_scope"] == {"label": "none", "data": 12, "test": 30}
    assert report["options"] == 6 and report["n_train"] == 180  # "none" is no option
    found = report["novelty"]
    assert found["in_scope_budget"] == 0.05 and found["out_of_fold_in_scope_review"] <= 0.05
    assert found["data_out_of_scope"]["items"] == 12
    assert found["auroc"] > 0.9 and found["out_of_scope_above_threshold"] > 0.8
    assert report["out_of_scope"]["items"] == 30 and report["out_of_scope"]["caught"] >= found["head_thresholds_alone"]["caught"]
    assert report["in_scope_accuracy"] is not None and report["auto_precision"] is not None
    lines = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert all(isinstance(line["novelty"], float) for line in lines)
    printed = capsys.readouterr().err.splitlines()
    assert printed[-2].startswith("fit-history: in scope ") and f"novelty AUROC {found['auroc']:.3f}" in printed[-2]

    code, _ = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "body", "--label", "label",
                             "--out", str(tmp_path / "bad"), "--out-of-scope-label", "nowhere"])
    assert code == 2 and "--out-of-scope-label 'nowhere': no row of DATA or TEST has that label" in capsys.readouterr().err


def surprised(seed: int, n: int, oos: int):
    """The head's surprise: small on in-scope items, large on out-of-scope ones whose hidden
    states sit among the in-scope classes (the distance alone cannot tell them apart)."""
    rng = np.random.default_rng(seed)
    return rng.exponential(0.2, n), rng.uniform(1.5, 3.0, oos)


def test_out_of_scope_training_items_choose_the_surprise_weight_that_catches_them():
    hidden, gold, _, _ = clusters(4)
    inside = hidden[:30] + np.random.default_rng(9).normal(0, 0.1, hidden[:30].shape)  # near learned means
    e_in, e_out = surprised(4, len(gold), len(inside))
    rows = np.arange(len(gold))
    alone, _ = novelty.fit_novelty(hidden, gold, 4, room_bytes=400_000, out_of_scope=inside)
    mixed, said = novelty.fit_novelty(hidden, gold, 4, room_bytes=400_000, out_of_scope=inside,
                                      surprise=novelty.Surprise(rows, e_in, e_out))
    assert alone is not None and mixed is not None
    assert alone["out_of_scope_caught"] < 0.2  # by distance, these look in scope
    assert mixed["surprise_weight"] > 0 and mixed["out_of_scope_caught"] == 1.0
    assert "chosen on 30 out-of-scope training items" in said
    assert mixed["out_of_fold_in_scope_review"] <= 0.04  # the budget holds for the combined score


def test_without_out_of_scope_items_the_two_are_put_on_one_footing():
    hidden, gold, _, _ = clusters(5)
    e_in, _ = surprised(5, len(gold), 0)
    section, said = novelty.fit_novelty(hidden, gold, 4, room_bytes=400_000,
                                        surprise=novelty.Surprise(np.arange(len(gold)), e_in))
    assert section is not None and "both on one footing" in said
    distances = np.array([novelty.Space.fit(hidden, gold, 4, 48).score(hidden)]).ravel()
    # the ratio of the spreads, the distances taken out of fold (so only about the in-sample ratio)
    assert section["surprise_weight"] == pytest.approx(distances.std() / e_in.std(), rel=0.5)


def test_the_routing_function_adds_the_heads_surprise_as_the_fitter_does():
    hidden, gold, _, far = clusters(6, width=24)
    e_in, _ = surprised(6, len(gold), 0)
    section, _ = novelty.fit_novelty(hidden, gold, 4, room_bytes=400_000, surprise=novelty.Surprise(np.arange(len(gold)), e_in))
    assert section is not None
    head = Head.model_validate({"format": "decision-router-head/2", "version": "v", "question_sha256": "b" * 64,
                                "model_sha256": "c" * 64, "hidden_size": 24, "prompt_version": "signals-v1",
                                "options": ["a", "b", "c", "d"], "bias": [0.0] * 4,
                                "hidden": {"weights": [[0.0] * 24 for _ in range(4)]},
                                "thresholds": {"min_confidence": 0.5, "min_margin": 0.0},
                                "fit": {"examples": 240, "fitted_on": "2026-12-05", "regularisation": 1.0, "folds": 5,
                                        "cv_accuracy": 0.9, "cv_ece": 0.02}, "novelty": section})
    probabilities = [0.4, 0.3, 0.2, 0.1]
    distance = space_of(section).score(far[:1])[0]
    assert head.novelty_score(list(far[0]), probabilities) == pytest.approx(
        distance + section["surprise_weight"] * -np.log(0.4), rel=1e-9)
    with pytest.raises(ValueError, match="reads its own probabilities"):
        head.novelty_score(list(far[0]))


#: Rows of each priority the two `fit_head` tests below fit on: enough for the cross-validation to
#: tell a signal from noise (it does on every seed tried), few enough for the fast tier (the
#: real-sized fit is `make fit`'s).
ROWS_PER_PRIORITY = 12


def incident_examples(hidden_of) -> list:
    """The shipped incidents' first ROWS_PER_PRIORITY training rows of each priority as examples,
    each with the hidden state `hidden_of(gold)` gives it."""
    from tests.training.test_gate import POLICY, PRIORITY, REPO, Example, build_state, parse_item

    rows = [json.loads(line) for line in (REPO / "bench/data/incidents.jsonl").read_text().splitlines()]
    taken: dict[str, int] = {}
    train = []
    for r in (x for x in rows if x.get("split") != "test"):
        priority = r["gold"]["priority"]
        if taken.setdefault(priority, 0) == ROWS_PER_PRIORITY:
            continue
        taken[priority] += 1
        i, gold = len(train), PRIORITY.option_ids.index(priority)
        train.append(Example(policy="incident", question="priority", case_id=str(i), where=f"t:{i}", split="train",
                             fold_group=str(i), option_ids=PRIORITY.option_ids, gold=gold,
                             state=build_state(POLICY, parse_item("incident", r["item"])), hidden=hidden_of(gold),
                             letter_logits=np.zeros(len(PRIORITY.options)), allowed_token_mass=0.9, prompt_version="v"))
    assert sorted(taken.values()) == [ROWS_PER_PRIORITY] * len(PRIORITY.options)
    return train


def test_a_head_on_the_words_alone_gets_its_novelty_part_in_the_encoders_space_so_it_still_serves_any_model():
    from datetime import date

    from tests.training.test_gate import MODEL, POLICY, PRIORITY
    from training.fitting import fit_head

    rng = np.random.default_rng(0)
    train = incident_examples(lambda gold: rng.normal(0, 1, 8))  # hidden states of noise
    fit, document = fit_head(POLICY, PRIORITY, train, MODEL, sources=["t"], curve=False, fitted_on=date(2026, 12, 5))
    assert fit.model_weight == 0.0  # the noise is given no weight: the head reads the words alone
    assert document["novelty"]["score"] == "nearest" and "model_sha256" not in document
    head = Head.model_validate(document)
    assert not head.reads_model and head.sentence is not None


def test_make_fit_gives_a_head_a_novelty_part_in_the_encoders_space_that_routing_scores_as_fitted():
    """`make fit` (fit_head) has no out-of-scope training items, so the stored score is the
    distance to the nearest kept training items in the sentence encoder's space alone (the head's
    confidence threshold holds what it cannot choose between), and the routing function's score of
    a training item is exactly that distance."""
    from datetime import date

    from tests.training.test_gate import MODEL, POLICY, PRIORITY
    from training.fitting import fit_head

    rng = np.random.default_rng(0)

    def says_the_answer_noisily(gold: int) -> np.ndarray:
        hidden = rng.normal(0, 1, MODEL.hidden_size)
        hidden[gold % MODEL.hidden_size] += 3.0
        return hidden

    train = incident_examples(says_the_answer_noisily)
    fit, document = fit_head(POLICY, PRIORITY, train, MODEL, sources=["t"], curve=False, fitted_on=date(2026, 12, 5))
    assert fit.model_weight > 0
    section = document["novelty"]
    assert section["score"] == "nearest" and "surprise_weight" not in section
    head = Head.model_validate(document)
    assert head.hidden is not None and head.novelty is not None and head.novelty.score == "nearest"
    example = train[0]
    probabilities = head.probabilities(example.state, list(example.hidden), list(example.letter_logits))
    vector = head.sentence_vector(example.state)
    assert head.novelty is not None and head.novelty.score == "nearest"
    distance = nearest_distance(head.novelty.matrix, np.asarray([vector], dtype=np.float32), novelty.NEAREST_K)[0]
    assert head.novelty_score(list(example.hidden), probabilities, vector) == pytest.approx(distance, rel=1e-6)
    assert 0.0 <= distance < 1.0


def unit_clusters(seed: int, k: int = 4, per: int = 80, width: int = 32, far: int = 60):
    """Unit vectors around k in-scope directions, and `far` around one none of them is (an
    encoder's space: cosine is the measure)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1, (k + 1, width))
    gold = np.repeat(np.arange(k), per)

    def unit(x):
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    return (unit(centres[gold] + rng.normal(0, 0.5, (len(gold), width))), gold,
            unit(centres[gold] + rng.normal(0, 0.5, (len(gold), width))),
            unit(centres[k] + rng.normal(0, 0.5, (far, width))))


def test_in_the_encoders_space_a_far_class_is_flagged_the_budget_holds_and_the_index_fits_its_room():
    vectors, gold, fresh, far = unit_clusters(1)
    section, said = novelty.fit_nearest(vectors, gold, room_bytes=400_000, budget=0.04, out_of_scope=far[:20])
    assert section is not None and "nearest" in said
    assert section["out_of_fold_in_scope_review"] <= 0.04
    stored = novelty._stored(np.zeros((1, 32)) + 0.1)  # one row: its int8 values and its scale
    assert len(stored[1]) == 44 and len(stored[2]) == 8
    index = head_of(section, vectors.shape[1]).novelty.matrix
    assert (nearest_distance(index, far, novelty.NEAREST_K) > section["threshold"]).mean() == 1.0
    assert (nearest_distance(index, fresh, novelty.NEAREST_K) > section["threshold"]).mean() < 0.10
    assert (section["out_of_scope_examples"], section["out_of_scope_caught"]) == (20, 1.0)
    # a room for 100 items keeps 100, each option in proportion
    per_row = 48  # 32 int8 values and a float32 scale, base64
    small, _ = novelty.fit_nearest(vectors, gold, room_bytes=100 * per_row, budget=0.04)
    assert small is not None and small["rows"] == 100
    none, why = novelty.fit_nearest(vectors, gold, room_bytes=10 * per_row, budget=0.04)
    assert none is None and "room for 10 training items" in why


def head_of(section: dict, width: int):
    """A NearestNovelty part read as the routing function reads it (its index as stored)."""
    from decision_router.domain.heads import NearestNovelty

    assert len(__import__("base64").b64decode(section["index"])) == section["rows"] * width
    return type("H", (), {"novelty": NearestNovelty.model_validate(section)})
