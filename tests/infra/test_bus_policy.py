"""Who may put events on the decision bus. The rules trust an incident's `severity` and
`source` (sev1 pages), and the escalation rules trust `source: decision-router`, so the bus
policy (AWS::Events::EventBusPolicy in template.yaml) decides who can page the on-call.

moto does not enforce bus policies: the template's statements are evaluated here by a small
evaluator of the condition operators they use (explicit Deny wins, as in IAM)."""

from __future__ import annotations

import fnmatch

import pytest

from local.cloudformation import Stack

ACCOUNT = "123456789012"
OTHER_ACCOUNT = "210987654321"
MONITORING = f"arn:aws:iam::{ACCOUNT}:role/monitoring-publisher"
SOMEONE = f"arn:aws:iam::{ACCOUNT}:role/some-app"


def bus_statements(stack: Stack) -> list[dict]:
    statements = []
    for logical_id in stack.of_type("AWS::Events::EventBusPolicy"):
        props = stack.resolve(stack.properties(logical_id))
        assert props["EventBusName"] == stack.ref("DecisionBus"), logical_id
        statements.append(props["Statement"])
    return statements


def _matches(operator: str, actual: str, expected) -> bool:
    values = expected if isinstance(expected, list) else [expected]
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
    """Whether an explicit Deny in the bus policy refuses this PutEvents call."""
    context = {"aws:PrincipalArn": principal, "aws:PrincipalAccount": principal.split(":")[4], "events:source": source}
    for statement in statements:
        if statement["Effect"] != "Deny" or "events:PutEvents" not in _list(statement["Action"]):
            continue
        assert statement["Principal"] == "*" and statement["Resource"] == bus_arn
        if all(_matches(op, context[key], value) for op, pairs in statement.get("Condition", {}).items()
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
