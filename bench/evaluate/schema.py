"""The evaluation report, typed: what `evaluation.analyse` and `python -m bench.evaluate` fill in,
what `report.py` renders, and the shape of report.json.

The metric records (calibration scores, temperature fit, reliability bins, threshold rows) are
`metrics`' own dataclasses; everything around them is a model here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from decision_contract import ModelInfo
from evaluation.metrics import CalibrationScores, ReliabilityBin, TemperatureFit, ThresholdRow


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _absent_when_none() -> Any:
    """A field report.json leaves out when it has no value."""
    return Field(None, exclude_if=lambda value: value is None)


class Summary(_Part):
    """`metrics.summary`: count, min, mean, median, p95, max (None when there is no value)."""

    count: int
    min: float | None
    mean: float | None
    median: float | None
    p95: float | None
    max: float | None


class Accuracy(_Part):
    decisions: int
    correct: int
    accuracy: float


class PolicyRoute(_Part):
    """Auto-route share and error rate as the pipeline's own judging computes them."""

    temperature: float
    thresholds: dict[str, float]
    auto_routed: int
    share_auto_routed: float
    errors: int
    error_rate: float | None


class CrossValidated(_Part):
    folds: int
    fold_unit: str
    groups: int
    #: Which rows each fold held out (file:line), so the split can be checked and repeated.
    fold_rows: list[list[str]]
    fold_temperatures: list[float]
    before: CalibrationScores
    after: CalibrationScores


class CalibrationGroup(_Part):
    """One calibration group: a policy question (`support-ticket/queue`) or a JevBench set."""

    decisions: int
    confidence_formula: str
    at_t1: CalibrationScores
    temperature_fit: TemperatureFit
    in_sample_at_fitted_t: CalibrationScores
    cross_validated: CrossValidated | None
    reliability_before: list[ReliabilityBin]
    reliability_after_cv: list[ReliabilityBin] | None
    #: Read at the fitted T: the policy applies that T.
    threshold_table: list[ThresholdRow]
    threshold_table_t1: list[ThresholdRow]
    target_error_rate: float
    min_auto_routed: int
    recommended_min_confidence: float
    recommendation_note: str
    #: Policy groups only: the shipped question, and with the fitted T and recommended threshold.
    policy_now: PolicyRoute | None = _absent_when_none()
    policy_proposed: PolicyRoute | None = _absent_when_none()


class Latency(_Part):
    per_decision_seconds: Summary
    per_decision_note: str
    single_request_seconds: Summary
    batch_request_seconds: Summary
    server_decision_seconds: Summary
    histogram_values: list[float]


class HistogramBin(_Part):
    lower: float
    upper: float
    count: int


class MassSummary(Summary):
    histogram: list[HistogramBin]
    below_0_5: int


class Row(_Part):
    """One scored decision, with what is needed to analyse it again."""

    case: str
    where: str
    family: str
    split: str | None
    group: str | None
    question: str
    option_ids: list[str]
    gold: str
    option_logits: list[float]
    probabilities_t1: list[float]
    allowed_token_mass: float
    input_tokens: int
    request_seconds: float
    request_size: int
    provenance: dict[str, Any] | None = _absent_when_none()
    #: The row's fields this tool does not know.
    metadata: dict[str, Any] | None = _absent_when_none()


class Miss(_Part):
    case: str
    where: str
    question: str
    gold: str
    predicted: str
    p_top: float
    note: str | None


class ReadoutPath(_Part):
    accuracy: float
    latency_seconds: Summary


class GeneratedExample(_Part):
    decision: str
    generated: str | None
    parsed: int | None
    gold: int


class GenerationPath(_Part):
    accuracy: float
    unparsed: int
    agrees_with_readout: float
    mean_completion_tokens: float | None
    latency_seconds: Summary
    examples: list[GeneratedExample]


class DecodeComparison(_Part):
    """`decode.summarise`: the same decisions by readout and by generation."""

    decisions: int
    failed: int
    readout: ReadoutPath | None = None
    generation: GenerationPath | None = None
    ratio_median: float | None = None
    ratio_p95: float | None = None
    max_tokens: int


class RunInfo(_Part):
    command: str
    runner: str
    data: list[str]
    splits: list[str] | None
    rows_of_other_splits: dict[str, dict[str, int]]
    seconds: float


class PolicyChangeReport(_Part):
    policy: str
    path: str
    diff: str
    written: bool


class EvalReport(_Part):
    decisions: int
    requests: int
    #: Absent when nothing could be scored.
    overall: CalibrationScores | None = None
    accuracy_by_family: dict[str, Accuracy] = {}
    accuracy_by_question: dict[str, Accuracy] = {}
    calibration: dict[str, CalibrationGroup] = {}
    latency: Latency | None = None
    input_tokens: Summary | None = None
    allowed_token_mass: MassSummary | None = None
    model: ModelInfo | None = None
    prompt_version: str | None = None
    rows: list[Row] = []
    misses: list[Miss] = []
    decode_comparison: DecodeComparison | None = None
    run: RunInfo | None = None
    row_errors: list[str] = []
    row_warnings: list[str] = []
    scoring_failures: list[str] = []
    policy_changes: list[PolicyChangeReport] = []
    #: What report.py wrote: json, markdown and the plots, by name.
    files: dict[str, str] = {}
