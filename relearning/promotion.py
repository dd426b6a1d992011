"""The relearning run's `promote` step: each candidate the gate and its shadow passed written to the
head store and named in service; only a candidate this run's own `fit` stored under `runs/<run>/`
with a passing verdict and whose shadow this run's `judge_shadow` stored as passing, its bytes still
those `fit` hashed (the message's claims are checked against the store, never trusted).
"""

from __future__ import annotations

from typing import Any, Sequence

from decision_router.adapters.head_store import PROMOTED
from decision_router.domain.signatures import HEAD_SERVICE
from decision_router.question_metrics import question_metric

from .runs import run_name, shipped_policy
from .shadowing import Shadowing


class Promoting(Shadowing):
    """The `promote` step, over what the shadow steps stored."""

    def promote(self, policy_name: str, run: str, verdicts: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Each candidate this run's `fit` stored as passing and its `judge_shadow` stored as
        passing in shadow, named in service. The verdicts (the workflow's copy of `judge_shadow`'s
        output) must agree with what the store holds (`_passing`): otherwise the step fails and
        nothing of it is promoted."""
        policy, run = shipped_policy(policy_name), run_name(run)
        passed = self._passing(policy, run, verdicts, shadowed=True)
        promoted = []
        for question_id, data, report_bytes, sha256, head, reason in passed:
            _, came_from = self.head_in_service(policy, question_id)
            pointer = self.store.promote(policy.name, question_id, data, report_bytes, sha256=sha256,
                                         head_version=head.version, by=f"relearning:{run}", reason=reason,
                                         signature=self._head_signature(policy.name, question_id, sha256, head.version,
                                                                        HEAD_SERVICE))
            self.store.audit(policy.name, question_id, PROMOTED, by=f"relearning:{run}", reason=reason,
                             came_from=came_from, went_to=head.version)
            question_metric("RelearningPromoted", policy.name, question_id)
            question_metric("RelearningRefusalsInARow", policy.name, question_id, 0)
            notice = {"notice": "promoted", "policy": policy.name, "question": question_id, "run": run,
                      "head_version": head.version, "came_from": came_from, "sha256": sha256,
                      "s3_version": pointer.s3_version, "reason": reason}
            self.logger.info("relearning promoted a head", extra=notice)
            if self.announce is not None:
                self.announce(notice)
            promoted.append({"question": question_id, "head_version": head.version, "s3_version": pointer.s3_version,
                             "sha256": sha256, "reason": reason})
        return {"policy": policy.name, "run": run, "promoted": promoted}
