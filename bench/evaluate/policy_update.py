"""Calibration flows into the pipeline: the fitted temperature and the recommended
`min_confidence` of each policy question, as an exact change to the policy JSON file.

The file is edited in place textually (its layout and comments-as-fields stay as they are); the
edit is then verified by parsing both versions: exactly the intended values may differ, and the
result must still load as a valid policy. If the text edit cannot be verified, the file is
re-serialised instead.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

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
    from decision_router.policies import POLICY_DIR

    text = str(name)
    return Path(text) if text.endswith(".json") or "/" in text else POLICY_DIR / f"{text}.json"


def propose(name: str, changes: Mapping[str, QuestionChange]) -> PolicyChange:
    path = policy_path(name)
    old_text = path.read_text(encoding="utf-8")
    old = json.loads(old_text)
    wanted = copy.deepcopy(old)
    for question in wanted["questions"]:
        change = changes.get(question["id"])
        if change:
            question["temperature"] = round(change.temperature, TEMPERATURE_DIGITS)
            question["thresholds"]["min_confidence"] = change.min_confidence
    new_text = _edit_text(old_text, old, wanted)
    if new_text is None or json.loads(new_text) != wanted:
        new_text = json.dumps(wanted, indent=2, ensure_ascii=False) + "\n"
    return PolicyChange(policy=name, path=path, old_text=old_text, new_text=new_text)


def _edit_text(text: str, old: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """Replace the n-th `"temperature": x` / `"min_confidence": x` occurrence of question n.

    Works when those keys appear once per question and nowhere else (as in the shipped files);
    the caller checks the result and falls back otherwise.
    """
    n = len(old["questions"])
    for key, get in (
        ("temperature", lambda q: q["temperature"]),
        ("min_confidence", lambda q: q["thresholds"]["min_confidence"]),
    ):
        pattern = re.compile(rf'("{key}"\s*:\s*)(-?[0-9][0-9.eE+-]*)')
        matches = list(pattern.finditer(text))
        if len(matches) != n:
            return None
        for match, question in reversed(list(zip(matches, wanted["questions"]))):
            text = text[: match.start(2)] + json.dumps(float(get(question))) + text[match.end(2) :]
    return text


def write(change: PolicyChange) -> None:
    """Write the calibrated policy, then load it back through the pipeline's validation."""
    from decision_router.policies import load_policy

    change.path.write_text(change.new_text, encoding="utf-8")
    load_policy(change.path)
