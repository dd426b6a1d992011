"""The relearning gate: the candidate and the head in service judged on the same newest labels
through the routing function's own code. Real heads: the shipped priority head (it reads the
evidence only) against a head that knows nothing, on the incidents written apart (test split)."""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import replace
from datetime import date
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from decision_contract import ModelInfo
from decision_router.domain.heads import Head
from decision_router.domain.model_requests import build_state
from decision_router.domain.policies import load_policy
from decision_router.items import parse_item
from tests.functions.test_heads import head_for
from training import gate
from training.features import Example
from training.fitting import fit_head

REPO = Path(__file__).resolve().parents[2]
MODEL = ModelInfo(file="m.gguf", bytes=1, sha256="a" * 64, context_size=2048, threads=1, gpu_layers=0,
                  llama_cpp_python_version="test", hidden_size=4)
POLICY = load_policy("incident")
PRIORITY = POLICY.question("priority")
BEATS_CHANCE = SimpleNamespace(beats_chance=True, chance_rate=0.3)
REVIEWERS = ["ana@example.com", "bo@example.com", "cy@example.com"]


def examples() -> list[Example]:
    rows = [json.loads(line) for line in (REPO / "bench/data/incidents.jsonl").read_text().splitlines()]
    out = []
    for i, row in enumerate(r for r in rows if r.get("split") == "test"):
        out.append(Example(
            policy="incident", question="priority", case_id=str(i), where=f"t:{i}", split="test", fold_group=str(i),
            option_ids=PRIORITY.option_ids, gold=PRIORITY.option_ids.index(row["gold"]["priority"]),
            state=build_state(POLICY, parse_item("incident", row["item"])), hidden=np.zeros(4),
            letter_logits=np.zeros(len(PRIORITY.options)), allowed_token_mass=0.9, prompt_version="v",
            reviewer=REVIEWERS[i % len(REVIEWERS)]))
    return out


def know_nothing() -> Head:
    head = head_for(POLICY, PRIORITY, model=False, version="know-nothing")
    head.pop("categorical")
    head["text"]["weights"] = [[0.0] * len(head["text"]["terms"]) for _ in PRIORITY.options]
    head["thresholds"] = {"min_confidence": 1.0, "min_margin": 0.0}
    return Head.model_validate(head)


def cautious() -> Head:
    """The shipped head that routes nothing automatically: the same answers, so the same recall."""
    head = PRIORITY.learned_head
    return head.model_copy(update={"version": "cautious", "thresholds": head.thresholds.model_copy(
        update={"min_confidence": 1.0})})


def test_a_better_candidate_is_promoted_and_a_worse_one_refused_with_every_reason():
    held = examples()
    shipped = PRIORITY.learned_head
    better = gate.promotion_verdict(PRIORITY, cautious(), shipped, BEATS_CHANCE, held, 400, MODEL)
    assert better.promote, better.reason
    assert better.candidate["auto_routed_share"] > better.current["auto_routed_share"]
    assert better.candidate["recall"] == better.current["recall"]
    assert better.candidate["head_version"] == shipped.version
    assert better.candidate["protected_auto_assigned_lower"] == 0  # P1/P2 never auto-assigned lower here
    worse = gate.promotion_verdict(PRIORITY, shipped, know_nothing(), BEATS_CHANCE, held, 400, MODEL)
    assert not worse.promote
    assert worse.reason.startswith(f"worse than the head in service on the {len(held)} newest labels: accuracy")
    assert "log loss" in worse.reason and "automatically" in worse.reason
    # always P1: every other priority's recall falls, each named with its figures
    for option in ("P2", "P3", "P4"):
        assert f"recall of {option} 0.000 < {worse.current['recall'][option]:.3f}" in worse.reason


def test_a_candidate_that_finds_fewer_of_any_option_is_refused():
    """Better everywhere else is not enough: the head that always answers P1 finds every P1, the
    shipped head misses some, so the shipped head may not replace it (on held-out or test split)."""
    held = examples()
    verdict = gate.promotion_verdict(PRIORITY, know_nothing(), PRIORITY.learned_head, BEATS_CHANCE, held, 400, MODEL)
    assert not verdict.promote
    assert verdict.current["recall"]["P1"] == 1.0 > verdict.candidate["recall"]["P1"]
    assert verdict.reason == (f"worse than the head in service on the {len(held)} newest labels: recall of P1 "
                              f"{verdict.candidate['recall']['P1']:.3f} < 1.000")
    assert gate.recall(["a", "b", "c"], [0, 1, 0, 0], [0, 0, 1, 0]) == {"a": 0.6667, "b": 0.0}


def test_the_same_head_is_not_worse_than_itself():
    verdict = gate.promotion_verdict(PRIORITY, PRIORITY.learned_head, PRIORITY.learned_head, BEATS_CHANCE, examples(), 400, MODEL)
    assert verdict.promote and verdict.current == verdict.candidate


def test_a_candidate_with_a_novelty_part_is_judged_on_its_answers_not_on_its_novelty_budget():
    # every held-out label is in scope: a novelty part so strict it holds every item would make the
    # candidate look as if it routed nothing; the gate judges its answers, at its thresholds
    shipped = PRIORITY.learned_head
    strict = Head.model_validate({
        **shipped.model_dump(), "version": "with-novelty", "model_sha256": MODEL.sha256, "hidden_size": 4,
        "prompt_version": "v", "novelty": {"centre": [0.0] * 4, "projection": [[1.0, 0.0, 0.0, 0.0]],
                                           "means": [[5.0]] * len(PRIORITY.options), "threshold": 1.0,
                                           "in_scope_budget": 0.04, "out_of_fold_in_scope_review": 0.04}})
    from decision_router.domain.judging import model_entry

    held = examples()
    entries = [model_entry(PRIORITY.with_head(strict), e.result(MODEL), e.state) for e in held]
    assert not any(e.passed for e in entries)  # in service, the novelty part would hold every one
    verdict = gate.promotion_verdict(PRIORITY, shipped, strict, BEATS_CHANCE, held, 400, MODEL)
    assert verdict.promote and verdict.candidate == {**verdict.current, "head_version": "with-novelty"}


def test_too_few_labels_or_no_signal_are_refused_before_any_comparison():
    held = examples()
    too_few = gate.promotion_verdict(PRIORITY, PRIORITY.learned_head, None, None, held, 12, MODEL)
    assert too_few.reason == "too few labels: 12 to fit on, at least 40" and not too_few.candidate
    assert too_few.current["head_version"] == PRIORITY.learned_head.version  # the head in service, still measured
    few = gate.promotion_verdict(PRIORITY, None, None, None, held[:5], 400, MODEL)
    assert not few.promote and few.reason.startswith("too few new labels to judge on: 5 newest")
    noise = gate.promotion_verdict(PRIORITY, know_nothing(), PRIORITY.learned_head, SimpleNamespace(beats_chance=False, chance_rate=0.3),
                       held, 400, MODEL)
    assert not noise.promote and noise.reason.startswith("the candidate does not beat always-the-commonest-answer")


def test_the_held_out_slice_is_the_newest_labels_by_time():
    held = examples()[:40]
    stamped = [(f"2026-11-{30 - i // 24:02d}T{i % 24:02d}:00:00Z", e) for i, e in enumerate(held)]
    older, newest = gate.held_out_slice(stamped)
    assert len(newest) == gate.MIN_HELD_OUT and len(older) == 25
    times = dict((id(e), t) for t, e in stamped)
    assert min(times[id(e)] for e in newest) > max(times[id(e)] for e in older)


def labelled(item: dict, gold: str, where: str, reviewer: str | None, split: str = "train") -> Example:
    return Example(policy="incident", question="priority", case_id=where, where=where, split=split, fold_group=where,
                   option_ids=PRIORITY.option_ids, gold=PRIORITY.option_ids.index(gold),
                   state=build_state(POLICY, parse_item("incident", item)), hidden=np.zeros(4),
                   letter_logits=np.zeros(len(PRIORITY.options)), allowed_token_mass=0.9, prompt_version="v",
                   reviewer=reviewer)


def test_no_reviewer_dominates_the_labels_trained_on_or_judged_on():
    held = examples()
    rows = [("2026-12-01T00:%02d:00Z" % (i % 60), held[i % len(held)]) for i in range(140)]
    reviewed = [(t, replace(e, where=f"r:{i}", reviewer="mallory@example.com" if i < 100 else REVIEWERS[i % 2]))
                for i, (t, e) in enumerate(rows)]
    split = gate.reviewed_split(reviewed)
    n_held = round(gate.HELD_OUT_SHARE * len(reviewed))
    judged = Counter(gate.reviewer_of(e) for e in split.held_out)
    assert len(split.held_out) == n_held and judged["mallory@example.com"] <= n_held * gate.MAX_REVIEWER_SHARE
    # the others' labels first (each up to the cap), hers only to fill the slice
    cap = int(n_held * gate.MAX_REVIEWER_SHARE)
    assert judged == {REVIEWERS[0]: cap, REVIEWERS[1]: cap, "mallory@example.com": n_held - 2 * cap}
    trained = Counter(gate.reviewer_of(e) for e in split.train)
    assert trained["mallory@example.com"] <= gate.MAX_REVIEWER_SHARE * len(split.train)
    assert split.not_trained == {"mallory@example.com": 100 - judged["mallory@example.com"] - trained["mallory@example.com"]}
    # the shipped labels trained on count: beside 400 of them she may give up to 400
    roomy = gate.reviewed_split(reviewed, trusted=400)
    assert roomy.not_trained == {} and len(roomy.train) + len(roomy.held_out) == len(reviewed)
    with pytest.raises(ValueError, match="max reviewer share 0"):
        gate.reviewed_split(reviewed, max_share=0)


def test_a_slice_one_reviewer_dominates_is_refused():
    held = [replace(e, reviewer="mallory@example.com") if i % 3 else e for i, e in enumerate(examples())]
    verdict = gate.promotion_verdict(PRIORITY, cautious(), PRIORITY.learned_head, BEATS_CHANCE, held, 400, MODEL)
    assert not verdict.promote
    assert verdict.reason.startswith(f"one reviewer (mallory@example.com) gave {sum(1 for i in range(len(held)) if i % 3)} "
                                     f"of the {len(held)} labels to judge on, more than 50%")
    unnamed = [replace(e, reviewer=None) for e in held]
    assert gate.promotion_verdict(PRIORITY, cautious(), PRIORITY.learned_head, BEATS_CHANCE, unnamed, 400, MODEL).reason \
        .startswith(f"one reviewer ({gate.UNAUTHENTICATED})")
    assert gate.promotion_verdict(PRIORITY, cautious(), PRIORITY.learned_head, BEATS_CHANCE, held, 400, MODEL, max_share=1.0).promote


def test_the_shipped_test_split_is_a_second_gate():
    held = [e for e in examples() if e.gold != 0]  # no P1 here: always-P1 finds none of these
    trusted = [replace(e, gold=0, split="test") for e in held]  # every one a P1: the know-nothing head's first answer
    verdict = gate.promotion_verdict(PRIORITY, know_nothing(), PRIORITY.learned_head, BEATS_CHANCE, held, 400, MODEL,
                         test_split=trusted)
    assert not verdict.promote, verdict.reason
    assert verdict.reason.startswith(f"worse than the head in service on the {len(trusted)} labels of the shipped test split")
    assert set(verdict.test_split) == {"current", "candidate"} and verdict.as_dict()["test_split"] == verdict.test_split
    assert "recall of P1" in verdict.reason
    same = gate.promotion_verdict(PRIORITY, know_nothing(), PRIORITY.learned_head, BEATS_CHANCE, held, 400, MODEL, test_split=held)
    assert same.promote and same.reason.endswith(f"nor on the {len(held)} labels of the shipped test split")


@pytest.mark.fit  # two fits of the priority head beside the shipped labels
def test_one_reviewers_poisoned_labels_are_refused_by_the_gate():
    """200 reviews by one reviewer, new sev2 payouts incidents (truly P2) answered P4: the number
    that starts a run. Trained beside the shipped labels, judged on reviews: refused."""
    rows = [json.loads(line) for line in (REPO / "bench/data/incidents.jsonl").read_text().splitlines()]
    shipped = [labelled(r["item"], r["gold"]["priority"], f"shipped:{i}", None) for i, r in enumerate(rows)
               if r["split"] == "train"]
    trusted = [labelled(r["item"], r["gold"]["priority"], f"test:{i}", None, "test") for i, r in enumerate(rows)
               if r["split"] == "test"]
    rng = random.Random(5)

    def payouts(n: int) -> dict:
        return {"incident_id": f"LIVE-{n}", "title": f"payouts-ledger: payout batch failed {rng.randint(0, 99)}",
                "description": f"Payouts delayed since {rng.randint(0, 23):02d}:00 UTC; {rng.randint(2, 900)} merchants "
                               "are not paid. On-call looking.",
                "service": "payouts-ledger", "severity": "sev2", "source": "grafana", "reported_at": "2026-12-01T00:00:00Z"}

    for reviewer in ("mallory@example.com", None):  # named, or rows that name nobody
        reviews = [(f"2026-12-0{1 + n // 40}T00:{n % 60:02d}:00Z", labelled(payouts(n), "P4", f"review:{n}", reviewer))
                   for n in range(200)]
        split = gate.reviewed_split(reviews, trusted=len(shipped))
        train = shipped + split.train
        assert sum(e.reviewer == reviewer for e in split.train) <= gate.MAX_REVIEWER_SHARE * len(train)
        fit, document = fit_head(POLICY, PRIORITY, train, MODEL, sources=["test"], curve=False, fitted_on=date(2026, 12, 8))
        verdict = gate.promotion_verdict(PRIORITY, PRIORITY.learned_head, Head.model_validate(document), fit, split.held_out,
                             len(train), MODEL, test_split=trusted)
        assert not verdict.promote
        assert verdict.reason.startswith(f"one reviewer ({reviewer or gate.UNAUTHENTICATED}) gave {len(split.held_out)} of the "
                                         f"{len(split.held_out)} labels to judge on")


def poisoned_rows(names: list[str], key: bytes | None, identity: str = "iam:arn:aws:iam::123456789012:user/mallory"):
    """200 reviews of new sev2 payouts incidents (truly P2) answered P4 under `names` in turn, as
    the routing workflow stores them: all by one caller, its identity signed with `key` (None: the
    rows carry no signature, as a SendTaskSuccess sent straight to Step Functions leaves them)."""
    from decision_router.domain.signatures import review_identity_signature

    rng = random.Random(5)
    rows = []
    for n in range(200):
        item = {"incident_id": f"LIVE-{n}", "title": f"payouts-ledger: payout batch failed {rng.randint(0, 99)}",
                "description": f"Payouts delayed since {rng.randint(0, 23):02d}:00 UTC; {rng.randint(2, 900)} merchants "
                               "are not paid. On-call looking.",
                "service": "payouts-ledger", "severity": "sev2", "source": "grafana", "reported_at": "2026-12-01T00:00:00Z"}
        execution = f"incident-LIVE-{n}"
        rows.append({"policy_name": "incident", "item_id": f"LIVE-{n}", "item": json.dumps(item),
                     "answers": json.dumps({"priority": "P4", "team": "application"}), "reviewer": names[n % len(names)],
                     "reviewer_id": identity, "execution_name": execution,
                     "identity_signature": review_identity_signature(key, execution, identity) if key else "",
                     "labelled_at": f"2026-12-0{1 + n // 40}T00:{n % 60:02d}:00Z"})
    return rows


@pytest.mark.parametrize("signed", [True, False])
def test_one_callers_poisoned_labels_under_two_names_are_refused_by_the_gate(signed):
    """The same 200 poisoned answers under two display names once passed the per-reviewer cap
    (it counted names). relearning now reads the verified identity (or, unsigned, the one
    unauthenticated reviewer): one reviewer, refused on the slice it would be judged on."""
    from decision_router.adapters.signing_key import SigningKey
    from relearning.job import read_labels

    key = b"k" * 32
    stored = poisoned_rows(["mallory", "mallory.ops"], key if signed else None)
    read, problems = read_labels(stored, SigningKey(key))
    assert problems == [] and {r.reviewer for r in read} == {"mallory", "mallory.ops"}
    rows = [json.loads(line) for line in (REPO / "bench/data/incidents.jsonl").read_text().splitlines()]
    shipped = [labelled(r["item"], r["gold"]["priority"], f"shipped:{i}", None) for i, r in enumerate(rows)
               if r["split"] == "train"]
    reviews = [(row.labelled_at, labelled(json.loads(raw["item"]), "P4", f"review:{n}", row.reviewer_id))
               for n, (row, raw) in enumerate(zip(read, stored))]
    split = gate.reviewed_split(reviews, trusted=len(shipped))  # as relearning.job fit splits them
    train = shipped + split.train
    verdict = gate.promotion_verdict(PRIORITY, PRIORITY.learned_head, None, None, split.held_out, len(train), MODEL)
    who = "iam:arn:aws:iam::123456789012:user/mallory" if signed else gate.UNAUTHENTICATED
    assert not verdict.promote
    assert verdict.reason.startswith(f"one reviewer ({who}) gave {len(split.held_out)} of the {len(split.held_out)} "
                                     "labels to judge on")
    assert sum(gate.reviewer_of(e) == who for e in split.train) <= gate.MAX_REVIEWER_SHARE * len(train)
