"""`make queues` (local/destinations.py) on a copy of template.yaml: a targets map of new help-desk
groups becomes queues in the five places, and the copy passes what template.yaml passes (its
loader, cfn-lint, the queue-policy checks of test_resource_policies.py and the queue checks of
test_template_properties.py); a second run is a no-op, a target that cannot be a queue is refused
with nothing written, and the edited copy stood up in moto has each queue behind its
DESTINATION_QUEUES entry."""

from __future__ import annotations

import ast
import contextlib
import difflib
import io
import json
import shutil
from pathlib import Path

import boto3
import pytest
from cfnlint.api import ManualArgs, lint_file
from moto import mock_aws

from local import destinations
from local.cloudformation import REPO_ROOT, TEMPLATE_PATH, Stack
from local.template import StackTemplate, load_template
from tests.infra import test_resource_policies as resource_policies
from tests.infra import test_template_properties as template_properties

PARAMETERS = {"ExistingEndpointName": "decision-endpoint"}
#: Groups as a help desk names them, each routed to a target of its own name, two to queues the stack has.
GROUPS = {"IT Hardware": "it-hardware", "2nd line": "2nd-line", "Ticket": "ticket", "Network / VPN": "network-vpn",
          "Purchase Orders": "purchase-orders", "HR": "hr", "Facilities 3": "facilities-3", "Access": "access",
          "Billing": "billing", "*": "sales"}
#: The queue each new target gets: `ticket` clashes with the intake's ticket queue, `2nd-line` starts with a digit.
NEW = {"it-hardware": "ItHardwareQueue", "2nd-line": "Team2ndLineQueue", "ticket": "TicketTeamQueue",
       "network-vpn": "NetworkVpnQueue", "purchase-orders": "PurchaseOrdersQueue", "hr": "HrQueue",
       "facilities-3": "Facilities3Queue", "access": "AccessQueue"}


def copy_of_template(folder: Path) -> Path:
    """template.yaml and the ASL it names, copied into `folder`."""
    shutil.copy(TEMPLATE_PATH, folder / "template.yaml")
    shutil.copytree(REPO_ROOT / "statemachine", folder / "statemachine")
    return folder / "template.yaml"


def queues(*argv: str) -> tuple[int, str, str]:
    """`python -m local.destinations ARGV`: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = destinations.main(list(argv))
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def edited(tmp_path_factory) -> tuple[Path, str]:
    """A copy of template.yaml after `make queues TARGETS=<GROUPS>`, and what the command printed."""
    folder = tmp_path_factory.mktemp("queues")
    path = copy_of_template(folder)
    (folder / "targets.json").write_text(json.dumps(GROUPS))
    status, out, err = queues("--targets", str(folder / "targets.json"), "--template", str(path))
    assert status == 0, err
    return path, out


def test_each_new_group_gets_its_queue_in_the_five_places(edited):
    path, out = edited
    stack = StackTemplate.load(path, parameters=PARAMETERS)
    routed = json.loads(stack.function_environment("TicketIntakeFunction")["DESTINATION_QUEUES"])
    original = json.loads(StackTemplate.load(parameters=PARAMETERS).function_environment("TicketIntakeFunction")
                          ["DESTINATION_QUEUES"])
    assert routed == {**original, **{target: stack.ref(name) for target, name in NEW.items()}}
    resources = stack.template["Resources"]
    deliver = [s for p in resources["RoutingStateMachine"]["Properties"]["Policies"] for s in p.get("Statement", [])
               if s.get("Sid") == "DeliverAndEscalate"]
    (only_the_workflow,) = resources["RoutedQueuesPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    for target, name in NEW.items():
        assert resources[name] == resources["SalesQueue"], name
        assert stack.ref(name) in stack.resolve(resources["RoutedQueuesPolicy"]["Properties"]["Queues"])
        assert stack.get_att(name, "Arn") in stack.resolve(only_the_workflow["Resource"])
        assert stack.get_att(name, "Arn") in stack.resolve(deliver[0]["Resource"])
        assert stack.outputs()[f"{name}Url"] == stack.ref(name)
        assert f"{target} → {name}" in out
    # what it says: the queues added, those the map names that were there, what to run next
    assert "added 8 queue(s)" in out and "billing → BillingQueue" in out and "sales → SalesQueue" in out
    assert "sam build && sam deploy" in out and "make demo POLICY=" in out


def test_the_edit_only_inserts_lines_and_keeps_every_comment_in_its_place(edited):
    before = TEMPLATE_PATH.read_text().splitlines()
    after = edited[0].read_text().splitlines()
    changes = [op for op in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes() if op[0] != "equal"]
    assert {op[0] for op in changes} == {"insert", "replace"}
    # the one line changed: DESTINATION_QUEUES' last entry, which gets the comma before the new ones
    ((_, start, end, _, _),) = [op for op in changes if op[0] == "replace"]
    assert before[start:end] == ['          "app-oncall": "${AppOncallQueue}"}']
    # each queue: its resource's 8 lines, a line in each of the 3 lists and an output; DESTINATION_QUEUES two a line
    assert len(after) - len(before) == len(NEW) * (8 + 3 + 1) + len(NEW) // 2
    assert [line for line in after if line.lstrip().startswith("#")] == [line for line in before if line.lstrip().startswith("#")]


def test_cfn_lint_passes_on_the_edited_template(edited):
    matches = lint_file(edited[0], config=ManualArgs(regions=["us-east-1"]))
    assert [str(m) for m in matches] == []


def test_the_queue_policy_checks_hold_for_the_new_queues(edited):
    stack = Stack.load(edited[0], parameters=PARAMETERS)
    senders = {**resource_policies.SENDERS, **{name: ("aws:PrincipalArn", resource_policies.TEAM_SENDERS) for name in NEW.values()}}
    resource_policies.check_senders(stack, PARAMETERS, senders)
    resource_policies.check_every_sender_is_named_by_the_deny(stack.template["Resources"], senders)
    template_properties.test_every_queue_is_encrypted_and_every_work_queue_has_a_dead_letter_queue(stack)


def test_a_second_run_changes_nothing_and_says_so(edited):
    path = edited[0]
    text = path.read_bytes()
    status, out, _ = queues("--target", ",".join(NEW), "--template", str(path))
    assert status == 0 and path.read_bytes() == text
    assert "every target has its queue already, nothing to add" in out and "ticket → TicketTeamQueue" in out


@pytest.mark.parametrize(("targets", "why"), [
    ("it desk,hr", "no queue can be made for 'it desk': a target is lower-case letters, digits and '-'"),
    ("IT,hr", "no queue can be made for 'IT'"),
    ("-hr", "no queue can be made for '-hr'"),
    ("x" * 65, "64 characters at most"),
    ("it-desk,it--desk", "it--desk, it-desk would share the queue name ItDeskQueue"),
    (",".join(f"help-desk-group-{n}" for n in range(12)),
     "with 12 more queues TicketWebhookFunction's environment would be about"),
], ids=["space", "capitals", "leading-dash", "too-long", "same-name", "past-lambda-4kb"])
def test_a_target_that_cannot_be_a_queue_is_refused_and_nothing_is_written(tmp_path, targets, why):
    path = copy_of_template(tmp_path)
    status, out, err = queues(f"--target={targets}", "--template", str(path))
    assert status == 2 and not out
    assert why in err and f"{path} unchanged" in err
    assert path.read_bytes() == TEMPLATE_PATH.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["statemachine", "template.yaml"]  # no copy left behind


def test_a_map_that_is_not_label_to_destination_is_refused(tmp_path):
    path = copy_of_template(tmp_path)
    (tmp_path / "map.json").write_text(json.dumps({"Hardware": ["it-hardware"]}))
    status, _, err = queues("--targets", str(tmp_path / "map.json"), "--template", str(path))
    assert status == 2 and "'Hardware' → ['it-hardware']: a destination key is non-empty text" in err


def test_a_dry_run_checks_and_writes_nothing(tmp_path):
    path = copy_of_template(tmp_path)
    status, out, _ = queues("--target", "it-hardware", "--template", str(path), "--dry-run")
    assert status == 0 and "would add 1 queue(s)" in out and "it-hardware → ItHardwareQueue" in out
    assert path.read_bytes() == TEMPLATE_PATH.read_bytes()


def test_the_destinations_are_read_without_the_moto_harness():
    """fit-history and the demo read template.yaml's destinations and resource ids with the
    template reader alone, and read what the moto harness's Stack read."""
    tree = ast.parse(Path(destinations.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {"moto", "boto3", "local.cloudformation", "local.deployment"} & imported
    stack = Stack.load(parameters={"ExistingEndpointName": "local-decision"})
    assert destinations.template_destinations() == sorted(json.loads(stack.function_environment("TicketIntakeFunction")
                                                                     ["DESTINATION_QUEUES"]))
    assert destinations.template_resources() == list(stack.template["Resources"]) == list(load_template()["Resources"])


@pytest.mark.stack
def test_the_edited_stack_in_moto_has_each_new_queue_behind_its_destination(edited):
    with mock_aws():
        stack = Stack.load(edited[0], parameters=PARAMETERS).create()
        sqs = boto3.client("sqs")
        routed = json.loads(stack.function_environment("TicketIntakeFunction")["DESTINATION_QUEUES"])
        dead_letter_arn = stack.get_att("TeamDeadLetterQueue", "Arn")
        for target, name in NEW.items():
            attributes = sqs.get_queue_attributes(QueueUrl=routed[target], AttributeNames=["All"])["Attributes"]
            assert json.loads(attributes["RedrivePolicy"])["deadLetterTargetArn"] == dead_letter_arn, target
            assert attributes["QueueArn"] == stack.get_att(name, "Arn")
            sqs.send_message(QueueUrl=routed[target], MessageBody=target)
            (message,) = sqs.receive_message(QueueUrl=routed[target])["Messages"]
            assert message["Body"] == target
