"""The page and its static files, and how it signs people in: no sign-in needed to load them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from .wiring import error_response, region, wiring

router = APIGatewayHttpRouter()

STATIC = Path(__file__).parent / "static"
#: The only files served, with their types (nothing else under static/ is reachable).
ASSETS = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8",
          "console.svg": "image/svg+xml",
          "picker.js": "text/javascript; charset=utf-8"}  # the option picker of a question with many options


@router.get("/")
def page() -> Response:
    return Response(200, "text/html; charset=utf-8", (STATIC / "index.html").read_text(encoding="utf-8"))


@router.get("/static/<name>")
def asset(name: str) -> Response:
    if name not in ASSETS:
        return error_response(404, LookupError(f"no asset {name!r}"))
    return Response(200, ASSETS[name], (STATIC / name).read_text(encoding="utf-8"))


@router.get("/config")
def page_config() -> dict[str, Any]:
    """How the page signs people in: Cognito's user-password sign-in on the stack's app client,
    or the local run's stand-in (local/console.py); nothing secret."""
    s = wiring(router).settings
    return {"sign_in": s.console_sign_in, "region": region(), "client_id": s.user_pool_client_id,
            "group": s.reviewer_group}
