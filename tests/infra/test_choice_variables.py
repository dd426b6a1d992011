"""Every Choice rule reads only fields that are there. Real Step Functions fails the execution
(States.Runtime, which no Catch catches) when a Choice rule's Variable, or the path a `...Path`
comparison reads, is absent from the state's input; moto's interpreter takes it as no match, so
the stack tests never see it. This file proves it from the definitions instead: every state
machine of template.yaml (`DefinitionUri`, or a definition written inline) and every
statemachine/*.asl.json.

A Variable (or `...Path` value) of a Choice rule is guarded when one of these holds:

(a) The rule or the rules before it prove the field present:
    - an `And` whose earlier operand proved it: `IsPresent: true`, or any other test of that field
      that matched (a comparison only matches a field that is there). Step Functions evaluates an
      `And`'s operands in order and stops at the first that fails (the documented IsPresent guard);
    - an `Or` whose earlier operand, by failing, proved it (`IsPresent: false`);
    - an earlier rule of the same Choice state that takes the absent case elsewhere,
      `{"Not": {"Variable": v, "IsPresent": true}, "Next": ...}`: Step Functions takes the first
      rule that matches, in order, so a later rule only runs where v is there. This is the form the
      definitions use.
(b) Every path from StartAt to the Choice state writes it, or the execution's input has it.

`IsPresent` itself reads nothing and needs no guard; every other operator needs one.

(b) is a forward "known present" analysis (`unguarded`). A fact is a JSON path known to exist in
a state's input (`("review_outcome", "answer")` for `$.review_outcome.answer`; its prefixes exist
too). Conservative throughout: what it cannot prove, it does not know.

- At the start: the fields every StartExecution of that state machine writes (`INPUTS`,
  cross-checked below against the code and the resources that start executions), nothing else.
- Each state, JSONPath semantics: InputPath narrows the input; the result is a Pass state's
  `Result` (each key of the literal), its `Parameters` (each key, and what a copied `$.path` is
  known to hold beneath it) or its effective input; a Task's, Parallel's or Map's result is unknown
  except the keys of its ResultSelector; ResultPath places the result (`null`: the raw input kept;
  `$`: the result alone; `$.a.b`: the input with `a.b` replaced); OutputPath narrows the output.
  A Catch edge carries the raw input with `{Error, Cause}` at the catcher's ResultPath. Assign
  (JSONPath variables) makes the assigned names known (`$name`), nothing beneath them.
- Choice edges: a rule's Next knows what that rule proved on matching and what the rules before
  it proved by failing; Default knows what every rule proved by failing.
- Parallel branches start from the Parallel's effective input (after Parameters); a Map's
  iterations from its ItemSelector's keys, or nothing.
- Where paths meet, only what every path proved (intersection), repeated until nothing changes,
  so loops are covered. JSONata definitions are refused rather than half checked.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import pytest

from decision_router.adapters.workflow import WorkflowStarter
from decision_router.domain.records import CorrectedRecord, DecisionRecord, ReviewAnswer
from local.template import _STATE_MACHINE_TYPES, load_template

REPO = Path(__file__).resolve().parents[2]

#: The fields every StartExecution writes, per state machine (its logical id in template.yaml).
INPUTS: dict[str, tuple[str, ...]] = {
    # A DecisionRecord (a CorrectedRecord for a correction) as JSON: the intakes, the review
    # console's corrections and ops/redrive all start it through adapters/workflow.py. These are the
    # record's required fields: any record that validates has them. Those with a default (announce,
    # shadow, linked, audit_expires_at) may be missing from an older record started again, or from
    # one started by hand, so the workflow tests for them.
    "RoutingStateMachine": ("item_kind", "item_id", "item_key", "item", "policy", "route", "route_reason",
                            "destination", "escalate", "decisions", "review", "decided_at"),
    # The schedules, one per policy and trigger: {"policy": ..., "trigger": "schedule" | "labels"}.
    "RelearningStateMachine": ("policy", "trigger"),
}

#: Choice rule operators (JSONPath), apart from the And / Or / Not that combine them.
OPERATORS = {f"{kind}{test}{path}" for kind in ("String", "Numeric", "Boolean", "Timestamp")
             for test in ("Equals", "LessThan", "GreaterThan", "LessThanEquals", "GreaterThanEquals")
             for path in ("", "Path")} | {"StringMatches", "IsNull", "IsPresent", "IsNumeric", "IsString",
                                           "IsBoolean", "IsTimestamp"}

Fact = tuple[str, ...]
Facts = frozenset[Fact]


class Unsupported(ValueError):
    """A definition this checker cannot follow: extend it rather than trust a half check."""


@dataclass(frozen=True)
class Unguarded:
    state: str     # the Choice state's name; inside a Parallel or Map, "Outer/Inner"
    variable: str  # the path as the rule writes it
    rule: int      # its rule's index in Choices

    def __str__(self) -> str:
        return f"{self.state}: {self.variable} (rule {self.rule}) may be absent"


# ---------------------------------------------------------------------------------------- paths
def parse_path(path: Any) -> Fact | None:
    """`$` -> (), `$.a.b` -> ("a", "b"), a variable `$v.a` -> ("$v", "a"); None for what is not
    followed: the context object (`$$`), brackets, wildcards, filters, intrinsic functions."""
    if not isinstance(path, str) or not path.startswith("$") or path.startswith("$$"):
        return None
    if path == "$":
        return ()
    if re.search(r"[\[\]*?()@,:' ]", path):
        return None
    if path.startswith("$."):
        parts = path[2:].split(".")
    else:
        head, *rest = path[1:].split(".")
        parts = ["$" + head, *rest]
    return tuple(parts) if all(parts) else None


def _is_variable(fact: Fact) -> bool:
    return bool(fact) and fact[0].startswith("$")


def closed(paths: Iterable[Fact | None]) -> set[Fact]:
    """The paths and every prefix of each (a field's parents are there too)."""
    return {p[:i] for p in paths if p is not None for i in range(len(p) + 1)}


def variables(facts: Iterable[Fact]) -> set[Fact]:
    return {f for f in facts if _is_variable(f)}


def under(facts: Iterable[Fact], path: Fact) -> set[Fact]:
    """What is known beneath `path`, rooted at it (empty when `path` itself is not known)."""
    facts = set(facts)
    if path not in facts:
        return set()
    return {f[len(path):] for f in facts if f[:len(path)] == path and not (not path and _is_variable(f))}


def narrowed(facts: Iterable[Fact], path: Any) -> set[Fact]:
    """InputPath / OutputPath: the value at `path` becomes the whole (variables are not data: kept)."""
    if path is None:  # null: an empty object
        return {()} | variables(facts)
    return {()} | under(facts, _followable(path)) | variables(facts)


def placed(facts: Iterable[Fact], result_path: Any, result: Iterable[Fact]) -> set[Fact]:
    """ResultPath: the result placed into the raw input."""
    if result_path is None:
        return set(facts)
    path = _followable(result_path)
    result = {r for r in result if not _is_variable(r)}
    kept = {f for f in facts if _is_variable(f) or f[:len(path)] != path}
    return kept | closed([path]) | {path + r for r in result}


def _followable(path: Any) -> Fact:
    parsed = parse_path(path)
    if parsed is None:
        raise Unsupported(f"path {path!r}: only $, $.a.b and $variable.a are followed")
    return parsed


def literal_facts(value: Any) -> set[Fact]:
    """Each key of a JSON literal, at any depth (array items are not followed)."""
    facts: set[Fact] = {()}
    if isinstance(value, dict):
        for key, inner in value.items():
            facts |= {(key,) + f for f in literal_facts(inner)}
    return facts


def template_facts(template: Any, source: Iterable[Fact]) -> set[Fact]:
    """What a Parameters / ResultSelector / ItemSelector template writes: each key (`.$` dropped),
    and beneath a key that copies `$.path` (or `$variable.path`) what `source` knows there."""
    if not isinstance(template, dict):
        return literal_facts(template)
    facts: set[Fact] = {()}
    for key, value in template.items():
        if key.endswith(".$"):
            name = key[:-2]
            facts.add((name,))
            copied = parse_path(value)
            if copied is not None:
                facts |= {(name,) + f for f in under(source, copied)}
        else:
            facts |= {(key,) + f for f in template_facts(value, source)}
    return facts


def assigned(assign: Any) -> set[Fact]:
    """JSONPath Assign: the variables it sets are known, nothing beneath them."""
    if not isinstance(assign, dict):
        return set()
    return {("$" + key.removesuffix(".$"),) for key in assign}


# ---------------------------------------------------------------------------------- Choice rules
def _leaf(rule: dict[str, Any]) -> tuple[str, Any, list[Fact | None]]:
    """(operator, its value, the paths the rule reads) of a rule without And / Or / Not."""
    if "Condition" in rule:
        raise Unsupported("a JSONata Condition")
    operators = [key for key in rule if key not in ("Variable", "Next", "Comment", "Assign")]
    if len(operators) != 1 or operators[0] not in OPERATORS or "Variable" not in rule:
        raise Unsupported(f"choice rule {rule!r}")
    operator = operators[0]
    reads = [parse_path(rule["Variable"])]
    if operator.endswith("Path"):
        reads.append(parse_path(rule[operator]))
    return operator, rule[operator], reads


def proved_if_matched(rule: dict[str, Any]) -> set[Fact]:
    """What a rule that matched proves present."""
    if "And" in rule:
        return set().union(*(proved_if_matched(r) for r in rule["And"]))
    if "Or" in rule:
        return set.intersection(*(proved_if_matched(r) for r in rule["Or"]))
    if "Not" in rule:
        return proved_if_failed(rule["Not"])
    operator, value, reads = _leaf(rule)
    if operator == "IsPresent":
        return closed(reads) if value is True else set()
    return closed(reads)  # a comparison, or a type test, matches only a field that is there


def proved_if_failed(rule: dict[str, Any]) -> set[Fact]:
    """What a rule that did not match proves present (a failed comparison proves nothing)."""
    if "Or" in rule:
        return set().union(*(proved_if_failed(r) for r in rule["Or"]))
    if "Not" in rule:
        return proved_if_matched(rule["Not"])
    if "And" in rule:
        return set()
    operator, value, reads = _leaf(rule)
    return closed(reads) if operator == "IsPresent" and value is False else set()


def unguarded_reads(rule: dict[str, Any], known: set[Fact]) -> list[str]:
    """The paths the rule reads that may be absent when it is evaluated."""
    if "And" in rule or "Or" in rule:
        operands = rule.get("And", rule.get("Or"))
        missing, seen = [], set(known)
        for operand in operands:
            missing += unguarded_reads(operand, seen)
            # an And goes on only past an operand that matched; an Or only past one that failed
            seen |= proved_if_matched(operand) if "And" in rule else proved_if_failed(operand)
        return missing
    if "Not" in rule:
        return unguarded_reads(rule["Not"], known)
    operator, value, _ = _leaf(rule)
    written = [rule["Variable"]] + ([value] if operator.endswith("Path") else [])
    if operator == "IsPresent":
        return []
    return [path for path in written if parse_path(path) is None or parse_path(path) not in known]


# ------------------------------------------------------------------------------------ the states
def _refuse_jsonata(definition: dict[str, Any], state: dict[str, Any], name: str) -> None:
    if "JSONata" in (definition.get("QueryLanguage"), state.get("QueryLanguage")):
        raise Unsupported(f"{name}: JSONata (its Choice rules are Conditions): extend this checker first")


def edges(name: str, state: dict[str, Any], facts: set[Fact]) -> list[tuple[str, set[Fact]]]:
    """(next state, what its input is known to hold) for each way out of the state."""
    kind = state["Type"]
    if kind in ("Succeed", "Fail"):
        return []
    effective = narrowed(facts, state.get("InputPath", "$"))
    out: list[tuple[str, set[Fact]]] = []
    if kind == "Choice":
        failed: set[Fact] = set()
        for rule in state["Choices"]:
            matched = effective | failed | proved_if_matched(rule)
            out.append((rule["Next"], narrowed(matched, state.get("OutputPath", "$")) | assigned(rule.get("Assign"))))
            failed |= proved_if_failed(rule)
        if "Default" in state:
            out.append((state["Default"], narrowed(effective | failed, state.get("OutputPath", "$"))))
        return [(target, known | assigned(state.get("Assign"))) for target, known in out]
    if kind == "Wait":
        output = effective
    else:
        if kind == "Pass" and "Result" in state:
            result = literal_facts(state["Result"])
        elif kind == "Pass" and "Parameters" in state:
            result = template_facts(state["Parameters"], effective)
        elif kind == "Pass":
            result = effective
        elif kind in ("Task", "Parallel", "Map"):
            raw: set[Fact] = {()} | variables(facts)
            result = template_facts(state["ResultSelector"], raw) if "ResultSelector" in state else {()}
        else:
            raise Unsupported(f"{name}: state type {kind}")
        output = placed(facts, state.get("ResultPath", "$"), result)
    output = narrowed(output, state.get("OutputPath", "$")) | assigned(state.get("Assign"))
    if "Next" in state:
        out.append((state["Next"], output))
    for catcher in state.get("Catch", []):
        error = placed(facts, catcher.get("ResultPath", "$"), {(), ("Error",), ("Cause",)})
        out.append((catcher["Next"], error | assigned(catcher.get("Assign"))))
    return out


def branch_inputs(state: dict[str, Any], facts: set[Fact]) -> list[tuple[dict[str, Any], set[Fact]]]:
    """The sub-machines of a Parallel or Map state, each with what its StartAt's input holds."""
    effective = narrowed(facts, state.get("InputPath", "$"))
    if state["Type"] == "Parallel":
        start = template_facts(state["Parameters"], effective) if "Parameters" in state else effective
        return [(branch, start | variables(facts)) for branch in state["Branches"]]
    if state["Type"] == "Map":
        selector = state.get("ItemSelector", state.get("Parameters"))
        start = (template_facts(selector, effective) if selector is not None else {()}) | variables(facts)
        return [(state[key], start) for key in ("ItemProcessor", "Iterator") if key in state]
    return []


def reached(definition: dict[str, Any], start: set[Fact]) -> dict[str, set[Fact]]:
    """What each reachable state's input is known to hold, on every path that reaches it."""
    states = definition["States"]
    known: dict[str, set[Fact]] = {definition["StartAt"]: set(start)}
    pending = [definition["StartAt"]]
    while pending:
        name = pending.pop()
        state = states[name]
        _refuse_jsonata(definition, state, name)
        for target, facts in edges(name, state, known[name]):
            before = known.get(target)
            after = facts if before is None else before & facts
            if after != before:
                known[target] = after
                pending.append(target)
    return known


def unguarded(definition: dict[str, Any], inputs: Iterable[str], where: str = "") -> list[Unguarded]:
    """Each Choice rule's read of a field that may be absent, in this definition and its branches."""
    return _unguarded(definition, closed((field,) for field in inputs), where)


def _unguarded(definition: dict[str, Any], start: set[Fact], where: str) -> list[Unguarded]:
    found: list[Unguarded] = []
    for name, facts in reached(definition, start).items():
        state = definition["States"][name]
        if state["Type"] == "Choice":
            known = narrowed(facts, state.get("InputPath", "$"))
            for index, rule in enumerate(state["Choices"]):
                found += [Unguarded(where + name, variable, index) for variable in unguarded_reads(rule, known)]
                known = known | proved_if_failed(rule)
        for branch, branch_start in branch_inputs(state, facts):
            found += _unguarded(branch, branch_start, f"{where}{name}/")
    return found


# ------------------------------------------------------------------------------- the definitions
def state_machines() -> Iterator[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """(name, definition, fields its executions start with): each state machine of template.yaml,
    then each statemachine/*.asl.json that none uses (known to start with nothing)."""
    template = load_template()
    used = set()
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] not in _STATE_MACHINE_TYPES:
            continue
        props = resource["Properties"]
        if "DefinitionUri" in props:
            path = (REPO / props["DefinitionUri"]).resolve()
            used.add(path)
            definition = json.loads(path.read_text(encoding="utf-8"))
        elif isinstance(props.get("Definition"), dict):
            definition = props["Definition"]
        elif isinstance(props.get("DefinitionString"), str):
            definition = json.loads(props["DefinitionString"])
        else:
            raise Unsupported(f"{logical_id}: a definition this test cannot read")
        assert logical_id in INPUTS, f"{logical_id}: list the fields its executions start with in INPUTS"
        yield logical_id, definition, INPUTS[logical_id]
    for path in sorted((REPO / "statemachine").glob("*.asl.json")):
        if path.resolve() not in used:
            yield path.name, json.loads(path.read_text(encoding="utf-8")), ()


def test_every_choice_rule_of_every_state_machine_reads_only_fields_that_are_there():
    machines = list(state_machines())
    assert {name for name, _, _ in machines} >= {"RoutingStateMachine", "RelearningStateMachine"}
    problems = [f"{name}: {problem}" for name, definition, inputs in machines for problem in unguarded(definition, inputs)]
    assert not problems, "Choice rules that would fail in AWS (States.Runtime) where the field is absent:\n" + \
        "\n".join(problems)


# ------------------------------------------------------------------------- the checker, on its own
def _machine(choice: dict[str, Any], *before: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A small definition: the states `before` in order, then the Choice state `Check`."""
    states = {name: {**state, "Next": (before[i + 1][0] if i + 1 < len(before) else "Check")}
              for i, (name, state) in enumerate(before)}
    states["Check"] = {"Type": "Choice", **choice}
    states["Yes"] = {"Type": "Succeed"}
    states["No"] = {"Type": "Succeed"}
    return {"StartAt": before[0][0] if before else "Check", "States": states}


FLAG = {"Variable": "$.flag", "BooleanEquals": True, "Next": "Yes"}


def test_an_absent_variable_is_reported_with_its_state_and_a_guarded_one_passes():
    assert [(u.state, u.variable) for u in unguarded(_machine({"Choices": [FLAG], "Default": "No"}), ["item"])] == \
        [("Check", "$.flag")]
    # guarded in the same rule, by an earlier rule that takes the absent case, or by the input
    guarded_and = {"And": [{"Variable": "$.flag", "IsPresent": True}, {"Variable": "$.flag", "BooleanEquals": True}],
                   "Next": "Yes"}
    absent_first = {"Not": {"Variable": "$.flag", "IsPresent": True}, "Next": "No"}
    assert unguarded(_machine({"Choices": [guarded_and], "Default": "No"}), []) == []
    assert unguarded(_machine({"Choices": [absent_first, FLAG], "Default": "No"}), []) == []
    assert unguarded(_machine({"Choices": [FLAG], "Default": "No"}), ["flag"]) == []
    # the guard after the read guards nothing; IsPresent alone reads nothing
    late = {"And": [{"Variable": "$.flag", "BooleanEquals": True}, {"Variable": "$.flag", "IsPresent": True}],
            "Next": "Yes"}
    assert [u.variable for u in unguarded(_machine({"Choices": [late], "Default": "No"}), [])] == ["$.flag"]
    assert unguarded(_machine({"Choices": [{"Variable": "$.x", "IsPresent": True, "Next": "Yes"}], "Default": "No"}), []) == []


def test_nested_rules_and_path_comparisons_are_checked():
    nested = {"Or": [{"Variable": "$.a", "StringEquals": "x"},
                     {"Not": {"Variable": "$.b", "StringEqualsPath": "$.c"}}], "Next": "Yes"}
    found = unguarded(_machine({"Choices": [nested], "Default": "No"}), ["a"])
    assert [(u.state, u.variable, u.rule) for u in found] == [("Check", "$.b", 0), ("Check", "$.c", 0)]
    # an Or whose first operand failed on "IsPresent: false" proved the field there
    either = {"Or": [{"Variable": "$.b", "IsPresent": False}, {"Variable": "$.b", "IsNull": True}], "Next": "Yes"}
    assert unguarded(_machine({"Choices": [either], "Default": "No"}), []) == []


def test_a_field_written_on_one_path_only_is_reported_and_on_every_path_passes():
    pick = {"Type": "Choice", "Choices": [{"Variable": "$.route", "StringEquals": "a", "Next": "SetA"}],
            "Default": "SetB"}
    flag = {"Type": "Pass", "Result": True, "ResultPath": "$.flag", "Next": "Check"}
    nothing = {"Type": "Pass", "Next": "Check"}
    states = {"Pick": pick, "SetA": flag, "SetB": nothing, "Check": {"Type": "Choice", "Choices": [FLAG], "Default": "No"},
              "Yes": {"Type": "Succeed"}, "No": {"Type": "Succeed"}}
    definition = {"StartAt": "Pick", "States": states}
    assert [(u.state, u.variable) for u in unguarded(definition, ["route"])] == [("Check", "$.flag")]
    states["SetB"] = flag
    assert unguarded(definition, ["route"]) == []
    # a Task's result is unknown beneath its ResultPath, unless its ResultSelector names the key;
    # its Catch edge carries the raw input and the error only
    task = {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken", "ResultPath": "$.step",
            "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Check"}]}
    on_step = {"Choices": [{"Variable": "$.step.done", "BooleanEquals": True, "Next": "Yes"}], "Default": "No"}
    assert [u.variable for u in unguarded(_machine(on_step, ("Step", task)), [])] == ["$.step.done"]
    selected = {**task, "ResultSelector": {"done.$": "$.done"}, "Catch": []}
    assert unguarded(_machine(on_step, ("Step", selected)), []) == []
    # ResultPath "$" replaces the input: what the input had is no longer known
    replaced = {"Type": "Pass", "Parameters": {"other": 1}}
    assert [u.variable for u in unguarded(_machine({"Choices": [FLAG], "Default": "No"}, ("Replace", replaced)),
                                          ["flag"])] == ["$.flag"]


def test_a_loop_must_keep_the_field_on_its_way_back():
    """The second time round, the Choice sees what the loop's last state left."""
    states = {
        "Set": {"Type": "Pass", "Result": True, "ResultPath": "$.flag", "Next": "Check"},
        "Check": {"Type": "Choice", "Choices": [FLAG], "Default": "Drop"},
        "Drop": {"Type": "Pass", "Parameters": {"n": 1}, "Next": "Check"},
        "Yes": {"Type": "Succeed"},
    }
    assert [u.variable for u in unguarded({"StartAt": "Set", "States": states}, [])] == ["$.flag"]
    states["Drop"] = {"Type": "Pass", "Parameters": {"n": 1}, "ResultPath": "$.n", "Next": "Check"}
    assert unguarded({"StartAt": "Set", "States": states}, []) == []


def test_branches_are_checked_and_jsonata_is_refused():
    branch = {"StartAt": "Check", "States": {"Check": {"Type": "Choice", "Choices": [FLAG], "Default": "No"},
                                             "Yes": {"Type": "Succeed"}, "No": {"Type": "Succeed"}}}
    parallel = {"StartAt": "Both", "States": {"Both": {"Type": "Parallel", "Branches": [branch], "End": True}}}
    assert [(u.state, u.variable) for u in unguarded(parallel, [])] == [("Both/Check", "$.flag")]
    assert unguarded(parallel, ["flag"]) == []
    with pytest.raises(Unsupported, match="JSONata"):
        unguarded({"QueryLanguage": "JSONata", **parallel}, [])


# -------------------------------------------------------------- the inputs, against their starters
def _calls(root: Path, method: str) -> Iterator[tuple[Path, ast.Call]]:
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method:
                yield path, node


def _record() -> DecisionRecord:
    return DecisionRecord.model_validate({
        "item_kind": "ticket", "item_id": "T-1", "item_key": "ticket:zendesk:T-1:abc",
        "item": {"ticket_id": "T-1", "subject": "s", "body": "b"}, "policy": {"name": "support-ticket", "version": "1"},
        "route": "review", "route_reason": "queue", "destination": None, "escalate": False, "decisions": [],
        "review": {"timeout_seconds": 60, "questions": {}, "choices": []},
        "decided_at": "2026-11-29T12:00:01+00:00"})


class _Recorder:
    """A Step Functions client that keeps what each StartExecution was given."""

    class exceptions:  # boto3's shape
        class ExecutionAlreadyExists(Exception):
            pass

    def __init__(self) -> None:
        self.inputs: list[dict[str, Any]] = []

    def start_execution(self, *, stateMachineArn: str, name: str, input: str) -> dict[str, str]:
        self.inputs.append(json.loads(input))
        return {"executionArn": f"{stateMachineArn}:{name}"}


def test_the_routing_input_is_what_the_code_starts_its_executions_with():
    """Only adapters/workflow.py starts executions (functions/, relearning/ and ops/ read by
    `ast`); whatever record it is given, its input has every field INPUTS lists, because they are
    the record's required fields."""
    starters = {path.relative_to(REPO).as_posix() for root in ("functions", "relearning", "ops")
                for path, _ in _calls(REPO / root, "start_execution")}
    assert starters == {"functions/decision_router/adapters/workflow.py"}, starters
    listed = set(INPUTS["RoutingStateMachine"])
    assert listed <= {name for name, field in DecisionRecord.model_fields.items() if field.is_required()}
    record = _record()
    answer = ReviewAnswer(execution_name="ticket-T-1-abc", reviewer="ana", choice="{}")
    corrected = CorrectedRecord.model_validate({**record.model_dump(mode="json"), "route": "correction",
                                                "correction": answer.model_dump(mode="json")})
    for days in (0, 30):
        client = _Recorder()
        starter = WorkflowStarter("arn:aws:states:us-east-1:1:stateMachine:routing", client, audit_retention_days=days)
        starter.start(record)
        starter.start_named("ticket-T-1-abc-c", corrected)
        assert len(client.inputs) == 2 and all(listed <= set(given) for given in client.inputs)


def _grantees(template: dict[str, Any], machine: str) -> set[str]:
    """The resources whose policies allow states:StartExecution on the state machine."""
    ref, name = {"Ref": machine}, {"Fn::GetAtt": [machine, "Name"]}

    def grants(value: Any) -> bool:
        if isinstance(value, dict):
            action = value.get("Action", [])
            actions = [action] if isinstance(action, str) else action
            resource = value.get("Resource")
            if "states:StartExecution" in actions and (resource == ref or (isinstance(resource, list) and ref in resource)):
                return True
            if value.get("StepFunctionsExecutionPolicy", {}).get("StateMachineName") == name:
                return True
            return any(grants(v) for v in value.values())
        return isinstance(value, list) and any(grants(v) for v in value)

    return {logical_id for logical_id, resource in template["Resources"].items() if grants(resource.get("Properties"))}


def test_who_may_start_each_state_machine_starts_it_with_the_listed_fields():
    template = load_template()
    resources = template["Resources"]
    # The routing workflow: functions whose code is functions/ (Globals' CodeUri), whose only
    # StartExecution is the adapter checked above.
    routing = _grantees(template, "RoutingStateMachine")
    assert routing and template["Globals"]["Function"]["CodeUri"] == "functions/"
    for logical_id in routing:
        resource = resources[logical_id]
        assert resource["Type"] == "AWS::Serverless::Function", logical_id
        assert resource["Properties"].get("CodeUri", "functions/") == "functions/", logical_id
        assert resource["Properties"].get("PackageType", "Zip") == "Zip", logical_id
    # The relearning workflow: the scheduler's role only, and each schedule's input has the fields.
    assert _grantees(template, "RelearningStateMachine") == {"RelearningSchedulerRole"}
    schedules = [r["Properties"]["Target"] for r in resources.values() if r["Type"] == "AWS::Scheduler::Schedule"
                 and r["Properties"]["Target"]["Arn"] == {"Ref": "RelearningStateMachine"}]
    assert schedules
    for target in schedules:
        assert target["RoleArn"] == {"Fn::GetAtt": ["RelearningSchedulerRole", "Arn"]}
        assert set(INPUTS["RelearningStateMachine"]) <= set(json.loads(target["Input"]))
    # No state machine starts another: its input would be one more list to keep.
    for name, definition, _ in state_machines():
        assert "states:startExecution" not in json.dumps(definition), name
