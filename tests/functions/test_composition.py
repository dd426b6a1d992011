"""The one way a function's wiring is built (decision_router/composition.py), through the wirings
the functions use: nothing made before it is used, each part made once from the environment,
a part handed in kept through `reset`, and a part that does not exist refused by name. No AWS
call: the adapters make their clients on first use, and nothing here uses one."""

from __future__ import annotations

import pytest

from decision_router.adapters.queues import Queue
from decision_router.composition import CompositionRoot
from decision_router.config import ConfigError, Settings
from decision_router.intake.wiring import Wiring as IntakeWiring
from review.wiring import Wiring as ReviewWiring
from review_console.wiring import Wiring as ConsoleWiring
from ticket_webhook.wiring import Wiring as WebhookWiring

QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/tickets"
ROOTS = [IntakeWiring, WebhookWiring, ReviewWiring, ConsoleWiring]


@pytest.mark.parametrize("root", ROOTS, ids=lambda root: root.__module__)
def test_every_wiring_is_made_without_its_environment_and_reads_it_at_first_use(monkeypatch, root):
    monkeypatch.setenv("DESTINATION_QUEUES", "not JSON")
    wiring = root()  # nothing read yet: a handler module imports, and makes its wiring, without its environment

    assert issubclass(root, CompositionRoot) and "settings" in root.parts()
    with pytest.raises(ConfigError, match="DESTINATION_QUEUES"):
        _ = wiring.settings


def test_a_part_never_used_is_never_made():
    wiring = IntakeWiring(Settings.from_env({"TICKET_QUEUE_URL": QUEUE}))

    assert wiring.ticket_queue.url == QUEUE  # no DECISION_ENDPOINT_NAME: the endpoint would refuse to be made
    with pytest.raises(ConfigError, match="DECISION_ENDPOINT_NAME"):
        _ = wiring.endpoint


def test_reset_makes_each_part_again_from_the_environment_as_it_is_then(monkeypatch):
    monkeypatch.setenv("TICKET_QUEUE_URL", QUEUE)
    wiring = WebhookWiring()
    first = wiring.tickets
    monkeypatch.setenv("TICKET_QUEUE_URL", QUEUE + "-2")

    assert wiring.tickets is first  # kept for the execution environment
    wiring.reset()
    assert isinstance(wiring.tickets, Queue) and wiring.tickets.url == QUEUE + "-2"


def test_reset_keeps_the_parts_handed_in_and_forgets_one_assigned_since():
    given, assigned = Queue(QUEUE), Queue(QUEUE + "-assigned")
    wiring = WebhookWiring(Settings.from_env({"DEAD_LETTER_QUEUE_URL": QUEUE + "-dlq"}), tickets=given)
    wiring.dead_letters = assigned

    wiring.reset()

    assert wiring.tickets is given
    assert wiring.dead_letters is not assigned and wiring.dead_letters.url == QUEUE + "-dlq"


def test_a_part_handed_in_that_the_wiring_does_not_have_is_refused_by_name():
    with pytest.raises(TypeError, match=r"no part named endpoit; its parts: .*\bendpoint\b"):
        IntakeWiring(endpoit=object())
