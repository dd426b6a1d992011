"""`make review`: the review console on this machine, over the demo's pending reviews.

    python -m local.review [--model path.gguf] [--items items.jsonl ...] [--policy policy.json ...] [--port 8400]

Routes the demo's items exactly as `make demo` does (decision container on the embedded model,
moto server, template.yaml's resources, the real handlers and workflow), then serves two APIs at
printed http://127.0.0.1 URLs until Ctrl-C. Its intakes apply the policy files the last `make demo`
applied (it records them in .demo/run.json), or those of --policy instead (`make review POLICY=…`);
where the two differ it says so.

- the review console. Sign-in is local: any name signs you in as a reviewer (local/console.py
  says how and why it is local only);
- the webhook API (POST /webhooks/{source}, the real webhook function), with the demo's signing
  secrets printed, so a signed request sent with curl is verified, queued and routed (a ticket
  the model doubts shows up in the console), or forwarded to the incident intake.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

from local.demo import last_run_items, last_run_policies, read_policies, shown
from local.items import DEFAULT_ITEMS, read_items
from local.pipeline import LOG_DIR, LocalPipeline
from local.services import Terminated, unwinding_on_signals


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m local.review", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="GGUF file to serve (default: the embedded SmolLM2-135M)")
    parser.add_argument("--items", type=Path, action="append",
                        help="JSON Lines of tickets and/or incidents (repeatable; default: events/*.jsonl)")
    parser.add_argument("--policy", type=Path, action="append",
                        help="a policy file the intake of its item kind applies (repeatable; default: those the last demo applied)")
    parser.add_argument("--port", type=int, default=0, help="the console's port (default: a free one)")
    parser.add_argument("--webhook-port", type=int, default=0, help="the webhook API's port (default: a free one)")
    parser.add_argument("--log-dir", type=Path, default=LOG_DIR, help="where the service logs go (default: .demo/)")
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None, stop: threading.Event | None = None) -> int:
    """`stop` ends the serving (tests); otherwise Ctrl-C or SIGTERM does."""
    args = _parser().parse_args(argv)
    out = out or sys.stdout
    missing = [f"{flag} {p}: no such file" for flag, paths in (("--model", [args.model] if args.model else []),
                                                                 ("--items", args.items or [])) for p in paths if not p.is_file()]
    if missing:
        print("review: " + "; ".join(missing), file=sys.stderr)
        return 2
    paths, note = policies_to_serve(args.policy or [], args.log_dir)
    if note:
        print(f"review: {note}", file=out, flush=True)
    if not args.items:
        demo_items = [p for p in last_run_items(args.log_dir) if p.is_file()]
        if demo_items:
            args.items = demo_items
            print(f"review: routing what the last make demo routed: {', '.join(shown(p) for p in demo_items)}",
                  file=out, flush=True)
    args.policies, problems = read_policies(paths)
    if problems:
        print("review: " + "; ".join(problems), file=sys.stderr)
        return 2
    try:
        with unwinding_on_signals():
            return _run(args, out, stop or threading.Event())
    except KeyboardInterrupt:
        print("\nreview: stopped; every process it started has been stopped", file=out)
        return 0
    except Terminated as stopped:
        print(f"\nreview: stopped by signal {stopped.args[0]}; every process it started has been stopped", file=out)
        return 0
    except Exception as error:  # noqa: BLE001 - the user gets one clear line, and the logs
        print(f"\nreview failed: {type(error).__name__}: {error}\n(logs: {args.log_dir})", file=sys.stderr)
        return 1


def policies_to_serve(given: list[Path], log_dir: Path) -> tuple[list[Path], str | None]:
    """The policy files to apply: `given` (POLICY=), else those the last demo of `log_dir` applied;
    and a line for the user where that choice is worth saying (the demo's, or a different one)."""
    demo = last_run_policies(log_dir)
    demo_said = "the shipped policies" if not demo else ", ".join(shown(p) for p in demo)
    if not given:
        return (demo or []), (f"applying what the last make demo applied: {demo_said}" if demo else None)
    if demo is not None and sorted(p.resolve() for p in given) != sorted(p.resolve() for p in demo):
        return given, (f"applying POLICY={', '.join(str(p) for p in given)}, not what the last make demo applied "
                       f"({demo_said}): the pending reviews are this run's own")
    return given, None


def _run(args: argparse.Namespace, out: TextIO, stop: threading.Event) -> int:
    from local.console import LocalConsole, LocalHttpApi
    from local.deployment import WEBHOOK_FUNCTION
    from local.services import DecisionContainer, MotoServer, local_aws_environ, patched_environ

    began = time.monotonic()

    def progress(message: str) -> None:
        print(f"[{time.monotonic() - began:5.1f}s] {message}", file=out, flush=True)

    items = read_items(args.items or DEFAULT_ITEMS)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as cleanup:
        container = cleanup.enter_context(DecisionContainer(args.log_dir / "decision-server.log", model=args.model))
        progress(f"decision container starting (pid {container.pid}, {container.url})")
        moto = cleanup.enter_context(MotoServer())
        progress(f"moto server on {moto.url}")
        cleanup.enter_context(patched_environ(local_aws_environ(moto, container.url)))
        lambda_log = cleanup.enter_context(open(args.log_dir / "lambda.log", "w", encoding="utf-8"))
        pipeline = cleanup.enter_context(LocalPipeline(log=lambda_log, policies=args.policies))
        for kind, path in args.policies.items():
            progress(f"the {kind} intake applies {shown(path)}")
        container.wait_ready(on_wait=lambda s: progress(f"... still loading the model ({s:.0f}s)"))
        progress(f"routing {len(items)} item(s) as make demo does")
        outcomes = pipeline.run(items, progress)
        waiting = sum(1 for o in outcomes if o.item.item_id in pipeline.pending_reviews)
        auto = sum(1 for o in outcomes if o.record is not None and o.record.route == "auto")
        pipeline.release_reviews()  # the demo holds them; the console shows them
        # The decision container keeps running: tickets sent to the webhook API are decided too.
        console = cleanup.enter_context(LocalConsole(pipeline.stack, log=lambda_log, port=args.port))
        webhooks = cleanup.enter_context(LocalHttpApi(pipeline.stack, WEBHOOK_FUNCTION, log=lambda_log,
                                                      port=args.webhook_port))
        secrets = "\n".join(f"  {source:<10} {secret}" for source, secret in sorted(pipeline.webhook_secrets.items()))
        print(f"\n{waiting} review(s) pending, {auto} item(s) routed automatically (correctable).\n"
              f"Review console: {console.url}/\n"
              "Sign in with any name (local sign-in: no AWS involved).\n"
              f"Webhook API:    {webhooks.url}/webhooks/{{source}}\n"
              f"Signing secrets (this run's WebhookSecret):\n{secrets}\n"
              "A signed POST is queued and routed here (docs/sources/index.md, \"Try the webhook API locally\").\n"
              "Ctrl-C stops everything.\n", file=out, flush=True)
        routing = threading.Thread(target=_route_webhooks, args=(pipeline, out, stop), name="webhook-routing", daemon=True)
        routing.start()
        while not stop.wait(0.5):
            pass
        routing.join(timeout=30)
    return 0


def _route_webhooks(pipeline: LocalPipeline, out: TextIO, stop: threading.Event) -> None:
    """What the webhook API hands on, taken as AWS would: the ticket queue drained by the ticket
    intake (its SQS event source), the incident webhooks' events delivered by their rule."""
    from local.items import InputItem
    from local.outcomes import Outcome
    from local.sending import deliver_to_incident_intake

    def report(message: str) -> None:
        print(f"webhook API: {message}", file=out, flush=True)

    while not stop.wait(1.0):
        pipeline.ticket_source.drain(pipeline.ticket_pool.functions, on_batch=lambda batch: report(
            f"ticket intake took {batch.messages} queued ticket(s)" + (f", {batch.failed} failed" if batch.failed else "")
            + " (see the console, or .demo/lambda.log)"))
        with pipeline.bus_lock:
            delivered = pipeline.stack.rule_events(*pipeline.incident_webhook_rule)
        for event in delivered:
            outcome = Outcome(InputItem("webhook", 0, "incident", None, "", event, via="webhook"))
            deliver_to_incident_intake(pipeline, outcome, event, report)
            if outcome.problem:
                report(f"{event.get('detail-type')}: {outcome.problem}")


if __name__ == "__main__":
    sys.exit(main())
