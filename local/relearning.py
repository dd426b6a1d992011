"""The relearning workflow on the local stack: template.yaml's relearning state machine executed by
moto, its steps taken from the relearning queue by the real relearning function (its handler
named in the template's ImageConfig.Command, run as any local function), until the execution ends.

    relearning = LocalRelearning(stack, log=log)      # stack created with RelearningImageUri set
    result = relearning.run("support-ticket")        # {"status", "output", "error", ...}
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, TextIO

from local.cloudformation import Stack, TemplateError
from local.event_sources import SqsEventSource
from local.lambdas import LocalFunction

RELEARNING_FUNCTION = "RelearningFunction"
RELEARNING_STATE_MACHINE = "RelearningStateMachine"
#: Template parameters that turn relearning on locally (the image is never pulled here).
LOCAL_PARAMETERS = {"RelearningImageUri": "local/relearning:latest"}
_RUNS = itertools.count(1)


@dataclass
class RelearningRun:
    policy: str
    execution_arn: str
    status: str
    output: dict[str, Any]
    error: str | None
    seconds: float

    def verdicts(self) -> list[dict[str, Any]]:
        """One line per question: promoted or not, why, and both heads' figures on the newest labels."""
        fit = self.output.get("fit")
        if fit:
            judged = {v["question"]: v for v in (self.output.get("shadow_judged") or {}).get("questions", [])}
            promoted = {p["question"] for p in (self.output.get("promote") or {}).get("promoted", [])}
            out = []
            for v in fit["questions"]:
                line = {"policy": self.policy, "question": v["question"], "promoted": v["question"] in promoted,
                        "reason": v["reason"], "current": v["current"], "candidate": v["candidate"], "shadow": None}
                shadow = judged.get(v["question"])
                if shadow is not None:  # the gate passed it: its shadow's verdict decided
                    line["reason"] = f"{v['reason']}; in shadow: {shadow['reason']}"
                    line["shadow"] = shadow["shadow"]
                elif v["promoted"]:  # the gate passed it, the run ended before its shadow was judged
                    line["reason"] = f"{v['reason']}; not judged in shadow: {self.error or self.status}"
                out.append(line)
            return out
        count = self.output.get("count", {})
        reason = (f"relearning did not run: {count['new_labels']} new labels, at least {count['min_new_labels']}"
                  if count else f"relearning failed: {self.error or self.status}")
        from decision_router.domain.policies import load_policy

        return [{"policy": self.policy, "question": q.id, "promoted": False, "reason": reason, "current": {},
                 "candidate": {}, "shadow": None} for q in load_policy(self.policy).questions]


class LocalRelearning:
    """The relearning function (one execution environment) and the state machine it serves."""

    def __init__(self, stack: Stack, *, log: TextIO | None = None, env: dict[str, str] | None = None,
                 overrides: dict[str, Any] | None = None):
        if RELEARNING_FUNCTION not in stack.resources:
            raise TemplateError("the stack has no relearning function: load it with RelearningImageUri set "
                                "(local.relearning.LOCAL_PARAMETERS)")
        import boto3

        self.stack = stack
        self.function = LocalFunction(stack, RELEARNING_FUNCTION, log=log, env=env, overrides=overrides)
        self.sfn, self.sqs = boto3.client("stepfunctions"), boto3.client("sqs")
        self.source = SqsEventSource(self.function, self.sqs)
        self.state_machine_arn = stack.ref(RELEARNING_STATE_MACHINE)

    def run(self, policy: str, trigger: str = "labels", timeout: float = 3600,
            progress: Callable[[str], None] = lambda _: None,
            while_waiting: Callable[[], bool] = lambda: False) -> RelearningRun:
        """Start one run for `policy` and serve its steps until it ends. `while_waiting()` is
        called whenever no step is waiting to be served (while a candidate serves in shadow, the
        caller may route live items then); it returns whether it did anything."""
        started = time.monotonic()
        name = f"relearn-{policy}-{int(time.time())}-{next(_RUNS)}"
        arn = self.sfn.start_execution(stateMachineArn=self.state_machine_arn, name=name,
                                       input=json.dumps({"policy": policy, "trigger": trigger}))["executionArn"]
        while True:
            report = self.source.poll_once()
            if report is not None:
                progress(f"relearning {policy}: a step took {report.seconds:.1f}s")
            described = self.sfn.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING":
                break
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"relearning {policy} still running after {timeout:.0f}s")
            if report is None and not while_waiting():
                time.sleep(0.2)
        output = json.loads(described.get("output") or "{}")
        error = None
        if described["status"] != "SUCCEEDED":
            history = self.sfn.get_execution_history(executionArn=arn, reverseOrder=True)["events"]
            failed = next((e for e in history if e["type"] == "TaskFailed"),
                          next((e for e in history if e["type"].endswith("Failed")), {}))
            details = next((v for k, v in failed.items() if k.endswith("EventDetails")), {})
            error = f"{details.get('error', described['status'])}: {details.get('cause', '')}".strip()
        return RelearningRun(policy, arn, described["status"], output, error, time.monotonic() - started)

    def close(self) -> None:
        self.function.close()
