"""Every queue and topic the stack owns refuses senders other than its own (template.yaml).

moto stores an SQS queue's or an SNS topic's policy but does not enforce it, so the documents are
read from the template: each AWS::SQS::Queue and AWS::SNS::Topic has a policy with a Deny on
sending that names its senders, and every principal the template allows to send to it (its IAM
statements) is one of them."""

from __future__ import annotations

import fnmatch
import json
import re
from typing import Any

import pytest

from local.cloudformation import Stack

TEAM_QUEUES = ["BillingQueue", "AccountAccessQueue", "TechnicalSupportQueue", "ProductHelpQueue", "SalesQueue",
               "PlatformOncallQueue", "DataOncallQueue", "SecurityOncallQueue", "AppOncallQueue"]
#: Who sends to a team queue: the workflow, and the intakes (an automatic route delivered directly).
TEAM_SENDERS = ["RoutingStateMachineRole", "TicketIntakeFunctionRole", "IncidentIntakeFunctionRole"]
ALARMS = ["ItemEscalatedRule", "ReviewOverdueRule"]
#: Each queue and topic: who may send (the role principals, or the rules as aws:SourceArn; none: only SQS moves
#: messages there). The ticket queue's senders with TicketQueueSenderArns set (see the test of its default).
SENDERS: dict[str, tuple[str, list[str]]] = {
    "TicketQueue": ("aws:PrincipalArn", ["TicketWebhookFunctionRole"]),
    "TicketDeadLetterQueue": ("aws:PrincipalArn", ["TicketIntakeFunctionRole", "TicketWebhookFunctionRole"]),
    "IncidentDeadLetterQueue": ("aws:PrincipalArn", ["IncidentIntakeFunctionRole"]),
    **{queue: ("aws:PrincipalArn", TEAM_SENDERS) for queue in TEAM_QUEUES},
    "EscalationQueue": ("aws:PrincipalArn", ["RoutingStateMachineRole"]),
    "WorkflowDeadLetterQueue": ("aws:PrincipalArn", ["RoutingStateMachineRole"]),
    "TeamDeadLetterQueue": ("none", []),
    "RelearningQueue": ("aws:PrincipalArn", ["RelearningStateMachineRole"]),
    "RelearningDeadLetterQueue": ("none", []),
    "ApprovalQueue": ("aws:PrincipalArn", ["RelearningStateMachineRole"]),
    "NotificationDeadLetterQueue": ("aws:SourceArn", ALARMS),
    "RelearningPromotionTopic": ("aws:PrincipalArn", ["RelearningStateMachineRole", "RelearningFunctionRole"]),
    "EscalationTopic": ("aws:SourceArn", ALARMS),
    "AlarmTopic": ("aws:SourceArn", ["alarm:*"]),
    "IncidentAlarmTopic": ("aws:SourceArn", ["alarm:*"]),
}
SENDING = {"AWS::SQS::Queue": "sqs:SendMessage", "AWS::SNS::Topic": "sns:Publish"}
#: The two conditions every Deny of the template's resource policies carries (but a TLS-only one):
#: it binds a request only where a principal ARN is in it and that principal is no AWS service.
SPARES_SERVICES = {"Null": {"aws:PrincipalArn": "false"}, "BoolIfExists": {"aws:PrincipalIsAWSService": "false"}}
EVERYTHING = {"ExistingEndpointName": "decision-endpoint", "RelearningImageUri": "local/relearning:latest",
              "AlarmSnsSource": "true", "TicketQueueSenderArns": "arn:aws:iam::123456789012:role/zendesk-bridge"}


def deny_of(stack: Stack, logical_id: str) -> dict[str, Any]:
    """The one Deny on sending that a policy of the stack puts on this queue or topic."""
    kind = stack.resources[logical_id]["Type"]
    field = "Queues" if kind == "AWS::SQS::Queue" else "Topics"
    denies = []
    for policy_id in stack.of_type("AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy"):
        properties = stack.resolve(stack.properties(policy_id))
        if stack.ref(logical_id) in properties.get(field, []):
            denies += [s for s in properties["PolicyDocument"]["Statement"]
                       if s["Effect"] == "Deny" and s["Principal"] == "*" and s["Action"] == SENDING[kind]]
    assert len(denies) == 1, f"{logical_id}: {len(denies)} Deny statements on {SENDING[kind]}"
    arn = stack.get_att(logical_id, "Arn") if kind == "AWS::SQS::Queue" else stack.ref(logical_id)
    resources = denies[0]["Resource"] if isinstance(denies[0]["Resource"], list) else [denies[0]["Resource"]]
    assert arn in resources, logical_id
    return denies[0]


def named(deny: dict[str, Any]) -> tuple[str, list[str]]:
    # The conditions that spare the services' own deliveries (below) name nobody.
    conditions = {op: keys for op, keys in deny.get("Condition", {}).items() if keys != SPARES_SERVICES.get(op)}
    if not conditions:
        return "none", []
    # The key that names who may send.
    ((key, values),) = [(key, values) for keys in conditions.values() for key, values in keys.items()
                        if key in ("aws:PrincipalArn", "aws:SourceArn", "aws:PrincipalAccount")]
    return key, sorted(values if isinstance(values, list) else [values])


@pytest.mark.parametrize("parameters", [{"ExistingEndpointName": "decision-endpoint"}, EVERYTHING],
                         ids=["defaults", "every-option"])
def test_every_queue_and_topic_denies_sending_to_all_but_its_senders(parameters):
    check_senders(Stack.load(parameters=parameters), parameters)


def check_senders(stack: Stack, parameters: dict[str, str], senders_of: dict[str, tuple[str, list[str]]] = SENDERS) -> None:
    """Each queue and topic of `stack` (loaded with `parameters`) denies sending to all but its
    senders in `senders_of` (tests/infra/test_team_queues.py: a template with more team queues)."""
    owned = stack.of_type("AWS::SQS::Queue", "AWS::SNS::Topic")
    assert set(owned) <= set(senders_of), f"a queue or topic without its senders here: {set(owned) - set(senders_of)}"
    for logical_id in owned:
        key, senders = senders_of[logical_id]
        if logical_id == "TicketQueue" and "TicketQueueSenderArns" not in parameters:
            continue  # its default, below
        found_key, found = named(deny_of(stack, logical_id))
        assert found_key == key, logical_id
        if key == "aws:PrincipalArn":
            expected = [stack.get_att(role, "Arn") for role in senders]
            if logical_id == "TicketQueue":
                expected.append(parameters["TicketQueueSenderArns"])
            assert found == sorted(expected), logical_id
        elif key == "aws:SourceArn" and senders == ["alarm:*"]:
            assert found == [f"arn:aws:cloudwatch:{stack.region}:{stack.account_id}:alarm:*"], logical_id
        elif key == "aws:SourceArn":
            assert found == sorted(stack.get_att(rule, "Arn") for rule in senders), logical_id


def test_the_ticket_queue_by_default_refuses_every_other_account():
    stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})
    deny = deny_of(stack, "TicketQueue")
    assert deny["Condition"] == {"StringNotEquals": {"aws:PrincipalAccount": stack.account_id}, **SPARES_SERVICES}


def _statements(resource: dict[str, Any]) -> list[tuple[str, Any]]:
    """(action(s), resource) of every IAM grant of a function, a state machine or a role (raw template)."""
    properties = resource.get("Properties", {})
    found = []
    for policy in properties.get("Policies", []):
        if not isinstance(policy, dict):
            continue
        if "SQSSendMessagePolicy" in policy:
            found.append(("sqs:SendMessage", policy["SQSSendMessagePolicy"]))
        if "SNSPublishMessagePolicy" in policy:
            found.append(("sns:Publish", policy["SNSPublishMessagePolicy"]))
        document = policy.get("PolicyDocument", policy)
        for statement in document.get("Statement", []):
            if statement.get("Effect") == "Allow":
                found.append((statement["Action"], statement.get("Resource")))
    return found


def test_every_principal_the_template_lets_send_is_named_by_the_deny():
    """An IAM grant added for a new sender must be added to the queue's or topic's policy too."""
    check_every_sender_is_named_by_the_deny(Stack.load(parameters=EVERYTHING).template["Resources"])


def check_every_sender_is_named_by_the_deny(resources: dict[str, Any],
                                            senders_of: dict[str, tuple[str, list[str]]] = SENDERS) -> None:
    """Every principal these template resources let send to a queue or topic is one of its senders."""
    for name, resource in resources.items():
        role = name if resource["Type"] == "AWS::IAM::Role" else f"{name}Role"
        for actions, target in _statements(resource):
            actions = actions if isinstance(actions, list) else [actions]
            text = json.dumps(target)
            for queue, (key, senders) in senders_of.items():
                kind = "sqs:SendMessage" if "Queue" in queue else "sns:Publish"
                if any(a in (kind, kind.split(":")[0] + ":*", "*") for a in actions) and re.search(rf'"{queue}[".]', text):
                    assert key == "aws:PrincipalArn" and role in senders, f"{name} may send to {queue}"


# ------------------------------------------------------------- Deny statements spare the services
#: Resource types whose documents are resource policies: type -> where its statements are.
RESOURCE_POLICIES: dict[str, tuple[str] | None] = {
    "AWS::SQS::QueuePolicy": ("PolicyDocument",),
    "AWS::SNS::TopicPolicy": ("PolicyDocument",),
    "AWS::S3::BucketPolicy": ("PolicyDocument",),
    "AWS::Events::EventBusPolicy": ("Statement",),  # one statement, not a document
    "AWS::Events::EventBus": ("Policy",),
    "AWS::Lambda::Permission": None,  # an Allow, never a Deny
}
EVERY_POLICY = {**EVERYTHING, "BusPublisherArns": "arn:aws:iam::123456789012:role/monitoring",
                "ZendeskSubdomain": "acme", "ZendeskApiSecretName": "zendesk-api"}


def deny_statements(stack: Stack) -> list[tuple[str, str, dict[str, Any], list[dict[str, Any]]]]:
    """(resource, Sid or #index, statement, the policy's statements) of every Deny in the
    template's resource policies (a bus's chained statements are one policy)."""
    found = []
    for logical_id, spec in stack.resources.items():
        if spec["Type"] not in RESOURCE_POLICIES:
            assert not spec["Type"].endswith("Policy") or spec["Type"] in ("AWS::ApplicationAutoScaling::ScalingPolicy",), (
                f"{logical_id}: a resource policy type this test does not read ({spec['Type']})")
            continue
        where = RESOURCE_POLICIES[spec["Type"]]
        properties = stack.resolve(stack.properties(logical_id))
        document = properties.get(where[0]) if where else None
        if not document:
            continue
        document = json.loads(document) if isinstance(document, str) else document
        if spec["Type"] == "AWS::Events::EventBusPolicy":
            bus = next(b for b in stack.of_type("AWS::Events::EventBus") if stack.ref(b) == properties["EventBusName"])
            policy, statements = stack.bus_policy(bus)["Statement"], [document]
        else:
            policy = statements = document["Statement"] if isinstance(document["Statement"], list) else [document["Statement"]]
        for index, statement in enumerate(statements):
            if statement["Effect"] == "Deny":
                sid = statement.get("Sid") or properties.get("StatementId") or f"#{index}"
                found.append((logical_id, sid, statement, policy))
    return found


def _values(condition: dict[str, Any], operators: tuple[str, ...], key: str) -> list[str]:
    return [v for op in operators for v in (lambda x: x if isinstance(x, list) else [x])(condition.get(op, {}).get(key, []))]


def spares_service_deliveries(statement: dict[str, Any], policy: list[dict[str, Any]]) -> bool:
    """Whether a Deny leaves the services' own deliveries alone. What counts:

    - `Null: {aws:PrincipalArn: "false"}` with `BoolIfExists` (or `Bool`) `{aws:PrincipalIsAWSService:
      "false"}`: the Deny binds only a request that carries a principal ARN and whose principal is
      no AWS service. A request with no principal (SQS moving a failed message to its dead-letter
      queue, if AWS evaluates the queue's policy for that move at all: it does not document it) and
      a service principal's delivery (EventBridge to a DLQ) are outside it; a service still needs
      the policy's Allow to deliver, which names it and its source.
    - A Deny keyed on the delivering service's source (`ArnNotEquals`/`ArnNotLike` `aws:SourceArn`)
      that exempts every source the policy's Allow admits for a service principal (the alarm topics:
      CloudWatch for this account's alarms; the escalation topic: the escalation rules). A service
      sets aws:SourceArn on its own deliveries; a principal cannot.
    - `Bool: {aws:SecureTransport: "false"}` alone: the Deny binds plaintext requests only, and AWS
      services deliver over TLS.
    """
    condition = statement.get("Condition", {})
    principal_present = condition.get("Null", {}).get("aws:PrincipalArn") == "false"
    not_a_service = "false" in (condition.get("BoolIfExists", {}).get("aws:PrincipalIsAWSService"),
                                condition.get("Bool", {}).get("aws:PrincipalIsAWSService"))
    plaintext_only = condition == {"Bool": {"aws:SecureTransport": "false"}}
    exempt = _values(condition, ("ArnNotEquals", "ArnNotLike"), "aws:SourceArn")
    admitted = [source for allow in policy if allow["Effect"] == "Allow" and "Service" in allow.get("Principal", {})
                for source in _values(allow.get("Condition", {}), ("ArnEquals", "ArnLike"), "aws:SourceArn")]
    keyed_on_the_source = bool(exempt) and bool(admitted) and all(
        any(fnmatch.fnmatchcase(source, pattern) for pattern in exempt) for source in admitted)
    return (principal_present and not_a_service) or keyed_on_the_source or plaintext_only


@pytest.mark.parametrize("parameters", [{"ExistingEndpointName": "decision-endpoint"}, EVERY_POLICY],
                         ids=["defaults", "every-option"])
def test_every_deny_in_a_resource_policy_spares_the_services_own_deliveries(parameters):
    """Each of the template's Deny statements (queue, topic, bucket and bus policies) binds only
    principals that are not AWS services: an unconditional Deny on a dead-letter queue could
    refuse SQS's own redrive, and one on a topic or DLQ EventBridge's or CloudWatch's delivery."""
    stack = Stack.load(parameters=parameters)
    denies = deny_statements(stack)
    assert len(denies) >= 15
    offenders = [f"{resource} {sid}" for resource, sid, statement, policy in denies
                 if not spares_service_deliveries(statement, policy)]
    assert offenders == [], f"Deny statements that could refuse a service's own delivery: {offenders}"


def test_a_deny_that_binds_the_services_too_is_named():
    stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})
    (statement,) = stack.template["Resources"]["TeamDeadLetterQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    del statement["Condition"]  # the shape it had: every sender refused, SQS's own move not spared
    bus = stack.template["Resources"]["DecisionBusOnlyThisAccount"]["Properties"]["Statement"]
    del bus["Condition"]["Null"]
    escalation = stack.template["Resources"]["EscalationTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    escalation[1]["Condition"]["ArnNotEquals"]["aws:SourceArn"].pop(0)  # a rule the Allow admits, no longer exempt
    offenders = {(resource, sid) for resource, sid, s, policy in deny_statements(stack)
                 if not spares_service_deliveries(s, policy)}
    assert offenders == {("TeamDeadLetterQueuePolicy", "NoSenderOnlySqsRedrive"),
                         ("DecisionBusOnlyThisAccount", "only-this-account"),
                         ("EscalationTopicPolicy", "OnlyTheEscalationRules")}
