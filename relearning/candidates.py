"""The relearning run's `fit` step: each question's head fitted with `make fit`'s code
(training.fit_head) on the shipped sets and the older reviews, judged against the head in service
on the newest reviews and on the shipped sets' test split (training.gate: no reviewer more than
`max_reviewer_share` of either the reviews trained on or those judged on); each candidate and its
verdict written under `runs/<run>/`, each refusal recorded with its reason; beside each verdict,
the question's live precision (its sampled checks, `live_precision`), as context.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any, Sequence

from decision_contract import ModelInfo
from decision_router.adapters.head_store import REFUSED
from decision_router.domain.heads import Head
from decision_router.domain.policies import Policy
from decision_router.domain.precision import precision_figure, target_of
from decision_router.question_metrics import question_metric
from training import gate, learn
from training.features import Example
from training.fitting import TEST_SPLIT, fit_head

from .collecting import Collecting
from .runs import RUN, RUNS, candidate_key, run_name, shipped_policy


class Fitting(Collecting):
    """The `fit` step, over the examples `collect` gathered."""

    def fit(self, policy_name: str, run: str, model: dict[str, Any]) -> dict[str, Any]:
        policy, run = shipped_policy(policy_name), run_name(run)
        examples, times, sources, info, _, _ = self._examples(policy, ModelInfo.model_validate(model))
        self.store.audit(policy.name, RUNS, RUN, by=f"relearning:{run}", reason="fit and judge")
        verdicts = []
        for question in policy.questions:
            mine = [e for e in examples if e.question == question.id]
            reviewed = [(times[e.where][0], replace(e, reviewer=times[e.where][1])) for e in mine if e.where in times]
            shipped = [e for e in mine if e.where not in times and e.split != TEST_SPLIT]
            test_split = [e for e in mine if e.where not in times and e.split == TEST_SPLIT]
            split = gate.reviewed_split(reviewed, trusted=len(shipped), max_share=self.max_reviewer_share)
            if split.not_trained:
                self.logger.warning("reviews not trained on: their reviewer's cap", extra={
                    "question": question.id, "not_trained": split.not_trained,
                    "max_reviewer_share": self.max_reviewer_share})
            verdict = self._judge(policy, question, shipped + split.train, split.held_out, info, sources, run,
                                  test_split)
            verdicts.append({**verdict, "not_trained": split.not_trained})
        return {"policy": policy.name, "run": run, "promotable": any(v["promoted"] for v in verdicts),
                "questions": verdicts}

    def _judge(self, policy: Policy, question: Any, train: list[Example], held_out: list[Example], model: ModelInfo,
               sources: list[str], run: str, test_split: Sequence[Example] = ()) -> dict[str, Any]:
        current, in_service = self.head_in_service(policy, question.id)
        fit = document = candidate = None
        if len(train) >= gate.MIN_TRAIN and len(held_out) >= gate.MIN_HELD_OUT:
            fit, document = fit_head(policy, question, train, model, sources=sources, curve=False,
                                     fitted_on=self.today())
            candidate = Head.model_validate(document)
        verdict = gate.promotion_verdict(question, current, candidate, fit, held_out, len(train), model, test_split=test_split,
                             max_share=self.max_reviewer_share)
        out: dict[str, Any] = {"question": question.id, **verdict.as_dict(), "in_service": in_service,
                               "live_precision": self.live_precision(policy, question)}
        if document is not None and candidate is not None:
            data = learn.head_bytes(document)
            key = candidate_key(run, policy.name, question.id)
            sha256 = hashlib.sha256(data).hexdigest()
            self.store.put(key, data)
            self.store.put(key.replace(".json", ".report.json"), json.dumps(
                {"verdict": verdict.as_dict(), "fit": document["fit"], "train": len(train),
                 "held_out": len(held_out), "sha256": sha256, "head_version": candidate.version},
                sort_keys=True).encode())
            out.update({"candidate_key": key, "head_version": candidate.version, "sha256": sha256})
        if not verdict.promote:
            self.store.audit(policy.name, question.id, REFUSED, by=f"relearning:{run}", reason=verdict.reason,
                             came_from=in_service, went_to=out.get("head_version", ""))
            question_metric("RelearningRefused", policy.name, question.id)
            question_metric("RelearningRefusalsInARow", policy.name, question.id,
                            self.store.refusals_in_a_row(policy.name, question.id))
        self.logger.info("relearning verdict", extra={k: v for k, v in out.items() if k != "candidate_key"})
        return out

    def live_precision(self, policy: Policy, question: Any) -> dict[str, Any]:
        """The question's live precision (its sampled checks, domain/precision.py: the realized
        precision, its lower bound and the target), reported beside the verdict as context, never
        judged: the tally counts whichever heads served the question, and a head in service under
        its target is a reason to relearn, not to keep it. What cannot be read is reported so."""
        target = target_of(question)
        try:
            counts = self.precision.counts(policy.name, question.id)
            options = self.precision.options(policy.name, question.id)
        except Exception as error:  # noqa: BLE001 - context only: the verdict stands without it
            return {"unavailable": f"{type(error).__name__}: {error}"}
        figure = precision_figure(counts, target)
        # per option only where its checks could show the target: fewer say nothing of one option
        shown = {option: precision_figure(c, target) for option, c in sorted(options.items())}
        return {**figure.model_dump(), "summary": figure.line(),
                "options": {option: {"checked": f.checked, "right": f.right, "precision": f.precision,
                                     "lower_bound": f.lower_bound, "below_target": f.below_target}
                            for option, f in shown.items() if f.checked >= f.items_needed}}
