"""`make fit-history`'s TEST, judged as the routing function judges an item (`judge_test`: its own
`judging.model_entry` over the endpoint's answer built from the cached signals by
`DecisionResult.from_signals`, or `judging.words_entry` for a head on the words alone), and the
figures the report gives of it: accuracy, macro-F1, ECE, the share answered automatically and its
precision (`figures`), who answers under the question's `model` setting (`tiers`), and the
novelty part's catch (`novelty_figures`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from sklearn.metrics import f1_score, roc_auc_score
from threadpoolctl import threadpool_limits

from decision_contract import DecisionResult, ModelInfo
from decision_router.domain.judging import UNLIKE, model_entry, words_entry
from decision_router.domain.model_requests import question_decision
from decision_router.domain.policies import Question
from evaluation import metrics

from .history_policy import Vocabulary
from .history_scoring import Signal


@dataclass
class Judged:
    """TEST's items as the head answered them, item i for TEST row i."""

    gold: list[str | None]  # the option each item's label is (None: out of scope)
    answers: list[str | None] = field(default_factory=list)
    confidences: list[float] = field(default_factory=list)
    auto: list[bool] = field(default_factory=list)
    novelty: list[float | None] = field(default_factory=list)
    unlike_only: list[bool] = field(default_factory=list)  # held for novelty alone: the head's thresholds would have answered
    lines: list[dict[str, Any]] = field(default_factory=list)  # predictions.jsonl


def judge_test(question: Question, vocab: Vocabulary, test_rows: Sequence[dict[str, str]], test_states: Sequence[Any],
               test_signals: Sequence[Signal], model: ModelInfo, fields: Sequence[str], label: str) -> Judged:
    """Each TEST item through the routing function's judging: from the words alone where the head
    reads no model signal, else over the endpoint's answer as the cached signals give it."""
    label_of = dict(zip([o.id for o in question.options], vocab.options))
    judged = Judged([vocab.option_of(r[label]) for r in test_rows])
    # one item at a time, as the routing function judges: a BLAS thread pool costs more than it gives
    with threadpool_limits(limits=1, user_api="blas"):
        entries = [words_entry(question, state) if question.model != "always"
                   else model_entry(question, endpoint_answer(question, model, signal), state)
                   for state, signal in zip(test_states, test_signals)]
    for row, entry in zip(test_rows, entries):
        answer = label_of[entry.option_id] if entry.option_id else None
        judged.answers.append(answer)
        judged.confidences.append(entry.confidence or 0.0)
        judged.auto.append(entry.passed)
        judged.novelty.append(entry.novelty)
        judged.unlike_only.append(bool(entry.reasons) and all(r.startswith(UNLIKE) for r in entry.reasons))
        judged.lines.append({"text": " / ".join(row[f] for f in fields), "gold": row[label], "answer": answer,
                             "confidence": entry.confidence, "auto": entry.passed,
                             **({"novelty": round(entry.novelty, 4)} if entry.novelty is not None else {})})
    return judged


def endpoint_answer(question: Question, model: ModelInfo, signal: Signal) -> DecisionResult:
    """The endpoint's answer, as the routing function receives it, from the cached signals."""
    hidden, logits, mass, version = signal
    return DecisionResult.from_signals(question.id, question_decision(question, "x").option_ids, logits, model=model,
                                       prompt_version=version, allowed_token_mass=mass, hidden_state=hidden)


def head_figures(question: Question, judged: Judged, options: Sequence[str]) -> dict[str, Any]:
    """`figures` of the head's answers and, where the head has a novelty part, what it is and caught."""
    found = figures(judged.gold, judged.answers, judged.confidences, judged.auto, options)
    learned = question.learned_head
    assert learned is not None, "fit-history writes the question's head"
    if learned.novelty is not None:
        found["novelty"] = {
            "score": learned.novelty.score,
            **({"rank": len(learned.novelty.projection)} if learned.novelty.score == "mahalanobis"
               else {"kept": learned.novelty.rows, "k": learned.novelty.k}),
            "surprise_weight": learned.novelty.surprise_weight,
            "in_scope_budget": learned.novelty.in_scope_budget,
            "out_of_fold_in_scope_review": learned.novelty.out_of_fold_in_scope_review,
            **({"data_out_of_scope": {"items": learned.novelty.out_of_scope_examples,
                                      "caught": learned.novelty.out_of_scope_caught}}
               if learned.novelty.out_of_scope_examples else {}),
            **novelty_figures(judged.gold, judged.auto, judged.unlike_only, judged.novelty, learned.novelty.threshold)}
    return found


def figures(gold: Sequence[str | None], answers: Sequence[str | None], confidences: Sequence[float], auto: Sequence[bool],
            options: Sequence[str]) -> dict[str, Any]:
    """accuracy (out of scope right only when not routed), macro-F1 and ECE over in-scope items,
    the share routed automatically, its precision and that precision's lower confidence bound
    (`metrics.precision_lower_bound`), and the out-of-scope figures."""
    n = len(gold)
    right = [(g is None and not a) or (g is not None and ans == g) for g, ans, a in zip(gold, answers, auto)]
    scope = [i for i, g in enumerate(gold) if g is not None]
    oos = [i for i, g in enumerate(gold) if g is None]
    routed = [i for i in range(n) if auto[i]]
    hits = [gold[i] == answers[i] for i in scope]
    out: dict[str, Any] = {
        "accuracy": sum(right) / n,
        "in_scope_accuracy": sum(hits) / len(scope) if scope else None,
        # over the labels the in-scope items have or were given (an option no test item has is not a zero)
        "macro_f1": float(f1_score([gold[i] for i in scope], [str(answers[i]) for i in scope], average="macro",
                                   zero_division=0)) if scope else None,
        "ece": _ece([confidences[i] for i in scope], hits) if scope else None,
        "auto_share": len(routed) / n,
        "auto_precision": (sum(right[i] for i in routed) / len(routed)) if routed else None,
        "auto_precision_lower_bound": metrics.precision_lower_bound(sum(right[i] for i in routed), len(routed)),
    }
    if oos:
        out["out_of_scope"] = {"items": len(oos), "caught": sum(not auto[i] for i in oos) / len(oos),
                               "in_scope_sent_to_review": sum(not auto[i] for i in scope) / max(1, len(scope))}
    return out


def tiers(question: Question, auto: Sequence[bool], head_figures: dict[str, Any]) -> dict[str, Any]:
    """Who answers TEST's items under the question's `model` setting: the share and precision of
    what the head answers from the words alone (the endpoint not asked), the share left to the
    endpoint (its letters decide: measured only where the model scored the items), and the share
    sent to review."""
    n = max(1, len(auto))
    answered = sum(auto) / n
    if question.model == "always":
        return {"model": "always", "endpoint": {"share": 1.0, "answered": answered,
                                                 "precision": head_figures["auto_precision"]}}
    unsure = 1.0 - answered
    asks = not question.many_options and question.model == "when_unsure"
    return {"model": question.model,
            "words": {"share": answered, "precision": head_figures["auto_precision"],
                      "precision_lower_bound": head_figures["auto_precision_lower_bound"]},
            "endpoint": {"share": unsure if asks else 0.0,
                         "note": "asked for the items the words left unsure; its letters decide at the question's "
                                 "thresholds (not measured here)" if asks else
                                 "never asked (more options than letters, or model: never)"},
            "review": {"share": 0.0 if asks else unsure}}


def novelty_figures(gold: Sequence[str | None], auto: Sequence[bool], unlike_only: Sequence[bool],
                    scores: Sequence[float | None], threshold: float) -> dict[str, Any]:
    """The novelty part on TEST: the in-scope share above its threshold and, with out-of-scope
    items, the share of them it catches, what the head's thresholds alone caught (`unlike_only`:
    held for novelty alone), and the score's AUROC (out of scope against in scope)."""
    scope = [i for i, g in enumerate(gold) if g is not None]
    oos = [i for i, g in enumerate(gold) if g is None]
    known = [s for s in scores if s is not None]
    out: dict[str, Any] = {"threshold": threshold,
                           "in_scope_above_threshold": (sum(1 for i in scope if (scores[i] or 0.0) > threshold)
                                                        / len(scope)) if scope and known else None}
    if oos:
        alone = [a or u for a, u in zip(auto, unlike_only)]
        out["head_thresholds_alone"] = {"caught": sum(not alone[i] for i in oos) / len(oos),
                                        "in_scope_sent_to_review": sum(not alone[i] for i in scope) / max(1, len(scope))}
        out["out_of_scope_above_threshold"] = sum(1 for i in oos if (scores[i] or 0.0) > threshold) / len(oos)
        out["auroc"] = (float(roc_auc_score([gold[i] is None for i in range(len(gold))], [s or 0.0 for s in scores]))
                        if scope and len(known) == len(scores) else None)
    return out


def _ece(confidences: Sequence[float], hits: Sequence[bool], bins: int = 15) -> float:
    c, h = np.asarray(confidences, dtype=float), np.asarray(hits, dtype=float)
    edges = np.linspace(0, 1, bins + 1)
    total = 0.0
    for low, high in zip(edges[:-1], edges[1:]):
        mask = (c > low) & (c <= high) if low > 0 else (c >= low) & (c <= high)
        if mask.any():
            total += mask.mean() * abs(h[mask].mean() - c[mask].mean())
    return float(total)
