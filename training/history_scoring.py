"""`make fit-history`'s scoring step: each row's request to the model (`requests`, built when
needed) and its key, scored where the user asks (`score_export`) by the one scorer
(training/scoring.py): on this machine by the batch scorer's command in a child process (no
engine loads in this one), one request an item to a decision server (`--url`) or a runner a
caller gives, or in one SageMaker Processing job of the deployed stack
(`score_on_sagemaker`), every answer joining the signals store (training/signals_store.py); its
time promised from the first items scored here (`PROBE_ITEMS`), never from a fixed rate.
`--text-only` scores nothing (`text_only_signals`)."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Sequence as SequenceABC
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from decision_contract import Decision, Layout, ModelInfo
from decision_contract.signals import request_key
from decision_router.domain.model_requests import question_decision
from decision_router.domain.policies import Question
from evaluation.runners import Runner

from .history_export import export_rows
from .history_policy import HistoryError
from .scoring import BATCH_CHUNK, BatchScorerFailed, NotScored, Rows, SageMakerBatchScoring, Scorer, scorer_here
from .signals_store import Row, SignalsStore

#: The model a --text-only run names in its head's TEST judging: none was asked (the head reads
#: the text alone, so nothing in the answer is read but its shape).
TEXT_ONLY_MODEL = ModelInfo(file="(none: --text-only)", bytes=0, sha256="0" * 64, context_size=0, threads=0, gpu_layers=0,
                            llama_cpp_python_version="", hidden_size=1)
#: One TEST row's signals as the store gives them: hidden state, option logits, allowed-token mass, prompt version.
Signal = Row


def requests(question: Question, item_states: Sequence[Any], layout: Layout | None = None) -> Callable[[int], Decision]:
    """The decision the endpoint is asked for row i (built when needed: a million requests are
    never held at once), in `layout` (None: the request's own)."""
    return lambda i: question_decision(question, item_states[i], layout)


def request_keys(request: Callable[[int], Decision], n: int, model_sha256: str) -> list[str]:
    return [request_key(model_sha256, request(i)) for i in range(n)]


class Built(SequenceABC):
    """The decisions of rows 0..n-1, each built when read."""

    def __init__(self, request: Callable[[int], Decision], n: int) -> None:
        self.request, self.n = request, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self.request(i) for i in range(self.n)[index]]
        return self.request(index)


def refuse_unscored(not_scored: Sequence[NotScored], what: str) -> None:
    """A row the model could not score stops the fit, named."""
    if not_scored:
        shown = "; ".join(f"{what} row {row.index + 1}: {row.reason}" for row in not_scored[:3])
        raise HistoryError(f"{len(not_scored)} request(s) could not be scored ({shown})")


@dataclass(frozen=True)
class OnSageMaker:
    """--on sagemaker: the deployed stack, the processing job's instances (1 to 100, checked when
    the command's arguments are read) and their type, and whether the paid job may start."""

    stack: str
    instances: int = 1
    instance_type: str = "ml.c7i.8xlarge"
    yes: bool = False


@dataclass(frozen=True)
class WhereScored:
    """Where and with what the rows are scored: the signals store's folder (`cache`; '' none),
    and on this machine the batch scorer's `model` GGUF and `threads`, or the decision server at
    `url`; or in one SageMaker Processing job (`sagemaker`)."""

    cache: Path
    url: str | None = None
    model: str | None = None
    threads: int | None = None
    progress: bool = True
    sagemaker: OnSageMaker | None = None

    def store(self, model_sha256: str) -> SignalsStore:
        return SignalsStore(self.cache / model_sha256 if str(self.cache) else None)


def sagemaker_preflight(on: OnSageMaker, exports: Sequence[str | Path], limit: int | None, say: Callable[[str], None]) -> Any:
    """Before anything is read, embedded or scored: the estimate from the exports' row count (at
    most `limit` each) and the price file (printed even without an account), then the region, the
    credentials and the stack (SageMakerScoring.from_stack); without --yes it stops there. The scorer."""
    from .processing_estimate import estimate_for, offer
    from .sagemaker_scoring import SageMakerScoring

    rows = [export_rows(path, limit) for path in exports]
    if None in rows:
        say("the estimate waits for the export on S3 to be read: it is printed before the job starts")
    else:
        say(f"estimate for every row of the export ({sum(rows):,}; rows that ask the same are scored once):")
        for line in estimate_for(sum(rows), on.instances, offer(on.instance_type)).text.splitlines():
            say(line)
    scoring = SageMakerScoring.from_stack(on.stack, instances=on.instances, instance_type=on.instance_type, say=say)
    if not on.yes:
        raise HistoryError("Scoring on SageMaker starts paid instances: pass --yes (make fit-history ... YES=1) once the "
                           "estimate above suits.")
    return scoring


def score_on_sagemaker(where: WhereScored, on: OnSageMaker, requests_of: Sequence[tuple[Callable[[int], Decision], int]],
                       say: Callable[[str], None], scoring: Any = None) -> tuple[ModelInfo, SignalsStore]:
    """Every distinct request scored in one SageMaker Processing job on the stack's image and
    model (training.sagemaker_scoring; `scoring`: the one sagemaker_preflight checked); its
    signals join the local store of that model."""
    from .sagemaker_scoring import SageMakerScoring

    scoring = scoring or SageMakerScoring.from_stack(on.stack, instances=on.instances, instance_type=on.instance_type, say=say)
    every = [request(i) for request, n in requests_of for i in range(n)]
    model, store, not_scored = SageMakerBatchScoring(scoring, on.instances, on.yes).score_all(every, where.store)
    refuse_unscored(not_scored, "DATA and TEST")
    return model, store


#: Items scored and timed on this machine before scoring's time is promised (they join the cache:
#: nothing is scored twice), and the file in a model's store folder that keeps each machine's rate.
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


def _score_here(where: WhereScored, runner: Runner | None, train: tuple[Callable[[int], Decision], int],
                test: tuple[Callable[[int], Decision], int], say: Callable[[str], None]
                ) -> tuple[ModelInfo, SignalsStore, list[str], list[str]]:
    """Score on this machine (training/scoring.py `scorer_here`): the batch scorer's command as a
    child process (no engine loads in this one), one request an item to a decision server (--url),
    or the runner a caller gives; a child that fails stops the run, named. Its time is promised
    from the first PROBE_ITEMS scored here (and this machine's last run, when recorded), never from
    a fixed rate; the run's rate is recorded in the model's store folder."""
    try:
        return _score_with(scorer_here(runner, where.url, where.model, where.threads, say, progress=where.progress),
                           where, train, test, say)
    except BatchScorerFailed as failure:
        raise HistoryError(str(failure)) from None


def _score_with(scoring: AbstractContextManager[tuple[Scorer, ModelInfo, str]], where: WhereScored,
                train: tuple[Callable[[int], Decision], int], test: tuple[Callable[[int], Decision], int],
                say: Callable[[str], None]) -> tuple[ModelInfo, SignalsStore, list[str], list[str]]:
    """DATA's and TEST's requests that the model's store (`where.store`) lacks scored by the
    scorer `scoring` opens, after the probe's promise; the model, its store and the two key lists."""
    with scoring as (scorer, model, description):
        say(f"model {model.file} ({description})")
        store = where.store(model.sha256)
        jobs = [(Built(request, n), request_keys(request, n, model.sha256), what)
                for (request, n), what in ((train, "DATA"), (test, "TEST"))]
        todo = sum(len(store.missing(keys)) for _, keys, _ in jobs)
        started = time.perf_counter()
        key = ""
        if todo:
            first = next(decisions for decisions, _, _ in jobs if len(decisions))
            key = _rate_key(description, getattr(first[0], "layout", None))
            _probe_and_promise(scorer, store, jobs, todo, key, started)
        for decisions, keys, what in jobs:
            refuse_unscored(scorer.score_missing(store, decisions, keys, what=what), what)
        if todo:
            record_rate(store.folder, key, model.sha256, todo, time.perf_counter() - started)
    return model, store, jobs[0][1], jobs[1][1]


def _probe_and_promise(scorer: Scorer, store: SignalsStore, jobs: Sequence[tuple[Sequence[Decision], list[str], str]],
                       todo: int, key: str, started: float) -> None:
    """Score the first PROBE_ITEMS items the store lacks, and say how long the rest takes at
    their rate (and at this machine's last run's, when recorded). A back-end that starts before it
    scores (the batch scorer's child loading the model) has its start left out of the rate and
    counted apart, once for each of its runs still to come."""
    probed = runs = 0
    for decisions, keys, what in jobs:
        rows = store.missing(keys)[:PROBE_ITEMS - probed]
        if rows:
            not_scored = scorer.score_missing(store, Rows(decisions, rows), [keys[i] for i in rows], what=what)
            refuse_unscored([NotScored(rows[n.index], n.reason) for n in not_scored], what)
            probed, runs = probed + len(rows), runs + 1
    starting = scorer.startup_seconds
    rate = probed / max(time.perf_counter() - started - starting, 1e-6)
    basis = f"from the first {probed} items here: {rate:.2f} items/s"
    runs_left = 0
    if starting > 0:
        chunk = getattr(scorer, "chunk", BATCH_CHUNK)
        runs_left = sum(-(-len(store.missing(keys)) // chunk) for _, keys, _ in jobs)
        basis += (f", not counting the {starting:.0f} s {scorer.description} took to start and load the model, which "
                  f"each of its {runs_left} run(s) still to come takes again")
    last = last_rate(store.folder, key)
    if last:
        basis += f"; this machine's last run on {last['date']}: {last['items_per_second']:.2f} items/s"
    each_start = starting / max(runs, 1)
    print(f"fit-history: scoring {todo} items here takes about {_takes(todo / rate + (runs + runs_left) * each_start)}, "
          f"about {_takes((todo - probed) / rate + runs_left * each_start)} left ({basis})", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------- the step
@dataclass
class ExportSignals:
    """What the model said of the export, as the fit and TEST's judging read it."""

    model: ModelInfo
    prompt_version: str
    train_hidden: np.ndarray  # float16: DATA's option rows, converted only for the rows fitted on
    out_of_scope_hidden: np.ndarray | None  # DATA's out-of-scope rows (None: nothing was scored)
    test_hidden: np.ndarray
    test_signals: list[Signal]
    seconds: float


def text_only_signals(question: Question, n_train: int, n_test: int) -> ExportSignals:
    """--text-only: nothing scored; the head reads no model signal, so these are shapes alone."""
    width = len(question_decision(question, "x").option_ids)
    return ExportSignals(TEXT_ONLY_MODEL, "", np.zeros((n_train, 1), dtype=np.float16), None, np.zeros((n_test, 1)),
                         [(np.zeros(1, dtype=np.float32), np.zeros(width), 1.0, "")] * n_test, 0.0)


def score_export(where: WhereScored, runner: Runner | None, train: tuple[Callable[[int], Decision], int],
                 test: tuple[Callable[[int], Decision], int], n_train: int, say: Callable[[str], None],
                 sagemaker: Any = None) -> ExportSignals:
    """Every request of DATA (its `n_train` option rows, then its out-of-scope rows) and of TEST
    scored where `where` says (`sagemaker`: the scorer its preflight checked), then gathered from
    the store."""
    started = time.perf_counter()
    if where.sagemaker is not None:
        model, store = score_on_sagemaker(where, where.sagemaker, [train, test], say, sagemaker)
        train_keys, test_keys = (request_keys(request, n, model.sha256) for request, n in (train, test))
    else:
        model, store, train_keys, test_keys = _score_here(where, runner, train, test, say)
    train_signals, test_gathered = store.gather(train_keys), store.gather(test_keys)
    return ExportSignals(model, train_signals.versions[0], train_signals.hidden[:n_train],
                         train_signals.hidden[n_train:].astype(np.float64), test_gathered.hidden.astype(np.float64),
                         [test_gathered.row(i) for i in range(len(test_keys))], time.perf_counter() - started)
