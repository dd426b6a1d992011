"""Every make target honours or refuses what it is given: each `make <target> VAR=value` the
documentation shows (README.md, docs/, `make help`) is accepted, and the value reaches the command
make would run; a variable a target does not take stops make with its name. All by dry run
(`make -n`, the venv stamps taken as made): nothing executes. Marked `server`: it starts make."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parents[2]
MAKEFILE = (REPO / "Makefile").read_text(encoding="utf-8")
#: The stamps the targets depend on, taken as made: `-n` then prints the targets' own recipes only.
STAMPS = [".venv/.installed", ".venv-sam/.installed", ".venv/.chromium"]
#: A value no recipe holds by itself.
SENTINEL = "sentinel-value"
#: One `VAR=value` of a command: the value quoted, or up to a space, bracket or punctuation.
ASSIGNMENT = re.compile(r"""(?<![\w-])([A-Z][A-Z0-9_]*)=("[^"]*"|'[^']*'|[^\s\]\[)(`,;]*)""")
COMMAND = re.compile(r"^\$?\s*make\s+([a-z][a-z-]*)(.*)$", re.S)


def dry_run(*args: str) -> subprocess.CompletedProcess[str]:
    """`make -n ARGS` as a user would type it: variables from a calling make (MAKEFLAGS, as under
    `make test VAR=…`) would count as given on the command line, so they are left out."""
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}}
    stamps = [arg for stamp in STAMPS for arg in ("-o", stamp)]
    return subprocess.run(["make", "--no-print-directory", "-n", *stamps, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def takes(target: str) -> list[str]:
    line = re.search(rf"^TAKES_{re.escape(target)} :=(.*)$", MAKEFILE, re.M)
    assert line, f"the Makefile declares no TAKES_{target}"
    return line.group(1).split()


def _snippets() -> list[tuple[str, str]]:
    """(where, text) of every make command the documentation shows."""
    found = []
    help_lines = re.findall(r'^\t@echo "(.*)"$', MAKEFILE.split("\nhelp:", 1)[1].split("\n\n", 1)[0], re.M)
    target = None
    for line in (line.replace('\\"', '"') for line in help_lines):
        if line.startswith("make "):
            target = line.split()[1]
            found.append(("make help", line))
        elif target:  # a continuation line of the target above
            found.append(("make help", f"make {target} {line}"))
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text, where = page.read_text(encoding="utf-8"), str(page.relative_to(REPO))
        fences = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
        for block in fences:
            for line in block.replace("\\\n", " ").splitlines():
                found.append((where, re.split(r"\s#\s", line)[0]))
        prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
        found += [(where, " ".join(span.split())) for span in re.findall(r"`([^`]+)`", prose)]
    return found


def documented() -> dict[tuple[str, str, str], tuple[str, tuple[str, ...]]]:
    """(target, variable, value) → where it is documented and the other variables of its command;
    a value with alternatives (a|b) gives one per alternative, an empty or elided one (`REVIEWS=`,
    `MODEL=…`) the sentinel."""
    examples: dict[tuple[str, str, str], tuple[str, tuple[str, ...]]] = {}
    for where, snippet in _snippets():
        for part in re.split(r"\s*(?:&&|;)\s*(?=make\s)", snippet):
            command = COMMAND.match(part.strip())
            if not command:
                continue
            target, rest = command.groups()
            found = list(ASSIGNMENT.finditer(rest))
            # `[STACK=name | TABLE=name]`: variables either side of a spaced bar exclude each other.
            exclusive: list[set[str]] = []
            for bar in re.finditer(r"\s\|\s", rest):
                before = [m.group(1) for m in found if m.end() <= bar.start()][-1:]
                after = [m.group(1) for m in found if m.start() >= bar.end()][:1]
                group = set(before + after)
                joined = [g for g in exclusive if g & group]
                exclusive = [g for g in exclusive if not g & group] + [group.union(*joined)]
            given = [(m.group(1), alternative.strip(".…") or SENTINEL) for m in found
                     for value in [m.group(2).strip("\"'")]
                     for alternative in (value.split("|") if not value.startswith("-") else [value])]
            for variable, value in given:
                apart = {v for group in exclusive if variable in group for v in group}
                others = tuple(dict((v, f"{v}={x}") for v, x in given if v != variable and v not in apart).values())
                examples.setdefault((target, variable, value), (where, others))
    return examples


EXAMPLES = documented()
TARGETS = sorted({target for target, _, _ in EXAMPLES} | set(re.findall(r"^TAKES_([a-z-]+) :=", MAKEFILE, re.M)))


def test_the_documentation_shows_variables_of_the_targets():
    assert len(EXAMPLES) > 60, EXAMPLES
    for example in [("review", "MODEL", SENTINEL), ("demo", "POLICY", "events/many-options/policy.json"),
                    ("fit-history", "MODEL", "none"), ("preflight", "PARAMS", "EndpointCompute=GPU"),
                    ("redrive", "DLQ", "tickets")]:
        assert any(e[:2] == example[:2] and e[2].startswith(example[2]) for e in EXAMPLES), example


def _appears(value: str, command: str) -> bool:
    return re.search(rf"(?<![\w./-]){re.escape(value)}(?![\w./-])", command) is not None


def _switch(variable: str, value: str) -> bool:
    """The recipe tests the value rather than passing it on: `$(filter 1,$(REPLACE))`, `$(if $(DRY_RUN),--dry-run)`."""
    return (f"$(filter {value},$({variable}))" in MAKEFILE
            or re.search(rf"\$\(if \$\({variable}\),--[\w-]+\)", MAKEFILE) is not None)


@pytest.mark.parametrize(("target", "variable", "value"),
                         [pytest.param(*example, id=" ".join(example)) for example in sorted(EXAMPLES)])
def test_each_documented_variable_is_taken_and_reaches_the_command(target, variable, value):
    where, others = EXAMPLES[target, variable, value]
    given = dry_run(target, *others, f"{variable}={value}")
    assert given.returncode == 0, f"{where}: make {target} {variable}={value}: {given.stderr}"
    if variable in re.search(r"^TAKES_ANY := (.*)$", MAKEFILE, re.M).group(1).split():
        return  # the venv's Python: only the stamp's recipe uses it
    if not _appears(value, given.stdout):
        assert _switch(variable, value), f"{where}: make {target} {variable}={value}: the value is not in the command:\n{given.stdout}"
        assert given.stdout != dry_run(target, *others).stdout, f"{where}: make {target} {variable}={value} changes nothing"


@pytest.mark.parametrize("target", TARGETS)
def test_a_variable_the_target_does_not_take_is_refused_by_name(target):
    refused = dry_run(target, "NOT_A_VARIABLE=1")
    assert refused.returncode != 0 and not refused.stdout
    listed = ", ".join(takes(target))
    assert f"make {target} does not take NOT_A_VARIABLE ({'it takes ' + listed if listed else 'it takes no variables'})" \
        in refused.stderr


@pytest.mark.parametrize("target", sorted(t for t in TARGETS if takes(t)))
def test_every_variable_a_target_takes_reaches_its_command(target):
    """Given a value (or 1, for a switch; with ON=sagemaker, for what only SageMaker uses), each
    variable a target declares changes the command make would run."""
    contexts = [()] + ([("ON=sagemaker", "STACK=s")] if "ON" in takes(target) else [])
    for variable in takes(target):
        assert any(dry_run(target, *context, f"{variable}={value}").stdout != dry_run(target, *context).stdout
                   for context in contexts if variable not in {c.split("=")[0] for c in context}
                   for value in (SENTINEL, "1")), f"make {target} {variable}=…: taken but dropped"


def test_the_refusal_names_the_variable_and_what_the_target_takes():
    refused = dry_run("demo", "TARGETS=x")
    assert "make demo does not take TARGETS (it takes MODEL, ITEMS, POLICY, REPORT)" in refused.stderr
    assert refused.returncode != 0


def test_review_passes_the_policy_through():
    assert '-m local.review --policy "my/policy.json"' in " ".join(dry_run("review", "POLICY=my/policy.json").stdout.split())
    assert "--policy" not in dry_run("review").stdout  # by default: the last demo's, from .demo/run.json


def test_only_the_command_line_counts_not_the_environment():
    env_given = subprocess.run(["make", "-n", *[a for s in STAMPS for a in ("-o", s)], "review"], cwd=REPO,
                               env={**{k: v for k, v in os.environ.items() if not k.startswith("MAKE")},
                                    "TARGETS": "x", "CI": "true", "DATA": "y"},
                               capture_output=True, text=True, timeout=60)
    assert env_given.returncode == 0, env_given.stderr
