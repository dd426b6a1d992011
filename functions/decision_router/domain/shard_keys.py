"""The keys of write sharding: a key every item touches spread over `shards` partition keys
(`<key>#<shard>`), each row's shard found again from its own key. Pure code, so the records (an
audit row's index key) and the adapters (which read every shard: adapters/shards.py) share one
definition."""

from __future__ import annotations

import hashlib


def shard_of(key: str, shards: int) -> int:
    """The shard of `key`, from 0 to `shards` - 1: the same in every process (Python's `hash` is
    salted per process), so a row's shard can be found again from its key."""
    if shards < 1:
        raise ValueError(f"shards {shards!r}: must be 1 or more")
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") % shards


def sharded(key: str, shard: int) -> str:
    """The partition key of `key`'s shard `shard`."""
    return f"{key}#{shard}"


def every_shard(key: str, shards: int) -> list[str]:
    """The partition keys of all of `key`'s shards."""
    return [sharded(key, n) for n in range(shards)]
