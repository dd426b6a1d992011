"""The intake functions' composition root (ticket_intake, incident_intake): their settings and
every adapter their flows work with, each made from the settings on first use and then kept for
the execution environment (`decision_router.composition`).

Each intake handler makes one `Wiring` (its app.py) and hands it to its flows, which take what
they need from it and build nothing themselves. A test, or the local run, hands a `Wiring` the
parts it replaces (an endpoint in process, its own settings); the rest are made from the
settings as in the account.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer

from ..adapters import from_settings
from ..adapters.alarm_states import AlarmStates
from ..adapters.endpoint import DecisionEndpoint
from ..adapters.head_store import HeadStore
from ..adapters.open_incidents import OpenIncidents
from ..adapters.queues import Queue
from ..adapters.review import AuditTrail, ReviewTasks
from ..adapters.shadow_tally import ShadowTally
from ..adapters.signing_key import SigningKey
from ..composition import CompositionRoot, part
from ..domain.ports.incidents import AlarmStateReader, OpenIncidentStore
from ..domain.ports.messaging import Sender, Waiting
from ..domain.ports.outcomes import ResolvedItemStore
from ..domain.ports.review import PendingReviews
from ..domain.ports.routing import AuditWriter, DirectRoutes, Endpoint, PointerSource, Workflow


class Wiring(CompositionRoot):
    @part
    def endpoint(self) -> Endpoint:
        s = self.settings.require("endpoint_name")
        return DecisionEndpoint(s.endpoint_name, inference_component=s.inference_component_name,
                                read_timeout=s.endpoint_read_timeout_seconds, max_attempts=s.endpoint_max_attempts)

    @part
    def workflow(self) -> Workflow:
        return from_settings.workflow(self.settings)

    @part
    def direct_routes(self) -> DirectRoutes:
        """An automatic route that pages nobody, delivered without an execution (its audit row, team
        queue and event as the workflow writes them)."""
        from ..adapters.direct_routes import DirectRoutes as DirectRoutesAdapter

        s = self.settings.require("audit_table", "event_bus_name")
        return DirectRoutesAdapter(s.audit_table, s.event_bus_name, retention_days=s.audit_retention_days)

    @part
    def open_incidents(self) -> OpenIncidentStore | None:
        """The open-incident store; None when the function is given none (tickets are then not linked)."""
        table = self.settings.open_incidents_table
        return OpenIncidents(table, retention_days=self.settings.open_incident_retention_days) if table else None

    @part
    def dead_letters(self) -> Sender:
        return Queue(self.settings.require("dead_letter_queue_url").dead_letter_queue_url)

    @part
    def ticket_queue(self) -> Waiting:
        return Queue(self.settings.require("ticket_queue_url").ticket_queue_url)

    @part
    def alarm_states(self) -> AlarmStateReader:
        return AlarmStates()

    @part
    def idempotency_store(self) -> BasePersistenceLayer:
        """Where each item key's decision is kept (Powertools idempotency), so a duplicate is judged once."""
        return DynamoDBPersistenceLayer(table_name=self.settings.require("idempotency_table").idempotency_table)

    @part
    def audit(self) -> AuditWriter:
        s = self.settings.require("audit_table")
        return AuditTrail(s.audit_table, retention_days=s.audit_retention_days)

    @part
    def pending_reviews(self) -> PendingReviews:
        """The pending-review index: a resolved incident's waiting review is found there."""
        return from_settings.pending_reviews(self.settings)

    @part
    def review_tasks(self) -> ReviewTasks:
        return ReviewTasks()

    @part
    def head_store(self) -> PointerSource | None:
        """The head store the heads in service are read from; None when the function is given none."""
        s = self.settings
        if not s.head_store_bucket or not s.head_parameter_prefix:
            return None
        return HeadStore(s.head_store_bucket, s.head_parameter_prefix, s.head_history_table)

    @part
    def head_signing_key(self) -> SigningKey | None:
        """The key a head from the store must be signed with; None when the stack configured none
        (a local run without one: unsigned heads load, as the shipped heads do)."""
        arn = self.settings.head_signing_key_secret_arn
        return SigningKey.from_secret(arn) if arn else None

    @part
    def shadow_tally(self) -> ShadowTally | None:
        """Where the shadow heads' answers are counted (the head store's history table); None without it."""
        table = self.settings.head_history_table
        return ShadowTally(table) if table else None

    @part
    def resolved_items(self) -> ResolvedItemStore | None:
        """Where an item routed or answered is kept for the console's similar items; None: nowhere."""
        return from_settings.resolved_items(self.settings)
