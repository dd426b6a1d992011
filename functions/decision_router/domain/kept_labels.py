"""The layout of the labels relearning keeps in the head bucket (relearning/labels.py writes them,
`make erase` rewrites them without an erased item's rows): one definition for both.

`labels/<policy>.jsonl.gz` (gzip JSON lines): a header line (`watermark`: the newest `labelled_at`
read back to, `full_read_at`: when the policy's partition is read whole once more, or null;
`erased_at`, only once `make erase` has rewritten the object: when it last did), then one row per
item key as the labelled-examples table holds it (its string columns, the item's text among
them: `item_kind`, `item`).

Both writers write conditionally (S3 If-Match on the ETag they read, If-None-Match for a new
object) and start over on a conflict. An erasure always writes a new version (its `erased_at`
changes the bytes, so the ETag changes too), after the item's table rows are gone: a relearning
sync that read the object before it cannot write it back, and reads the table again after.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from typing import Callable, Mapping

#: Where the kept labels lie in the head bucket (the template's `kept-labels` lifecycle rule).
LABELS_PREFIX = "labels/"


def labels_key(policy: str) -> str:
    return f"{LABELS_PREFIX}{policy}.jsonl.gz"


@dataclass
class KeptLabels:
    watermark: str = ""
    full_read_at: float | None = None
    rows: dict[str, dict[str, str]] = field(default_factory=dict)
    erased_at: float | None = None

    def dump(self) -> bytes:
        header: dict[str, object] = {"watermark": self.watermark, "full_read_at": self.full_read_at}
        if self.erased_at is not None:
            header["erased_at"] = self.erased_at
        lines = [json.dumps(header)]
        lines += [json.dumps(row, sort_keys=True) for _, row in sorted(self.rows.items())]
        return gzip.compress("\n".join(lines).encode(), mtime=0)

    @classmethod
    def load(cls, data: bytes, key: str) -> KeptLabels:
        """ValueError naming `key` (the object's) for bytes that are not this layout."""
        try:
            header, *rows = gzip.decompress(data).decode().splitlines()
            head = json.loads(header)
            kept = cls(str(head["watermark"]), head["full_read_at"], erased_at=head.get("erased_at"))
            kept.rows = {row["item_key"]: row for row in map(json.loads, rows)}
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{key}: not the labels relearning keeps ({type(error).__name__}: {error})") from None
        return kept

    def remove(self, picked: Callable[[Mapping[str, str]], bool]) -> int:
        """Drop the rows `picked` names (an erased item's), the watermark and the next full read
        kept as they are; how many were dropped."""
        before = len(self.rows)
        self.rows = {key: row for key, row in self.rows.items() if not picked(row)}
        return before - len(self.rows)
