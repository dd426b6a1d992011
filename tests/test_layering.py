"""The house's layering, read from the imports of every non-test source file with `ast` (nothing
is imported or run): what may import what, as docs/architecture.md draws it.

- No import cycle between modules, counting every import: at module level, inside a function or
  under `if TYPE_CHECKING:` (a lazy import only hides a cycle, it does not remove it).
- No import cycle between sibling packages (a package and the package around it are held to the
  module rule alone: `decision_server/app.py` mounts `routes/`, whose modules read `errors.py`).
- Every module stands in a room of FLOORS, and imports only its own room or rooms on lower floors.
- The container and the Lambda library never import each other; nothing the functions or the
  container ship imports the tools above them.
- A handler (`functions/<name>/app.py`) imports `decision_router` only, never another handler.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The import roots besides the repository itself (PYTHONPATH in the Makefile, pythonpath in pyproject.toml).
ROOTS = ("contract", "container", "functions")
#: Folders that hold no source of the house.
SKIP = {"tests", "build", "__pycache__", "node_modules"}

#: The Lambda handlers: every functions/<name>/app.py.
HANDLERS = tuple(sorted(p.parent.name for p in (REPO / "functions").glob("*/app.py")))

#: The floors, ground first. A room is a package or a module, named as it is imported; a module
#: belongs to the longest room that names it (`decision_router` is the library's own modules:
#: config, severity, validation). A module may import its own room and rooms on lower floors.
FLOORS: list[tuple[str, ...]] = [
    ("decision_contract",),  # the wire contract
    ("decision_server", "package_model", "decision_router"),  # the container; the library's ground
    ("decision_router.sources", "decision_router.domain"),  # siblings: neither imports the other
    ("decision_router.review",),
    ("decision_router.adapters",),
    ("decision_router.intake",),
    HANDLERS,
    ("evaluation", "ops", "local", "docs"),  # what the fitter and the evaluation share; operator tools; the local run; the site's generator
    ("training", "bench"),
    # the relearning job and its function (a container image over training); the fitter's own
    # benchmarks, which import training (the rest of bench never does)
    ("relearning", "bench.scale", "bench.novelty_methods"),
]

#: Rooms that never import each other's (the first never imports the second).
NEVER = [
    ("decision_server", "decision_router"),
    ("decision_router", "decision_server"),
    *((shipped, tool) for shipped in ("decision_contract", "decision_server", "decision_router", *HANDLERS)
      for tool in ("local", "bench", "training", "ops", "evaluation", "relearning")),
]


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the project's module it imports
    path: Path
    line: int
    text: str

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}: `{self.text}`"


def source_files() -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP and not d.endswith(".egg-info"))
        found += [Path(folder) / f for f in sorted(files) if f.endswith(".py")]
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    if parts[0] in ROOTS:
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in source_files()}


def is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def imports_of(module: str) -> list[Import]:
    """Every import of the project's modules in `module`, wherever it stands in the file."""
    path = MODULES[module]
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                named = [".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in MODULES]
                targets += named[:1]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package(module) else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                if f"{origin}.{alias.name}" in MODULES:  # a submodule
                    targets.append(f"{origin}.{alias.name}")
                elif origin in MODULES:  # a name the module defines
                    targets.append(origin)
        for target in dict.fromkeys(targets):
            if target != module:
                found.append(Import(module, target, path, node.lineno, lines[node.lineno - 1].strip()))
    return found


IMPORTS: list[Import] = [imp for module in sorted(MODULES) for imp in imports_of(module)]


def room_of(module: str) -> str | None:
    rooms = [room for floor in FLOORS for room in floor if module == room or module.startswith(room + ".")]
    return max(rooms, key=len) if rooms else None


def floor_of(room: str) -> int:
    return next(i for i, floor in enumerate(FLOORS, start=1) if room in floor)


def in_room(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def cycles(edges: dict[str, dict[str, Import]]) -> list[list[str]]:
    """One cycle (a list of nodes, the first repeated at the end) per strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    found = []
    for component in components:  # the shortest way from the first node back to it, inside the component
        start, members = min(component), set(component)
        paths = {start: [start]}
        queue = [start]
        while queue:
            v = queue.pop(0)
            for w in sorted(edges.get(v, {})):
                if w == start:
                    found.append(paths[v] + [start])
                    queue = []
                    break
                if w in members and w not in paths:
                    paths[w] = paths[v] + [w]
                    queue.append(w)
    return found


def describe(cycle: list[str], edges: dict[str, dict[str, Import]]) -> str:
    return "\n".join(f"    {a} -> {b}   {edges[a][b].where()}" for a, b in zip(cycle, cycle[1:]))


def test_the_sources_are_read():
    assert {"decision_contract", "decision_server.app", "decision_router.intake.pipeline", "ticket_webhook.app",
            "evaluation.metrics", "training.learn", "bench.evaluate.analysis", "ops.redrive"} <= set(MODULES)
    assert not any(in_room(m, "tests") for m in MODULES)
    assert len(IMPORTS) > 200
    assert {"ticket_webhook", "ticket_intake", "incident_intake", "review", "review_console"} <= set(HANDLERS)


def test_no_import_cycle_between_modules():
    edges: dict[str, dict[str, Import]] = defaultdict(dict)
    for imp in IMPORTS:
        edges[imp.source].setdefault(imp.target, imp)
    found = cycles(edges)
    assert not found, "import cycles between modules (function-level imports count):\n" + "\n\n".join(
        describe(c, edges) for c in found)


def package_of(module: str) -> str:
    return module if is_package(module) else module.rpartition(".")[0]


def test_no_import_cycle_between_packages():
    def around(outer: str, inner: str) -> bool:
        return outer == "" or inner == outer or inner.startswith(outer + ".")

    edges: dict[str, dict[str, Import]] = defaultdict(dict)
    for imp in IMPORTS:
        a, b = package_of(imp.source), package_of(imp.target)
        if not around(a, b) and not around(b, a):
            edges[a].setdefault(b, imp)
    found = cycles(edges)
    assert not found, "import cycles between packages:\n" + "\n\n".join(describe(c, edges) for c in found)


def test_every_module_stands_on_a_floor():
    homeless = sorted(str(MODULES[m].relative_to(REPO)) for m in MODULES if room_of(m) is None)
    assert not homeless, f"modules in no room of FLOORS (tests/test_layering.py): {homeless}; add their room to the floor it stands on"


def test_no_import_runs_up_or_sideways():
    wrong = []
    for imp in IMPORTS:
        here, there = room_of(imp.source), room_of(imp.target)
        if here is None or there is None or here == there:
            continue
        if floor_of(there) >= floor_of(here):
            how = "stands on the same floor as" if floor_of(there) == floor_of(here) else "stands below"
            wrong.append(f"{imp.where()} imports {imp.target}: {here} (floor {floor_of(here)}) {how} "
                         f"{there} (floor {floor_of(there)})")
    assert not wrong, "imports that do not go down a floor:\n" + "\n".join(wrong)


def test_what_never_imports_what():
    wrong = [f"{imp.where()} imports {imp.target}: {low} never imports {high}"
             for imp in IMPORTS for low, high in NEVER if in_room(imp.source, low) and in_room(imp.target, high)]
    assert not wrong, "forbidden imports:\n" + "\n".join(wrong)


def test_handlers_import_only_the_library():
    wrong = [f"{imp.where()} imports {imp.target}: a handler imports decision_router only"
             for imp in IMPORTS if imp.source.partition(".")[0] in HANDLERS and not in_room(imp.target, "decision_router")
             and imp.source.partition(".")[0] != imp.target.partition(".")[0]]
    assert not wrong, "handlers that import more than the library:\n" + "\n".join(wrong)
