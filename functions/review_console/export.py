"""The labelled examples, page by page, as `make fit REVIEWS=` reads them."""

from __future__ import annotations

import json

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from decision_router.review import console

from .wiring import wiring

router = APIGatewayHttpRouter()


@router.get("/api/export")
def export() -> Response:
    """One page of the labelled examples as `make fit REVIEWS=` reads them (review_cli export's
    lines): `?page=` the X-Next-Page header of the page before (absent on the last page)."""
    given = wiring(router)
    given.reviewer(router.current_event)
    query = router.current_event.query_string_parameters or {}
    wanted = query.get("policy") or None
    rows, after = given.examples.page(console.EXPORT_PAGE_ROWS, console.read_page_token(query.get("page") or None))
    examples = console.labelled_examples(rows, wanted)
    body = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in examples)
    headers = {"Content-Disposition": 'attachment; filename="labelled-examples.jsonl"'}
    if after:
        headers["X-Next-Page"] = console.page_token(after)
    return Response(200, "application/x-ndjson; charset=utf-8", body, headers=headers)
