"""How to give a target (a destination key a policy option routes to) a queue of its own in
template.yaml: the text `make demo` and `make fit-history` print when a policy or a targets map
names a target the stack does not have.

The stack creates one SQS queue per team by hand (docs/destinations/team-queues.md): a target is
a queue resource, its entry in the functions' `DESTINATION_QUEUES`, the routing workflow's grant
to send to it (and the queue policy that lets only the workflow send), and the queue's URL output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: The queue every new team queue copies (encrypted, 14 days' retention, the team dead-letter queue).
MODEL_QUEUE = "SalesQueue"


def queue_resource(target: str, taken: Iterable[str] = ()) -> str:
    """The logical id of `target`'s queue: its words capitalised, then `Queue` ("it-hardware" →
    `ItHardwareQueue`); `TeamQueue` where that is another resource of the template already
    (a target `review` must not be mistaken for the `ReviewQueue`)."""
    words = "".join(word[:1].upper() + word[1:] for word in re.split(r"[^A-Za-z0-9]+", target) if word)
    words = words if words[:1].isalpha() else "Team" + words  # a logical id starts with a letter
    name = f"{words}Queue"
    return f"{words}TeamQueue" if name in set(taken) else name


def add_queue_steps(targets: Iterable[str], taken: Iterable[str] = ()) -> str:
    """What to edit in template.yaml, one numbered step at a time, so each of `targets` gets a
    queue of its own (`taken`: the template's logical ids, so a new name clashes with none)."""
    taken = set(taken)
    names = {target: queue_resource(target, taken) for target in sorted(set(targets))}
    pairs = ", ".join(f"{target} → {name}" for target, name in names.items())
    entries = ", ".join(f'"{target}": "${{{name}}}"' for target, name in names.items())
    refs = ", ".join(f"- !Ref {name}" for name in names.values())
    arns = ", ".join(f"- !GetAtt {name}.Arn" for name in names.values())
    outputs = ", ".join(f"{name}Url: {{Value: !Ref {name}}}" for name in names.values())
    return (f"to give each its own queue ({pairs}), edit template.yaml:"
            f"\n  (1) under Resources, in the `destinations` section next to {MODEL_QUEUE}, add each queue as a copy of "
            f"{MODEL_QUEUE};\n  (2) in Globals, Function, Environment, Variables, DESTINATION_QUEUES, add {entries};\n  "
            f"(3) under RoutedQueuesPolicy, add {refs} to Queues and {arns} to the Resource list of its "
            f"OnlyTheRoutingWorkflow statement;\n  (4) under RoutingStateMachine, add {arns} to the Resource "
            f"list of its DeliverAndEscalate statement;\n  (5) under Outputs, add {outputs} "
            f"(docs/destinations/team-queues.md).")


def template_resources() -> list[str]:
    """The logical ids of template.yaml's resources."""
    from local.cloudformation import Stack
    from local.deployment import ENDPOINT_NAME

    return list(Stack.load(parameters={"ExistingEndpointName": ENDPOINT_NAME}).template["Resources"])
