"""Calibration, confidence and thresholds → per-question pass/fail → the decision record.

Every check says why it failed in words a reviewer understands ("confidence 0.12 < 0.60").
A value exactly at its threshold passes; a tie between the top two options never does.
"""

from __future__ import annotations

import itertools
import math
from datetime import datetime, timezone
from typing import Mapping, Sequence

from decision_contract import DecisionResult, confidence, softmax, top_two_margin

from ..items import Item
from .failures import EndpointFailure
from .heads import Head
from .lexical import State, evidence_text
from .model_requests import SIGNAL_OPTION_IDS
from .policies import Policy, Question, Thresholds
from .precision import DrawKey, check_reason, sampled
from .records import DecisionEntry, DecisionRecord, Destination, PolicyRef, ReviewChoice, ReviewSpec
from .rules import RuleHit
from .why import Why, field_effects, rule_checks, threshold_checks, top_words

ALL_MET = "all thresholds met"


def shortfall(name: str, value: float, minimum: float) -> str:
    """'name value < minimum' with enough digits that the two numbers never print equal."""
    for digits in (2, 4, 6):
        shown, needed = f"{value:.{digits}f}", f"{minimum:.{digits}f}"
        if shown != needed:
            break
    return f"{name} {shown} < {needed}"


def threshold_reasons(conf: float, margin: float, mass: float, thresholds: Thresholds,
                      tie: tuple[str, str] | None = None) -> list[str]:
    reasons = []
    if conf < thresholds.min_confidence:
        reasons.append(shortfall("confidence", conf, thresholds.min_confidence))
    if margin < thresholds.min_margin:
        reasons.append(shortfall("margin", margin, thresholds.min_margin))
    if tie is not None:
        reasons.append(f"tie between {tie[0]} and {tie[1]}")
    if mass < thresholds.min_allowed_token_mass:
        reasons.append(shortfall("allowed_token_mass", mass, thresholds.min_allowed_token_mass))
    return reasons


EMPTY_EVIDENCE = "the evidence the head reads is empty"


def empty_evidence(head: Head, state: State) -> list[str]:
    """A reason to hold the answer when every evidence field the head reads is empty: it would
    give any such item the same answer (an item sent with its text in a field the policy does not
    read), so it is not the item's."""
    if head.text is None or head.categorical is not None or evidence_text(state, head.text.fields).strip():
        return []
    return [f"{EMPTY_EVIDENCE} ({', '.join(head.text.fields)}): its answer would be any such item's"]


UNLIKE = "unlike any option it learned"


def novelty_reasons(head: Head, hidden: Sequence[float] | None, probabilities: Sequence[float] | None = None,
                    state: State | None = None) -> tuple[float | None, list[str]]:
    """The head's novelty score of the item (its evidence's sentence embedding, or the model's
    hidden state, whichever the head's novelty part reads) and, above its threshold, the reason
    to hold the answer: the item belongs to no option the head learned, however confident its
    probabilities are (they only compare the options it knows). (None, []) for a head without a
    novelty part, which judges exactly as before."""
    if head.novelty is None:
        return None, []
    # the one of the two signals the part reads (the embedding is the head's own, cached per text)
    reads_sentence = head.novelty.score == "nearest"
    sentence = head.sentence_vector(state) if reads_sentence and state is not None else None
    if (sentence if reads_sentence else hidden) is None:
        return None, []
    score = head.novelty_score(hidden, probabilities, sentence)
    assert score is not None
    threshold = head.novelty.threshold
    if score <= threshold:  # at its threshold passes, like every other check
        return score, []
    shown = f"{score:.2f} > {threshold:.2f}" if f"{score:.2f}" != f"{threshold:.2f}" else f"{score:.4f} > {threshold:.4f}"
    return score, [f"{UNLIKE}: novelty {shown}"]


def model_entry(question: Question, result: DecisionResult, state: State | None = None) -> DecisionEntry:
    """Judge the endpoint's answer to a question: by its head (over the evidence `state`, the
    model's hidden state and letters) when the question has one that fits the endpoint's model,
    else by the letters recalibrated with the policy's temperature.

    A question with more options than letters was asked its signals decision: its head alone
    answers (over the evidence and the hidden state); where the head cannot read this endpoint's
    answer (another model), nothing can, and the item goes to review with the reason.

    Raises EndpointFailure(kind='bad_response') when the result does not answer this question."""
    if question.many_options:
        return _many_options_entry(question, result, state)
    if result.option_ids != question.option_ids:
        raise EndpointFailure("bad_response", f"question {question.id!r}: endpoint answered options "
                              f"{result.option_ids}, expected {question.option_ids}")
    logits = result.option_logits
    if len(logits) != len(question.options) or not all(math.isfinite(z) for z in logits):
        raise EndpointFailure("bad_response", f"question {question.id!r}: option_logits missing or not finite")
    letters = softmax(logits, question.temperature)
    head, skipped = question.learned_head, None
    if head is not None:
        skipped = _head_skipped(head, result)
    applied = head if skipped is None else None
    if applied is not None:
        if state is None:
            raise ValueError(f"question {question.id!r}: its head reads the evidence; pass the decision's state")
        probabilities = applied.probabilities(state, result.hidden_state, logits)
    else:
        probabilities = letters
    ranked = sorted(range(len(probabilities)), key=lambda i: -probabilities[i])  # stable: option order on ties
    top, second = ranked[0], ranked[1]
    if applied is not None:
        # a head does not read the letters' share of the vocabulary: no mass check
        thresholds = Thresholds(min_confidence=applied.thresholds.min_confidence_for(question.options[top].id),
                                min_margin=applied.thresholds.min_margin, min_allowed_token_mass=0.0)
        readout = "head"
    else:
        thresholds, readout = question.thresholds, "letters"
    conf = confidence(probabilities, question.confidence_formula)
    margin = top_two_margin(probabilities)
    tie = (question.options[top].id, question.options[second].id) if probabilities[top] == probabilities[second] else None
    reasons = threshold_reasons(conf, margin, result.allowed_token_mass, thresholds, tie)
    novelty: float | None = None
    if applied is not None and state is not None:
        reasons += empty_evidence(applied, state)
    if applied is not None:
        novelty, unlike = novelty_reasons(applied, result.hidden_state, probabilities, state)
        reasons += unlike
    return DecisionEntry(
        question=question.id,
        source="model",
        readout=readout,
        tier="endpoint",
        option_id=question.options[top].id,
        probabilities=dict(zip(question.option_ids, probabilities)),
        letter_probabilities=dict(zip(question.option_ids, letters)),
        head_probabilities=dict(zip(question.option_ids, probabilities)) if applied is not None else None,
        head_version=applied.version if applied is not None else None,
        head_skipped=skipped,
        confidence=conf,
        confidence_formula=question.confidence_formula.value,
        margin=margin,
        allowed_token_mass=result.allowed_token_mass,
        temperature=applied.temperature if applied is not None else question.temperature,
        thresholds=thresholds,
        novelty=novelty,
        max_novelty=applied.novelty.threshold if applied is not None and applied.novelty is not None else None,
        passed=not reasons,
        reasons=reasons,
        model=result.model,
        prompt_sha256=result.prompt_sha256,
        latency_seconds=result.timing.total_seconds,
    )


def _head_skipped(head: Head, result: DecisionResult) -> str | None:
    """Why `head` cannot read this result (another model, no hidden state), or None."""
    skipped = head.mismatch(result.model, result.prompt_version)
    if skipped is None and head.reads_hidden_state:
        if result.hidden_state is None or not all(math.isfinite(v) for v in result.hidden_state):
            skipped = "the endpoint returned no hidden state"
        elif len(result.hidden_state) != head.hidden_size:
            skipped = f"hidden state of {len(result.hidden_state)} values; the head reads {head.hidden_size}"
    return skipped


def _many_options_entry(question: Question, result: DecisionResult, state: State | None) -> DecisionEntry:
    if result.option_ids != SIGNAL_OPTION_IDS:
        raise EndpointFailure("bad_response", f"question {question.id!r}: endpoint answered options "
                              f"{result.option_ids}, expected its signals decision's {SIGNAL_OPTION_IDS}")
    head = question.learned_head
    skipped = "the question has no head" if head is None else _head_skipped(head, result)
    if head is None or skipped is not None:
        return DecisionEntry(
            question=question.id, source="model", readout=None, tier="endpoint", option_id=None, head_skipped=skipped,
            confidence_formula=question.confidence_formula.value, temperature=question.temperature,
            thresholds=question.thresholds, passed=False, model=result.model, prompt_sha256=result.prompt_sha256,
            reasons=[f"head not applied ({skipped}); the letters cannot answer a question with "
                     f"{len(question.options)} options"], latency_seconds=result.timing.total_seconds)
    if state is None:
        raise ValueError(f"question {question.id!r}: its head reads the evidence; pass the decision's state")
    return _head_entry(question, head, state, result)


def words_entry(question: Question, state: State) -> DecisionEntry:
    """Judge a question by its head over the item's words alone (text, categories, the sentence
    embedding), without the endpoint: the first tier of a question whose `model` is when_unsure
    or never. The head reads no model signal (Policy.head_problems holds it to that)."""
    head = question.learned_head
    if head is None or head.reads_model:
        raise ValueError(f"question {question.id!r}: only a head that reads no model signal answers without the endpoint")
    return _head_entry(question, head, state, None)


def _head_entry(question: Question, head: Head, state: State, result: DecisionResult | None) -> DecisionEntry:
    """The head's answer judged at its own thresholds, from the endpoint's signals `result` or,
    with None, from the words alone (no mass check either way: a head does not read the letters'
    share of the vocabulary)."""
    probabilities = head.probabilities(state, result.hidden_state if result is not None else None, None)
    top, second = _top_two(probabilities)
    thresholds = Thresholds(min_confidence=head.thresholds.min_confidence_for(question.options[top].id),
                            min_margin=head.thresholds.min_margin, min_allowed_token_mass=0.0)
    conf = confidence(probabilities, question.confidence_formula)
    margin = top_two_margin(probabilities)
    tie = (question.options[top].id, question.options[second].id) if probabilities[top] == probabilities[second] else None
    novelty, unlike = novelty_reasons(head, result.hidden_state if result is not None else None, probabilities, state)
    reasons = threshold_reasons(conf, margin, 1.0, thresholds, tie) + empty_evidence(head, state) + unlike
    by_option = dict(zip(question.option_ids, probabilities))
    return DecisionEntry(
        question=question.id, source="model", readout="head", tier="endpoint" if result is not None else "words",
        option_id=question.options[top].id,
        probabilities=by_option, letter_probabilities=None, head_probabilities=by_option,
        head_version=head.version, confidence=conf, confidence_formula=question.confidence_formula.value,
        margin=margin, allowed_token_mass=result.allowed_token_mass if result is not None else None,
        temperature=head.temperature, thresholds=thresholds, novelty=novelty,
        max_novelty=head.novelty.threshold if head.novelty is not None else None,
        passed=not reasons, reasons=reasons, model=result.model if result is not None else None,
        prompt_sha256=result.prompt_sha256 if result is not None else None,
        latency_seconds=result.timing.total_seconds if result is not None else None,
    )


def _top_two(probabilities: Sequence[float]) -> tuple[int, int]:
    """The two most probable options' positions, option order on ties, in one pass (no sort:
    the cost stays linear in the options)."""
    top = max(range(len(probabilities)), key=probabilities.__getitem__)
    second = max((i for i in range(len(probabilities)) if i != top), key=probabilities.__getitem__)
    return top, second


def rule_entry(question: Question, hit: RuleHit) -> DecisionEntry:
    return DecisionEntry(
        question=question.id, source="rule", readout="rule", option_id=hit.option_id,
        confidence_formula=question.confidence_formula.value, temperature=question.temperature,
        thresholds=question.thresholds, passed=True, rule=hit.rule_id,
    )


def error_entry(question: Question, failure: EndpointFailure) -> DecisionEntry:
    return DecisionEntry(
        question=question.id, source="endpoint_error", option_id=None,
        confidence_formula=question.confidence_formula.value, temperature=question.temperature,
        thresholds=question.thresholds, passed=False, reasons=[f"endpoint error: {failure}"],
        error=failure.describe(),
    )


def review_choices(policy: Policy, destinations: Mapping[str, str]) -> list[ReviewChoice]:
    """Every complete answer to the policy's questions (options in policy order), with the queue
    and escalation it implies: what a reviewer may choose from."""
    routing = policy.routing_question
    choices = []
    for combination in itertools.product(*(q.options for q in policy.questions)):
        answers = {q.id: option.id for q, option in zip(policy.questions, combination)}
        target = policy.target(answers[routing.id])
        choices.append(ReviewChoice(answers=answers, destination=Destination(target=target, queue_url=destinations[target]),
                                    escalate=any(option.escalate for option in combination)))
    return choices


def build_record(
    policy: Policy,
    item: Item,
    entries: Sequence[DecisionEntry],
    *,
    destinations: Mapping[str, str],
    review_timeout_seconds: int,
    decided_at: datetime | None = None,
    check_key: DrawKey | None = None,
) -> DecisionRecord:
    """Route auto when every question passed, else review. `escalate` means "escalate now":
    true when a passed answer (rule or confident model) is an escalating option, whatever the route.
    `check_key`: the stack's key for the precision checks' draw (domain/precision.py `sampled`)."""
    by_question = {entry.question: entry for entry in entries}
    missing = [q.id for q in policy.questions if q.id not in by_question]
    if missing:
        raise ValueError(f"no decision for question(s) {missing} of policy {policy.name!r}")
    ordered = [by_question[q.id] for q in policy.questions]
    failing = [e for e in ordered if not e.passed]
    route = "review" if failing else "auto"
    reason = "; ".join(f"{e.question}: {r}" for e in failing for r in e.reasons) if failing else ALL_MET
    checked = sampled(policy, item.key, ordered, check_key) if route == "auto" else []
    if checked:  # held for a reviewer, who checks the automatic answers (domain/precision.py)
        route, reason = "review", check_reason(policy, checked)
        ordered = [e.model_copy(update={"check": True}) if e.question in checked else e for e in ordered]
    destination = None
    if route == "auto":
        chosen = by_question[policy.routing_question.id].option_id
        assert chosen is not None, "a passed decision has an answer"
        target = policy.target(chosen)
        destination = Destination(target=target, queue_url=destinations[target])
    escalate = any(e.passed and e.option_id is not None and policy.question(e.question).option(e.option_id).escalate
                   for e in ordered)
    moment = (decided_at or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return DecisionRecord(
        item_kind=item.kind,
        item_id=item.item_id,
        item_key=item.key,
        item=item.model_dump(mode="json"),
        policy=PolicyRef(name=policy.name, version=policy.version),
        route=route,
        route_reason=reason,
        destination=destination,
        escalate=escalate,
        decisions=ordered,
        review=ReviewSpec(timeout_seconds=review_timeout_seconds,
                          questions={q.id: q.option_ids for q in policy.questions},
                          choices=[choice.wire() for choice in review_choices(policy, destinations)]),
        decided_at=moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def explain(policy: Policy, item: Item, entries: Sequence[DecisionEntry], state: State | None = None,
            results: Mapping[str, DecisionResult] | None = None) -> list[DecisionEntry]:
    """Each entry with its reason (`why`): the rules that answer its question, evaluated; the
    readout and the thresholds compared; for a head, the words of the evidence that moved its
    answer (why.top_words) and the evidence fields that did (why.field_effects: the head alone
    over the endpoint's one answer, no second model call)."""
    explained = []
    for entry in entries:
        question = policy.question(entry.question)
        rules, fired = rule_checks(policy, item, question.id)
        why = Why(rules=rules, rule=fired if entry.source == "rule" else None,
                  readout=entry.readout, option=entry.option_id)
        if entry.source == "model" and entry.confidence is not None and entry.margin is not None:
            t = entry.thresholds
            why.checks = threshold_checks(entry.confidence, entry.margin, entry.allowed_token_mass, t.min_confidence,
                                          t.min_margin, t.min_allowed_token_mass, entry.novelty, entry.max_novelty)
            result = (results or {}).get(question.id)
            head = question.learned_head
            if entry.readout == "head" and head is not None and state is not None and (
                    result is not None or entry.tier == "words"):
                letters = None if result is None or question.many_options or head.letters is None else result.option_logits
                decided = [(entry.head_probabilities or {}).get(o, 0.0) for o in question.option_ids]
                chosen = question.option_ids.index(entry.option_id or "")
                why.fields, why.fields_note = field_effects(head, state, result.hidden_state if result else None, letters,
                                                            chosen, decided)
                why.words = top_words(head, state, chosen) or None
            else:
                why.fields_note = "the letters decided: a field's effect would need another model call"
        elif entry.source == "endpoint_error":
            why.fields_note = "the endpoint gave no answer"
        empty = [reason for reason in entry.reasons if reason.startswith(EMPTY_EVIDENCE)]
        if empty:  # said where a reader of the why looks for what moved the answer
            why.fields_note = empty[0]
        explained.append(entry.model_copy(update={"why": why}))
    return explained
