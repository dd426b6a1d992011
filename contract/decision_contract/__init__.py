"""Decision Router's one wire schema for structured decisions, shared by the
decision container and the routing functions."""

from .confidence import (
    FORMULA_TEXT,
    ConfidenceFormula,
    confidence,
    normalized_peak,
    one_minus_normalized_entropy,
    softmax,
    top_two_margin,
)
from .models import (
    DEFAULT_LAYOUT,
    LAYOUT_PROMPT_VERSIONS,
    MAX_OPTIONS,
    MAX_STATE_DEPTH,
    MIN_OPTIONS,
    NO_PROMPT_SHA256,
    NON_BLANK_PATTERN,
    OPTION_LETTERS,
    PROBABILITY_STATUS,
    READOUT,
    BatchDecisionResponse,
    BatchTiming,
    Decision,
    DecisionOption,
    DecisionRequest,
    DecisionResult,
    DecisionTiming,
    ErrorDetail,
    ErrorResponse,
    FieldProblem,
    Layout,
    ModelInfo,
    NonEmptyJson,
    SingleDecisionResponse,
    StrictModel,
    check_state_depth,
    json_depth,
)

__all__ = [name for name in dir() if not name.startswith("_")]
