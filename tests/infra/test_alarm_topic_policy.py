"""Who may publish to IncidentAlarmTopic. The incident intake reads what arrives there as
CloudWatch's alarm notification (an "OK" resolves the alarm's open incident and closes its
review), so the topic policy lets only CloudWatch publish, for this account's alarms in this
Region, and denies every other publisher outright: an account principal whose IAM policy allows
sns:Publish (the forger of an "OK") included. moto keeps a topic's policy but does not enforce it,
so the policy SNS holds (set from the template, read back) is evaluated here by IAM's rules for
the operators it uses."""

from __future__ import annotations

import fnmatch
import json

import boto3
import pytest
from moto import mock_aws

from local.cloudformation import Stack

ACCOUNT, REGION = "123456789012", "us-east-1"
OUR_ALARM = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:payments-api-5xx"


def _matches(operator: str, actual: str | None, expected: str | list[str]) -> bool:
    """One IAM condition operator (missing key: false for a positive operator, true for a negated one)."""
    wanted = expected if isinstance(expected, list) else [expected]
    negated = operator in ("StringNotEquals", "ArnNotLike", "ArnNotEquals")
    if actual is None:
        return negated
    if operator in ("StringEquals", "StringNotEquals", "ArnEquals", "ArnNotEquals"):
        hit = actual in wanted
    elif operator in ("ArnLike", "ArnNotLike", "StringLike"):
        hit = any(fnmatch.fnmatchcase(actual, w) for w in wanted)
    else:
        raise AssertionError(f"operator {operator} is not evaluated here: extend the test")
    return not hit if negated else hit


def _statement_applies(statement: dict, principal: tuple[str, str], action: str, topic: str, context: dict) -> bool:
    who = statement["Principal"]
    if who != "*":
        (kind, names), = who.items()
        if principal not in {(kind, n) for n in (names if isinstance(names, list) else [names])}:
            return False
    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    if not any(fnmatch.fnmatchcase(action, a) for a in actions) or statement["Resource"] != topic:
        return False
    return all(_matches(op, context.get(key), value)
               for op, keys in statement.get("Condition", {}).items() for key, value in keys.items())


def decide(policy: dict, principal: tuple[str, str], action: str, topic: str, context: dict) -> str:
    """'deny' (an explicit Deny: nothing allows it), 'allow', or 'iam' (the policy is silent: an
    account principal's own IAM policy decides, a service or another account is refused)."""
    applying = [s["Effect"] for s in policy["Statement"] if _statement_applies(s, principal, action, topic, context)]
    return "deny" if "Deny" in applying else "allow" if "Allow" in applying else "iam"


@pytest.fixture
def topic_policy():
    stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"}, region=REGION, account_id=ACCOUNT)
    (policy_id,) = [r for r in stack.of_type("AWS::SNS::TopicPolicy")
                    if stack.resolve(stack.properties(r))["Topics"] == [stack.ref("IncidentAlarmTopic")]]
    document = stack.resolve(stack.properties(policy_id))["PolicyDocument"]
    with mock_aws():
        sns = boto3.client("sns", region_name=REGION)
        topic = sns.create_topic(Name=stack.physical_name("IncidentAlarmTopic"))["TopicArn"]
        assert topic == stack.ref("IncidentAlarmTopic")
        sns.set_topic_attributes(TopicArn=topic, AttributeName="Policy", AttributeValue=json.dumps(document))
        yield topic, json.loads(sns.get_topic_attributes(TopicArn=topic)["Attributes"]["Policy"])


def test_this_accounts_alarms_may_publish(topic_policy):
    topic, policy = topic_policy
    context = {"aws:SourceArn": OUR_ALARM, "aws:SourceAccount": ACCOUNT}
    assert decide(policy, ("Service", "cloudwatch.amazonaws.com"), "sns:Publish", topic, context) == "allow"


@pytest.mark.parametrize("principal, context", [
    # the forger: a user or role of this account whose IAM policy allows sns:Publish
    (("AWS", f"arn:aws:iam::{ACCOUNT}:user/mallory"), {"aws:PrincipalAccount": ACCOUNT}),
    (("AWS", f"arn:aws:iam::{ACCOUNT}:root"), {"aws:PrincipalAccount": ACCOUNT}),
    (("AWS", f"arn:aws:sts::{ACCOUNT}:assumed-role/deploy/ci"), {"aws:PrincipalAccount": ACCOUNT}),
    # another account's alarm, an alarm of another Region, another service of this account
    (("Service", "cloudwatch.amazonaws.com"), {"aws:SourceArn": OUR_ALARM.replace(ACCOUNT, "999999999999"),
                                               "aws:SourceAccount": "999999999999"}),
    (("Service", "cloudwatch.amazonaws.com"), {"aws:SourceArn": OUR_ALARM.replace(REGION, "eu-west-1"),
                                               "aws:SourceAccount": ACCOUNT}),
    (("Service", "events.amazonaws.com"), {"aws:SourceArn": f"arn:aws:events:{REGION}:{ACCOUNT}:rule/any",
                                           "aws:SourceAccount": ACCOUNT}),
], ids=["account-user", "account-root", "account-role", "other-account-alarm", "other-region-alarm", "eventbridge"])
def test_every_other_publisher_is_denied_outright(topic_policy, principal, context):
    topic, policy = topic_policy
    assert decide(policy, principal, "sns:Publish", topic, context) == "deny"


@pytest.mark.parametrize("action", ["sns:SetTopicAttributes", "sns:GetTopicAttributes", "sns:Subscribe",
                                    "sns:Unsubscribe", "sns:DeleteTopic"])
def test_the_stacks_own_roles_still_manage_the_topic(topic_policy, action):
    topic, policy = topic_policy
    deploy = ("AWS", f"arn:aws:sts::{ACCOUNT}:assumed-role/cloudformation-deploy/session")
    assert decide(policy, deploy, action, topic, {"aws:PrincipalAccount": ACCOUNT}) == "iam"


def test_the_policy_goes_with_the_topic():
    off = Stack.load(parameters={"ExistingEndpointName": "e", "AlarmSnsSource": "false"})
    assert "IncidentAlarmTopic" not in off.resources and "IncidentAlarmTopicPolicy" not in off.resources
    on = Stack.load(parameters={"ExistingEndpointName": "e"})
    assert on.template["Resources"]["IncidentAlarmTopicPolicy"]["Condition"] == \
        on.template["Resources"]["IncidentAlarmTopic"]["Condition"]


def test_the_docs_give_the_same_policy_for_an_existing_topic():
    stack = Stack.load(parameters={"ExistingEndpointName": "e"})
    readme = (stack.template_dir / "docs" / "security.md").read_text()
    start = readme.index("--attribute-value '") + len("--attribute-value '")
    document = json.loads(readme[start:readme.index("'", start)])
    template = stack.resolve(stack.properties("IncidentAlarmTopicPolicy"))["PolicyDocument"]

    def placeholders(value: str) -> str:
        return (value.replace(stack.ref("IncidentAlarmTopic"), "arn:aws:sns:REGION:ACCOUNT:TOPIC")
                .replace(stack.region, "REGION").replace(stack.account_id, "ACCOUNT"))

    assert json.loads(placeholders(json.dumps(template))) == document
