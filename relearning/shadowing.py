"""The relearning run's shadow steps:

- `shadow`: each candidate the gate passed serves in shadow (domain/shadow.py): named in its
  question's shadow pointer, the routing functions answer every live item with it beside the head
  in service and count its agreement and, where a reviewer answers, which of the two was right.
  Only a candidate this run's own `fit` stored as passing, its bytes re-hashed (as `promote`).
- `judge_shadow`: not ready until every shadow answered `shadow_items` items or
  `shadow_timeout_seconds` have passed (the workflow waits `shadow_wait_seconds` and asks again, at
  most MAX_SHADOW_LOOKS times: an execution's history has room for that many); then each shadow is
  judged (at least `shadow_items` items, no worse precision on the reviewed ones than the head in
  service), its verdict stored under `runs/<run>/`, and the shadow ended.

`_passing`, which candidates this run's steps stored as passing, is `promote`'s check too.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

from decision_router.adapters.head_store import REFUSED
from decision_router.domain.heads import Head
from decision_router.domain.policies import Policy
from decision_router.domain.shadow import ShadowCounts, shadow_verdict
from decision_router.domain.signatures import HEAD_SHADOW
from decision_router.question_metrics import question_metric

from .base import RelearningBase
from .runs import candidate_key, run_name, shadow_start_key, shadow_verdict_key, shipped_policy


class Shadowing(RelearningBase):
    """The `shadow` and `judge_shadow` steps, and the check of what a run's steps stored as passing."""

    def _passing(self, policy: Policy, run: str, verdicts: Sequence[dict[str, Any]], *, shadowed: bool
                 ) -> list[tuple[str, bytes, bytes, str, Head, str]]:
        """The candidates this run's `fit` stored as passing (and, with `shadowed`, whose shadow
        this run's `judge_shadow` stored as passing): (question, head bytes, report bytes, sha256,
        head, reason). The verdicts (the workflow's copy of a step's output) must agree with what
        the store holds: a question they call passing that the store does not, or one whose
        candidate's bytes no longer hash to what `fit` recorded, fails the step."""
        claimed: dict[str, dict[str, Any]] = {}
        for verdict in verdicts:
            question = verdict.get("question") if isinstance(verdict, dict) else None
            if question not in {q.id for q in policy.questions}:
                raise ValueError(f"verdict {verdict!r}: not a question of policy {policy.name!r}")
            claimed[question] = verdict
        passed = []
        for question in policy.questions:
            key = candidate_key(run, policy.name, question.id)
            raw = self.store.find(key.replace(".json", ".report.json"))
            report: dict[str, Any] = json.loads(raw) if raw is not None else {}
            stored_pass = report.get("verdict", {}).get("promoted") is True
            reason = report["verdict"]["reason"] if stored_pass else ""
            if stored_pass and shadowed:
                judged = self.store.find(shadow_verdict_key(run, policy.name, question.id))
                shadow = json.loads(judged) if judged is not None else {}
                stored_pass = shadow.get("promoted") is True and shadow.get("sha256") == report.get("sha256")
                reason = f"{reason}; in shadow: {shadow.get('reason', '')}"
            says = bool(claimed.get(question.id, {}).get("promoted"))
            stage = "fit and judge_shadow" if shadowed else "fit"
            if says != stored_pass:
                raise ValueError(f"{policy.name}/{question.id}: the verdict says {'promoted' if says else 'refused'}, "
                                 f"but run {run}'s {stage} stored {'a passing' if stored_pass else 'no passing'} "
                                 f"candidate at {key}")
            if not stored_pass or raw is None:
                continue
            data = self.store.get(key)
            sha256 = hashlib.sha256(data).hexdigest()
            expected = {report.get("sha256"), claimed[question.id].get("sha256", report.get("sha256"))}
            if expected != {sha256}:
                raise ValueError(f"candidate {key}: its bytes hash to {sha256}, fit recorded "
                                 f"{', '.join(sorted(str(e) for e in expected))}")
            head = Head.model_validate_json(data)
            problems = policy.head_problems(question, head)
            if problems:
                raise ValueError(f"candidate {key}: " + "; ".join(problems))
            passed.append((question.id, data, raw, sha256, head, reason))
        return passed

    def shadow(self, policy_name: str, run: str, verdicts: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Each candidate this run's `fit` stored as passing named its question's shadow: the
        routing functions answer with it beside the head in service from their next refresh."""
        policy, run = shipped_policy(policy_name), run_name(run)
        passed = self._passing(policy, run, verdicts, shadowed=False)
        started = self.clock()
        shadowing = [{"question": q, "head_version": head.version, "sha256": sha256} for q, _, _, sha256, head, _ in passed]
        self.store.put(shadow_start_key(run, policy.name), json.dumps(
            {"started_at": started, "questions": shadowing}, sort_keys=True).encode())
        for question_id, data, _, sha256, head, reason in passed:
            self.store.shadow(policy.name, question_id, data, sha256=sha256, head_version=head.version,
                              by=f"relearning:{run}", reason=reason,
                              signature=self._head_signature(policy.name, question_id, sha256, head.version,
                                                             HEAD_SHADOW))
            question_metric("ShadowStarted", policy.name, question_id)
            self.logger.info("candidate serving in shadow", extra={"question": question_id,
                                                                   "head_version": head.version})
        return {"policy": policy.name, "run": run, "started_at": started, "min_items": self.shadow_items,
                "timeout_seconds": self.shadow_timeout_seconds, "check_seconds": self.shadow_wait_seconds,
                "questions": shadowing}

    def judge_shadow(self, policy_name: str, run: str) -> dict[str, Any]:
        """`ready: false` while a shadow has answered fewer than `shadow_items` items and the
        shadow period lasts; then each shadow judged (domain/shadow.py `shadow_verdict`), its
        verdict stored for `promote`, the shadow ended and each refusal recorded with its reason."""
        policy, run = shipped_policy(policy_name), run_name(run)
        raw = self.store.find(shadow_start_key(run, policy.name))
        if raw is None:
            raise ValueError(f"run {run}: no candidate of {policy.name} serves in shadow (its shadow step stored none)")
        started = json.loads(raw)
        waited = self.clock() - float(started["started_at"])
        timed_out = waited >= self.shadow_timeout_seconds
        counts: dict[str, ShadowCounts] = {}
        for shadowed in started["questions"]:
            tally = self.tally.counts(policy.name, shadowed["question"], shadowed["sha256"])
            counts[shadowed["question"]] = tally
            figures = tally.figures()
            for metric, value in (("ShadowAgreement", figures["agreement"]),
                                  ("ShadowPrecision", figures["shadow_precision"]),
                                  ("ServicePrecision", figures["service_precision"])):
                if value is not None:
                    question_metric(metric, policy.name, shadowed["question"], value)
        if not timed_out and any(c.items < self.shadow_items or c.reviewed < self.shadow_min_reviewed
                                 for c in counts.values()):
            return {"ready": False, "waited_seconds": round(waited), "min_items": self.shadow_items,
                    "min_reviewed": self.shadow_min_reviewed, "shadowed": {q: c.items for q, c in counts.items()},
                    "reviewed": {q: c.reviewed for q, c in counts.items()}}
        verdicts = []
        for shadowed in started["questions"]:
            question_id, tally = shadowed["question"], counts[shadowed["question"]]
            ok, reason = shadow_verdict(tally, self.shadow_items, min_reviewed=self.shadow_min_reviewed,
                                        max_disagreement=self.shadow_max_disagreement, timed_out=timed_out)
            self.store.put(shadow_verdict_key(run, policy.name, question_id), json.dumps(
                {"promoted": ok, "reason": reason, "sha256": shadowed["sha256"], "counts": tally.figures(),
                 "waited_seconds": round(waited)}, sort_keys=True).encode())
            self.store.end_shadow(policy.name, question_id, by=f"relearning:{run}", reason=reason)
            if not ok:
                self.store.audit(policy.name, question_id, REFUSED, by=f"relearning:{run}",
                                 reason=f"in shadow: {reason}", went_to=shadowed["head_version"])
                question_metric("RelearningRefused", policy.name, question_id)
                question_metric("RelearningRefusalsInARow", policy.name, question_id,
                                self.store.refusals_in_a_row(policy.name, question_id))
            self.logger.info("shadow judged", extra={"question": question_id, "promoted": ok, "reason": reason,
                                                     **tally.figures()})
            verdicts.append({"question": question_id, "promoted": ok, "reason": reason,
                             "head_version": shadowed["head_version"], "sha256": shadowed["sha256"],
                             "shadow": tally.figures()})
        return {"ready": True, "policy": policy.name, "run": run, "promotable": any(v["promoted"] for v in verdicts),
                "waited_seconds": round(waited), "min_items": self.shadow_items, "questions": verdicts}
