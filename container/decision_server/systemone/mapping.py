"""System One questions <-> structured decisions (pure functions, no HTTP, no model).

Every question becomes one `decision_contract.Decision` about the request's state, so all
questions of a request form one shared-state batch (the state is evaluated once):

- noul   -> options `yes`, `no` (A, B); a described outcome reads "Yes: <criteria.true>".
- choice -> the criteria in request order; the option reads "<name>: <description>", or just
            the name when the description is null.
- score  -> the levels in order (index 0 lowest, option ids "0", "1", ...).

Missing instructions get a generic criterion. Answers come back from the readout's
probabilities; confidence uses a named `decision_contract` formula, stated in the response.
The evaluation tool maps JevBench noul/choice/score tasks through the same functions.
"""

from __future__ import annotations

import json
from typing import Sequence

from decision_contract import (
    FORMULA_TEXT,
    BatchDecisionResponse,
    ConfidenceFormula,
    Decision,
    DecisionOption,
    DecisionResult,
    confidence,
)
from decision_contract.models import State

from .models import (
    Answer,
    AnswerableQuestion,
    ChoiceAnswer,
    ChoiceQuestion,
    Content,
    NoulAnswer,
    NoulQuestion,
    QuestionReadout,
    ResponseMetadata,
    ScoreAnswer,
    ScoreQuestion,
    SystemOneRequest,
    SystemOneResponse,
    Usage,
)

#: Confidence reported for choice and score answers unless a caller picks another formula.
DEFAULT_CONFIDENCE_FORMULA = ConfidenceFormula.NORMALIZED_PEAK
YES, NO = "yes", "no"
#: Criterion used when a question has no instructions (its options then carry the meaning).
DEFAULT_INSTRUCTIONS = {
    "noul": "Which option is true of the evidence?",
    "choice": "Which option best applies to the evidence?",
    "score": "Which level best describes the evidence?",
}


def content_text(value: Content) -> str:
    """Text the model reads for a piece of content: strings as they are, JSON as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def question_decision(name: str, question: AnswerableQuestion, state: State) -> Decision:
    """The structured decision that answers one System One question about `state`."""
    criterion = (
        content_text(question.instructions) if question.instructions is not None else DEFAULT_INSTRUCTIONS[question.type]
    )
    if isinstance(question, NoulQuestion):
        described = question.criteria
        options = [
            DecisionOption(id=YES, description=_labelled("Yes", described.true if described else None)),
            DecisionOption(id=NO, description=_labelled("No", described.false if described else None)),
        ]
    elif isinstance(question, ChoiceQuestion):
        options = [DecisionOption(id=choice, description=_labelled(choice, text)) for choice, text in question.criteria.items()]
    else:
        options = [DecisionOption(id=str(level), description=content_text(text)) for level, text in enumerate(question.criteria)]
    return Decision(id=name, state=state, question=criterion, options=options)


def to_decisions(request: SystemOneRequest) -> list[Decision]:
    """One decision per question, in request order, all sharing the request's state."""
    return [question_decision(name, question, request.state) for name, question in request.questions.items()]


def answer_from_result(
    question: AnswerableQuestion,
    result: DecisionResult,
    formula: ConfidenceFormula | str = DEFAULT_CONFIDENCE_FORMULA,
) -> Answer:
    """The System One answer carried by one decision result (same option order as the question)."""
    probabilities = [float(p) for p in result.probabilities]
    if isinstance(question, NoulQuestion):
        return NoulAnswer(noul=probabilities[result.option_ids.index(YES)])
    by_option = dict(zip(result.option_ids, probabilities))
    certainty = float(confidence(probabilities, formula))
    if isinstance(question, ChoiceQuestion):
        return ChoiceAnswer(choice=result.top_option_id, confidence=certainty, probabilities=by_option)
    assert isinstance(question, ScoreQuestion)
    return ScoreAnswer(
        score=float(sum(int(level) * p for level, p in by_option.items())),
        confidence=certainty,
        legend={str(level): text for level, text in enumerate(question.criteria)},
        probabilities=by_option,
    )


def to_response(
    request: SystemOneRequest,
    batch: BatchDecisionResponse,
    formula: ConfidenceFormula | str = DEFAULT_CONFIDENCE_FORMULA,
) -> SystemOneResponse:
    """The System One response for `request` from the batch that `to_decisions(request)` was scored as."""
    questions = request.questions
    results = batch.results
    if [r.id for r in results] != list(questions):
        raise ValueError("decision results do not match the request's questions (ids or order differ)")
    formula = ConfidenceFormula(formula)
    first = results[0]
    return SystemOneResponse(
        model=first.model.file,
        # each answer is one member of the Answer union (pydantic picks it by its `type`)
        answers={r.id: answer_from_result(questions[r.id], r, formula) for r in results},  # type: ignore[arg-type]
        usage=Usage(input_tokens=evaluated_tokens(batch), output_tokens=0),
        metadata=ResponseMetadata(
            confidence_formula=formula,
            confidence_formula_text=FORMULA_TEXT[formula],
            prompt_version=first.prompt_version,
            model=first.model,
            questions={
                r.id: QuestionReadout(
                    options=r.option_ids,
                    allowed_token_mass=float(r.allowed_token_mass),
                    input_tokens=r.input_tokens,
                    reused_prefix_tokens=r.reused_prefix_tokens,
                    temperature=float(r.temperature),
                )
                for r in results
            },
        ),
    )


def evaluated_tokens(batch: BatchDecisionResponse) -> int:
    """Prompt tokens the model actually evaluated: the shared prefix once, then each question's own tail."""
    tails = sum(r.input_tokens - r.reused_prefix_tokens for r in batch.results)
    return batch.timing.shared_prefix_tokens + tails


def _labelled(label: str, description: Content | None) -> str:
    return label if description is None else f"{label}: {content_text(description)}"


__all__: Sequence[str] = (
    "DEFAULT_CONFIDENCE_FORMULA",
    "DEFAULT_INSTRUCTIONS",
    "answer_from_result",
    "content_text",
    "evaluated_tokens",
    "question_decision",
    "to_decisions",
    "to_response",
)
