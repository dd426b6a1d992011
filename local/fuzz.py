"""`make fuzz`: Schemathesis against a real decision container on the embedded model.

Starts `python -m decision_server` with FUZZ_SETTINGS on a free loopback port, runs `st run`
on its `/openapi.json` with every default check (no 5xx; documented statuses, content types
and response schemas; schema-valid bodies accepted, invalid ones rejected; every answer within
MAX_RESPONSE_SECONDS), and stops it.
The suite's bounded fuzz test (tests/container/test_openapi_fuzz.py) serves the same settings.

    python -m local.fuzz [--max-examples N] [-- extra `st run` options]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from local.cloudformation import REPO_ROOT
from local.services import DecisionContainer

#: A deployment with small limits, so that a generated request is cheap: the OpenAPI document
#: publishes them, so generated bodies stay within them. One thread: requests come one at a
#: time, and a second thread only contends with the other processes on a small machine.
FUZZ_SETTINGS = {
    "CHAT_MAX_TOKENS": "8",
    "DECISION_MAX_OPTIONS": "4",
    "DECISION_MAX_DECISIONS": "3",
    "SM_LLAMA_CPP_THREADS": "1",
}
#: The response time the checks hold every answer to (`max_response_time`, on in every run). Not
#: Schemathesis's 10 s default: here a request's time is the model's work on its tokens, one CPU
#: thread at 100-200 tokens/s on a shared small machine, and a generated System One request can
#: carry a few thousand (one of 2,242 took 19 s). The document states the token limits that bound
#: it; this is the deadline a real caller has, SageMaker's 60 s invocation timeout.
MAX_RESPONSE_SECONDS = 60
REPORT_DIR = REPO_ROOT / "reports" / "fuzz"


def st_run_command(schema_url: str, max_examples: int, extra: list[str]) -> list[str]:
    return [
        str(Path(sys.executable).parent / "st"), "run", schema_url,
        "--max-examples", str(max_examples),
        "--workers", "1",  # one request at a time, as FUZZ_SETTINGS assumes (one model thread)
        "--request-timeout", "300",
        "--max-response-time", str(MAX_RESPONSE_SECONDS),
        "--generation-database", "none",
        "--report", "junit", "--report-dir", str(REPORT_DIR),
        *extra,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--max-examples", type=int, default=100,
                        help="generated cases per operation in the fuzzing phase (default 100)")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: more `st run` options")
    args = parser.parse_args(argv)
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra

    with DecisionContainer(REPORT_DIR / "server.log", settings=FUZZ_SETTINGS) as container:
        container.wait_ready()
        command = st_run_command(f"{container.url}/openapi.json", args.max_examples, extra)
        print("$", " ".join(command), flush=True)
        return subprocess.call(command, cwd=REPO_ROOT)


if __name__ == "__main__":
    sys.exit(main())
