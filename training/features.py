"""What the model produces for each labelled decision: its final hidden state and its letter
logits, from one request per item (the real engine in-process, or a container over HTTP).

Scoring hundreds of items takes minutes on a CPU, so results are cached on disk per model
(GGUF sha256) and per decision (its content, not its id): a second `make fit` on the same
model and data reads the cache, and a changed prompt, question or model scores afresh.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from decision_contract import DecisionResult, ModelInfo
from decision_contract.signals import request_key
from evaluation.cases import Case, RowError
from evaluation.runners import RunFailure, Runner


@dataclass(frozen=True)
class Example:
    """One labelled decision and what the model produced for it."""

    policy: str
    question: str
    case_id: str
    where: str
    split: str | None
    fold_group: str
    option_ids: list[str]
    gold: int
    state: Any  # the decision's evidence (what the lexical features read)
    hidden: np.ndarray
    letter_logits: np.ndarray
    allowed_token_mass: float
    prompt_version: str
    note: str | None = None
    language: str | None = None
    reviewer: str | None = None  # who labelled it (a review); None: a shipped label, or nobody named

    def result(self, model: ModelInfo) -> DecisionResult:
        """The decision result the routing function would have received (for its own code path)."""
        return DecisionResult.from_signals(self.question, self.option_ids, self.letter_logits, model=model,
                                           prompt_version=self.prompt_version, allowed_token_mass=self.allowed_token_mass,
                                           hidden_state=self.hidden)


class FeatureCache:
    """Hidden state, letter logits, allowed-token mass and prompt version per decision key, in one .npz."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.rows: dict[str, tuple[np.ndarray, np.ndarray, float, str]] = {}
        if path is not None and path.is_file():
            with np.load(path, allow_pickle=False) as data:
                for key in {name.split(".")[0] for name in data.files}:
                    self.rows[key] = (data[f"{key}.h"], data[f"{key}.z"], float(data[f"{key}.m"]), str(data[f"{key}.v"]))
        self.dirty = False

    def get(self, key: str) -> tuple[np.ndarray, np.ndarray, float, str] | None:
        return self.rows.get(key)

    def put(self, key: str, result: DecisionResult) -> None:
        hidden = np.asarray(result.hidden_state, dtype=np.float32)
        self.rows[key] = (hidden, np.asarray(result.option_logits, dtype=np.float64), result.allowed_token_mass,
                          result.prompt_version)
        self.dirty = True

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {}
        for key, (hidden, logits, mass, version) in self.rows.items():
            arrays.update({f"{key}.h": hidden, f"{key}.z": logits, f"{key}.m": np.float64(mass), f"{key}.v": np.str_(version)})
        np.savez_compressed(self.path, **arrays)
        self.dirty = False


def extract(runner: Runner, model: ModelInfo, cases: Sequence[Case], cache_dir: Path | None, *, workers: int = 4,
            progress: Callable[[int], None] | None = None) -> tuple[list[Example], list[RowError]]:
    """Score every case (one request each, its decisions asking for the hidden state) unless the
    cache has it; concurrent requests share the engine's decodes."""
    cache = FeatureCache(cache_dir / f"{model.sha256}.npz" if cache_dir is not None else None)
    failures: list[RowError] = []

    def score(case: Case) -> None:
        decisions = [labelled.decision.model_copy(update={"return_hidden_state": True}) for labelled in case.decisions]
        keys = [request_key(model.sha256, d) for d in decisions]
        if all(cache.get(k) is not None for k in keys):
            return
        try:
            scored = runner.decide(decisions)
            for key, result in zip(keys, scored.results):
                if result.hidden_state is None or result.model.sha256 != model.sha256:
                    raise RunFailure("the endpoint returned no hidden state, or another model answered")
                cache.put(key, result)
        except RunFailure as exc:
            failures.append(RowError(case.source, case.line, "(scoring)", str(exc)))
        finally:
            if progress:
                progress(len(decisions))

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(score, cases))
    finally:
        cache.save()

    examples = []
    for case in cases:
        for labelled in case.decisions:
            row = cache.get(request_key(model.sha256, labelled.decision))
            if row is None:
                continue
            hidden, logits, mass, version = row
            examples.append(Example(
                policy=case.family, question=labelled.question, case_id=case.case_id, where=case.where,
                split=case.split, fold_group=case.cv_group, option_ids=labelled.decision.option_ids,
                gold=labelled.gold_index, state=labelled.decision.state, hidden=hidden.astype(np.float64), letter_logits=logits,
                allowed_token_mass=mass, prompt_version=version, note=case.note, language=case.language,
            ))
    return examples, failures
