"""The wire schema of structured decisions (the SemIf contract).

One definition, used by the decision container (to validate requests and shape
responses) and by the routing functions (to build requests and read results).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Iterable, Literal, Sequence, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from .confidence import softmax

#: Letters A…P label the options by position; the readout allows no more.
OPTION_LETTERS = "ABCDEFGHIJKLMNOP"
MIN_OPTIONS = 2
MAX_OPTIONS = len(OPTION_LETTERS)
#: How a decision's prompt orders its parts: the evidence before the criterion and options (the
#: default, SemIf's `direct-options-v1`), or after them, so that decisions asking one criterion of
#: many items share the prompt up to their evidence.
Layout = Literal["evidence-first", "criterion-first"]
DEFAULT_LAYOUT: Layout = "evidence-first"
#: The prompt version a result names for each layout (a head fitted on one reads only that one).
LAYOUT_PROMPT_VERSIONS: dict[Layout, str] = {"evidence-first": "direct-options-v1", "criterion-first": "criterion-first-v1"}
#: Deepest nesting accepted inside a JSON `state` (objects and arrays).
MAX_STATE_DEPTH = 32

NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]
#: JSON-schema pattern of text that is not blank: a character that `str.strip()` keeps. The
#: whitespace (`str.isspace`) is spelled out because regex dialects disagree on `\s`.
NON_BLANK_PATTERN = r"[^\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"


def _state_error(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    # One clear reason instead of one error per union member.
    try:
        return handler(value)
    except ValidationError:
        kind = {bool: "boolean", int: "number", float: "number", type(None): "null"}.get(type(value), "value")
        got = "an empty string" if value == "" else f"a JSON {kind}"
        raise ValueError(f"must be non-empty text, or a JSON object or array (got {got})") from None


class NonEmptyJson:
    """Publishes, in the JSON schema, that a JSON object or array needs a member and, with
    `non_blank`, that text needs a non-whitespace character (the validators enforce both,
    with messages of their own)."""

    def __init__(self, non_blank: bool = False) -> None:
        self.non_blank = non_blank

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        for branch in schema.get("anyOf", [schema]):
            if branch.get("type") == "object":
                branch["minProperties"] = 1
            elif branch.get("type") == "array":
                branch["minItems"] = 1
            elif branch.get("type") == "string" and self.non_blank:
                branch["pattern"] = NON_BLANK_PATTERN
        return schema


#: A `state` is free text or any JSON object/array describing the situation.
State = Annotated[Union[NonEmptyStr, dict[str, Any], list[Any]], WrapValidator(_state_error), NonEmptyJson()]


class StrictModel(BaseModel):
    """A request body as its JSON schema states it: no unknown fields, no coercion ("1" is not
    a number, true is not 1), finite numbers only."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class DecisionOption(StrictModel):
    id: NonEmptyStr = Field(description="Caller's option id; echoed, never shown to the model.")
    description: NonEmptyStr = Field(description="What the model reads for this option.")


class Decision(StrictModel):
    id: NonEmptyStr = Field(description="Caller's decision id, echoed in the result.")
    state: State = Field(
        description="The evidence: non-empty text, or a non-empty JSON object/array "
        f"nested at most {MAX_STATE_DEPTH} levels deep."
    )
    question: NonEmptyStr = Field(description="The criterion to apply to the state.")
    options: list[DecisionOption] = Field(
        min_length=MIN_OPTIONS,
        max_length=MAX_OPTIONS,
        description="Allowed answers in order; lettered A, B, … by position. Results follow this order, "
        "so ids are labels the caller reads back (the model never sees them).",
    )
    temperature: float = Field(
        default=1.0, gt=0, description="Divides the option logits before the softmax (calibration)."
    )
    return_hidden_state: bool = Field(
        default=False,
        description="Also return the final-position hidden state (the vector the letter logits are "
        "computed from), from the same forward pass; for learned heads over the decision.",
    )
    layout: Layout = Field(
        default=DEFAULT_LAYOUT,
        description="The order of the prompt's parts. `evidence-first` (the default; prompt version "
        "`direct-options-v1`): the state, then the question and options, so decisions about one state share "
        "their prefix. `criterion-first` (prompt version `criterion-first-v1`): the question and options, then "
        "the state, so decisions asking one question of many states share their prefix, and it is evaluated "
        "once across requests. The result's `prompt_version` names the layout its numbers come from.",
    )

    @model_serializer(mode="wrap")
    def _default_layout_unsaid(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A decision of the default layout is written exactly as before the field existed: its
        # request body (an older server forbids unknown fields) and its signals' key are unchanged.
        data = handler(self)
        if isinstance(data, dict) and data.get("layout") == DEFAULT_LAYOUT:
            del data["layout"]
        return data

    @field_validator("state")
    @classmethod
    def _state_not_empty_or_too_deep(cls, state: State) -> State:
        if isinstance(state, (dict, list)) and not state:
            raise ValueError("must not be an empty JSON object or array")
        return check_state_depth(state)

    @property
    def option_ids(self) -> list[str]:
        return [option.id for option in self.options]


class DecisionRequest(StrictModel):
    """Body of a structured-decision request: exactly one of `decision` or `decisions`."""

    # Exactly one of the two is given (a null counts as absent): the `_exactly_one_shape` rule.
    model_config = ConfigDict(json_schema_extra={"oneOf": [
        {"title": "one decision", "required": ["decision"],
         "properties": {"decision": {"type": "object"}, "decisions": {"type": "null"}}},
        {"title": "a batch", "required": ["decisions"],
         "properties": {"decisions": {"type": "array"}, "decision": {"type": "null"}}},
    ]})

    decision: Decision | None = None
    decisions: list[Decision] | None = Field(
        default=None,
        min_length=1,
        description="Decisions scored together; results come in this order. The prompt prefix they "
        "share is evaluated once: decisions about one `state` share it up to their questions.",
    )

    # No rule across decisions or options: JSON Schema cannot state one, and the published schema
    # must accept what the server does. None is needed: results are positional (ids are echoed
    # labels, so they may repeat), and the engine evaluates whatever prompt prefix the decisions
    # share once (a whole state when they share it, the template header when they do not).
    @model_validator(mode="after")
    def _exactly_one_shape(self) -> "DecisionRequest":
        if (self.decision is None) == (self.decisions is None):
            raise ValueError("give exactly one of 'decision' (an object) or 'decisions' (a non-empty list)")
        return self

    @property
    def items(self) -> list[Decision]:
        return [self.decision] if self.decision is not None else list(self.decisions or [])


class ModelInfo(BaseModel):
    file: str = Field(description="GGUF file name.")
    bytes: int
    sha256: str = Field(description="SHA-256 of the GGUF file, computed once at start-up.")
    context_size: int
    threads: int
    gpu_layers: int
    llama_cpp_python_version: str
    hidden_size: int | None = Field(None, description="Width of the final hidden state (heads must match it).")


class DecisionTiming(BaseModel):
    tokenize_seconds: float
    prefill_seconds: float = Field(description="Forward pass(es) for this decision's own tokens.")
    total_seconds: float


#: What the probabilities are (and are not), as the AWS SemIf sample states it in every result.
PROBABILITY_STATUS = "conditional option score; uncalibrated as decision confidence"
READOUT = "final-position logits restricted to the option letters; no generated tokens"
#: The prompt hash of a result built from signals already in hand (`DecisionResult.from_signals`):
#: no prompt was rendered for it.
NO_PROMPT_SHA256 = "0" * 64


class DecisionResult(BaseModel):
    id: str
    option_ids: list[str]
    probabilities: list[float] = Field(description="softmax(option_logits / temperature), option order.")
    option_logits: list[float] = Field(description="Raw final-position logits of the option letters.")
    temperature: float
    input_tokens: int
    reused_prefix_tokens: int = Field(0, description="Tokens taken from a shared, already evaluated prefix.")
    allowed_token_mass: float = Field(description="Share of next-token probability on the option letters.")
    prompt_sha256: str
    prompt_version: str = Field(description="The prompt the numbers come from: `direct-options-v1` (the "
                                "evidence-first layout) or `criterion-first-v1`; a head reads only its own.")
    model: ModelInfo
    timing: DecisionTiming
    # The AWS SemIf sample's result fields, so that its clients work unchanged.
    answer_token_ids: list[int] = Field(default_factory=list, description="Token ids of the option letters, option order.")
    full_vocab_argmax_id: int | None = Field(None, description="The vocabulary's top token at the final position.")
    probability_status: str = PROBABILITY_STATUS
    readout: str = READOUT
    forward_seconds: float | None = Field(None, description="Seconds of model evaluation for this decision.")
    total_seconds: float | None = Field(None, description="Seconds from tokenizing to the result.")
    hidden_state: list[float] | None = Field(
        None, description="Final-position hidden state; only when the decision asked for it (return_hidden_state)."
    )

    @property
    def top_option_id(self) -> str:
        return self.option_ids[max(range(len(self.probabilities)), key=self.probabilities.__getitem__)]

    @classmethod
    def from_signals(cls, id: str, option_ids: Sequence[str], option_logits: Iterable[float], *, model: ModelInfo,
                     prompt_version: str, allowed_token_mass: float = 1.0,
                     hidden_state: Iterable[float] | None = None) -> "DecisionResult":
        """The router's input built from signals already in hand rather than from a call to the
        endpoint: a fitter's cached or scored signals judged through the routing function's own
        code, a stand-in endpoint's given answer. No prompt was rendered here (`prompt_sha256` is
        NO_PROMPT_SHA256), no tokens read and no time spent; `probabilities` are
        softmax(option_logits) at temperature 1, as the endpoint's are."""
        logits = [float(z) for z in option_logits]
        if len(logits) != len(option_ids):
            raise ValueError(f"option_logits: {len(logits)} values for {len(option_ids)} option_ids")
        bad = next((i for i, z in enumerate(logits) if not math.isfinite(z)), None)
        if bad is not None:
            raise ValueError(f"option_logits[{bad}] is {logits[bad]}: a logit must be finite")
        return cls(id=id, option_ids=list(option_ids), probabilities=softmax(logits), option_logits=logits, temperature=1.0,
                   input_tokens=0, allowed_token_mass=allowed_token_mass, prompt_sha256=NO_PROMPT_SHA256,
                   prompt_version=prompt_version, model=model,
                   timing=DecisionTiming(tokenize_seconds=0.0, prefill_seconds=0.0, total_seconds=0.0),
                   hidden_state=None if hidden_state is None else [float(v) for v in hidden_state])


class BatchTiming(BaseModel):
    shared_prefix_tokens: int
    shared_prefix_seconds: float
    total_seconds: float
    batch_size: int | None = Field(None, description="Decisions in the batch.")


class SingleDecisionResponse(BaseModel):
    result: DecisionResult


class BatchDecisionResponse(BaseModel):
    results: list[DecisionResult]
    timing: BatchTiming


ErrorCode = Literal[
    "validation_error",
    "payload_too_large",
    "unsupported_media_type",
    "forbidden_token",
    "prompt_too_long",
    "busy",
    "not_ready",
    "unhealthy",
    "not_found",
    "method_not_allowed",
    "chat_disabled",
    "internal_error",
]


class FieldProblem(BaseModel):
    field: str = Field(description="Where, e.g. `decision.options[0].id` or `body`.")
    reason: str


class ErrorDetail(BaseModel):
    code: ErrorCode | str
    message: str
    retryable: bool = False
    fields: list[FieldProblem] | None = Field(default=None, description="Per-field problems: location and reason.")


class ErrorResponse(BaseModel):
    error: ErrorDetail
    retryable: bool = Field(
        False, description="Same as error.retryable, at the top level where clients of the AWS SemIf sample read it."
    )


def check_state_depth(state: Any) -> Any:
    """The nesting rule of every `state` (structured decisions and System One alike)."""
    depth = json_depth(state)
    if depth > MAX_STATE_DEPTH:
        raise ValueError(f"is nested {depth} levels deep; at most {MAX_STATE_DEPTH} are allowed")
    return state


def json_depth(value: Any) -> int:
    """Nesting depth of JSON containers (a scalar is 0, `[]` or `{}` is 1), without recursion."""
    depth = 0
    level = [value]
    while level:
        containers = [v for v in level if isinstance(v, (dict, list))]
        if not containers:
            break
        depth += 1
        level = [child for c in containers for child in (c.values() if isinstance(c, dict) else c)]
    return depth
