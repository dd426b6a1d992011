"""A relearning run's names and keys in the head store (`runs/<run>/`, the run being the workflow's
execution name), the shipped policies a run may name, and the bounds of the shadow loop."""

from __future__ import annotations

import math
import re
from typing import Any

from decision_router.domain.policies import POLICY_DIR, Policy, load_policy

#: The history table's row of a policy's runs (when the last one started).
RUNS = "_runs"
RUN = "relearning_run"
#: A run's name: the workflow's execution name (Step Functions: 1-80 letters, digits, - and _).
RUN_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
#: The most looks at a shadow (WaitForShadowedItems, JudgeShadow, ShadowJudged) in one shadow
#: period. A Standard execution fails once its history passes 25,000 events; each look adds 10
#: (tests/infra/test_relearning_history.py counts them from the definition), so 2,000 looks are
#: 20,000 events and the rest of a run has the other 5,000.
MAX_SHADOW_LOOKS = 2000
#: The longest shadow period and the longest wait between two looks (template.yaml's MaxValue of
#: RelearningShadowTimeoutSeconds and RelearningShadowCheckSeconds): a Standard execution lasts at
#: most a year, and the approval (up to 3 days) and the promotion come after the shadow.
MAX_SHADOW_SECONDS = 360 * 86400


def shadow_wait_seconds(check_seconds: int, timeout_seconds: float) -> int:
    """Seconds between two looks at a shadow: `check_seconds`, or longer where the shadow period
    would otherwise take more than MAX_SHADOW_LOOKS looks (the looks then spread evenly over it).
    `judge_shadow` is ready once `timeout_seconds` have passed since the shadow started, and each
    look comes at least one wait after the one before, so a period takes at most
    ceil(timeout / wait) <= MAX_SHADOW_LOOKS looks, whatever the two settings."""
    return max(int(check_seconds), math.ceil(timeout_seconds / MAX_SHADOW_LOOKS))


def shipped_policy(name: Any) -> Policy:
    """The shipped policy of that name; anything else (a path, an unknown name) is refused."""
    shipped = sorted(path.stem for path in POLICY_DIR.glob("*.json"))
    if not isinstance(name, str) or name not in shipped:
        raise ValueError(f"policy {name!r}: not a shipped policy (shipped: {', '.join(shipped)})")
    return load_policy(name)


def run_name(run: Any) -> str:
    """A run's name as it may appear in a key of the head store (runs/<run>/)."""
    if not isinstance(run, str) or not RUN_NAME.fullmatch(run):
        raise ValueError(f"run {run!r}: not a workflow execution name (1-80 letters, digits, - or _)")
    return run


def candidate_key(run: str, policy: str, question: str) -> str:
    """Where a run's `fit` keeps a question's candidate (its report beside it, `.report.json`)."""
    return f"runs/{run_name(run)}/{policy}.{question}.json"


def shadow_start_key(run: str, policy: str) -> str:
    """Where a run's `shadow` keeps when its candidates began to serve in shadow, and which."""
    return f"runs/{run_name(run)}/{policy}.shadow.json"


def shadow_verdict_key(run: str, policy: str, question: str) -> str:
    """Where a run's `judge_shadow` keeps a question's shadow verdict (what `promote` requires)."""
    return f"runs/{run_name(run)}/{policy}.{question}.shadow-verdict.json"
