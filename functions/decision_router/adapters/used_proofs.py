"""The identity proofs the review function accepted, one row each in the idempotency table (its
rows of this use start with `review-proof#`; the function's IAM grant is limited to them), so a
proof answers once: a second use, by its maker or by whoever captured it, is refused.

The row's key is a hash of the proof's signature (no proof, ARN or answer in the table); it is
kept past the proof's own expiry (`MARGIN_SECONDS`, the skew SigV4 allows), after which STS
refuses the proof anyway and the table's TTL (`expiration`) removes the row."""

from __future__ import annotations

import time
from typing import Any

from . import AwsAdapter

#: The rows' key prefix (the review function's grant names it: dynamodb:LeadingKeys).
KEY_PREFIX = "review-proof#"
#: A row outlives its proof by this much (SigV4's allowed clock skew).
MARGIN_SECONDS = 900


def proof_row_key(proof_key: str) -> str:
    return KEY_PREFIX + proof_key


class UsedProofs(AwsAdapter):
    service = "dynamodb"

    def __init__(self, table_name: str, client: Any = None) -> None:
        super().__init__(client)
        self.table_name = table_name

    def first_use(self, proof_key: str, expires_at: int) -> bool:
        """True once per proof (`proof_key`: a hash of its signature) while it is remembered: no
        row, or a row past its own expiry that DynamoDB has not deleted yet."""
        now = int(time.time())
        keep_until = max(expires_at, now) + MARGIN_SECONDS
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item={"id": {"S": proof_row_key(proof_key)}, "used_at": {"N": str(now)},
                      "expiration": {"N": str(keep_until)}},
                ConditionExpression="attribute_not_exists(id) OR expiration < :now",
                ExpressionAttributeValues={":now": {"N": str(now)}})
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True
