"""The relearning promotion topic (SNS): every head a relearning run named in service is
announced there, for the people who own the heads (and the record beside the history table)."""

from __future__ import annotations

import json
from typing import Any

from . import AwsAdapter
from .queues import new_batches, release_now

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


class ApprovalRequests(AwsAdapter):
    """The approval queue (SQS): one message per run waiting for a person, with its task token
    (the workflow's AwaitApproval state sends it; the promotion topic's notice names the run only)."""

    service = "sqs"

    def __init__(self, queue_url: str, client: Any = None):
        if not queue_url:
            raise ValueError("the approval queue's URL is empty (--approval-queue-url / APPROVAL_QUEUE_URL)")
        super().__init__(client)
        self.queue_url = queue_url

    def take(self, run: str) -> tuple[str, str] | None:
        """(task token, receipt handle) of the run's request, the others left visible at once;
        None when no request of the run waits. A message that is not a request is left as it is."""
        mine: tuple[str, str] | None = None
        others: list[str] = []
        for batch in new_batches(self.client, self.queue_url, visibility=30):
            for message in batch:
                try:
                    body = json.loads(message["Body"])
                    found = body["execution"] == run and isinstance(body["task_token"], str)
                except (ValueError, KeyError, TypeError):
                    found = False
                if found and mine is None:
                    mine = (body["task_token"], message["ReceiptHandle"])
                else:
                    others.append(message["ReceiptHandle"])
            if mine is not None:
                break
        release_now(self.client, self.queue_url, others)
        return mine

    def remove(self, receipt_handle: str) -> None:
        """The answered request, off the queue."""
        self.client.delete_message(QueueUrl=self.queue_url, ReceiptHandle=receipt_handle)
