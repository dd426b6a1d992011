"""The review function's composition root: its settings and the parts a completion works with (the
routing workflow's executions, their review tasks, STS, the proofs already used, the resolved
items), each made from the settings on first use and then kept for the execution environment.
app.py makes one `Wiring` at import (nothing is read or connected then); a test hands it the parts
it replaces."""

from __future__ import annotations

from functools import cached_property

from decision_router.adapters.caller_identity import StsCallerIdentity
from decision_router.adapters.precision_tally import PrecisionTally
from decision_router.adapters.review import ReviewTasks
from decision_router.adapters.signing_key import SigningKey
from decision_router.adapters.used_proofs import UsedProofs as UsedProofsTable
from decision_router.adapters.workflow import WorkflowStarter
from decision_router.config import Settings
from decision_router.domain.ports import (
    CallerIdentity,
    Executions,
    PrecisionTallies,
    ResolvedItemStore,
    TaskCompleter,
    UsedProofs,
)
from decision_router.intake.resolved_items import resolved_items


class Wiring:
    def __init__(self, settings: Settings | None = None, *, workflow: Executions | None = None,
                 tasks: TaskCompleter | None = None, used_proofs: UsedProofs | None = None,
                 resolved_items: ResolvedItemStore | None = None, precision_tally: PrecisionTallies | None = None,
                 signing_key: SigningKey | None = None, caller_identity: CallerIdentity | None = None):
        """Each part given here replaces the one the settings would make (tests, the local run)."""
        given = {"settings": settings, "workflow": workflow, "tasks": tasks, "used_proofs": used_proofs,
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
    def used_proofs(self) -> UsedProofs | None:
        """The identity proofs already accepted (the idempotency table's review-proof# rows); None when
        the function is given no table: then every answer is refused (a replay could not be told)."""
        table = self.settings.idempotency_table
        return UsedProofsTable(table) if table else None

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
    def caller_identity(self) -> CallerIdentity:
        """Who signed an answer's identity proof, as STS at this region's own endpoint says
        (adapters/caller_identity.py)."""
        return StsCallerIdentity()

    @cached_property
    def signing_key(self) -> SigningKey | None:
        """The stack's signing key; None when the function is given none (its answers count as unauthenticated)."""
        arn = self.settings.signing_key_secret_arn
        return SigningKey.from_secret(arn) if arn else None

    def identity_signer(self, execution_name: str, reviewer_id: str) -> str:
        """The stack key's signature of who answered (the key read on first use); "" without a key
        (the answer then counts as unauthenticated)."""
        key = self.signing_key
        return key.review_signature(execution_name, reviewer_id) if key is not None else ""
