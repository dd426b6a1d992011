"""The webhook deliveries already accepted: one DynamoDB row per key (a delivery's signed
message, and its sender's delivery id where it sends one), kept for RECORD_SECONDS by the
table's TTL, far longer than any source's time window, so a replay is recognised for as long as
its signature would still be accepted."""

from __future__ import annotations

import time
from typing import Any, Sequence

from . import AwsAdapter

#: How long a delivery is remembered (the table's TTL attribute `expires_at`): a day, against
#: windows of at most an hour (WebhookMaxSkewSeconds, Jira's and PagerDuty's retry windows).
RECORD_SECONDS = 86400


class Deliveries(AwsAdapter):
    service = "dynamodb"

    def __init__(self, table_name: str, client: Any = None, record_seconds: int = RECORD_SECONDS):
        super().__init__(client)
        self.table_name, self.record_seconds = table_name, record_seconds

    def claim(self, keys: Sequence[str], source: str) -> str | None:
        """Record every key of a delivery; the first that was already recorded (a replay or a
        retry), or None when the delivery is new. Keys recorded before a repeated one stay
        recorded: they belong to a delivery that was already seen."""
        now = int(time.time())
        for key in keys:
            try:
                self.client.put_item(
                    # A row past its TTL that DynamoDB has not deleted yet no longer counts.
                    TableName=self.table_name,
                    ConditionExpression="attribute_not_exists(delivery_key) OR expires_at < :now",
                    ExpressionAttributeValues={":now": {"N": str(now)}},
                    Item={"delivery_key": {"S": key}, "source": {"S": source}, "received_at": {"N": str(now)},
                          "expires_at": {"N": str(now + self.record_seconds)}})
            except self.client.exceptions.ConditionalCheckFailedException:
                return key
        return None

    def forget(self, keys: Sequence[str]) -> None:
        """Undo a claim whose delivery could not be handed on (the sender's retry must get through)."""
        for key in keys:
            self.client.delete_item(TableName=self.table_name, Key={"delivery_key": {"S": key}})
