"""The real routing ASL (statemachine/routing.asl.json, substitutions from template.yaml) executed
by moto's Step Functions interpreter against the template's queues, bus and tables."""

from __future__ import annotations

import json

import pytest

from review import app as review_app
from tests.functions.sts_stand_in import ALICE, StsStandIn

pytestmark = pytest.mark.stack  # the real workflow, executed by moto


def test_auto_route_reaches_the_target_queue_and_is_audited(pipeline):
    record = pipeline.record("ticket", "T-1001", route="auto", answers={"queue": "billing"})

    execution = pipeline.wait(pipeline.start(record))

    assert execution["status"] == "SUCCEEDED"
    holding = pipeline.queues_holding("T-1001")
    assert list(holding) == ["billing"]
    (message,) = holding["billing"]
    assert message["target"] == "billing" and message["item"] == record["item"]
    assert message["decisions"] == record["decisions"]
    assert pipeline.review_requests() == []

    (audit,) = pipeline.audit("T-1001")
    assert audit["outcome"] == "auto_routed"
    assert audit["execution_name"] == execution["name"]
    assert (audit["policy_name"], audit["policy_version"]) == ("support-ticket", "1")
    assert audit["route_reason"] == "all thresholds met"
    outcome = json.loads(audit["outcome_detail"])
    assert outcome == {"status": "auto_routed", "target": "billing", "escalated": False, "reviewer": None}
    (decision,) = json.loads(audit["decisions"])
    # Everything the audit promises: source, probabilities, confidence, thresholds, model metadata.
    assert decision["source"] == "model"
    assert decision["probabilities"] == record["decisions"][0]["probabilities"]
    assert decision["confidence"] == record["decisions"][0]["confidence"]
    assert decision["thresholds"] == {"min_confidence": 0.6, "min_margin": 0.15, "min_allowed_token_mass": 0.5}
    assert decision["model"]["sha256"] == "ab" * 32
    assert json.loads(audit["item"]) == record["item"]


@pytest.mark.parametrize("escalate", [True, False], ids=["P1-escalates", "P2-does-not"])
def test_incident_goes_to_the_team_queue_and_p1_escalates_on_the_bus_and_pages(pipeline, escalate):
    escalations = pipeline.observe("Item Escalated")
    record = pipeline.record("incident", "INC-7", route="auto", escalate=escalate,
                             answers={"priority": "P1" if escalate else "P2", "team": "platform"})

    assert pipeline.wait(pipeline.start(record))["status"] == "SUCCEEDED"

    assert list(pipeline.queues_holding("INC-7")) == ["platform-oncall"]
    events = pipeline.messages(escalations)
    if escalate:
        (event,) = events
        assert event["detail-type"] == "Item Escalated"
        assert event["source"] == "decision-router"
        assert event["detail"]["item_id"] == "INC-7" and event["detail"]["target"] == "platform-oncall"
        (page,) = pipeline.pages()  # the template's rule delivers it to the on-call topic
        assert page["item_id"] == "INC-7" and page["target"] == "platform-oncall"
    else:
        assert events == [] and pipeline.pages() == []
    (audit,) = pipeline.audit("INC-7")
    assert json.loads(audit["outcome_detail"])["escalated"] is escalate
    assert [d["question"] for d in json.loads(audit["decisions"])] == ["priority", "team"]


def test_review_waits_for_the_reviewer_then_routes_labels_and_audits(pipeline, monkeypatch, lambda_context):
    record = pipeline.record("ticket", "T-2002", route="review", answers={"queue": "billing"})
    execution_arn = pipeline.start(record)

    (review,) = pipeline.review_requests(wait_seconds=10)
    assert review["record"] == record and review["task_token"]
    assert pipeline.sfn.describe_execution(executionArn=execution_arn)["status"] == "RUNNING"
    assert pipeline.queues_holding("T-2002") == {}

    # The real review function, with the environment template.yaml gives it.
    for name, value in pipeline.stack.function_environment("ReviewCompletionFunction").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(review_app, "WIRING", review_app.Wiring())  # a cold start on this environment
    StsStandIn().attach(review_app.WIRING.caller_identity.client)  # STS, checking the proof's signature
    review_app.lambda_handler(ALICE.prove({"task_token": review["task_token"], "execution_name": review["execution_name"],
                                           "answers": {"queue": "technical_fault"}, "note": "export error, not billing"},
                                          lambda_context.function_name), lambda_context)

    assert pipeline.wait(execution_arn)["status"] == "SUCCEEDED"
    assert list(pipeline.queues_holding("T-2002")) == ["technical-support"]
    example = pipeline.labelled_example("support-ticket", "T-2002")
    assert example is not None
    assert json.loads(example["answers"]) == {"queue": "technical_fault"}
    assert example["reviewer"] == "alice@example.com"
    assert json.loads(example["model_decisions"])[0]["option_id"] == "billing"  # the model's suggestion
    (audit,) = pipeline.audit("T-2002")
    assert audit["outcome"] == "reviewed"
    outcome = json.loads(audit["outcome_detail"])
    assert outcome["reviewer"] == "alice@example.com" and outcome["target"] == "technical-support"
    assert outcome["review"]["note"] == "export error, not billing"


def test_a_reviewer_choosing_p1_escalates_the_incident(pipeline):
    escalations = pipeline.observe("Item Escalated")
    record = pipeline.record("incident", "INC-8", route="review", answers={"priority": "P3", "team": "data"})
    execution_arn = pipeline.start(record)
    (review,) = pipeline.review_requests(wait_seconds=10)

    output = pipeline.reviewer_output(record, {"priority": "P1", "team": "data"}, execution_name=review["execution_name"])
    pipeline.sfn.send_task_success(taskToken=review["task_token"], output=output)

    assert pipeline.wait(execution_arn)["status"] == "SUCCEEDED"
    assert list(pipeline.queues_holding("INC-8")) == ["data-oncall"]
    (event,) = pipeline.messages(escalations)
    assert event["detail"]["item_id"] == "INC-8"
    assert json.loads(pipeline.labelled_example("incident", "INC-8")["answers"])["priority"] == "P1"


def test_a_decided_escalation_does_not_wait_for_the_review_nor_repeat_after_it(pipeline):
    # sev1 → P1 by rule, but the owning team is uncertain: page now, route after the review.
    escalations = pipeline.observe("Item Escalated")
    record = pipeline.record("incident", "INC-9", route="review", escalate=True,
                             answers={"priority": "P1", "team": "data"})
    execution_arn = pipeline.start(record)
    (review,) = pipeline.review_requests(wait_seconds=10)

    (early,) = pipeline.messages(escalations, wait_seconds=10)
    assert early["detail"]["item_id"] == "INC-9" and early["detail"]["target"] is None
    assert pipeline.sfn.describe_execution(executionArn=execution_arn)["status"] == "RUNNING"

    output = pipeline.reviewer_output(record, {"priority": "P1", "team": "security"}, execution_name=review["execution_name"])
    pipeline.sfn.send_task_success(taskToken=review["task_token"], output=output)

    assert pipeline.wait(execution_arn)["status"] == "SUCCEEDED"
    assert list(pipeline.queues_holding("INC-9")) == ["security-oncall"]
    assert pipeline.messages(escalations) == []  # paged once, before the review


def test_an_overdue_review_is_escalated_and_audited(pipeline):
    overdue = pipeline.observe("Review Overdue")
    record = pipeline.record("ticket", "T-3003", route="review", answers={"queue": "sales"}, timeout_seconds=1)

    execution = pipeline.wait(pipeline.start(record), timeout=30)

    assert execution["status"] == "SUCCEEDED"
    (escalation,) = pipeline.messages(pipeline.stack.ref("EscalationQueue"))
    assert escalation["reason"] == "review_overdue" and escalation["item_id"] == "T-3003"
    assert escalation["record"]["item"] == record["item"]
    (event,) = pipeline.messages(overdue)
    assert event["detail"]["item_id"] == "T-3003" and event["detail"]["review"]["timeout_seconds"] == 1
    assert pipeline.queues_holding("T-3003") == {}
    assert pipeline.labelled_example("support-ticket", "T-3003") is None
    (audit,) = pipeline.audit("T-3003")
    assert audit["outcome"] == "review_overdue"
    assert json.loads(audit["outcome_detail"])["error"]["Error"] == "States.Timeout"


def test_a_failing_delivery_ends_in_the_workflow_dead_letter_queue(pipeline):
    record = pipeline.record("ticket", "T-4004", route="auto", answers={"queue": "billing"})
    # Injected failure: the destination queue is gone (deleted, or a wrong URL in the config).
    pipeline.sqs.delete_queue(QueueUrl=record["destination"]["queue_url"])

    execution = pipeline.wait(pipeline.start(record))

    assert execution["status"] == "FAILED"
    assert execution["error"] == "RoutingFailed"
    failed = pipeline.failed_states(execution["executionArn"])
    assert failed[0]["taskFailedEventDetails"]["resourceType"] == "sqs"
    (dead_letter,) = pipeline.messages(pipeline.stack.ref("WorkflowDeadLetterQueue"))
    assert dead_letter["record"] == record  # the original input: replayable as a new execution
    assert dead_letter["error"]["Error"] == "SQS.SdkClientException"
    assert dead_letter["execution_name"] == execution["name"]
    (audit,) = pipeline.audit("T-4004")
    assert audit["outcome"] == "failed"


def test_an_unknown_route_is_dead_lettered_not_dropped(pipeline):
    record = pipeline.record("ticket", "T-5005", route="auto", answers={"queue": "billing"})
    record["route"] = "later"

    execution = pipeline.wait(pipeline.start(record))

    assert execution["status"] == "FAILED"
    (dead_letter,) = pipeline.messages(pipeline.stack.ref("WorkflowDeadLetterQueue"))
    assert dead_letter["error"]["Error"] == "InvalidRoute" and dead_letter["record"]["route"] == "later"
    assert pipeline.queues_holding("T-5005") == {}


def remove_audit_table(pipeline) -> dict:
    """Delete the audit table (every write to it fails); returns what recreates it."""
    name = pipeline.env["AUDIT_TABLE_NAME"]
    table = pipeline.dynamodb.describe_table(TableName=name)["Table"]
    pipeline.dynamodb.delete_table(TableName=name)
    indexes = [{key: index[key] for key in ("IndexName", "KeySchema", "Projection")}
               for index in table.get("GlobalSecondaryIndexes", [])]
    return {"TableName": name, "KeySchema": table["KeySchema"], "AttributeDefinitions": table["AttributeDefinitions"],
            "BillingMode": "PAY_PER_REQUEST", **({"GlobalSecondaryIndexes": indexes} if indexes else {})}


def test_a_failing_audit_write_after_delivery_keeps_the_item_routed_and_dead_letters_only_the_audit(pipeline):
    """Delivered, then the audit write fails past its retries: the execution still succeeds (a
    re-sent item or a redrive must not deliver it again) and the workflow DLQ holds what the audit
    row needs, marked audit_missing."""
    remove_audit_table(pipeline)
    record = pipeline.record("ticket", "T-6006", route="auto", answers={"queue": "sales"})

    execution = pipeline.wait(pipeline.start(record))

    assert execution["status"] == "SUCCEEDED"
    assert list(pipeline.queues_holding("T-6006")) == ["sales"]  # delivered once, before the audit failed
    (dead_letter,) = pipeline.messages(pipeline.stack.ref("WorkflowDeadLetterQueue"))
    assert dead_letter["audit_missing"] is True and dead_letter["error"]["Error"].startswith("DynamoDB.")
    assert dead_letter["outcome"]["status"] == "auto_routed" and dead_letter["record"] == record


def test_a_failing_audit_write_of_a_failed_route_is_dead_lettered_once_without_looping(pipeline):
    remove_audit_table(pipeline)
    record = pipeline.record("ticket", "T-6007", route="auto", answers={"queue": "sales"})
    pipeline.sqs.delete_queue(QueueUrl=record["destination"]["queue_url"])

    execution = pipeline.wait(pipeline.start(record))

    assert execution["status"] == "FAILED"
    (dead_letter,) = pipeline.messages(pipeline.stack.ref("WorkflowDeadLetterQueue"))
    assert dead_letter["error"]["Error"] == "SQS.SdkClientException" and "audit_missing" not in dead_letter



# ------------------------------------------------------------------ answers the workflow refuses
def pending_review(pipeline, item_id: str) -> tuple[dict, str, dict]:
    """A ticket waiting for its reviewer: (record, execution arn, review message)."""
    record = pipeline.record("ticket", item_id, route="review", answers={"queue": "billing"})
    execution_arn = pipeline.start(record)
    (review,) = pipeline.review_requests(wait_seconds=10)
    return record, execution_arn, review


def assert_refused_and_dead_lettered(pipeline, record: dict, execution_arn: str, escalations: str) -> dict:
    """The answer changed nothing: no queue, no page, no labelled example; the record is in the
    workflow DLQ with the reason and the audit says failed."""
    execution = pipeline.wait(execution_arn)
    assert execution["status"] == "FAILED"
    assert pipeline.queues_holding(record["item_id"]) == {}
    assert pipeline.messages(escalations) == []
    assert pipeline.labelled_example(record["policy"]["name"], record["item_id"]) is None
    (dead_letter,) = pipeline.messages(pipeline.stack.ref("WorkflowDeadLetterQueue"))
    assert dead_letter["record"] == record and dead_letter["error"]["Error"] == "InvalidReviewAnswer"
    assert dead_letter["error"]["Cause"]
    (audit,) = pipeline.audit(record["item_id"])
    assert audit["outcome"] == "failed"
    assert json.loads(audit["outcome_detail"])["error"]["Error"] == "InvalidReviewAnswer"
    return dead_letter


def test_a_forged_answer_cannot_send_a_ticket_to_an_incident_queue_or_page(pipeline):
    """The old answer format named its own policy, destination queue and escalation: the workflow
    took them as given. A ticket's token must not route it to security-oncall with escalate."""
    escalations = pipeline.observe("Item Escalated")
    record, execution_arn, review = pending_review(pipeline, "T-7007")
    forged = {"reviewer": "mallory@example.com", "answers": {"priority": "P1", "team": "security"},
              "escalate": True, "note": "", "execution_name": review["execution_name"],
              "destination": {"target": "security-oncall", "queue_url": pipeline.destinations["security-oncall"]}}

    pipeline.sfn.send_task_success(taskToken=review["task_token"], output=json.dumps(forged))

    assert_refused_and_dead_lettered(pipeline, record, execution_arn, escalations)


def forged_choice(pipeline) -> str:
    """A choice in the offered format whose queue URL points somewhere else."""
    return json.dumps({"answers": {"queue": "billing"}, "escalate": False,
                       "destination": {"queue_url": pipeline.destinations["security-oncall"], "target": "billing"}},
                      sort_keys=True, separators=(",", ":"))


@pytest.mark.parametrize("answer", [
    "not-an-object", "empty", "reviewer-not-a-string", "empty-reviewer", "another-execution",
    "choice-not-offered", "choice-of-another-item", "choice-not-a-string"])
def test_a_malformed_or_foreign_answer_is_dead_lettered_with_an_audit_record(pipeline, answer):
    escalations = pipeline.observe("Item Escalated")
    record, execution_arn, review = pending_review(pipeline, "T-7008")
    incident = pipeline.record("incident", "INC-7008", route="review", answers={"priority": "P1", "team": "security"})
    valid = json.loads(pipeline.reviewer_output(record, {"queue": "technical_fault"},
                                                execution_name=review["execution_name"]))
    output = {
        "not-an-object": "a string is JSON too",
        "empty": {},
        "reviewer-not-a-string": dict(valid, reviewer=5),
        "empty-reviewer": dict(valid, reviewer=""),
        "another-execution": dict(valid, execution_name="ticket-T-0000-00000000"),
        "choice-not-offered": dict(valid, choice=forged_choice(pipeline)),
        "choice-of-another-item": dict(valid, choice=incident["review"]["choices"][0]),
        "choice-not-a-string": dict(valid, choice=json.loads(valid["choice"])),
    }[answer]

    pipeline.sfn.send_task_success(taskToken=review["task_token"], output=json.dumps(output))

    assert_refused_and_dead_lettered(pipeline, record, execution_arn, escalations)


# ------------------------------------------------------------------------ Item Routed
def test_every_outcome_is_announced_as_item_routed_with_the_final_answers(pipeline):
    announced = pipeline.observe("Item Routed")
    auto = pipeline.record("ticket", "T-7001", route="auto", answers={"queue": "billing"})
    reviewed = pipeline.record("incident", "INC-71", route="review", answers={"priority": "P3", "team": "data"})
    auto_arn, review_arn = pipeline.start(auto), pipeline.start(reviewed)
    (review,) = pipeline.review_requests(wait_seconds=10)
    output = pipeline.reviewer_output(reviewed, {"priority": "P2", "team": "platform"},
                                      execution_name=review["execution_name"])
    pipeline.sfn.send_task_success(taskToken=review["task_token"], output=output)
    assert pipeline.wait(auto_arn)["status"] == pipeline.wait(review_arn)["status"] == "SUCCEEDED"

    events = {e["detail"]["item_id"]: e for e in pipeline.messages(announced, wait_seconds=10)}
    assert set(events) == {"T-7001", "INC-71"}
    assert events["T-7001"]["source"] == "decision-router"
    first = events["T-7001"]["detail"]
    assert (first["outcome"], first["decided_by"], first["target"], first["answers"]) == (
        "auto_routed", "auto", "billing", {"queue": "billing"})
    assert first["item_key"] == auto["item_key"] and first["reference"] is None
    assert first["confidence"] == {"queue": 0.775} and first["readout"] == {"queue": None}
    second = events["INC-71"]["detail"]
    assert (second["outcome"], second["decided_by"], second["target"], second["reviewer"]) == (
        "reviewed", "review", "platform-oncall", "bob@example.com")
    assert second["answers"] == {"priority": "P2", "team": "platform"}  # the reviewer's, not the model's
    assert second["suggested"] == {"priority": "P3", "team": "data"}
