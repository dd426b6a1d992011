"""Wire schema of the TypeSafe "System One" API (`POST /v1/systemone`), as its official
client `typesafe-sdk` sends and reads it.

Requests are validated strictly (unknown fields, empty text and out-of-range counts are
errors that name their field); responses carry everything the client's strict response
models require: a `type` tag on every answer, float probabilities, integer token counts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from decision_contract import (
    MAX_OPTIONS,
    MAX_STATE_DEPTH,
    MIN_OPTIONS,
    NON_BLANK_PATTERN,
    ConfidenceFormula,
    ErrorResponse,
    ModelInfo,
    NonEmptyJson,
    StrictModel,
    check_state_depth,
)

#: Text, or a JSON object/array, wherever System One accepts "content" (state, instructions,
#: criteria). Images (assets) are not accepted: the decision model reads text only.
Content = Union[str, dict[str, Any], list[Any]]

_JSON_TYPE_NAMES = {bool: "a boolean", int: "a number", float: "a number", type(None): "null"}


def _is_content(value: Any) -> Any:
    # One clear message instead of one per union member.
    if not isinstance(value, (str, dict, list)):
        raise ValueError(f"must be text or a JSON object/array, not {_JSON_TYPE_NAMES.get(type(value), type(value).__name__)}")
    return value


def _non_empty(value: Content) -> Content:
    if isinstance(value, str) and not value.strip():
        raise ValueError("must not be empty or blank text")
    if isinstance(value, (dict, list)) and not value:
        raise ValueError("must not be an empty JSON object or array")
    return value


#: Content the model will read: empty text or an empty object/array says nothing.
Text = Annotated[Content, BeforeValidator(_is_content), AfterValidator(_non_empty), NonEmptyJson(non_blank=True)]
#: Names (question names, choice names) must not be blank.
_NAMES = {"propertyNames": {"pattern": NON_BLANK_PATTERN}}


class NoulCriteria(StrictModel):
    true: Text | None = Field(default=None, description="What counts as a yes answer.")
    false: Text | None = Field(default=None, description="What counts as a no answer.")


class NoulQuestion(StrictModel):
    """A yes/no question or statement; answered with P(yes)."""

    # The `_something_to_ask` rule: instructions, or criteria with a true or false description.
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": ["instructions"], "properties": {"instructions": {"not": {"type": "null"}}}},
        {"required": ["criteria"], "properties": {"criteria": {"type": "object", "anyOf": [
            {"required": ["true"], "properties": {"true": {"not": {"type": "null"}}}},
            {"required": ["false"], "properties": {"false": {"not": {"type": "null"}}}},
        ]}}},
    ]})

    type: Literal["noul"]
    instructions: Text | None = None
    criteria: NoulCriteria | None = None

    @model_validator(mode="after")
    def _something_to_ask(self) -> "NoulQuestion":
        described = self.criteria is not None and (self.criteria.true is not None or self.criteria.false is not None)
        if self.instructions is None and not described:
            raise ValueError("a noul question needs instructions or at least one of criteria.true / criteria.false")
        return self


class ChoiceQuestion(StrictModel):
    """Pick one of the named criteria; a null description means the name alone describes it."""

    type: Literal["choice"]
    instructions: Text | None = None
    criteria: dict[str, Text | None] = Field(
        description=f"{MIN_OPTIONS} to {MAX_OPTIONS} (DECISION_MAX_OPTIONS) named options.",
        json_schema_extra={"minProperties": MIN_OPTIONS, "maxProperties": MAX_OPTIONS, **_NAMES},
    )

    @field_validator("criteria")
    @classmethod
    def _criteria_fit_the_readout(cls, criteria: dict[str, Text | None], info: ValidationInfo) -> dict[str, Text | None]:
        _check_option_count("choice", "criteria", len(criteria), info)
        for name in criteria:
            if not name.strip():
                raise ValueError("choice names must not be empty or blank")
        return criteria


class ScoreQuestion(StrictModel):
    """Rate on ordered levels (index 0 lowest); answered with the probability-weighted level."""

    type: Literal["score"]
    instructions: Text | None = None
    criteria: list[Text] = Field(
        description=f"{MIN_OPTIONS} to {MAX_OPTIONS} (DECISION_MAX_OPTIONS) levels, lowest first.",
        json_schema_extra={"minItems": MIN_OPTIONS, "maxItems": MAX_OPTIONS},
    )

    @field_validator("criteria")
    @classmethod
    def _levels_fit_the_readout(cls, criteria: list[Text], info: ValidationInfo) -> list[Text]:
        _check_option_count("score", "levels", len(criteria), info)
        return criteria


class BoxQuestion(BaseModel):
    """Accepted by the client, never answerable here: boxes locate things in images."""

    type: Literal["box"]

    @model_validator(mode="before")
    @classmethod
    def _unsupported(cls, data: Any) -> Any:
        raise ValueError(
            "box questions locate objects in images and need a vision-language model; "
            "this decision model reads text only (ask noul, choice or score questions)"
        )


# Box questions are parsed only to be refused by name, so the published schema leaves them out.
Question = Annotated[
    Union[NoulQuestion, ChoiceQuestion, ScoreQuestion, SkipJsonSchema[BoxQuestion]], Field(discriminator="type")
]
AnswerableQuestion = Union[NoulQuestion, ChoiceQuestion, ScoreQuestion]


def _check_option_count(kind: str, what: str, count: int, info: ValidationInfo) -> None:
    # The server passes its configured limit (DECISION_MAX_OPTIONS) as validation context.
    limit = min(MAX_OPTIONS, (info.context or {}).get("max_options", MAX_OPTIONS))
    if not MIN_OPTIONS <= count <= limit:
        raise ValueError(f"a {kind} question needs {MIN_OPTIONS} to {limit} {what} (one option each); got {count}")


class SystemOneRequest(StrictModel):
    model: str = Field(description="Requested model name or alias; the server answers with the model it serves.")
    state: Annotated[Content, BeforeValidator(_is_content), NonEmptyJson(non_blank=True)] = Field(
        description="The content every question refers to: text, or a JSON object/array "
        f"nested at most {MAX_STATE_DEPTH} levels deep."
    )
    questions: dict[str, Question] = Field(
        min_length=1,
        description="Questions keyed by the caller's names.",
        json_schema_extra=_NAMES,
    )
    # Images: refused by name (text-only model), so the published schema leaves them out.
    assets: SkipJsonSchema[dict[str, Any] | None] = None

    @field_validator("state")
    @classmethod
    def _state_usable(cls, state: Content) -> Content:
        # The rules of a structured decision's state (decision_contract.Decision), plus no blank text.
        return check_state_depth(_non_empty(state))

    @field_validator("questions")
    @classmethod
    def _names_usable(cls, questions: dict[str, Any]) -> dict[str, Any]:
        for name in questions:
            if not name.strip():
                raise ValueError("question names must not be empty or blank")
        return questions

    @field_validator("assets")
    @classmethod
    def _no_assets(cls, assets: dict[str, Any] | None) -> None:
        if assets is not None:
            raise ValueError("image assets need a vision-language model; this decision model reads text only")
        return None


class Problem(BaseModel):
    loc: list[str | int] = Field(description="Where: `body`, then the field path.")
    msg: str
    type: str


class SystemOneErrorResponse(ErrorResponse):
    """An invalid System One request (422): the container's error plus the TypeSafe API's `detail`."""

    detail: list[Problem]


# --- Response -------------------------------------------------------------------------------
# Every float field is a Python float, so JSON always shows `0.0`, never `0`.


class NoulAnswer(BaseModel):
    type: Literal["noul"] = "noul"
    noul: float = Field(description="P(yes), conditional on yes/no and uncalibrated.")


class ChoiceAnswer(BaseModel):
    type: Literal["choice"] = "choice"
    choice: str = Field(description="The most probable criterion (the first of equals in request order).")
    confidence: float
    probabilities: dict[str, float]


class ScoreAnswer(BaseModel):
    type: Literal["score"] = "score"
    score: float = Field(description="Probability-weighted level index (0 = first level).")
    confidence: float
    legend: dict[str, Content]
    probabilities: dict[str, float]


Answer = Union[NoulAnswer, ChoiceAnswer, ScoreAnswer]


class Usage(BaseModel):
    input_tokens: int = Field(description="Prompt tokens the model evaluated (a shared state prefix counts once).")
    output_tokens: int = Field(0, description="Always 0: the readout decodes no tokens.")


class QuestionReadout(BaseModel):
    """How one question was read out (honesty about weak or off-target decisions)."""

    options: list[str] = Field(description="Option ids in readout order (letters A, B, ... by position).")
    allowed_token_mass: float = Field(description="Share of next-token probability on the option letters.")
    input_tokens: int
    reused_prefix_tokens: int
    temperature: float


class ResponseMetadata(BaseModel):
    confidence_formula: ConfidenceFormula
    confidence_formula_text: str
    probabilities: str = Field(
        default="softmax over the option letters' logits: conditional on the offered options, uncalibrated"
    )
    prompt_version: str
    model: ModelInfo
    questions: dict[str, QuestionReadout]


class SystemOneResponse(BaseModel):
    model: str = Field(description="The model that answered (the served GGUF file), whatever alias was requested.")
    answers: dict[str, Answer]
    usage: Usage
    metadata: ResponseMetadata = Field(description="Extension: how the answers were computed.")
