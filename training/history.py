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

The command is a thin line of steps, one module each: the export read and OUT checked
(training/history_export.py), the targets checked against the deployment's destinations
(training/history_targets.py), the text alone's outlook (training/history_outlook.py), the model's
signals scored into the signals store (training/history_scoring.py over training/scoring.py and
training/signals_store.py), the head fitted
(training/history_fit.py), TEST judged as routing judges it (training/history_judging.py), and the
report (training/history_report.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from decision_contract import DEFAULT_LAYOUT, Decision, Layout
from decision_router import sentences
from decision_router.domain.policies import Question, load_policy
from evaluation.runners import Runner

from . import history_report, learn, novelty
from .head_fit import MODEL_WEIGHTS
from .history_export import Export, ExportAsked, check_out, read_export
from .history_fit import Fitted, fit
from .history_judging import Judged, judge_test
from .history_outlook import curve_outlook, text_curve
from .history_policy import MERGED, HistoryError, states
from .history_report import build_report, last_line, out_of_scope_line
from .history_scoring import ExportSignals, OnSageMaker, WhereScored, requests, sagemaker_preflight, score_export, text_only_signals
from .history_targets import STARTING_MAP
from .signals_store import DEFAULT_CACHE


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
                   help="fix the model's weight instead of choosing it on held-out rows (0: the text alone)")
    p.add_argument("--out-of-scope-label", help="the label that means \"none of these\" (e.g. oos): its DATA items are "
                   "never an option (the novelty part's catch of them is reported), its TEST items are out of scope")
    p.add_argument("--novelty-budget", type=float, default=novelty.DEFAULT_BUDGET,
                   help="share of in-scope items the head's novelty threshold sends to review, chosen out of fold on DATA "
                        "(default %(default)s; in the sentence encoder's space, or over the hidden state with --encoder none; "
                        "none with --encoder none and --text-only or --model-weight 0)")
    p.add_argument("--layout", choices=typing.get_args(Layout),
                   help="the prompt layout of a many-option question's signals decision (default: the request's own)")
    p.add_argument("--limit", type=int, help="only the first N rows of DATA and of TEST (a quick look)")
    p.add_argument("--model", help="GGUF the batch scorer loads, in a child process (default: the embedded model)")
    p.add_argument("--url", help="score with a running decision container instead (one request an item)")
    p.add_argument("--on", choices=("local", "sagemaker"), default="local",
                   help="where the rows are scored: on this machine, or in one SageMaker Processing job of --stack")
    p.add_argument("--stack", help="--on sagemaker: the deployed stack whose image, model and scoring role are used")
    p.add_argument("--instances", type=instance_count, default=1, help="--on sagemaker: instances of the processing job (1-100)")
    p.add_argument("--instance-type", default="ml.c7i.8xlarge", help="--on sagemaker: their type")
    p.add_argument("--yes", action="store_true", help="--on sagemaker: start the paid job (after the printed estimate)")
    p.add_argument("--threads", type=int, help="CPU threads of the batch scorer's engine (default: SM_LLAMA_CPP_THREADS, "
                   "else the machine's cores)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="signal cache folder ('' to disable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    return p


def instance_count(text: str) -> int:
    """--instances: a whole number from 1 to 100, refused by argparse naming the option."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= count <= 100:
        raise argparse.ArgumentTypeError(f"{count}: a processing job runs on 1 to 100 instances")
    return count


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command's arguments; arguments that contradict each other are refused here, before
    anything is read (argparse's message and exit status 2)."""
    p = parser()
    args = p.parse_args(argv)
    if args.on == "sagemaker" and not args.stack:
        p.error("--on sagemaker needs --stack (make fit-history ON=sagemaker STACK=name): the deployed stack "
                "whose image, model and scoring role the job uses")
    if args.text_only and (args.on == "sagemaker" or args.url or args.model or args.model_weight):
        p.error("--text-only (MODEL=none) scores nothing: it takes no --on sagemaker, --url, --model or "
                "--model-weight other than 0")
    return args


def main(argv: list[str] | None = None, runner: Runner | None = None) -> int:
    args = parse(argv)
    try:
        run(args, runner)
    except HistoryError as error:
        print(f"fit-history: {error}", file=sys.stderr)
        return 2
    return 0


def run(args: argparse.Namespace, runner: Runner | None = None) -> dict[str, Any]:
    """The command: read the export (its targets checked), the outlook, score, fit, judge TEST, report."""
    started = time.perf_counter()
    say = (lambda text: None) if args.no_progress else (lambda text: print(text, file=sys.stderr, flush=True))
    check_out(args.out, (args.data, args.test, args.targets), args.replace, say)
    where = where_scored(args)
    # the account, the stack and the estimate before minutes of reading, embedding and scoring
    sagemaker = None
    if where.sagemaker is not None and not args.text_only:
        sagemaker = sagemaker_preflight(where.sagemaker, (args.data, args.test), args.limit, say)
    export, asked = fetch_and_read(args, say)
    prepared = prepare(args, export, say)
    if args.text_only:
        signals = text_only_signals(export.question, len(prepared.train_states), len(prepared.test_states))
    else:
        signals = score_export(where, runner, (prepared.train_request, len(prepared.scored_states)),
                               (prepared.test_request, len(prepared.test_states)), len(prepared.train_states), say, sagemaker)
    fitting = time.perf_counter()
    fitted = fit_head(args, export, prepared, signals, say)
    fitting = time.perf_counter() - fitting
    question, head_file = write_policy(args.out, export.raw, fitted.document)
    judged = judge_test(question, export.vocab, export.test_rows, prepared.test_states, signals.test_signals, signals.model,
                        export.fields, args.label)
    write_predictions(args.out, judged)
    seconds = {"text_curve": prepared.curve["seconds"], "scoring": round(signals.seconds, 1), "fitting": round(fitting, 1),
               "total": round(time.perf_counter() - started, 1)}
    report = build_report(asked, export, question, judged, fitted, head_file=head_file, curve=prepared.curve,
                          outlook=prepared.outlook, model=None if args.text_only else signals.model, seconds=seconds)
    (args.out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    say_report(report, args.out, head_file[0], question, say)
    return report


def where_scored(args: argparse.Namespace) -> WhereScored:
    """Where the command's arguments have the rows scored."""
    on = OnSageMaker(args.stack, args.instances, args.instance_type, args.yes) if args.on == "sagemaker" else None
    return WhereScored(args.cache, url=args.url, model=args.model, threads=args.threads, progress=not args.no_progress,
                       sagemaker=on)


def fetch_and_read(args: argparse.Namespace, say: Callable[[str], None]) -> tuple[Export, ExportAsked]:
    """The export, an `s3://` DATA or TEST downloaded first (into a folder gone once it is read),
    and what the arguments asked of it (its files as read)."""
    with tempfile.TemporaryDirectory(prefix="fit-history-export-") as downloads:
        if any(str(path).startswith("s3://") for path in (args.data, args.test)):
            from .sagemaker_scoring import fetch_export

            args.data, args.test = (fetch_export(path, Path(downloads) / name) for name, path in
                                    (("data", args.data), ("test", args.test)))
        args.data, args.test = Path(args.data), Path(args.test)
        asked = ExportAsked.of(args)
        return read_export(asked, say), asked


@dataclass
class Prepared:
    """Each row's state and request, and the text alone's curve and what it says, before scoring."""

    train_states: list[Any]
    test_states: list[Any]
    scored_states: list[Any]  # DATA's option rows, then its out-of-scope rows
    train_request: Callable[[int], Decision]
    test_request: Callable[[int], Decision]
    curve: dict[str, Any]
    outlook: str


def prepare(args: argparse.Namespace, export: Export, say: Callable[[str], None]) -> Prepared:
    """Each row's state and request, and the text alone at a few training sizes (`text_curve`)
    with what it says of scoring (`curve_outlook`), printed before anything is scored."""
    fields, raw, question, vocab = export.fields, export.raw, export.question, export.vocab
    train_states, test_states = states(raw, export.train_rows, fields), states(raw, export.test_rows, fields)
    # DATA's out-of-scope items are scored after its others: their hidden states only test the novelty part
    scored_states = train_states + states(raw, export.out_of_scope_rows, fields)
    say(f"{len(vocab.options)} options; {len(export.train_rows)} training and {len(export.test_rows)} test items")
    curve = text_curve(raw, train_states, export.gold, args.seed)
    # a question of at most 16 options is asked lettered, in no layout
    outlook = curve_outlook(curve, len(export.train_rows), len(vocab.options), len(export.train_rows) + len(export.test_rows),
                            args.text_only, (args.layout or DEFAULT_LAYOUT) if question.many_options else None)
    say("the text alone, by training rows (accuracy on a held-out fifth of DATA): "
        + ", ".join(f"{point['rows']}: {point['accuracy']:.3f}" for point in curve["points"]) + f" ({curve['seconds']:.0f} s)")
    say(outlook)
    return Prepared(train_states, test_states, scored_states, requests(question, scored_states, args.layout),
                    requests(question, test_states, args.layout), curve, outlook)


def fit_head(args: argparse.Namespace, export: Export, prepared: Prepared, signals: ExportSignals,
             say: Callable[[str], None]) -> Fitted:
    """The head on DATA (training/history_fit.py `fit`), as the command's arguments ask."""
    n_train = len(prepared.train_states)
    return fit(export.raw, prepared.train_states, signals.train_hidden, export.gold, prepared.test_states, signals.test_hidden,
               model=signals.model, prompt_version=signals.prompt_version, max_error=args.max_error, seed=args.seed,
               data=[f"{args.data.name}"], say=say, terms_cap=args.max_terms,
               model_weight=0.0 if args.text_only else args.model_weight,
               # a head asked to read the text alone reads no hidden state, novelty's included: its
               # novelty part is in the sentence encoder's space, or it has none
               novelty_budget=args.novelty_budget,
               out_of_scope_hidden=signals.out_of_scope_hidden, out_of_scope_states=prepared.scored_states[n_train:],
               encoder=None if args.encoder == "none" else args.encoder)


def write_policy(out: Path, raw: dict[str, Any], document: dict[str, Any]) -> tuple[Question, tuple[str, int]]:
    """The head and policy.json written into OUT (a previous run's heads removed) and loaded back
    by the routing function's own loader: its question, and the head's file name and bytes."""
    (out / "heads").mkdir(parents=True, exist_ok=True)
    for stale in (out / "heads").glob("*.json"):  # a previous run's (--replace): only this run's head stays
        stale.unlink()
    question = raw["questions"][0]
    head_bytes = learn.head_bytes(document)
    head_name = f"heads/{question['id']}.json"
    (out / head_name).write_bytes(head_bytes)
    question["head"] = {"file": head_name, "sha256": hashlib.sha256(head_bytes).hexdigest()}
    # a head on the words alone answers without the endpoint; only what it is unsure of is asked
    question["model"] = "always" if "hidden" in document else "when_unsure"
    (out / "policy.json").write_text(json.dumps(raw, indent=2, ensure_ascii=False) + "\n")
    return load_policy(out / "policy.json").questions[0], (head_name, len(head_bytes))


def write_predictions(out: Path, judged: Judged) -> None:
    with (out / "predictions.jsonl").open("w", encoding="utf-8") as handle:
        for line in judged.lines:
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")


def say_report(report: dict[str, Any], out: Path, head_name: str, question: Question, say: Callable[[str], None]) -> None:
    """The figures, per group, out of scope, and the verdict last (printed even with --no-progress)."""
    without = " from the words alone, without the endpoint," if question.model != "always" else ""
    say(f"accuracy {report['accuracy']:.3f} (text classifier {report['baseline']['accuracy']:.3f}); answered automatically"
        f"{without} {report['auto_share']:.3f} {history_report.precision_words(report['auto_precision'])}; "
        f"wrote {out}/policy.json, {head_name}, predictions.jsonl, report.json in {report['seconds']['total']:.0f} s")
    for line in history_report.group_lines(report["groups"], report["target_precision"]):
        print(f"fit-history: {line}", file=sys.stderr, flush=True)
    scope_line = out_of_scope_line(report)
    if scope_line:
        print(f"fit-history: {scope_line}", file=sys.stderr, flush=True)
    print(f"fit-history: {last_line(report)}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
