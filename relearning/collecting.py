"""The relearning run's first two steps, over the labels and the endpoint:

- `count`: labels accrued since the last run, per question reviewers' agreement with the model's
  suggestion and corrections of automatic routes (metrics), and whether enough have accrued.
- `collect`: every labelled example (the policy's labelled-examples table and the shipped
  labelled sets) with the model's signals (hidden state, letter logits), asked of the endpoint
  only for examples that lack them, with the request the routing function sends; the signals
  are kept in the head store (`signals/<model sha256>.npz`), so a rerun does not ask again.
  `fit` reads the same examples (`_examples`) for the model `collect` found, asking nothing.

The model's signals for the shipped sets start from those shipped for the model, where there are
(`bench/data/signals/<model sha256>.npz`, read by training/signals_store.py), and every signal
is kept in the one signals store that `make fit` and `make fit-history` use.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Sequence

from decision_contract import Decision, ModelInfo
from decision_router.adapters.endpoint import DecisionEndpoint
from decision_router.domain.failures import EndpointFailure
from decision_router.domain.policies import Policy
from decision_router.question_metrics import question_metric
from evaluation.cases import Case, RowError, load_file
from evaluation.runners import RunFailure, Scored
from training.features import Example, case_decisions, examples_of, score_cases
from training.scoring import scorer_for
from training.signals_store import SignalsStore

from .base import RelearningBase
from .labelled_rows import LabelledRow, read_labels
from .labels import Synced, seed_kept_signals, sync_labels
from .runs import RUNS, shipped_policy

#: Items asked of the endpoint between two saves of their signals.
CHUNK = 50
#: Time kept back from the function's deadline when collecting: a chunk, its save and the answer.
COLLECT_MARGIN_SECONDS = 180.0


class EndpointSignals:
    """The decision endpoint as the fitter's runner (`evaluation.runners.Runner`): one request per
    item, its decisions asking for the hidden state, as the routing function sends it."""

    description = "SageMaker endpoint"

    def __init__(self, endpoint: DecisionEndpoint, probe: Sequence[Decision]):
        self.endpoint, self.probe = endpoint, list(probe)
        self._model: ModelInfo | None = None

    def decide(self, decisions: list[Decision]) -> Scored:
        try:
            results = self.endpoint.decide(decisions)
        except EndpointFailure as failure:
            raise RunFailure(str(failure)) from failure
        return Scored([results[d.id] for d in decisions], 0.0)

    def model_info(self) -> ModelInfo:
        if self._model is None:
            self._model = self.decide(self.probe).results[0].model
        return self._model

    def generate(self, messages: list[dict[str, str]], max_tokens: int) -> Any:
        raise NotImplementedError("the relearning job only scores decisions")

    def close(self) -> None:
        pass


def _lacking(store: SignalsStore, model_sha256: str, cases: Sequence[Case]) -> list[Case]:
    """The cases with a decision whose signals the store lacks."""
    _, keys, owners = case_decisions(cases, model_sha256)
    lacking_keys = {keys[i] for i in store.missing(keys)}
    lacking = {id(owner) for key, owner in zip(keys, owners) if key in lacking_keys}
    return [case for case in cases if id(case) in lacking]


def _probe(cases: Sequence[Case], labelled: Sequence[LabelledRow]) -> Decision:
    """The one decision whose answer tells which model the endpoint serves, without its hidden
    state (the answer is small): of an item without kept signals where there is one (the endpoint
    is asked for those anyway, so no other item's text is sent)."""
    kept = {row.case.where for row in labelled if row.signals}
    case = next((case for case in cases if case.where not in kept), cases[0])
    return case.decisions[0].decision.model_copy(update={"return_hidden_state": False})


class Collecting(RelearningBase):
    """The `count` and `collect` steps, and the labelled examples with their signals that `fit` reads."""

    def count(self, policy_name: str, trigger: str = "labels") -> dict[str, Any]:
        policy = shipped_policy(policy_name)
        runs = self.store.history(policy.name, RUNS, limit=1)
        since = runs[0]["at"] if runs else ""
        rows = self.labelled_rows(policy.name).rows
        new, _ = read_labels([row for row in rows if row.get("labelled_at", "") > since], self.signing_key)
        question_metric("LabelsSinceRelearning", policy.name, "*", len(new))
        for question in policy.questions:
            suggested = [row for row in new if question.id in row.suggested and question.id in row.answers]
            agreed = sum(row.suggested[question.id] == row.answers[question.id] for row in suggested)
            if suggested:
                question_metric("ReviewerAgreement", policy.name, question.id, agreed / len(suggested))
            corrected = sum(row.corrected_auto and row.suggested.get(question.id) != row.answers.get(question.id)
                            for row in new)
            question_metric("CorrectionsOfAutomaticRoutes", policy.name, question.id, corrected)
        enough = len(new) >= self.min_new_labels or (trigger == "schedule" and len(new) > 0)
        return {"policy": policy.name, "new_labels": len(new), "labels": len(rows), "since": since,
                "min_new_labels": self.min_new_labels, "relearn": enough}

    def labelled_rows(self, policy_name: str) -> Synced:
        """The policy's labelled examples: those kept in the head bucket, with only the table's new
        rows read (relearning/labels.py)."""
        synced = sync_labels(self.store, self.labels, policy_name, now=self.clock(),
                             retention_days=self.label_retention_days,
                             full_read_after_seconds=self.full_read_after_seconds)
        self.logger.info("labels read", extra={"policy": policy_name, "rows_read": synced.read,
                                               "full_read": synced.full_read, "labels": len(synced.rows),
                                               "restarts": synced.restarts, "capped": synced.capped})
        return synced

    def _cases(self, policy: Policy) -> tuple[list[Case], dict[str, tuple[str, str | None]], list[str],
                                              list[LabelledRow]]:
        """The shipped sets' rows (their test split is the gate's second slice, never trained on)
        and every reviewed row of the policy; the label time and reviewer of each reviewed case (by
        its `where`); the sources, for the fit report."""
        cases: list[Case] = []
        sources = []
        for path in self.shipped:
            loaded = load_file(path)
            mine = [c for c in loaded.cases if c.kind == "policy" and c.family == policy.name]
            if mine:
                cases += mine
                sources.append(path.name)
        labelled, problems = read_labels(self.labelled_rows(policy.name).rows, self.signing_key)
        for problem in problems:
            self.logger.warning("labelled example not used", extra={"problem": problem})
        times = {row.case.where: (row.labelled_at, row.reviewer_id) for row in labelled}
        cases += [row.case for row in labelled]
        sources.append(f"labelled examples table ({len(labelled)} reviews)")
        return cases, times, sources, labelled

    def _examples(self, policy: Policy, model: ModelInfo | None, deadline: float | None = None
                  ) -> tuple[list[Example], dict[str, tuple[str, str | None]], list[str], ModelInfo, list[str], bool]:
        """Every labelled example with its signals, asking the endpoint for those the kept signals
        lack, CHUNK items at a time, each chunk kept in the bucket at once. Past `deadline`
        (time.monotonic()) no further chunk starts: the last value says whether every item was asked."""
        cases, times, sources, labelled = self._cases(policy)
        if not cases:
            raise ValueError(f"policy {policy.name!r}: no labelled examples at all")
        runner = self.endpoint([_probe(cases, labelled)])
        model, (store, kept_file, kept) = self._model_and_signals(policy, model, labelled, runner)
        key = f"signals/{policy.name}/{model.sha256}.npz"
        keys = case_decisions(cases, model.sha256)[1]
        pending = _lacking(store, model.sha256, cases)
        self._count_asked_again(policy, model, pending, labelled)
        scorer = scorer_for(runner, model, lambda text: self.logger.info(text), progress=False)
        complete = True
        for start in range(0, len(pending), CHUNK):
            if deadline is not None and start > 0 and time.monotonic() > deadline:  # one chunk at least
                complete = False
                break
            score_cases(scorer, store, model.sha256, pending[start:start + CHUNK])
            store.write_file(kept_file, model.sha256, keys)
            if kept_file.read_bytes() != kept:
                self.store.upload(key, kept_file)
                kept = kept_file.read_bytes()
        if complete:  # what failed before is asked once more
            failures = score_cases(scorer, store, model.sha256, cases)
        else:
            failures = [RowError(c.source, c.line, "(scoring)", "not asked in this call (time is up): the next collect asks")
                        for c in _lacking(store, model.sha256, cases)]
        examples = examples_of(store, model.sha256, cases)
        return examples, times, sources, model, [str(f) for f in failures], complete

    def _model_and_signals(self, policy: Policy, model: ModelInfo | None, labelled: Sequence[LabelledRow],
                           runner: Any) -> tuple[ModelInfo, tuple[SignalsStore, Path, bytes]]:
        """The model the examples' signals are of, and its signals at hand (`_signals_store`). Not
        given (`collect`), the endpoint says which model it serves now: one request of one decision
        (`_probe`), whatever the number of labels, even where every label kept its signals, so a
        model deployed since is never fitted for from the old one's signals. Kept signals of
        another model are left out of the store: their items are asked again (`_count_asked_again`).
        Given (`fit`: the model `collect` found), no request at all."""
        model = model or runner.model_info()
        return model, self._signals_store(policy, model, labelled)

    def _count_asked_again(self, policy: Policy, model: ModelInfo, pending: Sequence[Case],
                           labelled: Sequence[LabelledRow]) -> None:
        """The reviewed items whose signals for `model` were not kept at decision time (a record
        from before every question asked for them, one too large to keep them, another model's),
        counted and logged: the endpoint is asked for them, the one fallback left."""
        asked = {case.where for case in pending}
        again = [row for row in labelled if row.case.where in asked]
        other_model = sum(bool(row.signals) and all(kept.model_sha256 != model.sha256 for kept in row.signals.values())
                          for row in again)
        question_metric("LabelsAskedOfEndpoint", policy.name, "*", len(again))
        if again:
            self.logger.warning("labelled examples without kept signals: asked of the endpoint",
                                extra={"policy": policy.name, "items": len(again), "model_sha256": model.sha256,
                                       "kept_for_another_model": other_model})

    def _signals_store(self, policy: Policy, model: ModelInfo, labelled: Sequence[LabelledRow]
                       ) -> tuple[SignalsStore, Path, bytes]:
        """The model's signals at hand without asking: kept in the bucket by earlier calls, shipped
        for the model, kept at decision time. The store, the file it is kept as, and its bytes."""
        folder = self.work_dir / "signals"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        store = SignalsStore(folder / model.sha256)
        kept_file = folder / f"{model.sha256}.npz"
        kept = self.store.download(f"signals/{policy.name}/{model.sha256}.npz", kept_file)
        if kept:
            try:
                store.include(kept_file, model.sha256)
            except ValueError as error:  # an earlier layout, or damaged: asked again
                self.logger.warning("kept signals not read: asked again", extra={"problem": str(error)})
        seeded = store.include_shipped(model.sha256, self.signals_dir)
        kept_at_decision = seed_kept_signals(store, model.sha256, (s for row in labelled for s in row.signals.values()),
                                             lambda problem: self.logger.warning("kept signals not used",
                                                                                 extra={"problem": problem}))
        store.save()
        if seeded or kept_at_decision:
            self.logger.info("model signals used without asking", extra={"shipped": seeded,
                                                                         "kept_at_decision": kept_at_decision})
        return store, kept_file, kept

    def collect(self, policy_name: str, seconds_left: float | None = None) -> dict[str, Any]:
        """The model's signals for every labelled example; within `seconds_left` (the function's
        remaining time, less a margin) or `complete: false` (the workflow calls it again: what was
        asked is kept)."""
        policy = shipped_policy(policy_name)
        deadline = None if seconds_left is None else time.monotonic() + seconds_left - COLLECT_MARGIN_SECONDS
        examples, times, _, model, failures, complete = self._examples(policy, None, deadline)
        return {"policy": policy.name, "model": model.model_dump(mode="json"), "examples": len(examples),
                "reviewed": len(times), "complete": complete, "not_scored": failures[:20]}
