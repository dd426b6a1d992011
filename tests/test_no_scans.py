"""No DynamoDB Scan on a request path, read from the source with `ast` (nothing is imported or
run), as tests/test_layering.py reads the imports: every read the deployed functions make is a
GetItem or a Query on a key or an index. A Scan reads the whole table, whatever it keeps, so it
is left to the exports and the ops tools alone, each named in ALLOWED with why.

A Scan is a call of `.scan(...)` (a client's or a Table resource's) or a paginator of it
(`get_paginator("scan")`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: What is deployed and answers requests: the Lambda library and the handlers.
CHECKED = REPO / "functions"
#: (file under functions/, the function that scans): the exports and ops reads, never a request's.
ALLOWED = {
    # A replay (ops/replay.py) reads every audit row, read only, from an operator's machine.
    ("decision_router/adapters/review.py", "AuditTrail.all"),
    # The labelled examples exported whole: review_cli export and the console's export, page by page.
    ("decision_router/adapters/review.py", "LabelledExamples.scan"),
    ("decision_router/adapters/review.py", "LabelledExamples.page"),
}


@dataclass(frozen=True)
class Scan:
    path: str  # under functions/
    function: str  # Class.method, or the function's name
    line: int

    def __str__(self) -> str:
        return f"functions/{self.path}:{self.line} in {self.function}"


def _is_scan(node: ast.Call) -> bool:
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "scan":
        return True
    return (isinstance(func, ast.Attribute) and func.attr == "get_paginator" and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).lower() == "scan")


def scans_in(source: str, path: str) -> list[Scan]:
    """Every Scan call in `source`, named by the function (Class.method) that makes it."""
    found: list[Scan] = []

    def visit(node: ast.AST, where: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = [*where, child.name]
            if isinstance(child, ast.Call) and _is_scan(child):
                found.append(Scan(path, ".".join(where) or "<module>", child.lineno))
            visit(child, inner)

    visit(ast.parse(source), [])
    return found


def test_no_scan_in_the_deployed_code_but_the_exports_and_ops_reads():
    scans = [scan for file in sorted(CHECKED.rglob("*.py")) if "tests" not in file.parts
             for scan in scans_in(file.read_text(encoding="utf-8"), file.relative_to(CHECKED).as_posix())]
    unexpected = [str(s) for s in scans if (s.path, s.function) not in ALLOWED]
    assert not unexpected, ("a Scan reads a whole table on a request path: Query a key or an index instead "
                            f"(or, for an export or an ops read, name it in ALLOWED): {unexpected}")
    stale = ALLOWED - {(s.path, s.function) for s in scans}
    assert not stale, f"ALLOWED names a function that no longer scans: {sorted(stale)}"


def test_the_check_finds_a_scan_by_client_resource_and_paginator():
    source = '''
class Store:
    def listing(self):
        return self.client.scan(TableName="t")

    def pages(self):
        for page in self.client.get_paginator("scan").paginate(TableName="t"):
            yield page

def whole(table):
    return table.scan()

def fine(client):
    return client.query(TableName="t", KeyConditionExpression="k = :k")
'''
    assert [(s.function, s.line) for s in scans_in(source, "x.py")] == [
        ("Store.listing", 4), ("Store.pages", 7), ("whole", 11)]
