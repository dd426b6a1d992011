"""The live precision's tallies (domain/precision.py `CheckCounts`): rows of the head history
table under `precision#<policy>/<question>`, one for the question (`at` = "question") and one per
automatic answer's option (`at` = "option#<id>"), counted up atomically (UpdateItem ADD) by the
functions that accept a reviewer's answer: the review function and the review console, each
answer once, after it was accepted. The relearning gate reads the question's row."""

from __future__ import annotations

from typing import Any

from ..domain.precision import CheckCounts
from . import AwsAdapter

#: The history table's partition of the precision tallies (the review functions may write only these and the shadows').
PREFIX = "precision#"
QUESTION_ROW = "question"
OPTION_ROW = "option#"


def tally_key(policy: str, question: str, option: str | None = None) -> dict[str, dict[str, str]]:
    return {"policy_question": {"S": f"{PREFIX}{policy}/{question}"},
            "at": {"S": QUESTION_ROW if option is None else f"{OPTION_ROW}{option}"}}


def _counts(item: dict[str, Any]) -> CheckCounts:
    return CheckCounts(**{name: int(item[name]["N"]) for name in CheckCounts.model_fields if name in item})


class PrecisionTally(AwsAdapter):
    service = "dynamodb"

    def __init__(self, history_table: str, *, client: Any = None):
        super().__init__(client)
        self.table = history_table

    def add(self, policy: str, question: str, option: str, **counts: int) -> CheckCounts:
        """Add to the question's counts and to its option's (names of CheckCounts' fields); the
        question's counts after the addition (the one update's own answer: no other count between)."""
        unknown = set(counts) - set(CheckCounts.model_fields)
        if unknown or not counts:
            raise ValueError(f"precision counts {sorted(counts)}: name one or more of {sorted(CheckCounts.model_fields)}")
        names = {f"#{name}": name for name in counts}
        values = {f":{name}": {"N": str(int(value))} for name, value in counts.items()}
        update = {"TableName": self.table, "UpdateExpression": "ADD " + ", ".join(f"#{n} :{n}" for n in counts),
                  "ExpressionAttributeNames": names, "ExpressionAttributeValues": values}
        self.client.update_item(Key=tally_key(policy, question, option), **update)
        answer = self.client.update_item(Key=tally_key(policy, question), ReturnValues="ALL_NEW", **update)
        return _counts(answer.get("Attributes", {}))

    def counts(self, policy: str, question: str, option: str | None = None) -> CheckCounts:
        """The question's (or one option's) counts so far (zeros before any)."""
        item = self.client.get_item(TableName=self.table, Key=tally_key(policy, question, option),
                                    ConsistentRead=True).get("Item", {})
        return _counts(item)

    def options(self, policy: str, question: str) -> dict[str, CheckCounts]:
        """Each option's counts so far, by option id (only options counted at least once): one
        query of the question's partition."""
        out: dict[str, CheckCounts] = {}
        kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True,
                                  "KeyConditionExpression": "policy_question = :pq AND begins_with(#at, :option)",
                                  "ExpressionAttributeNames": {"#at": "at"},
                                  "ExpressionAttributeValues": {":pq": {"S": f"{PREFIX}{policy}/{question}"},
                                                                ":option": {"S": OPTION_ROW}}}
        while True:
            page = self.client.query(**kwargs)
            out.update({item["at"]["S"][len(OPTION_ROW):]: _counts(item) for item in page.get("Items", [])})
            if "LastEvaluatedKey" not in page:
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
