"""`decision-server batch`: the model's signals for folders of decisions, by SageMaker Processing's contract.

    python -m decision_server.batch [--input DIR] [--model-dir DIR | --model-file GGUF] [--output DIR]
                                    [--in-flight N] [--summary FILE]
    python -m decision_server.batch --describe [--model-dir DIR | --model-file GGUF]

Processing copies its inputs from S3 into local folders, runs the image's entrypoint, and uploads
a local output folder to S3 when the command ends. Here:

- input (`/opt/ml/processing/input/decisions`): shards `*.jsonl`, one `Decision` (the wire schema)
  a line; `write_inputs` writes such shards;
- model (`/opt/ml/processing/input/model`): a `.gguf`, or a `model.tar.gz` holding one (Processing
  copies archives as they are; it is extracted here); absent or empty: the engine's own settings
  (SM_LLAMA_CPP_MODEL, SM_LLAMA_CPP_MODEL_DIR, else the embedded model);
- output (`/opt/ml/processing/output/signals`): per input shard `part-00000.jsonl`, its rows as
  `part-00000.signals.npz` (decision_contract.signals, keyed by `request_key`), the lines that
  failed as `part-00000.errors.jsonl` (`{"line": N, "reason": "..."}`), and `model.json` once.

A shard whose signals already exist in the output for the same model is skipped, so a job run
again over the same output resumes. Each decision is its own request to the engine, many in
flight at once, so that the scheduler packs them into each forward pass as it packs concurrent
HTTP requests; the results are the HTTP path's. Progress goes to stdout (CloudWatch in Processing).
Output files are written under their final names, each in one write: Processing uploads the output
folder as files appear (`Continuous`), and how it uploads a renamed file is undocumented; whoever
downloads them checks each shard's rows against its input (training.sagemaker_scoring does).
The exit status is 0 when every shard was processed, bad lines included, and when the input folder
holds no shard (an instance that `ShardedByS3Key` gave no object: Processing fails the whole job
when any instance exits non-zero); 2 when the input folder is missing, or the model cannot load.

On a workstation (training/scoring.py `LocalBatchScoring` runs this command as a child process):
`--model-file` names the GGUF itself, `--describe` loads the model and prints its `ModelInfo` as
JSON on stdout (the log goes to stderr) and scores nothing, and `--summary` writes the run's
`BatchSummary` as JSON (its `seconds` count scoring alone, not the model's load).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import tarfile
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from pydantic import ValidationError

from decision_contract import Decision, DecisionResult
from decision_contract.signals import SHARD_SUFFIX, read_model_sha256, request_key, write_shard

from .bodies import parse_json
from .errors import BadRequest, Busy
from .model_files import ModelFileError, ggufs_under

logger = logging.getLogger("decision_server.batch")

DEFAULT_INPUT = Path("/opt/ml/processing/input/decisions")
DEFAULT_MODEL_DIR = Path("/opt/ml/processing/input/model")
DEFAULT_OUTPUT = Path("/opt/ml/processing/output/signals")
#: Processing mounts its storage volume here; the container's own disk may be too small for a GGUF.
PROCESSING_ROOT = Path("/opt/ml/processing")
INPUT_SUFFIX = ".jsonl"
ERRORS_SUFFIX = ".errors.jsonl"
MODEL_JSON = "model.json"
#: Progress lines at most this often.
PROGRESS_SECONDS = 5.0


class BatchError(RuntimeError):
    """The job cannot run (no input, no usable model); the message says what to fix."""


class NoShards(BatchError):
    """The input folder holds no shard: an error for `score_folder`, a clean exit for the command."""


@dataclass(frozen=True)
class LineError:
    """A line of an input shard that has no signals, and why (`line` counts from 1)."""

    line: int
    reason: str

    def to_json(self) -> str:
        return json.dumps({"line": self.line, "reason": self.reason}, ensure_ascii=False)


@dataclass(frozen=True)
class BatchSummary:
    shards_scored: int
    shards_skipped: int
    items: int  # lines scored (rows written)
    errors: int  # lines reported in the errors files
    seconds: float

    @property
    def items_per_second(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0


# ------------------------------------------------------------------------------------ inputs
def write_inputs(decisions: Sequence[Decision], folder: Path, shards: int) -> list[Path]:
    """Write `decisions` as input shards `part-00000.jsonl`, ... in `folder`: in their order, split
    into `shards` runs whose sizes differ by one at most (fewer shards than asked when there are
    fewer decisions). Earlier `part-*.jsonl` files there are removed: they would be scored too."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1 (got {shards})")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"part-*{INPUT_SUFFIX}"):
        old.unlink()
    count = min(shards, len(decisions))
    bounds = [len(decisions) * i // count for i in range(count + 1)] if count else [0]
    paths = []
    for i in range(count):
        path = folder / f"part-{i:05d}{INPUT_SUFFIX}"
        path.write_text("".join(d.model_dump_json() + "\n" for d in decisions[bounds[i]:bounds[i + 1]]), encoding="utf-8")
        paths.append(path)
    return paths


def input_shards(input_dir: Path) -> list[Path]:
    """The shards to score, sorted by name; BatchError when there are none."""
    if not input_dir.is_dir():
        raise BatchError(f"the input folder {input_dir} does not exist (Processing copies the decisions' S3 prefix there)")
    shards = sorted(p for p in input_dir.glob(f"*{INPUT_SUFFIX}") if p.is_file())
    if not shards:
        raise NoShards(f"the input folder {input_dir} holds no *{INPUT_SUFFIX} shard")
    return shards


def parse_line(raw: bytes) -> Decision:
    """One input line as a Decision, by the HTTP path's rules (strict JSON, then the wire schema);
    BadRequest says what is wrong, naming the field."""
    try:
        payload = parse_json(raw)
    except BadRequest as exc:
        # parse_json speaks of a request body; here it is a line
        reason = exc.fields[0]["reason"] if exc.fields else exc.message
        reason = reason.replace(" at line 1 column ", " at column ")  # the line is the JSON text
        raise BadRequest(f"the line {reason}" if reason.startswith("is ") else f"the line's JSON: {reason}") from None
    try:
        return Decision.model_validate(payload)
    except ValidationError as exc:
        raise BadRequest.from_validation(exc, prefix="decision") from None


def read_decisions(path: Path) -> tuple[list[tuple[int, Decision]], list[LineError]]:
    """A shard's decisions with their line numbers, and the lines that are not decisions; blank
    lines are neither."""
    decisions, errors = [], []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                decisions.append((number, parse_line(raw)))
            except BadRequest as exc:
                errors.append(LineError(number, exc.message))
    return decisions, errors


def count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for raw in handle if raw.strip())


# ------------------------------------------------------------------------------------ outputs
def signals_path(output_dir: Path, shard: Path) -> Path:
    return output_dir / (shard.name.removesuffix(INPUT_SUFFIX) + SHARD_SUFFIX)


def errors_path(output_dir: Path, shard: Path) -> Path:
    return output_dir / (shard.name.removesuffix(INPUT_SUFFIX) + ERRORS_SUFFIX)


def scored_before(signals: Path, model_sha256: str, say: Callable[[str], None] = logger.info) -> bool:
    """Whether `signals` holds this model's rows already (then its shard is skipped)."""
    if not signals.exists():
        return False
    try:
        found = read_model_sha256(signals)
    except ValueError as exc:
        say(f"{exc}; scoring its input again")
        return False
    if found != model_sha256:
        say(f"{signals.name} holds another model's signals (sha256 {found[:12]}…); scoring its input again")
        return False
    return True


def write_errors(path: Path, errors: Sequence[LineError]) -> None:
    """The errors file of a shard; none when every line was scored (an earlier run's is removed)."""
    if not errors:
        path.unlink(missing_ok=True)
        return
    # one write under the final name (the module's docstring says why)
    path.write_text("".join(e.to_json() + "\n" for e in sorted(errors, key=lambda e: e.line)), encoding="utf-8")


# ------------------------------------------------------------------------------------ the model
def model_in(model_dir: Path, scratch: Path) -> Path | None:
    """The GGUF that `model_dir` holds, or that its `model.tar.gz` holds (extracted into `scratch`);
    None when `model_dir` is absent or empty (the engine's own settings choose then)."""
    if not model_dir.is_dir() or not any(model_dir.iterdir()):
        return None
    found = ggufs_under(model_dir)
    where = str(model_dir)
    if not found:
        archives = sorted(model_dir.glob("*.tar.gz"))
        if len(archives) != 1:
            listing = ", ".join(p.name for p in sorted(model_dir.iterdir())[:10])
            raise ModelFileError(f"the model folder {model_dir} holds no *.gguf and {len(archives)} *.tar.gz "
                                 f"archives ({listing}); give it one GGUF or one model.tar.gz")
        extract_archive(archives[0], scratch)
        found, where = ggufs_under(scratch), str(archives[0])
    if len(found) != 1:
        raise ModelFileError(f"{where} holds {len(found)} GGUF files ({', '.join(p.name for p in found) or 'none'}); "
                             "it must hold exactly one (a split model counts once)")
    return found[0]


def extract_archive(archive: Path, into: Path) -> None:
    """Extract `archive` into `into`, refusing it whole when any member would land outside (an
    absolute name, `..`) or is a link or a device: a model archive holds files and folders only."""
    into = into.resolve()
    into.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
                if not (member.isfile() or member.isdir()):
                    raise ModelFileError(f"{archive}: {member.name!r} is a link or a special file; "
                                         "a model archive holds files and folders only")
                target = (into / member.name).resolve()
                if os.path.isabs(member.name) or not target.is_relative_to(into):
                    raise ModelFileError(f"{archive}: {member.name!r} would be written outside the extraction folder")
            # the "data" filter checks the same again (and drops owners and modes)
            tar.extractall(into, members=members, filter="data")
    except (tarfile.TarError, EOFError) as exc:
        raise ModelFileError(f"{archive} is not a readable tar archive: {exc}") from None


def load_engine(model_dir: Path, scratch: Path, model_file: Path | None = None) -> Any:
    """The DecisionEngine over the model the job was given: `model_file`, else the one in
    `model_dir` (see `model_in`)."""
    from .engine import DecisionEngine  # imported here: the fast tests of this module load no llama.cpp

    path = model_file or model_in(model_dir, scratch)
    if path is None:
        logger.info("no model in %s: the engine's settings choose it", model_dir)
        return DecisionEngine()
    return DecisionEngine(model_path=path)


# ------------------------------------------------------------------------------------ progress
class Progress:
    """Items done out of the job's total and of the current shard's, the rate and the time left,
    logged at most every `every` seconds."""

    def __init__(self, total: int, say: Callable[[str], None], every: float = PROGRESS_SECONDS) -> None:
        self.total, self.say, self.every = total, say, every
        self.done = 0
        self.started = self.last = time.perf_counter()
        self.shard, self.shard_total, self.shard_done = "", 0, 0

    def start_shard(self, name: str, total: int) -> None:
        self.shard, self.shard_total, self.shard_done = name, total, 0

    def advance(self) -> None:
        self.done += 1
        self.shard_done += 1
        now = time.perf_counter()
        if now - self.last >= self.every:
            self.last = now
            self.say(self.line(now))

    def line(self, now: float) -> str:
        rate = self.done / max(now - self.started, 1e-9)
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        return (f"{self.shard}: {self.shard_done}/{self.shard_total}; all shards: {self.done}/{self.total} items, "
                f"{rate:.2f} items/s, about {_duration(left)} left")


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


# ------------------------------------------------------------------------------------ scoring
def default_in_flight(engine: Any) -> int:
    """Twice the sequences one forward pass holds: every sequence busy, and the next request
    already queued when one finishes."""
    return 2 * engine.settings.parallel_sequences


def score_decisions(engine: Any, decisions: Sequence[tuple[int, Decision]], in_flight: int,
                    advance: Callable[[], None] = lambda: None) -> tuple[list[tuple[Decision, DecisionResult]], list[LineError]]:
    """Each decision as its own request, `in_flight` of them queued or running at once; the
    results in input order, and the lines the engine refused (BadRequest: prompt too long, a
    control token, too many options). Any other failure (the model failing) is raised."""
    # The scheduler's queue refuses work past queue_size waiting (Busy): stay below it.
    in_flight = max(1, min(in_flight, engine.settings.parallel_sequences + engine.scheduler.queue_size))
    results: dict[int, DecisionResult] = {}
    errors: list[LineError] = []
    running: dict[Future, tuple[int, int]] = {}

    def settle(done: set[Future]) -> None:
        for future in done:
            index, line = running.pop(future)
            try:
                results[index] = future.result().results[0]
            except BadRequest as exc:
                errors.append(LineError(line, exc.message))
            advance()

    for index, (line, decision) in enumerate(decisions):
        while len(running) >= in_flight:
            settle(wait(running, return_when=FIRST_COMPLETED).done)
        # The shard's rows need the hidden state whatever the line asked (it is not in the key).
        asked = decision.model_copy(update={"return_hidden_state": True})
        while True:
            try:
                work = engine.submit_decisions([asked], field="decision")
                break
            except Busy as exc:  # another user of the engine filled its queue: wait for room
                if running:
                    settle(wait(running, return_when=FIRST_COMPLETED).done)
                else:
                    time.sleep(exc.retry_after)
            except BadRequest as exc:
                work = None
                errors.append(LineError(line, exc.message))
                advance()
                break
        if work is not None:
            running[work.future] = (index, line)
    while running:
        settle(wait(running, return_when=FIRST_COMPLETED).done)
    return [(decisions[i][1], results[i]) for i in sorted(results)], errors


def write_signals(path: Path, model_sha256: str, scored: Sequence[tuple[Decision, DecisionResult]]) -> Path:
    return write_shard(
        path, model_sha256,
        keys=[request_key(model_sha256, decision) for decision, _ in scored],
        hidden=np.array([r.hidden_state for _, r in scored], dtype=np.float32) if scored else [],
        logits=[r.option_logits for _, r in scored],
        mass=[r.allowed_token_mass for _, r in scored],
        versions=[r.prompt_version for _, r in scored],
        in_place=True,
    )


def score_folder(engine: Any, input_dir: Path, output_dir: Path, *, in_flight: int | None = None,
                 log: Callable[[str], None] = logger.info, progress_seconds: float = PROGRESS_SECONDS) -> BatchSummary:
    """Score every input shard in `input_dir` not yet scored in `output_dir` for the engine's model
    (see the module's docstring for the files); BatchError when there is no input shard.

    `in_flight`: requests queued or running at once (default `default_in_flight`); `log`: where the
    progress lines and the summary go (default the `decision_server.batch` logger at INFO; `print`
    shows them where logging is not configured)."""
    started = time.perf_counter()
    shards = input_shards(input_dir)
    model = engine.model_info
    in_flight = in_flight or default_in_flight(engine)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / MODEL_JSON).write_text(model.model_dump_json(indent=2) + "\n", encoding="utf-8")

    todo = []
    for shard in shards:
        if scored_before(signals_path(output_dir, shard), model.sha256, log):
            log(f"{shard.name}: skipped, {signals_path(output_dir, shard).name} holds this model's signals already")
        else:
            todo.append(shard)
    sizes = {shard: count_lines(shard) for shard in todo}
    log(f"{len(shards)} shards in {input_dir}: {len(todo)} to score ({sum(sizes.values())} lines), "
        f"{len(shards) - len(todo)} scored before; model {model.file} (sha256 {model.sha256[:12]}…), "
        f"{in_flight} requests in flight")
    progress = Progress(sum(sizes.values()), log, progress_seconds)
    items = errors = 0
    for shard in todo:
        shard_started = time.perf_counter()
        progress.start_shard(shard.name, sizes[shard])
        decisions, bad_lines = read_decisions(shard)
        for _ in bad_lines:
            progress.advance()
        scored, refused = score_decisions(engine, decisions, in_flight, progress.advance)
        # errors first: a shard counts as scored once its signals exist
        write_errors(errors_path(output_dir, shard), bad_lines + refused)
        write_signals(signals_path(output_dir, shard), model.sha256, scored)
        items, errors = items + len(scored), errors + len(bad_lines) + len(refused)
        seconds = time.perf_counter() - shard_started
        log(f"{shard.name}: {len(scored)} items, {len(bad_lines) + len(refused)} errors in {seconds:.1f}s "
            f"({len(scored) / seconds if seconds > 0 else 0.0:.2f} items/s)")
    summary = BatchSummary(shards_scored=len(todo), shards_skipped=len(shards) - len(todo), items=items, errors=errors,
                           seconds=time.perf_counter() - started)
    log(f"done: {summary.shards_scored} shards scored, {summary.shards_skipped} skipped; {summary.items} items, "
        f"{summary.errors} errors in {summary.seconds:.1f}s ({summary.items_per_second:.2f} items/s)")
    return summary


# ------------------------------------------------------------------------------------ command line
def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="decision-server batch", description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT, help=f"folder of *.jsonl shards (default {DEFAULT_INPUT})")
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR,
                       help=f"folder holding a .gguf or a model.tar.gz (default {DEFAULT_MODEL_DIR}); absent or "
                       "empty: SM_LLAMA_CPP_MODEL, SM_LLAMA_CPP_MODEL_DIR or the embedded model")
    model.add_argument("--model-file", type=gguf_file, help="the GGUF to load (instead of --model-dir)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"folder for the signals (default {DEFAULT_OUTPUT})")
    parser.add_argument("--in-flight", type=int, default=None,
                        help="requests queued or running at once (default: twice DECISION_PARALLEL_SEQUENCES)")
    parser.add_argument("--summary", type=Path, help="also write the run's summary (items, errors, seconds scoring, "
                        "items_per_second) as JSON to this file")
    parser.add_argument("--describe", action="store_true", help="load the model, print its ModelInfo as JSON on "
                        "stdout and exit, scoring nothing (no --input needed)")
    return parser


def gguf_file(text: str) -> Path:
    """--model-file: an existing file (argparse names the option in its message)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file")
    return path


def describe(args: argparse.Namespace) -> int:
    """--describe: the model's ModelInfo as JSON, alone on stdout (the engine's log to stderr)."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s",
                        force=True)
    with tempfile.TemporaryDirectory(prefix="model-") as scratch:
        try:
            engine = load_engine(args.model_dir, Path(scratch), args.model_file)
        except Exception as exc:  # noqa: BLE001 - as in main: any failure to load names itself
            print(f"decision-server batch: the model cannot load: {exc}", file=sys.stderr)
            return 2
        try:
            print(engine.model_info.model_dump_json(), flush=True)
        finally:
            engine.close()
    return 0


def write_summary(path: Path, summary: BatchSummary) -> None:
    path.write_text(json.dumps({**dataclasses.asdict(summary), "items_per_second": summary.items_per_second}) + "\n",
                    encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.describe:
        return describe(args)
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s",
                        force=True)
    if args.in_flight is not None and args.in_flight < 1:
        print(f"decision-server batch: --in-flight must be at least 1 (got {args.in_flight})", file=sys.stderr)
        return 2
    try:
        input_shards(args.input)  # before the model loads: a job without input stops at once
    except NoShards as exc:
        # an instance of a job with fewer shards than instances: nothing to do is no failure
        print(f"decision-server batch: {exc}: this instance's share is empty, nothing to score", flush=True)
        return 0
    except BatchError as exc:
        print(f"decision-server batch: {exc}", file=sys.stderr)
        return 2
    scratch_root = PROCESSING_ROOT if PROCESSING_ROOT.is_dir() and os.access(PROCESSING_ROOT, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="model-", dir=scratch_root) as scratch:
        try:
            engine = load_engine(args.model_dir, Path(scratch), args.model_file)
        except Exception as exc:  # noqa: BLE001 - any failure to load (settings, file, llama.cpp) ends the job
            print(f"decision-server batch: the model cannot load: {exc}", file=sys.stderr)
            return 2
        try:
            summary = score_folder(engine, args.input, args.output, in_flight=args.in_flight)
            if args.summary:
                write_summary(args.summary, summary)
        finally:
            engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
