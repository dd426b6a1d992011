"""`make route-test`: a suite of items and what must become of each, run through the routing code.

    python -m local.route_tests TESTS.yaml [TESTS.yaml ...] [--policy candidate.json ...]

A suite file (YAML) holds `cases`, run in order, each one item and what must become of it:

    cases:
      - name: checkout-5xx-low                      # unique in the file; later cases name it
        sample: events/cloudwatch_alarm_state_change.json   # or `item: {...}` inline
        with: {detail: {alarmName: checkout-5xx}}   # merged into the sample (dicts deeply, the rest replaced)
        answers: {priority: {P3: 0.9}, team: {application: 0.95}}   # the model's probabilities
        expect: {outcome: routed, route: auto, target: app-oncall, answers: {priority: P3}}

An item is anything `make demo` takes, except webhook bodies (their function is not run here: give
the event the webhook forwards): our own tickets and incidents, EventBridge events, SNS
notifications (a ticket, or a CloudWatch alarm) and CloudWatch's Lambda alarm actions. A ticket
goes to the ticket intake as SQS delivers it, everything else to the incident intake as Lambda
gets it from its rule, its subscription or its alarm action (template.yaml's rules are not applied:
they have tests of their own). Both intakes are the functions' own code (`TicketIntake`,
`IncidentIntake`): rules, thresholds, correlation and the noise controls (grouping, flapping,
maintenance windows), over template.yaml's tables in moto's in-process mock.

No endpoint and no model: `answers` gives, per question the rules leave open, the probabilities the
endpoint would return (options not named share what is left). They are the answer, whatever
would read it in service: the policies' learned heads are left out here (they read the model's
hidden state or the item's words, not these probabilities; they have tests of their own), so the
policy's thresholds decide on the given probabilities. A question with more options than the
endpoint's letters has no answer without its head: such an item goes to review here. A question left open without answers fails the case,
naming it. The workflow is not run: what the intake would start it with (the decision record) is
what is checked; an automatic route that pages nobody, which the intake delivers itself, is
checked by the record read back from its audit row.

`expect` names only what matters to the case, from: `outcome` (routed, duplicate, updated, grouped,
flapping, suppressed, held, resolved, ignored, dead_lettered), `paged` (it was routed, to a team
or to review: by the workflow or by the intake itself), `route` (auto, review), `target` (a
destination's name; null for review), `escalate`, `answers` (question → option), `grouped_with` (the case whose incident leads
its group), `window` (the maintenance window that held or marked it), `held_under` (the case whose
incident it is held under: the policy's dependencies), `releases` (a resolution: the cases whose
held incidents it routed) and `reason_contains`. A failure prints one line per field, expected
against got, and for each question the model answered, how its probabilities became the confidence
the thresholds judged. The exit status is 1 when a case failed, 2 when a suite or policy file is
malformed (a field, an unknown question or option in `answers`, a `sample` outside the repository
and the suite's folder); the last line says which. `make route-test` turns any failing status into
make's own 2: CI that tells the two apart runs the module itself (docs/operations/route-tests.md).

A `sample` is a path relative to the repository root, or else to the suite's folder, and must stay
inside the one it is found in: an absolute path, or one that `../` or a link takes out of both, is
refused, so a suite file cannot make the runner read (and print the keys of) any file it can read.

With --policy, the intake of the policy's item kind applies that file instead of the shipped
policy of its name: the same suite shows what a changed rule, threshold or window does.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import os
import sys
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from local import settling
from local.cloudformation import REPO_ROOT, Stack
from local.cloudwatch import play_alarm_states
from local.deployment import install_policies
from local.items import classify

#: EventBridge `source` of our own incidents here, as the demo publishes them.
OWN_INCIDENT_SOURCE = "local.route-test"
#: The functions whose environment (template.yaml's) each intake gets.
FUNCTIONS = {"ticket": "TicketIntakeFunction", "incident": "IncidentIntakeFunction"}
OUTCOMES = ("routed", "duplicate", "updated", "grouped", "flapping", "suppressed", "held", "resolved", "ignored",
            "dead_lettered")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Expect(_Strict):
    """What must become of the item; a field left out is not checked."""

    outcome: Literal[OUTCOMES] | None = None  # type: ignore[valid-type]
    paged: bool | None = None
    route: Literal["auto", "review"] | None = None
    target: str | None = None
    escalate: bool | None = None
    answers: dict[str, str] | None = None
    grouped_with: str | None = None
    window: str | None = None
    held_under: str | None = None
    releases: list[str] | None = None
    reason_contains: str | None = None


class Case(_Strict):
    name: str = Field(min_length=1)
    sample: str | None = Field(None, description="a JSON file holding the item: a path from the repository root "
                               "or the suite's folder, inside it")
    item: dict[str, Any] | None = None
    patch: dict[str, Any] = Field(default_factory=dict, alias="with")
    answers: dict[str, dict[str, float]] = Field(default_factory=dict)
    expect: Expect

    @model_validator(mode="after")
    def _one_item(self) -> "Case":
        if (self.sample is None) == (self.item is None):
            raise ValueError("give exactly one of `sample` (a file) and `item` (inline)")
        for question, probabilities in self.answers.items():
            total = sum(probabilities.values())
            if any(p < 0 for p in probabilities.values()) or total > 1 + 1e-9:
                raise ValueError(f"answers.{question}: probabilities must be ≥ 0 and add up to at most 1, not {total:g}")
        return self

    def sample_path(self, root: Path, folder: Path | None = None) -> Path:
        """Where `sample` is: under the repository root `root`, else under the suite's `folder`.
        SuiteError for an absolute path, one that leaves both, or no such file."""
        assert self.sample is not None
        if Path(self.sample).is_absolute():
            raise SuiteError(f"case {self.name!r}: sample {self.sample!r}: an absolute path; give it relative to "
                             "the repository root or the suite's folder")
        bases = [root.resolve()] + ([folder.resolve()] if folder is not None else [])
        escaped = []
        for base in bases:
            path = (base / self.sample).resolve()  # `..` and links followed, then held to the base
            if not path.is_relative_to(base):
                escaped.append(str(base))
            elif path.is_file():
                return path
        if escaped:
            raise SuiteError(f"case {self.name!r}: sample {self.sample!r} leads out of {' and '.join(escaped)}: "
                             "samples are read from inside the repository root or the suite's folder only")
        raise SuiteError(f"case {self.name!r}: sample {self.sample!r}: no such file under "
                         + " or ".join(str(b) for b in bases))

    def data(self, root: Path, folder: Path | None = None) -> dict[str, Any]:
        if self.sample is not None:
            base = json.loads(self.sample_path(root, folder).read_text(encoding="utf-8"))
        else:
            base = copy.deepcopy(self.item)
        return merged(base, self.patch)


class Suite(_Strict):
    cases: list[Case] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> "Suite":
        names = [c.name for c in self.cases]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"case names must be unique: {', '.join(repeated)} repeated")
        known: set[str] = set()
        for case in self.cases:
            for field_name in ("grouped_with", "held_under", "releases"):
                value = getattr(case.expect, field_name)
                for named in ([value] if isinstance(value, str) else value or []):
                    if named not in known:
                        raise ValueError(f"case {case.name!r}: expect.{field_name} names {named!r}, "
                                         "which is no earlier case")
            known.add(case.name)
        return self


def without_heads(folder: Path) -> None:
    """Each policy in `folder` with its questions' heads left out (the given answers decide),
    except where a question has more options than letters (it has no answer without one)."""
    from decision_contract.models import OPTION_LETTERS

    for path in folder.glob("*.json"):
        raw = json.loads(path.read_text(encoding="utf-8"))
        for question in raw.get("questions", []):
            if len(question.get("options", [])) <= len(OPTION_LETTERS):
                question.pop("head", None)
        path.write_text(json.dumps(raw), encoding="utf-8")


def merged(base: Any, patch: Any) -> Any:
    """`patch` over `base`: dicts merged key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{k: merged(base.get(k), v) for k, v in patch.items()}}
    return copy.deepcopy(patch)


def load_suite(path: Path) -> Suite:
    """The suite in `path`; ValueError naming the file and the field when it is malformed."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"{path}: {error}") from error
    try:
        suite = Suite.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
        raise ValueError(f"{path}: {problems}") from error
    for case in suite.cases:
        if case.sample is not None:
            try:
                case.sample_path(REPO_ROOT, path.resolve().parent)
            except SuiteError as error:
                raise SuiteError(f"{path}: {error}") from None
    return suite


# ------------------------------------------------------------------------------ the stand-ins
class GivenAnswers:
    """The endpoint, answering each decision from the running case's `answers` (see the module)."""

    def __init__(self) -> None:
        self.case: Case | None = None

    def decide(self, decisions: Sequence[Any], *, deadline: float | None = None) -> dict[str, Any]:
        from decision_contract import DecisionResult, ModelInfo

        assert self.case is not None
        model = ModelInfo(file="route-test answers", bytes=0, sha256="0" * 64, context_size=0, threads=0, gpu_layers=0,
                          llama_cpp_python_version="none")
        out = {}
        for decision in decisions:
            given = self.case.answers.get(decision.id)
            if given is None:
                raise CaseError(f"question {decision.id!r} is left open by the rules: give answers.{decision.id}")
            options = [o.id for o in decision.options]
            unknown = sorted(set(given) - set(options))
            if unknown:
                raise CaseError(f"answers.{decision.id}: {', '.join(unknown)} not among its options ({', '.join(options)})")
            rest = [o for o in options if o not in given]
            share = (1 - sum(given.values())) / len(rest) if rest else 0.0
            probabilities = [given.get(o, share) for o in options]
            out[decision.id] = DecisionResult.from_signals(
                decision.id, options, [math.log(max(p, 1e-12)) for p in probabilities], model=model,
                prompt_version="route-test")
        return out


@dataclass
class RecordingWorkflow:
    """The workflow, keeping the record it would be started with (the routing workflow itself has
    tests of its own: tests/infra). An execution is named after the item as in AWS, and a name
    started already is not started again: that is how a redelivered item is told apart."""

    records: list[Any] = field(default_factory=list)
    names: set[str] = field(default_factory=set)

    def start(self, record: Any) -> tuple[str, bool]:
        from decision_router.domain.records import execution_name

        name = execution_name(record.item_kind, record.item_id, record.item_key)
        if name in self.names:
            return name, False
        self.names.add(name)
        self.records.append(record)
        return name, True

    def status(self, name: str) -> str | None:
        return "RUNNING"


class CaseError(Exception):
    """A case that cannot run as written (not a routing failure)."""


class SuiteError(ValueError):
    """A malformed suite: what no run of the routing code could make right (exit status 2)."""


# ------------------------------------------------------------------------------ running
@dataclass
class Result:
    case: Case
    got: dict[str, Any]
    diffs: list[str]
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and not self.diffs


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class RouteTests:
    """The intakes over template.yaml's resources in moto's in-process mock, ready for cases."""

    def __init__(self, policies: dict[str, str] | None = None) -> None:
        self.policies = policies or {}

    @contextmanager
    def running(self) -> Iterator["RouteTests"]:
        import boto3
        from aws_lambda_powertools import Logger, Metrics
        from moto import mock_aws

        from decision_router.config import Settings
        from decision_router.domain import policies as shipped
        from decision_router.domain.policies import load_policy
        from decision_router.intake.incidents import IncidentIntake
        from decision_router.intake.pipeline import Intake
        from decision_router.intake.tickets import TicketIntake
        from decision_router.intake.wiring import Wiring

        credentials = {"AWS_ACCESS_KEY_ID": "route-test", "AWS_SECRET_ACCESS_KEY": "route-test",
                       "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
                       "POWERTOOLS_METRICS_NAMESPACE": "DecisionRouterRouteTests", "POWERTOOLS_TRACE_DISABLED": "1",
                       # A route test prints its own lines, not the functions' metrics and logs.
                       "POWERTOOLS_DEV": "true", "POWERTOOLS_METRICS_DISABLED": "true"}
        with tempfile.TemporaryDirectory() as folder, _environ(credentials), mock_aws():
            policy_dir, names = install_policies(Path(folder), self.policies, replace=True)
            without_heads(policy_dir)
            saved_dir, shipped.POLICY_DIR = shipped.POLICY_DIR, policy_dir
            try:
                stack = Stack.load(parameters={"ExistingEndpointName": "route-test"}).create()
                self.endpoint, self.workflow = GivenAnswers(), RecordingWorkflow()
                logger, metrics = Logger(service="route-test", level="CRITICAL"), Metrics(namespace="DecisionRouterRouteTests")
                self.env = {}
                for kind, function in FUNCTIONS.items():
                    self.env[kind] = {**stack.function_environment(function),
                                      **({"POLICY_NAME": names[kind]} if kind in names else {})}
                with _environ(self.env["ticket"]):
                    settings = Settings.from_env(self.env["ticket"])
                    wiring = Wiring(settings, endpoint=self.endpoint, workflow=self.workflow)
                    intake = Intake("ticket", logger=logger, metrics=metrics, wiring=wiring)
                    self.tickets = TicketIntake(intake, logger=logger, metrics=metrics)
                with _environ(self.env["incident"]):
                    settings = Settings.from_env(self.env["incident"])
                    wiring = Wiring(settings, endpoint=self.endpoint, workflow=self.workflow)
                    intake = Intake("incident", logger=logger, metrics=metrics, wiring=wiring)
                    self.incidents = IncidentIntake(intake, logger=logger, metrics=metrics)
                self.policies_in_use = {kind: load_policy(policy_dir / f"{env['POLICY_NAME']}.json")
                                        for kind, env in self.env.items()}
                self.incident_ids: dict[str, str] = {}  # case name → the incident id its item opened
                # An automatic route that pages nobody is delivered by the intake itself: its
                # record is read back from its audit row (local.settling), not from the workflow.
                self.dynamodb, self.audit_table = boto3.client("dynamodb"), self.env["ticket"]["AUDIT_TABLE_NAME"]
                yield self
            finally:
                shipped.POLICY_DIR = saved_dir

    def check(self, suite: Suite, folder: Path | None = None, root: Path = REPO_ROOT) -> None:
        """SuiteError where a case's `answers` name a question or an option that the policy of its
        item's kind does not have: no routing could make such a case pass, so it is the suite that
        is wrong. An item that cannot be told (or read) is left to its case, which fails saying why."""
        for case in suite.cases:
            if not case.answers:
                continue
            try:
                item = classify(case.sample or case.name, json.dumps(case.data(root, folder)))
            except ValueError:
                continue
            if item.rejected or item.kind not in self.policies_in_use:
                continue
            policy = self.policies_in_use[item.kind]
            questions = {q.id: q for q in policy.questions}
            for question_id, given in case.answers.items():
                question = questions.get(question_id)
                if question is None:
                    raise SuiteError(f"case {case.name!r}: answers.{question_id}: the {item.kind} policy "
                                     f"{policy.name!r} has no question {question_id!r} (its questions: {', '.join(questions)})")
                unknown = sorted(set(given) - set(question.option_ids))
                if unknown:
                    raise SuiteError(f"case {case.name!r}: answers.{question_id}: {', '.join(unknown)} not among its "
                                     f"options in policy {policy.name!r} ({', '.join(question.option_ids)})")

    def run(self, case: Case, root: Path = REPO_ROOT, folder: Path | None = None) -> Result:
        self.endpoint.case = case
        before, delivered_before = len(self.workflow.records), set(settling.routes(self.dynamodb, self.audit_table))
        try:
            data = case.data(root, folder)
            # The functions' metrics (EMF) print to stdout, and Powertools warns that no Lambda
            # context gives it a deadline: neither is what a route test reports.
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = self._deliver(case, data)
        except (CaseError, ValueError) as error:
            return Result(case, {}, [], f"{type(error).__name__}: {error}" if not isinstance(error, CaseError) else str(error))
        opened = got.pop("incident_id", None)
        if opened:  # a held incident started nothing, and is named by the cases after it all the same
            self.incident_ids.setdefault(case.name, opened)
        started = self.workflow.records[before:] + [
            route.record for name, route in settling.routes(self.dynamodb, self.audit_table).items()
            if name not in delivered_before]
        if started:
            record = started[-1]
            got.update(paged=True, route=record.route, target=record.destination.target if record.destination else None,
                       escalate=record.escalate, answers={d.question: d.option_id for d in record.decisions},
                       confidence=[line for d in record.decisions if (line := explain_confidence(d))])
            self.incident_ids.setdefault(case.name, record.item_id)
        else:
            got.setdefault("paged", False)
        return Result(case, got, compare(case.expect, got, self.incident_ids))

    def _deliver(self, case: Case, data: dict[str, Any]) -> dict[str, Any]:
        item = classify(case.sample or case.name, json.dumps(data))
        if item.rejected:
            raise CaseError(f"the item is not one the router takes: {item.rejected}")
        if item.via.startswith("webhook:"):
            raise CaseError(f"a {item.via.removeprefix('webhook:')} webhook body: give the event its webhook forwards")
        if item.kind == "ticket":
            with _environ(self.env["ticket"]):
                return self._ticket(item.text)
        event = data
        if item.via == "own":
            event = {"version": "0", "id": f"route-test-{case.name}", "source": OWN_INCIDENT_SOURCE,
                     "detail-type": "Incident Reported", "account": "123456789012", "time": data.get("reported_at"),
                     "region": os.environ["AWS_DEFAULT_REGION"], "resources": [], "detail": data}
        elif item.via == "sns-alarm" and "Records" not in data:  # a bare notification, as a Lambda subscription gets it
            event = {"Records": [{"EventSource": "aws:sns", "EventVersion": "1.0",
                                  "EventSubscriptionArn": "arn:aws:sns:us-east-1:123456789012:alarms:route-test", "Sns": data}]}
        play_alarm_states(event)  # CloudWatch sets an alarm's state before it says so
        with _environ(self.env["incident"]):
            answer = self.incidents.handle(event)
        results = [r for a in answer.get("records", [answer]) for r in a.get("outcomes", [a])]
        if len(results) != 1:
            raise CaseError(f"the item gave {len(results)} outcomes; a case is one item with one outcome")
        result = results[0]
        got = {"outcome": result.get("outcome"), "reason": str(result.get("reason") or result.get("route_reason") or "")}
        if result.get("leader_incident_id"):
            got["grouped_with"] = result["leader_incident_id"]
        if result.get("window"):
            got["window"] = result["window"]
        if result.get("parent_incident_id"):
            got["held_under"] = result["parent_incident_id"]
        if result.get("outcome") in ("routed", "grouped", "flapping", "suppressed", "held") and result.get("incident_id"):
            got["incident_id"] = result["incident_id"]
        if "released" in result:
            got["releases"] = sorted(r["incident_id"] for r in result["released"] if r.get("outcome") == "routed")
        return got

    def _ticket(self, body: str) -> dict[str, Any]:
        from aws_lambda_powertools.utilities.parser.models import SqsRecordModel

        record = SqsRecordModel.model_validate({
            "messageId": "route-test", "receiptHandle": "route-test", "body": body, "md5OfBody": "0" * 32,
            "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tickets",
            "awsRegion": "us-east-1", "messageAttributes": {},
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "0", "SenderId": "route-test",
                           "ApproximateFirstReceiveTimestamp": "0"}})
        self.tickets.begin()  # one invocation per ticket, as the handler's: the open incidents read afresh
        summary = self.tickets.handle(record)
        if summary.get("dead_lettered"):
            return {"outcome": "dead_lettered", "reason": str(summary.get("reason"))}
        return {"outcome": "routed" if summary.get("started") else "duplicate", "reason": str(summary.get("route_reason", ""))}


def explain_confidence(entry: Any) -> str | None:
    """How a model decision's probabilities became the confidence its thresholds judged (None for a
    rule's): the given probability is not the confidence. With `normalized_peak`, the policies'
    formula, confidence = (n·p − 1)/(n − 1) over the question's n options: 0 when the top option is
    no likelier than a uniform guess, so p 0.55 over 5 options is confidence 0.44."""
    from decision_contract.confidence import FORMULA_TEXT, ConfidenceFormula

    if entry.source != "model" or not entry.probabilities or entry.option_id is None or entry.confidence is None:
        return None
    n = len(entry.probabilities)
    p = entry.probabilities[entry.option_id]
    thresholds = entry.thresholds
    calibrated = f" after the policy's temperature {entry.temperature:g}" if entry.temperature != 1 else ""
    return (f"{entry.question}: {entry.option_id} has p {p:.2f}{calibrated} over {n} options, so confidence "
            f"{entry.confidence:.2f} = {entry.confidence_formula} {FORMULA_TEXT[ConfidenceFormula(entry.confidence_formula)]}"
            f" (needs ≥ {thresholds.min_confidence:g}); margin {entry.margin:.2f} (needs ≥ {thresholds.min_margin:g})")


def compare(expect: Expect, got: dict[str, Any], incident_ids: dict[str, str]) -> list[str]:
    """One line per expected field that differs: `field: expected X, got Y`."""
    diffs = []
    for name in sorted(expect.model_fields_set):
        want = getattr(expect, name)
        if name == "reason_contains":
            if want not in got.get("reason", ""):
                diffs.append(f"reason: expected to contain {want!r}, got {got.get('reason', '')!r}")
            continue
        if name in ("grouped_with", "held_under"):
            want = incident_ids.get(want, f"(case {want!r} opened no incident)")
        if name == "releases":
            want = sorted(incident_ids.get(n, f"(case {n!r} opened no incident)") for n in want)
        have = got.get(name)
        if name == "answers" and isinstance(want, dict):
            have = {q: (have or {}).get(q) for q in want}
        if have != want:
            diffs.append(f"{name}: expected {json.dumps(want)}, got {json.dumps(have)}")
    return diffs


def run_files(paths: Sequence[Path], policies: dict[str, str] | None = None) -> list[tuple[Path, list[Result]]]:
    """Each file's results; each file runs on fresh tables (its cases in order share them)."""
    suites = [(path, load_suite(path)) for path in paths]
    out = []
    for path, suite in suites:
        folder = path.resolve().parent
        with RouteTests(policies).running() as tests:
            try:
                tests.check(suite, folder)
            except SuiteError as error:
                raise SuiteError(f"{path}: {error}") from None
            out.append((path, [tests.run(case, folder=folder) for case in suite.cases]))
    return out


def report(results: list[tuple[Path, list[Result]]], out: Any = None) -> int:
    """Print a line per case (and per differing field); the number of cases that failed."""
    out = out or sys.stdout
    failed = 0
    for path, rows in results:
        for result in rows:
            if result.passed:
                print(f"ok    {path.name}: {result.case.name}", file=out)
                continue
            failed += 1
            print(f"FAIL  {path.name}: {result.case.name}", file=out)
            for line in ([result.error] if result.error else result.diffs):
                print(f"        {line}", file=out)
            if not result.error and result.got.get("reason"):
                print(f"        (its reason: {result.got['reason']})", file=out)
            for line in result.got.get("confidence", []) if not result.error else []:
                print(f"        ({line})", file=out)
    total = sum(len(rows) for _, rows in results)
    print(f"{total - failed} of {total} route tests passed", file=out)
    if failed:
        print(f"route-test: {failed} case(s) FAILED: the routing differs from what the suite expects "
              "(exit status 1; a malformed suite would be 2)", file=out)
    return failed


def _policy_kinds(paths: Sequence[str]) -> dict[str, str]:
    from decision_router.domain.policies import load_policy

    kinds: dict[str, str] = {}
    for path in paths:
        kind = load_policy(Path(path).resolve()).item_kind
        if kind in kinds:
            raise ValueError(f"--policy: two policies for {kind}s ({kinds[kind]}, {path})")
        kinds[kind] = path
    return kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local.route_tests", description=__doc__.splitlines()[0])
    parser.add_argument("tests", nargs="+", type=Path, help="suite files (YAML)")
    parser.add_argument("--policy", action="append", default=[], help="a policy file replacing the shipped one of its name")
    args = parser.parse_args(argv)
    try:
        results = run_files(args.tests, _policy_kinds(args.policy))
    except ValueError as error:
        print(f"route-test: {error}", file=sys.stderr)
        print("route-test: MALFORMED suite or policy file: nothing was checked (exit status 2; a failed case "
              "would be 1)", file=sys.stderr)
        return 2
    return 1 if report(results) else 0


if __name__ == "__main__":
    sys.exit(main())
