"""What the decision model is asked about an item: the evidence (the decision `state`) built
from the item fields a policy names, and one `Decision` per question of the policy."""

from __future__ import annotations

from typing import Any, Iterable

from decision_contract import Decision, DecisionOption

from .items import Item, field_value
from .policies import Policy


def build_state(policy: Policy, item: Item) -> dict[str, Any]:
    """The evidence the model reads: a JSON object of the policy's item fields, in policy order."""
    state: dict[str, Any] = {}
    for entry in policy.state:
        value = field_value(item, entry.field)
        if value is None:
            continue
        if isinstance(value, str) and entry.max_chars is not None and len(value) > entry.max_chars:
            value = value[: entry.max_chars - 14].rstrip() + " …[truncated]"
        state[entry.key] = value if isinstance(value, (str, int, float, bool)) else str(value)
    return state


def build_decisions(policy: Policy, item: Item, questions: Iterable[str] | None = None) -> list[Decision]:
    """One `Decision` per policy question (or per id in `questions`), all sharing one state,
    so several questions about one item go to the endpoint as one batch."""
    if item.kind != policy.item_kind:
        raise TypeError(f"policy {policy.name!r} decides {policy.item_kind}s, got a {item.kind}")
    wanted = None if questions is None else set(questions)
    state = build_state(policy, item)
    return [
        Decision(
            id=question.id,
            state=state,
            question=question.question,
            options=[DecisionOption(id=o.id, description=o.description) for o in question.options],
            temperature=question.temperature,
            return_hidden_state=question.learned_head is not None and question.learned_head.reads_hidden_state,
        )
        for question in policy.questions
        if wanted is None or question.id in wanted
    ]
