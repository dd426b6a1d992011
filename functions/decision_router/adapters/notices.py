"""The relearning promotion topic (SNS): every head a relearning run named in service is
announced there, for the people who own the heads (and the record beside the history table)."""

from __future__ import annotations

import json
from typing import Any

from . import AwsAdapter

#: SNS subjects: at most 100 printable ASCII characters.
MAX_SUBJECT = 100


class PromotionNotices(AwsAdapter):
    service = "sns"

    def __init__(self, topic_arn: str, client: Any = None):
        if not topic_arn:
            raise ValueError("the promotion topic's ARN is empty (RELEARNING_TOPIC_ARN)")
        super().__init__(client)
        self.topic_arn = topic_arn

    def announce(self, notice: dict[str, Any]) -> str:
        """Publish one notice (JSON); its message id."""
        subject = f"Relearning promoted {notice.get('policy', '?')}/{notice.get('question', '?')}"
        return str(self.client.publish(TopicArn=self.topic_arn, Subject=subject[:MAX_SUBJECT],
                                       Message=json.dumps(notice, sort_keys=True))["MessageId"])


#: The error a rejected candidate's approval task fails with (the workflow's AwaitApproval catches it).
NOT_APPROVED = "RelearningNotApproved"


class ApprovalAnswers(AwsAdapter):
    """A person's answer to a relearning run waiting for approval (its task token, from the notice)."""

    service = "stepfunctions"

    def approve(self, token: str, *, by: str, reason: str) -> None:
        self.client.send_task_success(taskToken=token, output=json.dumps({"approved_by": by, "reason": reason}))

    def reject(self, token: str, *, by: str, reason: str) -> None:
        self.client.send_task_failure(taskToken=token, error=NOT_APPROVED, cause=f"rejected by {by}: {reason}"[:32_000])
