"""A function's composition root: its settings and every adapter its flows work with, each made
from the settings on first use and then kept for the execution environment.

Each intake handler makes one `Wiring` (its app.py) and hands it to its flows, which take what
they need from it and build nothing themselves. Nothing is made at import (the settings are read
at the first invocation, so a handler module imports without its environment) and every part is
made once. A test, or the local run, hands a `Wiring` the parts it replaces (an endpoint in
process, its own settings); the rest are made from the settings as in the account.
"""

from __future__ import annotations

from functools import cached_property

from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer

from ..adapters.alarm_states import AlarmStates
from ..adapters.endpoint import DecisionEndpoint
from ..adapters.head_store import HeadStore
from ..adapters.open_incidents import OpenIncidents
from ..adapters.queues import Queue
from ..adapters.review import AuditTrail, ReviewQueue, ReviewTasks
from ..adapters.shadow_tally import ShadowTally
from ..adapters.signing_key import SigningKey
from ..adapters.workflow import WorkflowStarter
from ..config import Settings
from ..domain.ports import (
    AlarmStateReader,
    AuditWriter,
    Endpoint,
    OpenIncidentStore,
    PointerSource,
    ResolvedItemStore,
    Sender,
    Waiting,
    Workflow,
)
from .resolved_items import resolved_items as resolved_item_store


class Wiring:
    def __init__(self, settings: Settings | None = None, *, endpoint: Endpoint | None = None,
                 workflow: Workflow | None = None, open_incidents: OpenIncidentStore | None = None,
                 dead_letters: Sender | None = None, ticket_queue: Waiting | None = None,
                 alarm_states: AlarmStateReader | None = None, idempotency_store: BasePersistenceLayer | None = None,
                 audit: AuditWriter | None = None, review_queue: ReviewQueue | None = None,
                 review_tasks: ReviewTasks | None = None, head_store: PointerSource | None = None,
                 resolved_items: ResolvedItemStore | None = None, head_signing_key: SigningKey | None = None):
        """Each part given here replaces the one the settings would make (tests, the local run)."""
        given = {"settings": settings, "endpoint": endpoint, "workflow": workflow, "open_incidents": open_incidents,
                 "dead_letters": dead_letters, "ticket_queue": ticket_queue, "alarm_states": alarm_states,
                 "idempotency_store": idempotency_store, "audit": audit, "review_queue": review_queue,
                 "review_tasks": review_tasks, "head_store": head_store, "resolved_items": resolved_items,
                 "head_signing_key": head_signing_key}
        self.__dict__.update({name: part for name, part in given.items() if part is not None})  # cached_property reads these first

    @cached_property
    def settings(self) -> Settings:
        return Settings.from_env()

    @cached_property
    def endpoint(self) -> Endpoint:
        s = self.settings.require("endpoint_name")
        return DecisionEndpoint(s.endpoint_name, inference_component=s.inference_component_name,
                                read_timeout=s.endpoint_read_timeout_seconds, max_attempts=s.endpoint_max_attempts)

    @cached_property
    def workflow(self) -> Workflow:
        s = self.settings.require("state_machine_arn")
        return WorkflowStarter(s.state_machine_arn, audit_retention_days=s.audit_retention_days)

    @cached_property
    def open_incidents(self) -> OpenIncidentStore | None:
        """The open-incident store; None when the function is given none (tickets are then not linked)."""
        table = self.settings.open_incidents_table
        return OpenIncidents(table, retention_days=self.settings.open_incident_retention_days) if table else None

    @cached_property
    def dead_letters(self) -> Sender:
        return Queue(self.settings.require("dead_letter_queue_url").dead_letter_queue_url)

    @cached_property
    def ticket_queue(self) -> Waiting:
        return Queue(self.settings.require("ticket_queue_url").ticket_queue_url)

    @cached_property
    def alarm_states(self) -> AlarmStateReader:
        return AlarmStates()

    @cached_property
    def idempotency_store(self) -> BasePersistenceLayer:
        """Where each item key's decision is kept (Powertools idempotency), so a duplicate is judged once."""
        return DynamoDBPersistenceLayer(table_name=self.settings.require("idempotency_table").idempotency_table)

    @cached_property
    def audit(self) -> AuditWriter:
        s = self.settings.require("audit_table")
        return AuditTrail(s.audit_table, retention_days=s.audit_retention_days)

    @cached_property
    def review_queue(self) -> ReviewQueue:
        return ReviewQueue(self.settings.require("review_queue_url").review_queue_url)

    @cached_property
    def review_tasks(self) -> ReviewTasks:
        return ReviewTasks()

    @cached_property
    def head_store(self) -> PointerSource | None:
        """The head store the heads in service are read from; None when the function is given none."""
        s = self.settings
        if not s.head_store_bucket or not s.head_parameter_prefix:
            return None
        return HeadStore(s.head_store_bucket, s.head_parameter_prefix, s.head_history_table)

    @cached_property
    def head_signing_key(self) -> SigningKey | None:
        """The key a head from the store must be signed with; None when the stack configured none
        (a local run without one: unsigned heads load, as the shipped heads do)."""
        arn = self.settings.head_signing_key_secret_arn
        return SigningKey.from_secret(arn) if arn else None

    @cached_property
    def shadow_tally(self) -> ShadowTally | None:
        """Where the shadow heads' answers are counted (the head store's history table); None without it."""
        table = self.settings.head_history_table
        return ShadowTally(table) if table else None

    @cached_property
    def resolved_items(self) -> ResolvedItemStore | None:
        """Where an item routed or answered is kept for the console's similar items; None: nowhere."""
        return resolved_item_store(self.settings)
