"""The reason for a decision (domain/why.py, judging.explain): rules, readout and thresholds, and a
head's evidence fields scored by the head alone (hidden state unchanged)."""

from __future__ import annotations

import json

import pytest

from decision_router.domain.judging import explain, model_entry, rule_entry
from decision_router.domain.model_requests import build_state
from decision_router.domain.policies import POLICY_DIR, load_policy
from decision_router.domain.rules import apply_rules
from decision_router.domain.why import NoiseTrace, Why, field_effects
from decision_router.items import parse_item
from tests.functions.conftest import make_result
from tests.functions.test_heads import HIDDEN, head_for, install, result_with_hidden

HIDDEN_STATE = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 1.0]
LETTERS = [2.0, 0.0, 1.0, 0.0, -1.0]


@pytest.fixture
def head_policy(tmp_path):
    policy = load_policy("support-ticket")
    raw = json.loads((POLICY_DIR / "support-ticket.json").read_text())
    return install(tmp_path, raw, head_for(policy, policy.questions[0]))


def test_a_head_decision_names_its_readout_thresholds_and_the_fields_that_moved_it(head_policy, ticket_data):
    question = head_policy.questions[0]
    ticket = parse_item("ticket", {**ticket_data, "subject": "Charged twice", "body": "charged twice, password"})
    state = build_state(head_policy, ticket)
    result = result_with_hidden(question, HIDDEN_STATE, letters=LETTERS)
    [entry] = explain(head_policy, ticket, [model_entry(question, result, state)], state, {question.id: result})
    why = entry.why
    assert why is not None and why.readout == "head" and why.option == entry.option_id
    # the thresholds compared are the ones the entry was judged by, with its own values
    checks = {c.name: c for c in why.checks}
    assert set(checks) == {"confidence", "margin"}  # a head has no letter-mass check
    assert checks["confidence"].value == entry.confidence
    assert checks["confidence"].threshold == entry.thresholds.min_confidence
    assert checks["margin"].value == entry.margin and checks["margin"].threshold == entry.thresholds.min_margin
    assert all(c.passed for c in why.checks) == entry.passed
    # each field's effect is the head's probability of the chosen option with the field left out,
    # the hidden state and the letters unchanged: recomputed here through the head's public method
    head, chosen = question.learned_head, question.option_ids.index(entry.option_id)
    assert {f.field for f in why.fields} == {"subject", "message", "channel", "customer_tier"}
    for effect in why.fields:
        without = {k: v for k, v in state.items() if k != effect.field}
        expected = head.probabilities(without, HIDDEN_STATE, LETTERS)[chosen]
        assert effect.without == pytest.approx(expected, abs=1e-12)
        assert effect.effect == pytest.approx(entry.probabilities[entry.option_id] - expected, abs=1e-12)
    assert [abs(f.effect) for f in why.fields] == sorted((abs(f.effect) for f in why.fields), reverse=True)
    assert any(abs(f.effect) > 1e-3 for f in why.fields)
    # the only rule answers the queue question and does not match an email ticket
    assert [(r.rule, r.matched, r.fired) for r in why.rules] == [("billing-portal-to-billing", False, False)]


def test_a_head_splits_into_its_lexical_and_model_parts_exactly(head_policy, ticket_data):
    head = head_policy.questions[0].learned_head
    state = build_state(head_policy, parse_item("ticket", ticket_data))
    whole = head.logits(state, HIDDEN_STATE, LETTERS)
    parts = [a + b for a, b in zip(head.lexical_logits(state), head.model_logits(HIDDEN_STATE, LETTERS))]
    assert parts == pytest.approx(whole, abs=1e-12)
    assert head.model_logits(HIDDEN_STATE, LETTERS) != [0.0] * len(head.options)
    with pytest.raises(ValueError, match="hidden state has 3 values"):
        head.model_logits([0.0] * 3, LETTERS)


def test_a_field_the_head_cannot_read_moves_nothing_and_free_text_has_no_fields(head_policy, ticket_data):
    head = head_policy.questions[0].learned_head
    state = build_state(head_policy, parse_item("ticket", {**ticket_data, "channel": "chat"}))
    effects, note = field_effects(head, state, [0.0] * HIDDEN, LETTERS, 0)
    # "channel=chat" is no indicator the head knows: leaving the channel out changes nothing
    assert note is None and {f.field: f.effect for f in effects}["channel"] == 0.0
    assert field_effects(head, "charged twice", [0.0] * HIDDEN, LETTERS, 0) == (
        None, "the evidence is free text: no fields to leave out")


def test_a_rule_decision_and_a_letters_decision_say_so(ticket_data):
    policy = load_policy("support-ticket")
    question = policy.questions[0]
    portal = parse_item("ticket", {**ticket_data, "channel": "billing-portal"})
    hit = apply_rules(policy, portal)["queue"]
    [ruled] = explain(policy, portal, [rule_entry(question, hit)])
    assert ruled.why.readout == "rule" and ruled.why.rule == "billing-portal-to-billing" and ruled.why.rules[0].fired
    assert ruled.why.line() == "rule billing-portal-to-billing → billing"

    ticket = parse_item("ticket", ticket_data)
    stripped = policy.model_copy(update={"questions": [question.with_head(None)]})
    plain = stripped.questions[0]
    result = make_result("queue", plain.option_ids, [3.0, 0.0, 0.0, 0.0, 0.0], mass=0.2)
    [entry] = explain(stripped, ticket, [model_entry(plain, result)], build_state(stripped, ticket), {"queue": result})
    why = entry.why
    assert why.readout == "letters" and why.fields is None and "another model call" in why.fields_note
    mass = next(c for c in why.checks if c.name == "allowed_token_mass")
    assert (mass.value, mass.threshold, mass.passed) == (0.2, plain.thresholds.min_allowed_token_mass,
                                                         0.2 >= plain.thresholds.min_allowed_token_mass)
    assert why.line().startswith(f"letters → {entry.option_id} (conf ")
    assert "0/1 rules matched" in why.line()


def test_the_one_line_names_the_noise_controls():
    why = Why(readout="head", option="P2", noise=NoiseTrace(grouping="by-service", group_leader="INC-1",
                                                            flapping_opens=2, flapping_max=3))
    assert why.line() == "head → P2; group by-service led by INC-1, opened 2x (flapping above 3)"
    assert NoiseTrace(window="deploys", window_action="review").line() == "window deploys (review)"


def test_the_decided_probabilities_save_recounting_and_give_the_same_effects(head_policy, ticket_data):
    head = head_policy.questions[0].learned_head
    state = build_state(head_policy, parse_item("ticket", {**ticket_data, "subject": "Charged twice"}))
    decided = head.probabilities(state, HIDDEN_STATE, LETTERS)
    recounted, _ = field_effects(head, state, HIDDEN_STATE, LETTERS, 2)
    reused, _ = field_effects(head, state, HIDDEN_STATE, LETTERS, 2, decided)
    assert [f.field for f in reused] == [f.field for f in recounted]
    for a, b in zip(reused, recounted):
        assert a.without == pytest.approx(b.without, abs=1e-12) and a.effect == pytest.approx(b.effect, abs=1e-12)
    # the head knows "channel=email" and "customer_tier=pro": leaving either out moves the answer
    assert all(abs(f.effect) > 1e-6 for f in reused if f.field in ("channel", "customer_tier"))


def test_the_line_names_only_the_fields_that_moved_the_answer():
    """A field whose effect prints as +0.00 said nothing: the line leaves it out, and says so when
    no field moved the answer (the model's part, or the bias, decided)."""
    from decision_router.domain.why import MOVED, FieldEffect, Why

    def line(*effects: float) -> str:
        fields = [FieldEffect(field=f"f{i}", without=0.5, effect=e) for i, e in enumerate(effects)]
        return Why(readout="head", option="P2", fields=fields).line()

    assert line(0.31, -0.004, 0.002) == "head → P2; by f0 +0.31"
    assert line(-0.12, MOVED, 0.2) == "head → P2; by f0 -0.12, f1 +0.01"
    assert line(0.004, -0.001) == "head → P2; no evidence field moved it"
    assert "+0.00" not in line(0.0, 0.0)
    assert Why(readout="letters", option="P2").line() == "letters → P2"  # no field effects computed: nothing said


def one_field_head(terms: dict[str, float], *, char_ngrams: tuple[int, int] = (3, 4)):
    """A head over one text field (`text`), options network and billing: network's weight of each
    term as given, billing's its opposite."""
    from decision_router.domain.heads import Head

    names = list(terms)
    return Head.model_validate({
        "version": "words-1", "question_sha256": "0" * 64, "options": ["network", "billing"],
        "text": {"fields": ["text"], "word_ngrams": [1, 2], "char_ngrams": list(char_ngrams), "terms": names,
                 "idf": [1.0] * len(names), "weights": [[terms[t] for t in names], [-terms[t] for t in names]]},
        "bias": [0.0, 0.0], "thresholds": {"min_confidence": 0.5, "min_margin": 0.1},
        "fit": {"examples": 10, "fitted_on": "2026-12-01", "regularisation": 1.0, "folds": 2,
                "cv_accuracy": 0.9, "cv_ece": 0.05}})


def test_the_words_that_moved_a_head_are_its_weights_times_the_tickets_values():
    """Each TF-IDF feature's contribution to the chosen option (weight × value in the ticket's
    vector) goes to the words it came from; the words with a positive sum, largest first."""
    from decision_router.domain.why import top_words

    head = one_field_head({"w:vpn": 3.0, "w:tunnel": 2.0, "w:disconnects": 1.0, "w:invoice": 4.0,
                           "w:the": -0.5, "w:vpn tunnel": 0.2})
    state = {"text": "The VPN tunnel disconnects; the vpn drops. No invoice? no."}
    vector = {head.text.terms[c]: v for c, v in head.text_vector(state).items()}
    contributions = {"vpn": 3.0 * vector["w:vpn"] + 0.1 * vector["w:vpn tunnel"],
                     "tunnel": 2.0 * vector["w:tunnel"] + 0.1 * vector["w:vpn tunnel"],
                     "disconnects": 1.0 * vector["w:disconnects"], "invoice": 4.0 * vector["w:invoice"]}
    expected = sorted(contributions, key=lambda w: -contributions[w])
    assert top_words(head, state, 0) == expected == ["vpn", "invoice", "tunnel", "disconnects"]  # "vpn" twice
    assert top_words(head, state, 0, limit=2) == ["vpn", "invoice"]
    # for billing every weight is the opposite: only "the" pushed towards it
    assert top_words(head, state, 1) == ["the"]
    # words the head does not know, or no text block, move nothing
    assert top_words(head, {"text": "printer jammed"}, 0) == []
    assert top_words(head, "vpn down", 0) == ["vpn"]  # free text is read as the head's one text


def test_character_ngrams_are_named_by_the_word_they_came_from():
    from decision_router.domain.why import top_words

    # no word feature: the n-grams "vpn" and "tun" lie within "vpn" and "tunnel"; "n t" spans a space (no word)
    head = one_field_head({"c:vpn": 1.0, "c:tun": 2.0, "c:n t": 5.0, "c:xyz": 9.0})
    assert top_words(head, {"text": "vpn tunnel"}, 0) == ["tunnel", "vpn"]
    # a word feature and the n-grams within the same word add up to one word
    both = one_field_head({"w:vpn": 1.0, "c:vpn": 1.0, "w:tunnel": 1.5})
    vector = {both.text.terms[c]: v for c, v in both.text_vector({"text": "vpn tunnel"}).items()}
    assert vector["w:vpn"] + vector["c:vpn"] > 1.5 * vector["w:tunnel"]
    assert top_words(both, {"text": "vpn tunnel"}, 0) == ["vpn", "tunnel"]


def test_the_line_names_the_words_and_a_field_only_among_several():
    from decision_router.domain.why import FieldEffect

    one = [FieldEffect(field="text", without=0.2, effect=0.6)]
    assert Why(readout="head", option="network", words=["vpn", "tunnel", "disconnects", "drops"],
               fields=one).line() == 'head → network; the words "vpn", "tunnel", "disconnects"'
    several = one + [FieldEffect(field="channel", without=0.7, effect=0.1)]
    assert Why(readout="head", option="network", words=["vpn"], fields=several).line() == \
        'head → network; the words "vpn"; by text +0.60, channel +0.10'
    # no word moved it (its meaning did, through the sentence embedding): the field is still named
    assert Why(readout="head", option="network", fields=one).line() == "head → network; by text +0.60"


def test_a_head_decision_names_its_words_and_no_letters(head_policy, ticket_data):
    """A head decided: the line names the ticket's words that moved it; the model's letters, read
    by the head, are no figure of the line or of the demo table's note."""
    from decision_router.domain.why import top_words
    from local.tables import _decision_cells

    question = head_policy.questions[0]
    ticket = parse_item("ticket", {**ticket_data, "subject": "Charged twice", "body": "charged twice, password"})
    state = build_state(head_policy, ticket)
    result = result_with_hidden(question, HIDDEN_STATE, letters=LETTERS)
    [entry] = explain(head_policy, ticket, [model_entry(question, result, state)], state, {question.id: result})
    chosen = question.option_ids.index(entry.option_id)
    assert entry.readout == "head" and entry.letter_probabilities
    assert entry.why.words == (top_words(question.learned_head, state, chosen) or None)
    if entry.why.words:
        assert 'the words "' + entry.why.words[0] + '"' in entry.why.line()
    _, note = _decision_cells(entry)
    assert "letters" not in note and "letters" not in entry.why.line()


def test_a_letters_decision_still_shows_the_letters(ticket_data):
    from local.tables import _decision_cells

    policy = load_policy("support-ticket")
    ticket = parse_item("ticket", ticket_data)
    stripped = policy.model_copy(update={"questions": [policy.questions[0].with_head(None)]})
    plain = stripped.questions[0]
    result = make_result("queue", plain.option_ids, [3.0, 0.0, 0.0, 0.0, 0.0])
    [entry] = explain(stripped, ticket, [model_entry(plain, result)], build_state(stripped, ticket), {"queue": result})
    cells, note = _decision_cells(entry)
    assert cells[0] == "queue: letters" and note.startswith(f"queue: letters → {entry.option_id} (conf ")
    assert entry.why.words is None
