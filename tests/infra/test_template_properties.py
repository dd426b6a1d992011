"""Production properties of template.yaml that no linter checks: the agreed environment,
queue/DLQ wiring, encryption, the endpoint variants, and least-privilege IAM."""

from __future__ import annotations

import json

import pytest

from decision_router.domain.policies import POLICY_DIR, load_policy
from local.cloudformation import Stack, TemplateError, load_template

INTERFACE_ENV = {  # docs: the configuration reference, "Function environment"
    "DECISION_ENDPOINT_NAME", "ROUTING_STATE_MACHINE_ARN", "IDEMPOTENCY_TABLE_NAME", "DESTINATION_QUEUES",
    "REVIEW_TIMEOUT_SECONDS", "ENDPOINT_READ_TIMEOUT_SECONDS", "ENDPOINT_MAX_ATTEMPTS",
    "POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "LOG_LEVEL", "AUDIT_TABLE_NAME",
    "LABELLED_EXAMPLES_TABLE_NAME", "EVENT_BUS_NAME", "ENDPOINT_INFERENCE_COMPONENT_NAME",
}
FUNCTIONS = {"TicketIntakeFunction": "support-ticket", "IncidentIntakeFunction": "incident", "ReviewCompletionFunction": None,
             "ReviewConsoleFunction": None, "TicketWebhookFunction": None}
GPU = {"DecisionImageUri": "1.dkr.ecr.us-east-1.amazonaws.com/d@sha256:" + "a" * 64,
       "ModelDataUrl": "s3://models/smollm2/model.tar.gz", "EndpointCompute": "GPU"}
CPU = {**GPU, "EndpointCompute": "CPU"}
# Actions without resource-level permissions: the only ones allowed on "*".
STAR_ALLOWED = {
    "logs:CreateLogDelivery", "logs:GetLogDelivery", "logs:UpdateLogDelivery", "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries", "logs:PutResourcePolicy", "logs:DescribeResourcePolicies", "logs:DescribeLogGroups",
    "ecr:GetAuthorizationToken", "cloudwatch:PutMetricData",
}


@pytest.fixture(scope="module")
def stack() -> Stack:
    return Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_function_gets_the_agreed_environment(stack, function):
    env = stack.function_environment(function)
    assert INTERFACE_ENV <= set(env)
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "DecisionRouter"
    assert env["DECISION_ENDPOINT_NAME"] == "decision-endpoint"
    assert env.get("POLICY_NAME") == FUNCTIONS[function]


def test_destination_queues_cover_exactly_the_policy_targets(stack):
    destinations = json.loads(stack.function_environment("TicketIntakeFunction")["DESTINATION_QUEUES"])
    targets = {o.target for path in POLICY_DIR.glob("*.json")
               for q in load_policy(path).questions for o in q.options if o.target}
    assert set(destinations) == targets
    queue_urls = {stack.ref(q) for q in stack.of_type("AWS::SQS::Queue")}
    assert set(destinations.values()) <= queue_urls and len(set(destinations.values())) == len(targets)


def test_every_queue_is_encrypted_and_every_work_queue_has_a_dead_letter_queue(stack):
    queues = stack.of_type("AWS::SQS::Queue")
    dead_letter_arns = set()
    for queue in queues:
        props = stack.resolve(stack.properties(queue))
        assert props.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in props, queue
        if "RedrivePolicy" in props:
            assert 3 <= props["RedrivePolicy"]["maxReceiveCount"] <= 5, queue
            dead_letter_arns.add(props["RedrivePolicy"]["deadLetterTargetArn"])
    dead_letters = {q for q in queues if stack.get_att(q, "Arn") in dead_letter_arns}
    assert dead_letters == {"TicketDeadLetterQueue", "TeamDeadLetterQueue"}
    without_redrive = {q for q in queues if "RedrivePolicy" not in stack.properties(q)}
    assert without_redrive == {"TicketDeadLetterQueue", "TeamDeadLetterQueue", "WorkflowDeadLetterQueue",
                               "IncidentDeadLetterQueue", "NotificationDeadLetterQueue"}


def test_pending_reviews_are_rows_of_the_index_not_queue_messages(stack):
    # The pending-review index holds what waits for a person; no queue of review messages is left,
    # nor a function environment that names one.
    assert "ReviewQueue" not in stack.template["Resources"]
    assert "ReviewQueueUrl" not in stack.template["Outputs"]
    assert "REVIEW_QUEUE_URL" not in stack.template["Globals"]["Function"]["Environment"]["Variables"]
    assert "PENDING_REVIEWS_TABLE_NAME" in stack.template["Globals"]["Function"]["Environment"]["Variables"]


def test_ticket_queue_outlives_the_function_and_limits_concurrency(stack):
    timeout = stack.template["Globals"]["Function"]["Timeout"]
    function = stack.properties("TicketIntakeFunction")
    timeout = function.get("Timeout", timeout)
    assert stack.properties("TicketQueue")["VisibilityTimeout"] >= 6 * timeout
    event = stack.resolve(function["Events"]["Tickets"]["Properties"])
    assert event["Queue"] == stack.get_att("TicketQueue", "Arn")
    assert event["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert int(event["ScalingConfig"]["MaximumConcurrency"]) >= 2


def test_incident_rule_has_retries_and_its_own_dead_letter_queue(stack):
    event = stack.resolve(stack.properties("IncidentIntakeFunction")["Events"]["IncidentReported"]["Properties"])
    # any reporter (BusPublisherArns) but the stack's own publishers, which page or forward, never report
    own = sorted(source["Source"] for source in stack.template["Mappings"]["Events"].values())
    assert own == ["decision-router", "decision-router.review-sla", "decision-router.webhooks"]
    ((excluded,),) = [list(s.values()) for s in event["Pattern"]["source"]]
    assert sorted(excluded) == own and event["Pattern"] == {"source": [{"anything-but": excluded}],
                                                            "detail-type": ["Incident Reported"]}
    assert event["EventBusName"] == stack.ref("DecisionBus")
    assert event["DeadLetterConfig"]["Arn"] == stack.get_att("IncidentDeadLetterQueue", "Arn")
    assert event["RetryPolicy"]["MaximumRetryAttempts"] > 0
    on_failure = stack.resolve(stack.properties("IncidentIntakeFunction")["EventInvokeConfig"])
    assert on_failure["DestinationConfig"]["OnFailure"]["Destination"] == stack.get_att("IncidentDeadLetterQueue", "Arn")


def test_the_console_role_may_put_its_sweeps_item_escalated_alone(stack):
    """The review SLA sweep (functions/review_console/sla.py) puts one detail-type with one source:
    its role may put nothing else on the bus, an Incident Reported (which would page) least of all."""
    from review_console import sla

    grants = [s for p in stack.resolve(stack.properties("ReviewConsoleFunction"))["Policies"]
              for s in (p.get("Statement", []) if isinstance(p, dict) else []) if "events:PutEvents" in json.dumps(s["Action"])]
    assert [(g["Resource"], g["Condition"]) for g in grants] == [(stack.get_att("DecisionBus", "Arn"), {"StringEquals": {
        "events:source": sla.SWEEP_SOURCE, "events:detail-type": sla.ESCALATED}})]
    assert stack.template["Mappings"]["Events"]["ReviewSla"] == {"Source": sla.SWEEP_SOURCE, "DetailType": sla.ESCALATED}


@pytest.mark.stack
def test_an_incident_reported_by_one_of_the_stacks_own_sources_reaches_no_intake():
    import boto3
    from moto import mock_aws

    incident = {"incident_id": "INC-1", "title": "checkout down", "description": "5xx", "service": "checkout",
                "severity": "sev1", "source": "datadog", "reported_at": "2026-12-01T09:00:00Z"}
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}).create()
        own = [source["Source"] for source in stack.template["Mappings"]["Events"].values()]
        boto3.client("events").put_events(Entries=[
            {"EventBusName": stack.ref("DecisionBus"), "Source": source, "DetailType": "Incident Reported",
             "Detail": json.dumps({**incident, "incident_id": source})} for source in ["monitoring", *own]])
        delivered = stack.rule_events("IncidentIntakeFunction", "IncidentReported")
    assert [(e["source"], e["detail"]["incident_id"]) for e in delivered] == [("monitoring", "monitoring")]


def test_the_workflows_pages_of_incidents_reach_the_incident_intake_from_the_workflow_alone(stack):
    """A reviewer's answer that pages makes the incident hold its dependants (docs/noise.md): the
    rule takes the workflow's own Item Escalated events of incidents, a source only the
    workflow's role may put, and parks what fails in the incident DLQ, whose policy lets it."""
    event = stack.resolve(stack.properties("IncidentIntakeFunction")["Events"]["IncidentPaged"]["Properties"])
    source = stack.template["Mappings"]["Events"]["Workflow"]["Source"]
    assert event["Pattern"] == {"source": [source], "detail-type": ["Item Escalated"],
                                "detail": {"item_kind": ["incident"]}}
    assert event["EventBusName"] == stack.ref("DecisionBus")
    assert event["DeadLetterConfig"]["Arn"] == stack.get_att("IncidentDeadLetterQueue", "Arn")
    deny = stack.resolve(stack.properties("DecisionBusWorkflowEventsOnlyFromTheWorkflow"))["Statement"]
    assert deny["Effect"] == "Deny" and deny["Condition"]["StringEquals"]["events:source"] == source
    assert deny["Condition"]["ArnNotLike"]["aws:PrincipalArn"] == stack.get_att("RoutingStateMachineRole", "Arn")
    policy = stack.resolve(stack.properties("IncidentDeadLetterQueuePolicy"))["PolicyDocument"]["Statement"][0]
    assert any(arn.endswith(f"/{event['RuleName']}") for arn in policy["Condition"]["ArnEquals"]["aws:SourceArn"])


def test_tables_have_recovery_and_encryption_and_idempotency_keys(stack):
    for table in stack.of_type("AWS::DynamoDB::Table"):
        props = stack.properties(table)
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}, table
        assert props["SSESpecification"] == {"SSEEnabled": True}, table
    idempotency = stack.properties("IdempotencyTable")
    assert idempotency["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert idempotency["AttributeDefinitions"] == [{"AttributeName": "id", "AttributeType": "S"}]
    assert idempotency["TimeToLiveSpecification"]["Enabled"] is True


def test_every_workflow_task_retries_and_catches():
    asl = json.loads(Stack.load().state_machine_definition("RoutingStateMachine"))
    tasks = {name: state for name, state in asl["States"].items() if state["Type"] in ("Task", "Parallel")}
    assert len(tasks) == 13
    for name, state in tasks.items():
        # A Parallel's tasks retry inside its branches; the Parallel catches what they let through.
        inner = [s for branch in state.get("Branches", []) for s in branch["States"].values() if s["Type"] == "Task"]
        assert all(s.get("Retry") for s in inner) if inner else state.get("Retry"), name
        assert any("States.ALL" in c["ErrorEquals"] for c in state.get("Catch", [])), name
    # A reviewer who does not answer is a timeout, not a failure to retry by re-sending.
    review_retry = {e for r in asl["States"]["RequestReview"]["Retry"] for e in r["ErrorEquals"]}
    assert not review_retry & {"States.ALL", "States.Timeout"}


def test_existing_endpoint_creates_no_sagemaker_resources(stack):
    assert not [r for r in stack.resources if stack.resources[r]["Type"].startswith(("AWS::SageMaker::", "AWS::ApplicationAutoScaling::"))]
    policy = stack.resolve(stack.properties("TicketIntakeFunction")["Policies"][0])
    assert policy["Statement"][0]["Resource"] == "arn:aws:sagemaker:us-east-1:123456789012:endpoint/decision-endpoint"


def test_gpu_endpoint_uses_the_instance_pool_and_full_offload():
    stack = Stack.load(parameters=GPU)
    (variant,) = stack.resolve(stack.properties("DecisionEndpointConfig"))["ProductionVariants"]
    assert [(p["InstanceType"], p["Priority"]) for p in variant["InstancePools"]] == [
        ("ml.g6e.xlarge", 1), ("ml.g6.2xlarge", 2), ("ml.g5.2xlarge", 3), ("ml.g4dn.2xlarge", 4)]
    assert "InstanceType" not in variant
    assert variant["InferenceAmiVersion"] == "al2023-ami-sagemaker-inference-gpu-4-1"
    assert 300 <= variant["VariantInstanceProvisionTimeoutInSeconds"] <= 3600
    model = stack.resolve(stack.properties("DecisionModel"))
    assert model["EnableNetworkIsolation"] is True
    assert model["PrimaryContainer"]["Environment"]["SM_LLAMA_CPP_N_GPU_LAYERS"] == "999"
    assert {"DecisionEndpointScalableTarget", "DecisionEndpointScalingPolicy"} <= set(stack.resources)


def test_cpu_endpoint_uses_one_instance_type_and_threads():
    stack = Stack.load(parameters=CPU)
    (variant,) = stack.resolve(stack.properties("DecisionEndpointConfig"))["ProductionVariants"]
    assert variant["InstanceType"] == "ml.c6i.8xlarge" and "InstancePools" not in variant
    environment = stack.resolve(stack.properties("DecisionModel"))["PrimaryContainer"]["Environment"]
    assert environment["SM_LLAMA_CPP_THREADS"] == "32" and "SM_LLAMA_CPP_N_GPU_LAYERS" not in environment
    scaling = stack.resolve(stack.properties("DecisionEndpointScalingPolicy"))
    metric = scaling["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"]
    assert metric["PredefinedMetricType"] == "SageMakerVariantInvocationsPerInstance"
    # The functions may invoke exactly the endpoint the stack created.
    policy = stack.resolve(stack.properties("TicketIntakeFunction")["Policies"][0])
    assert policy["Statement"][0]["Resource"] == stack.ref("DecisionEndpoint")


@pytest.mark.parametrize("parameters", [{"ExistingEndpointName": "decision-endpoint"}, CPU], ids=["existing", "created"])
def test_no_wildcard_resource_where_the_arn_is_known(parameters):
    stack = Stack.load(parameters=parameters)
    statements = []
    for logical_id in stack.of_type("AWS::Serverless::Function", "AWS::Serverless::StateMachine"):
        for policy in stack.properties(logical_id).get("Policies", []):
            statements += [(logical_id, s) for s in stack.resolve(policy).get("Statement", [])]
    for logical_id in stack.of_type("AWS::IAM::Role"):
        for policy in stack.resolve(stack.properties(logical_id)).get("Policies", []):
            statements += [(logical_id, s) for s in policy["PolicyDocument"]["Statement"]]
    assert statements
    for logical_id, statement in statements:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if "*" in resources:
            assert set(actions) <= STAR_ALLOWED, (logical_id, actions)


def test_outputs_name_every_queue_table_bus_and_state_machine(stack):
    outputs = set(stack.outputs().values())
    kinds = ("AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::Events::EventBus", "AWS::Serverless::StateMachine")
    for logical_id in stack.of_type(*kinds):
        assert stack.ref(logical_id) in outputs, logical_id


def test_review_function_may_only_answer_tasks_read_pending_reviews_and_remember_proofs(stack):
    # and read the signing key: it signs who answered (docs/security.md). The pending review (its
    # record and task token) is the pending-review index's row, which it reads and removes once answered.
    (policy,) = stack.properties("ReviewCompletionFunction")["Policies"]
    grants = {(tuple(s["Action"]) if isinstance(s["Action"], list) else (s["Action"],), s["Resource"])
              for s in stack.resolve(policy)["Statement"]}
    index = stack.get_att("PendingReviewsTable", "Arn")
    # Step Functions authorizes a task token against the state machine that issued it.
    assert grants == {(("states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"),
                       stack.ref("RoutingStateMachine")),
                      (("dynamodb:GetItem", "dynamodb:DeleteItem"), index),
                      (("dynamodb:UpdateItem",), stack.get_att("HeadHistoryTable", "Arn")),
                      (("dynamodb:PutItem",), stack.get_att("ResolvedItemsTable", "Arn")),
                      (("dynamodb:PutItem",), stack.get_att("IdempotencyTable", "Arn")),
                      (("secretsmanager:GetSecretValue",), stack.ref("SigningKeySecret"))}
    # Each caller's proof answers once: its rows of the idempotency table, and no other row.
    (proofs,) = [s for s in stack.resolve(policy)["Statement"] if s["Resource"] == stack.get_att("IdempotencyTable", "Arn")]
    assert proofs["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["review-proof#*"]}}
    # Whose answers count: the ReviewerPrincipals parameter, empty by default (every answer refused).
    assert stack.function_environment("ReviewCompletionFunction")["REVIEWER_PRINCIPALS"] == ""
    listed = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint",
                                    "ReviewerPrincipals": "arn:aws:iam::123456789012:role/reviewers/Reviewer,user/carol"})
    assert listed.function_environment("ReviewCompletionFunction")["REVIEWER_PRINCIPALS"] == (
        "arn:aws:iam::123456789012:role/reviewers/Reviewer,user/carol")
    with pytest.raises(TemplateError, match="ReviewerPrincipals"):
        Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", "ReviewerPrincipals": "Reviewer"})
    # The answered item is kept for similar items: a row of its own, never another table.
    # A reviewer's answer counts for the head serving in shadow: its tally rows, and no other row.
    # A check's answer counts for the live precision: its tally rows, and no other row.
    tallies = [s for s in stack.resolve(policy)["Statement"] if s["Action"] == "dynamodb:UpdateItem"]
    assert sorted(tuple(t["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]) for t in tallies) == [
        ("precision#*",), ("shadow#*",)]
    assert all(set(t["Condition"]) == {"ForAllValues:StringLike"} for t in tallies)


@pytest.mark.parametrize("function", ["TicketIntakeFunction", "IncidentIntakeFunction"])
def test_intake_may_read_the_status_of_earlier_executions(stack, function):
    """A re-sent item is routed again when its earlier execution failed: the intake reads that status."""
    statements = [s for p in stack.properties(function)["Policies"] if "Statement" in p
                  for s in stack.resolve(p)["Statement"]]
    executions = stack.get_att("RoutingStateMachine", "Arn").replace(":stateMachine:", ":execution:") + ":*"
    assert {"Effect": "Allow", "Action": "states:DescribeExecution", "Resource": executions} in statements


# --- the decision image is deployed by digest only ---------------------------------------------

DIGEST = "0123456789abcdef" * 4
IMAGE_BY_DIGEST = [
    "",  # only valid together with ExistingEndpointName (the EndpointInputs rule)
    f"123456789012.dkr.ecr.us-east-1.amazonaws.com/decision-router/decision-container@sha256:{DIGEST}",
    f"registry.internal:5000/decision-container@sha256:{DIGEST}",
    GPU["DecisionImageUri"],
]
IMAGE_NOT_BY_DIGEST = [
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/decision-router/decision-container:cpu",
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/decision-router/decision-container",
    f"123456789012.dkr.ecr.us-east-1.amazonaws.com/decision-router/decision-container@sha256:{DIGEST[:-1]}",
    f"123456789012.dkr.ecr.us-east-1.amazonaws.com/decision-router/decision-container@sha256:{DIGEST.upper()}",
    f"123456789012.dkr.ecr.us-east-1.amazonaws.com/decision-router/decision-container:cpu@sha256:{DIGEST} ",
    "REPLACE_WITH_IMAGE_URI@sha256:REPLACE_WITH_DIGEST",  # samconfig.toml's placeholder must be replaced
]


def test_decision_image_parameter_states_its_constraint():
    spec = Stack.load().template["Parameters"]["DecisionImageUri"]
    assert "@sha256:" in spec["AllowedPattern"] and spec["Default"] == ""
    assert "pinned by digest" in spec["ConstraintDescription"] and "describe-images" in spec["ConstraintDescription"]


@pytest.mark.parametrize("uri", IMAGE_BY_DIGEST + IMAGE_NOT_BY_DIGEST)
def test_decision_image_uri_is_accepted_only_by_digest(uri):
    parameters = {**CPU, "DecisionImageUri": uri} if uri else {"ExistingEndpointName": "decision-endpoint"}
    if uri in IMAGE_BY_DIGEST:
        stack = Stack.load(parameters=parameters)
        if uri:
            assert stack.resolve(stack.properties("DecisionModel"))["PrimaryContainer"]["Image"] == uri
    else:
        with pytest.raises(TemplateError, match="DecisionImageUri=.* must be an image pinned by digest"):
            Stack.load(parameters=parameters)


@pytest.mark.parametrize(("uri", "refused"), [(IMAGE_BY_DIGEST[1], False), (IMAGE_NOT_BY_DIGEST[0], True)], ids=["digest", "tag"])
def test_cfn_lint_reads_the_image_pattern_as_cloudformation_does(tmp_path, uri, refused):
    """cfn-lint checks a parameter's Default against its AllowedPattern (E2015) with CloudFormation's
    semantics, so the template's parameter with a tag as its default must be flagged, a digest not.
    The parameter is linted in a template of its own (the whole one is linted by test_template_lint)."""
    from cfnlint.api import ManualArgs, lint_file

    spec = dict(load_template()["Parameters"]["DecisionImageUri"], Default=uri)
    copy = tmp_path / "template.json"
    copy.write_text(json.dumps({"AWSTemplateFormatVersion": "2010-09-09", "Parameters": {"DecisionImageUri": spec},
                                "Resources": {"Nothing": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}))
    rules = {m.rule.id for m in lint_file(copy, config=ManualArgs(regions=["us-east-1"]))}
    assert ("E2015" in rules) is refused


def test_stack_load_refuses_what_cloudformation_refuses():
    for parameters, message in (
        ({"EndpointCompute": "TPU"}, "EndpointCompute='TPU' is not one of the AllowedValues"),
        ({"CpuThreads": "0"}, "CpuThreads='0' is below MinValue 1"),
        ({"ReviewTimeoutSeconds": "2000000"}, "is above MaxValue 1209600"),
        ({"ModelDataUrl": "s3://b/model.tar.gz"}, "does not match AllowedPattern"),
    ):
        with pytest.raises(TemplateError, match=message):
            Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", **parameters})


# ---------------------------------------------------------------------------- who may send, who answered
def _numbers(mapping: dict) -> dict:
    return {key: int(value) for key, value in mapping.items()}  # parameters resolve as text


def test_the_webhook_api_is_throttled_and_its_function_capped_by_parameters():
    stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", "WebhookThrottlingBurstLimit": "7",
                                   "WebhookThrottlingRateLimit": "3", "WebhookReservedConcurrency": "4"})
    assert _numbers(stack.resolve(stack.properties("WebhookApi")["DefaultRouteSettings"])) == {"ThrottlingBurstLimit": 7,
                                                                                              "ThrottlingRateLimit": 3}
    assert int(stack.resolve(stack.properties("TicketWebhookFunction")["ReservedConcurrentExecutions"])) == 4
    defaults = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})
    assert _numbers(defaults.resolve(defaults.properties("WebhookApi")["DefaultRouteSettings"])) == {
        "ThrottlingBurstLimit": 50, "ThrottlingRateLimit": 20}
    assert int(defaults.resolve(defaults.properties("TicketWebhookFunction")["ReservedConcurrentExecutions"])) == 10
    unreserved = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", "WebhookReservedConcurrency": "0"})
    assert "ReservedConcurrentExecutions" not in unreserved.resolve(unreserved.properties("TicketWebhookFunction"))


def test_deliveries_are_remembered_longer_than_any_window(stack):
    from decision_router.adapters.deliveries import RECORD_SECONDS
    from decision_router.sources.jira import RETRY_WINDOW_SECONDS
    from decision_router.sources.pagerduty_webhook import EVENT_WINDOW_SECONDS

    table = stack.properties("WebhookDeliveriesTable")
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert table["KeySchema"] == [{"AttributeName": "delivery_key", "KeyType": "HASH"}]
    longest_skew = stack.template["Parameters"]["WebhookMaxSkewSeconds"]["MaxValue"]
    assert RECORD_SECONDS > max(longest_skew, RETRY_WINDOW_SECONDS, EVENT_WINDOW_SECONDS)
    env = stack.function_environment("TicketWebhookFunction")
    assert env["WEBHOOK_DELIVERIES_TABLE_NAME"] == stack.ref("WebhookDeliveriesTable")


def test_forwarded_incident_webhooks_reach_the_incident_intake_only_from_the_webhook_function(stack):
    rule = stack.resolve(stack.properties("IncidentWebhookRule"))
    assert rule["EventBusName"] == stack.ref("DecisionBus")
    assert rule["EventPattern"] == {"source": ["decision-router.webhooks"]}
    (target,) = rule["Targets"]
    assert target["Arn"] == stack.get_att("IncidentIntakeFunction", "Arn")
    assert target["DeadLetterConfig"]["Arn"] == stack.get_att("IncidentDeadLetterQueue", "Arn")
    deny = stack.resolve(stack.properties("DecisionBusWebhookEventsOnlyFromTheWebhookFunction"))["Statement"]
    assert deny["Effect"] == "Deny" and deny["Condition"]["StringEquals"]["events:source"] == "decision-router.webhooks"
    assert deny["Condition"]["ArnNotLike"]["aws:PrincipalArn"] == stack.get_att("TicketWebhookFunctionRole", "Arn")


def test_a_reviewer_cannot_change_their_own_email_and_mfa_is_a_parameter():
    stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", "ReviewerMfa": "ON"})
    pool = stack.resolve(stack.properties("ReviewerUserPool"))
    assert pool["UserAttributeUpdateSettings"] == {"AttributesRequireVerificationBeforeUpdate": ["email"]}
    assert pool["MfaConfiguration"] == "ON" and pool["EnabledMfas"] == ["SOFTWARE_TOKEN_MFA"]
    client = stack.resolve(stack.properties("ReviewConsoleUserPoolClient"))
    assert "email" not in client["WriteAttributes"] and "email_verified" in client["ReadAttributes"]
    off = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})
    pool = off.resolve(off.properties("ReviewerUserPool"))
    assert pool["MfaConfiguration"] == "OFF" and "EnabledMfas" not in pool


def readers_of(stack, secret: str) -> set[str]:
    arn = stack.ref(secret)
    readers = set()
    for logical_id in stack.of_type("AWS::Serverless::Function", "AWS::IAM::Role"):
        for statement in json.loads(json.dumps(stack.resolve(stack.properties(logical_id).get("Policies", [])))):
            for grant in statement.get("Statement", []) if isinstance(statement, dict) else []:
                resources = grant.get("Resource")
                resources = resources if isinstance(resources, list) else [resources]
                if "secretsmanager:GetSecretValue" in json.dumps(grant.get("Action")) and arn in resources:
                    readers.add(logical_id)
    return readers


def test_only_the_functions_that_sign_or_verify_may_read_the_signing_keys(stack):
    """SigningKeySecret signs who answered: the review function, the console (and the relearning
    role, created with RelearningImageUri) alone; the routing functions, which read hostile input,
    hold only HeadSigningKeySecret, to verify heads."""
    assert readers_of(stack, "SigningKeySecret") == {"ReviewCompletionFunction", "ReviewConsoleFunction"}
    assert readers_of(stack, "HeadSigningKeySecret") == {"TicketIntakeFunction", "IncidentIntakeFunction"}
    env = stack.function_environment("TicketIntakeFunction")
    assert env["HEAD_SIGNING_KEY_SECRET_ARN"] == stack.ref("HeadSigningKeySecret")
