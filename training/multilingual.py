"""Tickets in other languages: accuracy and the share answered alone, per language, for the text
classifier, the ticket head on TF-IDF alone and the ticket head with the sentence encoder.

    python -m training.multilingual            # the table (about two minutes on 2 cores)

Fitted on the shipped support tickets' training split (English), through `make fit`'s own fitter
(training.fitting.fit_head, on the words alone: no model is asked), and judged on
bench/data/multilingual-tickets.jsonl (300 tickets written in Spanish, German, French, Portuguese and
Italian, 12 per queue and language, apart from the training data) and on the shipped test split
(English) by the routing function's own code (judging.words_entry: the head's thresholds and its
novelty part). The text classifier (TF-IDF + logistic regression, C=10) has no thresholds of its
own: its accuracy alone.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path

import numpy as np

from decision_router import sentences
from decision_router.domain.heads import Head
from decision_router.domain.judging import words_entry
from decision_router.domain.policies import load_policy
from evaluation.cases import load_file

from . import learn
from .features import Example
from .fitting import REPO, TEST_SPLIT, fit_head
from .history import TEXT_ONLY_MODEL

TRAIN = REPO / "bench/data/support-tickets.jsonl"
LANGUAGES = REPO / "bench/data/multilingual-tickets.jsonl"
POLICY = REPO / "functions/decision_router/policies/support-ticket.json"


def examples(path: Path, question_id: str) -> list[Example]:
    """The file's labelled decisions of `question_id`, with no model signal (one zero each)."""
    loaded = load_file(path)
    if loaded.errors:
        raise SystemExit(f"{path}: " + "; ".join(map(str, loaded.errors[:5])))
    out = []
    for case in loaded.cases:
        for labelled in case.decisions:
            if labelled.question != question_id:
                continue
            out.append(Example(policy=case.family, question=labelled.question, case_id=case.case_id, where=case.where,
                               split=case.split, fold_group=case.cv_group, option_ids=labelled.decision.option_ids,
                               gold=labelled.gold_index, state=labelled.decision.state, hidden=np.zeros(1),
                               letter_logits=np.zeros(len(labelled.decision.option_ids)), allowed_token_mass=1.0,
                               prompt_version="", language=case.language or "en"))
    return out


def run(seed: int = 0) -> str:
    policy = load_policy(POLICY)
    question = policy.routing_question
    shipped = examples(TRAIN, question.id)
    train = [e for e in shipped if e.split != TEST_SPLIT]
    # the shipped test split's English tickets beside the written set (its few in other languages
    # would mix two sources in one row)
    judged = [e for e in shipped if e.split == TEST_SPLIT and e.language == "en"] + examples(LANGUAGES, question.id)
    columns: dict[str, dict[str, tuple[float, float | None]]] = {}

    heads = {"head on TF-IDF alone": None, f"head with {sentences.DEFAULT_ENCODER}": sentences.DEFAULT_ENCODER}
    for name, encoder in heads.items():
        _, document = fit_head(policy, question, train, TEXT_ONLY_MODEL, sources=[TRAIN.name], curve=False, seed=seed,
                               fitted_on=date(2026, 12, 6), encoder=encoder)
        head = Head.model_validate(document)
        if head.reads_model:  # the zero signals must never earn a weight; if they did, this is no words-only head
            raise SystemExit(f"{name}: the fit gave the (zero) model signals a weight")
        asked = question.with_head(head)
        entries = [words_entry(asked, e.state) for e in judged]
        columns[name] = by_language(judged, [question.option_ids.index(x.option_id or "") for x in entries],
                                    [x.passed for x in entries])

    s = learn.Signals.build([e.state for e in train], np.zeros((len(train), 1)), [e.letter_logits for e in train],
                            np.array([e.gold for e in train]), [e.fold_group for e in train],
                            text_fields=[f.key for f in policy.state], categorical_fields=[], encoder=None)
    held = learn.Signals.build([e.state for e in judged], np.zeros((len(judged), 1)), [e.letter_logits for e in judged],
                               np.array([e.gold for e in judged]), [e.fold_group for e in judged],
                               text_fields=[f.key for f in policy.state], categorical_fields=[], encoder=None)
    probabilities = learn.baseline_probabilities(s, range(len(train)), range(len(judged)), len(question.options), held)
    columns = {"text classifier (TF-IDF + LR)": by_language(judged, list(probabilities.argmax(axis=1)), None), **columns}
    return table(columns, judged)


def by_language(judged: list[Example], answers: list[int], passed: list[bool] | None
                ) -> dict[str, tuple[float, float | None]]:
    """Per language (and all): accuracy, and the share answered alone (None without thresholds)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, example in enumerate(judged):
        groups[example.language or "en"].append(i)
        if example.language not in (None, "en"):
            groups["all other languages"].append(i)
    out = {}
    for language, rows in groups.items():
        right = sum(answers[i] == judged[i].gold for i in rows) / len(rows)
        share = None if passed is None else sum(passed[i] for i in rows) / len(rows)
        out[language] = (right, share)
    return out


def table(columns: dict[str, dict[str, tuple[float, float | None]]], judged: list[Example]) -> str:
    languages = ["en", "es", "de", "fr", "pt", "it", "all other languages"]
    lines = ["| language | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for language in languages:
        cells = []
        for figures in columns.values():
            if language not in figures:
                cells.append("–")
                continue
            right, share = figures[language]
            cells.append(f"{right:.1%}" + ("" if share is None else f" ({share:.1%} answered)"))
        n = sum(1 for e in judged if (e.language or "en") == language or (language == "all other languages"
                                                                           and e.language not in (None, "en")))
        lines.append(f"| {language} ({n}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.multilingual", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(run(args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
