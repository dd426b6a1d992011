"""Generates the site's reference pages at build time (mkdocs-gen-files runs it), so they cannot
drift from the code:

- reference/configuration.md: template.yaml's Parameters (name, type, default, allowed values,
  description) and Outputs; the functions' and the decision container's environment variables
  from their pydantic settings models (type, default, constraints, description);
- reference/container-api.md and reference/openapi.json: the OpenAPI document the decision
  server serves, built from its FastAPI app without loading a model, rendered statically;
- reference/items.md: the item shapes (ticket, incident) from their pydantic models
  (decision_router.items): every field, its type, whether it is required, its allowed values and
  limits, and the models it holds (a ticket's customer, an incident's evidence per source);
- operations/alarms.md: template.yaml's alarms (their AlarmDescription) and dashboards.

A template parameter, a settings field or an item field (of Ticket, Incident and the models they
hold, evidence aside) without a description, or an environment variable the template sets that
nothing here describes, stops the build with a message naming it.
DOCS_TEMPLATE points the generator at another template (the tests build from a copied one).
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
import types
import typing
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for root in ("contract", "container", "functions", "."):
    if str(REPO / root) not in sys.path:
        sys.path.insert(0, str(REPO / root))

import cfnlint.decode.cfn_yaml  # noqa: E402  (the loader that reads !Ref, !Sub, !If ...)
from openapidocs.mk.v3 import OpenAPIV3DocumentationHandler  # noqa: E402

from decision_router.config import Settings as FunctionSettings  # noqa: E402
from decision_router.items import ITEM_MODELS  # noqa: E402
from decision_server.app import create_app  # noqa: E402
from decision_server.settings import Settings as ContainerSettings  # noqa: E402

#: Variables template.yaml sets that no settings model reads (Powertools' own, the relearning
#: function's): their descriptions live here.
OTHER_VARIABLES = {
    "LOG_LEVEL": ("template parameter LogLevel", "Log level of every function (Powertools' Logger)."),
    "POWERTOOLS_SERVICE_NAME": ("per function", "Powertools' service name: the logs' and metrics' `service`."),
    "POWERTOOLS_METRICS_NAMESPACE": ("`DecisionRouter`", "Powertools' CloudWatch metrics namespace."),
    "RELEARNING_MIN_NEW_LABELS": ("`200`", "Relearning function: labels that must accrue before a run goes on to fit "
                                  "(template parameter RelearningMinNewLabels)."),
    "RELEARNING_MAX_REVIEWER_SHARE": ("`0.5`", "Relearning function: the largest share of the reviews a candidate trains "
                                      "on, or is judged on, that one reviewer may have answered."),
    "RELEARNING_TOPIC_ARN": ("", "Relearning function: the topic every promotion is announced on."),
    "RELEARNING_SHIPPED_SETS": ("the shipped sets", "Relearning function: comma-separated labelled sets, relative to the "
                                "code's root; empty: none (the reviews alone). Not set by the template."),
    "RELEARNING_SHADOW_ITEMS": ("`200`", "Relearning function: live items a candidate the gate passed answers in "
                                "shadow before it is judged (template parameter RelearningShadowItems; 0: at once)."),
    "RELEARNING_SHADOW_TIMEOUT_SECONDS": ("`604800`", "Relearning function: how long a candidate may serve in shadow "
                                          "to reach its items; then it is refused (RelearningShadowTimeoutSeconds)."),
    "RELEARNING_SHADOW_CHECK_SECONDS": ("`900`", "Relearning function: how often the workflow looks at the shadow's "
                                        "counts, spread out to at most 2,000 looks a shadow period "
                                        "(RelearningShadowCheckSeconds)."),
    "RELEARNING_SHADOW_MIN_REVIEWED": ("`20`", "Relearning function: reviewed shadowed items a shadow needs before "
                                       "it is judged; fewer refuses it (RelearningShadowMinReviewed)."),
    "RELEARNING_SHADOW_MAX_DISAGREEMENT": ("`0.25`", "Relearning function: the most a shadow may answer otherwise "
                                           "than the head in service on the unreviewed shadowed items "
                                           "(RelearningShadowMaxDisagreement)."),
}


class MissingDescription(SystemExit):
    """The build stops: something the reference lists has no description."""

    def __init__(self, what: list[str]) -> None:
        super().__init__("configuration reference: no description for " + "; ".join(what)
                         + " (add one: the reference is generated from it)")


def cell(value: Any) -> str:
    text = " ".join(str(value).split())
    return text.replace("|", "\\|")


def prose(value: Any) -> str:
    """Plain text (a template's or a model's description) as a table cell: no HTML, no Markdown."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return re.sub(r"([\\`*_\[\]|])", r"\\\1", text)


def code(value: Any) -> str:
    """A value as inline code that neither the table nor Markdown reads into (HTML, entities)."""
    text = html.escape(str(value), quote=False) if str(value) != "" else '""'
    return "<code>" + "".join(f"&#{ord(c)};" if c in "|[]*_\\`" else c for c in text) + "</code>"


# --- template.yaml ------------------------------------------------------------------------------

def load_template(path: Path) -> dict[str, Any]:
    return cfnlint.decode.cfn_yaml.load(str(path))


def allowed(parameter: dict[str, Any]) -> str:
    parts = []
    if "AllowedValues" in parameter:
        parts.append(", ".join(code(v) for v in parameter["AllowedValues"]))
    if "AllowedPattern" in parameter:
        parts.append(f"pattern {code(parameter['AllowedPattern'])}")
    if "MinValue" in parameter:
        parts.append(f"≥ {parameter['MinValue']}")
    if "MaxValue" in parameter:
        parts.append(f"≤ {parameter['MaxValue']}")
    if "MinLength" in parameter:
        parts.append(f"length ≥ {parameter['MinLength']}")
    if "MaxLength" in parameter:
        parts.append(f"length ≤ {parameter['MaxLength']}")
    return "; ".join(parts)


def parameters_table(template: dict[str, Any], source: str) -> list[str]:
    parameters = template.get("Parameters") or {}
    missing = [f"{source} parameter {name!r}" for name, p in parameters.items() if not str(p.get("Description", "")).strip()]
    if missing:
        raise MissingDescription(missing)
    rows = ["| parameter | type | default | description |", "|---|---|---|---|"]
    for name, p in parameters.items():
        default = code(p["Default"]) if "Default" in p else "*required*"
        limits = f" <br>Allowed: {allowed(p)}" if allowed(p) else ""
        rows.append(f"| <a id=\"{name}\"></a>`{name}` | {p.get('Type', '')} | {default} | {prose(p['Description'])}{limits} |")
    return rows


def outputs_table(template: dict[str, Any]) -> list[str]:
    rows = ["| output | description |", "|---|---|"]
    for name, o in (template.get("Outputs") or {}).items():
        rows.append(f"| `{name}` | {cell(o.get('Description', ''))} |")
    return rows


def template_variables(template: dict[str, Any]) -> set[str]:
    """Every environment variable template.yaml sets on a function (Globals and each function)."""
    found = set((template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables") or {}))
    for resource in (template.get("Resources") or {}).values():
        environment = (resource.get("Properties") or {}).get("Environment")
        if isinstance(environment, dict) and isinstance(environment.get("Variables"), dict):
            found |= set(environment["Variables"])
    return found


# --- settings models ------------------------------------------------------------------------------

def type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    text = str(annotation).replace("typing.", "")
    return re.sub(r"\b[a-z_]+\.(?=[A-Z])", "", text)  # pathlib.Path -> Path


def constraints(field: Any) -> str:
    words = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    parts = []
    for item in field.metadata:
        for attribute, symbol in words.items():
            if getattr(item, attribute, None) is not None:
                parts.append(f"{symbol} {getattr(item, attribute)}")
        if getattr(item, "pattern", None):
            parts.append(f"pattern {code(item.pattern)}")
    return ", ".join(parts)


def default_of(field: Any) -> str:
    if field.default_factory is not None:
        doc = (field.default_factory.__doc__ or "").strip()
        if field.default_factory in (dict, list) or not doc or doc.startswith(("dict(", "list(", "Built-in")):
            return code(json.dumps(field.default_factory()))
        return doc.split("(")[0].strip().rstrip(".")
    if field.default is None:
        return "unset"
    return code(field.default)


def aliases(field: Any) -> list[str]:
    alias = field.validation_alias
    names = list(getattr(alias, "choices", [alias]))
    return [n for n in names if isinstance(n, str) and n.isupper()]


def settings_table(model: type, label: str) -> tuple[list[str], set[str]]:
    missing = [f"{label} setting {name!r}" for name, f in model.model_fields.items() if not (f.description or "").strip()]
    if missing:
        raise MissingDescription(missing)
    rows = ["| variable | type | default | description |", "|---|---|---|---|"]
    names: set[str] = set()
    for field in model.model_fields.values():
        variable, *also = aliases(field)
        names.add(variable)
        description = field.description.removeprefix(f"{variable}: ")
        if also:
            description += " Also read as " + ", ".join(also) + " (ours wins where both are set)."
        limits = f" <br>Allowed: {constraints(field)}" if constraints(field) else ""
        rows.append(f"| <a id=\"{variable}\"></a>`{variable}` | {code(type_name(field.annotation))} | {cell(default_of(field))} "
                    f"| {prose(description)}{limits} |")
    return rows, names


# --- the pages ------------------------------------------------------------------------------------

def configuration_page(template_path: Path) -> str:
    template = load_template(template_path)
    source = template_path.name
    function_rows, function_names = settings_table(FunctionSettings, "functions (decision_router.config.Settings)")
    container_rows, _ = settings_table(ContainerSettings, "container (decision_server.settings.Settings)")
    undescribed = sorted(template_variables(template) - function_names - set(OTHER_VARIABLES))
    if undescribed:
        raise MissingDescription([f"{source} sets environment variable {v!r}, which no settings model reads "
                                  "(add a settings field, or describe it in docs/gen_reference.py)" for v in undescribed])
    other = ["| variable | default | description |", "|---|---|---|"]
    other += [f"| `{name}` | {cell(default)} | {cell(text)} |" for name, (default, text) in OTHER_VARIABLES.items()]
    lines = [
        "---",
        "hide: [toc]",
        "---",
        "",
        "# Configuration reference",
        "",
        "!!! note \"Generated\"",
        f"    This page is generated when the site is built, from `{source}` and the settings models "
        "(`functions/decision_router/config.py`, `container/decision_server/settings.py`); edit those, "
        "not this page. A parameter or setting without a description fails the build.",
        "",
        "## Stack parameters",
        "",
        f"The parameters of `{source}`, in the template's order; pass them to `sam deploy` "
        "(`--parameter-overrides` or `--guided`). What they do in context: [Quickstart](../quickstart.md#in-your-account).",
        "",
        *parameters_table(template, source),
        "",
        "## Stack outputs",
        "",
        *outputs_table(template),
        "",
        "## Function environment",
        "",
        "The Lambda functions read these variables, which `template.yaml` sets (`Settings` in "
        "`functions/decision_router/config.py`; a blank value is unset). A missing or malformed one stops "
        "the function at cold start with a `ConfigError` naming the variable; each handler asks only for what it uses.",
        "",
        *function_rows,
        "",
        "Also set by the template, read by Powertools or by the relearning function:",
        "",
        *other,
        "",
        "## Container environment",
        "",
        "The decision container reads these at start-up (`Settings` in `container/decision_server/settings.py`). "
        "The `SM_LLAMA_CPP_*` names are the llama.cpp DLC's. The AWS SemIf sample's `SEMIF_*` settings that have "
        "an equivalent are read too (listed beside each; ours win where both are set). Other `SM_LLAMA_CPP_*` flags "
        "(llama-server options) and `SEMIF_*` settings without an equivalent (e.g. `SEMIF_TOKENIZER_REVISION`) are "
        "ignored, with a warning at start-up naming them. An invalid value stops start-up with a message naming the variable.",
        "",
        *container_rows,
        "",
    ]
    return "\n".join(lines)


def alarms_page(template_path: Path) -> str:
    template = load_template(template_path)
    resources = template.get("Resources") or {}
    alarms = {k: r for k, r in resources.items() if r.get("Type") in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")}
    missing = [f"{template_path.name} alarm {k!r} (AlarmDescription)" for k, r in alarms.items()
               if not str((r.get("Properties") or {}).get("AlarmDescription", "")).strip()]
    if missing:
        raise MissingDescription(missing)
    rows = ["| alarm | created | what it means |", "|---|---|---|"]
    for name, resource in alarms.items():
        condition = resource.get("Condition")
        created = f"when `{condition}`" if condition else "always"
        rows.append(f"| <a id=\"{name}\"></a>`{name}` | {created} | {prose(resource['Properties']['AlarmDescription'])} |")
    dashboards = [k for k, r in resources.items() if r.get("Type") == "AWS::CloudWatch::Dashboard"]
    return "\n".join([
        "# Alarms and dashboards",
        "",
        "!!! note \"Generated\"",
        f"    The table is generated when the site is built from the alarms of `{template_path.name}` "
        "(their `AlarmDescription`); an alarm without one fails the build.",
        "",
        "Every dead-letter queue and every waiting queue raises an alarm on the alarm topic (`OnCallEmail`, "
        "or `AlarmEmail` in its place for alarms, and `OnCallWebhookUrl`). Which failure sets off which alarm: "
        "[Failure modes](failure-modes.md). Their thresholds are stack parameters: `TicketAgeAlarmSeconds`, "
        "`ReviewAgeAlarmSeconds`, `EscalationAgeAlarmSeconds`, `ReviewShareAlarmPercent`, "
        "`EndpointLatencyAlarmMicroseconds`, `CorrectionsAlarmThreshold`, `RelearningRefusalsAlarmRuns` "
        "([Configuration reference](../reference/configuration.md#stack-parameters)).",
        "",
        *rows,
        "",
        "## Dashboards",
        "",
        *[f"- `{name}`" for name in dashboards],
        "",
        "The `<stack>-learning` dashboard (`LearningDashboard`) shows, per policy question, what relearning "
        "watches: [Watching it learn](../learning/relearning.md#watching-it-learn), and the live precision of "
        "the sampled checks beside it: [Precision tracked live](../learning/thresholds.md#precision-tracked-live).",
        "",
        "The alarms over per-question metrics (`HeadLoadFailedAlarm`, `CorrectionsAlarm`, "
        "`RelearningRefusalsAlarm`, `PrecisionBelowTargetAlarm`) name each shipped policy question in a "
        "metric math expression, since a template cannot loop over the policies: a policy question added "
        "later is added to them (a test holds them to the shipped policies). `PrecisionBelowTargetAlarm` "
        "reads `PrecisionBelowTarget`, which the review functions emit as 0 or 1 with each answered check, "
        "so one alarm covers every question and the dashboard tells which.",
        "",
    ])


# --- item shapes ----------------------------------------------------------------------------------

#: A field's Python type as JSON names it.
JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def ours(value: str) -> str:
    """Our own models' descriptions and docstrings: one line, `code` kept, no HTML, `|` escaped."""
    return html.escape(" ".join(value.split()), quote=False).replace("|", "\\|")


def _unwrap(annotation: Any) -> tuple[Any, bool, list[Any]]:
    """(the type, whether None is allowed, its Annotated metadata) of a field's annotation."""
    optional, metadata = False, []
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation, *extra = typing.get_args(annotation)
            metadata += extra
        elif origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation):
            optional = True
            rest = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
        else:
            return annotation, optional, metadata


def _models_of(annotation: Any) -> list[type]:
    members = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else [annotation]
    return [m for m in members if isinstance(m, type) and hasattr(m, "model_fields")]


def _limits(metadata: list[Any]) -> list[str]:
    parts = []
    for item in metadata:
        if getattr(item, "min_length", None) is not None:
            parts.append(f"length ≥ {item.min_length}")
        if getattr(item, "max_length", None) is not None:
            parts.append(f"length ≤ {item.max_length}")
        if getattr(item, "pattern", None):
            parts.append(f"pattern {code(item.pattern)}")
        if getattr(item, "strip_whitespace", None):
            parts.append("surrounding spaces removed first")
        for attribute, symbol in {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}.items():
            if getattr(item, attribute, None) is not None:
                parts.append(f"{symbol} {getattr(item, attribute)}")
    return parts


def item_field_row(name: str, field: Any) -> tuple[str, list[type]]:
    """A field as a table row (name, type, required, allowed values and limits, description), and
    the models it holds (their own tables follow)."""
    annotation, optional, metadata = _unwrap(field.annotation)
    metadata = list(field.metadata) + metadata
    models = _models_of(annotation)
    allowed_parts = _limits(metadata)
    if typing.get_origin(annotation) is typing.Literal:
        kind = "string"
        allowed_parts.insert(0, "one of " + ", ".join(code(v) for v in typing.get_args(annotation)))
    elif models:
        kind = " or ".join(f"[{m.__name__}](#{m.__name__.lower()})" for m in models)
        if len(models) > 1:
            kind = "one of " + kind
    elif isinstance(annotation, type) and (issubclass(annotation, datetime) or annotation.__name__ == "AwareDatetime"):
        kind = "date-time"
        allowed_parts.insert(0, "ISO 8601 with a timezone, converting to UTC")
    else:
        kind = JSON_TYPES.get(annotation, type_name(annotation))
    required = "required" if field.is_required() else ("optional" + (", may be null" if optional else ""))
    row = f"| `{name}` | {kind} | {required} | {'; '.join(allowed_parts)} | {ours(field.description or '')} |"
    return row, models


def item_model_section(model: type, level: str, strict: bool, seen: set[type]) -> list[str]:
    """A model's table, then those of the models its fields hold (each once)."""
    seen.add(model)
    if strict:
        missing = [f"{model.__name__} field {n!r}" for n, f in model.model_fields.items() if not (f.description or "").strip()]
        if missing:
            raise MissingDescription(missing)
    doc = " ".join((model.__doc__ or "").split())
    lines = [f"{level} {model.__name__}", ""]
    if doc:
        lines += [ours(doc), ""]
    extra = (getattr(model, "model_config", {}) or {}).get("extra")
    if extra == "forbid":
        lines += ["A field not listed here is refused (a misspelt field fails, naming it).", ""]
    lines += ["| field | type | required | allowed values and limits | description |", "|---|---|---|---|---|"]
    held: list[type] = []
    for name, field in model.model_fields.items():
        row, models = item_field_row(name, field)
        lines.append(row)
        held += [m for m in models if m not in seen and m not in held]
    lines.append("")
    for nested in held:
        if nested not in seen:
            # the evidence models (one per source) say what their sources send; they are not held to descriptions
            lines += item_model_section(nested, level, strict and not nested.__module__.endswith(".evidence"), seen)
    return lines


def items_page() -> str:
    seen: set[type] = set()
    sections: list[str] = []
    for model in ITEM_MODELS.values():
        sections += item_model_section(model, "##", True, seen)
    return "\n".join([
        "# Item shapes",
        "",
        "!!! note \"Generated\"",
        "    This page is generated when the site is built from the pydantic models in "
        "`functions/decision_router/items.py` (and `evidence.py`); edit those, not this page. An item field "
        "without a description fails the build.",
        "",
        "What the intakes take as **our own shape**: a ticket is the body of one SQS message "
        "([SQS tickets](../sources/sqs-tickets.md)), an incident the `detail` of an `Incident Reported` "
        "event ([Incident Reported](../sources/incident-reported.md)); the native sources (CloudWatch, "
        "GuardDuty, Zendesk, …) build the same shapes from their own events. An item that does not "
        "validate fails alone, with an error naming each bad field; it goes to its dead-letter queue with "
        "that reason and is never half-routed. Dates need a timezone (`Z` or `+01:00`). A policy rule "
        "names a field by its dotted path (`customer.tier`, `evidence.namespace`).",
        "",
        "Kinds: " + ", ".join(f"`{kind}` ([{model.__name__}](#{model.__name__.lower()}))"
                              for kind, model in ITEM_MODELS.items()) + ".",
        "",
        *sections,
    ])


def openapi_document() -> dict[str, Any]:
    """The document the server serves at /openapi.json, with the default settings; no model is loaded."""
    return create_app(settings=ContainerSettings.from_env({})).openapi()


def container_api_page(document: dict[str, Any]) -> str:
    rendered = OpenAPIV3DocumentationHandler(document, style="MKDOCS").write()
    rendered = re.sub(r"<!--.*?-->", "", rendered, count=1, flags=re.S)
    rendered = re.sub(r"^(#{1,5}) ", r"#\1 ", rendered, flags=re.M)  # under this page's own title
    return "\n".join([
        "# Container API reference",
        "",
        "!!! note \"Generated\"",
        "    Rendered when the site is built from the OpenAPI document the decision server serves at "
        "`/openapi.json` (with the default settings: the limits below move with `DECISION_MAX_OPTIONS`, "
        "`DECISION_MAX_DECISIONS`, `CHAT_MAX_TOKENS` …). The document itself: [openapi.json](openapi.json). "
        "A running server also serves it, with its Swagger page at `/docs`. Examples per route: "
        "[The decision container](../container/index.md).",
        "",
        rendered,
    ])


def main() -> None:
    import mkdocs_gen_files

    template_path = Path(os.environ.get("DOCS_TEMPLATE") or REPO / "template.yaml")
    with mkdocs_gen_files.open("reference/configuration.md", "w") as page:
        page.write(configuration_page(template_path))
    with mkdocs_gen_files.open("operations/alarms.md", "w") as page:
        page.write(alarms_page(template_path))
    with mkdocs_gen_files.open("reference/items.md", "w") as page:
        page.write(items_page())
    document = openapi_document()
    with mkdocs_gen_files.open("reference/openapi.json", "w") as out:
        json.dump(document, out, indent=2)
    with mkdocs_gen_files.open("reference/container-api.md", "w") as page:
        page.write(container_api_page(document))


if __name__ in ("__main__", "<run_path>"):  # run by mkdocs-gen-files (runpy), not on import
    main()
