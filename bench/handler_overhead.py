"""Lambda handler overhead per ticket, warm, with the endpoint answered instantly.

    python bench/handler_overhead.py [-n 200]

The real ticket-intake handler (template.yaml's function, cold-started once by local.lambdas) on
one-record SQS events against a moto server (template.yaml's tables, queues and state machine):
validation, rules, the head, idempotency (DynamoDB), the workflow start (Step Functions). The
endpoint is a loopback stub that answers at once with a contract-shaped result (the decision
model is left out on purpose: this measures what the function adds). Each ticket is new (its own
id), so every invocation takes the idempotency record and starts an execution. Prints p50/p90/max
twice, side by side: moto in process (the handler's cost) and moto's HTTP server (plus a loopback
web server per AWS call); target: p50 <= 10 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local.services import LOOPBACK, MotoServer, local_aws_environ, patched_environ

TICKET = {"subject": "Charged twice for my subscription", "customer": {"id": "C-42", "tier": "pro"},
          "body": "My card was charged twice this month for the Pro plan. Please refund one payment.",
          "channel": "email", "created_at": "2026-11-29T12:00:00Z"}


class InstantEndpoint(ThreadingHTTPServer):
    """Answers every decision at once: option A most likely, the contract's full result shape."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__((LOOPBACK, 0), _Instant)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.server_address[1]}"


def _result(decision: dict) -> dict:
    from decision_contract import DecisionResult, DecisionTiming, ModelInfo

    options = [o["id"] for o in decision["options"]]
    probabilities = [0.9] + [0.1 / (len(options) - 1)] * (len(options) - 1)
    return DecisionResult(
        id=decision["id"], option_ids=options, probabilities=probabilities, option_logits=[5.0] + [0.0] * (len(options) - 1),
        temperature=decision.get("temperature", 1.0), input_tokens=100, allowed_token_mass=0.95,
        prompt_sha256="0" * 64, prompt_version="instant",
        model=ModelInfo(file="instant.gguf", bytes=1, sha256="0" * 64, context_size=2048, threads=1, gpu_layers=0,
                        llama_cpp_python_version="none"),
        timing=DecisionTiming(tokenize_seconds=0.0, prefill_seconds=0.0, total_seconds=0.0)).model_dump(mode="json")


class _Instant(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK wait

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        if request.get("decision") is not None:
            answer = {"result": _result(request["decision"])}
        else:
            results = [_result(d) for d in request["decisions"]]
            answer = {"results": results, "timing": {"shared_prefix_tokens": 0, "shared_prefix_seconds": 0.0,
                                                     "total_seconds": 0.0, "batch_size": len(results)}}
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def measure(n: int, warmup: int = 10, *, in_process: bool = False) -> tuple[list[float], dict[str, list[float]]]:
    """Seconds per invocation, and the seconds of each AWS call inside them (by operation).
    `in_process`: moto's in-process mock instead of its HTTP server (no loopback round trip, no
    web server: what the handler costs with AWS's own latency left out)."""
    from botocore.client import BaseClient

    from local.pipeline import LocalPipeline
    from local.services import DEFAULT_REGION, FAKE_CREDENTIALS

    calls: dict[str, list[float]] = {}
    original = BaseClient._make_api_call
    timing = {"on": False}

    def timed(client, operation, params):
        started = time.perf_counter()
        try:
            return original(client, operation, params)
        finally:
            if timing["on"]:
                name = f"{client.meta.service_model.service_name} {operation}"
                calls.setdefault(name, []).append(time.perf_counter() - started)

    with ExitStack() as cleanup, open("/dev/null", "w") as log:
        BaseClient._make_api_call = timed  # type: ignore[method-assign]
        cleanup.callback(setattr, BaseClient, "_make_api_call", original)
        endpoint = InstantEndpoint()
        threading.Thread(target=endpoint.serve_forever, daemon=True).start()
        cleanup.callback(endpoint.shutdown)
        if in_process:
            from moto import mock_aws

            cleanup.enter_context(patched_environ({
                **FAKE_CREDENTIALS, "AWS_PROFILE": None, "AWS_DEFAULT_REGION": DEFAULT_REGION,
                "AWS_REGION": DEFAULT_REGION, "AWS_ENDPOINT_URL": None, "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": endpoint.url,
                "POWERTOOLS_TRACE_DISABLED": "1"}))
            # The endpoint stub is a real HTTP server: moto lets its loopback URL through.
            cleanup.enter_context(mock_aws(config={"core": {"passthrough": {"urls": [f"{endpoint.url}.*"]}}}))
        else:
            moto = cleanup.enter_context(MotoServer())
            # The executions are started, not run: their interpreter threads would share the cores being timed.
            httpx.post(f"{moto.url}/moto-api/config", json={"stepfunctions": {"execute_state_machine": False}},
                       timeout=10).raise_for_status()
            cleanup.enter_context(patched_environ(local_aws_environ(moto, endpoint.url)))
        pipeline = LocalPipeline(log=log)
        source, sqs = pipeline.ticket_source, pipeline.sqs
        seconds = []
        for index in range(warmup + n):
            sqs.send_message(QueueUrl=source.queue_url, MessageBody=json.dumps({"ticket_id": f"BENCH-{index}", **TICKET}))
            message = sqs.receive_message(QueueUrl=source.queue_url, MaxNumberOfMessages=1, AttributeNames=["All"],
                                          MessageAttributeNames=["All"])["Messages"][0]
            event = {"Records": [source._record(message)]}
            timing["on"] = index >= warmup
            started = time.perf_counter()
            response = pipeline.tickets.invoke(event)
            elapsed = time.perf_counter() - started
            timing["on"] = False
            if response.get("batchItemFailures"):
                raise RuntimeError(f"the handler failed a ticket: {response} (see the function's log)")
            sqs.delete_message(QueueUrl=source.queue_url, ReceiptHandle=message["ReceiptHandle"])
            if index >= warmup:
                seconds.append(elapsed)
        return seconds, calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200, help="timed invocations (after 10 warm-up ones)")
    args = parser.parse_args(argv)
    for in_process, where in ((True, "moto in process"), (False, "moto server over HTTP")):
        seconds, calls = measure(args.n, in_process=in_process)
        ms = sorted(s * 1000 for s in seconds)
        p50, p90 = statistics.median(ms), ms[int(len(ms) * 0.9) - 1]
        print(f"ticket-intake handler, warm, endpoint answered instantly, {where}: n={len(ms)} "
              f"p50 {p50:.1f} ms, p90 {p90:.1f} ms, max {ms[-1]:.1f} ms (target p50 <= 10 ms: "
              f"{'met' if p50 <= 10 else 'NOT met'})")
        per_item = {name: sum(values) * 1000 / len(ms) for name, values in calls.items()}
        print("  of which AWS calls per ticket (ms, mean; the endpoint stub over loopback HTTP): "
              + ", ".join(f"{name} {value:.1f}" for name, value in sorted(per_item.items(), key=lambda kv: -kv[1]))
              + f"; the handler's own code {statistics.mean(ms) - sum(per_item.values()):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
