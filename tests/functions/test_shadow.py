"""Shadow heads' bookkeeping: the router records a shadow head's answer beside the one that
decides (and nothing else changes), a reviewer's answer counts for the head it agrees with, the
tallies add up in the head history table (moto: spread over shards, summed with the row of before
sharding), and the verdict needs N items and no worse precision on the reviewed ones."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters.shadow_tally import MAX_ROUNDS, SHARDS, ShadowTally, tally_key, tally_keys
from decision_router.domain.heads import Head
from decision_router.domain.policies import load_policy
from decision_router.domain.routing import Router, ShadowHead
from decision_router.domain.shadow import ShadowCounts, review_tally, shadow_verdict
from decision_router.items import parse_item
from tests.functions.conftest import letters_only
from tests.functions.test_heads import head_for, result_with_hidden


class Endpoint:
    """The endpoint port answering every request with the same letters and hidden state (the
    shadow's bookkeeping is under test here, not the model); it keeps the requests."""

    def __init__(self, question):
        self.question, self.requests = question, []

    def decide(self, decisions, *, deadline=None):
        self.requests.append(list(decisions))
        return {d.id: result_with_hidden(self.question, [0.1] * 8, letters=[3.0, 0.0, 0.0, 0.0, 0.0]) for d in decisions}


def router(policy, endpoint):
    return Router(endpoint, destinations={t: f"https://sqs/{t}" for t in policy.targets},
                  review_timeout_seconds=60)


def shadow_head(policy, question, option: int, *, model: bool) -> ShadowHead:
    bias = [0.0] * len(question.options)
    bias[option] = 9.0  # the candidate answers this option whatever it reads
    return ShadowHead(Head.model_validate(head_for(policy, question, model=model, bias=bias, version="candidate-1")),
                      "c" * 64)


@pytest.fixture
def ticket(ticket_data):
    return parse_item("ticket", ticket_data)


def test_the_shadow_answers_beside_the_head_in_service_and_changes_nothing_else(ticket):
    policy = letters_only(load_policy("support-ticket"))
    question = policy.questions[0]
    plain = router(policy, Endpoint(question)).decision_record(ticket, policy)[0]
    endpoint = Endpoint(question)
    shadows = {question.id: shadow_head(policy, question, 3, model=True)}
    record = router(policy, endpoint).decision_record(ticket, policy, shadows=shadows)[0]
    # the head in service (the letters) decided exactly as without a shadow
    assert record.model_dump(exclude={"shadow", "decided_at"}) == plain.model_dump(exclude={"shadow", "decided_at"})
    assert plain.shadow == {}
    answer = record.shadow[question.id]
    assert (answer.head_version, answer.sha256, answer.option_id) == ("candidate-1", "c" * 64, question.option_ids[3])
    assert answer.agrees is False and record.decisions[0].option_id == question.option_ids[0]
    # the hidden state a shadow reads is asked for (every question asks for it), though the letters decide
    assert endpoint.requests[0][0].return_hidden_state is True
    agreeing = {question.id: shadow_head(policy, question, 0, model=False)}
    assert router(policy, Endpoint(question)).decision_record(ticket, policy, shadows=agreeing)[0].shadow[question.id].agrees is True


def test_a_shadow_that_cannot_read_the_answer_is_left_out(ticket):
    """Another model answered (the head is bound to its model): no shadow answer is recorded."""
    policy = letters_only(load_policy("support-ticket"))
    question = policy.questions[0]
    head = head_for(policy, question, bias=[9.0, 0, 0, 0, 0], version="candidate-1", model_sha256="b" * 64)
    shadows = {question.id: ShadowHead(Head.model_validate(head), "c" * 64)}
    assert router(policy, Endpoint(question)).decision_record(ticket, policy, shadows=shadows)[0].shadow == {}


def test_a_reviewer_answer_counts_for_the_head_it_agrees_with(ticket):
    policy = letters_only(load_policy("support-ticket"))
    question = policy.questions[0]
    shadows = {question.id: shadow_head(policy, question, 3, model=False)}
    record = router(policy, Endpoint(question)).decision_record(ticket, policy, shadows=shadows)[0]
    served, candidate, other = question.option_ids[0], question.option_ids[3], question.option_ids[1]
    assert {q: rights for q, (_, *rights) in review_tally(record, {"queue": candidate}).items()} == {"queue": [True, False]}
    assert {q: rights for q, (_, *rights) in review_tally(record, {"queue": served}).items()} == {"queue": [False, True]}
    assert {q: rights for q, (_, *rights) in review_tally(record, {"queue": other}).items()} == {"queue": [False, False]}
    assert review_tally(record, {}) == {}


@pytest.mark.parametrize("counts, min_items, promoted, says", [
    (ShadowCounts(items=9), 10, False, "too few shadowed items: 9, at least 10"),
    (ShadowCounts(items=10, agreed=8), 10, True, "none reviewed"),
    (ShadowCounts(items=10, agreed=10, reviewed=4, shadow_right=3, service_right=3, reviewed_agreed=4), 10, True,
     "no worse"),
    (ShadowCounts(items=10, agreed=10, reviewed=4, shadow_right=2, service_right=3, reviewed_agreed=4), 10, False,
     "0.500 < 0.750"),
    (ShadowCounts(items=0), 0, True, "shadowed 0 items"),
])
def test_the_verdict_needs_n_items_and_no_worse_precision_on_the_reviewed(counts, min_items, promoted, says):
    ok, reason = shadow_verdict(counts, min_items, min_reviewed=0)
    assert ok is promoted and says in reason
    assert "the shadow period ended with 3" in shadow_verdict(ShadowCounts(items=3), 10, timed_out=True)[1]


@pytest.mark.parametrize("counts, says", [
    # nothing reviewed, whatever the agreement: refused by default
    (ShadowCounts(items=200, agreed=200), "too few reviewed shadowed items: 0, at least 20"),
    (ShadowCounts(items=200, agreed=0), "too few reviewed shadowed items: 0, at least 20"),
    # the reviewed ones say "right", the 180 nobody checked went otherwise: refused
    (ShadowCounts(items=200, agreed=0, reviewed=20, shadow_right=20, service_right=0),
     "disagrees with the head in service on 100.0% of the 180 unreviewed items, more than 25.0%"),
    # agreement on reviewed items does not count for the unreviewed: 60 agreed, 20 of them reviewed
    (ShadowCounts(items=200, agreed=60, reviewed=20, shadow_right=20, service_right=20, reviewed_agreed=20),
     "on 77.8% of the 180 unreviewed items"),
])
def test_a_shadow_nobody_checked_or_that_goes_otherwise_on_the_unchecked_items_is_refused(counts, says):
    ok, reason = shadow_verdict(counts, 200)
    assert not ok and says in reason
    passing = ShadowCounts(items=200, agreed=180, reviewed=20, shadow_right=18, service_right=17, reviewed_agreed=17)
    assert passing.unreviewed_disagreement == pytest.approx(17 / 180)
    assert shadow_verdict(passing, 200) == (True, "the shadow's precision on the 20 reviewed items is no worse than "
                                                  "the head in service's: 0.900 >= 0.850 (agreed with the head in "
                                                  "service on 180 of 200 items)")
    assert shadow_verdict(passing, 200, max_disagreement=0.05)[0] is False
    assert "at least 30" in shadow_verdict(passing, 200, min_reviewed=30)[1]
    with pytest.raises(ValueError, match="max_disagreement 2"):
        shadow_verdict(passing, 200, max_disagreement=2)


def test_the_tallies_add_up_per_shadow_head():
    with mock_aws():
        boto3.client("dynamodb", region_name="us-east-1").create_table(
            TableName="history", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "policy_question", "KeyType": "HASH"}, {"AttributeName": "at", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "policy_question", "AttributeType": "S"},
                                  {"AttributeName": "at", "AttributeType": "S"}])
        tally = ShadowTally("history", client=boto3.client("dynamodb", region_name="us-east-1"))
        assert tally.counts("incident", "team", "a" * 64) == ShadowCounts()
        for agreed in (1, 1, 0):
            tally.add("incident", "team", "a" * 64, items=1, agreed=agreed)
        tally.add("incident", "team", "a" * 64, reviewed=1, shadow_right=1, service_right=0)
        tally.add("incident", "team", "b" * 64, items=1, agreed=0)  # another candidate: counted apart
        counts = tally.counts("incident", "team", "a" * 64)
        assert counts == ShadowCounts(items=3, agreed=2, reviewed=1, shadow_right=1, service_right=0)
        assert counts.figures()["agreement"] == pytest.approx(2 / 3, abs=1e-4)
        assert tally.counts("incident", "team", "b" * 64).items == 1
        with pytest.raises(ValueError, match="name one or more"):
            tally.add("incident", "team", "a" * 64, wrong=1)


def history_table():
    client = boto3.client("dynamodb", region_name="us-east-1")
    client.create_table(
        TableName="history", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "policy_question", "KeyType": "HASH"}, {"AttributeName": "at", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "policy_question", "AttributeType": "S"},
                              {"AttributeName": "at", "AttributeType": "S"}])
    return client


def test_a_tally_is_spread_over_its_shards_and_summed_with_the_row_of_before_sharding():
    with mock_aws():
        client = history_table()
        tally = ShadowTally("history", client=client)
        sha = "a" * 64
        for n in range(60):
            tally.add("incident", "team", sha, items=1, agreed=n % 2)
        rows = {row["policy_question"]["S"]: row for row in client.scan(TableName="history")["Items"]}
        assert len(rows) > 1 and set(rows) <= {k["policy_question"]["S"] for k in tally_keys("incident", "team", sha)[1:]}
        assert sum(int(row["items"]["N"]) for row in rows.values()) == 60  # the shards' count: every addition once
        assert tally.counts("incident", "team", sha) == ShadowCounts(items=60, agreed=30)
        # A stack that counted before sharding keeps its count: the unsharded row is added in.
        client.put_item(TableName="history", Item={**tally_key("incident", "team", sha),
                                                   "items": {"N": "7"}, "agreed": {"N": "5"}, "reviewed": {"N": "2"}})
        assert tally.counts("incident", "team", sha) == ShadowCounts(items=67, agreed=35, reviewed=2)
        assert len(tally_keys("incident", "team", sha)) == SHARDS + 1


def test_a_tally_read_asks_again_for_the_rows_dynamodb_left_unprocessed(monkeypatch):
    pauses: list[float] = []
    monkeypatch.setattr("decision_router.adapters.time.sleep", pauses.append)  # batch_get's pause
    with mock_aws():
        tally = ShadowTally("history", client=history_table())
        tally.add("incident", "team", "a" * 64, items=3)
        original, calls = tally.client.batch_get_item, []

        def throttled_once(**kwargs):
            calls.append(kwargs["RequestItems"]["history"]["Keys"])
            if len(calls) == 1:  # nothing read, every key handed back
                return {"Responses": {"history": []}, "UnprocessedKeys": kwargs["RequestItems"]}
            return original(**kwargs)

        tally.client.batch_get_item = throttled_once
        assert tally.counts("incident", "team", "a" * 64).items == 3 and len(calls) == 2
        tally.client.batch_get_item = lambda **kwargs: {"Responses": {}, "UnprocessedKeys": kwargs["RequestItems"]}
        with pytest.raises(RuntimeError, match=f"11 of its rows were still unprocessed after {MAX_ROUNDS} BatchGetItem"):
            tally.counts("incident", "team", "a" * 64)
        assert pauses == [0.1, 0.1, 0.2, 0.4, 0.8]  # a growing pause before each round asked again


def test_a_review_counts_whether_the_shadow_agreed_on_the_reviewed_item(ticket):
    """count_review (the review function's and the console's) adds `reviewed_agreed`, which
    separates the unreviewed items' disagreement from the reviewed ones'."""
    from aws_lambda_powertools import Logger

    from decision_router.review.shadow_reviews import count_review

    policy = letters_only(load_policy("support-ticket"))
    question = policy.questions[0]
    agreeing = router(policy, Endpoint(question)).decision_record(ticket, policy, shadows={
        question.id: shadow_head(policy, question, 0, model=False)})[0]
    differing = router(policy, Endpoint(question)).decision_record(ticket, policy, shadows={
        question.id: shadow_head(policy, question, 3, model=False)})[0]
    with mock_aws():
        boto3.client("dynamodb", region_name="us-east-1").create_table(
            TableName="history", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "policy_question", "KeyType": "HASH"}, {"AttributeName": "at", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "policy_question", "AttributeType": "S"},
                                  {"AttributeName": "at", "AttributeType": "S"}])
        served = question.option_ids[0]
        tally = ShadowTally("history", client=boto3.client("dynamodb", region_name="us-east-1"))
        for record in (agreeing, differing):
            count_review(record, {question.id: served}, tally, Logger(service="test"))
        sha = agreeing.shadow[question.id].sha256
        assert differing.shadow[question.id].sha256 == sha
        counts = tally.counts(policy.name, question.id, sha)
        assert (counts.reviewed, counts.reviewed_agreed, counts.service_right, counts.shadow_right) == (2, 1, 2, 1)
