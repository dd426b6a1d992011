"""`make demo`: the whole Decision Router on this machine, no AWS account, no network.

    python -m local.demo [--model path.gguf] [--items items.jsonl ...] [--policy policy.json ...] [--report out.jsonl] [--no-review]

1. Starts the decision container (`python -m decision_server`, embedded SmolLM2-135M unless
   --model) and a moto server, each on a free loopback port.
2. Creates template.yaml's queues, bus, rules, tables and routing state machine in moto.
3. Sends every ticket to the ticket queue and runs the real ticket-intake handler on SQS batches,
   and puts every incident on the bus and runs the real incident-intake handler on what the
   rule delivers; boto3's `sagemaker-runtime` calls the local container, all else goes to moto,
   whose Step Functions interpreter executes the real routing workflow.
4. Waits for the executions, reads back where every item actually ended up (team queue, review
   queue, a DLQ) and prints the table; then completes one pending review through the real review
   function to show the loop closing.

Items files hold one JSON object per line: tickets and/or incidents in our own shapes (told apart
by `ticket_id` / `incident_id`), or raw events as their sources emit them: EventBridge events
(CloudWatch alarms, AWS Health, GuardDuty, Security Hub's ASFF and OCSF feeds, PagerDuty, and the
PagerDuty / Grafana webhooks the webhook API forwards: put on the bus they arrive on, where the
template's rules decide what reaches the incident intake), SNS notifications holding a ticket
(sent to the ticket queue as SNS would) or a CloudWatch alarm, and CloudWatch's Lambda alarm
actions (both handed to the incident intake as SNS and CloudWatch invoke it), and Zendesk / Jira
webhook bodies (signed with the stack's webhook secret and posted to the webhook function). A line that is none
of these is reported as rejected with its reason; one that fails validation goes through its
intake and lands in that intake's DLQ.
With --policy, the intake of the policy's item kind applies that policy file instead of the shipped
one (as its POLICY_NAME would in a deployment): e.g. `events/many-options/policy.json`, a question
of 150 intents answered by its head (`make demo POLICY=events/many-options/policy.json
ITEMS=events/many-options/tickets.jsonl`); its targets must be the stack's destinations.
With --report, one JSON line per input line (in input order) says what became of it, for
scripts: see `local.outcomes.report_line`. Every process started is stopped on success, failure,
Ctrl-C and SIGTERM.

This module is the command line only: the pipeline is the library `local.pipeline` (with
`local.items`, `local.sending`, `local.settling`, `local.outcomes`), the printed table `local.tables`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, TextIO

from local.cloudformation import REPO_ROOT
from local.dependency_report import dependency_figures
from local.items import DEFAULT_ITEMS, InputItem, read_items
from local.outcomes import write_report
from local.pipeline import LOG_DIR, LocalPipeline
from local.services import Terminated, unwinding_on_signals
from local.tables import audit_lines, explain, format_table, table_rows, wrapped

Progress = Callable[[str], None]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m local.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="GGUF file to serve (default: the embedded SmolLM2-135M)")
    parser.add_argument("--items", type=Path, action="append",
                        help="JSON Lines of tickets and/or incidents (repeatable; default: events/*.jsonl)")
    parser.add_argument("--policy", type=Path, action="append",
                        help="a policy file the intake of its item kind applies instead of the shipped one (repeatable)")
    parser.add_argument("--report", type=Path, help="write one JSON line per input line: what became of it")
    parser.add_argument("--no-review", action="store_true", help="do not complete a pending review")
    parser.add_argument("--log-dir", type=Path, default=LOG_DIR, help="where the service logs go (default: .demo/)")
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    out = out or sys.stdout
    began = time.monotonic()

    def progress(message: str) -> None:
        print(f"[{time.monotonic() - began:5.1f}s] {message}", file=out, flush=True)

    problems = [f"--items {p}: no such file" for p in (args.items or []) if not p.is_file()]
    if args.model is not None and not args.model.is_file():
        problems.insert(0, f"--model {args.model}: no such file")
    policies, policy_problems = read_policies(args.policy or [])
    problems += policy_problems
    if problems:
        print("demo: " + "; ".join(problems), file=sys.stderr)
        return 2
    args.policies = policies
    items = read_items(args.items or DEFAULT_ITEMS)
    if not items:
        print("demo: no items to route (the items files are empty)", file=sys.stderr)
        return 2

    try:
        with unwinding_on_signals():
            return _run(args, items, progress, out, began)
    except KeyboardInterrupt:
        print("\ndemo: interrupted; every process it started has been stopped", file=sys.stderr)
        return 130
    except Terminated as stop:
        print(f"\ndemo: stopped by signal {stop.args[0]}; every process it started has been stopped", file=sys.stderr)
        return 128 + stop.args[0]
    except Exception as error:  # noqa: BLE001 - the user gets one clear line, and the logs
        print(f"\ndemo failed: {type(error).__name__}: {error}\n(logs: {args.log_dir})", file=sys.stderr)
        return 1


#: What else to do about a policy whose options route to destinations the stack lacks.
TARGETS_FIX = ("Or set each option's target to one of the stack's destinations: in the policy file (its head does not "
               "depend on them), or, for a policy from make fit-history, fit it again with TARGETS=map.json (label → "
               "destination, \"*\": every other label; without TARGETS it writes a starting map, "
               "OUT/targets.start.json; docs/learning/fit-history.md)")


def read_policies(paths: list[Path]) -> tuple[dict[str, str], list[str]]:
    """item kind → the policy file's absolute path, and what is wrong with the files: each loaded by
    the routing function's own loader, checked against the stack's destinations, one per kind."""
    from decision_router.domain.policies import PolicyError, check_targets, load_policy
    from local.destinations import NEXT_STEP, add_queues_advice, nearest_destination, template_destinations, template_resources

    destinations: list[str] | None = None
    resources: list[str] = []
    policies: dict[str, str] = {}
    problems = []
    for path in paths:
        if not path.is_file():
            problems.append(f"--policy {path}: no such file")
            continue
        if destinations is None:
            destinations, resources = template_destinations(), template_resources()
        try:
            policy = load_policy(path.resolve())
        except PolicyError as error:
            problems.append(f"--policy {path}: {error}")
            continue
        try:
            check_targets(policy, destinations)
        except PolicyError as error:
            unknown = sorted(policy.targets - set(destinations))
            then = f"then make demo POLICY={shlex.quote(str(path))} routes to them (and {NEXT_STEP})"
            nearest = [f"{target} → {near}" for target in unknown if (near := nearest_destination(target, destinations))]
            problems.append(f"--policy {path}: {error}. The stack has no queue for {', '.join(unknown)}: "
                            f"{add_queues_advice(unknown, resources, then=then)}\nOr route those options to a destination "
                            "the stack has" + (f" (nearest by name: {', '.join(nearest)})" if nearest else "")
                            + f". {TARGETS_FIX}")
            continue
        if policy.item_kind in policies:
            problems.append(f"--policy {path}: a second {policy.item_kind} policy (one per intake)")
            continue
        policies[policy.item_kind] = str(path.resolve())
    return policies, problems


#: What a demo run leaves in its log folder for `make review`: the policy files it applied.
RUN_RECORD = "run.json"


def record_run(log_dir: Path, policies: dict[str, str], items: list[Path] | None = None) -> None:
    """Note the policy files this demo applies (none: the shipped ones) and the item files it routes
    (none: the sample items), for `make review`."""
    record = {"policies": sorted(policies.values()), "items": [str(p.resolve()) for p in items or []]}
    (log_dir / RUN_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def last_run_policies(log_dir: Path) -> list[Path] | None:
    """The policy files the last demo with this log folder applied ([]: the shipped ones); None
    where no demo has recorded its run there."""
    try:
        return [Path(p) for p in json.loads((log_dir / RUN_RECORD).read_text(encoding="utf-8"))["policies"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def last_run_items(log_dir: Path) -> list[Path]:
    """The item files the last demo with this log folder routed ([]: the sample items, or no demo
    recorded there, or one recorded before item files were)."""
    try:
        return [Path(p) for p in json.loads((log_dir / RUN_RECORD).read_text(encoding="utf-8")).get("items", [])]
    except (OSError, ValueError, AttributeError, TypeError):
        return []


def shown(path: Path | str) -> str:
    """A path as the user would type it: relative to the repository where it lies in it."""
    path = Path(path)
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _run(args: argparse.Namespace, items: list[InputItem], progress: Progress, out: TextIO, began: float) -> int:
    from decision_router.items import ITEM_MODELS
    from local.services import DecisionContainer, MotoServer, local_aws_environ, patched_environ

    args.log_dir.mkdir(parents=True, exist_ok=True)
    record_run(args.log_dir, args.policies, args.items)
    model_name = args.model.name if args.model else "the embedded SmolLM2-135M-Instruct Q4_1"
    with ExitStack() as cleanup:
        container = cleanup.enter_context(DecisionContainer(args.log_dir / "decision-server.log", model=args.model))
        progress(f"decision container starting (pid {container.pid}, {container.url}): loading {model_name}; "
                 f"log {container.log_path.relative_to(REPO_ROOT) if container.log_path.is_relative_to(REPO_ROOT) else container.log_path}")
        moto = cleanup.enter_context(MotoServer())
        progress(f"moto server on {moto.url} (Step Functions executes definitions)")
        cleanup.enter_context(patched_environ(local_aws_environ(moto, container.url)))
        lambda_log = cleanup.enter_context(open(args.log_dir / "lambda.log", "w", encoding="utf-8"))
        pipeline = cleanup.enter_context(LocalPipeline(log=lambda_log, policies=args.policies))  # its functions stop first
        progress(f"created from template.yaml: {pipeline.summary()}")
        for kind, path in args.policies.items():
            progress(f"the {kind} intake applies {shown(path)}")
        loaded = container.wait_ready(on_wait=lambda s: progress(f"... still loading the model ({s:.0f}s)"))
        progress(f"decision container ready: model loaded and warmed up {loaded:.1f}s after start")
        kinds = " and ".join(f"{sum(1 for i in items if i.kind == kind)} {kind}(s)" for kind in ITEM_MODELS)
        progress(f"routing {kinds} ({sum(1 for i in items if i.rejected)} line(s) rejected before sending)")
        routed_at = time.monotonic()
        outcomes = pipeline.run(items, progress)
        progress(f"all executions settled ({time.monotonic() - routed_at:.1f}s for {len(items)} item(s))")

        print("", file=out)
        print(format_table(table_rows(outcomes)), file=out)
        print("", file=out)
        for line in explain(outcomes, args.model, head_of=lambda policy, question: next(
                (q.learned_head for q in pipeline.load_policy(policy).questions if q.id == question), None)):
            print(wrapped(line), file=out)
        dependencies = dependency_figures(outcomes)
        if dependencies is not None:
            print(f"\n{dependencies.line()}", file=out)

        pending = [o for o in outcomes if o.item.item_id in pipeline.pending_reviews and o.status == "RUNNING"]
        if pending and not args.no_review:
            outcome = pending[0]
            answer = pipeline.complete_review(outcome)
            print("\n" + wrapped(f"Review loop: {answer['reviewer']} answered {outcome.item.label} through the review function "
                  f"({', '.join(f'{q}={a}' for q, a in answer['answers'].items())}); the workflow then delivered it "
                  f"to {', '.join(outcome.queues) or '(nowhere)'} and wrote audit '{outcome.audit}'"
                  + (", plus a labelled example for calibration." if pipeline.labelled_example(
                      outcome.record.policy.name, outcome.item.item_id) else ".")), file=out)
            if len(pending) > 1:
                print(wrapped(f"{len(pending) - 1} review(s) still pending (make review answers them in the console; in a "
                              "deployment: PYTHONPATH=contract:functions:. python -m ops.review_cli list / complete)."),
                      file=out)
        if args.report:
            write_report(args.report, outcomes)
            print(f"\nReport: {args.report} (one JSON line per input line)", file=out)
        audited = pipeline.export_audit(args.log_dir / "audit.jsonl")
        print("", file=out)
        for line in audit_lines(outcomes, audited, args.log_dir / "audit.jsonl"):
            print(wrapped(line), file=out)
        print(f"\nDone in {time.monotonic() - began:.1f}s; logs in {args.log_dir}. Stopping the container and moto.",
              file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
