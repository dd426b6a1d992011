"""Deterministic rules, applied before the model: a rule answer is final for its question
and that question is never sent to the endpoint (business rules never depend on the model)."""

from __future__ import annotations

from dataclasses import dataclass

from ..items import Item
from .policies import Policy


@dataclass(frozen=True)
class RuleHit:
    rule_id: str
    question: str
    option_id: str


def apply_rules(policy: Policy, item: Item) -> dict[str, RuleHit]:
    """question id → the answer of the first matching rule (rules are evaluated in file order)."""
    hits: dict[str, RuleHit] = {}
    for rule in policy.rules:
        if not rule.matches(item):
            continue
        for question_id, option_id in rule.answers.items():
            hits.setdefault(question_id, RuleHit(rule.id, question_id, option_id))
    return hits
