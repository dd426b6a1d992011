"""The shadow heads' tallies (domain/shadow.py `ShadowCounts`): rows of the head history table
per policy question and shadow head, keyed by the head's sha256, counted up atomically
(UpdateItem ADD) by the routing functions (each shadowed item once: they count inside the item's
once-per-key judgement) and by the review function (each review once: after its answer was
accepted). The relearning workflow reads it to judge the shadow.

Every shadowed item of a question adds to its shadow head's tally, so one row would take every
routed item's write. The tally is `SHARDS` rows instead (`shadow#<policy>/<question>#<shard>`),
each write adding to one shard picked at random, and `counts` sums them all with one BatchGetItem,
together with the unsharded row (`shadow#<policy>/<question>`) a stack counted into before: a
stack that upgrades in the middle of a shadow period keeps what it had counted."""

from __future__ import annotations

import random
from typing import Any

from ..domain.shadow import ShadowCounts
from . import BATCH_GET_ROUNDS, AwsAdapter, batch_get
from .shards import every_shard, sharded

#: The history table's partition of the shadow tallies (the routing functions may write only these).
PREFIX = "shadow#"
#: Rows per shadow head's tally. Each row takes at most 1,000 writes a second (one DynamoDB
#: partition); a million items a day shadowed on every question is about 50 million additions a
#: day (580 a second on average, a few thousand at a peak): 10 shards take 10,000 a second. A read
#: sums 11 rows (the shards and the unsharded row) in one BatchGetItem.
SHARDS = 10
#: BatchGetItem rounds for keys DynamoDB left unprocessed (throttled) before giving up.
MAX_ROUNDS = BATCH_GET_ROUNDS


def tally_partition(policy: str, question: str) -> str:
    """The unsharded partition key of a question's shadow tallies (a stack's rows before sharding)."""
    return f"{PREFIX}{policy}/{question}"


def tally_key(policy: str, question: str, sha256: str, shard: int | None = None) -> dict[str, dict[str, str]]:
    """The row of shard `shard` of the shadow head's tally (None: the unsharded row of before)."""
    partition = tally_partition(policy, question)
    return {"policy_question": {"S": partition if shard is None else sharded(partition, shard)}, "at": {"S": sha256}}


def tally_keys(policy: str, question: str, sha256: str) -> list[dict[str, dict[str, str]]]:
    """Every row a shadow head's counts are summed from: the unsharded row, then each shard's."""
    return [tally_key(policy, question, sha256),
            *({"policy_question": {"S": key}, "at": {"S": sha256}}
              for key in every_shard(tally_partition(policy, question), SHARDS))]


class ShadowTally(AwsAdapter):
    service = "dynamodb"

    def __init__(self, history_table: str, *, client: Any = None):
        super().__init__(client)
        self.table = history_table

    def add(self, policy: str, question: str, sha256: str, **counts: int) -> None:
        """Add to the shadow head's counts (names of ShadowCounts' fields), on one shard."""
        unknown = set(counts) - set(ShadowCounts.model_fields)
        if unknown or not counts:
            raise ValueError(f"shadow counts {sorted(counts)}: name one or more of {sorted(ShadowCounts.model_fields)}")
        names = {f"#{name}": name for name in counts}
        values = {f":{name}": {"N": str(int(value))} for name, value in counts.items()}
        # Any shard will do: the counts are only ever read summed.
        shard = random.randrange(SHARDS)
        self.client.update_item(TableName=self.table, Key=tally_key(policy, question, sha256, shard),
                                UpdateExpression="ADD " + ", ".join(f"#{n} :{n}" for n in counts),
                                ExpressionAttributeNames=names, ExpressionAttributeValues=values)

    def counts(self, policy: str, question: str, sha256: str) -> ShadowCounts:
        """The shadow head's counts so far, summed over its rows (zeros when it answered nothing yet)."""
        totals = dict.fromkeys(ShadowCounts.model_fields, 0)
        for item in self._rows(tally_keys(policy, question, sha256)):
            for name in totals:
                if name in item:
                    totals[name] += int(item[name]["N"])
        return ShadowCounts(**totals)

    def _rows(self, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows of `keys` that exist (one BatchGetItem, strongly consistent)."""
        return batch_get(self.client, self.table, keys, what=f"shadow tally in {self.table!r}", consistent=True)
