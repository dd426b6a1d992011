"""The shadow heads' tallies (domain/shadow.py `ShadowCounts`): one row of the head history table
per policy question and shadow head (`shadow#<policy>/<question>`, keyed by the head's sha256),
counted up atomically (UpdateItem ADD) by the routing functions (each shadowed item once: they
count inside the item's once-per-key judgement) and by the review function (each review once:
after its answer was accepted). The relearning workflow reads it to judge the shadow."""

from __future__ import annotations

from typing import Any

from ..domain.shadow import ShadowCounts
from . import AwsAdapter

#: The history table's partition of the shadow tallies (the routing functions may write only these).
PREFIX = "shadow#"


def tally_key(policy: str, question: str, sha256: str) -> dict[str, dict[str, str]]:
    return {"policy_question": {"S": f"{PREFIX}{policy}/{question}"}, "at": {"S": sha256}}


class ShadowTally(AwsAdapter):
    service = "dynamodb"

    def __init__(self, history_table: str, *, client: Any = None):
        super().__init__(client)
        self.table = history_table

    def add(self, policy: str, question: str, sha256: str, **counts: int) -> None:
        """Add to the shadow head's counts (names of ShadowCounts' fields)."""
        unknown = set(counts) - set(ShadowCounts.model_fields)
        if unknown or not counts:
            raise ValueError(f"shadow counts {sorted(counts)}: name one or more of {sorted(ShadowCounts.model_fields)}")
        names = {f"#{name}": name for name in counts}
        values = {f":{name}": {"N": str(int(value))} for name, value in counts.items()}
        self.client.update_item(TableName=self.table, Key=tally_key(policy, question, sha256),
                                UpdateExpression="ADD " + ", ".join(f"#{n} :{n}" for n in counts),
                                ExpressionAttributeNames=names, ExpressionAttributeValues=values)

    def counts(self, policy: str, question: str, sha256: str) -> ShadowCounts:
        """The shadow head's counts so far (zeros when it answered nothing yet)."""
        item = self.client.get_item(TableName=self.table, Key=tally_key(policy, question, sha256),
                                    ConsistentRead=True).get("Item", {})
        return ShadowCounts(**{name: int(item[name]["N"]) for name in ShadowCounts.model_fields if name in item})
