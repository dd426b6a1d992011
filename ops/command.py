"""How every operator command in ops/ starts and ends: parse, resolve, run, exit.

Each command parses its arguments (`Command.parser`: `python -m ops.NAME`, its module's first line
as its description, the whole module text after the options where it is the command's manual),
resolves what it works on (the flags, the environment, or a deployed stack's outputs:
`stack_outputs`), runs, and exits with one of three statuses: `DONE`, `WORK_LEFT` (something is
left to fix or to run again; said on stderr or in the report), `BAD_INPUT` (an argument, a setting
or a stack it cannot work with: one line on stderr, `NAME: why`, naming what and why). argparse's
own refusals exit 2 as well, before anything runs.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

DONE, WORK_LEFT, BAD_INPUT = 0, 1, 2

T = TypeVar("T")


class CommandError(ValueError):
    """Bad input: an argument, a setting or a stack the command cannot work with; the message says which and why."""


class WorkLeft(RuntimeError):
    """The command ran but was refused, or left work undone: its message says what (exit `WORK_LEFT`)."""


@dataclass(frozen=True)
class Command:
    """One operator command: its module (`ops.erase`), its manual (the module's docstring), the word
    its error lines start with, and the exceptions that mean bad input."""

    module: str
    doc: str
    error_prefix: str
    bad_input: tuple[type[Exception], ...] = (CommandError,)
    #: The whole docstring after the options in --help (a command whose docstring is its manual).
    manual: bool = False

    def parser(self) -> argparse.ArgumentParser:
        if self.manual:
            return argparse.ArgumentParser(prog=f"python -m {self.module}", description=self.doc.splitlines()[0],
                                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=self.doc)
        return argparse.ArgumentParser(prog=f"python -m {self.module}", description=self.doc.splitlines()[0])

    def refuse(self, error: BaseException | str, status: int = BAD_INPUT) -> int:
        """The error on stderr, prefixed by the command's word; `status` to exit with."""
        print(f"{self.error_prefix}: {error}", file=sys.stderr)
        return status

    def run(self, work: Callable[[], int]) -> int:
        """`work`'s exit status; a bad input it raises (wherever it is found), or `WorkLeft`, refused with its message."""
        try:
            return work()
        except self.bad_input as error:
            return self.refuse(error)
        except WorkLeft as error:
            return self.refuse(error, WORK_LEFT)

    def run_resolved(self, resolve: Callable[[], T], work: Callable[[T], int]) -> int:
        """`resolve` what to work on (a bad input refused, nothing done), then `work` on it: its exit status.
        An error `work` raises is not taken for bad input: it is the command's to report."""
        try:
            resolved = resolve()
        except self.bad_input as error:
            return self.refuse(error)
        return work(resolved)


def aws_session(session: Any = None, **options: Any) -> Any:
    """`session`, or a new boto3 session with `options` (boto3 imported only then: a test hands its own)."""
    if session is not None:
        return session
    import boto3

    return boto3.Session(**options)


def stack_outputs(stack: str, cloudformation: Any, required: Iterable[str] = (),
                  error: type[Exception] = CommandError) -> dict[str, str]:
    """A deployed stack's outputs by key (CloudFormation DescribeStacks); `error` naming the stack and
    each of `required` it lacks."""
    described = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    missing = sorted(output for output in set(required) if output not in outputs)
    if missing:
        raise error(f"stack {stack} has no output {', '.join(missing)}")
    return outputs
