"""`make review` (python -m local.review): the demo's items routed, the decision container
stopped, the console served at the printed URL until it is stopped, then nothing left listening."""

from __future__ import annotations

import io
import re
import threading

import httpx
import pytest

from local import review
from tests.e2e.test_demo_pipeline import RULE_TICKET, sample
from tests.functions.test_review_console import wait_for


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
        routes = httpx.get(url + "/api/routes", headers={"Authorization": f"Bearer {token}"}).json()["routes"]
        assert [(r["item_id"], r["target"]) for r in routes] == [(RULE_TICKET, "billing")]
    finally:
        stop.set()
        runner.join(timeout=60)
    assert result == {"code": 0}
    with pytest.raises(httpx.TransportError):
        httpx.get(url + "/", timeout=2)
