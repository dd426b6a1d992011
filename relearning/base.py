"""What every step of a relearning run shares: the job's settings (checked once, when the job is
made), the stores it reads and writes, the head in service it judges a candidate against and the
signature it gives a head the gate passed. The steps themselves: relearning/job.py."""

from __future__ import annotations

import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any, Callable, Sequence

from aws_lambda_powertools import Logger

from decision_contract import Decision
from decision_router.adapters.head_store import HeadStore
from decision_router.adapters.precision_tally import PrecisionTally
from decision_router.adapters.review import LabelledExamples
from decision_router.adapters.shadow_tally import ShadowTally
from decision_router.adapters.signing_key import SigningKey
from decision_router.domain import shadow
from decision_router.domain.heads import Head, read_head
from decision_router.domain.policies import Policy
from decision_router.domain.ports.outcomes import PrecisionTallies
from decision_router.domain.signatures import HEAD_SERVICE
from training import gate
from training.fitting import SHIPPED
from training.signals_store import SHIPPED_SIGNALS

from .runs import MAX_SHADOW_LOOKS, MAX_SHADOW_SECONDS, shadow_wait_seconds


def check_settings(*, max_reviewer_share: float, shadow_items: int, shadow_timeout_seconds: float,
                   shadow_check_seconds: int, shadow_min_reviewed: int, shadow_max_disagreement: float,
                   label_retention_days: int, full_read_after_seconds: float) -> None:
    """A ValueError naming each setting out of its range (and the range), before any step runs."""
    if label_retention_days < 1 or full_read_after_seconds < 0:
        raise ValueError(f"label_retention_days {label_retention_days!r} must be 1 or more, "
                         f"full_read_after_seconds {full_read_after_seconds!r} 0 or more")
    if not 0 < max_reviewer_share <= 1:
        raise ValueError(f"max_reviewer_share {max_reviewer_share!r}: must be more than 0 and at most 1")
    if shadow_items < 0 or shadow_timeout_seconds <= 0 or shadow_check_seconds < 1:
        raise ValueError(f"shadow_items {shadow_items!r} must be 0 or more, shadow_timeout_seconds "
                         f"{shadow_timeout_seconds!r} more than 0, shadow_check_seconds {shadow_check_seconds!r} "
                         "at least 1")
    if max(shadow_timeout_seconds, shadow_check_seconds) > MAX_SHADOW_SECONDS:
        raise ValueError(f"RelearningShadowTimeoutSeconds {shadow_timeout_seconds!r} and RelearningShadowCheckSeconds "
                         f"{shadow_check_seconds!r}: each at most {MAX_SHADOW_SECONDS} (360 days; an execution "
                         "lasts at most a year)")
    if shadow_min_reviewed < 0 or not 0 <= shadow_max_disagreement <= 1:
        raise ValueError(f"shadow_min_reviewed {shadow_min_reviewed!r} must be 0 or more, shadow_max_disagreement "
                         f"{shadow_max_disagreement!r} from 0 to 1")


class RelearningBase:
    """The settings and stores of one policy's relearning run, and what its steps share."""

    def __init__(self, store: HeadStore, labels: LabelledExamples, endpoint: Callable[[Sequence[Decision]], Any], *,
                 shipped: Sequence[Path] = SHIPPED, min_new_labels: int = 200, work_dir: Path | None = None,
                 logger: Logger | None = None, today: Callable[[], date] = date.today,
                 max_reviewer_share: float = gate.MAX_REVIEWER_SHARE,
                 announce: Callable[[dict[str, Any]], Any] | None = None, shadow_items: int = 0,
                 shadow_timeout_seconds: float = 7 * 86400, shadow_check_seconds: int = 900, tally: ShadowTally | None = None,
                 shadow_min_reviewed: int = shadow.MIN_REVIEWED, shadow_max_disagreement: float = shadow.MAX_DISAGREEMENT,
                 signing_key: SigningKey | None = None, head_signing_key: SigningKey | None = None,
                 clock: Callable[[], float] = time.time, signals_dir: Path = SHIPPED_SIGNALS,
                 precision: PrecisionTallies | None = None, label_retention_days: int = 365,
                 full_read_after_seconds: float = 2 * 86400):
        """`endpoint(probe)`: the runner the signals are asked of (EndpointSignals in AWS; tests
        may pass the in-process engine's). `max_reviewer_share`: the most one reviewer may give of
        the reviews a candidate trains on, and of those it is judged on. `announce(notice)`: each
        promotion announced (the promotion topic's PromotionNotices.announce in AWS); None: logged only.
        `shadow_items`: the live items each candidate must answer in shadow before it is judged
        again; `shadow_timeout_seconds`: how long the workflow waits for them (then the candidate
        is refused), looking every `shadow_check_seconds` (further apart where that would be more
        than MAX_SHADOW_LOOKS looks: `shadow_wait_seconds`); of them at least `shadow_min_reviewed`
        reviewed, and at most `shadow_max_disagreement` answered otherwise than the head in service
        among the unreviewed (domain/shadow.py `shadow_verdict`). `tally`: the shadow heads'
        counts (default: the head store's history table).
        `signals_dir`: the shipped signals (training/signals_store.py). `signing_key`: the stack's
        key, which verifies who answered each label (the gate counts verified identities only);
        `head_signing_key`: the stack's head key, which signs each head the gate (and its shadow) passed.
        `label_retention_days`: labels older are dropped from those kept (the table's TTL, LabelRetentionDays);
        `full_read_after_seconds`: when the policy's partition is read whole a second time after the
        first run (the longest review wait: relearning/labels.py)."""
        check_settings(max_reviewer_share=max_reviewer_share, shadow_items=shadow_items,
                       shadow_timeout_seconds=shadow_timeout_seconds, shadow_check_seconds=shadow_check_seconds,
                       shadow_min_reviewed=shadow_min_reviewed, shadow_max_disagreement=shadow_max_disagreement,
                       label_retention_days=label_retention_days, full_read_after_seconds=full_read_after_seconds)
        self.label_retention_days, self.full_read_after_seconds = label_retention_days, full_read_after_seconds
        self.shadow_items, self.shadow_timeout_seconds = shadow_items, shadow_timeout_seconds
        self.shadow_check_seconds = shadow_check_seconds
        # What the workflow waits between two looks (the shadow step's check_seconds).
        self.shadow_wait_seconds = shadow_wait_seconds(shadow_check_seconds, shadow_timeout_seconds)
        self.shadow_min_reviewed, self.shadow_max_disagreement = shadow_min_reviewed, shadow_max_disagreement
        self.signing_key, self.head_signing_key = signing_key, head_signing_key
        self.tally = tally or ShadowTally(store.history_table)
        self.precision = precision or PrecisionTally(store.history_table)  # the live precision's tallies
        self.clock, self.signals_dir = clock, signals_dir
        self.store, self.labels, self.endpoint = store, labels, endpoint
        self.shipped, self.min_new_labels = list(shipped), min_new_labels
        self.max_reviewer_share = max_reviewer_share
        self.announce = announce
        self.work_dir = work_dir or Path(tempfile.gettempdir()) / "relearning"
        self.logger = logger or Logger(service="relearning")
        self.today = today
        if self.shadow_wait_seconds > shadow_check_seconds:
            self.logger.info(f"RelearningShadowCheckSeconds {shadow_check_seconds} would look more than "
                             f"{MAX_SHADOW_LOOKS} times in RelearningShadowTimeoutSeconds {shadow_timeout_seconds:g}: "
                             f"the workflow looks every {self.shadow_wait_seconds} s instead")

    def head_in_service(self, policy: Policy, question_id: str) -> tuple[Head | None, str]:
        """The head deciding the question now, as the routing functions load it (the store's, verified;
        else the shipped one), and its version."""
        shipped = policy.question(question_id).learned_head
        try:
            pointer = self.store.pointer(policy.name, question_id)
            key = self.head_signing_key
            if pointer is not None and key is not None and not key.head_verified(pointer, HEAD_SERVICE):
                # the routing functions refuse it too (intake/live_heads.py): not what decides
                raise ValueError(f"head {pointer.head_version}: its pointer carries no signature made for service")
            if pointer is not None:
                head = read_head(self.store.read(pointer), pointer.sha256, f"head {pointer.head_version}",
                                 named_by="the pointer's")
                if not policy.head_problems(policy.question(question_id), head):
                    return head, head.version
        except Exception as error:  # noqa: BLE001 - the routers fall back the same way
            self.logger.warning("head in the store unreadable; judging against the shipped head",
                                extra={"question": question_id, "reason": str(error)})
        return shipped, shipped.version if shipped else "letters"

    def _head_signature(self, policy: str, question: str, sha256: str, head_version: str, purpose: str) -> str:
        """The head signing key's signature of what the gate passed, for `purpose` ("" without a key:
        unsigned): HEAD_SHADOW when its shadow starts, HEAD_SERVICE only in `promote`, after the
        shadow's verdict (and any approval), so a shadow's signature never puts a head in service."""
        key = self.head_signing_key
        return key.head_signature(policy, question, sha256, head_version, purpose) if key is not None else ""
