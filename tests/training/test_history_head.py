"""fit-history's head is written by the one head writer `make fit` and relearning use
(training/learn.py `head_file`, `stamp_version`, `head_bytes`), and TEST is judged over the router's input built
by the one constructor the routing function's judging accepts (`DecisionResult.from_signals`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decision_contract import NO_PROMPT_SHA256, DecisionResult
from decision_router.domain.judging import model_entry
from decision_router.domain.model_requests import build_decisions
from decision_router.domain.policies import load_policy
from decision_router.items import parse_item
from training import learn

from .test_history import MODEL, WordRunner, export, run, write_jsonl


def fit_lettered(tmp_path, *extra: str):
    """A five-label export through `make fit-history`, the head over TF-IDF (and, unless
    --text-only, the model's hidden state): its OUT folder."""
    train = write_jsonl(tmp_path / "train.jsonl", export(5, 30, seed=3))
    test = write_jsonl(tmp_path / "test.jsonl", export(5, 6, seed=4))
    out = tmp_path / "out"
    code, _ = run(tmp_path, ["--data", str(train), "--test", str(test), "--text", "subject,body", "--label", "label",
                             "--out", str(out), "--encoder", "none", *extra])
    assert code == 0
    return out


def weights_of(document: dict) -> learn.Linear:
    """The fitted weights a head file holds, as the writer takes them."""
    k = len(document["options"])
    text = document["text"]
    reads_model = "hidden" in document
    space = learn.FeatureSpace(text["terms"], text["idf"], [], np.zeros(0), np.ones(0), np.zeros(0), np.ones(0))
    return learn.Linear(space, document["fit"]["model_weight"], np.array(text["weights"]), np.zeros((k, 0)), None,
                        np.array(document["hidden"]["weights"]) if reads_model else None,
                        np.zeros((k, 1)) if reads_model else None, np.array(document["bias"]))


@pytest.mark.parametrize("extra", [("--model-weight", "1"), ("--text-only",)], ids=["reads the model", "text alone"])
def test_the_head_fit_history_writes_is_the_shared_writers_byte_for_byte(tmp_path, extra):
    out = fit_lettered(tmp_path, *extra)
    policy = json.loads((out / "policy.json").read_text())
    question = policy["questions"][0]
    written = (out / question["head"]["file"]).read_bytes()
    document = json.loads(written)
    assert ("hidden" in document) == (extra[0] == "--model-weight")

    signals = learn.Signals.build([{"subject": "", "body": ""}], np.zeros((1, 1)), [np.zeros(1)], np.zeros(1, dtype=int), ["0"],
                                  text_fields=document["text"]["fields"], categorical_fields=[], encoder=None)
    binding = {"question_sha256": document["question_sha256"], "model_sha256": MODEL.sha256,
               "hidden_size": MODEL.hidden_size, "prompt_version": document.get("prompt_version", "unread")}
    again = learn.head_file(weights_of(document), signals, options=document["options"], binding=binding,
                            temperature=document["temperature"], min_confidence=document["thresholds"]["min_confidence"],
                            fit=document["fit"], letters=False)
    if "novelty" in document:  # attached between the writer and the version, as `make fit` attaches it
        again["novelty"] = document["novelty"]
    learn.stamp_version(again, policy["name"], question["id"])
    assert learn.head_bytes(again) == written


def test_the_router_judges_a_result_built_from_signals_as_the_endpoints_own_answer(tmp_path):
    out = fit_lettered(tmp_path, "--model-weight", "1")
    policy = load_policy(out / "policy.json")
    question = policy.questions[0]
    assert question.learned_head is not None and question.learned_head.reads_hidden_state
    runner = WordRunner()
    for n, words in enumerate(("card topic0 card", "refund topic1 pin", "weather in paris")):
        item = parse_item("ticket", {"ticket_id": f"T-{n}", "subject": words, "body": words, "channel": "email",
                                     "customer": {"id": "C", "tier": "pro"}, "created_at": "2026-12-01T00:00:00Z"})
        (decision,) = build_decisions(policy, item)
        answered = runner.decide([decision]).results[0]  # what the endpoint returns
        built = DecisionResult.from_signals(answered.id, answered.option_ids, answered.option_logits, model=answered.model,
                                            prompt_version=answered.prompt_version,
                                            allowed_token_mass=answered.allowed_token_mass, hidden_state=answered.hidden_state)
        assert built.prompt_sha256 == NO_PROMPT_SHA256 and built.input_tokens == 0 and built.timing.total_seconds == 0.0
        by_endpoint, by_signals = model_entry(question, answered, decision.state), model_entry(question, built, decision.state)
        assert by_signals.readout == "head" and by_signals.head_skipped is None
        assert (by_signals.option_id, by_signals.confidence, by_signals.passed, by_signals.reasons, by_signals.novelty) == \
            (by_endpoint.option_id, by_endpoint.confidence, by_endpoint.passed, by_endpoint.reasons, by_endpoint.novelty)
