"""`make fit-history`: a policy from a help desk's history, in one command.

    python -m training.history --data train.jsonl --test test.jsonl --text text --label label --out dir --targets map.json
    make fit-history DATA=train.csv TEST=test.csv TEXT=subject,body LABEL=group OUT=dir TARGETS=map.json [MODEL=none REPLACE=1 ...]

A user's export of past items (CSV with a header, or JSONL: one object a line), the text fields
and the label field named on the command line, becomes:

- `dir/policy.json`: one ticket question whose options are the labels seen in DATA (any number:
  beyond 16 the endpoint is asked for the model's signals only and the head answers), loadable by
  the routing function's own loader (this command loads it before it ends);
- `dir/heads/<question>.json`: the head, fitted on DATA (TF-IDF word and character n-grams of the
  text and the model's hidden state, the model's weight chosen on a held-out fifth of DATA), with
  its temperature and its `min_confidence` read from 5-fold out-of-fold answers over DATA: the
  lowest at which the automatic answers' precision is, with 95 % confidence (its one-sided
  Clopper–Pearson lower bound), at least the question's target (`--max-error`, 97 % by default);
- `dir/predictions.jsonl`: one line per TEST item, `{"text", "gold", "answer", "confidence",
  "auto"}`, scored through the routing function's own judging (`judging.model_entry`);
- `dir/report.json`: `n_train`, `n_test`, `options`, `accuracy`, `macro_f1`, `ece`, `auto_share`,
  `auto_precision`, `auto_precision_lower_bound`, and `baseline` with the same figures for the text
  classifier a user would compare with (TF-IDF word 1-2 + character 2-5-grams, logistic regression
  C=10), fitted in the same run on the same split, its threshold chosen the same way; and whether
  TEST kept the promise (`target_precision`, `target_missed`, `missed_by`), or, when no threshold
  qualified, `routed_alone: false` and `items_needed` (see `promise`).

Each option routes to one of the deployment's destinations (`DESTINATION_QUEUES` of the ticket
function in template.yaml, or `--destinations`), checked before anything is scored: `--targets`
maps the labels onto them (`"*"`: every other label; `own`: each label a destination of its own
name); without it the labels must be destinations' names, else a starting map (each label a
destination of its own name) is written to OUT/targets.start.json and the run stops, saying to edit
and pass it (from anywhere), or to give the new destinations queues with `make queues TARGETS=<the map>`
(local/destinations.py). OUT must be empty unless
`--replace`; the policy's name is `--name`, by default OUT's (announced).

TEXT may name several comma-separated fields: one is the ticket's body; of several, the first is
its subject and the others, one a paragraph, its body (what a ticket to route must carry where).
A TEST item whose gold label is not an option (out of scope) is right only when it is not routed
automatically; the report counts those apart too. `--out-of-scope-label` names a label that means
"none of these" (CLINC150's `oos`): its DATA items are never an option (their hidden states are
scored and the novelty part's catch of them reported), its TEST items are out of scope. The head
carries a novelty part (training/novelty.py) whose threshold sends `--novelty-budget` of in-scope
items to review, chosen out of fold on DATA; with out-of-scope TEST items the report gives what it
catches against what the head's thresholds alone catch, and the novelty score's AUROC.
Labels with fewer than MIN_EXAMPLES training items are reported and, as RARE says, merged into one
option `other` (`merge`) or left out of the options, so that their items go to review (`review`).
Exports are read as they come (training/history_policy.py): the CSV delimiter sniffed, a byte
order mark dropped, `--encoding`, `--skip-unlabelled`, `--merge-labels` for labels spelled
several ways (refused, named, otherwise).

Before scoring, the text alone is fitted at a few training sizes (`text_curve`) and the command
says whether the model's signals are likely to help at this size; `--text-only` scores nothing
and fits the head on the text alone. The last line printed is the verdict (`last_line`).

The model's signals (hidden state) are cached per model file (its sha256) and per request under
~/.cache/decision-router/signals/ (`--cache`): a second run scores nothing again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import socket
import sys
import tempfile
import time
import typing
import warnings
from collections import Counter
from collections.abc import Sequence as SequenceABC
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import f1_score, roc_auc_score
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from decision_contract import DEFAULT_LAYOUT, MAX_OPTIONS, Decision, DecisionResult, Layout, ModelInfo
from decision_contract.signals import SHARD_SUFFIX, read_keys, read_shard, request_key, write_shard
from decision_router import sentences
from decision_router.domain.heads import FORMAT, LETTERED_OPTIONS, MAX_HEAD_BYTES, MAX_MANY_OPTIONS_HEAD_BYTES
from decision_router.domain.judging import UNLIKE, model_entry, words_entry
from decision_router.domain.model_requests import question_decision
from decision_router.domain.policies import Policy, Question, load_policy
from evaluation import metrics, text_classifier
from evaluation.runners import RunFailure, Runner
from local.destinations import nearest_destination

from . import history_report, learn, novelty
from .history_policy import (
    MERGED,
    HistoryError,
    ReadStats,
    Vocabulary,
    check_destinations,
    key_of,
    question_of,
    question_sha256,
    raw_policy,
    read_rows,
    read_targets,
    spellings,
    starting_targets,
    states,
    vocabulary,
)
from .learn import stratified_sample
from .thresholds import judge, promise, verdict

DEFAULT_CACHE = Path.home() / ".cache/decision-router/signals"
#: Weights in a head's rows (options x terms + hidden width) at most; make fit-history keeps the
#: most frequent terms so a many-option head stays within MAX_MANY_OPTIONS_HEAD_BYTES.
MAX_WEIGHTS = 1_600_000
#: The same for a head of at most 16 options (MAX_HEAD_BYTES, 2 MB).
LETTERED_WEIGHTS = 150_000
#: The model's blocks against the lexical ones, chosen on the held-out fifth (0: text only).
MODEL_WEIGHTS = (0.0, 1.0)
#: The regularisation the model's weight is chosen at; then, for that weight, the one of C_CHOICES
#: with the least held-out log loss (a few labels a option want a stronger prior than thousands).
HEAD_C = 10.0
C_CHOICES = (1.0, 3.0, 10.0, 30.0, 100.0)
#: Fewer training rows an option than this, on average, and the head keeps terms seen in a single
#: row (learn.MIN_DF otherwise): with an item or two an option, such a term is often all the
#: evidence its option has (the text classifier keeps them at every size).
FEW_ROWS_AN_OPTION = 5
#: Fewer held-out items of options the fitting rows saw than this, and neither is chosen: C stays
#: HEAD_C (the text classifier's) and the model's weight the largest asked for.
MIN_JUDGED = 10
#: The temperature and the threshold are read from out-of-fold logits of this many folds over the
#: grid sample (every row held out once); the model's weight from the first fold alone.
FOLDS = 5
#: A larger history is learned from stratified samples, so that fitting takes minutes and bounded
#: memory at a million rows: the model's weight, the temperature and the threshold are chosen on at
#: most GRID_ROWS rows (the weight on a held-out fifth of them, the temperature and the threshold
#: out of fold over all of them), and the head and the text classifier it is compared with are
#: fitted on the same FIT_ROWS at most. Every fitted row is embedded by the sentence encoder (1.5 ms
#: a short query, 4 ms a ticket-length text here), which is most of a large export's fit: at
#: 20,000 rows a text-only fit of 100,000 tickets takes minutes (docs/benchmarks/history-scale.md).
GRID_ROWS, FIT_ROWS = 20_000, 20_000
BASELINE_ROWS = FIT_ROWS
#: Items a shard when the batch scorer scores in this process (an interrupted run resumes at its shard).
BATCH_CHUNK = 2000



# ----------------------------------------------------------------------------------- signals
@dataclass(frozen=True)
class Gathered:
    """The signals of a list of request keys, row i for key i."""

    hidden: np.ndarray  # float16, n x width
    logits: list[np.ndarray]
    mass: np.ndarray
    versions: list[str]

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray, float, str]:
        return self.hidden[i].astype(np.float32), self.logits[i], float(self.mass[i]), self.versions[i]


class SignalCache:
    """The model's signals per request key, in shard files (decision_contract.signals: hidden
    states in float16) under one folder per model (its sha256). What the batch scorer writes is
    a shard too, so its output joins the cache as it is. Only the keys are indexed in memory; the
    signals are read from the shards when gathered, one shard at a time."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._shards: list[Path] = []
        self._keys: list[np.ndarray] = []  # per shard, its keys as 32 raw bytes
        self._index: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # sorted keys, shard, row
        self._pending: dict[str, DecisionResult] = {}  # answers not yet written (no folder: kept here)
        if folder is not None and folder.is_dir():
            for shard in sorted(folder.glob(f"*{SHARD_SUFFIX}")):
                self._add(shard)

    def _add(self, shard: Path) -> None:
        self._shards.append(shard)
        self._keys.append(read_keys(shard))  # the keys alone: the signals are read when gathered
        self._index = None

    def __len__(self) -> int:
        return sum(len(k) for k in self._keys) + len(self._pending)

    def _lookup(self, keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(found, shard, row) per key: a sorted index over every shard's keys, searched at once
        (n log n, never a scan per key)."""
        if self._index is None:
            every = np.concatenate(self._keys) if self._keys else np.zeros(0, dtype="S32")
            shard = np.concatenate([np.full(len(k), i, dtype=np.int32) for i, k in enumerate(self._keys)]) if self._keys \
                else np.zeros(0, dtype=np.int32)
            row = np.concatenate([np.arange(len(k), dtype=np.int64) for k in self._keys]) if self._keys \
                else np.zeros(0, dtype=np.int64)
            order = np.argsort(every, kind="stable")
            self._index = every[order], shard[order], row[order]
        sorted_keys, shards, rows = self._index
        if not len(sorted_keys):
            return np.zeros(len(keys), bool), np.zeros(len(keys), np.int32), np.zeros(len(keys), np.int64)
        wanted = _raw_keys(keys)
        at = np.minimum(np.searchsorted(sorted_keys, wanted), len(sorted_keys) - 1)
        return sorted_keys[at] == wanted, shards[at], rows[at]

    def missing(self, keys: Sequence[str]) -> list[int]:
        """Indexes of the first occurrence of each key the cache lacks."""
        found, _, _ = self._lookup(keys)
        seen: set[str] = set()
        out = []
        for i in np.flatnonzero(~found):
            key = keys[i]
            if key not in seen and key not in self._pending:
                seen.add(key)
                out.append(int(i))
        return out

    def put(self, key: str, result: DecisionResult) -> None:
        self._pending[key] = result

    def save(self) -> None:
        """The answers put since the last save, as one more shard."""
        if self.folder is None or not self._pending:
            return
        pending, self._pending = self._pending, {}
        keys = list(pending)
        shard = write_shard(self.folder / f"local-{time.time_ns()}{SHARD_SUFFIX}", self.model_of(pending), keys,
                            [pending[k].hidden_state or [] for k in keys], [pending[k].option_logits for k in keys],
                            [pending[k].allowed_token_mass for k in keys], [pending[k].prompt_version for k in keys])
        self._add(shard)

    @staticmethod
    def model_of(results: dict[str, DecisionResult]) -> str:
        return next(iter(results.values())).model.sha256

    def adopt(self, shards: Sequence[Path]) -> None:
        """Shards written elsewhere (the batch scorer's output) moved into the cache."""
        for shard in shards:
            if self.folder is None:
                self._add(shard)
                continue
            self.folder.mkdir(parents=True, exist_ok=True)
            target = self.folder / shard.name
            if target.exists():
                target = self.folder / f"{shard.name[:-len(SHARD_SUFFIX)]}-{time.time_ns()}{SHARD_SUFFIX}"
            shutil.move(str(shard), target)
            self._add(target)

    def gather(self, keys: Sequence[str]) -> Gathered:
        """The signals of every key (each must be cached), reading each shard once."""
        self.save()
        found, shard_of, row_of = self._lookup(keys)
        pending = [i for i in np.flatnonzero(~found) if keys[i] in self._pending]
        if int((~found).sum()) != len(pending):
            raise RunFailure(f"{int((~found).sum()) - len(pending)} item(s) have no signals after scoring")
        hidden: np.ndarray | None = None
        logits: list[np.ndarray] = [np.zeros(0)] * len(keys)
        mass = np.zeros(len(keys), dtype=np.float32)
        versions = [""] * len(keys)
        for shard_number in np.unique(shard_of[found]):
            shard = read_shard(self._shards[int(shard_number)])
            here = np.flatnonzero(found & (shard_of == shard_number))
            rows = row_of[here]
            if hidden is None:
                hidden = np.zeros((len(keys), shard.hidden.shape[1]), dtype=np.float16)
            hidden[here] = shard.hidden[rows]
            mass[here] = shard.mass[rows]
            for i, r in zip(here, rows):
                logits[i] = shard.logits_of(int(r)).astype(np.float64)
                versions[i] = shard.versions[int(shard.version[r])]
        for i in pending:
            result = self._pending[keys[i]]
            if hidden is None:
                hidden = np.zeros((len(keys), len(result.hidden_state or [])), dtype=np.float16)
            hidden[i] = np.asarray(result.hidden_state, dtype=np.float16)
            logits[i], mass[i], versions[i] = np.asarray(result.option_logits), result.allowed_token_mass, result.prompt_version
        return Gathered(hidden if hidden is not None else np.zeros((len(keys), 0), np.float16), logits, mass, versions)


def _raw_keys(keys: Sequence[str]) -> np.ndarray:
    return np.array([bytes.fromhex(k) for k in keys], dtype="S32")


def score(runner: Runner, model: ModelInfo, request: Callable[[int], Decision], keys: Sequence[str], cache: SignalCache, *,
          what: str, progress: bool = True, workers: int = 4, save_every: int = 500) -> None:
    """Ask the endpoint, one request per decision, for every decision whose key the cache lacks
    (`request(i)` is the decision of `keys[i]`); a progress bar says how many are left."""
    todo = cache.missing(keys)
    bar = tqdm(total=len(todo), desc=f"scoring {what} ({len(keys) - len(todo)} cached)", unit="item",
               disable=not progress or not todo, file=sys.stderr, mininterval=2.0)

    def one(index: int) -> None:
        result = runner.decide([request(index)]).results[0]
        if result.hidden_state is None or result.model.sha256 != model.sha256:
            raise RunFailure("the endpoint returned no hidden state, or another model answered")
        cache.put(keys[index], result)
        bar.update(1)

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for start in range(0, len(todo), save_every):
                list(pool.map(one, todo[start:start + save_every]))
                cache.save()
    finally:
        cache.save()
        bar.close()


class Requests(SequenceABC):
    """The decisions of some rows, built when read (the batch scorer's writer takes a sequence)."""

    def __init__(self, request: Callable[[int], Decision], rows: Sequence[int]) -> None:
        self.request, self.rows = request, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return [self.request(i) for i in self.rows[index]]
        return self.request(self.rows[index])


def score_in_process(engine: Any, request: Callable[[int], Decision], keys: Sequence[str], cache: SignalCache, *,
                     what: str, say: Callable[[str], None], chunk: int = BATCH_CHUNK) -> None:
    """Score what the cache lacks with the batch scorer (decision_server.batch) on the engine in
    this process, a chunk at a time, each chunk's signals joining the cache as soon as it is done
    (an interrupted run resumes at the chunk it was in)."""
    from decision_server.batch import score_folder, write_inputs

    todo = cache.missing(keys)
    if not todo:
        return
    say(f"scoring {what}: {len(todo)} items ({len(keys) - len(todo)} cached), {chunk} a shard")
    for start in range(0, len(todo), chunk):
        with tempfile.TemporaryDirectory(prefix="fit-history-") as tmp:
            inputs, outputs = Path(tmp) / "decisions", Path(tmp) / "signals"
            write_inputs(Requests(request, todo[start:start + chunk]), inputs, shards=1)
            score_folder(engine, inputs, outputs, log=say)
            _refuse_errors(outputs)
            cache.adopt(sorted(outputs.glob(f"*{SHARD_SUFFIX}")))


def sagemaker_preflight(args: argparse.Namespace, say: Callable[[str], None]) -> Any:
    """Before anything is read, embedded or scored: the estimate from the export's row count and
    the price file (printed even without an account), then the region, the credentials and the
    stack (SageMakerScoring.from_stack); without --yes it stops there. The scorer."""
    from .sagemaker_scoring import SageMakerScoring, check_instances, estimate_for, offer

    check_instances(args.instances)  # before the estimate, which assumes a valid count
    rows = [export_rows(path, args.limit) for path in (args.data, args.test)]
    if None in rows:
        say("the estimate waits for the export on S3 to be read: it is printed before the job starts")
    else:
        say(f"estimate for every row of the export ({sum(rows):,}; rows that ask the same are scored once):")
        for line in estimate_for(sum(rows), args.instances, offer(args.instance_type)).text.splitlines():
            say(line)
    scoring = SageMakerScoring.from_stack(args.stack, instances=args.instances, instance_type=args.instance_type, say=say)
    if not args.yes:
        raise HistoryError("Scoring on SageMaker starts paid instances: pass --yes (make fit-history ... YES=1) once the "
                           "estimate above suits.")
    return scoring


def export_rows(path: str | Path, limit: int | None) -> int | None:
    """The rows of a local export, counted without parsing them (a CSV's records, a JSONL's
    lines); None for one on S3 or not there (reading it says why)."""
    import csv

    if str(path).startswith("s3://") or not Path(path).is_file():
        return None
    with Path(path).open(encoding="utf-8", errors="replace", newline="") as handle:
        if Path(path).suffix.lower() in (".jsonl", ".json", ".ndjson"):
            n = sum(1 for line in handle if line.strip())
        else:
            n = max(0, sum(1 for record in csv.reader(handle) if record) - 1)  # less the header
    return min(n, limit) if limit is not None else n


def score_on_sagemaker(args: argparse.Namespace, requests_of: Sequence[tuple[Callable[[int], Decision], int]],
                       say: Callable[[str], None], scoring: Any = None) -> tuple[ModelInfo, SignalCache]:
    """Every distinct request scored in one SageMaker Processing job on the stack's image and
    model (training.sagemaker_scoring; `scoring`: the one sagemaker_preflight checked); its
    signals join the local cache of that model."""
    from decision_server.batch import write_inputs

    from .sagemaker_scoring import SageMakerScoring, shard_count

    scoring = scoring or SageMakerScoring.from_stack(args.stack, instances=args.instances,
                                                     instance_type=args.instance_type, say=say)
    rows: list[Decision] = []
    seen: set[str] = set()
    for request, n in requests_of:
        for i in range(n):
            decision = request(i)
            content = request_key("", decision)  # the model is not known before the job answers
            if content not in seen:
                seen.add(content)
                rows.append(decision)
    with tempfile.TemporaryDirectory(prefix="fit-history-") as tmp:
        inputs, outputs = Path(tmp) / "decisions", Path(tmp) / "signals"
        write_inputs(rows, inputs, shard_count(len(rows), args.instances))
        del rows
        model = scoring.run(inputs, outputs, yes=args.yes)
        _refuse_errors(outputs)
        cache = SignalCache(args.cache / model.sha256 if str(args.cache) else None)
        cache.adopt(sorted(outputs.glob(f"*{SHARD_SUFFIX}")))
    return model, cache


def _refuse_errors(outputs: Path) -> None:
    """The batch scorer's errors files: a row it could not score stops the fit, named."""
    from decision_server.batch import ERRORS_SUFFIX

    errors = [(path.name, line) for path in sorted(outputs.glob(f"*{ERRORS_SUFFIX}"))
              for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if errors:
        shown = "; ".join(f"{name}: {line}" for name, line in errors[:3])
        raise HistoryError(f"{len(errors)} request(s) could not be scored ({shown})")


# ----------------------------------------------------------------------------------- fitting
@dataclass
class Fitted:
    document: dict[str, Any]
    holdout: dict[str, Any]
    baseline_threshold: float | None
    baseline_probabilities: np.ndarray  # on TEST


def _signals(st: Sequence[Any], hidden: np.ndarray, gold: np.ndarray, fields: Sequence[str],
             encoder: str | None) -> learn.Signals:
    # the letters are not read (a many-option question has none): one constant column, weight 0
    return learn.Signals.build(st, hidden, list(np.zeros((len(st), 1))), gold, [str(i) for i in range(len(st))],
                               text_fields=fields, categorical_fields=[], encoder=encoder)


def fit(raw: dict[str, Any], train_states: list[Any], train_hidden: np.ndarray, gold: np.ndarray,
        test_states: list[Any], test_hidden: np.ndarray, *, model: ModelInfo, prompt_version: str, max_error: float,
        seed: int, data: list[str], say: Callable[[str], None], terms_cap: int | None = None,
        model_weight: float | None = None, novelty_budget: float | None = novelty.DEFAULT_BUDGET,
        out_of_scope_hidden: np.ndarray | None = None, out_of_scope_states: list[Any] | None = None,
        encoder: str | None = sentences.DEFAULT_ENCODER) -> Fitted:
    question = raw["questions"][0]
    k = len(question["options"])
    fields = [s["key"] for s in raw["state"]]
    rows = stratified_sample(gold, FIT_ROWS, seed)
    if len(rows) < len(gold):
        say(f"  {len(gold)} training rows: the head is fitted on a stratified sample of {len(rows)}")
    started = time.perf_counter()
    s = _signals([train_states[i] for i in rows], train_hidden[rows].astype(np.float64), gold[rows], fields, encoder)
    # TEST is read here by the text classifier alone; the head judges it as routing does (run)
    test = _signals(test_states, test_hidden, np.zeros(len(test_states), dtype=int), fields, None)
    if encoder is not None:
        say(f"  {len(s)} items embedded by {encoder}: {time.perf_counter() - started:.0f} s")
    n = len(s)
    grid = stratified_sample(s.gold, GRID_ROWS, seed)
    parts = [grid[part] for part in metrics.fold_indices(len(grid), FOLDS, seed)]
    held = parts[0]  # the model's weight is chosen on this fifth; it is also the first fold
    fit_rows = np.setdiff1d(grid, held)
    budget = MAX_WEIGHTS if k > MAX_OPTIONS else LETTERED_WEIGHTS
    width = train_hidden.shape[1] + (0 if s.sentences is None else s.sentences.shape[1])
    max_terms = min(learn.MAX_TERMS, max(500, budget // k - width), terms_cap or learn.MAX_TERMS)
    formula = "normalized_peak"
    seen_options = len(np.unique(s.gold))
    min_df = 1 if n < FEW_ROWS_AN_OPTION * seen_options else learn.MIN_DF
    if min_df == 1:
        say(f"  {n} rows for {seen_options} options (fewer than {FEW_ROWS_AN_OPTION} an option): the head keeps terms seen "
            "in one row too")

    def space_on(rows: np.ndarray) -> learn.Space:
        return learn.Space.fit(s, rows, max_terms=max_terms, min_df=min_df)

    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        space = space_on(fit_rows)
        losses, held_logits = {}, {}
        weights = MODEL_WEIGHTS if model_weight is None else (model_weight,)
        # Only held-out items of options the fitting rows saw judge a choice: an item of an option the
        # head never saw is no choice it could get right, and its log loss favours the flattest head
        # (with a few items a label, most held-out items are such)
        seen = np.isin(s.gold[held], s.gold[fit_rows])
        judged, judged_gold = np.flatnonzero(seen), list(s.gold[held][seen])
        choose = len(judged) >= MIN_JUDGED
        if not choose:
            say(f"  {len(judged)} held-out item(s) of options the fitting rows saw (fewer than {MIN_JUDGED}): nothing is "
                f"chosen, C {HEAD_C:g} and the model's weight {weights[-1]:g}")
        fitted: dict[float, learn.Linear] = {}  # at HEAD_C, by model weight
        for weight in weights if choose else weights[-1:]:
            started = time.perf_counter()
            fitted[weight] = learn.fit_linear(s, fit_rows, k, HEAD_C, weight, space=space)
            held_logits[weight] = learn.numpy_logits(fitted[weight], s, held)
            if choose:
                losses[weight] = metrics.mean_nll_at(list(held_logits[weight][judged]), judged_gold, 1.0)
                say(f"  head, model weight {weight}: held-out log loss {losses[weight]:.3f} ({time.perf_counter() - started:.0f} s)")
        weight = min(losses, key=lambda w: (round(losses[w], 9), w)) if choose else weights[-1]
        at_C: dict[float, learn.Linear] = {HEAD_C: fitted[weight]}
        c_losses: dict[float, float] = {}
        if choose:
            search_C(lambda C: learn.fit_linear(s, fit_rows, k, C, weight, space=space),
                     lambda linear: learn.numpy_logits(linear, s, held)[judged], judged_gold, at_C, c_losses,
                     lambda C, loss, at, seconds: say(f"  head, model weight {weight}, C {C:g}: held-out log loss {loss:.3f} "
                                                      f"at temperature {at:.2f} ({seconds:.0f} s)"))
        head_C = min(c_losses, key=lambda c: (round(c_losses[c], 9), abs(np.log(c / HEAD_C)))) if choose else HEAD_C
        started = time.perf_counter()
        oof_logits = [learn.numpy_logits(at_C[head_C], s, held)]
        for part in parts[1:]:
            train = np.setdiff1d(grid, part)
            linear = learn.fit_linear(s, train, k, head_C, weight, space=space_on(train))
            oof_logits.append(learn.numpy_logits(linear, s, part))
        oof_rows, oof = np.concatenate(parts), np.vstack(oof_logits)
        say(f"  head out of fold ({len(parts)} folds of {len(grid)} rows): {time.perf_counter() - started:.0f} s")
        temperature = metrics.fit_temperature(list(oof), list(s.gold[oof_rows])).temperature
        readout = judge(learn._softmax_rows(oof, temperature), s.gold[oof_rows], formula, max_error, 5)
        started = time.perf_counter()
        final = learn.fit_linear(s, np.arange(n), k, head_C, weight, space=space_on(np.arange(n)))
        say(f"  head on all {n}: {time.perf_counter() - started:.0f} s")
        started = time.perf_counter()
        base_rows = stratified_sample(s.gold, BASELINE_ROWS, seed)
        base_oof = np.vstack([learn.baseline_probabilities(s, np.intersect1d(np.setdiff1d(grid, part), base_rows), part, k)
                              for part in parts])
        base_readout = judge(list(base_oof), s.gold[oof_rows], formula, max_error, 5)
        base_test = learn.baseline_probabilities(s, base_rows, np.arange(len(test)), k, test)
        base_columns = text_classifier.columns_read(s.classifier_counts.rows(base_rows))
        left_out = [f"{c['read']:,} of its {c['seen']:,} {kind} n-gram columns"
                    for kind, c in base_columns.items() if c["read"] < c["seen"]]
        say(f"  text classifier (TF-IDF + logistic regression): {time.perf_counter() - started:.0f} s"
            + (f"; it read the most frequent {' and '.join(left_out)}" if left_out else ""))
    blocks = final.blocks(s)
    blocks.pop("letters", None)
    reads_model = "hidden" in blocks
    document = {
        "format": FORMAT, "version": "", "question_sha256": question_sha256(raw),
        **({"model_sha256": model.sha256, "hidden_size": model.hidden_size, "prompt_version": prompt_version} if reads_model else {}),
        "options": [o["id"] for o in question["options"]], **blocks, "temperature": round(temperature, 4),
        "thresholds": {"min_confidence": readout.min_confidence if readout.min_confidence is not None else 1.0, "min_margin": 0.0},
        "fit": {"examples": n, **({"sampled_from": len(gold)} if n < len(gold) else {}),
                "fitted_on": date.today().isoformat(), "data": data, "regularisation": head_C,
                "model_weight": weight, "folds": len(parts), "cv_accuracy": round(readout.accuracy, 4), "cv_ece": round(readout.ece, 4),
                "text_only_cv_accuracy": round(base_readout.accuracy, 4)},
    }
    # None: no novelty part (a head on the text alone without an encoder: nothing it could read
    # would not bind it to a model)
    if novelty_budget is not None and (reads_model or s.sentences is not None):
        started = time.perf_counter()
        surprise = novelty.Surprise(oof_rows, novelty.Surprise.of(np.vstack(learn._softmax_rows(oof, temperature))))
        outside = None
        if out_of_scope_states:
            if out_of_scope_hidden is None or not len(out_of_scope_hidden):
                out_of_scope_hidden = np.zeros((len(out_of_scope_states), s.hidden.shape[1]))
            outside = _signals(out_of_scope_states, out_of_scope_hidden, np.zeros(len(out_of_scope_states), dtype=int),
                               fields, encoder)
            logits = learn.numpy_logits(final, outside, np.arange(len(outside)))
            surprise.out_of_scope = novelty.Surprise.of(np.vstack(learn._softmax_rows(logits, temperature)))
        said = novelty.attach(
            document, s.gold, max_bytes=MAX_HEAD_BYTES if k <= LETTERED_OPTIONS else MAX_MANY_OPTIONS_HEAD_BYTES,
            sentences=s.sentences, hidden=s.hidden if reads_model else None,
            binding={"model_sha256": model.sha256, "hidden_size": model.hidden_size, "prompt_version": prompt_version},
            budget=novelty_budget, folds=FOLDS, seed=seed, surprise=surprise,
            out_of_scope=None if outside is None else (outside.sentences if "sentence" in document else outside.hidden))
        say(f"  {said} ({time.perf_counter() - started:.0f} s)")
    digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:10]
    document["version"] = f"{raw['name']}.{question['id']}.{document['fit']['fitted_on']}.{digest}"
    holdout = {"rows": len(held), "grid_rows": len(grid), "folds": len(parts), "fitted_rows": n, "model_weight": weight,
               "judged_rows": len(judged), "min_df": min_df, "log_loss": {str(w): v for w, v in losses.items()}, "regularisation": head_C,
               "log_loss_by_C": {f"{c:g}": v for c, v in c_losses.items()},
               "accuracy": readout.accuracy, "min_confidence": readout.min_confidence, "auto_share": readout.auto_routed_share,
               "auto_precision": readout.auto_routed_accuracy, "auto_precision_lower_bound": readout.auto_routed_lower_bound,
               "items_needed": readout.items_needed,
               "baseline_accuracy": base_readout.accuracy, "baseline_min_confidence": base_readout.min_confidence,
               "terms": len(final.space.terms), "baseline_rows": len(base_rows), "baseline_columns": base_columns}
    return Fitted(document, holdout, base_readout.min_confidence, base_test)


def search_C(fit_at: Callable[[float], learn.Linear], held_logits: Callable[[learn.Linear], np.ndarray],
             held_gold: list[int], at_C: dict[float, learn.Linear], losses: dict[float, float],
             said: Callable[[float, float, float, float], None]) -> None:
    """C by the held-out log loss at its own best temperature (the head is calibrated after, so a
    large C's overconfidence is not held against it, only how well it ranks the options), searched
    from HEAD_C (its head in `at_C`) one step of C_CHOICES at a time: up while the loss falls, or,
    when the first step up does not lower it, down while it falls (the loss has one low point in C:
    the C's beyond a rise are not fitted). Fills `at_C` and `losses` with every C tried;
    `said(C, loss, temperature, seconds)`."""
    def tried(C: float) -> float:
        started = time.perf_counter()
        if C not in at_C:
            at_C[C] = fit_at(C)
        logits = list(held_logits(at_C[C]))
        at = metrics.fit_temperature(logits, held_gold).temperature
        losses[C] = metrics.mean_nll_at(logits, held_gold, at)
        said(C, losses[C], at, time.perf_counter() - started)
        return round(losses[C], 9)

    best = tried(HEAD_C)
    larger = [C for C in C_CHOICES if C > HEAD_C]
    smaller = [C for C in reversed(C_CHOICES) if C < HEAD_C]
    for direction in (larger, smaller):
        previous = HEAD_C
        for C in direction:
            loss = tried(C)
            if loss >= best:
                break
            best, previous = loss, C
        if previous != HEAD_C:  # the loss fell this way: the other way it would rise
            return


# ----------------------------------------------------------------------------------- before scoring
#: Training rows at which the text alone is fitted before anything is scored (`text_curve`), at
#: most CURVE_ROWS of them, measured on a held-out fifth: seconds, where scoring takes hours.
CURVE_SIZES = (50, 100, 200, 400, 800, 1600, 3200)
CURVE_ROWS = 4000
#: The model a --text-only run names in its head's TEST judging: none was asked (the head reads
#: the text alone, so nothing in the answer is read but its shape).
TEXT_ONLY_MODEL = ModelInfo(file="(none: --text-only)", bytes=0, sha256="0" * 64, context_size=0, threads=0, gpu_layers=0,
                            llama_cpp_python_version="", hidden_size=1)
#: What the embedded model's hidden state added over the same head on the text alone, Banking77,
#: criterion first, each head's C chosen (docs/benchmarks/public.md, bench/learning_curve.py):
#: (training items per label seen, accuracy points added).
HIDDEN_STATE_GAINS = ((1.25, 1.3), (1.7, 1.8), (13.0, 1.9), (130.0, 0.9))
#: Items a second the embedded model scores on this repository's 2-core machine, by the signals
#: decisions' prompt layout, for the outlook's estimate: the full public sets' runs
#: (docs/benchmarks/public.md), 11 to 12 items/s criterion first (the criterion is evaluated once
#: and kept in the prompt cache) against about 4.6 evidence first. A loaded machine is slower.
SCORING_ITEMS_PER_SECOND: dict[Layout, float] = {"evidence-first": 4.6, "criterion-first": 11.5}


def text_curve(raw: dict[str, Any], train_states: Sequence[Any], gold: np.ndarray, seed: int) -> dict[str, Any]:
    """The text classifier (learn.baseline_probabilities) fitted on nested samples of DATA of
    CURVE_SIZES rows and all (at most CURVE_ROWS), its accuracy on a held-out fifth: how the text
    alone learns with more rows, measured before the model scores anything."""
    started = time.perf_counter()
    k = len(raw["questions"][0]["options"])
    order = np.random.default_rng(seed).permutation(stratified_sample(gold, CURVE_ROWS + CURVE_ROWS // 4, seed))
    held_n = max(1, len(order) // 5)
    s = _signals([train_states[i] for i in order], np.zeros((len(order), 1)), gold[order], [e["key"] for e in raw["state"]],
                 None)  # the text classifier reads the text alone
    held, pool = np.arange(held_n), np.arange(held_n, len(order))
    points = []
    with threadpool_limits(limits=1, user_api="blas"):  # small problems: threads cost more than they give
        for n in [size for size in CURVE_SIZES if size < len(pool)] + [len(pool)]:
            P = learn.baseline_probabilities(s, pool[:n], held, k)
            points.append({"rows": int(n), "accuracy": round(float((P.argmax(axis=1) == s.gold[held]).mean()), 4)})
    return {"held_out": int(held_n), "points": points, "seconds": round(time.perf_counter() - started, 1)}


def curve_outlook(curve: dict[str, Any], n_train: int, n_options: int, n_items: int, text_only: bool,
                  layout: Layout | None = None) -> str:
    """Whether the model's signals are likely to help at this size: the curve's last step, and what
    the hidden state added at about as many items per label on Banking77 (HIDDEN_STATE_GAINS); and,
    unless `text_only`, how long scoring `n_items` takes here, in the signals decisions' `layout`
    (None: a lettered question's, at the default layout's rate)."""
    points = curve["points"]
    per_label = n_train / max(1, n_options)
    gain = min(HIDDEN_STATE_GAINS, key=lambda g: abs(np.log(g[0]) - np.log(max(per_label, 0.1))))[1]
    curve_says = history_report.judge_curve(points)["says"]  # levelled off only below a stated gain a step
    likely = ("likely to help" if gain >= 2.5 else "likely to add a point or two at most")
    seconds = n_items / SCORING_ITEMS_PER_SECOND[layout or DEFAULT_LAYOUT]
    takes = f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{max(1, round(seconds / 60))} min"
    return (f"the text alone {curve_says}; at {per_label:.0f} training rows per label the model's signals are {likely} "
            f"(the embedded model's hidden state added {gain} points of accuracy at about as many per label on Banking77, "
            f"docs/benchmarks/public.md)"
            + ("; --text-only: the model scores nothing" if text_only else
               f"; scoring {n_items} items{f' ({layout})' if layout else ''} takes about {takes} on 2 cores when idle "
               "(timed here on its first items before it starts, cached after): MODEL=none (--text-only) skips it"))


def out_of_scope_line(report: dict[str, Any]) -> str | None:
    """With out-of-scope TEST items: in-scope accuracy, the share answered and its precision, the
    out-of-scope share caught against the in-scope share sent to review (and what the head's
    thresholds alone did), the novelty score's AUROC. None without out-of-scope items."""
    oos = report.get("out_of_scope")
    if not oos:
        return None
    answered = ("nothing answered automatically" if report["auto_precision"] is None else
                f"answered {report['auto_share']:.1%} at precision {report['auto_precision']:.1%}")
    line = (f"in scope {_pct(report['in_scope_accuracy'])} right; {answered}; "
            f"out of scope: {oos['caught']:.1%} of {oos['items']} caught at "
            f"{oos['in_scope_sent_to_review']:.1%} of in-scope sent to review")
    found = report.get("novelty")
    if found and "head_thresholds_alone" in found:
        alone = found["head_thresholds_alone"]
        line += f" (head thresholds alone: {alone['caught']:.1%} at {alone['in_scope_sent_to_review']:.1%})"
        if found.get("auroc") is not None:
            line += f"; novelty AUROC {found['auroc']:.3f}"
    else:
        line += " (no novelty part)"
    return line


def last_line(report: dict[str, Any]) -> str:
    """The command's last line: whether TEST kept the promise, plainly (`verdict`), or, when it
    did, what it showed and whether TEST was large enough to show it with 95 % confidence."""
    return _verdict_line(report) + (f"; next: {report['next_step']['text']}" if report.get("next_step") else "")


def _verdict_line(report: dict[str, Any]) -> str:
    target, bound = report["target_precision"], report["auto_precision_lower_bound"]
    if not report["routed_alone"]:  # the next step says how many rows, where `verdict` gives answers
        return f"NOTHING IS ROUTED ALONE: out of fold, no threshold shows {target:.1%} precision with 95 % confidence"
    said = verdict(report)
    if said:
        return said
    if report["auto_precision"] is None:
        return f"TEST: nothing was answered automatically, so it shows nothing of the {target:.1%} target"
    if bound is None or bound < target:
        return (f"TEST IS TOO SMALL TO CONFIRM the {target:.1%} target: its automatic answers were "
                f"{report['auto_precision']:.1%} right, at least {bound or 0:.1%} with 95 % confidence")
    return f"target kept: TEST's automatic answers were at least {bound:.1%} right with 95 % confidence"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


# ----------------------------------------------------------------------------------- scoring TEST
def figures(gold: Sequence[str | None], answers: Sequence[str], confidences: Sequence[float], auto: Sequence[bool],
            options: Sequence[str]) -> dict[str, Any]:
    """accuracy (out of scope right only when not routed), macro-F1 and ECE over in-scope items,
    the share routed automatically, its precision and that precision's lower confidence bound
    (`metrics.precision_lower_bound`), and the out-of-scope figures."""
    n = len(gold)
    right = [(g is None and not a) or (g is not None and ans == g) for g, ans, a in zip(gold, answers, auto)]
    scope = [i for i, g in enumerate(gold) if g is not None]
    oos = [i for i, g in enumerate(gold) if g is None]
    routed = [i for i in range(n) if auto[i]]
    hits = [gold[i] == answers[i] for i in scope]
    out: dict[str, Any] = {
        "accuracy": sum(right) / n,
        "in_scope_accuracy": sum(hits) / len(scope) if scope else None,
        # over the labels the in-scope items have or were given (an option no test item has is not a zero)
        "macro_f1": float(f1_score([gold[i] for i in scope], [str(answers[i]) for i in scope], average="macro",
                                   zero_division=0)) if scope else None,
        "ece": _ece([confidences[i] for i in scope], hits) if scope else None,
        "auto_share": len(routed) / n,
        "auto_precision": (sum(right[i] for i in routed) / len(routed)) if routed else None,
        "auto_precision_lower_bound": metrics.precision_lower_bound(sum(right[i] for i in routed), len(routed)),
    }
    if oos:
        out["out_of_scope"] = {"items": len(oos), "caught": sum(not auto[i] for i in oos) / len(oos),
                               "in_scope_sent_to_review": sum(not auto[i] for i in scope) / max(1, len(scope))}
    return out


def tiers(question: Question, auto: Sequence[bool], head_figures: dict[str, Any]) -> dict[str, Any]:
    """Who answers TEST's items under the question's `model` setting: the share and precision of
    what the head answers from the words alone (the endpoint not asked), the share left to the
    endpoint (its letters decide: measured only where the model scored the items), and the share
    sent to review."""
    n = max(1, len(auto))
    answered = sum(auto) / n
    if question.model == "always":
        return {"model": "always", "endpoint": {"share": 1.0, "answered": answered,
                                                 "precision": head_figures["auto_precision"]}}
    unsure = 1.0 - answered
    asks = not question.many_options and question.model == "when_unsure"
    return {"model": question.model,
            "words": {"share": answered, "precision": head_figures["auto_precision"],
                      "precision_lower_bound": head_figures["auto_precision_lower_bound"]},
            "endpoint": {"share": unsure if asks else 0.0,
                         "note": "asked for the items the words left unsure; its letters decide at the question's "
                                 "thresholds (not measured here)" if asks else
                                 "never asked (more options than letters, or model: never)"},
            "review": {"share": 0.0 if asks else unsure}}


def novelty_figures(gold: Sequence[str | None], auto: Sequence[bool], unlike_only: Sequence[bool],
                    scores: Sequence[float | None], threshold: float) -> dict[str, Any]:
    """The novelty part on TEST: the in-scope share above its threshold and, with out-of-scope
    items, the share of them it catches, what the head's thresholds alone caught (`unlike_only`:
    held for novelty alone), and the score's AUROC (out of scope against in scope)."""
    scope = [i for i, g in enumerate(gold) if g is not None]
    oos = [i for i, g in enumerate(gold) if g is None]
    known = [s for s in scores if s is not None]
    out: dict[str, Any] = {"threshold": threshold,
                           "in_scope_above_threshold": (sum(1 for i in scope if (scores[i] or 0.0) > threshold)
                                                        / len(scope)) if scope and known else None}
    if oos:
        alone = [a or u for a, u in zip(auto, unlike_only)]
        out["head_thresholds_alone"] = {"caught": sum(not alone[i] for i in oos) / len(oos),
                                        "in_scope_sent_to_review": sum(not alone[i] for i in scope) / max(1, len(scope))}
        out["out_of_scope_above_threshold"] = sum(1 for i in oos if (scores[i] or 0.0) > threshold) / len(oos)
        out["auroc"] = (float(roc_auc_score([gold[i] is None for i in range(len(gold))], [s or 0.0 for s in scores]))
                        if scope and len(known) == len(scores) else None)
    return out


def _ece(confidences: Sequence[float], hits: Sequence[bool], bins: int = 15) -> float:
    c, h = np.asarray(confidences, dtype=float), np.asarray(hits, dtype=float)
    edges = np.linspace(0, 1, bins + 1)
    total = 0.0
    for low, high in zip(edges[:-1], edges[1:]):
        mask = (c > low) & (c <= high) if low > 0 else (c >= low) & (c <= high)
        if mask.any():
            total += mask.mean() * abs(h[mask].mean() - c[mask].mean())
    return float(total)


# ----------------------------------------------------------------------------------- the command
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.history", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="training export (.csv with a header, or JSONL; or s3://bucket/key)")
    p.add_argument("--test", required=True, help="test export, same fields; never fitted on (or s3://bucket/key)")
    p.add_argument("--text", required=True, help="the text field(s), comma-separated: one is "
                   "the ticket's body; of several, the first is its subject and the others its body")
    p.add_argument("--label", required=True, help="the field to predict (the group that took the item)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--name", help="the policy's name (default: the OUT folder's name, announced)")
    p.add_argument("--min-examples", type=int, default=10, help="labels with fewer training items are rare")
    p.add_argument("--rare", choices=("merge", "review"), default="review",
                   help=f"merge rare labels into one option {MERGED!r}, or leave them out so their items go to review")
    p.add_argument("--max-error", type=float, default=0.03, help="share of automatic answers allowed wrong (0.03: 97 %% precision)")
    p.add_argument("--targets", help="JSON object label → destination key (\"*\": every other label), each one of the "
                   "deployment's destinations; 'own': each label a destination of its own name (a deployment whose "
                   "DESTINATION_QUEUES names them). Without it, labels must be destinations' names, or a starting map "
                   f"(each label a destination of its own name) is written to OUT/{STARTING_MAP} to edit")
    p.add_argument("--destinations", help="the deployment's destination keys, comma-separated (default: the ticket "
                   "function's DESTINATION_QUEUES in template.yaml)")
    p.add_argument("--encoding", default="utf-8", help="the export's text encoding (default utf-8; a byte order mark "
                   "is dropped), e.g. cp1252 or latin-1")
    p.add_argument("--skip-unlabelled", action="store_true", help="leave out rows whose label is empty (counted in the "
                   "report) instead of stopping at the first")
    p.add_argument("--merge-labels", action="store_true", help="count labels that differ only in case, spaces or "
                   "punctuation as their most frequent spelling (default: refuse them, named)")
    p.add_argument("--replace", action="store_true", help="write into an OUT folder that is not empty, over what a "
                   "previous run wrote there")
    p.add_argument("--text-only", action="store_true", help="fit the head on the text alone: the model scores nothing "
                   "(make fit-history MODEL=none)")
    p.add_argument("--encoder", default=sentences.DEFAULT_ENCODER, choices=[*sentences.ENCODERS, "none"],
                   help="the sentence encoder whose embedding of the text the head also reads (default %(default)s; "
                        "none: TF-IDF alone, as before)")
    p.add_argument("--max-terms", type=int, help="at most this many text terms in the head (a smaller file, a faster "
                   "cold start; default: as many as the head's size limit allows)")
    p.add_argument("--model-weight", type=float, choices=MODEL_WEIGHTS,
                   help="fix the model's weight instead of choosing it on the held-out fifth (0: the text alone)")
    p.add_argument("--out-of-scope-label", help="the label that means \"none of these\" (e.g. oos): its DATA items are "
                   "never an option (the novelty part's catch of them is reported), its TEST items are out of scope")
    p.add_argument("--novelty-budget", type=float, default=novelty.DEFAULT_BUDGET,
                   help="share of in-scope items the head's novelty threshold sends to review, chosen out of fold on DATA "
                        "(default %(default)s; in the sentence encoder's space, or over the hidden state with --encoder none; "
                        "none with --encoder none and --text-only or --model-weight 0)")
    p.add_argument("--layout", choices=typing.get_args(Layout),
                   help="the prompt layout of a many-option question's signals decision (default: the request's own)")
    p.add_argument("--limit", type=int, help="only the first N rows of DATA and of TEST (a quick look)")
    p.add_argument("--model", help="GGUF to load in-process (default: the embedded model)")
    p.add_argument("--url", help="score with a running decision container instead (one request an item)")
    p.add_argument("--on", choices=("local", "sagemaker"), default="local",
                   help="where the rows are scored: on this machine, or in one SageMaker Processing job of --stack")
    p.add_argument("--stack", help="--on sagemaker: the deployed stack whose image, model and scoring role are used")
    p.add_argument("--instances", type=int, default=1, help="--on sagemaker: instances of the processing job (1-100)")
    p.add_argument("--instance-type", default="ml.c7i.8xlarge", help="--on sagemaker: their type")
    p.add_argument("--yes", action="store_true", help="--on sagemaker: start the paid job (after the printed estimate)")
    p.add_argument("--threads", type=int)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="signal cache folder ('' to disable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None, runner: Runner | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        run(args, runner)
    except HistoryError as error:
        print(f"fit-history: {error}", file=sys.stderr)
        return 2
    return 0


@dataclass
class Export:
    """The export as the fitter uses it: its rows (only the named fields), the policy written
    from its labels, each training row's option index, and what reading it found (`read`: the
    CSV delimiters, rows left out without a label, spellings merged)."""

    fields: list[str]
    raw: dict[str, Any]
    question: Question
    vocab: Any
    train_rows: list[dict[str, str]]
    test_rows: list[dict[str, str]]
    gold: np.ndarray
    read: dict[str, Any] = field(default_factory=dict)
    out_of_scope_rows: list[dict[str, str]] = field(default_factory=list)


#: What a run writes into OUT (`check_out`): anything else there is the user's.
#: The starting targets map a run writes into OUT when the labels are no destinations: a name no
#: user's map there is likely to have, and never counted as OUT being used (check_out).
STARTING_MAP = "targets.start.json"
WRITTEN = ("policy.json", "heads", "predictions.jsonl", "report.json", "targets.json", STARTING_MAP)


def check_out(args: argparse.Namespace, say: Callable[[str], None]) -> None:
    """OUT must be empty, or hold only the export, the targets map this run reads (wherever it is)
    and the starting map a run wrote there (STARTING_MAP), unless --replace: a second run never
    writes over a policy unasked."""
    out: Path = args.out
    if not out.exists():
        return
    if not out.is_dir():
        raise HistoryError(f"--out {out}: not a folder")
    inputs = {Path(p).resolve() for p in (args.data, args.test, args.targets) if p and str(p) != "own"
              and not str(p).startswith("s3://")}
    there = sorted(p.name for p in out.iterdir() if p.resolve() not in inputs and p.name != STARTING_MAP)
    if there and not args.replace:
        raise HistoryError(f"--out {out} is not empty ({', '.join(there[:5])}{' …' if len(there) > 5 else ''}): name "
                           "another folder, or pass --replace (make fit-history REPLACE=1) to write over it")
    if there:
        say(f"--replace: writing over {out} ({', '.join(name for name in there if name in WRITTEN) or 'nothing of a previous run'})")


def deployment_destinations(args: argparse.Namespace) -> list[str]:
    """The destination keys the deployment routes to: --destinations, else the ticket function's
    DESTINATION_QUEUES in template.yaml (what `make demo` and a deployed stack have)."""
    if args.destinations:
        return [d.strip() for d in args.destinations.split(",") if d.strip()]
    from local.destinations import template_destinations

    return template_destinations()


def resolve_targets(args: argparse.Namespace, vocab: Vocabulary, say: Callable[[str], None]) -> dict[str, str] | None:
    """Each option's destination, checked against the deployment's before anything is scored:
    --targets (a map, wherever it is, or 'own'), else the labels' own names when each is a
    destination; else a starting map (each label a destination of its own name) is written to
    OUT/STARTING_MAP and HistoryError says to edit it and pass it, and how to add the queues."""
    if args.targets == "own":
        return None
    destinations = deployment_destinations(args)
    if args.targets:
        targets = read_targets(Path(args.targets), vocab)
        check_destinations(targets, destinations, f"--targets {args.targets}",
                           how=lambda unknown: how_to_add(args, unknown, args.targets))
        return targets
    own = starting_targets(vocab)
    if all(t in destinations for t in own.values()):
        say("each label is a destination's name: it routes there")
        return own
    path: Path = args.out / STARTING_MAP
    if path.exists():
        raise HistoryError(f"the labels are not the deployment's destinations ({', '.join(destinations)}), and {path} is "
                           f"already there: check it, then run again with TARGETS={path} (--targets {path})")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(own, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    new = sorted({t for t in own.values() if t not in destinations})
    hints = [f"{label!r} → {nearest}" for label, target in own.items() if target in new
             and (nearest := nearest_destination(target, destinations))]
    raise HistoryError(
        f"the labels are not the deployment's destinations ({', '.join(destinations)}): wrote {path}, each label "
        f"routed to a destination of its own name; the deployment has no queue for {len(new)} of them "
        f"({', '.join(new[:8])}{' …' if len(new) > 8 else ''}). Either give them queues: {how_to_add(args, new, path)}; "
        f"or edit the map so those labels route to destinations the deployment has"
        + (f" (nearest by name: {', '.join(hints[:8])}{' …' if len(hints) > 8 else ''})" if hints else "")
        + f" (\"*\": every label not named). Then run again with TARGETS={path} (--targets {path}), or with the map "
        "copied anywhere; nothing was scored")


def how_to_add(args: argparse.Namespace, unknown: list[str], targets_map: str | Path) -> str:
    """How the deployment gets a queue for each of `unknown`: `make queues` on the map that names
    them, unless --destinations names another deployment's."""
    if args.destinations:
        return "in the deployment that --destinations describes (its DESTINATION_QUEUES)"
    from local.destinations import add_queues_advice, template_resources

    return add_queues_advice(unknown, template_resources(), targets_map=targets_map)


def read_export(args: argparse.Namespace, say: Callable[[str], None]) -> Export:
    fields = [f.strip() for f in args.text.split(",") if f.strip()]
    if not fields:
        raise HistoryError("--text names no field")
    read: dict[str, Any] = {"encoding": args.encoding}
    rows = []
    for what, path in (("data", args.data), ("test", args.test)):
        stats = ReadStats()
        rows.append(read_rows(path, fields, args.label, limit=args.limit, encoding=args.encoding,
                              skip_unlabelled=args.skip_unlabelled, stats=stats))
        read[what] = {"rows": len(rows[-1]), "unlabelled_skipped": stats.unlabelled, "delimiter": stats.delimiter}
        say(f"{path}: {len(rows[-1])} rows" + (f" ({stats.delimiter_name()}-separated CSV)" if stats.delimiter else "")
            + (f"; {stats.unlabelled} row(s) without a label left out" if stats.unlabelled else ""))
    train_rows, test_rows = rows
    spelled = spellings(Counter(r[args.label] for r in train_rows) + Counter(r[args.label] for r in test_rows),
                        args.merge_labels)
    if spelled:
        merged = {s: to for s, to in spelled.items() if s != to}
        say(f"--merge-labels: {len(merged)} spelling(s) counted as another: "
            + ", ".join(f"{s!r} → {to!r}" for s, to in list(merged.items())[:10]))
        read["merged_spellings"] = merged
        for row in (*train_rows, *test_rows):
            row[args.label] = spelled.get(row[args.label], row[args.label])
    out_of_scope_rows: list[dict[str, str]] = []
    if args.out_of_scope_label is not None:
        label = args.out_of_scope_label
        out_of_scope_rows = [r for r in train_rows if r[args.label] == label]
        in_test = sum(r[args.label] == label for r in test_rows)
        if not out_of_scope_rows and not in_test:
            raise HistoryError(f"--out-of-scope-label {label!r}: no row of DATA or TEST has that {args.label}")
        train_rows = [r for r in train_rows if r[args.label] != label]
        read["out_of_scope"] = {"label": label, "data": len(out_of_scope_rows), "test": in_test}
        say(f"--out-of-scope-label {label!r}: {len(out_of_scope_rows)} DATA row(s) are no option (scored for the "
            f"novelty part's report), {in_test} TEST row(s) are out of scope")
    vocab = vocabulary([r[args.label] for r in train_rows], args.min_examples, args.rare)
    if vocab.rare:
        say(f"{len(vocab.rare)} label(s) with fewer than {args.min_examples} training items "
            f"({'merged into ' + repr(MERGED) if args.rare == 'merge' else 'left to review'}): "
            + ", ".join(f"{label} ({n})" for label, n in vocab.rare.items()))
    name = args.name
    if not name:
        name = key_of(args.out.resolve().name).lower()[:64]
        say(f"the policy is named {name!r}, after the OUT folder (NAME= / --name to choose)")
    targets = resolve_targets(args, vocab, say)
    raw = raw_policy(name, fields, args.label, vocab, args.max_error, targets)
    say("tickets to route carry the text in " + (f"their body ({fields[0]})" if len(fields) == 1 else
        f"their subject ({fields[0]}) and body ({', '.join(fields[1:])}, one a paragraph)"))
    train_rows = [r for r in train_rows if vocab.option_of(r[args.label]) is not None]
    position = {label: i for i, label in enumerate(vocab.options)}
    gold = np.array([position[vocab.option_of(r[args.label])] for r in train_rows])
    return Export(fields, raw, question_of(raw), vocab, train_rows, test_rows, gold, read, out_of_scope_rows)


def requests(question: Question, item_states: Sequence[Any], layout: Layout | None = None) -> Callable[[int], Decision]:
    """The decision the endpoint is asked for row i (built when needed: a million requests are
    never held at once), in `layout` (None: the request's own)."""
    return lambda i: question_decision(question, item_states[i], layout).model_copy(update={"return_hidden_state": True})


def request_keys(request: Callable[[int], Decision], n: int, model_sha256: str) -> list[str]:
    return [request_key(model_sha256, request(i)) for i in range(n)]


#: Items scored and timed on this machine before scoring's time is promised (they join the cache:
#: nothing is scored twice), and the file in a model's cache folder that keeps each machine's rate.
PROBE_ITEMS = 8
RATE_FILE = "rates.json"


def _rate_key(description: str, layout: str | None) -> str:
    return f"{socket.gethostname()} | {description} | {layout or 'lettered'}"


def last_rate(folder: Path | None, key: str) -> dict[str, Any] | None:
    """This machine's last measured rate with this model, runner and layout, if recorded."""
    try:
        return json.loads((folder / RATE_FILE).read_text()).get(key) if folder else None
    except (OSError, ValueError, AttributeError):
        return None


def record_rate(folder: Path | None, key: str, model_sha256: str, items: int, seconds: float) -> None:
    """Keep this run's rate in the model's cache folder, for the next run's estimate."""
    if folder is None or items < PROBE_ITEMS or seconds <= 0:
        return
    try:
        rates = json.loads((folder / RATE_FILE).read_text())
    except (OSError, ValueError):
        rates = {}
    rates[key] = {"items_per_second": round(items / seconds, 4), "items": items, "seconds": round(seconds, 1),
                  "model_sha256": model_sha256, "date": time.strftime("%Y-%m-%d")}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RATE_FILE).write_text(json.dumps(rates, indent=2) + "\n")


def _takes(seconds: float) -> str:
    return (f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{round(seconds / 60)} min" if seconds >= 90
            else f"{max(1, round(seconds))} s")


def _score_here(args: argparse.Namespace, runner: Runner | None, train: tuple[Callable[[int], Decision], int],
                test: tuple[Callable[[int], Decision], int], say: Callable[[str], None]
                ) -> tuple[ModelInfo, SignalCache, list[str], list[str]]:
    """Score on this machine: the batch scorer on the engine in this process, or one request an
    item to a container (--url) or to the runner a caller gives. Its time is promised from the
    first PROBE_ITEMS scored here (and this machine's last run, when recorded), never from a
    fixed rate; the run's rate is recorded in the model's cache folder."""
    own = runner is None
    if runner is None:
        from evaluation.runners import EngineRunner, HttpRunner

        runner = HttpRunner(args.url) if args.url else EngineRunner.load(model_path=args.model, threads=args.threads)
    try:
        model = runner.model_info()
        say(f"model {model.file} ({runner.description})")
        cache = SignalCache(args.cache / model.sha256 if str(args.cache) else None)
        engine = getattr(runner, "engine", None)
        jobs = [(request, request_keys(request, n, model.sha256), what) for (request, n), what in ((train, "DATA"), (test, "TEST"))]

        def score_rows(request: Callable[[int], Decision], keys: list[str], what: str, rows: list[int] | None = None) -> None:
            if rows is not None:  # only these rows (positions in keys)
                request, keys = (lambda j, r=request: r(rows[j])), [keys[i] for i in rows]
            if engine is not None:
                score_in_process(engine, request, keys, cache, what=what, say=say)
            else:
                score(runner, model, request, keys, cache, what=what, progress=not args.no_progress)

        todo = sum(len(cache.missing(keys)) for _, keys, _ in jobs)
        started = time.perf_counter()
        key = ""
        if todo:
            first = next(r for r, n in (train, test) if n)
            key = _rate_key(str(runner.description), getattr(first(0), "layout", None))
            probed = 0
            for request, keys, what in jobs:
                rows = cache.missing(keys)[:PROBE_ITEMS - probed]
                if rows:
                    score_rows(request, keys, what, rows)
                    probed += len(rows)
            rate = probed / max(time.perf_counter() - started, 1e-6)
            basis = f"from the first {probed} items here: {rate:.2f} items/s"
            last = last_rate(cache.folder, key)
            if last:
                basis += f"; this machine's last run on {last['date']}: {last['items_per_second']:.2f} items/s"
            print(f"fit-history: scoring {todo} items here takes about {_takes(todo / rate)}, about "
                  f"{_takes((todo - probed) / rate)} left ({basis})", file=sys.stderr, flush=True)
        for request, keys, what in jobs:
            score_rows(request, keys, what)
        if todo:
            record_rate(cache.folder, key, model.sha256, todo, time.perf_counter() - started)
    finally:
        if own:
            runner.close()
    return model, cache, jobs[0][1], jobs[1][1]


def run(args: argparse.Namespace, runner: Runner | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    say = (lambda text: None) if args.no_progress else (lambda text: print(text, file=sys.stderr, flush=True))
    if args.on == "sagemaker" and not args.stack:
        raise HistoryError("--on sagemaker needs --stack (make fit-history ON=sagemaker STACK=name): the deployed stack "
                           "whose image, model and scoring role the job uses")
    if args.text_only and (args.on == "sagemaker" or args.url or args.model or args.model_weight):
        raise HistoryError("--text-only (MODEL=none) scores nothing: it takes no --on sagemaker, --url, --model or "
                           "--model-weight other than 0")
    check_out(args, say)
    # the account, the stack and the estimate before minutes of reading, embedding and scoring
    sagemaker = sagemaker_preflight(args, say) if args.on == "sagemaker" and not args.text_only else None
    with tempfile.TemporaryDirectory(prefix="fit-history-export-") as downloads:
        if any(str(path).startswith("s3://") for path in (args.data, args.test)):
            from .sagemaker_scoring import fetch_export

            args.data, args.test = (fetch_export(path, Path(downloads) / name) for name, path in
                                    (("data", args.data), ("test", args.test)))
        args.data, args.test = Path(args.data), Path(args.test)
        export = read_export(args, say)
    fields, raw, question, vocab = export.fields, export.raw, export.question, export.vocab
    train_rows, test_rows, gold = export.train_rows, export.test_rows, export.gold
    train_states, test_states = states(raw, train_rows, fields), states(raw, test_rows, fields)
    # DATA's out-of-scope items are scored after its others: their hidden states only test the novelty part
    scored_states = train_states + states(raw, export.out_of_scope_rows, fields)
    train_request, test_request = requests(question, scored_states, args.layout), requests(question, test_states, args.layout)

    say(f"{len(vocab.options)} options; {len(train_rows)} training and {len(test_rows)} test items")
    curve = text_curve(raw, train_states, gold, args.seed)
    # a question of at most 16 options is asked lettered, in no layout
    outlook = curve_outlook(curve, len(train_rows), len(vocab.options), len(train_rows) + len(test_rows), args.text_only,
                            (args.layout or DEFAULT_LAYOUT) if question.many_options else None)
    say("the text alone, by training rows (accuracy on a held-out fifth of DATA): "
        + ", ".join(f"{point['rows']}: {point['accuracy']:.3f}" for point in curve["points"]) + f" ({curve['seconds']:.0f} s)")
    say(outlook)
    scoring = time.perf_counter()
    out_of_scope_hidden = None
    if args.text_only:
        model, prompt_version = TEXT_ONLY_MODEL, ""
        train_hidden = np.zeros((len(train_states), 1), dtype=np.float16)
        test_hidden = np.zeros((len(test_states), 1))
        width = len(question_decision(question, "x").option_ids)
        test_signals = [(np.zeros(1, dtype=np.float32), np.zeros(width), 1.0, "")] * len(test_states)
    else:
        if args.on == "sagemaker":
            model, cache = score_on_sagemaker(args, [(train_request, len(scored_states)), (test_request, len(test_states))], say,
                                              sagemaker)
            train_keys = request_keys(train_request, len(scored_states), model.sha256)
            test_keys = request_keys(test_request, len(test_states), model.sha256)
        else:
            model, cache, train_keys, test_keys = _score_here(args, runner, (train_request, len(scored_states)),
                                                              (test_request, len(test_states)), say)
        train_signals, test_gathered = cache.gather(train_keys), cache.gather(test_keys)
        train_hidden = train_signals.hidden[:len(train_states)]  # float16: converted only for the rows fitted on
        out_of_scope_hidden = train_signals.hidden[len(train_states):].astype(np.float64)
        test_hidden = test_gathered.hidden.astype(np.float64)
        test_signals = [test_gathered.row(i) for i in range(len(test_keys))]
        prompt_version = train_signals.versions[0]
    scoring = time.perf_counter() - scoring

    fitting = time.perf_counter()
    fitted = fit(raw, train_states, train_hidden, gold, test_states, test_hidden, model=model, prompt_version=prompt_version,
                 max_error=args.max_error, seed=args.seed, data=[f"{args.data.name}"], say=say, terms_cap=args.max_terms,
                 model_weight=0.0 if args.text_only else args.model_weight,
                 # a head asked to read the text alone reads no hidden state, novelty's included: its
                 # novelty part is in the sentence encoder's space, or it has none
                 novelty_budget=args.novelty_budget,
                 out_of_scope_hidden=out_of_scope_hidden, out_of_scope_states=scored_states[len(train_states):],
                 encoder=None if args.encoder == "none" else args.encoder)
    fitting = time.perf_counter() - fitting

    out: Path = args.out
    (out / "heads").mkdir(parents=True, exist_ok=True)
    for stale in (out / "heads").glob("*.json"):  # a previous run's (--replace): only this run's head stays
        stale.unlink()
    head_bytes = json.dumps(fitted.document, separators=(",", ":")).encode()
    head_name = f"heads/{question.id}.json"
    (out / head_name).write_bytes(head_bytes)
    raw["questions"][0]["head"] = {"file": head_name, "sha256": hashlib.sha256(head_bytes).hexdigest()}
    # a head on the words alone answers without the endpoint; only what it is unsure of is asked
    raw["questions"][0]["model"] = "always" if "hidden" in fitted.document else "when_unsure"
    (out / "policy.json").write_text(json.dumps(raw, indent=2, ensure_ascii=False) + "\n")
    policy: Policy = load_policy(out / "policy.json")  # the routing function's own loader
    question = policy.questions[0]

    # TEST through the routing function's judging, and the text classifier at its own threshold
    label_of = dict(zip([o.id for o in question.options], vocab.options))
    golds = [vocab.option_of(r[args.label]) for r in test_rows]
    head_answers, head_conf, head_auto, lines = [], [], [], []
    novelty_scores: list[float | None] = []
    unlike_only: list[bool] = []  # held for novelty alone: the head's thresholds would have answered
    # one item at a time, as the routing function judges: a BLAS thread pool costs more than it gives
    with threadpool_limits(limits=1, user_api="blas"):
        entries = [words_entry(question, state) if question.model != "always"
                   else model_entry(question, _result(question, model, signal), state)
                   for state, signal in zip(test_states, test_signals)]
    for row, entry in zip(test_rows, entries):
        answer = label_of[entry.option_id] if entry.option_id else None
        head_answers.append(answer)
        head_conf.append(entry.confidence or 0.0)
        head_auto.append(entry.passed)
        novelty_scores.append(entry.novelty)
        unlike_only.append(bool(entry.reasons) and all(r.startswith(UNLIKE) for r in entry.reasons))
        lines.append({"text": " / ".join(row[f] for f in fields), "gold": row[args.label], "answer": answer,
                      "confidence": entry.confidence, "auto": entry.passed,
                      **({"novelty": round(entry.novelty, 4)} if entry.novelty is not None else {})})
    with (out / "predictions.jsonl").open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    P = fitted.baseline_probabilities
    base_conf = [float(c) for c in metrics.confidences(list(P), "normalized_peak")]
    base_threshold = fitted.baseline_threshold if fitted.baseline_threshold is not None else 1.01
    base_answers = [vocab.options[int(i)] for i in P.argmax(axis=1)]
    head_figures = figures(golds, head_answers, head_conf, head_auto, vocab.options)
    learned = question.learned_head
    assert learned is not None, "fit-history writes the question's head"
    if learned.novelty is not None:
        head_figures["novelty"] = {
            "score": learned.novelty.score,
            **({"rank": len(learned.novelty.projection)} if learned.novelty.score == "mahalanobis"
               else {"kept": learned.novelty.rows, "k": learned.novelty.k}),
            "surprise_weight": learned.novelty.surprise_weight,
            "in_scope_budget": learned.novelty.in_scope_budget,
            "out_of_fold_in_scope_review": learned.novelty.out_of_fold_in_scope_review,
            **({"data_out_of_scope": {"items": learned.novelty.out_of_scope_examples,
                                      "caught": learned.novelty.out_of_scope_caught}}
               if learned.novelty.out_of_scope_examples else {}),
            **novelty_figures(golds, head_auto, unlike_only, novelty_scores, learned.novelty.threshold)}
    report = {
        "n_train": len(train_rows), "n_test": len(test_rows), "options": len(vocab.options),
        **head_figures,
        **promise(head_figures["auto_precision"], 1 - args.max_error, fitted.holdout["items_needed"]),
        "baseline": figures(golds, base_answers, base_conf, [c >= base_threshold for c in base_conf], vocab.options),
        "readout": "head over the model's signals (signals decision)" if question.many_options else "head over the letters' request",
        "head": {"file": head_name, "bytes": len(head_bytes), "version": fitted.document["version"],
                 "model_weight": fitted.document["fit"]["model_weight"], "min_confidence": question.learned_head.thresholds.min_confidence,
                 "encoder": fitted.document["sentence"]["encoder"] if "sentence" in fitted.document else None,
                 "reads_model": question.learned_head.reads_model},
        "holdout": fitted.holdout,
        "rare": {"min_examples": args.min_examples, "mode": args.rare, "labels": vocab.rare},
        "read": export.read,
        "tiers": tiers(question, head_auto, head_figures),
        "scoring": "text-only" if args.text_only else "model",
        "text_curve": {**{k: v for k, v in curve.items() if k != "seconds"}, "outlook": outlook},
        "model": None if args.text_only else {"file": model.file, "sha256": model.sha256},
        "seconds": {"text_curve": curve["seconds"], "scoring": round(scoring, 1), "fitting": round(fitting, 1),
                    "total": round(time.perf_counter() - started, 1)},
    }
    report["text_curve"].update({k: v for k, v in history_report.judge_curve(curve["points"]).items() if k != "says"})
    report["groups"] = history_report.group_figures([vocab.option_of(r[args.label]) or r[args.label] for r in test_rows],
                                                    golds, head_answers, head_auto, 1 - args.max_error)
    report["next_step"] = history_report.next_step(report, report["groups"])
    (out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    without = " from the words alone, without the endpoint," if question.model != "always" else ""
    say(f"accuracy {report['accuracy']:.3f} (text classifier {report['baseline']['accuracy']:.3f}); answered automatically"
        f"{without} {report['auto_share']:.3f} {history_report.precision_words(report['auto_precision'])}; "
        f"wrote {out}/policy.json, {head_name}, predictions.jsonl, report.json in {report['seconds']['total']:.0f} s")
    for line in history_report.group_lines(report["groups"], report["target_precision"]):
        print(f"fit-history: {line}", file=sys.stderr, flush=True)
    scope_line = out_of_scope_line(report)
    if scope_line:
        print(f"fit-history: {scope_line}", file=sys.stderr, flush=True)
    print(f"fit-history: {last_line(report)}", file=sys.stderr, flush=True)  # printed even with --no-progress
    return report


def _result(question: Question, model: ModelInfo, signal: tuple[np.ndarray, np.ndarray, float, str]) -> DecisionResult:
    """The endpoint's answer, as the routing function receives it, from the cached signals."""
    hidden, logits, mass, version = signal
    ids = question_decision(question, "x").option_ids
    z = [float(v) for v in logits]
    return DecisionResult(id=question.id, option_ids=ids, probabilities=[1 / len(z)] * len(z), option_logits=z,
                          temperature=1.0, input_tokens=0, allowed_token_mass=mass, prompt_sha256="0" * 64,
                          prompt_version=version, model=model,
                          timing={"tokenize_seconds": 0.0, "prefill_seconds": 0.0, "total_seconds": 0.0},
                          hidden_state=[float(v) for v in hidden])


if __name__ == "__main__":
    raise SystemExit(main())
