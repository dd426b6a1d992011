"""A head's novelty part (heads.NoveltyBlock): an item unlike every option the head learned goes
to review with the reason in its `why`, however confident the head's probabilities are; a head
without one (older files, the shipped incident heads) loads and judges exactly as before."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random

import pytest

from decision_router.domain.heads import Head, read_head
from decision_router.domain.judging import build_record, explain, model_entry
from decision_router.domain.model_requests import build_state
from decision_router.domain.policies import POLICY_DIR, PolicyError, load_policy
from decision_router.items import parse_item
from tests.functions.test_heads import HIDDEN, MODEL, head_for, install, result_with_hidden

NEAR = [0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # 0.5 from the first option's mean
FAR = [0.0, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # 10 from every option's mean


def novelty(k: int, threshold: float = 1.0) -> dict:
    """A two-dimensional novelty part: z = (h0, h1); option o's mean at (o, 0)."""
    projection = [[1.0] + [0.0] * (HIDDEN - 1), [0.0, 1.0] + [0.0] * (HIDDEN - 2)]
    return {"centre": [0.0] * HIDDEN, "projection": projection, "means": [[float(o), 0.0] for o in range(k)],
            "threshold": threshold, "in_scope_budget": 0.04, "out_of_fold_in_scope_review": 0.038}


@pytest.fixture
def raw_ticket_policy():
    return json.loads((POLICY_DIR / "support-ticket.json").read_text())


@pytest.fixture
def shipped():
    policy = load_policy("support-ticket")
    return policy, policy.questions[0]


def confident_head(shipped, **changes) -> dict:
    """A head that answers `billing` with confidence whatever the hidden state (its hidden block
    weighs nothing), so novelty is the only reason it could hold an answer."""
    head = head_for(*shipped, **changes)
    k = len(head["options"])
    head["bias"] = [20.0] + [0.0] * (k - 1)
    head["hidden"] = {"weights": [[0.0] * HIDDEN for _ in range(k)]}
    return head


def judged(policy, ticket_data, hidden):
    question = policy.questions[0]
    ticket = parse_item("ticket", ticket_data)
    state = build_state(policy, ticket)
    result = result_with_hidden(question, hidden)
    [entry] = explain(policy, ticket, [model_entry(question, result, state)], state, {question.id: result})
    return ticket, entry


def test_a_confident_answer_unlike_any_learned_option_goes_to_review_saying_why(tmp_path, raw_ticket_policy, shipped,
                                                                                ticket_data):
    k = len(shipped[1].options)
    policy = install(tmp_path, raw_ticket_policy, confident_head(shipped, novelty=novelty(k)))

    ticket, near = judged(policy, ticket_data, NEAR)
    assert near.passed and near.reasons == [] and near.option_id == "billing"
    assert (near.novelty, near.max_novelty) == (pytest.approx(0.5), 1.0)
    assert "novelty 0.50≤1.00" in near.why.line()

    ticket, far = judged(policy, ticket_data, FAR)
    assert far.option_id == "billing" and far.confidence > 0.99  # the head is sure; it only knows its options
    assert not far.passed
    assert far.reasons == ["unlike any option it learned: novelty 10.00 > 1.00"]
    [check] = [c for c in far.why.checks if c.name == "novelty"]
    assert (check.value, check.threshold, check.passed) == (pytest.approx(10.0), 1.0, False)
    assert "unlike any option it learned: novelty 10.00 > 1.00" in far.why.line()  # what the console and REPORT= show
    destinations = {policy.target(o): f"https://sqs/{policy.target(o)}" for o in policy.questions[0].option_ids}
    record = build_record(policy, ticket, [far], destinations=destinations,
                          review_timeout_seconds=60)
    assert record.route == "review"
    assert record.route_reason == "queue: unlike any option it learned: novelty 10.00 > 1.00"


def test_at_its_threshold_an_item_passes_and_just_above_it_says_enough_digits(tmp_path, raw_ticket_policy, shipped,
                                                                              ticket_data):
    k = len(shipped[1].options)
    policy = install(tmp_path, raw_ticket_policy, confident_head(shipped, novelty=novelty(k, threshold=2.0)))
    _, at = judged(policy, ticket_data, [0.0, 2.0] + [0.0] * (HIDDEN - 2))
    assert at.passed and at.novelty == 2.0
    _, above = judged(policy, ticket_data, [0.0, 2.001] + [0.0] * (HIDDEN - 2))
    assert above.reasons == ["unlike any option it learned: novelty 2.0010 > 2.0000"]


def test_the_score_is_the_distance_to_the_nearest_learned_mean_in_the_projected_space(tmp_path, raw_ticket_policy,
                                                                                     shipped):
    rng = random.Random(3)
    k = len(shipped[1].options)
    rank = 3
    part = {"centre": [rng.uniform(-1, 1) for _ in range(HIDDEN)],
            "projection": [[rng.uniform(-1, 1) for _ in range(HIDDEN)] for _ in range(rank)],
            "means": [[rng.uniform(-2, 2) for _ in range(rank)] for _ in range(k - 1)] + [[]],  # the last had no items
            "threshold": 1.5, "in_scope_budget": 0.04, "out_of_fold_in_scope_review": 0.04}
    head = install(tmp_path, raw_ticket_policy, head_for(*shipped, novelty=part)).questions[0].learned_head
    hidden = [rng.uniform(-3, 3) for _ in range(HIDDEN)]
    z = [sum(w * (h - c) for w, h, c in zip(row, hidden, part["centre"])) for row in part["projection"]]
    expected = min(math.dist(z, mean) for mean in part["means"][:-1])
    assert head.novelty_score(hidden) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="hidden state has 7 values; the head's novelty reads 8"):
        head.novelty_score(hidden[:-1])


def test_a_head_file_with_novelty_round_trips(shipped):
    document = confident_head(shipped, novelty=novelty(len(shipped[1].options)))
    data = json.dumps(document).encode()
    head = read_head(data, hashlib.sha256(data).hexdigest(), "head")
    again = Head.model_validate_json(head.model_dump_json())
    assert again == head and again.novelty is not None and again.novelty.means == document["novelty"]["means"]
    assert again.novelty_score(FAR) == head.novelty_score(FAR) == pytest.approx(10.0)


@pytest.mark.parametrize("change, message", [
    (lambda n: n["centre"].pop(), r"novelty\.centre has 7 values; expected hidden_size 8"),
    (lambda n: n["projection"][1].append(0.0), r"novelty\.projection\[1\] has 9 values; expected hidden_size 8"),
    (lambda n: n["means"].pop(), r"novelty\.means has 4 rows for 5 options"),
    (lambda n: n["means"][2].append(1.0), r"novelty\.means\[2\] has 3 values; expected 2 \(the projection's rows\)"),
    (lambda n: n.update(means=[[]] * 5), r"novelty\.means: no option has a mean"),
    (lambda n: n.update(threshold=0), r"novelty\.mahalanobis\.threshold: Input should be greater than 0"),
    (lambda n: n.update(in_scope_budget=1.5), r"novelty\.mahalanobis\.in_scope_budget: Input should be less than or equal to 1"),
    (lambda n: n["projection"][0].__setitem__(0, float("nan")), r"novelty\.mahalanobis\.projection\.0\.0: Input should be a finite number"),
    (lambda n: n.update(extra=1), r"novelty\.mahalanobis\.extra: Extra inputs are not permitted"),
])
def test_a_bad_novelty_part_fails_at_policy_load_naming_the_field(tmp_path, raw_ticket_policy, shipped, change, message):
    head = confident_head(shipped, novelty=novelty(len(shipped[1].options)))
    change(head["novelty"])
    with pytest.raises(PolicyError, match=message):
        install(tmp_path, raw_ticket_policy, head)


def test_novelty_binds_a_text_only_head_to_the_model_it_read(tmp_path, raw_ticket_policy, shipped, ticket_data):
    head = head_for(*shipped, model=False, novelty=novelty(len(shipped[1].options)))
    with pytest.raises(PolicyError, match="novelty reads the hidden state: the head names hidden_size, model_sha256"):
        install(tmp_path, raw_ticket_policy, head)
    head.update(model_sha256=MODEL.sha256, hidden_size=HIDDEN, prompt_version="direct-options-v1")
    policy = install(tmp_path, raw_ticket_policy, head)
    learned = policy.questions[0].learned_head
    assert learned.reads_model and learned.reads_hidden_state
    question = policy.questions[0]
    state = build_state(policy, parse_item("ticket", ticket_data))
    other = MODEL.model_copy(update={"hidden_size": 16})
    entry = model_entry(question, result_with_hidden(question, [0.0] * 16, model=other), state)
    assert entry.readout == "letters" and entry.head_skipped == "endpoint hidden size 16 is not the head's 8"


def test_a_head_without_novelty_judges_exactly_as_before(tmp_path, raw_ticket_policy, shipped, ticket_data):
    plain = head_for(*shipped)
    policy = install(tmp_path, raw_ticket_policy, plain)
    _, entry = judged(policy, ticket_data, FAR)
    assert entry.novelty is None and entry.max_novelty is None
    assert {c.name for c in entry.why.checks} == {"confidence", "margin"} and "novelty" not in entry.why.line()
    # the same head with a novelty part it never exceeds: the same probabilities, checks and verdict
    lenient = install(tmp_path, raw_ticket_policy, {**copy.deepcopy(plain), "novelty": novelty(5, threshold=1e6)})
    _, same = judged(lenient, ticket_data, FAR)
    assert (same.probabilities, same.passed, same.reasons) == (entry.probabilities, entry.passed, entry.reasons)


def test_the_shipped_incident_heads_load_without_novelty_and_judge_unchanged():
    heads = [q.learned_head for q in load_policy("incident").questions if q.learned_head is not None]
    assert heads  # fitted before heads had novelty parts, and not refitted (nothing would be routed alone)
    for head in heads:
        assert head.novelty is None and head.novelty_score([0.0] * (head.hidden_size or 1)) is None


def test_the_shipped_ticket_head_carries_a_novelty_part_in_the_encoders_space_bound_to_no_model():
    head = load_policy("support-ticket").routing_question.learned_head
    assert head is not None and head.sentence is not None and head.novelty is not None
    part = head.novelty
    assert part.score == "nearest" and not head.reads_model  # it reads the words alone: it serves any model
    assert part.rows > 500 and part.matrix.shape == (part.rows, head.sentence.dimensions)
    assert 0.0 < part.out_of_fold_in_scope_review <= part.in_scope_budget  # its threshold, chosen out of fold
    assert part.surprise_weight == 0  # no out-of-scope training tickets to choose a weight by: the distance alone
    # a kept training ticket is its own nearest: its distance is that of its 4 other nearest, below the threshold
    assert head.novelty_score(None, None, part.matrix[0] / (part.matrix[0] ** 2).sum() ** 0.5) < part.threshold


def test_with_a_surprise_weight_an_answer_the_head_cannot_choose_counts_as_unlike(tmp_path, raw_ticket_policy, shipped,
                                                                                ticket_data):
    k = len(shipped[1].options)
    unsure = confident_head(shipped, novelty={**novelty(k), "surprise_weight": 2.0})
    unsure["bias"] = [0.0] * k  # every option alike: top probability 1/k
    policy = install(tmp_path, raw_ticket_policy, unsure)
    _, near = judged(policy, ticket_data, NEAR)  # 0.5 from a learned mean, yet the head cannot choose
    top = max(near.probabilities.values())
    expected = 0.5 + 2.0 * -math.log(top)
    assert top < 0.6 and expected > 1.0
    assert near.novelty == pytest.approx(expected)
    assert f"unlike any option it learned: novelty {expected:.2f} > 1.00" in near.reasons

    confident = install(tmp_path, raw_ticket_policy, confident_head(shipped, novelty={**novelty(k), "surprise_weight": 2.0}))
    _, sure = judged(confident, ticket_data, NEAR)
    assert sure.passed and sure.novelty == pytest.approx(0.5, abs=1e-3)  # a sure answer near a mean adds almost nothing
