"""EventBridge's input transformer as AWS documents it, for the tests and for moto.

A rule target's `InputTransformer` names values of the event (`InputPathsMap`: variable -> JSON
path) and writes them into `InputTemplate` as `<variable>`. What EventBridge documents
("Amazon EventBridge input transformation", its common issues, and the API reference of
`InputTransformer.InputTemplate`), and what `render` does:

- A template that is JSON (it starts with `{`, `[` or `"`) has two kinds of placement. Outside a
  JSON string (`{"id": <id>}`) a value is inserted as JSON: a string with its quotes, escaped; an
  object, array, number, boolean or null as such. Inside a JSON string (`{"s": "id <id>"}`) a
  string is inserted as it is, *unescaped* (a `"` or a `\\` in the value breaks the JSON), and an
  object or array as its JSON text with its quotes removed (`{key1: value1}`).
- Any other template is text: every value inserted as it is.
- A variable whose path is not in the event "isn't created and won't appear in the output": inside
  a string or in text, nothing is inserted. Outside a string, AWS documents no JSON for it: `render`
  writes `null` unless told otherwise (`missing=`), and the tests check the two other readings too
  (nothing at all; the placeholder left as it is), so no template relies on one.
- Paths: dot notation (`$.detail.item_id`, dashes and underscores included) and array indices
  (`$.resources[0]`). The predefined `aws.events.rule-name`, `aws.events.rule-arn`,
  `aws.events.event.ingestion-time`, `aws.events.event` (the event without its detail) and
  `aws.events.event.json` (the whole event) are known too.

moto inserts every value as it is wherever it stands and leaves a missing (or null) value's
placeholder in place, so `{"id": <id>}` is no JSON there and `{"id": "<id>"}` parses whatever the
id holds. `use_in_moto()` makes moto's rules render as above instead (`local.cloudformation.Stack.create`
calls it), so the stack's tests see what AWS would deliver.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: Variables EventBridge defines itself; an InputPathsMap cannot name them.
PREDEFINED = ("aws.events.rule-arn", "aws.events.rule-name", "aws.events.event.ingestion-time",
              "aws.events.event", "aws.events.event.json")
#: The readings of a missing value placed outside a JSON string that the tests try.
MISSING_READINGS = ("null", "", "<placeholder>")

#: What `extract` returns for a path the event does not have.
MISSING: Any = object()
_PLACEHOLDER = re.compile(r"<([A-Za-z0-9_.\-]+)>")
_STEP = re.compile(r"\.([A-Za-z0-9_\-/]+)|\[(\d+)\]")


class TransformerError(ValueError):
    """A path or template outside what EventBridge supports (and this reader knows)."""


def extract(event: Any, path: str) -> Any:
    """The value at `path` in `event`, or `MISSING` (a path through a missing key or index)."""
    if path == "$":
        return event
    if not path.startswith("$"):
        raise TransformerError(f"{path!r}: a JSON path starts with $")
    steps = _STEP.findall(path[1:])
    if "".join(f".{key}" if key else f"[{index}]" for key, index in steps) != path[1:]:
        raise TransformerError(f"{path!r}: only dot notation and array indices are supported")
    value = event
    for key, index in steps:
        if key and isinstance(value, dict) and key in value:
            value = value[key]
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return MISSING
    return value



def is_json_template(template: str) -> bool:
    """Whether EventBridge reads the template as JSON (placement matters) rather than as text."""
    return template.lstrip()[:1] in ("{", "[", '"')


def placements(template: str, names: set[str] | frozenset[str]) -> list[tuple[str, bool, int, int]]:
    """(variable, quoted, start, end) of every placeholder of these names, in order; `quoted`:
    inside a JSON string of a JSON template (always True in a text template: inserted as is)."""
    found = []
    if not is_json_template(template):
        return [(m.group(1), True, m.start(), m.end()) for m in _PLACEHOLDER.finditer(template) if m.group(1) in names]
    in_string, i = False, 0
    while i < len(template):
        char = template[i]
        if in_string and char == "\\":
            i += 2
            continue
        if char == '"':
            in_string = not in_string
        elif char == "<":
            match = _PLACEHOLDER.match(template, i)
            if match and match.group(1) in names:
                found.append((match.group(1), in_string, match.start(), match.end()))
                i = match.end()
                continue
        i += 1
    return found


def _values(paths_map: dict[str, str], event: dict[str, Any], rule_name: str | None,
            rule_arn: str | None) -> dict[str, Any]:
    values: dict[str, Any] = {name: extract(event, path) for name, path in paths_map.items()}
    values["aws.events.rule-name"] = rule_name if rule_name is not None else MISSING
    values["aws.events.rule-arn"] = rule_arn if rule_arn is not None else MISSING
    values["aws.events.event.ingestion-time"] = event.get("ingestion-time", MISSING)
    values["aws.events.event"] = {k: v for k, v in event.items() if k != "detail"}
    values["aws.events.event.json"] = event
    return values


def _quoted(value: Any) -> str:
    """A value inside a JSON string (or in a text template): as it is, unescaped."""
    if value is MISSING:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False).replace('"', "")
    return json.dumps(value)


def render(template: str, paths_map: dict[str, str], event: dict[str, Any], *, missing: str = "null",
           rule_name: str | None = None, rule_arn: str | None = None) -> str:
    """What EventBridge delivers for this event (see the module's notes). `missing`: what a
    missing value placed outside a JSON string becomes ("null", "", or "<placeholder>": left as
    written)."""
    reserved = set(paths_map) & set(PREDEFINED)
    if reserved:
        raise TransformerError(f"InputPathsMap may not name the predefined {sorted(reserved)}")
    values = _values(paths_map, event, rule_name, rule_arn)
    out, last = [], 0
    for name, quoted, start, end in placements(template, frozenset(values)):
        value = values[name]
        out.append(template[last:start])
        if quoted:
            out.append(_quoted(value))
        elif value is MISSING:
            out.append(template[start:end] if missing == "<placeholder>" else missing)
        else:
            out.append(json.dumps(value, ensure_ascii=False))
        last = end
    out.append(template[last:])
    return "".join(out)


def use_in_moto() -> None:
    """Make moto's EventBridge render input transformers as `render` does (once per process);
    a target without one still gets moto's own rendering of the whole event."""
    try:
        from moto.events import utils
    except ImportError:  # not in a test or local run
        return
    parser = utils.EventTemplateParser
    if getattr(parser.parse, "aws_semantics", False):
        return
    original: Any = parser.parse

    def parse(input_template: str | None, input_paths_map: dict[str, Any], event: dict[str, Any]) -> Any:
        if not input_template:
            return original(input_template=input_template, input_paths_map=input_paths_map, event=event)
        text = render(input_template, input_paths_map or {}, event)
        return json.loads(text) if is_json_template(input_template) else text

    parse.aws_semantics = True  # type: ignore[attr-defined]
    parser.parse = staticmethod(parse)  # type: ignore[method-assign, assignment]
