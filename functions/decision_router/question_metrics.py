"""One metric per policy question, as the alarms and the dashboard read it: emitted alike by the
routing functions (the heads in service, the shadow heads, the automatic routes), the review
functions (the shadow heads' and the live precision's counts of a reviewer's answer) and
relearning."""

from __future__ import annotations

from aws_lambda_powertools.metrics import MetricUnit, single_metric


def question_metric(name: str, policy: str, question: str, value: float = 1.0,
                    unit: MetricUnit = MetricUnit.Count) -> None:
    """One metric with exactly the policy and question as its dimensions (EMF on stdout): the
    alarms and the dashboard name those two, whichever function emits it."""
    with single_metric(name=name, unit=unit, value=value) as metric:
        metric.service = ""  # no `service` dimension from POWERTOOLS_SERVICE_NAME
        metric.add_dimension(name="policy", value=policy)
        metric.add_dimension(name="question", value=question)
