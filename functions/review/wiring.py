"""The review function's composition root (`decision_router.composition`): its settings and the
parts a completion works with (the pending-review index, the workflow's review tasks, STS, the
proofs already used, the resolved items), each made from the settings on first use and then
kept for the execution environment. app.py makes one `Wiring` at import (nothing is read or
connected then); a test hands it the parts it replaces."""

from __future__ import annotations

from decision_router.adapters import from_settings
from decision_router.adapters.caller_identity import StsCallerIdentity
from decision_router.adapters.review import ReviewTasks
from decision_router.adapters.signing_key import SigningKey
from decision_router.adapters.used_proofs import UsedProofs as UsedProofsTable
from decision_router.composition import CompositionRoot, part
from decision_router.domain.ports.outcomes import PrecisionTallies, ResolvedItemStore, ShadowTallies
from decision_router.domain.ports.review import CallerIdentity, PendingReviews, TaskCompleter, UsedProofs


class Wiring(CompositionRoot):
    @part
    def pending_reviews(self) -> PendingReviews:
        """The pending-review index: the record and task token each waiting review holds."""
        return from_settings.pending_reviews(self.settings)

    @part
    def tasks(self) -> TaskCompleter:
        return ReviewTasks()

    @part
    def used_proofs(self) -> UsedProofs | None:
        """The identity proofs already accepted (the idempotency table's review-proof# rows); None when
        the function is given no table: then every answer is refused (a replay could not be told)."""
        table = self.settings.idempotency_table
        return UsedProofsTable(table) if table else None

    @part
    def resolved_items(self) -> ResolvedItemStore | None:
        """The resolved-items store; None when the function is given none (nothing is kept)."""
        return from_settings.resolved_items(self.settings)

    @part
    def precision_tally(self) -> PrecisionTallies | None:
        return from_settings.precision_tally(self.settings)

    @part
    def shadow_tally(self) -> ShadowTallies | None:
        """The shadow heads' tallies a reviewer's answer is counted in; None when the function is given none."""
        return from_settings.shadow_tally(self.settings)

    @part
    def caller_identity(self) -> CallerIdentity:
        """Who signed an answer's identity proof, as STS at this region's own endpoint says
        (adapters/caller_identity.py)."""
        return StsCallerIdentity()

    @part
    def signing_key(self) -> SigningKey | None:
        """The stack's signing key; None when the function is given none (its answers count as unauthenticated)."""
        return from_settings.signing_key(self.settings)

    def identity_signer(self, execution_name: str, reviewer_id: str) -> str:
        """The stack key's signature of who answered (the key read on first use); "" without a key
        (the answer then counts as unauthenticated)."""
        key = self.signing_key
        return key.review_signature(execution_name, reviewer_id) if key is not None else ""
