"""Every queue and topic the stack owns refuses senders other than its own (template.yaml).

moto stores an SQS queue's or an SNS topic's policy but does not enforce it, so the documents are
read from the template: each AWS::SQS::Queue and AWS::SNS::Topic has a policy with a Deny on
sending that names its senders, and every principal the template allows to send to it (its IAM
statements) is one of them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from local.cloudformation import Stack

ROUTED = ["BillingQueue", "AccountAccessQueue", "TechnicalSupportQueue", "ProductHelpQueue", "SalesQueue",
          "PlatformOncallQueue", "DataOncallQueue", "SecurityOncallQueue", "AppOncallQueue", "ReviewQueue",
          "EscalationQueue"]
ALARMS = ["ItemEscalatedRule", "ReviewOverdueRule"]
#: Each queue and topic: who may send (the role principals, or the rules as aws:SourceArn; none: only SQS moves
#: messages there). The ticket queue's senders with TicketQueueSenderArns set (see the test of its default).
SENDERS: dict[str, tuple[str, list[str]]] = {
    "TicketQueue": ("aws:PrincipalArn", ["TicketWebhookFunctionRole"]),
    "TicketDeadLetterQueue": ("aws:PrincipalArn", ["TicketIntakeFunctionRole", "TicketWebhookFunctionRole"]),
    "IncidentDeadLetterQueue": ("aws:PrincipalArn", ["IncidentIntakeFunctionRole"]),
    **{queue: ("aws:PrincipalArn", ["RoutingStateMachineRole"]) for queue in ROUTED},
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
    if "Condition" not in deny:
        return "none", []
    # The key that names who may send (a BoolIfExists beside it lets AWS services through).
    ((key, values),) = [(key, values) for keys in deny["Condition"].values() for key, values in keys.items()
                        if key in ("aws:PrincipalArn", "aws:SourceArn", "aws:PrincipalAccount")]
    return key, sorted(values if isinstance(values, list) else [values])


@pytest.mark.parametrize("parameters", [{"ExistingEndpointName": "decision-endpoint"}, EVERYTHING],
                         ids=["defaults", "every-option"])
def test_every_queue_and_topic_denies_sending_to_all_but_its_senders(parameters):
    stack = Stack.load(parameters=parameters)
    owned = stack.of_type("AWS::SQS::Queue", "AWS::SNS::Topic")
    assert set(owned) <= set(SENDERS), f"a queue or topic without its senders here: {set(owned) - set(SENDERS)}"
    for logical_id in owned:
        key, senders = SENDERS[logical_id]
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
    assert deny["Condition"] == {"StringNotEquals": {"aws:PrincipalAccount": stack.account_id}}


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
    template = Stack.load(parameters=EVERYTHING).template["Resources"]
    for name, resource in template.items():
        role = name if resource["Type"] == "AWS::IAM::Role" else f"{name}Role"
        for actions, target in _statements(resource):
            actions = actions if isinstance(actions, list) else [actions]
            text = json.dumps(target)
            for queue, (key, senders) in SENDERS.items():
                kind = "sqs:SendMessage" if "Queue" in queue else "sns:Publish"
                if any(a in (kind, kind.split(":")[0] + ":*", "*") for a in actions) and re.search(rf'"{queue}[".]', text):
                    assert key == "aws:PrincipalArn" and role in senders, f"{name} may send to {queue}"
