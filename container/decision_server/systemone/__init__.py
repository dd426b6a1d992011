"""TypeSafe "System One" compatibility (`POST /v1/systemone`) for the decision container.

`models` is the wire schema, `mapping` turns questions into structured decisions and
results into answers (pure; reused by the evaluation tool), `parsing` reads request
bodies, and `router` serves the contract over HTTP.
"""

from .mapping import (
    DEFAULT_CONFIDENCE_FORMULA,
    DEFAULT_INSTRUCTIONS,
    answer_from_result,
    content_text,
    evaluated_tokens,
    question_decision,
    to_decisions,
    to_response,
)
from .models import (
    ChoiceAnswer,
    ChoiceQuestion,
    NoulAnswer,
    NoulQuestion,
    ScoreAnswer,
    ScoreQuestion,
    SystemOneErrorResponse,
    SystemOneRequest,
    SystemOneResponse,
)
from .parsing import SystemOneRequestError, decode_body, load_json, parse_request

__all__ = [name for name in dir() if not name.startswith("_")]
