"""The item erase removes, by its full key `kind:source:id`, and how a row or a message is known to hold it (`ops.erase`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from decision_router.items import ITEM_MODELS
from ops.command import CommandError


class EraseError(CommandError):
    """An item key or a stack that cannot be erased from, in words."""


@dataclass(frozen=True)
class ItemKey:
    kind: str
    source: str
    id: str

    @classmethod
    def parse(cls, text: str) -> ItemKey:
        kind, _, rest = text.partition(":")
        source, _, item_id = rest.partition(":")
        if kind not in ITEM_MODELS:
            raise EraseError(f"ITEM {text!r}: the kind {kind!r} is not one of {', '.join(sorted(ITEM_MODELS))} "
                             f"(expected kind:source:id)")
        if not source or not item_id:
            raise EraseError(f"ITEM {text!r}: expected kind:source:id, e.g. ticket:email:T-1001")
        return cls(kind, source, item_id)

    def __str__(self) -> str:
        return f"{self.kind}:{self.source}:{self.id}"

    def holds(self, kind: Any, item: Any) -> bool:
        """Whether a row's kind and item (a dict, or its JSON text) are this item."""
        if kind != self.kind:
            return False
        if isinstance(item, str):
            try:
                item = json.loads(item)
            except ValueError:
                return False
        if not isinstance(item, Mapping):
            return False
        model = ITEM_MODELS[self.kind]
        return item.get(model.id_field) == self.id and item.get(model.source_field) == self.source
