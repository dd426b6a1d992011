"""Who may put events on the decision bus. The rules trust an incident's `severity` and
`source` (sev1 pages), and the escalation rules trust `source: decision-router`, so the bus
policy (the chained AWS::Events::EventBusPolicy statements in template.yaml, read whole by
`Stack.bus_policy`) decides who can page the on-call.

moto stores the bus policy (`Stack.create` puts it) but does not enforce it: the template's
statements are evaluated here by a small evaluator of the condition operators they use
(explicit Deny wins, as in IAM)."""

from __future__ import annotations

import fnmatch
import json

import pytest

from local.cloudformation import Stack

ACCOUNT = "123456789012"
OTHER_ACCOUNT = "210987654321"
MONITORING = f"arn:aws:iam::{ACCOUNT}:role/monitoring-publisher"
SOMEONE = f"arn:aws:iam::{ACCOUNT}:role/some-app"


def bus_statements(stack: Stack) -> list[dict]:
    for logical_id in stack.of_type("AWS::Events::EventBusPolicy"):
        assert stack.resolve(stack.properties(logical_id))["EventBusName"] == stack.ref("DecisionBus"), logical_id
    policy = stack.bus_policy("DecisionBus")
    assert policy is not None
    return policy["Statement"]


def _matches(operator: str, actual: str | None, expected) -> bool:
    values = expected if isinstance(expected, list) else [expected]
    if operator == "Null":  # "true": the key is absent; "false": it is present
        return (actual is None) == (str(values[0]).lower() == "true")
    if operator.endswith("IfExists") and actual is None:
        return True
    operator = operator.removesuffix("IfExists")
    if actual is None:  # a key the request lacks: only the negated operators match
        return operator.startswith(("StringNot", "ArnNot"))
    if operator == "Bool":
        return actual.lower() in [str(v).lower() for v in values]
    if operator == "StringEquals":
        return actual in values
    if operator == "StringNotEquals":
        return actual not in values
    if operator in ("ArnLike", "ArnEquals"):
        return any(fnmatch.fnmatchcase(actual, v) for v in values)
    if operator in ("ArnNotLike", "ArnNotEquals"):
        return not any(fnmatch.fnmatchcase(actual, v) for v in values)
    raise AssertionError(f"the evaluator does not know {operator}")


def denied(statements: list[dict], *, principal: str, source: str, bus_arn: str) -> bool:
    """Whether an explicit Deny in the bus policy refuses this PutEvents call (of an IAM
    principal: its ARN and account are in the request, and it is no AWS service)."""
    context = {"aws:PrincipalArn": principal, "aws:PrincipalAccount": principal.split(":")[4], "events:source": source,
               "aws:PrincipalIsAWSService": "false"}
    for statement in statements:
        if statement["Effect"] != "Deny" or "events:PutEvents" not in _list(statement["Action"]):
            continue
        assert statement["Principal"] == "*" and statement["Resource"] == bus_arn
        if all(_matches(op, context.get(key), value) for op, pairs in statement.get("Condition", {}).items()
               for key, value in pairs.items()):
            return True
    return False


def _list(value) -> list:
    return value if isinstance(value, list) else [value]


def workflow_role(stack: Stack) -> str:
    return stack.get_att("RoutingStateMachineRole", "Arn")


def console_role(stack: Stack) -> str:
    return stack.get_att("ReviewConsoleFunctionRole", "Arn")


@pytest.fixture
def default_stack() -> Stack:
    return Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", "OnCallEmail": "oncall@example.com"})


def test_only_this_account_may_put_events_on_the_bus(default_stack):
    statements = bus_statements(default_stack)
    bus = default_stack.get_att("DecisionBus", "Arn")
    assert denied(statements, principal=f"arn:aws:iam::{OTHER_ACCOUNT}:role/x", source="monitoring", bus_arn=bus)
    assert not denied(statements, principal=SOMEONE, source="monitoring", bus_arn=bus)


def test_only_the_workflow_may_emit_decision_router_events(default_stack):
    """Otherwise anyone in the account could page the on-call with a forged Item Escalated."""
    statements = bus_statements(default_stack)
    bus = default_stack.get_att("DecisionBus", "Arn")
    source = default_stack.template["Mappings"]["Events"]["Workflow"]["Source"]
    assert denied(statements, principal=SOMEONE, source=source, bus_arn=bus)
    assert not denied(statements, principal=workflow_role(default_stack), source=source, bus_arn=bus)


def test_only_the_console_function_may_emit_the_review_sla_sweeps_escalations(default_stack):
    """The escalation rule pages on the sweep's source too: nobody else may forge one, and the
    sweep cannot speak for the workflow."""
    statements = bus_statements(default_stack)
    bus = default_stack.get_att("DecisionBus", "Arn")
    sources = default_stack.template["Mappings"]["Events"]
    sweep, workflow = sources["ReviewSla"]["Source"], sources["Workflow"]["Source"]
    assert denied(statements, principal=SOMEONE, source=sweep, bus_arn=bus)
    assert denied(statements, principal=workflow_role(default_stack), source=sweep, bus_arn=bus)
    assert not denied(statements, principal=console_role(default_stack), source=sweep, bus_arn=bus)
    assert denied(statements, principal=console_role(default_stack), source=workflow, bus_arn=bus)


def test_named_publishers_are_the_only_ones_who_may_report_incidents():
    stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", "OnCallEmail": "oncall@example.com",
                                   "BusPublisherArns": MONITORING})
    statements = bus_statements(stack)
    bus = stack.get_att("DecisionBus", "Arn")
    assert denied(statements, principal=SOMEONE, source="monitoring", bus_arn=bus)
    assert not denied(statements, principal=MONITORING, source="monitoring", bus_arn=bus)
    assert not denied(statements, principal=workflow_role(stack), source="decision-router", bus_arn=bus)
    assert denied(statements, principal=MONITORING, source="decision-router", bus_arn=bus)
    sweep = stack.template["Mappings"]["Events"]["ReviewSla"]["Source"]
    assert not denied(statements, principal=console_role(stack), source=sweep, bus_arn=bus)
    assert denied(statements, principal=MONITORING, source=sweep, bus_arn=bus)


# ------------------------------------------------------------------ one writer of the policy at a time
#: Every option on: BusPublisherArns adds the one conditional statement.
EVERY_WRITER = {"ExistingEndpointName": "decision-endpoint", "OnCallEmail": "oncall@example.com",
                "BusPublisherArns": MONITORING}


def unordered_writers(stack: Stack) -> list[tuple[str, str, str]]:
    """(bus, writer, writer) of every two resources that could write one bus's policy at the same
    time. Each AWS::Events::EventBusPolicy rewrites the bus's whole policy document (read, add
    its statement, write), and CloudFormation creates, updates and deletes resources that do not
    depend on each other in parallel: two such writers must be ordered by DependsOn (directly or
    through others), and a bus that sets its own `Policy` must have no other writer."""
    found = []
    for bus in stack.of_type("AWS::Events::EventBus"):
        writers = stack.bus_policy_writers(bus)
        for i, first in enumerate(writers):
            for second in writers[i + 1:]:
                if bus in (first, second) or not (first in stack.depends_on(second, transitively=True)
                                                  or second in stack.depends_on(first, transitively=True)):
                    found.append((bus, first, second))
    return found


def test_each_bus_policy_is_written_by_one_resource_at_a_time():
    stack = Stack.load(parameters=EVERY_WRITER)
    assert len(stack.bus_policy_writers("DecisionBus")) == 5
    assert unordered_writers(stack) == []
    # in the order written, every statement the template declares, once
    sids = [s["Sid"] for s in stack.bus_policy("DecisionBus")["Statement"]]
    assert sids == [stack.properties(w)["StatementId"] for w in stack.bus_policy_writers("DecisionBus")]
    assert len(set(sids)) == len(sids)


def test_writers_left_to_run_in_parallel_are_named():
    stack = Stack.load(parameters=EVERY_WRITER)
    del stack.template["Resources"]["DecisionBusWebhookEventsOnlyFromTheWebhookFunction"]["DependsOn"]
    found = {frozenset(writers) for _, *writers in unordered_writers(stack)}
    webhook = "DecisionBusWebhookEventsOnlyFromTheWebhookFunction"
    assert {"DecisionBusOnlyThisAccount", webhook} in found
    assert {"DecisionBusWorkflowEventsOnlyFromTheWorkflow", webhook} in found
    assert {"DecisionBusReviewSlaEventsOnlyFromTheConsoleFunction", webhook} not in found  # still chained


@pytest.mark.stack
def test_the_stack_in_moto_holds_the_whole_bus_policy():
    import boto3
    from moto import mock_aws

    with mock_aws():
        stack = Stack.load(parameters=EVERY_WRITER).create()
        held = json.loads(boto3.client("events", region_name=stack.region).describe_event_bus(
            Name=stack.ref("DecisionBus"))["Policy"])
    assert held["Statement"] == stack.bus_policy("DecisionBus")["Statement"]
