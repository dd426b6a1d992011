"""Every EventBridge input transformer in template.yaml delivers well-formed JSON whatever the
values of the event hold, and reads only what every event its rule can match carries.

moto is kinder than EventBridge: it leaves a missing value's placeholder in place and inserts
every value as it is, so `{"id": "<id>"}` parses there whatever the id holds. EventBridge inserts
a value *inside* a JSON string unescaped (an item id with a `"` breaks the page) and a value
placed *outside* one as JSON (a string quoted and escaped). `local.input_transformer.render` is
that documented behaviour; here every rule target with an InputTransformer is rendered against
the events its producers put (their fields read from the producers themselves: the routing
workflow's `events:putEvents` states and the review SLA sweep's `bus.put`), with hostile text in
every field, and with each field that not every producer puts removed (under each reading of a
missing value: `local.input_transformer.MISSING_READINGS`).

A template may place a value inside a JSON string only where the value cannot hold a quote, a
backslash or a control character: the rule's pattern pins it (`detail-type`, `outcome`), or its
producer restricts it (RESTRICTED, each with its reason, checked against the code below)."""

from __future__ import annotations

import ast
import copy
import itertools
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest

from local.cloudformation import Stack
from local.input_transformer import (
    MISSING,
    MISSING_READINGS,
    PREDEFINED,
    TransformerError,
    extract,
    is_json_template,
    placements,
    render,
    use_in_moto,
)
from local.template import REPO_ROOT

#: Every optional resource on: the Zendesk write-back example has a transformer too.
EVERY_OPTION = {"ExistingEndpointName": "decision-endpoint", "OnCallEmail": "oncall@example.com",
                "ZendeskSubdomain": "acme", "ZendeskApiSecretName": "decision-router/zendesk-api",
                "RelearningImageUri": "local/relearning:latest"}
HOSTILE = 'Ünïcødé "quoted" \\back\\slash\n\ttab </x> {"brace": 1} ✓ <id>'

#: A value for each detail field a producer puts from its input (the routing workflow's `key.$`
#: fields, the sweep's computed ones), hostile wherever it is text. A producer's new field needs
#: one here (the test says which).
SAMPLE: dict[str, Any] = {
    "item_kind": HOSTILE, "item_id": HOSTILE, "item_key": HOSTILE,
    "item": {"incident_id": HOSTILE, "title": HOSTILE, "description": HOSTILE},
    "target": HOSTILE, "route": HOSTILE, "route_reason": HOSTILE,
    "policy": {"name": HOSTILE, "version": HOSTILE},
    "decisions": [{"question": HOSTILE, "option_id": HOSTILE, "confidence": 0.5}],
    "review": {"queue_url": HOSTILE, "timeout_seconds": 86400},
    "execution_name": HOSTILE,
    "reference": {"system": HOSTILE, "id": HOSTILE, "url": HOSTILE},
    "outcome": HOSTILE, "escalated": True, "decided_by": HOSTILE, "reviewer": HOSTILE,
    "answers": {"team": HOSTILE}, "suggested": {"team": HOSTILE}, "confidence": {"team": 0.5},
    "readout": {"team": HOSTILE},
    "reason": HOSTILE, "sla": {"risk": HOSTILE, "priority": HOSTILE, "target_minutes": 15},
}

#: Paths a template may place inside a JSON string besides those its rule's pattern pins: their
#: producers restrict them to characters that need no escaping. path -> (regex, example, why, the
#: rules whose events the restriction holds for: "*" all).
RESTRICTED: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "$.detail.execution_name": (
        r"[A-Za-z0-9_-]{1,80}", "incident-He-said--quoted---back-slash-0123456789ab-r2",
        "the workflow's is its own execution's name ($$.Execution.Name), which every caller makes with "
        "records.execution_name (letters, digits, - and _ only; Step Functions itself refuses quotes, "
        "backslashes and control characters in a name); the sweep's is a pending review's execution", ("*",)),
    "$.detail.target": (
        r"[a-z0-9][a-z0-9-]{0,63}", "platform-oncall",
        "a routed outcome's target (ZendeskWriteBackRule's pattern pins the outcome to auto_routed and "
        "reviewed) is a policy option's target, which the policy loader checks against policies.Target (an "
        "escalation's target is null before a review)", ("ZendeskWriteBackRule",)),
    "$.detail.decided_by": (
        r"auto|review|correction", "correction",
        "the record's route: DecisionRecord's and CorrectedRecord's Literal values", ("ZendeskWriteBackRule",)),
}

#: (rule, variable) whose path some event the rule matches lacks, with why that is fine. None today:
#: every variable reads a field each producer puts (a null included). A new entry must be placed
#: where a missing value cannot break the JSON (the test renders every reading of it).
OPTIONAL: dict[tuple[str, str], str] = {}


# ------------------------------------------------------------------------------- the producers
def _envelope(source: str, detail_type: str, detail: dict[str, Any]) -> dict[str, Any]:
    """An event as EventBridge delivers it to a rule's target."""
    return {"version": "0", "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718", "detail-type": detail_type,
            "source": source, "account": "123456789012", "time": "2026-11-30T09:05:00Z", "region": "us-east-1",
            "resources": [], "detail": detail}


def _sample(field: str, producer: str) -> Any:
    if field not in SAMPLE:
        raise AssertionError(f"{producer} puts a detail field {field!r}: give it a value in SAMPLE")
    return copy.deepcopy(SAMPLE[field])


def _put_events_states(states: dict[str, Any]):
    for name, state in states.items():
        if state.get("Resource", "").startswith("arn:aws:states:::events:putEvents"):
            yield name, state
        for branch in state.get("Branches", []) + ([state["ItemProcessor"]] if "ItemProcessor" in state else []):
            yield from _put_events_states(branch["States"])


def workflow_events(stack: Stack) -> list[tuple[str, str, dict[str, Any]]]:
    """(producer, bus, event) of each events:putEvents entry of the stack's state machines: the
    fields the entry names (a `key.$` field is always there: Step Functions fails the state when
    its path is missing), with literal values as written (the workflow's `"target": null`)."""
    found = []
    for machine in stack.of_type("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine"):
        definition = json.loads(stack.state_machine_definition(machine))
        for name, state in _put_events_states(definition["States"]):
            for entry in state["Parameters"]["Entries"]:
                producer = f"{machine}.{name}"
                detail = {key.removesuffix(".$"): _sample(key.removesuffix(".$"), producer) if key.endswith(".$") else value
                          for key, value in entry["Detail"].items()}
                found.append((producer, entry["EventBusName"], _envelope(entry["Source"], entry["DetailType"], detail)))
    return found


def sweep_events(stack: Stack) -> list[tuple[str, str, dict[str, Any]]]:
    """The review SLA sweep's page (review_console/sla.py: `given.bus.put(SWEEP_SOURCE, ESCALATED,
    {...})`), its fields read from the call itself; its source is the template's mapping for it."""
    path = REPO_ROOT / "functions" / "review_console" / "sla.py"
    module = ast.parse(path.read_text(encoding="utf-8"))
    constants = {node.targets[0].id: node.value.value for node in module.body
                 if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                 and isinstance(node.targets[0], ast.Name)}
    (call,) = [node for node in ast.walk(module) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr == "put" and ast.unparse(node.func.value) == "given.bus"]
    source_arg, type_arg, detail_arg = call.args
    assert ast.unparse(source_arg) == "SWEEP_SOURCE" and isinstance(detail_arg, ast.Dict)
    detail = {}
    for key, value in zip(detail_arg.keys, detail_arg.values):
        assert isinstance(key, ast.Constant)
        detail[key.value] = value.value if isinstance(value, ast.Constant) else _sample(key.value, "the sweep")
    source = stack.template["Mappings"]["Events"]["ReviewSla"]["Source"]
    return [("ReviewConsoleFunction (review SLA sweep)", stack.ref("DecisionBus"),
             _envelope(source, constants[ast.unparse(type_arg)], detail))]


# ----------------------------------------------------------------------------------- patterns
def matches(pattern: dict[str, Any], event: dict[str, Any]) -> bool:
    """EventBridge's matching, for the patterns these rules use (lists of exact values)."""
    for key, expected in pattern.items():
        if isinstance(expected, dict):
            if not isinstance(event.get(key), dict) or not matches(expected, event[key]):
                return False
        elif all(isinstance(v, (str, int, float, bool)) or v is None for v in expected):
            values = event.get(key, MISSING)
            if values is MISSING or not set(values if isinstance(values, list) else [values]) & set(expected):
                return False
        else:
            raise AssertionError(f"a pattern operator this test does not read: {key}: {expected}")
    return True


def pinned(pattern: dict[str, Any], prefix: str = "$") -> dict[str, list[Any]]:
    """JSON path -> the values the pattern allows there."""
    found = {}
    for key, expected in pattern.items():
        path = f"{prefix}.{key}"
        found.update(pinned(expected, path) if isinstance(expected, dict) else {path: list(expected)})
    return found


def _set(event: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path[2:].split(".")
    for key in parents:
        event = event.setdefault(key, {})
    event[last] = value


def _remove(event: dict[str, Any], path: str) -> dict[str, Any]:
    event = copy.deepcopy(event)
    *parents, last = path[2:].split(".")
    node = event
    for key in parents:
        node = node[key]
    del node[last]
    return event


def _leaves(value: Any, prefix: str) -> list[str]:
    """The JSON paths of every field under `value` (objects only; lists are one value)."""
    if not isinstance(value, dict):
        return [prefix]
    return [prefix] + [p for key, item in value.items() for p in _leaves(item, f"{prefix}.{key}")]


# -------------------------------------------------------------------------------------- checks
def transformers(stack: Stack) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(rule, rule properties, target) of every rule target (a plain rule's, or a SAM function
    event's) with an InputTransformer."""
    found = []
    for rule in stack.of_type("AWS::Events::Rule"):
        props = stack.resolve(stack.properties(rule))
        found += [(rule, props, t) for t in props.get("Targets", []) if "InputTransformer" in t]
    for function in stack.of_type("AWS::Serverless::Function"):
        for name, event in stack.properties(function).get("Events", {}).items():
            props = stack.resolve(event.get("Properties", {}))
            if "InputTransformer" in props:
                found.append((f"{function}.{name}", {"EventPattern": props["Pattern"], **props},
                              {"Id": function, "Arn": stack.get_att(function, "Arn"),
                               "InputTransformer": props["InputTransformer"]}))
    return found


def producers_of(stack: Stack, props: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(producer, event) of every known event the rule's pattern can match on its bus: a field the
    pattern pins that the producer puts from its input is given a value the pattern allows."""
    bus, pattern = props.get("EventBusName", "default"), props["EventPattern"]
    found = []
    for name, on, event in workflow_events(stack) + sweep_events(stack):
        for path, values in pinned(pattern).items():
            if path.startswith("$.detail.") and extract(event, path) is not MISSING:
                _set(event, path, values[0])
        if on == bus and matches(pattern, event):
            found.append((name, event))
    return found


def text_is_enough(stack: Stack, target: dict[str, Any]) -> bool:
    """A target that takes any text (an SNS topic: its subscribers get the message as it is)."""
    return target["Arn"] in {stack.ref(t) for t in stack.of_type("AWS::SNS::Topic")}


def problems(rule: str, pattern: dict[str, Any], transformer: dict[str, Any],
             produced: list[tuple[str, dict[str, Any]]], *, json_required: bool = True) -> list[str]:
    """What would go wrong in AWS with this transformer on these events: every problem, worded."""
    template, paths = transformer["InputTemplate"], transformer.get("InputPathsMap", {})
    found: list[str] = []
    known = set(paths) | set(PREDEFINED)
    written = {m for m in re.findall(r"<([A-Za-z0-9_.\-]+)>", template)}
    found += [f"{rule}: <{name}> is in the template but not in InputPathsMap" for name in sorted(written - known)]
    where = placements(template, frozenset(paths))
    pins = pinned(pattern)
    restricted = {path: spec[1] for path, spec in RESTRICTED.items() if "*" in spec[3] or rule in spec[3]}
    quoted_paths = {paths[name] for name, quoted, _, _ in where if quoted}
    # 1. every variable's path is in every event the rule matches (or is a documented optional one)
    for name in sorted({name for name, *_ in where}):
        lacking = [producer for producer, event in produced if extract(event, paths[name]) is MISSING]
        if lacking and (rule, name) not in OPTIONAL:
            found.append(f"{rule}: <{name}> reads {paths[name]}, which {', '.join(lacking)} does not put "
                         "(list it in OPTIONAL with the reason, and place it where a missing value is harmless)")
    # 2. inside a JSON string only what cannot need escaping
    if is_json_template(template):
        for name, quoted, _, _ in where:
            path = paths[name]
            if not quoted:
                continue
            if path in pins:
                unsafe = [v for v in pins[path] if not isinstance(v, str) or json.dumps(v)[1:-1] != v]
                if unsafe:
                    found.append(f"{rule}: <{name}> ({path}) is placed inside a JSON string and the pattern allows {unsafe}")
            elif path not in restricted:
                found.append(f"{rule}: <{name}> ({path}) is placed inside a JSON string, where EventBridge inserts it "
                             "unescaped: a quote or backslash in it breaks the JSON (place it unquoted: <name>, "
                             "or pin or restrict it)")
    # 3. rendered against each producer's event (hostile text; pinned and restricted paths as allowed)
    width = max([len(v) for v in pins.values()] + [1])
    for producer, event in produced:
        for i in range(width):
            event = copy.deepcopy(event)
            for path, values in pins.items():
                _set(event, path, values[i % len(values)])
            for path in quoted_paths & set(restricted):
                _set(event, path, restricted[path])
            optional = [p for p in _leaves(event["detail"], "$.detail")
                        if p not in pins and any(extract(other, p) is MISSING for _, other in produced)]
            if not (json_required or is_json_template(template)):
                continue  # text for a target that takes text
            for what, variant in [("", event)] + [(f" without {p}", _remove(event, p)) for p in optional]:
                broken = _no_json(template, paths, variant, rule)
                if broken:
                    found.append(f"{rule}: {producer}'s event{what} {broken}")
                    if not what:
                        break  # the event itself breaks it: each variant would say the same
    return sorted(set(found))


def _no_json(template: str, paths: dict[str, str], event: dict[str, Any], rule: str) -> str | None:
    """Why the rendered event is no JSON under some reading of a missing value (None: it is)."""
    for reading in MISSING_READINGS:
        text = render(template, paths, event, missing=reading,
                      rule_name=rule, rule_arn=f"arn:aws:events:us-east-1:123456789012:rule/{rule}")
        try:
            json.loads(text)
        except json.JSONDecodeError as error:
            return f"(a missing value read as {reading!r}) renders as no JSON ({error.msg}): {text[:160]!r}"
    return None


# --------------------------------------------------------------------------------------- tests
def test_the_renderer_does_what_eventbridge_documents():
    """The documentation's own EC2 example, and its notes on quotes, objects in strings and
    missing values."""
    event = {"version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602",
             "detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2",
             "account": "123456789012", "time": "2015-11-11T21:29:54Z", "region": "us-east-1",
             "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"],
             "detail": {"instance-id": "i-0123456789", "state": "RUNNING"}}
    paths = {"instance": "$.detail.instance-id", "state": "$.detail.state", "detail": "$.detail",
             "first": "$.resources[0]", "gone": "$.detail.nothing"}
    assert json.loads(render('{"instance" : <instance>, "state": [9, <state>, true], "Transformed" : "Yes"}',
                             paths, event)) == {"instance": "i-0123456789", "state": [9, "RUNNING", True],
                                                "Transformed": "Yes"}
    assert render('"instance <instance> is in <state>"', paths, event) == '"instance i-0123456789 is in RUNNING"'
    assert render("<instance> is in state <state>", paths, event) == "i-0123456789 is in state RUNNING"
    assert render('{"d": "Detail is <detail>"}', paths, event) == '{"d": "Detail is {instance-id: i-0123456789, state: RUNNING}"}'
    assert json.loads(render('{"detail": <detail>, "r": <first>}', paths, event))["detail"] == event["detail"]
    assert render('{"g": "<gone>", "h": <gone>}', paths, event) == '{"g": "", "h": null}'
    assert render('{"h": <gone>}', paths, event, missing="") == '{"h": }'
    assert render('{"h": <gone>}', paths, event, missing="<placeholder>") == '{"h": <gone>}'
    assert json.loads(render('{"rule": <aws.events.rule-name>}', {}, event, rule_name="r")) == {"rule": "r"}
    # the hazard: a quote inside a value placed in a string, not outside one
    hostile = {**event, "detail": {"instance-id": 'i-"1"\\'}}
    with pytest.raises(json.JSONDecodeError):
        json.loads(render('{"instance": "<instance>"}', paths, hostile))
    assert json.loads(render('{"instance": <instance>}', paths, hostile)) == {"instance": 'i-"1"\\'}
    with pytest.raises(TransformerError):
        extract(event, "$.detail['state']")


def test_every_transformer_has_its_producers_here():
    stack = Stack.load(parameters=EVERY_OPTION)
    found = transformers(stack)
    assert {rule for rule, _, _ in found} == {"ItemEscalatedRule", "ReviewOverdueRule", "ZendeskWriteBackRule"}
    for rule, props, _ in found:
        assert producers_of(stack, props), f"{rule}: no producer here puts an event its pattern matches"
    produced = {rule: sorted(name for name, _ in producers_of(stack, props)) for rule, props, _ in found}
    assert produced == {
        "ItemEscalatedRule": ["ReviewConsoleFunction (review SLA sweep)", "RoutingStateMachine.PutItemEscalated",
                              "RoutingStateMachine.PutItemEscalatedBeforeReview"],
        "ReviewOverdueRule": ["RoutingStateMachine.PutReviewOverdue"],
        "ZendeskWriteBackRule": ["RoutingStateMachine.PutItemRouted"],
    }


@pytest.mark.parametrize("rule", ["ItemEscalatedRule", "ReviewOverdueRule", "ZendeskWriteBackRule"])
def test_each_transformer_renders_json_for_every_event_its_rule_matches(rule):
    stack = Stack.load(parameters=EVERY_OPTION)
    for name, props, target in transformers(stack):
        if name == rule:
            assert problems(rule, props["EventPattern"], target["InputTransformer"], producers_of(stack, props),
                            json_required=not text_is_enough(stack, target)) == []


def test_the_page_carries_the_items_own_values_whatever_they_hold():
    stack = Stack.load(parameters=EVERY_OPTION)
    ((_, props, target),) = [t for t in transformers(stack) if t[0] == "ItemEscalatedRule"]
    for producer, event in producers_of(stack, props):
        event["detail"]["execution_name"] = RESTRICTED["$.detail.execution_name"][1]
        page = json.loads(render(target["InputTransformer"]["InputTemplate"],
                                 target["InputTransformer"]["InputPathsMap"], event))
        detail = event["detail"]
        assert (page["item_id"], page["item_kind"], page["target"], page["policy"]) == (
            detail["item_id"], detail["item_kind"], detail["target"], detail["policy"]["name"]), producer
        assert page["summary"] == f"Item Escalated: {detail['execution_name']}"
        assert page["source"] == event["source"]


def test_the_checks_name_what_eventbridge_would_break():
    """The transformers as they were: quoted free text (an item id with a quote broke the page),
    and a path one producer lacks, placed unquoted."""
    stack = Stack.load(parameters=EVERY_OPTION)
    ((_, props, _),) = [t for t in transformers(stack) if t[0] == "ItemEscalatedRule"]
    produced = producers_of(stack, props)
    before = {"InputPathsMap": {"type": "$.detail-type", "id": "$.detail.item_id", "target": "$.detail.target"},
              "InputTemplate": '{"summary": "<type>: <id> -> <target>", "item_id": "<id>", "target": "<target>"}'}
    found = problems("ItemEscalatedRule", props["EventPattern"], before, produced)
    assert any("<id> ($.detail.item_id) is placed inside a JSON string" in p for p in found)
    assert any("<target> ($.detail.target) is placed inside a JSON string" in p for p in found)
    assert any("RoutingStateMachine.PutItemEscalated's event (a missing value read as 'null') renders as no JSON"
               in p for p in found)
    assert problems("ItemEscalatedRule", props["EventPattern"], {**before, "InputTemplate": '{"item_id": <id>}'},
                    produced) == []
    # a field the workflow's pages lack, placed unquoted: no JSON where EventBridge writes nothing for it
    sweeps = {"InputPathsMap": {"reason": "$.detail.reason"}, "InputTemplate": '{"why": <reason>}'}
    found = problems("ItemEscalatedRule", props["EventPattern"], sweeps, produced)
    assert any("<reason> reads $.detail.reason, which RoutingStateMachine.PutItemEscalatedBeforeReview, "
               "RoutingStateMachine.PutItemEscalated does not put" in p for p in found)
    assert any("RoutingStateMachine.PutItemEscalated's event (a missing value read as '')" in p for p in found)
    assert any("(review SLA sweep)'s event without $.detail.reason (a missing value read as '')" in p for p in found)


def test_the_restricted_values_are_restricted_where_they_are_made():
    from decision_router.domain import policies, records

    for pattern, example, _, _ in RESTRICTED.values():
        assert re.fullmatch(pattern, example)
        for bad in ('"', "\\", "\n", "\t", "\x00"):
            assert not re.fullmatch(pattern, example[:-1] + bad), (pattern, bad)
    names = [records.execution_name(kind, HOSTILE, HOSTILE, attempt) for kind, attempt in
             itertools.product(("ticket", "incident"), (1, 2, 99))]
    assert all(re.fullmatch(RESTRICTED["$.detail.execution_name"][0], n) for n in names), names
    (target_pattern,) = [m.pattern for m in typing.get_args(policies.Target)[1:] if hasattr(m, "pattern")]
    assert target_pattern == f"^{RESTRICTED['$.detail.target'][0]}$"
    shipped = {t for path in policies.POLICY_DIR.glob("*.json") for t in policies.load_policy(path).targets}
    assert shipped and all(re.fullmatch(RESTRICTED["$.detail.target"][0], t) for t in shipped)
    routes = {*typing.get_args(records.DecisionRecord.model_fields["route"].annotation),
              *typing.get_args(records.CorrectedRecord.model_fields["route"].annotation)}
    assert routes == set(RESTRICTED["$.detail.decided_by"][0].split("|"))


def test_moto_renders_the_rules_transformers_as_eventbridge_does():
    from moto.events.utils import EventTemplateParser

    use_in_moto()
    use_in_moto()  # once is enough; twice changes nothing
    event = {"detail-type": "Item Escalated", "source": "decision-router", "time": 1.0, "ingestion-time": 1.0,
             "detail": {"item_id": 'T-"1"\\', "target": None}}
    delivered = EventTemplateParser.parse(input_template='{"id": <id>, "to": <to>, "s": "<t>"}',
                                          input_paths_map={"id": "$.detail.item_id", "to": "$.detail.target",
                                                           "t": "$.detail-type"}, event=event)
    assert delivered == {"id": 'T-"1"\\', "to": None, "s": "Item Escalated"}
    whole = EventTemplateParser.parse(input_template=None, input_paths_map={}, event={**event, "id": "1", "region": "r",
                                                                                      "resources": []})
    assert whole["detail"] == event["detail"]


def test_the_template_text_is_what_the_docs_show():
    """docs/destinations/on-call.md shows the page; it must say what the template sends."""
    stack = Stack.load(parameters=EVERY_OPTION)
    page = Path(REPO_ROOT / "docs" / "destinations" / "on-call.md").read_text(encoding="utf-8")
    for rule in ("ItemEscalatedRule", "ReviewOverdueRule"):
        ((_, _, target),) = [t for t in transformers(stack) if t[0] == rule]
        fields = json.loads(render(target["InputTransformer"]["InputTemplate"],
                                   target["InputTransformer"]["InputPathsMap"], _envelope("s", "t", {})))
        assert all(f"`{field}`" in page for field in fields), (rule, sorted(fields))
