"""SQS queues the functions and operators' tools use beyond the workflow (dead-letter queues),
and the event bus the redrive re-publishes to."""

from __future__ import annotations

import json
from typing import Any, Iterator

from . import AwsAdapter

#: Long poll: a receive waits this long before answering empty (a short poll may miss messages).
POLL_SECONDS = 1
#: A message being handled is hidden this long from other readers (and from this run's next receive).
HOLD_SECONDS = 300
#: Message attributes are for a reason, not a document.
MAX_ATTRIBUTE_CHARS = 2000



def new_batches(client: Any, queue_url: str, *, visibility: int, wait: int = POLL_SECONDS) -> Iterator[list[dict]]:
    """Each batch of messages not yet received by this call, until a receive brings nothing new.

    The visibility timeout keeps a received message out of the following receives, so the queue
    is read once; every receive long-polls (`wait`), since a short poll samples only some SQS
    servers and can come back empty while messages wait. The caller decides what becomes of
    each message (deleted, or made visible again with `release_now`)."""
    seen: set[str] = set()
    while True:
        messages = client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=visibility,
                                          WaitTimeSeconds=wait).get("Messages", [])
        new = [m for m in messages if m["MessageId"] not in seen]
        if not new:
            return
        seen.update(m["MessageId"] for m in new)
        yield new


def release_now(client: Any, queue_url: str, receipt_handles: list[str]) -> None:
    """Make received messages visible again at once (ten to a call, SQS's batch limit)."""
    for start in range(0, len(receipt_handles), 10):
        client.change_message_visibility_batch(QueueUrl=queue_url, Entries=[
            {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": 0}
            for i, handle in enumerate(receipt_handles[start:start + 10])])

class Queue(AwsAdapter):
    service = "sqs"

    def __init__(self, url: str, client: Any = None):
        super().__init__(client)
        self.url = url

    def messages(self, limit: int) -> Iterator[dict]:
        """Up to `limit` messages, each received once (with its attributes); stops when the queue is empty."""
        seen: set[str] = set()
        while len(seen) < limit:
            batch = self.client.receive_message(QueueUrl=self.url, MaxNumberOfMessages=min(10, limit - len(seen)),
                                                WaitTimeSeconds=POLL_SECONDS, VisibilityTimeout=HOLD_SECONDS,
                                                MessageAttributeNames=["All"]).get("Messages", [])
            new = [m for m in batch if m["MessageId"] not in seen]
            if not new:
                return
            for message in new:
                seen.add(message["MessageId"])
                yield message

    def send(self, body: str, attributes: dict[str, str] | None = None) -> None:
        """Send `body`; `attributes` become String message attributes (e.g. why it was dead-lettered)."""
        extra = {"MessageAttributes": {name: {"DataType": "String", "StringValue": value[:MAX_ATTRIBUTE_CHARS]}
                                       for name, value in attributes.items() if value}} if attributes else {}
        self.client.send_message(QueueUrl=self.url, MessageBody=body, **extra)

    def delete(self, message: dict) -> None:
        self.client.delete_message(QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"])

    def release(self, message: dict) -> None:
        """Make a message visible again at once (it was not handled)."""
        self.hide(message["ReceiptHandle"], 0)

    def hide(self, receipt_handle: str, seconds: int) -> None:
        """Keep a received message from being received again for `seconds` (from now)."""
        self.client.change_message_visibility(QueueUrl=self.url, ReceiptHandle=receipt_handle,
                                              VisibilityTimeout=seconds)


class EventBus(AwsAdapter):
    service = "events"

    def __init__(self, name: str, client: Any = None):
        super().__init__(client)
        self.name = name

    def put(self, source: str, detail_type: str, detail: dict) -> None:
        entry = {"EventBusName": self.name, "Source": source, "DetailType": detail_type, "Detail": json.dumps(detail)}
        response = self.client.put_events(Entries=[entry])
        if response.get("FailedEntryCount"):
            failed = response["Entries"][0]
            raise RuntimeError(f"EventBridge refused the event: {failed.get('ErrorCode')}: {failed.get('ErrorMessage')}")
