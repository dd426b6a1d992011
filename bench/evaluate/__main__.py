"""`python -m bench.evaluate`: accuracy, calibration, thresholds, latency and the decode
comparison for labelled decisions, scored by a running container (`--url`) or in-process.

    python -m bench.evaluate                          # the shipped sets, embedded model
    python -m bench.evaluate my.jsonl --url http://127.0.0.1:8080
    python -m bench.evaluate bench/data/support-tickets.jsonl --write-policy

Exit status: 0 when a report was written (bad rows are listed in it and on stderr), 1 with
--strict when any row was bad or failed, 2 when nothing could be scored.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# So that the command works from a checkout without PYTHONPATH (the Makefile sets it too).
for _sub in ("contract", "container", "functions", ""):
    _path = str(REPO / _sub) if _sub else str(REPO)
    if _path not in sys.path:
        sys.path.append(_path)

from tqdm import tqdm

from evaluation.cases import Case, RowError, RowWarning, load_file
from evaluation.runners import EngineRunner, HttpRunner, Runner

from . import decode, policy_update
from . import report as reporting
from .analysis import analyse, score_cases
from .schema import DecodeComparison, EvalReport, PolicyChangeReport, RunInfo

SHIPPED = [
    REPO / "bench/data/support-tickets.jsonl",
    REPO / "bench/data/incidents.jsonl",
    REPO / "bench/data/jevbench-sample.jsonl",
]


def _unit(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="*", type=Path, help="labelled JSONL files (policy or JevBench format); default: the shipped sets")
    where = p.add_argument_group("where decisions are scored (default: the engine in this process)")
    where.add_argument("--url", help="a running decision container, e.g. http://127.0.0.1:8080 (real HTTP /invocations)")
    where.add_argument("--model", type=Path, help="GGUF for the in-process engine (default: SM_LLAMA_CPP_MODEL or the embedded model)")
    where.add_argument("--threads", type=_positive, help="CPU threads for the in-process engine")
    where.add_argument("--ctx-size", type=_positive, help="context size for the in-process engine")
    p.add_argument("--limit", type=_positive, help="at most this many rows per file (quick runs)")
    p.add_argument(
        "--split",
        action="append",
        metavar="NAME",
        help="only rows whose `split` is NAME (e.g. test, or JevBench's public); repeat for several; "
        "rows of other splits are counted, not scored",
    )
    p.add_argument(
        "--folds",
        type=_positive,
        default=5,
        help="cross-validation folds for ECE after calibration (default 5); rows sharing a `group` stay in one fold",
    )
    p.add_argument("--seed", type=int, default=0, help="shuffle seed of the folds (default 0)")
    p.add_argument("--target-error", type=_unit, default=0.10, help="error rate the recommended threshold must meet with 95 %% confidence "
                   "(default 0.10)")
    p.add_argument("--min-auto", type=_positive, default=5, help="auto-routed decisions a threshold needs to be recommended (default 5)")
    p.add_argument("--no-decode", action="store_true", help="skip the readout-vs-generation comparison")
    p.add_argument("--decode-limit", type=_positive, help="compare decoding on at most this many decisions (default: all)")
    p.add_argument("--decode-max-tokens", type=_positive, default=decode.GENERATION_MAX_TOKENS,
                   help="generation budget (default %(default)s)")
    p.add_argument("--out", type=Path, default=REPO / "reports/eval", help="report directory (default reports/eval)")
    p.add_argument("--write-policy", action="store_true",
                   help="write the fitted temperature and recommended min_confidence into the policy files")
    p.add_argument("--strict", action="store_true", help="exit 1 when any row was bad or could not be scored")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def _runner(args: argparse.Namespace) -> Runner:
    if args.url:
        return HttpRunner(args.url)
    print("loading the decision engine in this process …", file=sys.stderr)
    return EngineRunner.load(model_path=args.model, threads=args.threads, n_ctx=args.ctx_size)


def _policy_changes(report: EvalReport, write: bool) -> list[PolicyChangeReport]:
    per_policy: dict[str, dict[str, policy_update.QuestionChange]] = defaultdict(dict)
    for name, group in report.calibration.items():
        if group.policy_now is None:
            continue
        policy, question = name.rsplit("/", 1)
        per_policy[policy][question] = policy_update.QuestionChange(
            question=question,
            temperature=group.temperature_fit.temperature,
            min_confidence=group.recommended_min_confidence,
        )
    out = []
    for policy, changes in per_policy.items():
        change = policy_update.propose(policy, changes)
        if write and change.changed:
            policy_update.write(change)
        out.append(PolicyChangeReport(policy=policy, path=str(change.path), diff=change.diff,
                                      written=write and change.changed))
    return out


def main(argv: list[str] | None = None, runner: Runner | None = None) -> int:
    """Run the CLI; `runner` replaces the one the arguments name (tests pass a shared engine)."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    files = args.data or SHIPPED
    cases: list[Case] = []
    row_errors: list[RowError] = []
    row_warnings: list[RowWarning] = []
    skipped: dict[str, dict[str, int]] = {}
    for path in files:
        loaded = load_file(path, args.limit, splits=args.split)
        cases += loaded.cases
        row_errors += loaded.errors
        row_warnings += loaded.warnings
        if loaded.skipped:
            skipped[str(path)] = loaded.skipped
    for error in row_errors:
        print(f"bad row, skipped: {error}", file=sys.stderr)
    for warning in row_warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for path, counts in skipped.items():
        print(f"{path}: not in --split {', '.join(args.split)}: {_counts(counts)}", file=sys.stderr)
    if not cases:
        print("no usable rows: nothing to evaluate" + (f" (--split {', '.join(args.split)})" if args.split else ""), file=sys.stderr)
        return 2

    runner = runner or _runner(args)
    started = time.perf_counter()
    try:
        total = sum(len(c.decisions) for c in cases)
        with tqdm(total=total, unit="decision", desc="readout", disable=args.no_progress, file=sys.stderr) as bar:
            run = score_cases(runner, cases, progress=bar.update)
        for failure in run.failures:
            print(f"not scored: {failure}", file=sys.stderr)
        report = analyse(run, folds=args.folds, seed=args.seed, target_error=args.target_error, min_auto_routed=args.min_auto)
        if not args.no_decode and run.observations:
            items = [(o.decision, o.gold_index) for o in run.observations][: args.decode_limit]
            with tqdm(total=len(items), unit="decision", desc="readout vs generation", disable=args.no_progress, file=sys.stderr) as bar:
                pairs = decode.compare(runner, items, args.decode_max_tokens, progress=bar.update)
            report.decode_comparison = DecodeComparison.model_validate(
                {**decode.summarise(pairs), "max_tokens": args.decode_max_tokens})
    finally:
        runner.close()

    report.run = RunInfo(
        command="python -m bench.evaluate " + shlex.join(argv),
        runner=runner.description,
        data=[str(p) for p in files],
        splits=args.split,
        rows_of_other_splits=skipped,
        seconds=round(time.perf_counter() - started, 1),
    )
    report.row_errors = [str(e) for e in row_errors]
    report.row_warnings = [str(w) for w in row_warnings]
    report.scoring_failures = [str(f) for f in run.failures]
    report.policy_changes = _policy_changes(report, args.write_policy) if run.observations else []
    paths = reporting.write_all(report, args.out)
    _print_summary(report, paths)
    if not run.observations:
        return 2
    return 1 if args.strict and (row_errors or run.failures) else 0


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {split}" for split, n in sorted(counts.items()))


def _print_summary(report: EvalReport, paths: dict[str, Path]) -> None:
    if report.overall and report.latency:
        o = report.overall
        print(f"decisions {report.decisions}: accuracy {o.accuracy:.1%}, ECE {o.ece:.3f}, log-loss {o.log_loss:.3f}")
        for name, g in report.calibration.items():
            cv = g.cross_validated
            print(
                f"  {name}: n={g.decisions} accuracy {g.at_t1.accuracy:.1%}, T={g.temperature_fit.temperature:.3f}, "
                f"ECE {g.at_t1.ece:.3f} -> {cv.after.ece:.3f} (out-of-fold)" if cv else f"  {name}: n={g.decisions}"
            )
        lat = report.latency.per_decision_seconds
        print(f"latency per decision: median {reporting.ms(lat.median)}, p95 {reporting.ms(lat.p95)}")
        d = report.decode_comparison
        if d and d.readout and d.generation:
            print(
                f"decode: readout {d.readout.accuracy:.1%} median {reporting.ms(d.readout.latency_seconds.median)} | "
                f"generation {d.generation.accuracy:.1%} median {reporting.ms(d.generation.latency_seconds.median)} | "
                f"ratio {d.ratio_median or 0.0:.2f}x"
            )
    for change in report.policy_changes:
        state = "written" if change.written else "proposed (run with --write-policy to apply)"
        print(f"\npolicy {change.policy}: {state}\n{change.diff or '(no change)'}")
    print(f"report: {paths['markdown']} (JSON {paths['json']})")


if __name__ == "__main__":
    sys.exit(main())
