"""The webhook deliveries already taken, by their keys: a replay is refused."""

from __future__ import annotations

from typing import Protocol


class Claimed(Protocol):
    """A webhook delivery claimed in the delivery record."""

    @property
    def state(self) -> str: ...  # new | done | pending

    @property
    def token(self) -> str: ...

    @property
    def retry_after(self) -> int: ...


class DeliveryRecord(Protocol):
    """The webhook deliveries already taken, by their keys (a replay is refused)."""

    def claim(self, keys: list[str], source: str) -> Claimed: ...

    def done(self, keys: list[str], token: str, source: str) -> None: ...

    def forget(self, keys: list[str], token: str) -> None: ...
