"""The heads in service, picked up from the head store without a deploy.

Every `refresh_seconds` (HEAD_REFRESH_SECONDS, 2 minutes by default) the routing function reads
each question's pointer (one SSM parameter per policy question, domain/head_versions.py). A new
pointer's object is read and verified as a shipped head is (`heads.read_head`: size, sha256,
schema; `Policy.head_problems`: options and question digest); only then does it decide. A
pointer may name only the head store's own bucket and the question's own key there
(`head_versions.pointer_problems`): whoever could write the parameter could otherwise serve any
object they can put anywhere. A pointer or object that cannot be read or verified leaves the head deciding before in service
(the last good one, else the shipped one) and counts `HeadLoadFailed` (policy, question), which
an alarm watches. No pointer: the shipped head decides (a rollback past the first promotion).

Where the stack configured a head signing key (HEAD_SIGNING_KEY_SECRET_ARN, HeadSigningKeySecret),
a pointer must also carry the relearning function's signature of its policy, question, sha256 and
head version (domain/signatures.py): an unsigned or altered head is refused the same way. The
signature names what it was made for: the head in service must carry one made for service (at
promotion), a shadow one made for shadow; a shadow's signature copied into the pointer of the head
in service is refused, as is a signature made before signatures named their purpose. Without
one (a local run, tests without a stack) heads from the store load unsigned, as the shipped heads
in the code always do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from aws_lambda_powertools import Logger

from ..adapters.signing_key import SigningKey
from ..domain.head_versions import HeadPointer, pointer_problems
from ..domain.heads import Head, read_head
from ..domain.policies import Policy
from ..domain.ports.routing import PointerSource
from ..domain.routing import ShadowHead
from ..domain.signatures import HEAD_SERVICE, HEAD_SHADOW, LEGACY_HEAD
from ..question_metrics import question_metric

HEAD_LOAD_FAILED = "HeadLoadFailed"


@dataclass
class _InService:
    sha256: str | None  # None: the shipped head (or the letters)
    head: Head | None


class LiveHeads:
    """The shipped policy with the heads in service swapped in, re-read at most every `refresh_seconds`."""

    def __init__(self, shipped: Policy, store: PointerSource, *, refresh_seconds: float, logger: Logger,
                 clock: Callable[[], float] = time.monotonic, head_key: SigningKey | None = None):
        """`head_key`: the stack's head signing key; given, a pointer must carry its signature
        (the relearning gate's) or the head is refused; None (no key configured), unsigned heads load."""
        self.shipped, self.store, self.refresh_seconds = shipped, store, refresh_seconds
        self.head_key = head_key
        self.logger, self.clock = logger, clock
        self._in_service = {q.id: _InService(None, q.learned_head) for q in shipped.questions}
        self._policy = shipped
        self._checked: float | None = None
        self._shadows: dict[str, ShadowHead] = {}

    def policy(self) -> Policy:
        """The policy to judge the next item with (re-checking the store when it is due)."""
        now = self.clock()
        if self._checked is None or now - self._checked >= self.refresh_seconds:
            self._checked = now
            if any([self._refresh(q.id) for q in self.shipped.questions]):
                self._policy = self.shipped.with_heads({q: s.head for q, s in self._in_service.items()})
            for q in self.shipped.questions:
                self._refresh_shadow(q.id)
        return self._policy

    def shadows(self) -> dict[str, ShadowHead]:
        """The candidates serving in shadow, per question (as of the last `policy()`)."""
        return dict(self._shadows)

    def _refresh_shadow(self, question: str) -> None:
        """The question's shadow head, verified as a head in service is; none where there is no
        shadow pointer, or it cannot be read or verified (counted as `HeadLoadFailed` too)."""
        current = self._shadows.get(question)
        try:
            pointer = self.store.shadow_pointer(self.shipped.name, question)
            if pointer is None:
                if self._shadows.pop(question, None) is not None:
                    self.logger.info("shadow head ended", extra={"question": question})
                return
            if current is not None and pointer.sha256 == current.sha256:
                return
            where = f"shadow head {pointer.head_version} (s3://{pointer.bucket}/{pointer.key} version {pointer.s3_version})"
            misplaced = pointer_problems(pointer, bucket=self.store.bucket, policy=self.shipped.name, question=question,
                                         shadow=True)
            if misplaced:
                raise ValueError(f"{where}: the pointer " + "; ".join(misplaced))
            self._signed(pointer, where, HEAD_SHADOW)
            head = read_head(self.store.read(pointer), pointer.sha256, where, named_by="the pointer's",
                             changed="the object is not the one named")
            problems = self.shipped.head_problems(self.shipped.question(question), head)
            if problems:
                raise ValueError(f"{where}: " + "; ".join(problems))
        except Exception as error:  # noqa: BLE001 - a shadow decides nothing: it is left out
            self._shadows.pop(question, None)
            question_metric(HEAD_LOAD_FAILED, self.shipped.name, question)
            self.logger.error("shadow head not loaded; no shadow for the question", extra={
                "question": question, "reason": f"{type(error).__name__}: {error}"})
            return
        self._shadows[question] = ShadowHead(head, pointer.sha256)
        self.logger.info("shadow head serving beside the head in service",
                         extra={"question": question, "head_version": head.version})

    def _signed(self, pointer: HeadPointer, where: str, purpose: str) -> None:
        """ValueError unless the pointer carries the stack's head signature made for `purpose`
        (HEAD_SERVICE for the head in service, HEAD_SHADOW for a shadow; when a key is configured)."""
        if self.head_key is None:
            return
        if not pointer.signature:
            raise ValueError(f"{where}: unsigned; this stack signs every head its relearning gate passes "
                             "(HeadSigningKeySecret), so an unsigned one is refused")
        if self.head_key.head_verified(pointer, purpose):
            return
        made_for = self.head_key.head_signed_for(pointer)
        if made_for == LEGACY_HEAD:
            raise ValueError(f"{where}: signed before head signatures named shadow or service (such a signature "
                             "cannot tell a shadow from a promotion): refused; the shipped head decides until "
                             "relearning promotes again, or roll back (docs/learning/relearning.md)")
        if made_for is not None:
            wanted = ("the head in service: only a promotion signs a head for service" if purpose == HEAD_SERVICE
                      else "a shadow")
            raise ValueError(f"{where}: signed for {made_for.removeprefix('head-')}, not as {wanted}: refused")
        raise ValueError(f"{where}: its signature does not verify with the stack's head signing key (the head, "
                         "its sha256, version or question was changed after the gate passed it): refused")

    def _refresh(self, question: str) -> bool:
        """Whether the question's head in service changed."""
        current = self._in_service[question]
        try:
            pointer = self.store.pointer(self.shipped.name, question)
            if pointer is None:
                if current.sha256 is None:
                    return False
                self._in_service[question] = _InService(None, self.shipped.question(question).learned_head)
                self.logger.info("shipped head back in service", extra={"question": question})
                return True
            where = f"head {pointer.head_version} (s3://{pointer.bucket}/{pointer.key} version {pointer.s3_version})"
            misplaced = pointer_problems(pointer, bucket=self.store.bucket, policy=self.shipped.name, question=question)
            if misplaced:
                raise ValueError(f"{where}: the pointer " + "; ".join(misplaced))
            self._signed(pointer, where, HEAD_SERVICE)
            if pointer.sha256 == current.sha256:
                return False
            head = read_head(self.store.read(pointer), pointer.sha256, where, named_by="the pointer's",
                             changed="the object is not the one promoted")
            problems = self.shipped.head_problems(self.shipped.question(question), head)
            if problems:
                raise ValueError(f"{where}: " + "; ".join(problems))
            if head.version != pointer.head_version:
                raise ValueError(f"{where}: the file says version {head.version!r}")
        except Exception as error:  # noqa: BLE001 - any failure keeps the head in service
            question_metric(HEAD_LOAD_FAILED, self.shipped.name, question)
            self.logger.error("head in the store not loaded; the head in service keeps deciding", extra={
                "question": question, "in_service": current.head.version if current.head else None,
                "reason": f"{type(error).__name__}: {error}"})
            return False
        self._in_service[question] = _InService(pointer.sha256, head)
        self.logger.info("head from the store in service", extra={"question": question, "head_version": head.version})
        return True


def live_heads(policy: Policy, store: PointerSource | None, settings: Any, logger: Logger, *,
               head_key: SigningKey | None = None) -> LiveHeads | None:
    """The live heads of a function given a head store; None without one (the shipped heads decide)."""
    if store is None:
        return None
    return LiveHeads(policy, store, refresh_seconds=settings.head_refresh_seconds, logger=logger, head_key=head_key)
