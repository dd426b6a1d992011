"""The review console behind API Gateway's HTTP API: the page and its static files (no sign-in
needed to load them), and the JSON API under /api/ that the JWT authorizer guards. One Powertools
router per part (`page`, `reviews`, `corrections`, `export`); here the resolver, the security
headers every answer carries, the errors in HTTP terms, and the handler.

The reviewer is whoever the verified token's claims name (API Gateway puts them in the event's
requestContext): audited by the token's `sub`, shown by the user pool's verified email (or the
user name); a name in the request body is refused.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.utilities.typing import LambdaContext

from decision_router.adapters.review import ReviewTaskGone
from decision_router.adapters.workflow import ExecutionNotRunning
from decision_router.review import console
from decision_router.review.completion import InvalidReview
from review_console import corrections, export, page, reviews, sla
from review_console.wiring import Wiring, error_response, region

logger = Logger()
tracer = Tracer()
app = APIGatewayHttpResolver()
#: This execution environment's settings and adapters (made on first use, kept between invocations).
WIRING = Wiring()


def content_security_policy(region: str) -> str:
    """Scripts and styles from this origin only (no inline script or style, no eval); the only
    other connection is Cognito's sign-in API."""
    return ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
            f"connect-src 'self' https://cognito-idp.{region}.amazonaws.com; "
            "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def security_headers(resolver: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response:
    response = next_middleware(resolver)
    response.headers.update({
        "Content-Security-Policy": content_security_policy(region()),
        "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
        "Cache-Control": "no-store", "Cross-Origin-Opener-Policy": "same-origin",
    })
    return response


app.use(middlewares=[security_headers])
for part in (page, reviews, corrections, export):
    app.include_router(part.router)


@app.exception_handler(console.NotSignedIn)
def _not_signed_in(error: Exception) -> Response:
    return error_response(401, error)


@app.exception_handler(console.NotAReviewer)
def _not_a_reviewer(error: Exception) -> Response:
    return error_response(403, error)


@app.exception_handler(InvalidReview)
def _invalid(error: Exception) -> Response:
    return error_response(400, error)


@app.exception_handler([ExecutionNotRunning, ReviewTaskGone, console.Conflict])
def _conflict(error: Exception) -> Response:
    return error_response(409, error)


@app.not_found
def _not_found(_: Exception) -> Response:
    return error_response(404, LookupError("no such page"))


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)  # item text and notes: not for traces
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    if sla.is_sweep(event):  # the schedule's call: the review SLA's metrics and escalations
        return sla.sweep(WIRING)
    app.append_context(wiring=WIRING)
    return app.resolve(event, context)
