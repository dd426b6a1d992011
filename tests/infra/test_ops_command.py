"""ops/command.py: how every operator command starts and ends (its parser, its stack outputs, its exit statuses)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from ops.command import BAD_INPUT, DONE, WORK_LEFT, Command, CommandError, WorkLeft, stack_outputs

REPO = Path(__file__).resolve().parents[2]
#: Every operator command: a module of ops/ run as `python -m ops.NAME` (the helpers they are made of are not).
COMMANDS = ["backfill_audit_shards", "erase", "heads", "preflight", "redrive", "replay", "review_cli"]

DOC = """Do one thing to a stack.

    python -m ops.example --flag
"""


class CloudFormation:
    def __init__(self, outputs: dict[str, str]):
        self.outputs = outputs

    def describe_stacks(self, StackName: str) -> dict:  # boto3 spells it StackName
        return {"Stacks": [{"StackName": StackName,
                            "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in self.outputs.items()]}]}


def test_every_module_run_by_make_is_a_command_that_starts_through_the_helper():
    runnable = sorted(p.stem for p in (REPO / "ops").glob("*.py") if 'if __name__ == "__main__":' in p.read_text("utf-8"))
    assert runnable == COMMANDS
    for name in COMMANDS:
        module = importlib.import_module(f"ops.{name}")
        command = module.COMMAND
        assert isinstance(command, Command) and command.module == f"ops.{name}", name
        assert command.doc == module.__doc__, name


def test_bad_input_is_one_line_on_stderr_naming_the_command_and_exits_2(capsys):
    command = Command("ops.example", DOC, "example")

    def work() -> int:
        raise CommandError("--flag: must be a whole number")

    assert command.run(work) == BAD_INPUT
    assert capsys.readouterr().err == "example: --flag: must be a whole number\n"


def test_work_left_exits_1_and_the_other_bad_input_errors_count_as_well(capsys):
    command = Command("ops.example", DOC, "error", (LookupError,))

    def refused() -> int:
        raise WorkLeft("no request waits on the queue")

    def unset() -> int:
        raise LookupError("pass --queue-url or set QUEUE_URL")

    assert command.run(refused) == WORK_LEFT
    assert command.run(unset) == BAD_INPUT
    assert command.run(lambda: DONE) == DONE
    assert capsys.readouterr().err == "error: no request waits on the queue\nerror: pass --queue-url or set QUEUE_URL\n"


def test_an_error_of_the_work_after_resolving_is_not_taken_for_bad_input(capsys):
    command = Command("ops.example", DOC, "example", (ValueError,))
    worked: list[str] = []

    def broken(target: str) -> int:
        raise ValueError(f"a bug while working on {target}")

    assert command.run_resolved(lambda: "table-1", lambda target: worked.append(target) or DONE) == DONE
    assert worked == ["table-1"]
    with pytest.raises(ValueError, match="a bug while working on table-1"):
        command.run_resolved(lambda: "table-1", broken)

    def unresolved() -> str:
        raise ValueError("stack s has no output AuditTableName")

    assert command.run_resolved(unresolved, broken) == BAD_INPUT
    assert capsys.readouterr().err == "example: stack s has no output AuditTableName\n"


def test_the_parser_names_the_module_and_shows_its_manual_only_where_asked():
    manual = Command("ops.example", DOC, "example", manual=True).parser()
    plain = Command("ops.example", DOC, "example").parser()
    assert manual.prog == plain.prog == "python -m ops.example"
    assert manual.description == plain.description == "Do one thing to a stack."
    assert "python -m ops.example --flag" in manual.format_help()
    assert "python -m ops.example --flag" not in plain.format_help()


def test_stack_outputs_name_every_output_the_stack_lacks():
    stack = CloudFormation({"AuditTableName": "router-Audit", "HeadBucketName": "heads"})
    assert stack_outputs("router", stack, ["AuditTableName"]) == {"AuditTableName": "router-Audit",
                                                                  "HeadBucketName": "heads"}
    with pytest.raises(CommandError, match="^stack router has no output EscalationQueueUrl, TicketQueueUrl$"):
        stack_outputs("router", stack, ["TicketQueueUrl", "AuditTableName", "EscalationQueueUrl"])

    class Missing(CommandError):
        pass

    with pytest.raises(Missing):
        stack_outputs("router", stack, ["TicketQueueUrl"], Missing)
