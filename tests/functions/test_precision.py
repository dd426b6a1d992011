"""Live precision (domain/precision.py): which automatic answers are sampled for a check (the same
draw for every judgement of an item, at the rate the policy or the question sets), the item held
for review with the check on its record, a reviewer's answer counted against the automatic one,
corrections counted beside the estimate, and the figure: the fitter's own lower bound against the
question's target, published as metrics (review/precision_checks.py)."""

from __future__ import annotations

import json

import pytest

from decision_router.domain.judging import build_record, explain, model_entry, rule_entry
from decision_router.domain.policies import PolicyError, PrecisionCheck, load_policy
from decision_router.domain.precision import (
    CHECK_REASON,
    CheckCounts,
    DrawKeyUnavailable,
    check_draw,
    check_tally,
    corrected_answers,
    precision_figure,
    sample_rate,
    sampled,
    target_of,
)
from decision_router.domain.precision_bound import items_needed, precision_lower_bound
from decision_router.domain.rules import apply_rules
from decision_router.items import parse_item
from decision_router.review.precision_checks import BELOW_TARGET, count_check, count_correction
from tests.fakes.console import FakePrecisionTally
from tests.functions.conftest import letters_only, make_result
from tests.functions.test_head_store import emitted

TICKET = {"subject": "Charged twice", "body": "Two charges of $49, refund one please.",
          "customer": {"id": "C-9", "tier": "pro"}, "channel": "email", "created_at": "2026-11-29T12:00:00Z"}
SURE = [30.0, 0.0, 0.0, 0.0, 0.0]


def checking(rate: float, *, question_rate: float | None = None):
    policy = letters_only(load_policy("support-ticket"))
    questions = [q.model_copy(update={"precision_check": PrecisionCheck(sample_rate=question_rate)})
                 if question_rate is not None else q for q in policy.questions]
    return policy.model_copy(update={"precision_check": PrecisionCheck(sample_rate=rate), "questions": questions})


def ticket(ticket_id: str = "T-1", **changes):
    return parse_item("ticket", {"ticket_id": ticket_id, **TICKET, **changes})


def judged(policy, item, logits=SURE, check_key=None):
    entries = [model_entry(q, make_result(q.id, q.option_ids, logits)) for q in policy.questions]
    return build_record(policy, item, explain(policy, item, entries), destinations={t: f"https://sqs/{t}" for t in policy.targets},
                        review_timeout_seconds=3600, check_key=check_key)


STACK_KEY = b"the-stacks-head-signing-key-0123456789abcdef"


def test_the_draw_is_the_items_own_whoever_judges_it_and_the_policy_it_is_judged_under():
    item = ticket()
    assert check_draw("support-ticket", item.key) == check_draw("support-ticket", ticket().key)
    assert check_draw("support-ticket", item.key) != check_draw("incident", item.key)
    assert check_draw("support-ticket", item.key) != check_draw("support-ticket", ticket("T-2").key)
    draws = [check_draw("support-ticket", ticket(f"T-{n}").key) for n in range(4000)]
    assert all(0.0 <= d < 1.0 for d in draws)
    # uniform enough that a rate is a share: 2 % of 4000 is 80, three standard deviations ~27
    assert 80 - 27 <= sum(d < 0.02 for d in draws) <= 80 + 27


def test_in_a_stack_the_draw_is_keyed_so_no_sender_can_tell_which_of_its_items_are_checked():
    """The item key is the sender's to choose (its id, a digest of its text): the plain hash let a
    sender try variants until one was never checked (or always). Under the stack's key the draw is
    still the item's own, and still uniform, but it is not the hash the sender can compute, and
    another key (another stack) draws otherwise."""
    item = ticket()
    keyed = check_draw("support-ticket", item.key, STACK_KEY)
    assert keyed == check_draw("support-ticket", ticket().key, STACK_KEY)  # a redelivery draws the same
    assert keyed != check_draw("support-ticket", item.key)  # not what the sender computes without the key
    assert keyed != check_draw("support-ticket", item.key, b"another-stacks-key-0123456789abcdef")
    assert keyed != check_draw("incident", item.key, STACK_KEY)
    draws = [check_draw("support-ticket", ticket(f"T-{n}").key, STACK_KEY) for n in range(4000)]
    plain = [check_draw("support-ticket", ticket(f"T-{n}").key) for n in range(4000)]
    assert all(0.0 <= d < 1.0 for d in draws) and 80 - 27 <= sum(d < 0.02 for d in draws) <= 80 + 27
    # the variants the sender would pick from its own computation are checked like any others
    never = [n for n, d in enumerate(plain) if d >= 0.5]
    assert 0.4 < sum(draws[n] < 0.5 for n in never) / len(never) < 0.6


def test_the_routing_draw_uses_the_stacks_key_at_the_same_rate_and_none_when_it_cannot_be_read():
    policy = checking(0.1)
    held = [judged(policy, ticket(f"T-{n}"), check_key=lambda: STACK_KEY) for n in range(300)]
    checks = [r.item_id for r in held if r.route == "review"]
    assert checks == [r.item_id for r in held if check_draw(policy.name, r.item_key, STACK_KEY) < 0.1]
    assert checks != [r.item_id for r in held if check_draw(policy.name, r.item_key) < 0.1]
    assert 10 <= len(checks) <= 50  # 30 expected

    def unreadable():
        raise DrawKeyUnavailable("AccessDenied")

    assert judged(checking(1.0), ticket(), check_key=unreadable).route == "auto"  # a check missed, not an item
    read = []
    assert judged(checking(0.0), ticket(), check_key=lambda: read.append(1) or STACK_KEY).route == "auto"
    assert read == []  # no rate could sample it: the key is not read


def test_a_sampled_automatic_answer_holds_the_item_for_a_check_and_every_judgement_agrees():
    policy = checking(1.0)
    record = judged(policy, ticket())

    assert record.route == "review" and record.destination is None
    assert record.route_reason.startswith(CHECK_REASON) and "queue at 1" in record.route_reason
    assert record.checked == ["queue"] and record.decisions[0].passed and record.decisions[0].option_id == "billing"
    assert judged(policy, ticket()).model_dump(exclude={"decided_at"}) == record.model_dump(exclude={"decided_at"})
    # what the audit row keeps of the decisions says the answer was sampled
    assert json.loads(record.model_dump_json())["decisions"][0]["check"] is True


def test_off_by_default_and_a_rate_samples_its_share():
    assert load_policy("support-ticket").precision_check.sample_rate == 0.0
    assert judged(letters_only(load_policy("support-ticket")), ticket()).route == "auto"
    policy = checking(0.1)
    held = [judged(policy, ticket(f"T-{n}")) for n in range(300)]
    checks = [r for r in held if r.route == "review"]
    assert {r.route for r in held} == {"auto", "review"} and all(r.checked == ["queue"] for r in checks)
    assert [r.item_id for r in checks] == [r.item_id for r in held if check_draw(policy.name, r.item_key) < 0.1]


def test_only_automatic_model_answers_are_checked():
    policy = checking(1.0)
    unsure = judged(policy, ticket(), logits=[2.0, 1.6, 0.0, 0.0, 0.0])
    assert unsure.route == "review" and unsure.checked == [] and not unsure.route_reason.startswith(CHECK_REASON)
    portal = ticket(channel="billing-portal")  # the policy's rule answers: not a guess to check
    entries = [rule_entry(policy.question(q), hit) for q, hit in apply_rules(policy, portal).items()]
    by_rule = build_record(policy, portal, explain(policy, portal, entries), destinations={t: "u" for t in policy.targets},
                           review_timeout_seconds=60)
    assert by_rule.route == "auto" and by_rule.checked == []


def test_a_questions_own_rate_takes_the_policys_place():
    policy = checking(1.0, question_rate=0.0)
    assert sample_rate(policy, policy.question("queue")) == 0.0 and judged(policy, ticket()).route == "auto"
    policy = checking(0.0, question_rate=1.0)
    assert sampled(policy, ticket().key, judged(policy, ticket()).decisions) == ["queue"]


@pytest.mark.parametrize("rate,problem", [(1.5, "less than or equal to 1"), (-0.1, "greater than or equal to 0"),
                                          ("often", "valid number")])
def test_a_rate_outside_zero_to_one_is_refused_naming_the_field(tmp_path, rate, problem):
    from decision_router.domain.policies import POLICY_DIR
    from tests.functions.conftest import policy_files_beside

    data = json.loads((POLICY_DIR / "support-ticket.json").read_text())
    data["precision_check"] = {"sample_rate": rate}
    policy_files_beside(tmp_path)
    (tmp_path / "p.json").write_text(json.dumps(data))
    with pytest.raises(PolicyError, match="precision_check.sample_rate") as error:
        load_policy(tmp_path / "p.json")
    assert problem in str(error.value)


def test_the_reviewers_answer_is_compared_with_the_automatic_one_and_corrections_apart():
    record = judged(checking(1.0), ticket())
    assert check_tally(record, {"queue": "billing"}) == {"queue": ("billing", True)}
    assert check_tally(record, {"queue": "sales"}) == {"queue": ("billing", False)}
    plain = judged(letters_only(load_policy("support-ticket")), ticket())
    assert check_tally(plain, {"queue": "sales"}) == {}  # not sampled: not in the estimate
    assert corrected_answers(plain, {"queue": "sales"}) == {"queue": "billing"}
    assert corrected_answers(plain, {"queue": "billing"}) == {}


def test_the_figure_is_the_fitters_bound_against_the_questions_target():
    target = target_of(load_policy("support-ticket").question("queue"))
    assert target == pytest.approx(1 - load_policy("support-ticket").question("queue").learning.max_auto_error)
    figure = precision_figure(CheckCounts(checked=200, right=197, corrected=4), 0.95)
    assert figure.precision == pytest.approx(197 / 200)
    assert figure.lower_bound == precision_lower_bound(197, 200) and figure.items_needed == items_needed(0.95)
    assert figure.below_target is False and figure.corrected == 4  # corrections are a count beside it
    assert precision_figure(CheckCounts(checked=200, right=190), 0.95).below_target is True  # 95 %, not shown
    # too few checks to show the target even all right: never read as below it
    few = precision_figure(CheckCounts(checked=items_needed(0.95) - 1, right=items_needed(0.95) - 2), 0.95)
    assert few.lower_bound < 0.95 and few.below_target is False
    empty = precision_figure(CheckCounts(), 0.95)
    assert (empty.precision, empty.lower_bound, empty.below_target) == (None, None, False)
    assert "no automatic answer checked yet" in empty.line() and "197 of 200" in figure.line()
    with pytest.raises(ValueError, match="right among"):
        precision_figure(CheckCounts(checked=1, right=2), 0.95)


def test_a_checks_count_updates_the_tally_and_publishes_the_figure(capsys):
    from aws_lambda_powertools import Logger

    policy, tally, logger = load_policy("support-ticket"), FakePrecisionTally(), Logger(service="test")
    record = judged(checking(1.0), ticket())
    target = target_of(policy.question("queue"))
    needed = items_needed(target)
    for n in range(needed):
        figures = count_check(record, {"queue": "billing" if n else "sales"}, policy, tally, logger)
    assert tally.counts("support-ticket", "queue").model_dump() == {"checked": needed, "right": needed - 1, "corrected": 0}
    assert tally.counts("support-ticket", "queue", "billing").checked == needed
    assert figures["queue"].below_target is True  # one wrong among the fewest that could show the target
    published = emitted(capsys, BELOW_TARGET)
    assert [line[BELOW_TARGET] for line in published] == [[0.0]] * (needed - 1) + [[1.0]]
    assert published[-1]["policy"] == "support-ticket" and published[-1]["question"] == "queue"
    count_correction(judged(letters_only(policy), ticket()), {"queue": "sales"}, tally, logger)
    assert tally.counts("support-ticket", "queue").corrected == 1
    assert tally.counts("support-ticket", "queue").checked == needed  # a correction is not a check
    assert [line["AutomaticAnswerCorrected"] for line in emitted(capsys, "AutomaticAnswerCorrected")] == [[1.0]]


def test_a_tally_that_cannot_be_written_leaves_the_review_standing_and_is_counted(capsys):
    from aws_lambda_powertools import Logger

    class Broken(FakePrecisionTally):
        def add(self, *args, **counts):
            raise RuntimeError("throttled")

    record = judged(checking(1.0), ticket())
    assert count_check(record, {"queue": "billing"}, load_policy("support-ticket"), Broken(), Logger(service="t")) == {}
    assert [line["question"] for line in emitted(capsys, "PrecisionTallyFailed")] == ["queue"]


def test_the_routing_functions_draw_with_the_stacks_head_signing_key_and_count_an_unreadable_one(capsys):
    from aws_lambda_powertools import Logger, Metrics

    from decision_router.adapters.signing_key import SigningKey
    from decision_router.intake.pipeline import Intake
    from decision_router.intake.wiring import Wiring

    def intake(key):
        return Intake("ticket", logger=Logger(service="draw-key-test"), metrics=Metrics(namespace="Test"),
                      wiring=Wiring(head_signing_key=key))

    assert intake(SigningKey(STACK_KEY))._check_key() == STACK_KEY

    class Unreadable:
        def get_secret_value(self, SecretId):
            raise RuntimeError("AccessDenied")

    flow = intake(SigningKey.from_secret("arn:aws:secretsmanager:us-east-1:123456789012:secret:heads", Unreadable()))
    with pytest.raises(DrawKeyUnavailable):
        flow._check_key()
    flow.metrics.flush_metrics()
    assert "PrecisionCheckKeyUnavailable" in capsys.readouterr().out
