"""The review function's composition root: its settings and the parts a completion works with (the
routing workflow's executions, their review tasks, the review queue, the resolved items), each
made from the settings on first use and then kept for the execution environment. app.py makes one
`Wiring` at import (nothing is read or connected then); a test hands it the parts it replaces."""

from __future__ import annotations

from functools import cached_property

from decision_router.adapters.caller_identity import StsCallerIdentity
from decision_router.adapters.precision_tally import PrecisionTally
from decision_router.adapters.review import ReviewQueue, ReviewTasks
from decision_router.adapters.signing_key import SigningKey
from decision_router.adapters.workflow import WorkflowStarter
from decision_router.config import Settings
from decision_router.domain.ports import Executions, PrecisionTallies, ResolvedItemStore, ReviewMessages, TaskCompleter
from decision_router.intake.resolved_items import resolved_items


class Wiring:
    def __init__(self, settings: Settings | None = None, *, workflow: Executions | None = None,
                 tasks: TaskCompleter | None = None, review_queue: ReviewMessages | None = None,
                 resolved_items: ResolvedItemStore | None = None, precision_tally: PrecisionTallies | None = None,
                 signing_key: SigningKey | None = None, caller_identity: StsCallerIdentity | None = None):
        """Each part given here replaces the one the settings would make (tests, the local run)."""
        given = {"settings": settings, "workflow": workflow, "tasks": tasks, "review_queue": review_queue,
                 "resolved_items": resolved_items, "precision_tally": precision_tally,
                 "signing_key": signing_key, "caller_identity": caller_identity}
        self.__dict__.update({name: part for name, part in given.items() if part is not None})  # cached_property reads these first

    @cached_property
    def settings(self) -> Settings:
        return Settings.from_env()

    @cached_property
    def workflow(self) -> Executions:
        s = self.settings.require("state_machine_arn")
        return WorkflowStarter(s.state_machine_arn, audit_retention_days=s.audit_retention_days)

    @cached_property
    def tasks(self) -> TaskCompleter:
        return ReviewTasks()

    @cached_property
    def review_queue(self) -> ReviewMessages | None:
        """The review queue an answered review's message is removed from; None when the function is given none."""
        url = self.settings.review_queue_url
        return ReviewQueue(url) if url else None

    @cached_property
    def resolved_items(self) -> ResolvedItemStore | None:
        """The resolved-items store; None when the function is given none (nothing is kept)."""
        return resolved_items(self.settings)

    @cached_property
    def precision_tally(self) -> PrecisionTallies | None:
        """The live precision's tallies (the head history table); None when the function is given none."""
        table = self.settings.head_history_table
        return PrecisionTally(table) if table else None

    @cached_property
    def caller_identity(self) -> StsCallerIdentity:
        """Who signed an answer's identity proof, as STS says (adapters/caller_identity.py)."""
        return StsCallerIdentity()

    @cached_property
    def signing_key(self) -> SigningKey | None:
        """The stack's signing key; None when the function is given none (its answers count as unauthenticated)."""
        arn = self.settings.signing_key_secret_arn
        return SigningKey.from_secret(arn) if arn else None
