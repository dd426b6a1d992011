"""A condition on one field of an item, as policies write them (rules, noise controls)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..items import Item, field_value


class Condition(BaseModel):
    """A test of one item field (dotted path): its value is `equals`, or one of `in`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str
    equals: str | int | float | bool | None = None
    in_: list[str | int | float | bool] | None = Field(default=None, alias="in")

    @model_validator(mode="after")
    def _one_operator(self) -> "Condition":
        if (self.equals is None) == (self.in_ is None):
            raise ValueError("give exactly one of 'equals' or 'in'")
        return self

    @property
    def values(self) -> list[Any]:
        return [self.equals] if self.in_ is None else list(self.in_)

    def holds(self, item: Item) -> bool:
        return field_value(item, self.field) in self.values
