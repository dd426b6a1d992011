"""What the decision model is asked about an item: the evidence (the decision `state`) built
from the item fields a policy names, and one `Decision` per question of the policy.

A question with more options than the endpoint has letters (more than 16) is not offered its
options: the endpoint's contract letters at most 16, and the model's letters could not read out
a 77th. It is asked a signals decision instead (`signals_decision`): the same evidence and the
question's criterion with two fixed options, whatever the number of options, so its prompt and
its cost are the same at 17 options and at 200. The question's learned head answers from the
model's hidden state of that forward pass and the evidence's text (judging.model_entry). The
request is asked in the prompt layout the head's hidden states came from (its `prompt_version`):
`criterion-first` puts the evidence last, so the endpoint evaluates the criterion once for every
item (signals_layout).

Every decision asks for the hidden state, whether or not the question's head reads it: a record
that goes to review keeps the signals as they were at decision time (kept_signals.py), so
relearning fits on them without asking the endpoint again. The cost is the answer's size (the
hidden state as JSON numbers: 12.5 KB a question against 1.2 KB without at a hidden size of 576,
about 51 KB at 2560: docs/learning/relearning.md); the forward pass is the same."""

from __future__ import annotations

from typing import Any, Iterable

from decision_contract import DEFAULT_LAYOUT, LAYOUT_PROMPT_VERSIONS, Decision, DecisionOption, Layout

from ..items import Item, field_value
from .policies import Policy, Question

#: The options of a many-option question's request: fixed, so the prompt does not grow with the
#: question's options and a head's hidden states always come from the same prompt. The head reads
#: the hidden state at the answer position; these letters' logits decide nothing.
SIGNAL_OPTIONS = (
    DecisionOption(id="known", description="The evidence matches one of the answers this criterion has."),
    DecisionOption(id="unknown", description="The evidence matches none of them."),
)
SIGNAL_OPTION_IDS = [option.id for option in SIGNAL_OPTIONS]


#: The layout of a signals decision whose head names no prompt version (a head not fitted yet,
#: or one reading the text alone).
SIGNALS_LAYOUT: Layout = DEFAULT_LAYOUT
_LAYOUT_OF_VERSION = {version: layout for layout, version in LAYOUT_PROMPT_VERSIONS.items()}


def signals_layout(question: Question) -> Layout:
    """The layout a question's signals decision is asked in: the one its head's hidden states come
    from (the head refuses any other prompt version), else SIGNALS_LAYOUT."""
    head = question.learned_head
    version = head.prompt_version if head is not None else None
    return _LAYOUT_OF_VERSION.get(version or "", SIGNALS_LAYOUT)


def signals_decision(question: Question, state: Any, layout: Layout | None = None) -> Decision:
    """The request of a question with more options than letters: its criterion over the evidence,
    with SIGNAL_OPTIONS and the hidden state; in `layout` when given, else in the layout its head
    was fitted on (signals_layout)."""
    return Decision(id=question.id, state=state, question=question.question, options=list(SIGNAL_OPTIONS),
                    return_hidden_state=True, layout=layout or signals_layout(question))


def question_decision(question: Question, state: Any, signals_layout: Layout | None = None) -> Decision:
    """What the endpoint is asked for one question: its options lettered (at most 16), or, for a
    question with more options than letters, its signals decision (in `signals_layout`, when given)."""
    if question.many_options:
        return signals_decision(question, state, signals_layout)
    return Decision(
        id=question.id,
        state=state,
        question=question.question,
        options=[DecisionOption(id=o.id, description=o.description) for o in question.options],
        temperature=question.temperature,
        return_hidden_state=True,  # kept on a record going to review, whatever its head reads
    )


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
    return [question_decision(question, state) for question in policy.questions if wanted is None or question.id in wanted]
