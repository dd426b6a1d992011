"""`make fit`, relearning and `make fit-history` fit a head by one rule (training/head_fit.py): given
the same rows and signals, the head file each of them writes is the same, byte for byte. Each path
is taken as its command takes it, with its own defaults: `make fit`'s arguments (training/__main__.py
`fit_as_asked`), the relearning job's fit step (relearning/candidates.py `_judge`, the candidate it stores)
and fit-history's arguments (training/history.py `fit_head`, the file `write_policy` writes)."""

from __future__ import annotations

import hashlib
import json
from datetime import date
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from decision_router.domain.policies import load_policy
from relearning.job import Relearning
from tests.fakes.console import FakePrecisionTally
from tests.fakes.head_store import FakeHeadStore
from training import __main__ as make_fit
from training import history, history_policy, learn
from training.features import Example

from .test_history import MODEL, export

pytestmark = pytest.mark.fit  # three fits of the head, each with its choices and novelty part (seconds)

FIELDS = ["subject", "body"]
PROMPT_VERSION = "direct-options-v1"


#: A direction of the hidden state for each option: the model knows something the words alone do not
#: say, so the rule gives the model's signals a weight and the head reads them.
OPTION_DIRECTIONS = np.random.default_rng(11).normal(size=(5, MODEL.hidden_size))


def hidden_of(state: dict, gold: int) -> np.ndarray:
    """A hidden state drawn from the evidence's words and the item's option (fixed for each item)."""
    hidden = 2.0 * OPTION_DIRECTIONS[gold]
    for word in " ".join(state.values()).lower().split():
        hidden += np.random.default_rng(int(hashlib.sha256(word.encode()).hexdigest()[:8], 16)).normal(size=MODEL.hidden_size)
    return hidden


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One export (five labels, 30 rows each, and 20 more rows relearning judges on), its policy as
    fit-history writes it, and every row's state and hidden state."""
    folder = tmp_path_factory.mktemp("one-head")
    rows, later = export(5, 30, seed=3), export(5, 4, seed=9)
    labels = [r["label"] for r in rows]
    raw = history_policy.raw_policy("one-head", FIELDS, "label", history_policy.vocabulary(labels, 1, "review"),
                                    max_error=history.parser().get_default("max_error"))
    (folder / "policy.json").write_text(json.dumps(raw))
    policy = load_policy(folder / "policy.json")
    question = policy.questions[0]
    assert policy.question_sha256(question) == history_policy.question_sha256(raw)  # one question, one digest
    states = history_policy.states(raw, rows, FIELDS)
    ids = {o["description"]: o["id"] for o in raw["questions"][0]["options"]}
    gold = np.array([question.option_ids.index(ids[label]) for label in labels])
    later_states = history_policy.states(raw, later, FIELDS)
    later_gold = [question.option_ids.index(ids[r["label"]]) for r in later]
    hidden = np.array([hidden_of(s, g) for s, g in zip(states, gold)])
    return SimpleNamespace(folder=folder, raw=raw, policy=policy, question=question, states=states, gold=gold,
                           hidden=hidden, later_states=later_states, later_gold=later_gold)


def examples(world, states, gold, prefix: str) -> list[Example]:
    """The rows as `make fit` and relearning read them; their letters say nothing (fit-history reads none)."""
    k = len(world.question.option_ids)
    return [Example(policy=world.policy.name, question=world.question.id, case_id=f"{prefix}{i}", where=f"{prefix}{i}",
                    split=None, fold_group=f"{prefix}{i}", option_ids=world.question.option_ids, gold=int(g), state=state,
                    hidden=hidden_of(state, int(g)), letter_logits=np.zeros(k), allowed_token_mass=0.5,
                    prompt_version=PROMPT_VERSION) for i, (state, g) in enumerate(zip(states, gold))]


def by_make_fit(world, today: date) -> bytes:
    args = make_fit.parser().parse_args(["--no-curve", "--no-progress"])
    _, document = make_fit.fit_as_asked(args, world.policy, world.question, examples(world, world.states, world.gold, "r"),
                                        MODEL, ["train.jsonl"], today)
    return learn.head_bytes(document)  # what training/report.py writes beside the policy


def by_relearning(world, today: date) -> bytes:
    store = FakeHeadStore()  # no head in service: the candidate is judged alone
    job = Relearning(store, labels=None, endpoint=lambda probe: None, today=lambda: today, tally=SimpleNamespace(),
                     precision=FakePrecisionTally())
    verdict = job._judge(world.policy, world.question, examples(world, world.states, world.gold, "r"),
                         examples(world, world.later_states, world.later_gold, "later"), MODEL, ["train.jsonl"], "run-1")
    return store.get(verdict["candidate_key"])


def by_fit_history(world) -> bytes:
    folder = world.folder / "history"
    args = history.parser().parse_args(["--data", str(folder / "train.jsonl"), "--test", str(folder / "test.jsonl"),
                                        "--text", ",".join(FIELDS), "--label", "label", "--out", str(folder / "out")])
    args.data, args.test = Path(args.data), Path(args.test)  # as the command reads them
    test_hidden = np.array([hidden_of(s, g) for s, g in zip(world.later_states, world.later_gold)])
    signals = SimpleNamespace(train_hidden=world.hidden, test_hidden=test_hidden,
                              model=MODEL, prompt_version=PROMPT_VERSION, out_of_scope_hidden=None)
    prepared = SimpleNamespace(train_states=world.states, test_states=world.later_states, scored_states=world.states)
    fitted = history.fit_head(args, SimpleNamespace(raw=world.raw, gold=world.gold), prepared, signals, lambda text: None)
    question, (head_name, _) = history.write_policy(folder / "out", json.loads(json.dumps(world.raw)), fitted.document)
    return (folder / "out" / head_name).read_bytes()


def test_make_fit_relearning_and_fit_history_write_the_same_head_byte_for_byte(world):
    today = date.today()
    written = {"make fit": by_make_fit(world, today), "relearning": by_relearning(world, today),
               "fit-history": by_fit_history(world)}
    document = json.loads(written["make fit"])
    # the rule chose here, and the head reads the hidden state and the sentence encoder's embedding
    assert document["fit"]["model_weight"] > 0 and "hidden" in document and "sentence" in document
    assert "novelty" in document and "letters" not in document
    assert written["relearning"] == written["make fit"], "relearning's head differs from make fit's"
    assert written["fit-history"] == written["make fit"], "fit-history's head differs from make fit's"
