"""Write sharding for DynamoDB keys that every item touches. DynamoDB serves at most 1,000 writes
and 3,000 reads a second per partition (a GSI's partitions likewise), and adaptive capacity never
splits one item nor one partition key's value: a key written by every item caps the whole stack.
Such a key is spread over `shards` partition keys (`<key>#<shard>`), written one shard per write,
and read back from every shard (and from the unsharded key a stack kept before, until its rows
are gone)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

from ..domain.shard_keys import every_shard, shard_of, sharded

#: The keys' functions are the domain's (an audit row's shard is chosen there too); the adapters
#: import them from here, beside the parallel read of every shard.
__all__ = ["MAX_PARALLEL", "every_shard", "in_parallel", "shard_of", "sharded"]

Arg = TypeVar("Arg")
Result = TypeVar("Result")

#: Reads of shards at once (threads: each one waits on its own DynamoDB request).
MAX_PARALLEL = 16


def in_parallel(call: Callable[[Arg], Result], args: Iterable[Arg]) -> list[Result]:
    """`call` on each of `args` at once, the results in the order of `args` (the first error raised
    is raised here)."""
    args = list(args)
    if len(args) <= 1:
        return [call(arg) for arg in args]
    with ThreadPoolExecutor(max_workers=min(len(args), MAX_PARALLEL)) as pool:
        return list(pool.map(call, args))
