"""The review console in a real browser: headless Chromium (Debian's `chromium`, installed by
`make browser`) driven by Playwright, against the console as `make review` serves it (the local
gateway in front of the real handler, a moto server whose Step Functions runs the real workflow).

The pending items are decision records built by the real routing code from model answers with
chosen logits (as tests/functions/test_review_console.py does), so what goes to review, and why,
does not depend on the tiny embedded model."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Iterator

import boto3
import httpx
import pytest

from decision_router.adapters.precision_tally import PrecisionTally
from local.console import LocalConsole, LocalTokens
from local.pipeline import LocalPipeline
from local.services import MotoServer, local_aws_environ, patched_environ
from tests.fakes.console_worlds import delivered, start, status, wait_for, waiting_reviews
from tests.functions.test_review_console import (
    INCIDENT,
    SURE_TICKET,
    TICKET,
    UNSURE_INCIDENT,
    UNSURE_TICKET,
    decided,
    sampled_ticket,
)

from .conftest import UNUSED_ENDPOINT

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
XSS_TICKET = {**TICKET, "ticket_id": "T-666", "subject": "<script>window.__xss = 1</script> refund",
              "body": 'See <img src=x onerror="window.__xss = 2"> and <b>bold</b> text.'}

pytestmark = [pytest.mark.browser, pytest.mark.stack, pytest.mark.server,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium: make browser")]


class Site:
    def __init__(self, pipeline: LocalPipeline, console: LocalConsole):
        self.pipeline, self.console, self.stack = pipeline, console, pipeline.stack
        self.url = console.url


@pytest.fixture
def site(lambda_log, monkeypatch) -> Iterator[Site]:
    with ExitStack() as stack:
        moto = stack.enter_context(MotoServer())
        stack.enter_context(patched_environ(local_aws_environ(moto, UNUSED_ENDPOINT)))
        pipeline = stack.enter_context(LocalPipeline(log=lambda_log))
        console = stack.enter_context(LocalConsole(pipeline.stack, log=lambda_log))
        yield Site(pipeline, console)


@pytest.fixture
def page(tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.problems = []  # console errors (a CSP violation is one) and uncaught exceptions
        page.on("console", lambda m: m.type == "error" and page.problems.append(m.text))
        page.on("pageerror", lambda e: page.problems.append(str(e)))
        try:
            yield page
        finally:
            page.screenshot(path=str(tmp_path / "last-page.png"), full_page=True)
            browser.close()


def sign_in(page, site: Site, name: str = "alice@example.com") -> None:
    page.goto(site.url + "/")
    page.fill("#username", name)
    page.press("#username", "Enter")
    page.wait_for_selector("#reviewer:has-text('%s')" % name)


def pending(site: Site, *records) -> list[str]:
    names = [start(site.stack, record) for record in records]
    wait_for(lambda: waiting_reviews(site.stack) == len(records), "the review requests")
    return names


def test_a_reviewer_answers_by_keyboard_and_the_item_reaches_its_queue_with_the_reviewer_audited(site, page):
    ticket, incident = pending(site, decided(site.stack, "ticket", TICKET, UNSURE_TICKET),
                               decided(site.stack, "incident", INCIDENT, UNSURE_INCIDENT))
    sign_in(page, site)

    rows = page.locator("#review-rows tr")
    rows.first.wait_for()
    assert rows.count() == 2
    row = page.locator(f'tr[data-name="{ticket}"]')
    assert "queue: confidence" in row.inner_text() and "Charged twice" in row.inner_text()
    row.click()
    page.wait_for_selector("#questions fieldset")
    assert page.is_checked('input[name="q-queue"][value="billing"]'), "the suggestion is preselected"
    assert page.inner_text("#item-fields").count("Two charges of $49") == 1
    # the reason in one line; in full on request
    why = page.locator('details.why[data-why="queue"]')
    assert why.locator("summary").inner_text().startswith("why: letters → billing (conf ")
    assert not why.locator("dl").is_visible()
    why.locator("summary").click()
    full = why.locator("dl").inner_text()
    assert "billing-portal-to-billing: no match" in full and "confidence" in full and "< " in full
    assert "another model call" in full
    why.locator("summary").click()  # closed again; the keys below answer the question

    page.keyboard.press("3")  # the third option: technical_fault
    assert page.is_checked('input[name="q-queue"][value="technical_fault"]')
    page.keyboard.press("Enter")

    outcome = page.locator("#outcome[data-target]")
    outcome.wait_for()
    assert outcome.get_attribute("data-target") == "technical-support"
    assert "Delivered to technical-support" in outcome.inner_text() and "alice@example.com" in outcome.inner_text()
    assert status(site.stack, ticket) == "SUCCEEDED"
    assert [m["item_id"] for m in delivered(site.stack.ref("TechnicalSupportQueue"))] == ["T-77"]
    audit = boto3.client("dynamodb").get_item(TableName=site.stack.ref("AuditTable"), Key={
        "item_id": {"S": "T-77"}, "execution_name": {"S": ticket}})["Item"]
    assert audit["outcome"]["S"] == "reviewed"
    assert json.loads(audit["outcome_detail"]["S"])["reviewer"] == LocalTokens.sub_of("alice@example.com")

    # The list now holds only the incident: two questions, keys 1-4 for priority and q-r for team.
    page.click("#back")
    page.wait_for_selector(f'tr[data-name="{incident}"]')
    # The list is fetched again on the way back: the answered ticket leaves it (not at once: the
    # list on screen may be the one from before the answer until the new one arrives).
    page.locator(f'tr[data-name="{ticket}"]').wait_for(state="detached")
    assert page.locator("#review-rows tr").count() == 1
    page.click(f'tr[data-name="{incident}"]')
    page.wait_for_selector("#questions fieldset >> nth=1")
    page.keyboard.press("2")
    page.keyboard.press("w")
    page.keyboard.press("Enter")
    page.locator("#outcome[data-target='data-oncall']").wait_for()
    assert [m["item_id"] for m in delivered(site.stack.ref("DataOncallQueue"))] == ["INC-77"]
    example = site.pipeline.labelled_example("incident", "INC-77")
    assert json.loads(example["answers"]) == {"priority": "P2", "team": "data"}
    assert page.problems == []


def test_an_item_in_review_shows_how_its_nearest_resolved_items_went(site, page):
    (first,) = pending(site, decided(site.stack, "ticket", TICKET, UNSURE_TICKET))
    sign_in(page, site)
    page.goto(f"{site.url}/#/review/{first}")
    page.wait_for_selector("#questions fieldset")
    assert page.is_visible("#similar-empty")  # nothing resolved yet
    page.keyboard.press("Enter")  # the suggestion: billing
    page.locator("#outcome[data-target='billing']").wait_for()
    wait_for(lambda: status(site.stack, first) == "SUCCEEDED", "the answered ticket")

    look_alike = {**TICKET, "ticket_id": "T-78", "body": "Two charges of $49 on my card this month; refund one."}
    (second,) = pending(site, decided(site.stack, "ticket", look_alike, UNSURE_TICKET))
    page.goto(f"{site.url}/#/review/{second}")
    neighbour = page.locator('#item-similar li[data-similar="T-77"]')
    neighbour.wait_for()
    text = neighbour.inner_text()
    assert "Two charges of $49, refund one please." in text  # what it said
    assert "→ billing" in text and "answered by alice@example.com" in text  # how it went, and who
    assert "% alike" in text
    assert not page.is_visible("#similar-empty")
    # beside the decision's reason, in one line
    assert page.locator('details.why[data-why="queue"] summary').inner_text().startswith("why: ")
    assert page.problems == []


def test_a_sampled_check_is_badged_in_the_list_and_on_its_page_and_answered_blind(site, page):
    (check,) = pending(site, sampled_ticket(site.stack))
    (plain,) = pending(site, decided(site.stack, "incident", INCIDENT, UNSURE_INCIDENT))
    sign_in(page, site)

    badge = page.locator(f'tr[data-name="{check}"] .badge.check')
    badge.wait_for()
    assert badge.inner_text() == "check of an automatic answer" and badge.get_attribute("data-check") == "queue"
    # blind: the list does not name the automatic answer the check measures
    row = page.inner_text(f'tr[data-name="{check}"]')
    assert "queue=(hidden: a check)" in row and "billing" not in row
    page.wait_for_selector(f'tr[data-name="{plain}"]')
    assert page.locator(f'tr[data-name="{plain}"] .badge').count() == 0  # a review the thresholds asked for
    page.click(f'tr[data-name="{check}"] a')
    page.wait_for_selector("#questions fieldset")
    assert page.inner_text("#item-reason .badge.check") == "check of an automatic answer"
    assert "In review because precision check" in page.inner_text("#item-reason")
    # nothing preselected, no "suggested" mark, no probabilities: Enter alone answers nothing
    assert page.locator('input[name="q-queue"]:checked').count() == 0
    assert page.locator("#questions .suggested").count() == 0
    assert "the automatic answer is hidden" in page.inner_text("#questions")
    page.keyboard.press("Enter")
    assert page.inner_text("#message") == "Choose an answer for queue."
    page.keyboard.press("1")  # the reviewer's own answer: billing, the first option
    assert page.is_checked('input[name="q-queue"][value="billing"]')
    page.keyboard.press("Enter")
    page.locator("#outcome[data-target='billing']").wait_for()
    wait_for(lambda: status(site.stack, check) == "SUCCEEDED", "the answered check")
    tally = PrecisionTally(site.stack.ref("HeadHistoryTable")).counts("support-ticket", "queue")
    assert tally.model_dump() == {"checked": 1, "right": 1, "corrected": 0}
    assert page.problems == []


def test_ticket_text_with_markup_is_shown_as_text(site, page):
    (name,) = pending(site, decided(site.stack, "ticket", XSS_TICKET, UNSURE_TICKET))
    sign_in(page, site)
    page.wait_for_selector(f'tr[data-name="{name}"]')
    assert "<script>window.__xss = 1</script> refund" in page.inner_text("#review-rows")
    page.click(f'tr[data-name="{name}"] a')
    page.wait_for_selector("#questions fieldset")

    assert page.inner_text("#item-title") == XSS_TICKET["subject"]
    assert XSS_TICKET["body"] in page.inner_text("#item-fields")
    # No element came out of the text: each field is one text node, the title too.
    assert page.locator("#item-fields dd *, #item-title *, #review-rows td *:is(img, b, script)").count() == 0
    assert page.locator("img").count() == 0
    assert page.evaluate("window.__xss") is None
    assert page.problems == []


def test_a_wrong_automatic_route_is_corrected_from_the_page(site, page):
    record = decided(site.stack, "ticket", TICKET, SURE_TICKET)
    name = start(site.stack, record)
    wait_for(lambda: status(site.stack, name) == "SUCCEEDED", "the automatic route")
    sign_in(page, site)
    page.click("[data-nav=routes]")
    page.click("#route-rows button:has-text('This was wrong')")
    page.wait_for_selector("#questions fieldset")
    assert "Routed automatically to billing" in page.inner_text("#item-reason")

    page.keyboard.press("5")  # sales
    page.keyboard.press("Enter")

    page.locator("#outcome[data-target='sales']").wait_for()
    assert [m["item_id"] for m in delivered(site.stack.ref("SalesQueue"))] == ["T-77"]
    example = site.pipeline.labelled_example("support-ticket", "T-77")
    assert json.loads(example["answers"]) == {"queue": "sales"} and example["reviewer"] == LocalTokens.sub_of("alice@example.com")
    page.click("[data-nav=routes]")
    page.wait_for_selector("#route-rows .corrected")
    assert "corrected to sales by alice@example.com" in page.inner_text("#route-rows")
    assert page.problems == []


def test_the_api_refuses_requests_without_a_valid_token(site):
    pending(site, decided(site.stack, "ticket", TICKET, UNSURE_TICKET))
    assert httpx.get(site.url + "/api/reviews").status_code == 401
    forged = LocalTokens(site.console.tokens.issuer, site.console.tokens.audience, "reviewers").sign("mallory")
    assert httpx.get(site.url + "/api/reviews", headers={"Authorization": f"Bearer {forged}"}).status_code == 401
    expired = site.console.tokens.sign("alice", seconds=-10)
    assert httpx.get(site.url + "/api/reviews", headers={"Authorization": f"Bearer {expired}"}).status_code == 401
    outsider = site.console.tokens.sign("eve", groups=["viewers"])
    assert httpx.get(site.url + "/api/reviews", headers={"Authorization": f"Bearer {outsider}"}).status_code == 403
    valid = site.console.tokens.sign("alice@example.com")
    response = httpx.get(site.url + "/api/reviews", headers={"Authorization": f"Bearer {valid}"})
    assert response.status_code == 200 and len(response.json()["reviews"]) == 1
    assert httpx.get(site.url + "/").status_code == 200  # the page itself needs no token



def test_an_item_shows_that_it_is_loading_and_keeps_its_title_in_view_with_submit_focused(site, page):
    """The item's API answer takes seconds in a deployment (its similar items, its links): the page
    says it is loading (and no key answers the item shown before) until it arrives. Then Submit has
    the focus without the page scrolling to it: on a short window the title stays in view."""
    (name,) = pending(site, decided(site.stack, "ticket", TICKET, UNSURE_TICKET))
    page.set_viewport_size({"width": 1000, "height": 420})  # Submit is below the fold
    sign_in(page, site)
    held = []  # the item's answer, held back until the test has looked at the page
    item = f"**/api/reviews/{name}"
    page.route(item, lambda route: held.append(route))
    page.evaluate(f"location.hash = '#/review/{name}'")
    loading = page.locator("#item-loading")
    loading.wait_for(state="visible")
    assert loading.inner_text() == "Loading the item…" and loading.get_attribute("role") == "status"
    assert page.get_attribute("#view-item", "aria-busy") == "true"
    assert not page.is_visible("#item-title") and not page.is_visible("#answer-form")
    page.keyboard.press("Enter")  # nothing to submit yet
    assert len(held) == 1
    held[0].continue_()
    page.unroute(item)  # the answer's POST goes to the same path

    page.wait_for_selector("#questions fieldset")
    assert not page.is_visible("#item-loading") and page.get_attribute("#view-item", "aria-busy") == "false"
    assert page.evaluate("document.activeElement.id") == "submit"
    title = page.locator("#item-title").bounding_box()
    submit = page.locator("#submit").bounding_box()
    assert title is not None and submit is not None
    assert 0 <= title["y"] and title["y"] + title["height"] <= 420, title  # the title is in view
    assert submit["y"] > 420  # and Submit, focused, below it: the page did not scroll to it
    assert page.evaluate("window.scrollY") == 0
    page.keyboard.press("Enter")  # the keys still answer: the suggestion, billing
    page.locator("#outcome[data-target='billing']").wait_for()
    assert page.problems == []


def test_the_list_puts_the_shorter_first_review_target_first_and_shows_each_items_time_left(site, page):
    # Requested oldest first: a free ticket (480 min target), an enterprise ticket (60), a P1 incident (15).
    free = {**TICKET, "ticket_id": "T-free", "customer": {"id": "C-1", "tier": "free"}}
    enterprise = {**TICKET, "ticket_id": "T-ent", "customer": {"id": "C-2", "tier": "enterprise"}}
    names = pending(site, *(decided(site.stack, kind, data, logits) for kind, data, logits in (
        ("ticket", free, UNSURE_TICKET), ("ticket", enterprise, UNSURE_TICKET), ("incident", INCIDENT, UNSURE_INCIDENT))))
    sign_in(page, site)

    rows = page.locator("#review-rows tr")
    rows.nth(2).wait_for()
    assert [rows.nth(i).get_attribute("data-name") for i in range(3)] == names[::-1]
    first = rows.first.locator("td.sla")
    assert first.get_attribute("data-risk") == "on_track"
    assert first.inner_text().startswith(("14m left", "15m left")) and "P1 · 15m target" in first.inner_text()
    assert "free · 480m target" in rows.nth(2).locator("td.sla").inner_text()
    assert page.problems == []
