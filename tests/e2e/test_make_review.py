"""`make review` (python -m local.review): the demo's items routed, the console and the webhook
API served at the printed URLs until it is stopped (a signed webhook ticket sent then is routed
and shows in the console), then nothing left listening."""

from __future__ import annotations

import io
import re
import threading
import time

import httpx
import pytest

from decision_router.intake.webhooks import sign
from local import review
from tests.e2e.test_demo_pipeline import RULE_TICKET, sample
from tests.fakes.console_worlds import wait_for
from tests.functions.conftest import EVENTS


@pytest.mark.model  # `make review` starts the decision container on the embedded model
@pytest.mark.server
@pytest.mark.stack
def test_make_review_serves_the_console_on_the_routed_items_until_stopped(tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text(sample(review.DEFAULT_ITEMS[0], RULE_TICKET) + "\n")
    out, stop, result = io.StringIO(), threading.Event(), {}
    runner = threading.Thread(target=lambda: result.update(code=review.main(
        ["--items", str(items), "--log-dir", str(tmp_path / "logs")], out=out, stop=stop)))
    runner.start()
    try:
        url = wait_for(lambda: (m := re.search(r"Review console: (http://127\.0\.0\.1:\d+)/", out.getvalue())) and m.group(1),
                       "the console's URL", timeout=300)
        assert "0 review(s) pending, 1 item(s) routed automatically" in out.getvalue()
        token = httpx.post(url + "/local/sign-in", json={"username": "alice@example.com"}).json()["id_token"]
        auth = {"Authorization": f"Bearer {token}"}
        routes = httpx.get(url + "/api/routes", headers=auth).json()["routes"]
        assert [(r["item_id"], r["target"]) for r in routes] == [(RULE_TICKET, "billing")]

        printed = out.getvalue()
        webhooks = re.search(r"Webhook API: +(http://127\.0\.0\.1:\d+)/webhooks/\{source\}", printed).group(1)
        secret = re.search(r"^  generic +(\S+)$", printed, re.MULTILINE).group(1)
        body = (EVENTS / "webhook_generic_ticket.json").read_bytes()
        assert httpx.post(webhooks + "/webhooks/generic", content=body).status_code == 401
        response = httpx.post(webhooks + "/webhooks/generic", content=body, headers=sign("generic", body, secret, at=time.time()))
        assert response.status_code == 202 and response.json()["ticket_id"] == "W-3001"

        def decided() -> bool:
            shown = httpx.get(url + "/api/routes", headers=auth).json()["routes"]
            shown += httpx.get(url + "/api/reviews", headers=auth).json()["reviews"]
            return any(r["item_id"] == "W-3001" for r in shown)

        wait_for(decided, "the webhook ticket routed", timeout=120)
    finally:
        stop.set()
        runner.join(timeout=60)
    assert result == {"code": 0}
    with pytest.raises(httpx.TransportError):
        httpx.get(url + "/", timeout=2)
