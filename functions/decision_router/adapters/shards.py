"""Write sharding for DynamoDB keys that every item touches. DynamoDB serves at most 1,000 writes
and 3,000 reads a second per partition (a GSI's partitions likewise), and adaptive capacity never
splits one item nor one partition key's value: a key written by every item caps the whole stack.
Such a key is spread over `shards` partition keys (`<key>#<shard>`), written one shard per write,
and read back from every shard (and from the unsharded key a stack kept before, until its rows
are gone)."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

Arg = TypeVar("Arg")
Result = TypeVar("Result")

#: Reads of shards at once (threads: each one waits on its own DynamoDB request).
MAX_PARALLEL = 16


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


def in_parallel(call: Callable[[Arg], Result], args: Iterable[Arg]) -> list[Result]:
    """`call` on each of `args` at once, the results in the order of `args` (the first error raised
    is raised here)."""
    args = list(args)
    if len(args) <= 1:
        return [call(arg) for arg in args]
    with ThreadPoolExecutor(max_workers=min(len(args), MAX_PARALLEL)) as pool:
        return list(pool.map(call, args))
