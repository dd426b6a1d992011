"""`python -m ops.heads` (`make rollback`): the heads in service of a deployed stack.

    python -m ops.heads status   --policy support-ticket --question queue
    python -m ops.heads history  --policy support-ticket --question queue
    python -m ops.heads rollback --policy support-ticket --question queue --reason "routes billing to sales"
    python -m ops.heads approve  --run <run> --reason "checked the fit report"
    python -m ops.heads reject   --run <run> --reason "one team's labels only"

`rollback` puts back the head the one in service replaced (the shipped head when it was the
first promotion); the routing functions pick it up within HEAD_REFRESH_SECONDS, no deploy. Every
rollback is audited in the head history table: who (`--by`, free text, default the AWS identity,
and always beside it `caller_arn`, the caller's ARN as STS GetCallerIdentity answers it), when,
from which version to which, and why. A rollback while a promotion or another rollback of the
same question is under way is refused (exit 1), nothing changed. Where things are comes from the environment the functions get
(HEAD_STORE_BUCKET, HEAD_PARAMETER_PREFIX, HEAD_HISTORY_TABLE_NAME: the stack's outputs
HeadBucketName, HeadParameterPrefix, HeadHistoryTableName) or the flags.

`approve` and `reject` answer a relearning run that waits for a person (RelearningApproval
manual): the notice on the promotion topic (the stack's RelearningPromotionTopicArn) names the
run, its candidates and their verdicts, never the task token; the token waits on the approval
queue (the stack's ApprovalQueueUrl, APPROVAL_QUEUE_URL or `--approval-queue-url`), which only the
relearning workflow may send to, and is read from there by the run's name. `approve` lets the run
promote them; `reject` ends it with nothing promoted. Both keep who (`--by`) and why in the
workflow's history, and take the request off the queue.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from decision_router.adapters.head_store import HeadStore
from decision_router.adapters.notices import ApprovalAnswers, ApprovalRequests
from decision_router.domain.policies import Policy, PolicyError, load_policy
from ops.command import DONE, Command, CommandError, WorkLeft

COMMAND = Command("ops.heads", __doc__, "error")


def parser() -> argparse.ArgumentParser:
    p = COMMAND.parser()
    p.add_argument("action", choices=["status", "history", "rollback", "approve", "reject"])
    p.add_argument("--policy", help="required for status, history and rollback")
    p.add_argument("--question", help="required for status, history and rollback")
    p.add_argument("--run", help="approve, reject: the run the approval notice names")
    p.add_argument("--approval-queue-url", default=os.environ.get("APPROVAL_QUEUE_URL", ""),
                   help="approve, reject: where the runs' requests wait (the stack's ApprovalQueueUrl)")
    p.add_argument("--reason", default="", help="why (kept in the audit; required for rollback, approve, reject)")
    p.add_argument("--by", default=None, help="who rolls back or answers, in words (default: the caller's AWS identity; "
                                             "the caller's ARN is audited beside it either way)")
    p.add_argument("--bucket", default=os.environ.get("HEAD_STORE_BUCKET", ""))
    p.add_argument("--parameter-prefix", default=os.environ.get("HEAD_PARAMETER_PREFIX", ""))
    p.add_argument("--history-table", default=os.environ.get("HEAD_HISTORY_TABLE_NAME", ""))
    return p


def caller() -> str:
    import boto3

    return str(boto3.client("sts").get_caller_identity()["Arn"])


def answer(args: argparse.Namespace, answers: ApprovalAnswers | None, requests: ApprovalRequests | None) -> int:
    """approve / reject: the person's answer to a run waiting for approval."""
    if not (args.run or "").strip():
        raise CommandError(f"--run: {args.action} needs the run the approval notice names")
    if not args.reason.strip():
        raise CommandError(f"--reason: say why you {args.action} (it is kept in the workflow's history)")
    if requests is None and not args.approval_queue_url:
        raise CommandError("not set: --approval-queue-url / APPROVAL_QUEUE_URL (the stack's ApprovalQueueUrl output)")
    requests = requests or ApprovalRequests(args.approval_queue_url)
    taken = requests.take(args.run.strip())
    if taken is None:
        raise WorkLeft(f"no request of run {args.run.strip()!r} waits on the approval queue (answered already, timed "
                       "out, or another run)")
    token, receipt = taken
    answers = answers or ApprovalAnswers()
    by = args.by or caller()
    from botocore.exceptions import ClientError

    try:
        (answers.approve if args.action == "approve" else answers.reject)(token, by=by, reason=args.reason.strip())
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        requests.remove(receipt)  # the run waits on it no more: a stale request
        raise WorkLeft(f"the workflow refused the answer ({code}): the run no longer waits on its request "
                       "(answered already, or timed out)") from error
    requests.remove(receipt)
    print(json.dumps({"answer": args.action, "run": args.run.strip(), "by": by, "reason": args.reason.strip()}, indent=2))
    return DONE


def main(argv: list[str] | None = None, store: HeadStore | None = None, answers: ApprovalAnswers | None = None,
         requests: ApprovalRequests | None = None) -> int:
    args = parser().parse_args(argv)
    if args.action in ("approve", "reject"):
        return COMMAND.run(lambda: answer(args, answers, requests))
    return COMMAND.run(lambda: in_service(args, store))


def question_of(args: argparse.Namespace) -> Policy:
    """The policy `--policy` names, which must ask `--question` (CommandError: which does not read)."""
    if not args.policy or not args.question:
        raise CommandError(f"{args.action} needs --policy and --question")
    try:
        policy = load_policy(args.policy)
        policy.question(args.question)
    except (PolicyError, KeyError) as error:
        raise CommandError(str(error)) from error
    return policy


def head_store(args: argparse.Namespace) -> HeadStore:
    """The stack's head store, from the flags or the environment (CommandError: which is not set)."""
    missing = [flag for flag, value in (("--bucket / HEAD_STORE_BUCKET", args.bucket),
                                        ("--parameter-prefix / HEAD_PARAMETER_PREFIX", args.parameter_prefix),
                                        ("--history-table / HEAD_HISTORY_TABLE_NAME", args.history_table)) if not value]
    if missing:
        raise CommandError(f"not set: {', '.join(missing)} (the stack's outputs name them)")
    return HeadStore(args.bucket, args.parameter_prefix, args.history_table)


def in_service(args: argparse.Namespace, store: HeadStore | None) -> int:
    """status / history / rollback: one question's heads in service."""
    policy = question_of(args)
    store = store or head_store(args)
    out: Any
    if args.action == "status":
        pointer = store.pointer(policy.name, args.question)
        shipped = policy.question(args.question).learned_head
        out = {"policy": policy.name, "question": args.question,
               "in_service": pointer.model_dump(mode="json", exclude={"previous"}) if pointer else "shipped",
               "shipped": shipped.version if shipped else "letters",
               "would_roll_back_to": (pointer.previous.head_version if pointer and pointer.previous else
                                      "shipped" if pointer else None)}
    elif args.action == "history":
        out = store.history(policy.name, args.question)
    else:
        if not args.reason.strip():
            raise CommandError("--reason: say why (it is kept in the audit)")
        arn = caller()
        by = (args.by or "").strip() or arn
        try:
            restored = store.rollback(policy.name, args.question, by=by, reason=args.reason.strip(), caller=arn)
        except ValueError as error:  # nothing promoted, or another change under way (HeadChangeInProgress)
            raise WorkLeft(str(error)) from error
        out = {"policy": policy.name, "question": args.question,
               "in_service": restored.head_version if restored else "shipped", "by": by, "caller_arn": arn}
    print(json.dumps(out, indent=2))
    return DONE


if __name__ == "__main__":
    sys.exit(main())
