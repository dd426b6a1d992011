"""`ops.redrive workflow` starts each redriven record with the stack's LabelRetentionDays: given,
from the environment, or read from the stack that holds the state machine (CloudFormation, over a
botocore Stubber); never a default of its own."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from ops.redrive import label_retention_days

ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:routing"


@pytest.fixture
def cloudformation():
    client = boto3.client("cloudformation", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub


def stack_says(stub: Stubber, days: str | None) -> None:
    stub.add_response("describe_stack_resources", {"StackResources": [{
        "StackName": "decision-router", "LogicalResourceId": "RoutingStateMachine", "PhysicalResourceId": ARN,
        "ResourceType": "AWS::StepFunctions::StateMachine", "Timestamp": "2026-12-01T00:00:00Z",
        "ResourceStatus": "CREATE_COMPLETE"}]}, {"PhysicalResourceId": ARN})
    parameters = [{"ParameterKey": "AuditRetentionDays", "ParameterValue": "90"}]
    if days is not None:
        parameters.append({"ParameterKey": "LabelRetentionDays", "ParameterValue": days})
    stub.add_response("describe_stacks", {"Stacks": [{
        "StackName": "decision-router", "CreationTime": "2026-12-01T00:00:00Z", "StackStatus": "UPDATE_COMPLETE",
        "Parameters": parameters}]}, {"StackName": "decision-router"})


def test_the_stacks_label_retention_is_read_from_the_stack_of_the_state_machine(cloudformation, monkeypatch):
    monkeypatch.delenv("LABEL_RETENTION_DAYS", raising=False)
    client, stub = cloudformation
    stack_says(stub, "30")
    assert label_retention_days(None, ARN, client) == 30
    stub.assert_no_pending_responses()


def test_given_days_and_then_the_environment_come_before_the_stack(cloudformation, monkeypatch):
    client, _ = cloudformation  # no response queued: a call would fail
    monkeypatch.setenv("LABEL_RETENTION_DAYS", "45")
    assert label_retention_days("7", ARN, client) == 7
    assert label_retention_days(None, ARN, client) == 45


@pytest.mark.parametrize("given, why", [("0", "1 or more"), ("a year", "a whole number of days")])
def test_days_that_are_not_a_whole_number_of_one_or_more_are_refused(given, why, cloudformation):
    with pytest.raises(LookupError, match=why):
        label_retention_days(given, ARN, cloudformation[0])


def test_a_stack_that_cannot_be_read_or_names_no_retention_says_what_to_pass(cloudformation, monkeypatch):
    monkeypatch.delenv("LABEL_RETENTION_DAYS", raising=False)
    client, stub = cloudformation
    stub.add_client_error("describe_stack_resources", "ValidationError", "Stack for arn does not exist")
    with pytest.raises(LookupError, match="pass --label-retention-days or set LABEL_RETENTION_DAYS: the stack of"):
        label_retention_days(None, ARN, client)
    stack_says(stub, None)
    with pytest.raises(LookupError, match="stack decision-router: no LabelRetentionDays"):
        label_retention_days(None, ARN, client)
