"""The whole Decision Router on this machine, as a library: `LocalPipeline` is the stack deployed
locally (`local.deployment`: template.yaml's resources in moto, the functions in their own
processes) plus `run`, which sends every input line through its intake (`local.sending`), waits
for the workflow and reads back where each ended up (`local.settling`).

    with LocalPipeline(log=log) as pipeline:     # inside local.services.local_aws_environ
        outcomes = pipeline.run(read_items(paths))

`local.demo`, `local.soak` and `local.review` are command lines over this.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from local import sending, settling
from local.deployment import DEMO_REVIEWER, ENDPOINT_NAME, LOG_DIR, LocalDeployment
from local.items import InputItem
from local.outcomes import Outcome

__all__ = ["DEMO_REVIEWER", "ENDPOINT_NAME", "LOG_DIR", "LocalPipeline"]

Progress = Callable[[str], None]


class LocalPipeline(LocalDeployment):
    """The deployed stack, and the inputs run through it."""

    def run(self, items: list[InputItem], progress: Progress = lambda _: None, timeout: float = 120, *,
            redelivery_seconds: int = 0, retry_delays: Sequence[float] = ()) -> list[Outcome]:
        """Send every item through its intake, wait for the workflow, read back where it ended up.
        A failed ticket is visible again after `redelivery_seconds`, a failed event retried after
        `retry_delays`."""
        self.redelivery_seconds, self.retry_delays = redelivery_seconds, tuple(retry_delays)
        outcomes = [Outcome(item, problem=f"rejected: {item.rejected}" if item.rejected else None) for item in items]
        sending.send_all(self, outcomes, progress)
        settling.settle(self, outcomes, timeout)
        return outcomes

    def read_back(self, outcomes: list[Outcome]) -> None:
        """Drain the destination queues, the on-call pages and the workflow DLQ; look up audits."""
        settling.read_back(self, outcomes)

    def execution_arn(self, item: InputItem) -> str | None:
        """The ARN of the item's (first) execution; None when the item does not validate."""
        return settling.execution_arn(self, item)

    def release_reviews(self) -> None:
        """Make the held review messages visible again (for a reviewer tool such as the console)."""
        settling.release_reviews(self)

    def complete_review(self, outcome: Outcome, reviewer: str = DEMO_REVIEWER, timeout: float = 60,
                        answers: dict[str, str] | None = None) -> dict[str, Any]:
        """Answer a pending review through the real review function; see `settling.complete_review`."""
        return settling.complete_review(self, outcome, reviewer, timeout, answers)
