"""The relearning job: what each step of the relearning workflow (statemachine/relearning.asl.json)
does for one policy. The workflow hands each step to the relearning function (relearning/app.py)
through its queue with a task token; the function answers with the step's output.

- `count`: labels accrued since the last run, per question reviewers' agreement with the model's
  suggestion and corrections of automatic routes (metrics), and whether enough have accrued.
- `collect`: every labelled example (the policy's labelled-examples table and the shipped
  labelled sets) with the model's signals (hidden state, letter logits), asked of the endpoint
  only for examples that lack them, with the request the routing function sends; the signals
  are kept in the head store (`signals/<model sha256>.npz`), so a rerun does not ask again.
- `fit`: each question's head fitted with `make fit`'s code (training.fit_head) on the shipped
  sets and the older reviews, judged against the head in service on the newest reviews and on
  the shipped sets' test split (training.gate: no reviewer more than `max_reviewer_share` of
  either the reviews trained on or those judged on); each candidate and its verdict written under
  `runs/<run>/`, each refusal recorded with its reason; beside each verdict, the question's live
  precision (its sampled checks, `live_precision`), as context.
- `shadow`: each candidate the gate passed serves in shadow (domain/shadow.py): named in its
  question's shadow pointer, the routing functions answer every live item with it beside the head
  in service and count its agreement and, where a reviewer answers, which of the two was right.
  Only a candidate this run's own `fit` stored as passing, its bytes re-hashed (as `promote`).
- `judge_shadow`: not ready until every shadow answered `shadow_items` items or
  `shadow_timeout_seconds` have passed (the workflow waits `shadow_wait_seconds` and asks again, at
  most MAX_SHADOW_LOOKS times: an execution's history has room for that many); then each shadow is
  judged (at least `shadow_items` items, no worse precision on the reviewed ones than the head in
  service), its verdict stored under `runs/<run>/`, and the shadow ended.
- `promote`: each candidate the gate and its shadow passed written to the head store and named in
  service; only a candidate this run's own `fit` stored under `runs/<run>/` with a passing verdict
  and whose shadow this run's `judge_shadow` stored as passing, its bytes still those `fit` hashed
  (the message's claims are checked against the store, never trusted).

The model's signals for the shipped sets start from those shipped for the model, where there are
(`bench/data/signals/<model sha256>.npz`, read by training/signals_store.py), and every signal
is kept in the one signals store that `make fit` and `make fit-history` use.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from aws_lambda_powertools import Logger

from decision_contract import Decision, ModelInfo
from decision_router.adapters.endpoint import DecisionEndpoint
from decision_router.adapters.head_store import PROMOTED, REFUSED, HeadStore
from decision_router.adapters.precision_tally import PrecisionTally
from decision_router.adapters.review import LabelledExamples
from decision_router.adapters.shadow_tally import ShadowTally
from decision_router.adapters.signing_key import SigningKey
from decision_router.domain import shadow
from decision_router.domain.failures import EndpointFailure
from decision_router.domain.heads import Head, read_head
from decision_router.domain.kept_signals import KeptSignals
from decision_router.domain.policies import POLICY_DIR, Policy, load_policy
from decision_router.domain.ports.outcomes import PrecisionTallies
from decision_router.domain.precision import precision_figure, target_of
from decision_router.domain.shadow import ShadowCounts, shadow_verdict
from decision_router.domain.signatures import HEAD_SERVICE, HEAD_SHADOW
from decision_router.question_metrics import question_metric
from decision_router.review.completion import labelled_example
from evaluation.cases import Case, RowError, case_from_row, load_file
from evaluation.runners import RunFailure, Scored
from training import gate, learn
from training.features import Example, case_decisions, examples_of, score_cases
from training.fitting import SHIPPED, TEST_SPLIT, fit_head
from training.scoring import scorer_for
from training.signals_store import SHIPPED_SIGNALS, SignalsStore

from .labels import Synced, seed_kept_signals, signals_of, sync_labels

#: Items asked of the endpoint between two saves of their signals.
CHUNK = 50
#: Time kept back from the function's deadline when collecting: a chunk, its save and the answer.
COLLECT_MARGIN_SECONDS = 180.0
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


@dataclass(frozen=True)
class LabelledRow:
    """A labelled examples table row as the fitter reads it, with its label time."""

    case: Case
    labelled_at: str
    answers: dict[str, str]
    suggested: dict[str, str]  # the model's answer per question, where the model answered
    corrected_auto: bool  # the row is a correction of an automatic route
    reviewer: str | None = None  # the display name the answer gave (None: the row names nobody)
    #: Who answered, authenticated: the row's `reviewer_id` where the stack's key signed it for this
    #: row's execution; None (counted as gate.UNAUTHENTICATED) for every other row.
    reviewer_id: str | None = None
    #: The endpoint's signals kept at decision time, by question ({}: asked of the endpoint).
    signals: dict[str, KeptSignals] = field(default_factory=dict)


def verified_identity(row: Mapping[str, str], key: SigningKey | None) -> str | None:
    """The row's reviewer identity when its signature verifies with `key`; else None. Without a
    key (a run outside a stack) no row's identity can be verified: none counts apart."""
    reviewer_id, execution = (row.get("reviewer_id") or "").strip(), row.get("execution_name") or ""
    if key is None or not reviewer_id or not key.review_verified(execution, reviewer_id, row.get("identity_signature")):
        return None
    return reviewer_id


def read_labels(rows: Sequence[dict[str, str]], key: SigningKey | None = None) -> tuple[list[LabelledRow], list[str]]:
    """The table's rows as cases (a row that does not parse is reported, never fatal), each with
    its verified reviewer identity (`verified_identity`)."""
    found, problems = [], []
    policies: dict[str, Any] = {}  # each policy loaded once, not once a row (its heads are validated at load)
    for number, row in enumerate(rows, start=1):
        try:
            case = case_from_row(labelled_example(row), "labelled-examples", number, policies)
            decisions = json.loads(row.get("model_decisions") or "[]")
        except (ValueError, KeyError) as error:
            problems.append(f"{row.get('item_id', '?')}: {error}")
            continue
        suggested = {d["question"]: d["option_id"] for d in decisions if d.get("source") == "model" and d.get("option_id")}
        try:
            signals = signals_of(row)
        except ValueError as error:  # pydantic's ValidationError too: the endpoint is asked instead
            problems.append(f"{row.get('item_id', '?')}: signals not read, asked of the endpoint ({error})")
            signals = {}
        found.append(LabelledRow(case, row.get("labelled_at", ""), json.loads(row["answers"]), suggested,
                              (row.get("route_reason") or "").startswith("correction by"),
                              (row.get("reviewer") or "").strip() or None, verified_identity(row, key), signals))
    return found, problems


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


class Relearning:
    """The steps of one policy's relearning run."""

    def __init__(self, store: HeadStore, labels: LabelledExamples, endpoint: Callable[[Sequence[Decision]], Any], *,
                 shipped: Sequence[Path] = SHIPPED, min_new_labels: int = 200, work_dir: Path | None = None,
                 logger: Logger | None = None, today: Callable[[], date] = date.today,
                 max_reviewer_share: float = gate.MAX_REVIEWER_SHARE,
                 announce: Callable[[dict[str, Any]], Any] | None = None, shadow_items: int = 0,
                 shadow_timeout_seconds: float = 7 * 86400, shadow_check_seconds: int = 900, tally: ShadowTally | None = None,
                 shadow_min_reviewed: int = shadow.MIN_REVIEWED, shadow_max_disagreement: float = shadow.MAX_DISAGREEMENT,
                 signing_key: SigningKey | None = None, head_signing_key: SigningKey | None = None,
                 clock: Callable[[], float] = time.time, signals_dir: Path = SHIPPED_SIGNALS,
                 precision: PrecisionTallies | None = None, label_retention_days: int = 365,
                 full_read_after_seconds: float = 2 * 86400):
        """`endpoint(probe)`: the runner the signals are asked of (EndpointSignals in AWS; tests
        may pass the in-process engine's). `max_reviewer_share`: the most one reviewer may give of
        the reviews a candidate trains on, and of those it is judged on. `announce(notice)`: each
        promotion announced (the promotion topic's PromotionNotices.announce in AWS); None: logged only.
        `shadow_items`: the live items each candidate must answer in shadow before it is judged
        again; `shadow_timeout_seconds`: how long the workflow waits for them (then the candidate
        is refused), looking every `shadow_check_seconds` (further apart where that would be more
        than MAX_SHADOW_LOOKS looks: `shadow_wait_seconds`); of them at least `shadow_min_reviewed`
        reviewed, and at most `shadow_max_disagreement` answered otherwise than the head in service
        among the unreviewed (domain/shadow.py `shadow_verdict`). `tally`: the shadow heads'
        counts (default: the head store's history table).
        `signals_dir`: the shipped signals (training/signals_store.py). `signing_key`: the stack's
        key, which verifies who answered each label (the gate counts verified identities only);
        `head_signing_key`: the stack's head key, which signs each head the gate (and its shadow) passed.
        `label_retention_days`: labels older are dropped from those kept (the table's TTL, LabelRetentionDays);
        `full_read_after_seconds`: when the policy's partition is read whole a second time after the
        first run (the longest review wait: relearning/labels.py)."""
        if label_retention_days < 1 or full_read_after_seconds < 0:
            raise ValueError(f"label_retention_days {label_retention_days!r} must be 1 or more, "
                             f"full_read_after_seconds {full_read_after_seconds!r} 0 or more")
        self.label_retention_days, self.full_read_after_seconds = label_retention_days, full_read_after_seconds
        if not 0 < max_reviewer_share <= 1:
            raise ValueError(f"max_reviewer_share {max_reviewer_share!r}: must be more than 0 and at most 1")
        if shadow_items < 0 or shadow_timeout_seconds <= 0 or shadow_check_seconds < 1:
            raise ValueError(f"shadow_items {shadow_items!r} must be 0 or more, shadow_timeout_seconds "
                             f"{shadow_timeout_seconds!r} more than 0, shadow_check_seconds {shadow_check_seconds!r} "
                             "at least 1")
        if max(shadow_timeout_seconds, shadow_check_seconds) > MAX_SHADOW_SECONDS:
            raise ValueError(f"RelearningShadowTimeoutSeconds {shadow_timeout_seconds!r} and RelearningShadowCheckSeconds "
                             f"{shadow_check_seconds!r}: each at most {MAX_SHADOW_SECONDS} (360 days; an execution "
                             "lasts at most a year)")
        self.shadow_items, self.shadow_timeout_seconds = shadow_items, shadow_timeout_seconds
        self.shadow_check_seconds = shadow_check_seconds
        # What the workflow waits between two looks (the shadow step's check_seconds).
        self.shadow_wait_seconds = shadow_wait_seconds(shadow_check_seconds, shadow_timeout_seconds)
        if shadow_min_reviewed < 0 or not 0 <= shadow_max_disagreement <= 1:
            raise ValueError(f"shadow_min_reviewed {shadow_min_reviewed!r} must be 0 or more, shadow_max_disagreement "
                             f"{shadow_max_disagreement!r} from 0 to 1")
        self.shadow_min_reviewed, self.shadow_max_disagreement = shadow_min_reviewed, shadow_max_disagreement
        self.signing_key, self.head_signing_key = signing_key, head_signing_key
        self.tally = tally or ShadowTally(store.history_table)
        self.precision = precision or PrecisionTally(store.history_table)  # the live precision's tallies
        self.clock, self.signals_dir = clock, signals_dir
        self.store, self.labels, self.endpoint = store, labels, endpoint
        self.shipped, self.min_new_labels = list(shipped), min_new_labels
        self.max_reviewer_share = max_reviewer_share
        self.announce = announce
        self.work_dir = work_dir or Path(tempfile.gettempdir()) / "relearning"
        self.logger = logger or Logger(service="relearning")
        self.today = today
        if self.shadow_wait_seconds > shadow_check_seconds:
            self.logger.info(f"RelearningShadowCheckSeconds {shadow_check_seconds} would look more than "
                             f"{MAX_SHADOW_LOOKS} times in RelearningShadowTimeoutSeconds {shadow_timeout_seconds:g}: "
                             f"the workflow looks every {self.shadow_wait_seconds} s instead")

    # ------------------------------------------------------------------------------ count
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

    # ------------------------------------------------------------------------------ collect
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

    # ------------------------------------------------------------------------------ fit
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

    def head_in_service(self, policy: Policy, question_id: str) -> tuple[Head | None, str]:
        """The head deciding the question now, as the routing functions load it (the store's, verified;
        else the shipped one), and its version."""
        shipped = policy.question(question_id).learned_head
        try:
            pointer = self.store.pointer(policy.name, question_id)
            key = self.head_signing_key
            if pointer is not None and key is not None and not key.head_verified(pointer, HEAD_SERVICE):
                # the routing functions refuse it too (intake/live_heads.py): not what decides
                raise ValueError(f"head {pointer.head_version}: its pointer carries no signature made for service")
            if pointer is not None:
                head = read_head(self.store.read(pointer), pointer.sha256, f"head {pointer.head_version}",
                                 named_by="the pointer's")
                if not policy.head_problems(policy.question(question_id), head):
                    return head, head.version
        except Exception as error:  # noqa: BLE001 - the routers fall back the same way
            self.logger.warning("head in the store unreadable; judging against the shipped head",
                                extra={"question": question_id, "reason": str(error)})
        return shipped, shipped.version if shipped else "letters"

    # ------------------------------------------------------------------------------ shadow
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

    # ------------------------------------------------------------------------------ promote
    def _head_signature(self, policy: str, question: str, sha256: str, head_version: str, purpose: str) -> str:
        """The head signing key's signature of what the gate passed, for `purpose` ("" without a key:
        unsigned): HEAD_SHADOW when its shadow starts, HEAD_SERVICE only in `promote`, after the
        shadow's verdict (and any approval), so a shadow's signature never puts a head in service."""
        key = self.head_signing_key
        return key.head_signature(policy, question, sha256, head_version, purpose) if key is not None else ""

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
