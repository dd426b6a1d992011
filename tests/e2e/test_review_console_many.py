"""The review console's option picker in a real browser (headless Chromium through Playwright, as
tests/e2e/test_review_console.py drives it): a question with 150 options, answered by keyboard
only: the head's top suggestions listed first, typing filters, the arrows move, Enter chooses and
Enter submits; the item reaches its option's queue.

The 150-option policy (a synthetic head: option i reads the word `intentI`, tests/functions/
many_options.py) is installed beside the shipped policies in a policies folder of its own, which
the console function is pointed at (it resolves a record's policy by name, as deployed)."""

from __future__ import annotations

import hashlib
import json
import shutil
from contextlib import ExitStack
from typing import Iterator

import pytest

from decision_router.domain import policies as policies_module
from decision_router.domain.judging import build_record, model_entry
from decision_router.domain.model_requests import build_decisions
from decision_router.domain.policies import load_policy
from decision_router.items import parse_item
from local.console import LocalConsole, LocalTokens
from local.pipeline import LocalPipeline
from local.services import MotoServer, local_aws_environ, patched_environ
from tests.fakes.console_worlds import delivered, start, wait_for, waiting_reviews
from tests.functions.conftest import MODEL_INFO
from tests.functions.many_options import head_document, raw_policy
from tests.functions.test_many_options import signals_result

from . import test_review_console
from .conftest import UNUSED_ENDPOINT
from .test_review_console import CHROMIUM, Site, sign_in

page = test_review_console.page  # the browser page fixture: Chromium through Playwright

pytestmark = [pytest.mark.browser, pytest.mark.stack, pytest.mark.server,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium: make browser")]

OPTIONS = 150
TICKET = {"ticket_id": "T-150", "subject": "Which one?", "body": "Either intent42 or intent97, hard to say.",
          "customer": {"id": "C-9", "tier": "pro"}, "channel": "email", "created_at": "2026-12-01T12:00:00Z"}


@pytest.fixture
def policy_dir(tmp_path):
    """The shipped policies and heads, plus `many-intents` (150 options) with its head."""
    folder = tmp_path / "policies"
    shutil.copytree(policies_module.POLICY_DIR, folder)
    document = json.dumps(head_document(OPTIONS, model_sha256=MODEL_INFO.sha256, hidden_size=8)).encode()
    (folder / "heads" / "many-intents.intent.json").write_bytes(document)
    raw = raw_policy(OPTIONS, {"file": "heads/many-intents.intent.json", "sha256": hashlib.sha256(document).hexdigest()})
    (folder / "many-intents.json").write_text(json.dumps(raw))
    return folder


@pytest.fixture
def site(lambda_log, monkeypatch, policy_dir) -> Iterator[Site]:
    with ExitStack() as stack:
        moto = stack.enter_context(MotoServer())
        stack.enter_context(patched_environ(local_aws_environ(moto, UNUSED_ENDPOINT)))
        # The workflow's index writer reads the review's policy too (its SLA lane): installed for it.
        pipeline = stack.enter_context(LocalPipeline(log=lambda_log, policies={"ticket": str(policy_dir / "many-intents.json")}))
        console = stack.enter_context(LocalConsole(pipeline.stack, log=lambda_log, overrides={
            "decision_router.domain.policies.POLICY_DIR": policy_dir}))
        yield Site(pipeline, console)


def undecided(site: Site, policy_dir) -> object:
    """The record the real routing code builds when the head splits between intent42 and intent97."""
    policy = load_policy(policy_dir / "many-intents.json")
    item = parse_item("ticket", TICKET)
    (decision,) = build_decisions(policy, item)
    entry = model_entry(policy.questions[0], signals_result([0.0] * 8), decision.state)
    env = site.stack.function_environment("TicketIntakeFunction")
    record = build_record(policy, item, [entry], destinations=json.loads(env["DESTINATION_QUEUES"]),
                          review_timeout_seconds=3600)
    assert record.route == "review" and entry.option_id in ("intent42", "intent97")
    return record


def test_a_reviewer_finds_one_of_150_options_by_typing_and_arrows_and_it_reaches_its_queue(site, page, policy_dir):
    name = start(site.stack, undecided(site, policy_dir))
    wait_for(lambda: waiting_reviews(site.stack) == 1, "the review request")
    sign_in(page, site)
    page.click(f'tr[data-name="{name}"] a')
    page.wait_for_selector("fieldset.picker")

    # The filter box has the focus; all 150 options are listed, the head's two candidates first.
    assert page.evaluate("document.activeElement.id") == "pick-intent"
    options = page.locator(".pick-option")
    assert options.count() == OPTIONS
    first_two = [options.nth(i).get_attribute("data-option") for i in range(2)]
    assert sorted(first_two) == ["intent42", "intent97"]
    assert "150 options, best first" in page.inner_text(".pick-count")
    suggested = page.locator(".pick-option:has(input:checked)").get_attribute("data-option")
    assert suggested == first_two[0], "the suggestion is preselected and listed first"

    # Typing filters: "number 11" keeps intent11 and intent110 … intent119, in ranked order.
    page.keyboard.type("number 11")
    visible = page.locator(".pick-option:visible")
    assert visible.count() == 11
    assert "11 of 150 match" in page.inner_text(".pick-count")
    assert visible.first.get_attribute("data-option") == "intent11"
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowDown")
    assert page.locator(".pick-option.active").get_attribute("data-option") == "intent111"
    page.keyboard.press("Enter")  # chooses, and moves to Submit
    assert page.is_checked('input[name="q-intent"][value="intent111"]')
    assert "Chosen: intent111 → account-access" in page.inner_text(".pick-chosen")
    assert page.evaluate("document.activeElement.id") == "submit"
    page.keyboard.press("Enter")

    page.locator("#outcome[data-target='account-access']").wait_for()
    assert [m["item_id"] for m in delivered(site.stack.ref("AccountAccessQueue"))] == ["T-150"]
    example = site.pipeline.labelled_example("many-intents", "T-150")
    assert json.loads(example["answers"]) == {"intent": "intent111"}
    assert example["reviewer"] == LocalTokens.sub_of("alice@example.com")
    assert page.problems == []


def test_escape_clears_the_filter_and_a_filter_matching_nothing_chooses_nothing(site, page, policy_dir):
    name = start(site.stack, undecided(site, policy_dir))
    wait_for(lambda: waiting_reviews(site.stack) == 1, "the review request")
    sign_in(page, site)
    page.click(f'tr[data-name="{name}"] a')
    page.wait_for_selector("fieldset.picker")
    before = page.locator(".pick-option:has(input:checked)").get_attribute("data-option")

    page.keyboard.type("no such intent")
    assert page.locator(".pick-option:visible").count() == 0
    page.keyboard.press("Enter")  # nothing shown: nothing chosen, the form is not sent
    assert page.locator(".pick-option:has(input:checked)").get_attribute("data-option") == before
    assert page.locator("#outcome").is_hidden()
    page.keyboard.press("Escape")  # clears the filter, stays on the item
    assert page.locator(".pick-option:visible").count() == OPTIONS
    assert page.input_value("#pick-intent") == "" and page.locator("fieldset.picker").is_visible()
    page.keyboard.press("Escape")  # on an empty filter: back to the list, as anywhere on the page
    page.wait_for_selector(f'tr[data-name="{name}"]')
    assert page.evaluate("location.hash") == "#/reviews"
    assert page.problems == []
