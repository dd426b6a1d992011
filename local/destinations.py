"""A target (the destination key a policy option routes to) gets its own queue in template.yaml:
`make queues TARGETS=map.json` (or `TARGET=a,b`) runs this module, which makes the edits itself.

The stack creates one SQS queue per team (docs/destinations/team-queues.md). A target needs its
queue in five places: the queue resource (a copy of SalesQueue), its entry in the functions'
`DESTINATION_QUEUES`, the queue policy that lets only the routing workflow send
(RoutedQueuesPolicy: its Queues and its OnlyTheRoutingWorkflow statement), the workflow's grant
to send (RoutingStateMachine's DeliverAndEscalate statement) and the queue's URL output.

    python -m local.destinations --targets out/it-desk/targets.start.json [--target a,b] [--template PATH] [--dry-run]

The template is edited as text, next to the queues it already has, so its comments, order and
layout stay as they are. Nothing is written unless every check passes: each target is a policy
target, each new queue's name is free, the edited text loads with local/template.py's reader,
differs from the old one by exactly the new queues in the five places, and leaves every function's
environment inside Lambda's 4 KB. A second run finds every target there and changes nothing.
`make demo` and `make fit-history` name this command when a policy or a targets map routes to a
target the stack has no queue for (`add_queues_advice`).
"""

from __future__ import annotations

import argparse
import copy
import difflib
import json
import os
import re
import shlex
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from decision_router.domain.policies import Target
from local.template import FUNCTION_TYPES, TEMPLATE_PATH, StackTemplate, TemplateError, load_template

#: The queue every new team queue copies (encrypted, 14 days' retention, the team dead-letter queue).
MODEL_QUEUE = "SalesQueue"
#: The function whose DESTINATION_QUEUES the deployment's destinations are read from (every SAM
#: function gets the same, from Globals).
TICKET_FUNCTION = "TicketIntakeFunction"
#: What a target may be: a policy option's `target` (decision_router.domain.policies.Target).
TARGET_RULE = "lower-case letters, digits and '-', starting with a letter or digit, 64 characters at most"
#: Lambda refuses a function whose environment, as compact JSON, is over 4 KB.
LAMBDA_ENVIRONMENT_BYTES = 4096
#: What CloudFormation adds to a generated queue name that local/template.py's placeholder lacks:
#: a dash and a random suffix of up to 13 characters.
GENERATED_NAME_SUFFIX = 14
#: CloudFormation's quotas per template.
MAX_RESOURCES, MAX_OUTPUTS = 500, 200
#: Parameters under which every function's environment resolves: an existing endpoint (no SageMaker
#: resources of the stack's own; which endpoint changes none of the queues).
READING_PARAMETERS = {"ExistingEndpointName": "decision-endpoint"}
NEXT_STEP = "sam build && sam deploy creates them in AWS"
BY_HAND = "the five edits by hand: docs/destinations/team-queues.md"

_is_target = TypeAdapter(Target)


class QueueError(ValueError):
    """Why the queues cannot be added; nothing was written."""


# ---------------------------------------------------------------------------------- names
def queue_resource(target: str, taken: Iterable[str] = ()) -> str:
    """The logical id of `target`'s queue: its words capitalised, then `Queue` ("it-hardware" →
    `ItHardwareQueue`); `TeamQueue` where that is another resource of the template already
    (a target `escalation` must not be mistaken for the `EscalationQueue`)."""
    words = "".join(word[:1].upper() + word[1:] for word in re.split(r"[^A-Za-z0-9]+", target) if word)
    words = words if words[:1].isalpha() else "Team" + words  # a logical id starts with a letter
    name = f"{words}Queue"
    return f"{words}TeamQueue" if name in set(taken) else name


def template_resources(path: Path | str = TEMPLATE_PATH) -> list[str]:
    """The logical ids of the template's resources."""
    return list(load_template(path)["Resources"])


def template_destinations(path: Path | str = TEMPLATE_PATH) -> list[str]:
    """The destination keys the template routes to: the ticket function's DESTINATION_QUEUES."""
    stack = StackTemplate.load(path, parameters=READING_PARAMETERS)
    return sorted(json.loads(stack.function_environment(TICKET_FUNCTION)["DESTINATION_QUEUES"]))


def make_queues_command(targets: Iterable[str], targets_map: str | Path | None = None) -> str:
    """The `make queues` that adds these targets' queues: from their map where there is one."""
    if targets_map is not None:
        return f"make queues TARGETS={shlex.quote(str(targets_map))}"
    return f"make queues TARGET={','.join(sorted(set(targets)))}"


def add_queues_advice(targets: Iterable[str], taken: Iterable[str] = (), *, targets_map: str | Path | None = None,
                      then: str = NEXT_STEP) -> str:
    """What to run so each of `targets` gets a queue of its own (`taken`: the template's logical
    ids, so each queue is named as `make queues` will name it)."""
    taken = set(taken)
    targets = sorted(set(targets))
    pairs = ", ".join(f"{target} → {queue_resource(target, taken)}" for target in targets)
    return (f"{make_queues_command(targets, targets_map)} adds their queues to template.yaml ({pairs}) and checks "
            f"the result; {then} ({BY_HAND})")


def nearest_destination(target: str, destinations: Sequence[str]) -> str | None:
    """The deployment's destination most like `target` (sharing most of its words, then the most
    alike by difflib's ratio, at least 0.6); None where none is: a hint, never a default."""
    if not destinations:
        return None
    best = max(sorted(destinations), key=lambda destination: _likeness(target, destination))
    shared, ratio = _likeness(target, best)
    return best if shared or ratio >= 0.6 else None


def _likeness(name: str, destination: str) -> tuple[int, float]:
    """Words two destination keys share, then how alike they are (difflib's ratio)."""
    return len(set(name.split("-")) & set(destination.split("-"))), difflib.SequenceMatcher(None, name, destination).ratio()


# ---------------------------------------------------------------------------------- reading
def map_targets(path: Path) -> list[str]:
    """The destinations of a targets map."""
    return list(read_targets_map(path).values())


def read_targets_map(path: Path) -> dict[str, str]:
    """A targets map as written (make fit-history's: a JSON object of label → destination key,
    `"*"` naming the destination of every other label); QueueError says what is wrong with it."""
    try:
        mapping = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise QueueError(f"--targets {path}: cannot read it ({error.strerror or error})") from None
    except json.JSONDecodeError as error:
        raise QueueError(f"--targets {path}: not JSON ({error})") from None
    if not isinstance(mapping, dict) or not mapping:
        raise QueueError(f"--targets {path}: must be a JSON object of label → destination key, with at least one")
    for label, target in mapping.items():
        if not isinstance(target, str) or not target:
            raise QueueError(f"--targets {path}: {label!r} → {target!r}: a destination key is non-empty text")
    return mapping


def check_targets(targets: Iterable[str]) -> list[str]:
    """The targets, each one a policy could route to; else QueueError naming each that is not."""
    targets = list(dict.fromkeys(targets))
    bad = []
    for target in targets:
        try:
            _is_target.validate_python(target)
        except ValidationError:
            bad.append(target)
    if bad:
        raise QueueError(f"no queue can be made for {', '.join(map(repr, bad))}: a target is {TARGET_RULE} "
                         "(a policy option's target), so no policy could route there")
    if not targets:
        raise QueueError("no target named: give --targets map.json or --target name,name")
    return targets


def destination_queues(template: dict[str, Any]) -> dict[str, str]:
    """Globals' DESTINATION_QUEUES: target → its queue's logical id (each value `${LogicalId}`)."""
    value = template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {}) \
        .get("DESTINATION_QUEUES")
    text = value.get("Fn::Sub") if isinstance(value, dict) else None
    try:
        entries = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError:
        entries = None
    if not isinstance(entries, dict) or not all(isinstance(v, str) and re.fullmatch(r"\$\{\w+\}", v)
                                                for v in entries.values()):
        raise QueueError("template: Globals → Function → Environment → Variables → DESTINATION_QUEUES is not the "
                         '`!Sub` of a JSON object of "target": "${QueueLogicalId}" that this tool edits')
    return {target: ref[2:-1] for target, ref in entries.items()}


# ---------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class NewQueue:
    target: str
    name: str  # the queue's logical id

    @property
    def output(self) -> str:
        return f"{self.name}Url"


def plan(targets: Sequence[str], template: dict[str, Any]) -> tuple[list[NewQueue], dict[str, str]]:
    """The queues to add (each target without one, named) and the targets that have one already
    (target → queue); QueueError where a new name is taken or two targets would share one."""
    present = destination_queues(template)
    taken = set(template.get("Resources", {})) | set(template.get("Parameters", {}))
    new = [NewQueue(t, queue_resource(t, taken)) for t in sorted(set(targets) - set(present))]
    problems = []
    for name, count in Counter(q.name for q in new).items():
        if count > 1:
            sharing = ", ".join(q.target for q in new if q.name == name)
            problems.append(f"{sharing} would share the queue name {name} (the same words): route them to one target")
    outputs = set(template.get("Outputs", {}))
    for queue in new:
        if queue.name in taken:
            problems.append(f"{queue.target}: {queue.name} and {queue.name.removesuffix('TeamQueue')}Queue are both "
                            "taken by other resources of the template")
        elif queue.output in outputs:
            problems.append(f"{queue.target}: the template has an output {queue.output} already")
    if problems:
        raise QueueError("; ".join(problems))
    if len(taken) + len(new) > MAX_RESOURCES or len(outputs) + len(new) > MAX_OUTPUTS:
        raise QueueError(f"{len(new)} more queues would pass CloudFormation's {MAX_RESOURCES} resources or "
                         f"{MAX_OUTPUTS} outputs per template")
    return new, {t: present[t] for t in targets if t in present}


# ---------------------------------------------------------------------------------- text edits
def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: list[str], start: int) -> int:
    """The end (exclusive) of the YAML block that opens at `start`: the lines indented deeper than
    it, trailing blank lines left out."""
    end = start + 1
    for i in range(start + 1, len(lines)):
        if not lines[i].strip():
            continue
        if _indent(lines[i]) <= _indent(lines[start]):
            break
        end = i + 1
    return end


def _find(lines: list[str], pattern: str, lo: int, hi: int, where: str) -> int:
    """The one line of lines[lo:hi] that `pattern` matches; QueueError naming `where` if not one."""
    found = [i for i in range(lo, hi) if re.match(pattern, lines[i])]
    if len(found) != 1:
        raise QueueError(f"template: {where}: found {len(found)} places, not one; add the queues by hand "
                         "(docs/destinations/team-queues.md)")
    return found[0]


def _insert_after_last(lines: list[str], lo: int, hi: int, item: str, present: set[str],
                       render: Callable[[str], str], where: str) -> None:
    """Insert `render(prefix)` after the last line of lines[lo:hi] that lists a present queue
    (`item`: a pattern whose group 1 is the line's indentation and group 2 the queue)."""
    last = None
    for i in range(lo, hi):
        match = re.match(item, lines[i])
        if match and match.group(2) in present:
            last, prefix = i, match.group(1)
    if last is None:
        raise QueueError(f"template: {where}: lists none of the destination queues; add the queues by hand "
                         "(docs/destinations/team-queues.md)")
    lines[last + 1:last + 1] = render(prefix).splitlines(keepends=True)


def _edit_resources(lines: list[str], new: list[NewQueue], present: set[str]) -> None:
    """(1) Each queue, a copy of MODEL_QUEUE, after the last destination queue's resource."""
    resources = _find(lines, r"Resources:\s*$", 0, len(lines), "Resources")
    end = _block_end(lines, resources)
    model = _find(lines, rf"  {MODEL_QUEUE}:\s*$", resources, end, f"the {MODEL_QUEUE} resource")
    body = "".join(lines[model + 1:_block_end(lines, model)])
    starts = [i for i in range(resources, end) if (m := re.match(r"  (\w+):\s*$", lines[i])) and m.group(1) in present]
    if not starts:
        raise QueueError("template: Resources: none of the destination queues is there; add the queues by hand "
                         "(docs/destinations/team-queues.md)")
    after = max(_block_end(lines, i) for i in starts)
    lines[after:after] = "".join(f"  {q.name}:\n{body}" for q in new).splitlines(keepends=True)


def _edit_environment(lines: list[str], new: list[NewQueue]) -> None:
    """(2) Each `"target": "${Queue}"` at the end of DESTINATION_QUEUES' folded `!Sub >-`, two a line."""
    start = _find(lines, r"\s+DESTINATION_QUEUES: !Sub >-\s*$", 0, len(lines), "DESTINATION_QUEUES: !Sub >-")
    last = _block_end(lines, start) - 1
    if last == start or not lines[last].rstrip().endswith("}"):
        raise QueueError("template: DESTINATION_QUEUES: its JSON does not end its folded block; add the queues by hand")
    prefix = " " * _indent(lines[last])
    entries = [f'"{q.target}": "${{{q.name}}}"' for q in new]
    rows = [", ".join(entries[i:i + 2]) for i in range(0, len(entries), 2)]
    lines[last] = lines[last].rstrip()[:-1] + ",\n"
    lines[last + 1:last + 1] = [f"{prefix}{row}{',' if i < len(rows) - 1 else '}'}\n" for i, row in enumerate(rows)]


def _statement(lines: list[str], resource: str, sid: str) -> tuple[int, int]:
    """The Resource list of statement `sid` of `resource`: its first and end line."""
    start = _find(lines, rf"  {resource}:\s*$", 0, len(lines), resource)
    end = _block_end(lines, start)
    statement = _find(lines, rf"\s+- Sid: {sid}\s*$", start, end, f"{resource}'s {sid} statement")
    listed = _find(lines, r"\s+Resource:\s*$", statement, _block_end(lines, statement),
                   f"{resource}'s {sid} statement's Resource list")
    return listed, _block_end(lines, listed)


def _edit_policies(lines: list[str], new: list[NewQueue], present: set[str]) -> None:
    """(3) RoutedQueuesPolicy's Queues and OnlyTheRoutingWorkflow; (4) RoutingStateMachine's DeliverAndEscalate."""
    arn = r"(\s*- )!GetAtt (\w+)\.Arn\s*$"
    for resource, sid in (("RoutingStateMachine", "DeliverAndEscalate"), ("RoutedQueuesPolicy", "OnlyTheRoutingWorkflow")):
        lo, hi = _statement(lines, resource, sid)
        _insert_after_last(lines, lo, hi, arn, present, lambda p: "".join(f"{p}!GetAtt {q.name}.Arn\n" for q in new),
                           f"{resource}'s {sid} statement's Resource list")
    start = _find(lines, r"  RoutedQueuesPolicy:\s*$", 0, len(lines), "RoutedQueuesPolicy")
    queues = _find(lines, r"\s+Queues:\s*$", start, _block_end(lines, start), "RoutedQueuesPolicy's Queues")
    _insert_after_last(lines, queues, _block_end(lines, queues), r"(\s*- )!Ref (\w+)\s*$", present,
                       lambda p: "".join(f"{p}!Ref {q.name}\n" for q in new), "RoutedQueuesPolicy's Queues")


def _edit_outputs(lines: list[str], new: list[NewQueue], present: set[str]) -> None:
    """(5) `QueueUrl: {Value: !Ref Queue}` after the last destination queue's."""
    start = _find(lines, r"Outputs:\s*$", 0, len(lines), "Outputs")
    _insert_after_last(lines, start, _block_end(lines, start), r"(\s+)\w+Url: \{Value: !Ref (\w+)\}\s*$", present,
                       lambda p: "".join(f"{p}{q.output}: {{Value: !Ref {q.name}}}\n" for q in new), "Outputs")


def edited(text: str, new: list[NewQueue], present: set[str]) -> str:
    """The template's text with the new queues in the five places, next to the present ones."""
    lines = text.splitlines(keepends=True)
    # Each edit finds its place afresh, so none depends on where another inserted lines.
    _edit_outputs(lines, new, present)
    _edit_policies(lines, new, present)
    _edit_resources(lines, new, present)
    _edit_environment(lines, new)
    return "".join(lines)


# ---------------------------------------------------------------------------------- checks
def _statements(node: Any, sid: str) -> list[dict[str, Any]]:
    """Every IAM statement under `node` whose Sid is `sid`."""
    if isinstance(node, dict):
        return ([node] if node.get("Sid") == sid else []) + [s for v in node.values() for s in _statements(v, sid)]
    if isinstance(node, list):
        return [s for v in node for s in _statements(v, sid)]
    return []


def _listed(template: dict[str, Any], resource: str, sid: str) -> list[Any]:
    """The Resource list of `resource`'s statement `sid`."""
    statements = _statements(template["Resources"][resource], sid)
    if len(statements) != 1:
        raise QueueError(f"template: {resource} has {len(statements)} {sid} statements, not one")
    listed = statements[0]["Resource"]
    return listed if isinstance(listed, list) else [listed]


def _routed_queues(template: dict[str, Any]) -> list[Any]:
    queues: list[Any] = template["Resources"]["RoutedQueuesPolicy"]["Properties"]["Queues"]
    return queues


def _variables(template: dict[str, Any]) -> dict[str, Any]:
    variables: dict[str, Any] = template["Globals"]["Function"]["Environment"]["Variables"]
    return variables


def _missing_places(template: dict[str, Any], queue: NewQueue) -> list[str]:
    """The places of the five that do not name `queue` as they should."""
    arn = {"Fn::GetAtt": [queue.name, "Arn"]}
    resources = template["Resources"]
    places = {
        f"the resource {queue.name} (a copy of {MODEL_QUEUE})": resources.get(queue.name) == resources[MODEL_QUEUE],
        "DESTINATION_QUEUES": destination_queues(template).get(queue.target) == queue.name,
        "RoutedQueuesPolicy's Queues": {"Ref": queue.name} in _routed_queues(template),
        "RoutedQueuesPolicy's OnlyTheRoutingWorkflow": arn in _listed(template, "RoutedQueuesPolicy", "OnlyTheRoutingWorkflow"),
        "RoutingStateMachine's DeliverAndEscalate": arn in _listed(template, "RoutingStateMachine", "DeliverAndEscalate"),
        f"the output {queue.output}": template.get("Outputs", {}).get(queue.output) == {"Value": {"Ref": queue.name}},
    }
    return [place for place, there in places.items() if not there]


def _without(template: dict[str, Any], new: list[NewQueue]) -> dict[str, Any]:
    """The template with `new` taken out of the five places (DESTINATION_QUEUES as its entries):
    what an edit that adds only `new` leaves as it was."""
    data = copy.deepcopy(template)
    names, targets = {q.name for q in new}, {q.target for q in new}
    for queue in new:
        data["Resources"].pop(queue.name, None)
        data.get("Outputs", {}).pop(queue.output, None)
    _variables(data)["DESTINATION_QUEUES"] = {t: q for t, q in destination_queues(data).items() if t not in targets}
    kept = [ref for ref in _routed_queues(data) if ref not in [{"Ref": name} for name in names]]
    _routed_queues(data)[:] = kept
    arns = [{"Fn::GetAtt": [name, "Arn"]} for name in names]
    for resource, sid in (("RoutedQueuesPolicy", "OnlyTheRoutingWorkflow"), ("RoutingStateMachine", "DeliverAndEscalate")):
        (statement,) = _statements(data["Resources"][resource], sid)
        statement["Resource"] = [arn for arn in _listed(data, resource, sid) if arn not in arns]
    return data


def environment_bytes(stack: StackTemplate) -> dict[str, int]:
    """Each function's environment as Lambda measures it (compact JSON), counting the suffix
    CloudFormation adds to every generated name in it (queue URLs, table names)."""
    generated = {logical_id for logical_id in stack.template["Resources"]
                 if stack.physical_name(logical_id) == f"{stack.stack_name}-{logical_id}"}
    found = {}
    for function in stack.of_type(*FUNCTION_TYPES):
        text = json.dumps(stack.function_environment(function), separators=(",", ":"), ensure_ascii=False)
        names = [m for m in re.findall(rf"{re.escape(stack.stack_name)}-(\w+)", text) if m in generated]
        found[function] = len(text.encode()) + GENERATED_NAME_SUFFIX * len(names)
    return found


def verify(candidate: Path, original: Path, new: list[NewQueue]) -> tuple[str, int]:
    """QueueError unless the edited template (`candidate`) loads, names each new queue in the five
    places, differs from the `original` by nothing else, resolves each new DESTINATION_QUEUES entry
    to its queue and keeps every function's environment inside Lambda's limit; else the largest
    environment (function, bytes)."""
    try:
        after = load_template(candidate)
        problems = [f"{q.target}: not in {', '.join(missing)}" for q in new if (missing := _missing_places(after, q))]
        if not problems and _without(after, new) != _without(load_template(original), []):
            problems.append("the edit changed more than the five places")
        stack = StackTemplate.load(candidate, parameters=READING_PARAMETERS)
        routed = json.loads(stack.function_environment(TICKET_FUNCTION)["DESTINATION_QUEUES"])
        problems += [f"{q.target}: DESTINATION_QUEUES does not resolve to its queue" for q in new
                     if routed.get(q.target) != stack.ref(q.name)]
        sizes = environment_bytes(stack)
    except (yaml.YAMLError, TemplateError, KeyError, TypeError, ValueError) as error:
        raise QueueError(f"the edited template does not load ({type(error).__name__}: {error})") from None
    if problems:
        raise QueueError("the edited template does not check: " + "; ".join(problems))
    largest = max(sizes, key=lambda function: sizes[function])
    if sizes[largest] > LAMBDA_ENVIRONMENT_BYTES:
        before = environment_bytes(StackTemplate.load(original, parameters=READING_PARAMETERS))[largest]
        each = max(1, (sizes[largest] - before) // len(new))
        raise QueueError(
            f"with {len(new)} more queues {largest}'s environment would be about {sizes[largest]} bytes, over Lambda's "
            f"{LAMBDA_ENVIRONMENT_BYTES} for all its variables (every function gets each queue's URL in DESTINATION_QUEUES, "
            f"about {each} bytes a queue): there is room for about {max(0, (LAMBDA_ENVIRONMENT_BYTES - before) // each)}; "
            "route the other groups to queues the stack has")
    return largest, sizes[largest]


# ---------------------------------------------------------------------------------- the command
@dataclass(frozen=True)
class Added:
    new: list[NewQueue]  # the queues added (or, with --dry-run, that would be)
    present: dict[str, str]  # target → the queue it has already
    largest: tuple[str, int] | None = None  # the largest function environment after the edit, in bytes


def add_queues(targets: Iterable[str], path: Path = TEMPLATE_PATH, *, write: bool = True) -> Added:
    """Give each target without a queue one in the template at `path`, edited as text, checked
    on a copy beside it and only then put in its place (`write=False`: checked, never written)."""
    targets = check_targets(targets)
    try:
        text = path.read_text(encoding="utf-8")
        template = load_template(path)
    except OSError as error:
        raise QueueError(f"--template {path}: cannot read it ({error.strerror or error})") from None
    except yaml.YAMLError as error:
        raise QueueError(f"--template {path}: not YAML ({error})") from None
    new, present = plan(targets, template)
    if not new:
        return Added(new, present)
    candidate_text = edited(text, new, set(destination_queues(template).values()))
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".yaml", dir=path.parent)
    candidate = Path(name)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(candidate_text)
        largest = verify(candidate, path, new)
        if write:
            os.chmod(candidate, path.stat().st_mode & 0o7777)
            os.replace(candidate, path)  # all at once: a reader never sees half an edit
    finally:
        candidate.unlink(missing_ok=True)
    return Added(new, present, largest)


def report(added: Added, path: Path, targets_map: Path | None, dry_run: bool) -> str:
    """What was added, what was there, what was checked, and what to run next."""
    there = "".join(f"\n  {target} → {name}" for target, name in sorted(added.present.items()))
    if not added.new:
        return f"queues: every target has its queue already, nothing to add; {path} unchanged:{there}"
    lines = [f"queues: {'would add' if dry_run else 'added'} {len(added.new)} queue(s) to {path}, each in the five places "
             f"(the resource, a copy of {MODEL_QUEUE}; DESTINATION_QUEUES; RoutedQueuesPolicy's Queues and its "
             "OnlyTheRoutingWorkflow statement; RoutingStateMachine's DeliverAndEscalate statement; Outputs):"]
    lines += [f"  {q.target} → {q.name}" for q in added.new]
    if there:
        lines.append(f"with a queue already:{there}")
    assert added.largest is not None
    function, size = added.largest
    lines.append(f"checked: the edited template loads, names each new queue in the five places and changes nothing "
                 f"else; the largest function environment ({function}) is about {size} of Lambda's {LAMBDA_ENVIRONMENT_BYTES} bytes")
    if dry_run:
        lines.append(f"--dry-run: {path} unchanged")
        return "\n".join(lines)
    fit = f"make fit-history … TARGETS={shlex.quote(str(targets_map))} now accepts the map; " if targets_map else ""
    lines.append(f"next: {fit}make demo POLICY=<policy.json> routes to them locally; sam build && sam deploy creates them in AWS")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m local.destinations",
                                description="Give each target without a queue its own queue in template.yaml (make queues).")
    p.add_argument("--targets", type=Path, help="a targets map, as make fit-history takes (label → destination key, "
                                                "\"*\": every other label): each destination without a queue gets one")
    p.add_argument("--target", help="targets, comma-separated (e.g. it-hardware,access)")
    p.add_argument("--template", type=Path, default=TEMPLATE_PATH, help="the template to edit (default: template.yaml)")
    p.add_argument("--dry-run", action="store_true", help="check and say what would be added; write nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        targets = map_targets(args.targets) if args.targets else []
        targets += [t.strip() for t in (args.target or "").split(",") if t.strip()]
        added = add_queues(targets, args.template, write=not args.dry_run)
    except QueueError as error:
        print(f"queues: {error}; {args.template} unchanged", file=sys.stderr)
        return 2
    print(report(added, args.template, args.targets, args.dry_run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
