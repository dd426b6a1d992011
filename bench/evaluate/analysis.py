"""Score labelled cases with a runner, then measure them: one EvalReport (schema.py).

Calibration is done per *calibration group*: one policy question (`support-ticket/queue`,
`incident/priority`, `incident/team`) or, for JevBench tasks, the whole set (`jevbench`), because
a temperature belongs to one workload. The model's raw `option_logits` are the input; the
temperature the request carried does not matter. The out-of-fold figures use group k-fold: rows
that share a `group` are held out together.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from decision_contract import Decision, DecisionResult, softmax
from evaluation import metrics
from evaluation.cases import Case, RowError
from evaluation.runners import RunFailure, Runner

from .schema import (
    Accuracy,
    CalibrationGroup,
    CrossValidated,
    EvalReport,
    HistogramBin,
    Latency,
    MassSummary,
    Miss,
    PolicyRoute,
    Row,
    Summary,
)

MASS_EDGES = [round(0.1 * i, 1) for i in range(11)]


@dataclass
class Observation:
    case: Case
    question: str
    decision: Decision
    option_ids: list[str]
    gold_index: int
    logits: list[float]
    result: DecisionResult
    #: Client wall time of the request this decision travelled in, and how many it carried.
    request_seconds: float
    request_size: int

    @property
    def calibration_group(self) -> str:
        return f"{self.case.family}/{self.question}" if self.case.kind == "policy" else "jevbench"

    @property
    def formula(self) -> str:
        return self.case.formulas[self.question]

    @property
    def probabilities(self) -> list[float]:
        return softmax(self.logits, 1.0)

    @property
    def correct(self) -> bool:
        p = self.probabilities
        return max(range(len(p)), key=p.__getitem__) == self.gold_index

    @property
    def seconds_per_decision(self) -> float:
        return self.request_seconds / self.request_size


@dataclass
class Run:
    observations: list[Observation] = field(default_factory=list)
    failures: list[RowError] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)


def score_cases(runner: Runner, cases: Sequence[Case], progress: Callable[[int], None] | None = None) -> Run:
    """One request per case (a batch when its decisions share the state); failures are kept."""
    run = Run()
    for case in cases:
        decisions = [labelled.decision for labelled in case.decisions]
        try:
            scored = runner.decide(decisions)
            if [r.id for r in scored.results] != [d.id for d in decisions]:
                raise RunFailure("results do not answer the request's decisions in order")
        except RunFailure as exc:
            run.failures.append(RowError(case.source, case.line, "(scoring)", str(exc)))
        else:
            run.requests.append({"case": case.case_id, "decisions": len(decisions), "seconds": scored.seconds})
            for labelled, result in zip(case.decisions, scored.results):
                run.observations.append(
                    Observation(
                        case=case,
                        question=labelled.question,
                        decision=labelled.decision,
                        option_ids=list(result.option_ids),
                        gold_index=labelled.gold_index,
                        logits=[float(z) for z in result.option_logits],
                        result=result,
                        request_seconds=scored.seconds,
                        request_size=len(decisions),
                    )
                )
        if progress:
            progress(len(decisions))
    return run


def _accuracy_by(observations: Sequence[Observation], key: Callable[[Observation], str]) -> dict[str, Accuracy]:
    groups: dict[str, list[bool]] = defaultdict(list)
    for o in observations:
        groups[key(o)].append(o.correct)
    return {k: Accuracy(decisions=len(v), correct=int(sum(v)), accuracy=sum(v) / len(v)) for k, v in sorted(groups.items())}


def _summary(values: Sequence[float]) -> Summary:
    return Summary.model_validate(metrics.summary(values))


def _policy_route(observations: Sequence[Observation], temperature: float | None,
                  min_confidence: float | None) -> PolicyRoute | None:
    """Auto-route share and error rate exactly as the pipeline decides (`judging.model_entry`),
    with the shipped policy question or with a proposed temperature / min_confidence."""
    from decision_router.domain.judging import model_entry
    from decision_router.domain.policies import load_policy

    first = observations[0]
    if first.case.kind != "policy":
        return None
    question = load_policy(first.case.family).question(first.question)
    update: dict[str, Any] = {}
    if temperature is not None:
        update["temperature"] = temperature
    if min_confidence is not None:
        update["thresholds"] = question.thresholds.model_copy(update={"min_confidence": min_confidence})
    question = question.model_copy(update=update)
    entries = [(model_entry(question, o.result, o.decision.state), o) for o in observations]
    auto = [(e, o) for e, o in entries if e.passed]
    errors = sum(e.option_id != o.option_ids[o.gold_index] for e, o in auto)
    return PolicyRoute(
        temperature=question.temperature,
        thresholds=question.thresholds.model_dump(),
        auto_routed=len(auto),
        share_auto_routed=len(auto) / len(entries),
        errors=errors,
        error_rate=errors / len(auto) if auto else None,
    )


def calibrate_group(
    observations: Sequence[Observation], folds: int, seed: int, target_error: float, min_auto_routed: int
) -> CalibrationGroup:
    logits = [o.logits for o in observations]
    gold = [o.gold_index for o in observations]
    formula = observations[0].formula
    before = metrics.probabilities_at(logits, 1.0)
    fit = metrics.fit_temperature(logits, gold)
    after = metrics.probabilities_at(logits, fit.temperature)
    # Rows of one group (paraphrases of one item, one thread) never straddle folds.
    groups = [o.case.cv_group for o in observations]
    parts = metrics.fold_indices(len(observations), folds, seed, groups)
    held_out, fold_temperatures = metrics.out_of_fold_probabilities(logits, gold, parts=parts)
    is_correct = metrics.correct(before, gold)
    table = metrics.threshold_table(metrics.confidences(after, formula), is_correct)
    table_t1 = metrics.threshold_table(metrics.confidences(before, formula), is_correct)
    chosen = metrics.threshold_for_error_rate(table, target_error, min_auto_routed)
    recommended = chosen.threshold if chosen else 1.0
    cross_validated = None if held_out is None else CrossValidated(
        folds=len(fold_temperatures),
        fold_unit="the row's group (rows without one: the row itself)",
        groups=len(set(groups)),
        fold_rows=[sorted({observations[i].case.where for i in part}) for part in parts],
        fold_temperatures=fold_temperatures,
        before=metrics.calibration_scores(before, gold),
        after=metrics.calibration_scores(held_out, gold),
    )
    policy = observations[0].case.kind == "policy"
    return CalibrationGroup(
        decisions=len(observations),
        confidence_formula=formula,
        at_t1=metrics.calibration_scores(before, gold),
        temperature_fit=fit,
        in_sample_at_fitted_t=metrics.calibration_scores(after, gold),
        cross_validated=cross_validated,
        reliability_before=metrics.reliability_bins(before, gold),
        reliability_after_cv=None if held_out is None else metrics.reliability_bins(held_out, gold),
        threshold_table=table,
        threshold_table_t1=table_t1,
        target_error_rate=target_error,
        min_auto_routed=min_auto_routed,
        recommended_min_confidence=recommended,
        recommendation_note=(
            f"lowest threshold whose auto-routed precision is >= {1 - target_error:.0%} with 95 % confidence "
            f"(one-sided Clopper-Pearson lower bound) over >= {min_auto_routed} auto-routed decisions"
            if chosen
            else f"no threshold below 1.0 showed auto-routed precision >= {1 - target_error:.0%} with 95 % confidence "
            f"over >= {min_auto_routed} auto-routed decisions: send everything to review"
        ),
        policy_now=_policy_route(observations, None, None) if policy else None,
        policy_proposed=_policy_route(observations, round(fit.temperature, 3), recommended) if policy else None,
    )


def analyse(
    run: Run,
    *,
    folds: int = 5,
    seed: int = 0,
    target_error: float = 0.1,
    min_auto_routed: int = 5,
) -> EvalReport:
    obs = run.observations
    if not obs:
        return EvalReport(decisions=0, requests=len(run.requests))
    probs = [o.probabilities for o in obs]
    gold = [o.gold_index for o in obs]
    by_group: dict[str, list[Observation]] = defaultdict(list)
    for o in obs:
        by_group[o.calibration_group].append(o)
    per_decision = [o.seconds_per_decision for o in obs]
    masses = [o.result.allowed_token_mass for o in obs]
    first = obs[0].result
    return EvalReport(
        decisions=len(obs),
        requests=len(run.requests),
        overall=metrics.calibration_scores(probs, gold),
        accuracy_by_family=_accuracy_by(obs, lambda o: o.case.family),
        accuracy_by_question=_accuracy_by(obs, lambda o: o.calibration_group),
        calibration={name: calibrate_group(members, folds, seed, target_error, min_auto_routed)
                     for name, members in sorted(by_group.items())},
        latency=Latency(
            per_decision_seconds=_summary(per_decision),
            per_decision_note="client wall time of the request divided by the decisions it carried",
            single_request_seconds=_summary([r["seconds"] for r in run.requests if r["decisions"] == 1]),
            batch_request_seconds=_summary([r["seconds"] for r in run.requests if r["decisions"] > 1]),
            server_decision_seconds=_summary([o.result.timing.total_seconds for o in obs]),
            histogram_values=per_decision,
        ),
        input_tokens=_summary([o.result.input_tokens for o in obs]),
        allowed_token_mass=MassSummary(
            **metrics.summary(masses),
            histogram=[HistogramBin.model_validate(b) for b in metrics.histogram(masses, MASS_EDGES)],
            below_0_5=sum(m < 0.5 for m in masses),
        ),
        model=first.model,
        prompt_version=first.prompt_version,
        rows=[
            Row(
                case=o.case.case_id,
                where=o.case.where,
                family=o.case.family,
                split=o.case.split,
                group=o.case.group,
                question=o.question,
                option_ids=o.option_ids,
                gold=o.option_ids[o.gold_index],
                option_logits=o.logits,
                probabilities_t1=o.probabilities,
                allowed_token_mass=o.result.allowed_token_mass,
                input_tokens=o.result.input_tokens,
                request_seconds=o.request_seconds,
                request_size=o.request_size,
                provenance=o.case.provenance,
                metadata=o.case.unknown or None,
            )
            for o in obs
        ],
        misses=[
            Miss(
                case=o.case.case_id,
                where=o.case.where,
                question=o.question,
                gold=o.option_ids[o.gold_index],
                predicted=o.option_ids[int(np.argmax(o.probabilities))],
                p_top=round(max(o.probabilities), 4),
                note=o.case.note,
            )
            for o in obs
            if not o.correct
        ],
    )


def finite(value: Any) -> Any:
    """JSON-safe copy: NaN/inf become None (strict JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
