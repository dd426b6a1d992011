"""`make replay`: a candidate policy replayed over a stack's audit, read only. A real incident routed
by the real intake and workflow (moto executing the routing state machine, which writes the audit
row), then replayed from the audit table with the shipped policy and with a stricter threshold.
The endpoint's answers come from a botocore Stubber, as in the pipeline tests beside this one."""

from __future__ import annotations

import io
import json

import pytest
from moto import mock_aws

from decision_router.domain.policies import POLICY_DIR
from local.cloudformation import Stack
from ops import replay
from tests.functions.test_intake_handlers import FakeLambdaContext
from tests.infra import test_incident_sources_pipeline as native
from tests.infra.conftest import ENDPOINT_NAME, Pipeline
from tests.infra.test_incident_sources_pipeline import confident, deliver, sample, settled

pytestmark = pytest.mark.stack
incidents = native.incidents


@pytest.fixture
def pipeline():
    """The stack under a name of its own: an execution another test left running in moto's
    background threads writes to its own stack's tables, never into this audit (which must hold
    exactly what this test routed)."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        stack = Stack.load(parameters={"ExistingEndpointName": ENDPOINT_NAME, "PagerDutySource": "true",
                                       "PagerDutyEventBusName": native.PAGERDUTY_BUS},
                           stack_name="decision-router-replay").create()
        yield Pipeline(stack)


def candidate(tmp_path, change=lambda raw: None) -> str:
    """The shipped incident policy as the stub's letters decide it (no heads), changed."""
    raw = json.loads((POLICY_DIR / "incident.json").read_text())
    for question in raw["questions"]:
        question.pop("head", None)
    change(raw)
    path = tmp_path / "incident.json"
    path.write_text(json.dumps(raw))
    return str(path)


def replayed(*argv: str) -> str:
    out = io.StringIO()
    assert replay.main(list(argv), out=out) == 0
    return out.getvalue()


@pytest.fixture
def audited(pipeline, incidents):
    """One CloudWatch alarm routed automatically (team application, priority P2) and audited."""
    app, stub = incidents
    confident(stub)
    app.lambda_handler(deliver(pipeline, sample("cloudwatch_alarm_state_change")), FakeLambdaContext())
    assert list(settled(pipeline).values()) == ["SUCCEEDED"]
    return pipeline.env["AUDIT_TABLE_NAME"]


def test_the_policy_that_served_changes_nothing(audited, tmp_path):
    (row,) = replay.rows_from_table(audited)
    assert row.route == "auto" and row.outcome == "auto_routed"
    out = replayed("--policy", candidate(tmp_path), "--table", audited)
    assert "over 1 audited items (1 replayed)" in out
    assert "| routed automatically | 100.0 % | 100.0 % |" in out
    assert "**team**: served (rows) against candidate (columns); 0 changed" in out
    assert "| application |  |  |  | 1 |" in out
    assert "Pages (escalations) added: 0; removed: 0." in out


def test_a_stricter_team_threshold_sends_what_served_to_review(audited, tmp_path):
    def stricter(raw):
        raw["questions"][1]["thresholds"]["min_confidence"] = 0.999

    out = replayed("--policy", candidate(tmp_path, stricter), "--table", audited)
    assert "| routed automatically | 100.0 % | 0.0 % |" in out
    # nothing is written: the audit holds the one row it held
    assert [r.route for r in replay.rows_from_table(audited)] == ["auto"]


def test_since_and_a_reviewed_answer_give_precision_with_its_interval(audited, tmp_path):
    (row,) = replay.rows_from_table(audited)
    detail = {"status": "reviewed", "answers": {"priority": "P2", "team": "application"}, "reviewer": "ana",
              "escalated": False, "target": None}
    reviewed = row.model_copy(update={"route": "review", "outcome": "reviewed", "outcome_detail": json.dumps(detail),
                                      "outcome_shard": None})  # its index key follows the new outcome when read
    rows = tmp_path / "audit.jsonl"
    rows.write_text(reviewed.model_dump_json() + "\n")
    out = replayed("--policy", candidate(tmp_path), "--rows", str(rows))
    assert "| routed automatically | 0.0 % | 100.0 % |" in out
    assert "On the 1 items a person reviewed, the candidate routes 1 automatically, 1 as the person answered " \
           "(precision 100.0 %, 95 % interval 20.7 %–100.0 %)." in out
    later = replayed("--policy", candidate(tmp_path), "--rows", str(rows), "--since", "2099-01-01")
    assert "over 0 audited items" in later


def test_a_replaced_head_is_not_replayable_and_says_why(audited, tmp_path):
    (row,) = replay.rows_from_table(audited)
    served = json.loads(row.decisions)
    for decision in served:
        decision.update(readout="head", head_version="incident.team.old")
    rows = tmp_path / "audit.jsonl"
    rows.write_text(row.model_copy(update={"decisions": json.dumps(served)}).model_dump_json() + "\n")
    out = replayed("--policy", candidate(tmp_path), "--rows", str(rows))
    assert "(0 replayed)" in out
    assert "not replayable (1): priority: the deciding head incident.team.old is replaced" in out


def test_wilson_interval():
    assert replay.wilson(0, 0) == (0.0, 1.0)
    low, high = replay.wilson(45, 50)
    assert 0.78 < low < 0.79 and 0.95 < high < 0.96


HOSTILE_ID = "T-2)\n\n## Replay verdict: SAFE TO MERGE\n\n| a | b `x` [link](http://x) <b>"


def test_markdown_text_keeps_a_crafted_value_one_line_of_plain_text():
    text = replay.markdown_text(HOSTILE_ID)
    assert "\n" not in text
    assert text == ("T-2) \\#\\# Replay verdict: SAFE TO MERGE \\| a \\| b \\`x\\` \\[link\\](http://x) "
                    "\\<b\\>")
    assert replay.markdown_text("a & b_c*d~e") == "a &amp; b\\_c\\*d\\~e"


def test_rows_that_do_not_read_are_counted_with_their_reason_and_ids_are_escaped(audited, tmp_path):
    """A crafted item id, decisions that do not validate and a row missing a column, in the table
    beside a good row: the replay goes on, counts each one that cannot be replayed with its reason,
    and prints the crafted id as text (no heading, no table row of its own)."""
    import boto3

    (row,) = replay.rows_from_table(audited)
    assert isinstance(row, replay.AuditRow)
    ddb = boto3.client("dynamodb")

    def put(columns: dict[str, str]) -> None:
        ddb.put_item(TableName=audited, Item={k: {"S": v} for k, v in columns.items()})

    put({**row.columns(), "item_id": HOSTILE_ID, "execution_name": "incident-hostile"})
    put({**row.columns(), "item_id": "T-3", "execution_name": "incident-t3", "decisions": '[{"question": "team"}]'})
    broken = {**row.columns(), "item_id": "T-4", "execution_name": "incident-t4"}
    del broken["route_reason"]
    put(broken)

    def escalate_application(raw):
        for question in raw["questions"]:
            for option in question["options"]:
                option["escalate"] = option["id"] == "application"

    out = replayed("--policy", candidate(tmp_path, escalate_application), "--table", audited)
    assert "over 4 audited items (2 replayed)" in out
    assert "- not replayable (1): the audit row does not read: " in out and "for DecisionEntry" in out
    assert "(items: T-3)" in out
    assert "- not replayable (1): the audit row does not read: route\\_reason: Field required (items: T-4)" in out
    assert not [line for line in out.splitlines() if line.startswith("## ") or "SAFE TO MERGE |" in line]
    assert "Pages (escalations) added: 2 (" in out and "\\#\\# Replay verdict: SAFE TO MERGE \\| a \\| b" in out


def test_an_export_line_that_is_no_audit_row_is_named_and_the_rest_replayed(audited, tmp_path):
    (row,) = replay.rows_from_table(audited)
    rows = tmp_path / "audit.jsonl"
    rows.write_text(row.model_dump_json() + "\n" + '{"item_id": "T-9", "colour": "blue"}\n' + "not json\n")
    out = replayed("--policy", candidate(tmp_path), "--rows", str(rows))
    assert "over 3 audited items (1 replayed)" in out
    assert "audit.jsonl:2: " in out and "(items: T-9)" in out
    assert "audit.jsonl:3: " in out and "(items: line 3)" in out
