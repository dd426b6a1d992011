"""The one scorer: the model asked for the signals of every decision a signals store lacks, for
`make fit`, relearning and `make fit-history` alike, on one of four back-ends:

- `LocalBatchScoring`: the batch scorer's command (`python -m decision_server.batch`, the very
  program SageMaker Processing runs) on this machine as a child process, a chunk of decisions a
  run, each chunk's shard joining the store as soon as it is written (an interrupted run resumes
  at the chunk it was in); the commands' default, so no engine loads in the fitting process;
- `InProcessScoring`: the same batch scorer on an engine a caller already holds in this process
  (tests), chunk by chunk alike;
- `RunnerScoring`: one request an item (the decisions about one state together) to a running
  decision server over HTTP (or any runner without an engine here: relearning's endpoint), a few at
  once, the store saved as it goes;
- `SageMakerBatchScoring`: every distinct decision in one SageMaker Processing job of a deployed
  stack (`training.sagemaker_scoring`), its shards joining the store of the model that scored them.

`scorer_for(runner)` picks for a runner a caller gives: the batch scorer where the runner holds an
engine, else one request an item.
What could not be scored comes back as `NotScored` rows, never dropped: `make fit` and relearning
report them, `make fit-history` refuses to fit past them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from collections.abc import Sequence as SequenceABC
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from pydantic import ValidationError
from tqdm import tqdm

from decision_contract import Decision, ModelInfo
from decision_contract.signals import SHARD_SUFFIX, request_key
from evaluation.runners import RunFailure, Runner

from .signals_store import SignalsStore

#: Items a shard when the batch scorer scores in this process (an interrupted run resumes at its shard).
BATCH_CHUNK = 2000


@dataclass(frozen=True)
class NotScored:
    """A decision the model could not score: its position in the decisions asked, and why."""

    index: int
    reason: str


class Rows(SequenceABC):
    """Some rows of a sequence of decisions, read when needed (a million requests are never held
    at once; the batch scorer's writer takes a sequence)."""

    def __init__(self, decisions: Sequence[Decision], rows: Sequence[int]) -> None:
        self.decisions, self.rows = decisions, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self.decisions[i] for i in self.rows[index]]
        return self.decisions[self.rows[index]]


class Scorer(Protocol):
    """A back-end that scores on this machine or a server it reaches (the model known beforehand)."""

    @property
    def description(self) -> str:
        """What scores, in words."""
        ...

    @property
    def startup_seconds(self) -> float:
        """Seconds spent so far starting rather than scoring (a child process loading the model),
        so that a rate measured on a few items leaves them out; 0 where nothing starts."""
        ...

    def score_missing(self, store: SignalsStore, decisions: Sequence[Decision], keys: Sequence[str], *,
                      what: str) -> list[NotScored]:
        """Score every decision whose key (`keys[i]` is `decisions[i]`'s) the store lacks."""
        ...


class BatchScorerFailed(RuntimeError):
    """The batch scorer's child process failed: the message names its exit status and its last
    lines on stderr."""


#: The child's last lines on stderr that a failure quotes.
STDERR_LINES = 8


@dataclass
class LocalBatchScoring:
    """The batch scorer's command (`python -m decision_server.batch`, the program SageMaker
    Processing runs) on this machine as a child process: `describe()` has it load the model and
    print what it is (the store's keys need its sha256), and each chunk of decisions is one run
    over one input shard, its signals adopted into the store as soon as it ends.

    `model_file`: the GGUF (None: SM_LLAMA_CPP_MODEL, SM_LLAMA_CPP_MODEL_DIR, else the embedded
    model, as the engine chooses); `threads`: the child's SM_LLAMA_CPP_THREADS. The child's log
    (progress included) goes to `say` line by line."""

    say: Callable[[str], None]
    model_file: Path | None = None
    threads: int | None = None
    chunk: int = BATCH_CHUNK
    description: str = "the batch scorer in a child process"
    startup_seconds: float = 0.0
    model: ModelInfo | None = None

    def describe(self) -> ModelInfo:
        """The model the child loads (its `--describe`), asked once."""
        if self.model is None:
            printed = self._run(["--describe"], capture=True).strip().splitlines()
            try:
                self.model = ModelInfo.model_validate_json(printed[-1] if printed else "")
            except ValidationError as exc:
                raise BatchScorerFailed(f"the batch scorer's --describe printed no ModelInfo JSON: {exc}") from None
        return self.model

    def score_missing(self, store: SignalsStore, decisions: Sequence[Decision], keys: Sequence[str], *,
                      what: str) -> list[NotScored]:
        self.describe()
        return score_in_chunks(self, store, decisions, keys, what=what)

    def score_chunk(self, inputs: Path, outputs: Path) -> None:
        """One run of the child over one input shard; the model that scored it checked against the one described."""
        from decision_server.batch import MODEL_JSON

        model = self.describe()
        summary = outputs.parent / "summary.json"
        started = time.perf_counter()
        self._run(["--input", str(inputs), "--output", str(outputs), "--summary", str(summary)])
        self.startup_seconds += max(0.0, time.perf_counter() - started - json.loads(summary.read_text())["seconds"])
        scored_by = ModelInfo.model_validate_json((outputs / MODEL_JSON).read_text())
        if scored_by.sha256 != model.sha256:
            raise BatchScorerFailed(f"the batch scorer loaded {scored_by.file} (sha256 {scored_by.sha256[:12]}…), "
                                    f"not the {model.file} (sha256 {model.sha256[:12]}…) it described: did the "
                                    "model file change during the run?")

    def _run(self, arguments: list[str], *, capture: bool = False) -> str:
        """One run of the batch scorer's command: its stdout returned (`capture`), else said line
        by line as it comes; its stderr said once it ends (nothing is dropped), or quoted by
        BatchScorerFailed when it exits non-zero."""
        command = [sys.executable, "-m", "decision_server.batch", *arguments]
        command += ["--model-file", str(self.model_file)] if self.model_file is not None else []
        printed: list[str] = []
        with tempfile.TemporaryFile("w+", encoding="utf-8") as stderr:
            with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=self._environment()) as child:
                assert child.stdout is not None  # stdout=PIPE
                for line in child.stdout:
                    if capture:
                        printed.append(line)
                    else:
                        self.say(line.rstrip("\n"))
            stderr.seek(0)
            said = stderr.read().splitlines()
        if child.returncode != 0:
            tail = "\n  ".join(said[-STDERR_LINES:]) or "(nothing)"
            raise BatchScorerFailed(f"the batch scorer ({shlex.join(['python', *command[1:]])}) exited with status "
                                    f"{child.returncode}; its last lines on stderr:\n  {tail}")
        for line in said:
            self.say(line)
        return "".join(printed)

    def _environment(self) -> dict[str, str]:
        """This process's environment, with the folders its own `decision_server` and
        `decision_contract` come from first on PYTHONPATH (the child runs the code this process
        imports, however its path was set), and SM_LLAMA_CPP_THREADS when `threads` is given."""
        roots = [str(Path(origin).resolve().parents[1]) for origin in
                 (getattr(importlib.util.find_spec(package), "origin", None) for package in ("decision_server", "decision_contract"))
                 if origin]
        inherited = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys([*roots, *inherited])), PYTHONUNBUFFERED="1")
        if self.threads is not None:
            env["SM_LLAMA_CPP_THREADS"] = str(self.threads)
        return env


@dataclass
class InProcessScoring:
    """The batch scorer on the engine in this process."""

    engine: Any
    say: Callable[[str], None]
    chunk: int = BATCH_CHUNK
    description: str = "the batch scorer in this process"
    startup_seconds: float = 0.0  # the engine was loaded before

    def score_missing(self, store: SignalsStore, decisions: Sequence[Decision], keys: Sequence[str], *,
                      what: str) -> list[NotScored]:
        return score_in_chunks(self, store, decisions, keys, what=what)

    def score_chunk(self, inputs: Path, outputs: Path) -> None:
        from decision_server.batch import score_folder

        score_folder(self.engine, inputs, outputs, log=self.say)


def score_in_chunks(scorer: LocalBatchScoring | InProcessScoring, store: SignalsStore, decisions: Sequence[Decision],
                    keys: Sequence[str], *, what: str) -> list[NotScored]:
    """The batch scorer's way, in process or in a child: the decisions the store lacks written
    `scorer.chunk` a shard, each shard scored (`scorer.score_chunk`) and adopted into the store as
    soon as it is done (an interrupted run resumes at its chunk); a line the batch scorer could not
    score comes back as NotScored."""
    from decision_server.batch import write_inputs

    todo = store.missing(keys)
    if not todo:
        return []
    scorer.say(f"scoring {what}: {len(todo)} items ({len(keys) - len(todo)} cached), {scorer.chunk} a shard, "
               f"by {scorer.description}")
    not_scored: list[NotScored] = []
    for start in range(0, len(todo), scorer.chunk):
        rows = todo[start:start + scorer.chunk]
        with tempfile.TemporaryDirectory(prefix="scoring-") as tmp:
            inputs, outputs = Path(tmp) / "decisions", Path(tmp) / "signals"
            write_inputs(Rows(decisions, rows), inputs, shards=1)  # one shard: line n is rows[n - 1]
            scorer.score_chunk(inputs, outputs)
            not_scored += [NotScored(rows[line - 1], reason) for line, reason in batch_errors(outputs)]
            store.adopt(sorted(outputs.glob(f"*{SHARD_SUFFIX}")))
    return not_scored


@dataclass
class RunnerScoring:
    """One request an item to a runner (a decision server over HTTP, an endpoint): the decisions
    about one state go together, so the item's state is evaluated once and an endpoint is called
    once an item, not once a question; a few requests at once, and a progress bar says how many
    items are left."""

    runner: Runner
    model: ModelInfo
    progress: bool = True
    workers: int = 4
    save_every: int = 500
    #: Decisions in one request at most (the decision server's DECISION_MAX_DECISIONS defaults to 64).
    per_request: int = 16
    startup_seconds: float = 0.0  # the server runs already

    @property
    def description(self) -> str:
        return str(self.runner.description)

    def requests(self, decisions: Sequence[Decision], todo: Sequence[int]) -> list[list[int]]:
        """The positions in `todo`, grouped by the state their decisions share, in first-seen order,
        at most `per_request` a request."""
        by_state: dict[str, list[int]] = {}
        for index in todo:
            state = decisions[index].model_dump_json(include={"state"})
            by_state.setdefault(state, []).append(index)
        return [group[start:start + self.per_request] for group in by_state.values()
                for start in range(0, len(group), self.per_request)]

    def score_missing(self, store: SignalsStore, decisions: Sequence[Decision], keys: Sequence[str], *,
                      what: str) -> list[NotScored]:
        requests = self.requests(decisions, store.missing(keys))
        bar = tqdm(total=len(requests), desc=f"scoring {what} ({len(keys) - sum(map(len, requests))} cached)",
                   unit="item", disable=not self.progress or not requests, file=sys.stderr, mininterval=2.0)
        not_scored: list[NotScored] = []

        def one(request: list[int]) -> None:
            try:
                results = self.runner.decide([decisions[index] for index in request]).results
                if len(results) != len(request):
                    raise RunFailure(f"{len(results)} result(s) for {len(request)} decision(s)")
                for index, result in zip(request, results):
                    if result.hidden_state is None or result.model.sha256 != self.model.sha256:
                        raise RunFailure("the endpoint returned no hidden state, or another model answered")
                    store.put(keys[index], result)
            except RunFailure as failure:
                not_scored.extend(NotScored(index, str(failure)) for index in request if keys[index] not in store)
            bar.update(1)

        try:
            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                for start in range(0, len(requests), self.save_every):
                    list(pool.map(one, requests[start:start + self.save_every]))
                    store.save()
        finally:
            store.save()
            bar.close()
        return sorted(not_scored, key=lambda row: row.index)


def scorer_for(runner: Runner, model: ModelInfo, say: Callable[[str], None], *, progress: bool = True) -> Scorer:
    """The batch scorer where the runner holds the engine in this process, else one request an item."""
    engine = getattr(runner, "engine", None)
    if engine is not None:
        return InProcessScoring(engine, say)
    return RunnerScoring(runner, model, progress=progress)


@contextmanager
def scorer_here(runner: Runner | None, url: str | None, model_file: str | None, threads: int | None,
                say: Callable[[str], None], *, progress: bool = True) -> Iterator[tuple[Scorer, ModelInfo, str]]:
    """The scorer a command's arguments name, the model it scores with and its description: the
    runner a caller gives (`scorer_for`), one request an item to the decision server at `url`
    (closed after), else the batch scorer's command as a child process on `model_file` (None: the
    engine's choice, the embedded model by default) with `threads`: no engine loads in this process."""
    if runner is None and not url:
        local = LocalBatchScoring(say, model_file=Path(model_file) if model_file else None, threads=threads)
        yield local, local.describe(), local.description
        return
    from evaluation.runners import HttpRunner

    own = HttpRunner(url) if runner is None and url else None
    runner = runner or own
    assert runner is not None  # a runner given, else a url (the first branch took neither)
    try:
        model = runner.model_info()
        yield scorer_for(runner, model, say, progress=progress), model, str(runner.description)
    finally:
        if own is not None:
            own.close()


@dataclass
class SageMakerBatchScoring:
    """Every distinct decision scored in one SageMaker Processing job (`job`: a
    training.sagemaker_scoring.SageMakerScoring): the model is the one the job names."""

    job: Any
    instances: int
    yes: bool
    description: str = "one SageMaker Processing job"

    def score_all(self, decisions: Sequence[Decision], store_of: Callable[[str], SignalsStore]
                  ) -> tuple[ModelInfo, SignalsStore, list[NotScored]]:
        """The model that scored them, its store (`store_of(model sha256)`) holding their signals,
        and what could not be scored (its index: the first of the decisions asking the same)."""
        from decision_server.batch import write_inputs

        from .processing_estimate import shard_count

        first = distinct(decisions)
        with tempfile.TemporaryDirectory(prefix="scoring-") as tmp:
            inputs, outputs = Path(tmp) / "decisions", Path(tmp) / "signals"
            write_inputs(Rows(decisions, first), inputs, shard_count(len(first), self.instances))
            model = self.job.run(inputs, outputs, yes=self.yes)
            lines = _shard_lines(inputs)
            not_scored = [NotScored(first[lines[(shard, line)]], reason) for shard, line, reason in batch_errors_by_shard(outputs)]
            store = store_of(model.sha256)
            store.adopt(sorted(outputs.glob(f"*{SHARD_SUFFIX}")))
        return model, store, not_scored


def distinct(decisions: Sequence[Decision]) -> list[int]:
    """The first index of each decision that asks what no earlier one asks (the model is not
    known before the job answers, so content alone decides)."""
    seen: set[str] = set()
    first = []
    for i in range(len(decisions)):
        content = request_key("", decisions[i])
        if content not in seen:
            seen.add(content)
            first.append(i)
    return first


def _shard_lines(inputs: Path) -> dict[tuple[str, int], int]:
    """(input shard's stem, line number) → position among the decisions written, in order."""
    where: dict[tuple[str, int], int] = {}
    position = 0
    for shard in sorted(inputs.glob("part-*.jsonl")):
        with shard.open("rb") as handle:
            for number, _ in enumerate(handle, start=1):
                where[(shard.name.removesuffix(".jsonl"), number)] = position
                position += 1
    return where


def batch_errors_by_shard(outputs: Path) -> list[tuple[str, int, str]]:
    """The batch scorer's errors files: (input shard's stem, line, reason) per line it could not score."""
    from decision_server.batch import ERRORS_SUFFIX

    found = []
    for path in sorted(outputs.glob(f"*{ERRORS_SUFFIX}")):
        for text in path.read_text(encoding="utf-8").splitlines():
            if text.strip():
                error = json.loads(text)
                found.append((path.name.removesuffix(ERRORS_SUFFIX), int(error["line"]), str(error["reason"])))
    return found


def batch_errors(outputs: Path) -> list[tuple[int, str]]:
    """The errors of a single-shard run: (line, reason)."""
    return [(line, reason) for _, line, reason in batch_errors_by_shard(outputs)]
