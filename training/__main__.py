"""`python -m training` (`make fit`): fit a head for every policy question from labelled items.

    make fit                              # the shipped labelled sets, the embedded model
    make fit REVIEWS=export.jsonl         # plus your reviewers' answers (review_cli export)
    python -m training --model my.gguf --dry-run

Rows with `"split": "test"` are never fitted on: they are only scored at the end, with the
heads and thresholds fitted on everything else, through the routing function's own code. A
head is written into its policy only where it beats the letters on held-out folds (accuracy
and log-loss) and beats always-the-commonest-answer; the diff is printed.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections import defaultdict
from datetime import date
from pathlib import Path
from typing import Any

from decision_router import sentences
from evaluation.cases import Case, load_file

from . import novelty, report
from .features import Example, examples_of, score_cases
from .fitting import REPO, SHIPPED, TEST_SPLIT, fit_head
from .question_fit import QuestionFit
from .scoring import BatchScorerFailed, scorer_here
from .signals_store import SignalsStore


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training", description=__doc__.splitlines()[0])
    p.add_argument("data", nargs="*", type=Path, help="labelled JSONL in the policy format (default: the shipped sets)")
    p.add_argument("--reviews", type=Path, action="append", default=[],
                   help="a review export (review_cli export); its rows are training data")
    p.add_argument("--url", help="score with a running decision container instead of the batch scorer on this machine")
    p.add_argument("--model", help="GGUF the batch scorer loads (default: SM_LLAMA_CPP_MODEL or the embedded model)")
    p.add_argument("--threads", type=int, help="CPU threads for the batch scorer's engine")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target-error", type=float, default=None,
                   help="error rate allowed among auto-routed decisions when choosing thresholds "
                        "(default: each question's learning.max_auto_error in its policy)")
    p.add_argument("--no-curve", action="store_true", help="skip the learning curve (faster)")
    p.add_argument("--novelty-budget", type=float, default=novelty.DEFAULT_BUDGET,
                   help="share of in-scope items the heads' novelty threshold sends to review, chosen out of fold "
                        "(default %(default)s)")
    p.add_argument("--encoder", default=sentences.DEFAULT_ENCODER, choices=[*sentences.ENCODERS, "none"],
                   help="the sentence encoder the heads read beside TF-IDF (default %(default)s; none: TF-IDF alone)")
    p.add_argument("--out", type=Path, default=REPO / "reports/fit")
    p.add_argument("--cache", type=Path, default=REPO / "reports/fit/cache",
                   help="the signals store, one folder per model ('' to disable)")
    p.add_argument("--dry-run", action="store_true", help="print the policy diffs, write nothing to the policies")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None, runner=None, fitted_on: date | None = None) -> int:
    """Run the CLI; `runner` replaces the scorer the arguments name (tests pass a shared engine):
    by default the batch scorer's command scores in a child process, so no engine loads here."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    started = time.perf_counter()
    cases, sources = _load(args)
    if not cases:
        print("no usable labelled rows", file=sys.stderr)
        return 2
    say = (lambda text: None) if args.no_progress else (lambda text: print(text, file=sys.stderr))
    try:
        with scorer_here(runner, args.url, args.model, args.threads, say, progress=not args.no_progress) as (scorer, model, _):
            store = SignalsStore(args.cache / model.sha256 if str(args.cache) else None)
            _say_old_cache(args.cache, model.sha256)
            store.include_shipped(model.sha256)  # the embedded model's signals for the shipped sets ship with the code
            failures = score_cases(scorer, store, model.sha256, cases)
            examples = examples_of(store, model.sha256, cases)
    except BatchScorerFailed as failed:
        print(f"python -m training: {failed}", file=sys.stderr)
        return 2
    for failure in failures:
        print(f"not scored: {failure}", file=sys.stderr)

    from decision_router.domain.policies import load_policy

    by_question: dict[tuple[str, str], list[Example]] = defaultdict(list)
    for example in examples:
        by_question[(example.policy, example.question)].append(example)
    results = []
    for (policy_name, question_id), group in sorted(by_question.items()):
        policy = load_policy(policy_name)
        question = policy.question(question_id)
        train = [e for e in group if e.split != TEST_SPLIT]
        test = [e for e in group if e.split == TEST_SPLIT]
        fit, document = fit_as_asked(args, policy, question, train, model, sources, fitted_on or date.today())
        results.append(report.QuestionResult(policy, question, fit, document,
                                             report.score_test(question, document, test, model, fit)))

    changes = report.policy_changes(results, write=not args.dry_run)
    summary = report.build(results, changes, command="python -m training " + shlex.join(argv), model=model,
                           sources=sources, seconds=time.perf_counter() - started, failures=[str(f) for f in failures])
    paths = report.write_all(summary, results, args.out)
    report.print_summary(summary, paths)
    return 0


def _say_old_cache(cache: Path, model_sha256: str) -> None:
    """A cache file of the single-file layout an earlier `make fit` wrote is not read: its signals
    are scored again into the store (the shipped ones are read from bench/data/signals)."""
    old = cache / f"{model_sha256}.npz" if str(cache) else None
    if old is not None and old.is_file():
        print(f"{old}: a signal cache of an earlier layout, not read; what the shipped signals lack is scored "
              f"again into {old.with_suffix('')}/ (delete the file to silence this)", file=sys.stderr)


def fit_as_asked(args: argparse.Namespace, policy: Any, question: Any, train: list[Example], model: Any, sources: list[str],
                 fitted_on: date) -> tuple[QuestionFit, dict]:
    """One question's head (fitting.fit_head) as `make fit`'s arguments ask."""
    return fit_head(policy, question, train, model, sources=sources, folds=args.folds, seed=args.seed,
                    target_error=args.target_error, curve=not args.no_curve, fitted_on=fitted_on,
                    novelty_budget=args.novelty_budget, encoder=None if args.encoder == "none" else args.encoder,
                    say=None if args.no_progress else lambda text: print(text, file=sys.stderr))


def _load(args: argparse.Namespace) -> tuple[list[Case], list[str]]:
    cases: list[Case] = []
    sources: list[str] = []
    for path in args.data or SHIPPED:
        loaded = load_file(path)
        for error in loaded.errors:
            print(f"bad row, skipped: {error}", file=sys.stderr)
        cases += [c for c in loaded.cases if c.kind == "policy"]
        sources.append(_relative(path))
    for path in args.reviews:
        loaded = load_file(path)
        for error in loaded.errors:
            print(f"bad row, skipped: {error}", file=sys.stderr)
        # reviewers' answers always train; a `test` split in an export would be a mistake
        cases += [c for c in loaded.cases if c.kind == "policy" and c.split != TEST_SPLIT]
        sources.append(f"{_relative(path)} (reviews)")
    return cases, sources


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
