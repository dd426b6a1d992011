"""`python -m ops.heads approve|reject --run`: a relearning run's task token is read from the
approval queue (template.yaml's ApprovalQueue, in moto) by the run's name, answered, and its
request removed; the promotion topic's notice never carries it (test_relearning_template.py)."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from decision_router.adapters.notices import NOT_APPROVED, ApprovalAnswers, ApprovalRequests
from local.cloudformation import Stack
from local.relearning import LOCAL_PARAMETERS
from ops import heads


@pytest.fixture
def queue():
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", **LOCAL_PARAMETERS,
                                       "RelearningApproval": "manual"}).create(only=["ApprovalQueue"])
        url = stack.ref("ApprovalQueue")
        sqs = boto3.client("sqs")
        for run, token in (("run-1", "tok-1"), ("run-2", "tok-2")):
            sqs.send_message(QueueUrl=url, MessageBody=json.dumps(
                {"execution": run, "policy": "support-ticket", "questions": [], "task_token": token}))
        sqs.send_message(QueueUrl=url, MessageBody="not a request")
        yield url


def stepfunctions(expect: str, **params) -> tuple[ApprovalAnswers, Stubber]:
    client = boto3.client("stepfunctions", region_name="us-east-1")
    stubber = Stubber(client)
    stubber.add_response(expect, {}, params)
    stubber.activate()
    return ApprovalAnswers(client=client), stubber


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_an_answer_takes_the_runs_token_from_the_approval_queue_and_removes_its_request(queue, action, capsys):
    if action == "approve":
        answers, stubber = stepfunctions("send_task_success", taskToken="tok-2",
                                         output=json.dumps({"approved_by": "ana", "reason": "checked"}))
    else:
        answers, stubber = stepfunctions("send_task_failure", taskToken="tok-2", error=NOT_APPROVED,
                                         cause="rejected by ana: checked")
    code = heads.main([action, "--run", "run-2", "--reason", "checked", "--by", "ana", "--approval-queue-url", queue],
                      answers=answers)
    assert code == 0, capsys.readouterr().err
    stubber.assert_no_pending_responses()
    assert json.loads(capsys.readouterr().out)["run"] == "run-2"
    bodies = [m["Body"] for m in boto3.client("sqs").receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]]
    assert sorted(bodies) == sorted(["not a request", json.dumps(
        {"execution": "run-1", "policy": "support-ticket", "questions": [], "task_token": "tok-1"})])


def test_a_run_with_no_request_waiting_is_refused_in_words(queue, capsys):
    assert heads.main(["approve", "--run", "run-9", "--reason", "x", "--by", "ana", "--approval-queue-url", queue]) == 1
    assert "no request of run 'run-9' waits on the approval queue" in capsys.readouterr().err
    assert ApprovalRequests(queue).take("run-1") is not None  # the others were left visible


@pytest.mark.parametrize(("argv", "why"), [
    (["approve", "--reason", "x"], "--run: approve needs the run the approval notice names"),
    (["reject", "--run", "run-1"], "--reason: say why you reject"),
    (["approve", "--run", "run-1", "--reason", "x"], "not set: --approval-queue-url / APPROVAL_QUEUE_URL"),
])
def test_what_an_answer_needs_is_named(argv, why, capsys, monkeypatch):
    monkeypatch.delenv("APPROVAL_QUEUE_URL", raising=False)
    assert heads.main(argv) == 2
    assert why in capsys.readouterr().err
