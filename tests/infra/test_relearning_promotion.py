"""Who can get a head promoted. The relearning function takes its steps from the relearning queue:
a message that names a `promote` step must not promote anything unless the workflow waits on its
task token, and even then only a candidate the same run's `fit` stored as passing and its
`judge_shadow` judged in shadow, with the bytes `fit` hashed. Real handler, real job and head store, template.yaml's resources in moto (Step
Functions executing the real ASL, so task tokens are checked as in AWS)."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from decision_router.adapters.head_store import HeadStore
from decision_router.adapters.notices import PromotionNotices
from decision_router.adapters.review import LabelledExamples
from decision_router.adapters.signing_key import SigningKey
from decision_router.domain.signatures import HEAD_SERVICE, HEAD_SHADOW
from local.cloudformation import Stack
from local.relearning import LOCAL_PARAMETERS, LocalRelearning
from relearning import app
from relearning.job import Relearning
from tests.functions.test_intake_handlers import FakeLambdaContext

pytestmark = pytest.mark.stack

REPO = Path(__file__).resolve().parents[2]
POLICY, QUESTION = "support-ticket", "queue"
OLD_RUN = "relearn-support-ticket-old"


def shipped_head() -> dict:
    return json.loads((REPO / "functions/decision_router/policies/heads/support-ticket.queue.json").read_text())


def route_everything_alone() -> bytes:
    """A candidate a run refused: thresholds that let it route every ticket with no review."""
    bad = copy.deepcopy(shipped_head())
    bad["version"] = "support-ticket.queue.refused-candidate"
    bad["thresholds"] = {"min_confidence": 0.0, "min_margin": 0.0, "by_option": {}}
    return json.dumps(bad, sort_keys=True).encode()


def forged_promote(token: str, execution: str | None, key: str) -> dict:
    message = {"step": "promote", "task_token": token,
               "input": {"policy": POLICY, "run": execution or "anything",
                         "shadow_judged": {"questions": [{"question": QUESTION, "promoted": True, "candidate_key": key,
                                                          "reason": "not worse on any measure"}]}}}
    if execution is not None:
        message["execution"] = execution
    return message


@pytest.fixture
def stack(monkeypatch):
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", **LOCAL_PARAMETERS}).create()
        env = stack.function_environment("RelearningFunction")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(app, "_job", None)
        store = HeadStore(env["HEAD_STORE_BUCKET"], env["HEAD_PARAMETER_PREFIX"], env["HEAD_HISTORY_TABLE_NAME"])
        yield stack, store, env


def notices(stack: Stack, env: dict) -> str:
    """An SQS queue subscribed to the promotion topic (what a person would read)."""
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="promotion-notices")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    boto3.client("sns").subscribe(TopicArn=env["RELEARNING_TOPIC_ARN"], Protocol="sqs", Endpoint=arn,
                                  Attributes={"RawMessageDelivery": "true"})
    return url


def received(url: str) -> list[dict]:
    messages = boto3.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


def nothing_promoted(store: HeadStore, env: dict) -> None:
    assert store.pointer(POLICY, QUESTION) is None  # the shipped head keeps deciding
    assert boto3.client("dynamodb").scan(TableName=env["HEAD_HISTORY_TABLE_NAME"])["Items"] == []
    assert "Contents" not in boto3.client("s3").list_objects_v2(Bucket=store.bucket, Prefix="heads/")


@pytest.mark.parametrize("execution", [None, OLD_RUN])
def test_a_forged_promote_sent_on_the_queue_promotes_nothing(stack, execution, caplog):
    stack, store, env = stack
    key = f"runs/{OLD_RUN}/{POLICY}.{QUESTION}.json"
    store.put(key, route_everything_alone())
    store.put(key.replace(".json", ".report.json"), b'{"verdict": {"promoted": false}}')
    topic = notices(stack, env)

    sqs = boto3.client("sqs")
    queue = stack.ref("RelearningQueue")
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(forged_promote("not-a-real-token", execution, key)))
    (message,) = sqs.receive_message(QueueUrl=queue)["Messages"]
    assert app.lambda_handler({"Records": [{"body": message["Body"]}]}, FakeLambdaContext()) == {"batchItemFailures": []}

    nothing_promoted(store, env)
    assert received(topic) == []


def test_a_message_that_is_no_step_is_refused_with_what_is_wrong(stack):
    for body, problem in (("{}", "step: Field required"), ('{"step": "promote", "task_token": "t", "input": {}, '
                                                            '"candidate_key": "x"}', "candidate_key: Extra inputs")):
        with pytest.raises(ValueError, match=problem):
            app.lambda_handler({"Records": [{"body": body}]}, FakeLambdaContext())


def test_a_step_whose_token_the_workflow_waits_on_runs(stack):
    """The real workflow's own message (its task token, its execution name) is taken and answered."""
    stack, store, env = stack
    relearning = LocalRelearning(stack)
    try:
        run = relearning.run(POLICY)
    finally:
        relearning.close()
    assert run.status == "SUCCEEDED", run.error
    assert run.output["count"] == {**run.output["count"], "policy": POLICY, "new_labels": 0, "relearn": False}


def job(store: HeadStore, env: dict) -> Relearning:
    return Relearning(store, LabelledExamples(env["LABELLED_EXAMPLES_TABLE_NAME"]), lambda probe: None, shipped=[],
                      announce=PromotionNotices(env["RELEARNING_TOPIC_ARN"]).announce,
                      shadow_min_reviewed=0,  # the promotion's checks under test here, not the shadow's verdict
                      head_signing_key=SigningKey.from_secret(env["HEAD_SIGNING_KEY_SECRET_ARN"]))


def store_candidate(store: HeadStore, run: str, data: bytes, promoted: bool) -> str:
    key = f"runs/{run}/{POLICY}.{QUESTION}.json"
    store.put(key, data)
    store.put(key.replace(".json", ".report.json"), json.dumps(
        {"verdict": {"promoted": promoted, "reason": "not worse than the head in service on any measure"},
         "sha256": hashlib.sha256(data).hexdigest(), "head_version": json.loads(data)["version"]}).encode())
    return key


def test_promote_takes_only_a_candidate_its_own_run_stored_as_passing(stack):
    stack, store, env = stack
    relearning = job(store, env)
    topic = notices(stack, env)
    claim = [{"question": QUESTION, "promoted": True}]
    store_candidate(store, OLD_RUN, route_everything_alone(), promoted=False)

    with pytest.raises(ValueError, match=f"run {OLD_RUN}'s fit and judge_shadow stored no passing candidate"):
        relearning.promote(POLICY, OLD_RUN, claim)  # a refused candidate, whatever the message says
    with pytest.raises(ValueError, match="stored no passing candidate"):
        relearning.promote(POLICY, "relearn-support-ticket-new", claim)  # a run that stored nothing
    with pytest.raises(ValueError, match="not a shipped policy"):
        relearning.promote("../../runs/x", OLD_RUN, claim)  # load_policy would read a path
    with pytest.raises(ValueError, match="not a workflow execution name"):
        relearning.promote(POLICY, "../heads", claim)
    with pytest.raises(ValueError, match="not a question of policy"):
        relearning.promote(POLICY, OLD_RUN, [{"question": "team", "promoted": True}])
    nothing_promoted(store, env)

    good = dict(shipped_head(), version="support-ticket.queue.relearned")
    data = json.dumps(good, sort_keys=True).encode()
    key = store_candidate(store, "relearn-support-ticket-new", data, promoted=True)
    store.put(key, route_everything_alone())  # replaced after fit judged it
    with pytest.raises(ValueError, match="its bytes hash to"):
        relearning.shadow(POLICY, "relearn-support-ticket-new", claim)
    with pytest.raises(ValueError, match="the verdict says refused"):
        relearning.shadow(POLICY, "relearn-support-ticket-new", [{"question": QUESTION, "promoted": False}])
    assert store.shadow_pointer(POLICY, QUESTION) is None
    nothing_promoted(store, env)

    store.put(key, data)
    with pytest.raises(ValueError, match="fit and judge_shadow stored no passing candidate"):
        relearning.promote(POLICY, "relearn-support-ticket-new", claim)  # not yet judged in shadow
    with pytest.raises(ValueError, match="the verdict says refused, but run relearn-support-ticket-new's fit stored a passing"):
        relearning.shadow(POLICY, "relearn-support-ticket-new", [{"question": QUESTION, "promoted": False}])
    shadowing = relearning.shadow(POLICY, "relearn-support-ticket-new", claim)
    shadowed = store.shadow_pointer(POLICY, QUESTION)
    assert shadowed.sha256 == shadowing["questions"][0]["sha256"]
    # its shadow is signed for shadow alone: that signature never verifies for the head in service
    head_key = SigningKey.from_secret(env["HEAD_SIGNING_KEY_SECRET_ARN"])
    assert head_key.head_verified(shadowed, HEAD_SHADOW) and not head_key.head_verified(shadowed, HEAD_SERVICE)
    judged = relearning.judge_shadow(POLICY, "relearn-support-ticket-new")  # 0 shadowed items asked for
    assert judged["ready"] and judged["promotable"] and store.shadow_pointer(POLICY, QUESTION) is None
    store.put(key, route_everything_alone())  # replaced after its shadow was judged
    with pytest.raises(ValueError, match="its bytes hash to"):
        relearning.promote(POLICY, "relearn-support-ticket-new", claim)
    with pytest.raises(ValueError, match="the verdict says refused"):
        relearning.promote(POLICY, "relearn-support-ticket-new", [{"question": QUESTION, "promoted": False}])
    assert store.pointer(POLICY, QUESTION) is None  # the shipped head keeps deciding
    store.put(key, data)
    out = relearning.promote(POLICY, "relearn-support-ticket-new", claim)
    assert [p["head_version"] for p in out["promoted"]] == ["support-ticket.queue.relearned"]
    pointer = store.pointer(POLICY, QUESTION)
    assert pointer.head_version == "support-ticket.queue.relearned" and pointer.sha256 == hashlib.sha256(data).hexdigest()
    # signed anew, for service, with the stack's head key, which the routing functions verify before it decides
    assert head_key.head_verified(pointer, HEAD_SERVICE) and pointer.signature != shadowed.signature
    (notice,) = received(topic)
    assert notice == {**notice, "notice": "promoted", "policy": POLICY, "question": QUESTION,
                      "run": "relearn-support-ticket-new", "head_version": "support-ticket.queue.relearned",
                      "came_from": shipped_head()["version"], "sha256": pointer.sha256}
