"""Calibration flows into the pipeline: the fitted temperature and the recommended
`min_confidence` of each policy question, as an exact change to the policy JSON file.

The file is written in the policies' one layout (`evaluation.policy_file.format_policy`), so
a change shows as exactly the lines whose values changed; the result must still load as a
valid policy.
"""

from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

#: Temperatures are written rounded: more digits than this are noise from 30–50 labels.
TEMPERATURE_DIGITS = 3


@dataclass(frozen=True)
class QuestionChange:
    question: str
    temperature: float
    min_confidence: float


@dataclass(frozen=True)
class PolicyChange:
    policy: str
    path: Path
    old_text: str
    new_text: str

    @property
    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.old_text.splitlines(keepends=True),
                self.new_text.splitlines(keepends=True),
                fromfile=f"{self.path} (now)",
                tofile=f"{self.path} (calibrated)",
            )
        )

    @property
    def changed(self) -> bool:
        return self.old_text != self.new_text


def policy_path(name: str) -> Path:
    from decision_router.domain.policies import POLICY_DIR

    text = str(name)
    return Path(text) if text.endswith(".json") or "/" in text else POLICY_DIR / f"{text}.json"


def propose(name: str, changes: Mapping[str, QuestionChange]) -> PolicyChange:
    from evaluation.policy_file import format_policy

    path = policy_path(name)
    old_text = path.read_text(encoding="utf-8")
    wanted = copy.deepcopy(json.loads(old_text))
    for question in wanted["questions"]:
        change = changes.get(question["id"])
        if change:
            question["temperature"] = round(change.temperature, TEMPERATURE_DIGITS)
            question["thresholds"]["min_confidence"] = change.min_confidence
    new_text = format_policy(wanted)
    if json.loads(new_text) == json.loads(old_text):
        new_text = old_text  # same values: no change, whatever the file's layout
    return PolicyChange(policy=name, path=path, old_text=old_text, new_text=new_text)


def write(change: PolicyChange) -> None:
    """Write the calibrated policy, then load it back through the pipeline's validation."""
    from decision_router.domain.policies import load_policy

    change.path.write_text(change.new_text, encoding="utf-8")
    load_policy(change.path)
