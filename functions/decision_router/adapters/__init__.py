"""The only modules that talk to AWS. Clients are created on first use, so importing
a handler never opens a connection (and tests can start moto first)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import boto3


def expiry(days: int, now: datetime | None = None) -> int:
    """A DynamoDB TTL attribute's value for a row kept `days` from `now`: epoch seconds."""
    return int(((now or datetime.now(timezone.utc)) + timedelta(days=days)).timestamp())


class AwsAdapter:
    """One boto3 client of `service`, created on first use unless one is injected."""

    service: str

    def __init__(self, client: Any = None):
        self._client = client

    def _new_client(self) -> Any:
        return boto3.client(self.service)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._new_client()
        return self._client
