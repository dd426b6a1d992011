"""`make learn`: the relearning loop on this machine, in one command.

    python -m local.learn [--first a.jsonl] [--answers answers.jsonl] [--then b.jsonl] [--report out.jsonl]

1. Stands the stack up as `make demo` does (decision container, moto, template.yaml's resources,
   the real functions), with relearning on and the routing functions re-reading the head store
   before every item (HeadRefreshSeconds=0).
2. Routes FIRST. Each item that reached review is answered through the review function (the path
   a reviewer's answer takes) with its line of ANSWERS (`{"item_id", "answers": {question: option},
   "reviewer"?}`; questions left out take the model's suggestion; `reviewer` is the display name:
   every answer counts under this machine's AWS identity, so the per-reviewer cap is off here, and
   the shadow asks for no reviewed items); an item without a line stays pending.
   Lines for items that did not reach review are not used.
3. Runs the relearning workflow (statemachine/relearning.asl.json, executed by moto; its steps by
   the real relearning function) for every policy that got answers: fit, judge against the head
   in service on the newest labels; a candidate the gate passed then serves in shadow while the
   first items of THEN are routed (live traffic: the head in service decides them, the shadow
   answers beside it) until it has answered SHADOW_ITEMS of them; judged in shadow, it is promoted
   or refused with the reason.
4. Routes the rest of THEN with the heads now in service.

REPORT gets `make demo`'s report lines for THEN (each decision names its head version), then one
line per question: `{"question", "promoted", "reason", "current": {...}, "candidate": {...},
"shadow": {...}}`. The figures before (FIRST), in shadow and after (the rest of THEN) are printed,
with the judged heads' figures on the same newest labels and the shadows' counts.

In the stack the shipped labelled sets train every candidate with the reviews. Here they do when
the model's signals for them are at hand, so only new items ask the model: shipped with the code
for the embedded model (bench/data/signals/<sha256>.npz, training/shipped_signals.py), or in
`make fit`'s signals store (reports/fit/cache/<sha256>/). --shipped yes: always, scoring what is missing
first; no: the reviews alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, TextIO

from decision_contract.signals import SHARD_SUFFIX, read_shard, write_shard
from local.cloudformation import REPO_ROOT
from local.items import EVENTS, read_items
from local.outcomes import Outcome, report_line
from local.pipeline import LOG_DIR, LocalPipeline
from local.relearning import LOCAL_PARAMETERS, LocalRelearning, RelearningRun
from local.services import Terminated, unwinding_on_signals

SAMPLES = EVENTS / "learn"
FIT_CACHE = REPO_ROOT / "reports/fit/cache"
#: The model signals shipped for the shipped sets, one file per model's sha256 (training/signals_store.py's SHIPPED_SIGNALS).
SHIPPED_SIGNALS = REPO_ROOT / "bench/data/signals"
REVIEWER = "learn-reviewer@example.com"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m local.learn", description=__doc__.splitlines()[0])
    p.add_argument("--first", type=Path, default=SAMPLES / "first.jsonl", help="items routed before relearning")
    p.add_argument("--answers", type=Path, default=SAMPLES / "answers.jsonl",
                   help='reviewers\' answers: {"item_id", "answers": {question: option}, "reviewer"?} per line')
    p.add_argument("--then", type=Path, default=SAMPLES / "then.jsonl", help="items routed after relearning")
    p.add_argument("--report", type=Path, help="THEN's report lines, then one verdict line per question")
    p.add_argument("--model", type=Path, help="GGUF file to serve (default: the embedded SmolLM2-135M)")
    p.add_argument("--shipped", choices=["auto", "yes", "no"], default="auto",
                   help="train candidates on the shipped labelled sets too, as the stack does (auto: when the model's "
                        "signals for them are shipped or in make fit's cache; else the model scores ~1,100 items first)")
    p.add_argument("--shadow-items", type=int, default=5,
                   help="items of THEN each candidate answers in shadow before it is judged (0: judged at once)")
    p.add_argument("--log-dir", type=Path, default=LOG_DIR)
    return p


def read_answers(path: Path) -> dict[str, dict[str, str]]:
    """item id -> answers; a bad line is an error naming its line and field."""
    return {item_id: given for item_id, (given, _) in read_answer_lines(path).items()}


def read_answer_lines(path: Path) -> dict[str, tuple[dict[str, str], str]]:
    """item id -> (answers, who answered: the line's `reviewer`, REVIEWER if it has none); a bad
    line is an error naming its line and field."""
    answers: dict[str, tuple[dict[str, str], str]] = {}
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path.name}:{number}: not JSON ({error.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("item_id"), str):
            raise ValueError(f"{path.name}:{number}: item_id: a string is required")
        given = row.get("answers")
        if not isinstance(given, dict) or not given or not all(isinstance(v, str) for v in given.values()):
            raise ValueError(f"{path.name}:{number}: answers: an object of question -> option id is required")
        reviewer = row.get("reviewer", REVIEWER)
        if not isinstance(reviewer, str) or not reviewer.strip():
            raise ValueError(f"{path.name}:{number}: reviewer: a non-empty string is required when given")
        answers[row["item_id"]] = (given, reviewer)
    return answers


def figures(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    """Per policy question: decisions, the share auto-routed, and the heads that decided."""
    out: dict[str, dict[str, Any]] = {}
    for outcome in outcomes:
        record = outcome.record
        if record is None:
            continue
        for d in record.decisions:
            if d.source != "model":
                continue
            row = out.setdefault(f"{record.policy.name}/{d.question}", {"decisions": 0, "auto": 0, "heads": set()})
            row["decisions"] += 1
            row["auto"] += int(d.passed)
            row["heads"].add(d.head_version or "letters")
    return out


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    out = out or sys.stdout
    began = time.monotonic()

    def progress(message: str) -> None:
        print(f"[{time.monotonic() - began:6.1f}s] {message}", file=out, flush=True)

    problems = [f"--{name} {path}: no such file" for name, path in
                (("first", args.first), ("answers", args.answers), ("then", args.then)) if not path.is_file()]
    if args.shadow_items < 0:
        problems.append(f"--shadow-items {args.shadow_items}: must be 0 or more")
    if problems:
        print("learn: " + "; ".join(problems), file=sys.stderr)
        return 2
    try:
        answers = read_answer_lines(args.answers)
        with unwinding_on_signals():
            return _run(args, answers, progress, out)
    except ValueError as error:
        print(f"learn: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nlearn: interrupted; every process it started has been stopped", file=sys.stderr)
        return 130
    except Terminated as stop:
        print(f"\nlearn: stopped by signal {stop.args[0]}", file=sys.stderr)
        return 128 + stop.args[0]
    except Exception as error:  # noqa: BLE001 - one clear line, and the logs
        print(f"\nlearn failed: {type(error).__name__}: {error}\n(logs: {args.log_dir})", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, answers: dict[str, tuple[dict[str, str], str]], progress: Callable[[str], None],
         out: TextIO) -> int:
    from decision_server.model_files import embedded_model_path
    from local.services import DecisionContainer, MotoServer, local_aws_environ, patched_environ

    args.log_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as cleanup:
        container = cleanup.enter_context(DecisionContainer(args.log_dir / "decision-server.log", model=args.model))
        moto = cleanup.enter_context(MotoServer())
        cleanup.enter_context(patched_environ(local_aws_environ(moto, container.url)))
        log = cleanup.enter_context(open(args.log_dir / "lambda.log", "w", encoding="utf-8"))
        pipeline = cleanup.enter_context(LocalPipeline(log=log, parameters={
            # The loop promotes on its own here: nobody is there to approve (a deployment's default is
            # RelearningApproval=manual: a person approves each promotion).
            **LOCAL_PARAMETERS, "RelearningApproval": "auto", "HeadRefreshSeconds": "0", "RelearningMinNewLabels": "1",
            "RelearningShadowItems": str(args.shadow_items), "RelearningShadowCheckSeconds": "1",
            "RelearningShadowTimeoutSeconds": str(SHADOW_TIMEOUT_SECONDS),
            # The demo's live items in shadow are routed, never reviewed, and every answer comes from this
            # machine's one AWS identity (the review function counts the caller, not the line's
            # `reviewer`): no cap per reviewer here. A deployment keeps the defaults.
            "RelearningShadowMinReviewed": "0", "RelearningShadowMaxDisagreement": "1",
            "RelearningMaxReviewerShare": "1"}))
        shipped = args.shipped == "yes" or (args.shipped == "auto" and signals_at_hand(args.model or embedded_model_path()))
        # RELEARNING_SHIPPED_SETS unset: the shipped sets (relearning.app.shipped_sets); empty: none.
        relearning = LocalRelearning(pipeline.stack, log=log, env=None if shipped else {"RELEARNING_SHIPPED_SETS": ""})
        if not shipped:
            progress("candidates train on the reviews alone (no make fit signal cache; --shipped yes to score the "
                     "shipped sets first)")
        cleanup.callback(relearning.close)
        container.wait_ready(on_wait=lambda s: progress(f"... loading the model ({s:.0f}s)"))
        progress("stack ready (relearning on, heads re-read before every item)")

        first = pipeline.run(read_items([args.first]), progress)
        answered: dict[str, int] = {}
        for outcome in first:
            item_id = outcome.item.item_id
            if item_id in answers and item_id in pipeline.pending_reviews and outcome.status == "RUNNING":
                given, reviewer = answers[item_id]
                pipeline.complete_review(outcome, reviewer, answers=given)
                policy = outcome.record.policy.name if outcome.record else "?"
                answered[policy] = answered.get(policy, 0) + 1
        progress(f"FIRST routed ({len(first)} lines); reviews answered: "
                 + (", ".join(f"{n} {p}" for p, n in answered.items()) or "none"))

        _seed_signals(pipeline)
        runs: list[RelearningRun] = []
        live = ShadowTraffic(pipeline, read_items([args.then]), progress)
        for policy in sorted(answered):
            progress(f"relearning {policy} (the relearning workflow in moto, its steps by the relearning function)")
            run = relearning.run(policy, progress=progress, while_waiting=live.route_next)
            progress(f"relearning {policy}: {run.status} in {run.seconds:.0f}s")
            runs.append(run)

        after = pipeline.run(live.rest(), progress)
        then = live.routed + after
        verdicts = [v for run in runs for v in run.verdicts()]
        _print_figures(out, {"FIRST": figures(first), "in shadow": figures(live.routed), "after": figures(after)},
                       verdicts)
        if args.report:
            args.report.parent.mkdir(parents=True, exist_ok=True)
            with open(args.report, "w", encoding="utf-8") as handle:
                for outcome in then:
                    handle.write(json.dumps(report_line(outcome), ensure_ascii=False) + "\n")
                for verdict in verdicts:
                    handle.write(json.dumps({k: v for k, v in verdict.items() if k != "policy"}, ensure_ascii=False)
                                 + "\n")
            print(f"\nReport: {args.report}", file=out)
    return 0


#: How long a local candidate may serve in shadow without reaching --shadow-items (THEN too short).
SHADOW_TIMEOUT_SECONDS = 120


def signals_at_hand(model: Path, shipped: Path = SHIPPED_SIGNALS, fit_cache: Path = FIT_CACHE) -> bool:
    """Whether the model's signals for the shipped sets are here: shipped for this model (by its
    sha256), or in make fit's cache (any)."""
    from decision_server.model_files import describe

    return (shipped / f"{describe(model).sha256}.npz").is_file() or any(fit_cache.glob(f"*/*{SHARD_SUFFIX}"))


class ShadowTraffic:
    """THEN's items as live traffic: while a candidate serves in shadow, routed one at a time
    (the head in service decides them, the shadow answers beside it); the rest after."""

    def __init__(self, pipeline: LocalPipeline, items: list, progress: Callable[[str], None]):
        self.pipeline, self.waiting, self.progress = pipeline, list(items), progress
        self.routed: list[Outcome] = []

    def shadows(self) -> list[str]:
        """The policy questions a candidate serves in shadow now."""
        from decision_router.adapters.head_store import HeadStore
        from decision_router.domain.policies import load_policy

        env = self.pipeline.tickets.env
        store = HeadStore(env["HEAD_STORE_BUCKET"], env["HEAD_PARAMETER_PREFIX"], env["HEAD_HISTORY_TABLE_NAME"])
        return [f"{p}/{q.id}" for p in ("support-ticket", "incident") for q in load_policy(p).questions
                if store.shadow_pointer(p, q.id) is not None]

    def route_next(self) -> bool:
        """Route THEN's next item if a shadow is serving; whether one was routed."""
        if not self.waiting:
            return False
        shadows = self.shadows()
        if not shadows:
            return False
        item = self.waiting.pop(0)
        self.routed += self.pipeline.run([item])
        self.progress(f"in shadow ({', '.join(shadows)}): routed {item.source}")
        return True

    def rest(self) -> list:
        rest, self.waiting = self.waiting, []
        return rest


def _seed_signals(pipeline: LocalPipeline) -> None:
    """`make fit`'s cached model signals for the shipped sets (same keys), so the relearning
    function asks the model only for what it has not seen: one object per policy and model."""
    import boto3

    bucket = pipeline.tickets.env["HEAD_STORE_BUCKET"]
    s3 = boto3.client("s3")
    for folder in sorted(p for p in FIT_CACHE.glob("*") if p.is_dir()):
        body = _one_shard(folder)
        for policy in ("support-ticket", "incident"):
            if body is not None:
                s3.put_object(Bucket=bucket, Key=f"signals/{policy}/{folder.name}.npz", Body=body)


def _one_shard(folder: Path) -> bytes | None:
    """A model's folder of `make fit`'s signals store as one shard, the file relearning keeps
    (decision_contract.signals); None when the folder holds no shard."""
    shards = [read_shard(path) for path in sorted(folder.glob(f"*{SHARD_SUFFIX}"))]
    rows = {key: shard.row(i) for shard in shards for i, key in enumerate(shard.keys)}
    if not rows:
        return None
    keys = sorted(rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_shard(Path(tmp) / f"{folder.name}.npz", shards[0].model_sha256, keys, [rows[k][0] for k in keys],
                           [rows[k][1].tolist() for k in keys], [rows[k][2] for k in keys], [rows[k][3] for k in keys],
                           compress=True)
        return path.read_bytes()


def _print_figures(out: TextIO, stages: dict[str, dict], verdicts: list[dict[str, Any]]) -> None:
    print("\nBefore (FIRST), in shadow (THEN's first items) and after (the rest of THEN), per question: "
          "share routed automatically, heads that decided", file=out)
    for key in sorted(set().union(*stages.values())):
        cells = []
        for name, table in stages.items():
            row = table.get(key)
            cells.append(f"{name} {row['auto']}/{row['decisions']} auto ({', '.join(sorted(row['heads']))})"
                         if row else f"{name} -")
        print(f"  {key:28} " + "   ".join(cells), file=out)
    print("\nRelearning, judged on the same newest labels (current head vs candidate):", file=out)
    for v in verdicts:
        c, n = v["current"], v["candidate"]
        line = f"  {v['policy']}/{v['question']}: {'PROMOTED' if v['promoted'] else 'refused'}: {v['reason']}"
        if c and n:
            line += (f"\n      accuracy {c['accuracy']:.3f} -> {n['accuracy']:.3f}, log loss {c['log_loss']:.3f} -> "
                     f"{n['log_loss']:.3f}, auto {c['auto_routed_share']:.0%} -> {n['auto_routed_share']:.0%} "
                     f"(wrong {c['auto_routed_error']:.1%} -> {n['auto_routed_error']:.1%})")
        elif c:
            line += (f"\n      head in service on the {c['decisions']} newest labels: accuracy {c['accuracy']:.3f}, "
                     f"log loss {c['log_loss']:.3f}, auto {c['auto_routed_share']:.0%}")
        shadow = v.get("shadow")
        if shadow:
            line += (f"\n      in shadow: {shadow['items']} items, agreed on {shadow['agreed']}, "
                     f"{shadow['reviewed']} reviewed")
        print(line, file=out)


if __name__ == "__main__":
    sys.exit(main())
