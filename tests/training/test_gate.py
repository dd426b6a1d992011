"""The relearning gate: the candidate and the head in service judged on the same newest labels
through the routing function's own code. Real heads: the shipped priority head (it reads the
evidence only) against a head that knows nothing, on the incidents written apart (test split)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from decision_contract import ModelInfo
from decision_router.domain.heads import Head
from decision_router.domain.items import parse_item
from decision_router.domain.model_requests import build_state
from decision_router.domain.policies import load_policy
from tests.functions.test_heads import head_for
from training import gate
from training.features import Example

REPO = Path(__file__).resolve().parents[2]
MODEL = ModelInfo(file="m.gguf", bytes=1, sha256="a" * 64, context_size=2048, threads=1, gpu_layers=0,
                  llama_cpp_python_version="test", hidden_size=4)
POLICY = load_policy("incident")
PRIORITY = POLICY.question("priority")
BEATS_CHANCE = SimpleNamespace(beats_chance=True, chance_rate=0.3)


def examples() -> list[Example]:
    rows = [json.loads(line) for line in (REPO / "bench/data/incidents.jsonl").read_text().splitlines()]
    out = []
    for i, row in enumerate(r for r in rows if r.get("split") == "test"):
        out.append(Example(
            policy="incident", question="priority", case_id=str(i), where=f"t:{i}", split="test", fold_group=str(i),
            option_ids=PRIORITY.option_ids, gold=PRIORITY.option_ids.index(row["gold"]["priority"]),
            state=build_state(POLICY, parse_item("incident", row["item"])), hidden=np.zeros(4),
            letter_logits=np.zeros(len(PRIORITY.options)), allowed_token_mass=0.9, prompt_version="v"))
    return out


def know_nothing() -> Head:
    head = head_for(POLICY, PRIORITY, model=False, version="know-nothing")
    head.pop("categorical")
    head["text"]["weights"] = [[0.0] * len(head["text"]["terms"]) for _ in PRIORITY.options]
    head["thresholds"] = {"min_confidence": 1.0, "min_margin": 0.0}
    return Head.model_validate(head)


def test_a_better_candidate_is_promoted_and_a_worse_one_refused_with_every_reason():
    held = examples()
    shipped = PRIORITY.learned_head
    better = gate.judge(PRIORITY, know_nothing(), shipped, BEATS_CHANCE, held, 400, MODEL)
    assert better.promote, better.reason
    assert better.candidate["accuracy"] > better.current["accuracy"]
    assert better.candidate["head_version"] == shipped.version
    assert better.candidate["protected_auto_assigned_lower"] == 0  # P1/P2 never auto-assigned lower here
    worse = gate.judge(PRIORITY, shipped, know_nothing(), BEATS_CHANCE, held, 400, MODEL)
    assert not worse.promote
    assert worse.reason.startswith(f"worse than the head in service on the {len(held)} newest labels: accuracy")
    assert "log loss" in worse.reason and "automatically" in worse.reason


def test_the_same_head_is_not_worse_than_itself():
    verdict = gate.judge(PRIORITY, PRIORITY.learned_head, PRIORITY.learned_head, BEATS_CHANCE, examples(), 400, MODEL)
    assert verdict.promote and verdict.current == verdict.candidate


def test_too_few_labels_or_no_signal_are_refused_before_any_comparison():
    held = examples()
    too_few = gate.judge(PRIORITY, PRIORITY.learned_head, None, None, held, 12, MODEL)
    assert too_few.reason == "too few labels: 12 to fit on, at least 40" and not too_few.candidate
    assert too_few.current["head_version"] == PRIORITY.learned_head.version  # the head in service, still measured
    few = gate.judge(PRIORITY, None, None, None, held[:5], 400, MODEL)
    assert not few.promote and few.reason.startswith("too few new labels to judge on: 5 newest")
    noise = gate.judge(PRIORITY, know_nothing(), PRIORITY.learned_head, SimpleNamespace(beats_chance=False, chance_rate=0.3),
                       held, 400, MODEL)
    assert not noise.promote and noise.reason.startswith("the candidate does not beat always-the-commonest-answer")


def test_the_held_out_slice_is_the_newest_labels_by_time():
    held = examples()[:40]
    stamped = [(f"2026-11-{30 - i // 24:02d}T{i % 24:02d}:00:00Z", e) for i, e in enumerate(held)]
    older, newest = gate.held_out_slice(stamped)
    assert len(newest) == gate.MIN_HELD_OUT and len(older) == 25
    times = dict((id(e), t) for t, e in stamped)
    assert min(times[id(e)] for e in newest) > max(times[id(e)] for e in older)
