"""What the console's routes work with: its settings, the AWS adapters and the policies, built once
per execution environment (app.py makes one `Wiring` at its cold start and puts it in each
request's routing context), and who is asking and what they sent.

The parts are typed by what the console calls on them: the ports (`decision_router.domain.ports`:
`review`, `outcomes`, `messaging`) where their values are the domain's, and here the faces
that hand over the adapters' own values (the audit's reads, the labelled examples' pages)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any, Protocol

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from pydantic import ValidationError

from decision_router.adapters import from_settings
from decision_router.adapters.escalations import SlaEscalations
from decision_router.adapters.queues import EventBus
from decision_router.adapters.review import AuditTrail, LabelledExamples, ReviewTasks, Unreadable
from decision_router.adapters.signing_key import SigningKey
from decision_router.composition import CompositionRoot, part
from decision_router.domain import policies as shipped
from decision_router.domain.policies import Policy, load_policy
from decision_router.domain.ports.messaging import Bus
from decision_router.domain.ports.outcomes import PrecisionTallies, ResolvedItemStore, ShadowTallies
from decision_router.domain.ports.review import EscalationMarks, Executions, PendingReviews, TaskCompleter
from decision_router.domain.records import AuditRow, DecisionRecord
from decision_router.review import console
from decision_router.review.completion import IdentitySigner, InvalidReview
from decision_router.review.pending import policy_lanes
from decision_router.validation import describe_errors

logger = Logger(child=True)


class AuditReader(Protocol):
    """The audit table as the console reads it (`adapters.review.AuditTrail`)."""

    def recent(self, outcome: str, limit: int = ...) -> list[AuditRow | Unreadable]: ...

    def of_item(self, item_id: str) -> list[AuditRow | Unreadable]: ...

    def linked_to(self, incident_id: str) -> list[AuditRow]: ...

    def row(self, item_id: str, execution_name: str) -> AuditRow | None: ...


class ExamplePages(Protocol):
    """The labelled examples, page by page (`adapters.review.LabelledExamples`)."""

    def page(self, limit: int, after: dict[str, str] | None = None) -> tuple[list[dict[str, str]], dict[str, str] | None]: ...


class Wiring(CompositionRoot):
    """The console's settings and adapters, each made from the settings on first use
    (`decision_router.composition`). Each part given here replaces the one the settings would
    make (tests, the local run)."""

    @part
    def signing_key(self) -> SigningKey | None:
        """The stack's signing key: the console signs its reviewer's `sub` on each answer (None: unsigned)."""
        return from_settings.signing_key(self.settings)

    def identity_signer(self) -> IdentitySigner | None:
        key = self.signing_key
        return key.review_signature if key is not None else None

    @part
    def pending_reviews(self) -> PendingReviews:
        """The pending-review index: the list, an item, and its row removed once answered."""
        return from_settings.pending_reviews(self.settings)

    @part
    def workflow(self) -> Executions:
        return from_settings.workflow(self.settings)

    @part
    def audit(self) -> AuditReader:
        settings = self.settings.require("audit_table")
        return AuditTrail(settings.audit_table, unsharded_index=settings.audit_unsharded_index or None)

    @part
    def examples(self) -> ExamplePages:
        return LabelledExamples(self.settings.require("labelled_examples_table").labelled_examples_table)

    @part
    def tasks(self) -> TaskCompleter:
        return ReviewTasks()

    @part
    def resolved_items(self) -> ResolvedItemStore | None:
        """The resolved-items store; None when the function is given none (no similar items, none kept)."""
        return from_settings.resolved_items(self.settings)

    @part
    def precision_tally(self) -> PrecisionTallies | None:
        return from_settings.precision_tally(self.settings)

    @part
    def shadow_tally(self) -> ShadowTallies | None:
        """The shadow heads' tallies a reviewer's answer is counted in; None when the function is given none."""
        return from_settings.shadow_tally(self.settings)

    @part
    def bus(self) -> Bus:
        """The decision bus: the review SLA's sweep pages the on-call there (Item Escalated)."""
        return EventBus(self.settings.require("event_bus_name").event_bus_name)

    @part
    def escalations(self) -> EscalationMarks:
        """The review SLA's escalation marks (the idempotency table's `review-sla-escalation#` rows)."""
        s = self.settings.require("idempotency_table")
        return SlaEscalations(s.idempotency_table, review_timeout_seconds=s.review_timeout_seconds)

    @part
    def policies(self) -> dict[str, Policy]:
        """The shipped policies read so far, by name (`policy`): each is read once per execution environment."""
        return {}

    def policy(self, name: str) -> Policy:
        if name not in self.policies:
            self.policies[name] = load_policy(name)
        return self.policies[name]

    def policy_names(self) -> list[str]:
        """The shipped policies' names (the console lists and the sweep counts the reviews of each)."""
        return sorted(path.stem for path in shipped.POLICY_DIR.glob("*.json"))

    def all_lanes(self, *, item_kind: str | None = None) -> list[str]:
        """The pending-review index's lanes of every shipped policy (of `item_kind`'s only, when given)."""
        chosen = [self.policy(name) for name in self.policy_names()]
        return [lane for policy in chosen if item_kind in (None, policy.item_kind) for lane in policy_lanes(policy)]

    def reviewer(self, event: APIGatewayProxyEventV2) -> console.Reviewer:
        """The signed-in reviewer, from the claims API Gateway's JWT authorizer verified."""
        claims = event.request_context.authorizer.jwt_claim
        return console.reviewer_from_claims(claims, self.settings.reviewer_group)

    def similar_items(self, record: DecisionRecord) -> list[dict[str, Any]]:
        """The record's nearest resolved items of its policy; none (and a warning) when they cannot be read."""
        store = self.resolved_items
        if store is None:
            return []
        try:
            similar = console.similar_to(record, self.policy(record.policy.name), store.recent(record.policy.name))
        except Exception as error:  # noqa: BLE001 - the item is shown without its neighbours
            logger.warning("similar items not read", extra={"item_id": record.item_id,
                                                             "reason": f"{type(error).__name__}: {error}"})
            return []
        return [s.model_dump() for s in similar]


def wiring(router: APIGatewayHttpRouter) -> Wiring:
    """The request's wiring (app.py puts it in the routing context)."""
    return router.context["wiring"]


def readable(rows: list[AuditRow | Unreadable]) -> list[AuditRow]:
    """The audit rows that read as the workflow writes them; each other one is logged and left out."""
    for row in rows:
        if isinstance(row, Unreadable):
            logger.warning("audit row not read", extra={"item_id": row.item_id, "execution_name": row.execution_name,
                                                        "error": row.problem})
    return [row for row in rows if isinstance(row, AuditRow)]


def answer(event: APIGatewayProxyEventV2) -> console.Answer:
    """The reviewer's answers in the request body; InvalidReview (400) names what is wrong."""
    try:
        body = json.loads(event.body or "")
    except json.JSONDecodeError:
        raise InvalidReview("the body must be JSON: {\"answers\": {question: option}, \"note\": \"…\"}") from None
    try:
        return console.Answer.model_validate(body)
    except ValidationError as error:
        raise InvalidReview("; ".join(describe_errors(error))) from None


def now() -> datetime:
    return datetime.now(timezone.utc)


def region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def error_response(status: int, error: Exception) -> Response:
    return Response(status_code=status, content_type="application/json", body=json.dumps({"error": str(error)}))
