"""The fake review world's routing workflow (`PlayedWorkflow`, tests/fakes/played_workflow.py)
held to the real one: the same records taken down the review path, the page paths (paged before
the review, and an automatic route that pages) and a correction, once over the fakes and once on
the template's resources in moto with statemachine/routing.asl.json executing; every message,
row and event the workflow writes must be equal field by field. What cannot be equal is checked
for its form and then set aside: the times the states were entered, the task token, a shard's
random number, the signature of the reviewer's identity (each world's own signing key)."""

from __future__ import annotations

import json
import re
from typing import Any, Callable

import pytest

from decision_router.domain.records import DecisionRecord
from decision_router.review.console import correction_name
from local.event_sources import http_event
from tests.fakes.console_worlds import console_world
from tests.fakes.world import ReviewWorld
from tests.functions.test_review_console import ALICE, INCIDENT, TICKET, UNSURE_INCIDENT, UNSURE_TICKET, decided

pytestmark = pytest.mark.stack

SURE_TICKET = {"queue": [30.0, 0.0, 0.0, 0.0, 0.0]}
#: Sure of P1 (which pages), in doubt of the team: paged as its review is requested.
SURE_P1 = {**UNSURE_INCIDENT, "priority": [30.0, 0.0, 0.0, 0.0]}
#: Sure of P1 and of the platform team: routed and paged at once.
SURE_P1_PLATFORM = {"priority": [30.0, 0.0, 0.0, 0.0], "team": [30.0, 0.0, 0.0, 0.0]}
#: `$$.State.EnteredTime`: AWS's (milliseconds, Z), or moto's (microseconds, +00:00).
ENTERED_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3}Z|\.\d{6}\+00:00)")
TEAM_QUEUES = ("TechnicalSupportQueue", "BillingQueue", "SalesQueue", "PlatformOncallQueue", "DataOncallQueue")


def answer(world: ReviewWorld, path: str, answers: dict[str, str]) -> None:
    """The console's POST of a reviewer's answers (a review's or a correction's)."""
    response = world.console_function()(http_event("POST", path, body=json.dumps({"answers": answers}), claims=ALICE))
    assert response["statusCode"] == 200, response["body"]


class Records:
    """The records the flows route, each built once (the first world's template names the queues
    both worlds have), so both worlds are given the same record, decided at the same time."""

    def __init__(self) -> None:
        self.made: dict[str, DecisionRecord] = {}

    def __call__(self, world: ReviewWorld, kind: str, data: dict, logits: dict[str, list[float]]) -> DecisionRecord:
        key = json.dumps([kind, data, logits], sort_keys=True)
        record = self.made.setdefault(key, decided(world.template, kind, data, logits))
        assert record.destination is None or record.destination.queue_url in world.environment(
            "TicketIntakeFunction")["DESTINATION_QUEUES"], "the worlds' queues differ"
        return record


Flow = Callable[[ReviewWorld, Records], list[tuple[str, str]]]


def review_path(world: ReviewWorld, records: Records) -> list[tuple[str, str]]:
    (name,) = world.pending(records(world, "ticket", TICKET, UNSURE_TICKET))
    answer(world, f"/api/reviews/{name}", {"queue": "technical_fault"})
    return [("T-77", name)]


def paged_before_review(world: ReviewWorld, records: Records) -> list[tuple[str, str]]:
    (name,) = world.pending(records(world, "incident", INCIDENT, SURE_P1))
    answer(world, f"/api/reviews/{name}", {"priority": "P1", "team": "data"})
    return [("INC-77", name)]


def paged_on_review(world: ReviewWorld, records: Records) -> list[tuple[str, str]]:
    (name,) = world.pending(records(world, "incident", INCIDENT, UNSURE_INCIDENT))
    answer(world, f"/api/reviews/{name}", {"priority": "P1", "team": "platform"})
    return [("INC-77", name)]


def routed_and_paged(world: ReviewWorld, records: Records) -> list[tuple[str, str]]:
    record = records(world, "incident", INCIDENT, SURE_P1_PLATFORM)
    assert record.route == "auto" and record.escalate
    return [("INC-77", world.start(record))]


def correction(world: ReviewWorld, records: Records) -> list[tuple[str, str]]:
    record = records(world, "ticket", TICKET, SURE_TICKET)
    name = world.start(record)
    assert world.finished(name) == "SUCCEEDED"
    answer(world, f"/api/routes/{name}/correction", {"queue": "sales"})
    return [("T-77", name), ("T-77", correction_name(record))]


def written(world: ReviewWorld, flow: Flow, records: Records) -> dict[str, Any]:
    """What the workflow wrote along `flow`: the pending-review rows it requested (read while
    they wait: `pending` waits for them), then, once every execution ended, the team queues'
    messages, each execution's audit row and expiry, the labelled examples and the bus's events."""
    requested: list[dict[str, Any]] = []
    pending = world.pending

    def pending_and_read(*records: DecisionRecord) -> list[str]:
        names = pending(*records)
        requested.extend(world.review_requests())
        return names

    world.pending = pending_and_read  # type: ignore[method-assign]
    executions = flow(world, records)
    return {
        "statuses": {name: world.finished(name) for _, name in executions},
        "review_requests": [masked_request(r) for r in requested],
        "delivered": {queue: world.delivered(queue) for queue in TEAM_QUEUES},
        "audit": {name: masked_columns(world.audit_columns(item, name)) for item, name in executions},
        "audit_expiry": {name: world.audit_expiry(item, name) for item, name in executions},
        "labelled_examples": [masked_columns(row) for row in world.labelled_examples()],
        "events": [(detail_type, masked_answer(detail)) for detail_type, detail in world.workflow_events()],
    }


def masked_request(request: dict[str, Any]) -> dict[str, Any]:
    assert request["task_token"] and ENTERED_TIME.fullmatch(request["requested_at"]), request
    return {**request, "task_token": "<token>", "requested_at": "<entered>"}


def masked_columns(columns: dict[str, str]) -> dict[str, Any]:
    """A row's columns with what differs by right set aside, each checked for its form first."""
    shown: dict[str, Any] = dict(columns)
    for column in ("audited_at", "labelled_at"):
        if column in shown:
            assert ENTERED_TIME.fullmatch(shown[column]), (column, shown[column])
            shown[column] = "<entered>"
    for column in ("outcome_shard", "label_shard"):
        if column in shown:
            kind, _, number = shown[column].rpartition("#")
            assert kind and number.isdigit(), (column, shown[column])
            shown[column] = f"{kind}#<n>"
    if "identity_signature" in shown:
        assert shown["identity_signature"], shown
        shown["identity_signature"] = "<signature>"
    if "outcome_detail" in shown:
        shown["outcome_detail"] = masked_answer(json.loads(shown["outcome_detail"]))
    return shown


def masked_answer(detail: dict[str, Any]) -> dict[str, Any]:
    """An outcome (or event) whose reviewer's answer carries a signature, set aside."""
    review = detail.get("review")
    if isinstance(review, dict) and review.get("identity_signature"):
        detail = {**detail, "review": {**review, "identity_signature": "<signature>"}}
    return detail


@pytest.mark.parametrize("flow", [review_path, paged_before_review, paged_on_review, routed_and_paged, correction])
def test_the_played_workflow_writes_what_the_real_one_writes(flow):
    records = Records()
    with console_world("fakes") as fake:
        played = written(fake, flow, records)
    with console_world("moto") as moto:
        real = written(moto, flow, records)

    assert set(played["statuses"].values()) == {"SUCCEEDED"}
    assert any(played["delivered"].values()) and played["audit"] and played["events"]  # something was written
    assert differences(played, real) == []


def differences(played: Any, real: Any, path: str = "") -> list[str]:
    """Where the two differ, field by field: each path with both values."""
    if isinstance(played, dict) and isinstance(real, dict):
        return [found for key in sorted(set(played) | set(real), key=str)
                for found in differences(played.get(key, "<missing>"), real.get(key, "<missing>"), f"{path}.{key}")]
    if isinstance(played, (list, tuple)) and isinstance(real, (list, tuple)) and len(played) == len(real):
        return [found for i, (a, b) in enumerate(zip(played, real)) for found in differences(a, b, f"{path}[{i}]")]
    return [] if played == real else [f"{path}: played {played!r}, real {real!r}"]
