"""Reviewer CLI: list pending reviews, show one, complete one, export labelled examples.

    python -m ops.review_cli list
    python -m ops.review_cli show ticket-T-1003-1a2b3c4d
    python -m ops.review_cli complete ticket-T-1003-1a2b3c4d --answer queue=technical_fault \
        --note "export bug"
    python -m ops.review_cli export --out labelled.jsonl [--policy support-ticket]

Settings come from the same environment variables as the functions (PENDING_REVIEWS_TABLE_NAME,
LABELLED_EXAMPLES_TABLE_NAME, REVIEW_FUNCTION_NAME: the stack's ReviewCompletionFunctionName
output) or the flags. Completing invokes the review function with your AWS credentials' proof of
who you are, made for this one answer (an STS GetCallerIdentity request presigned for GET for a
minute, signing a digest of the function's name, the execution, the task token, the answers and
the note: adapters/caller_identity.py): the label counts under that IAM principal, which must be
one the stack's ReviewerPrincipals lists, and it is shown by its user or role session name. The
function checks the answers against the pending record's own policy, and the destination comes
from that record. Pending reviews are read from the pending-review index (dynamodb:Query and
GetItem on it); the review function removes the answered review's row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, TextIO

from decision_router.config import Settings
from decision_router.domain.policies import load_policy
from decision_router.review.completion import InvalidReview, answer_problems, labelled_example
from ops.command import DONE, Command, CommandError

if TYPE_CHECKING:
    from decision_router.adapters.pending_reviews import PendingReviewTable
    from decision_router.domain.ports.review import PendingReviewRow

#: An answer the policy refuses, a setting not given, a review not waiting, an answer the function refuses.
COMMAND = Command("ops.review_cli", __doc__, "error", (InvalidReview, LookupError, CommandError))


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = Settings.from_env()
    return COMMAND.run(lambda: args.run(args, settings, out or sys.stdout))


def _index(args: argparse.Namespace, settings: Settings) -> PendingReviewTable:
    from decision_router.adapters.pending_reviews import PendingReviewTable

    table = args.pending_reviews_table or settings.pending_reviews_table
    if not table:
        raise LookupError("no pending-review index: set PENDING_REVIEWS_TABLE_NAME (the stack's "
                          "PendingReviewsTableName output) or pass --pending-reviews-table")
    return PendingReviewTable(table)


def _waiting(index: PendingReviewTable, name: str) -> PendingReviewRow:
    row = index.get(name)
    if row is None:
        raise LookupError(f"no pending review named {name!r} (answered, closed or timed out already? see `list`)")
    return row


def cmd_list(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """The first `--max` reviews of each lane of every shipped policy, due first (the index's listing)."""
    from decision_router.domain import policies
    from decision_router.review.console import PendingSummary
    from decision_router.review.pending import policy_lanes

    names = sorted(path.stem for path in policies.POLICY_DIR.glob("*.json"))
    lanes = [lane for name in names for lane in policy_lanes(load_policy(name))]
    listed = _index(args, settings).listing(lanes, args.max)[: args.max]
    if not listed:
        print("no pending reviews", file=out)
    for row in listed:
        summary = PendingSummary.model_validate_json(row.summary)
        suggested = ", ".join(f"{q}={o}" for q, o in summary.suggested.items() if o is not None) or "-"
        print(f"{row.execution_name}  [{summary.policy}]  suggested: {suggested}  due {row.due_at}\n"
              f"    why: {summary.reason}", file=out)
    return DONE


def cmd_show(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    review = _waiting(_index(args, settings), args.execution_name)
    record = review.record
    policy = load_policy(record.policy.name)
    print(f"{record.item_kind} {record.item_id} (policy {policy.name} v{record.policy.version}, "
          f"review requested {review.requested_at or '?'})", file=out)
    print(json.dumps(record.item, indent=2, ensure_ascii=False), file=out)
    print(f"why review: {record.route_reason}", file=out)
    decisions = {d.question: d for d in record.decisions}
    for question in policy.questions:
        decision = decisions.get(question.id)
        probabilities = (decision.probabilities if decision else None) or {}
        print(f"\n{question.id}: {question.question}", file=out)
        for option in question.options:
            p = probabilities.get(option.id)
            mark = "*" if decision is not None and decision.option_id == option.id else " "
            shown = f"{p:5.2f}" if p is not None else "  -  "
            print(f"  {mark} {option.id:<16} {shown}  {option.description}", file=out)
    return DONE


def _function_name(args: argparse.Namespace) -> str:
    name = args.function or os.environ.get("REVIEW_FUNCTION_NAME", "")
    if not name:
        raise LookupError("no review function: set REVIEW_FUNCTION_NAME (the stack's ReviewCompletionFunctionName "
                          "output) or pass --function")
    return name


def _review_function(args: argparse.Namespace) -> Callable[[dict], Any]:
    """The review function's invoke (a test hands the template's function run in process)."""
    from decision_router.adapters.functions import SyncFunction

    return SyncFunction(_function_name(args)).invoke


def cmd_complete(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from decision_router.adapters.caller_identity import make_proof, sts_client
    from decision_router.adapters.functions import FunctionFailed
    from decision_router.domain.callers import audience
    from decision_router.review.caller import CallerAnswer

    if args.reviewer:
        print("note: --reviewer is no longer sent: the name shown is your AWS identity's (its user or role "
              "session name)", file=sys.stderr)
    review = _waiting(_index(args, settings), args.execution_name)
    answers = dict(_answer(a) for a in args.answer)
    answer = CallerAnswer.parse({"execution_name": review.execution_name, "task_token": review.task_token,
                                 "answers": answers, "note": args.note or ""})
    # Checked here first against the record the row carries, so a typo costs no invoke.
    problems = answer_problems(load_policy(review.record.policy.name), answers, reviewer="(your AWS identity)")
    if problems:
        raise InvalidReview("; ".join(problems))
    function = _function_name(args)
    invoke = _review_function(args)
    # The proof signs this answer's binding, for the function it is sent to (its name).
    proof = make_proof(sts_client(), answer.binding(audience(function)))
    event = {**answer.model_dump(exclude_none=True, exclude={"identity_proof"}), "identity_proof": proof}
    try:
        output = invoke(event)
    except FunctionFailed as error:
        raise CommandError(f"the review function refused: {error}") from error
    print(json.dumps({k: output.get(k) for k in ("execution_name", "reviewer", "reviewer_id", "note", "destination",
                                                 "escalate", "answers")}, ensure_ascii=False), file=out)
    return DONE


def cmd_export(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from decision_router.adapters.review import LabelledExamples

    table = args.table or settings.labelled_examples_table
    if not table:
        raise LookupError("no table: set LABELLED_EXAMPLES_TABLE_NAME or pass --table")
    target = open(args.out, "w", encoding="utf-8") if args.out else out
    count = 0
    try:
        for row in LabelledExamples(table).scan():
            example = labelled_example(row)
            if args.policy and example["policy"] != args.policy:
                continue
            target.write(json.dumps(example, ensure_ascii=False) + "\n")
            count += 1
    finally:
        if args.out:
            target.close()
    print(f"exported {count} labelled example(s)", file=sys.stderr)
    return DONE


def _answer(text: str) -> tuple[str, str]:
    question, sep, option = text.partition("=")
    if not sep or not question or not option:
        raise InvalidReview(f"--answer {text!r}: write QUESTION=OPTION, e.g. queue=billing")
    return question.strip(), option.strip()


def _parser() -> argparse.ArgumentParser:
    parser = COMMAND.parser()
    parser.add_argument("--pending-reviews-table", help="the pending-review index (default: PENDING_REVIEWS_TABLE_NAME)")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    listing = commands.add_parser("list", help="pending reviews with the model's suggestion and why")
    listing.add_argument("--max", type=int, default=50, help="at most this many, due first (default: 50)")
    listing.set_defaults(run=cmd_list)
    show = commands.add_parser("show", help="one pending review: item, options, probabilities")
    show.add_argument("execution_name")
    show.set_defaults(run=cmd_show)
    complete = commands.add_parser("complete", help="answer a pending review (SendTaskSuccess)")
    complete.add_argument("execution_name")
    complete.add_argument("--answer", action="append", required=True, metavar="QUESTION=OPTION")
    complete.add_argument("--reviewer", help=argparse.SUPPRESS)  # no longer sent: the name shown is your identity's
    complete.add_argument("--function", help="review function (default: REVIEW_FUNCTION_NAME)")
    complete.add_argument("--note")
    complete.set_defaults(run=cmd_complete)
    export = commands.add_parser("export", help="labelled examples as the eval tool's JSONL")
    export.add_argument("--out", help="file to write (default: stdout)")
    export.add_argument("--policy", help="only this policy's examples")
    export.add_argument("--table", help="default: LABELLED_EXAMPLES_TABLE_NAME")
    export.set_defaults(run=cmd_export)
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
