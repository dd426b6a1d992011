"""Prompt cache across requests: the KV cells of recent prompts stay resident, so that a new
request copies its longest cached token prefix and evaluates only the rest.

A finished request's sequence is not cleared: it becomes a cache *entry* (its tokens, and the
sequence that holds their cells). A new stream copies the longest prefix any entry shares with
its tokens (a copy shares cells, nothing moves). Entries are evicted least recently used, to
stay within the budget of cells, and whenever admitted work needs the cells.

The budget counts cells, not entries: entries share cells (a prompt that reused another's
prefix holds the same cells for it), so the cache tracks where each cell came from. A stream's
cells are *blocks*: the run it evaluated itself (a new block) after the prefix it copied (a
leading part of its source's blocks). The cells of a set of entries are then the union of their
blocks, each counted up to the longest part of it any entry holds. Block 0 is the prompt prefix
every decision shares (sequence 0, resident for good): never counted.

Pure bookkeeping: the scheduler clears the sequences this returns and owns the context.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from pydantic import BaseModel, Field

#: (block id, cells of the block held: always its leading ones)
Block = tuple[int, int]
#: The prompt prefix in sequence 0: resident whatever the cache holds.
PREFIX_BLOCK = 0


def leading_blocks(blocks: Sequence[Block], n_cells: int) -> tuple[Block, ...]:
    """The blocks of the first `n_cells` cells of a sequence made of `blocks`."""
    out: list[Block] = []
    left = n_cells
    for block, count in blocks:
        if left <= 0:
            break
        out.append((block, min(count, left)))
        left -= count
    return tuple(out)


def common_prefix(a: np.ndarray, b: np.ndarray, limit: int) -> int:
    """How many leading tokens `a` and `b` share, at most `limit`."""
    m = min(len(a), len(b), limit)
    if m <= 0:
        return 0
    differ = np.flatnonzero(a[:m] != b[:m])
    return int(differ[0]) if differ.size else m


@dataclass(frozen=True, eq=False)
class FinalOutput:
    """What a decision reads at its prompt's last position: every option letter's logit (A
    first), the log-sum-exp and argmax of the whole vocabulary's, and the hidden state when it
    was asked for. Kept with the cached prompt, it answers the same prompt again exactly."""

    letter_logits: np.ndarray
    lse_vocab: float
    argmax: int
    hidden: np.ndarray | None = None


@dataclass(eq=False)
class Entry:
    sequence: int
    tokens: np.ndarray
    blocks: tuple[Block, ...]
    final: FinalOutput | None = None  # the output at its last token, where a decision read one


@dataclass
class CacheStats:
    """Counters since start: a lookup per prompt (or shared-state stem) a request evaluates; a
    hit when a cached prompt gave it more tokens than it had without the cache."""

    lookups: int = 0
    hits: int = 0
    prompt_tokens: int = 0  # tokens of the prompts looked up
    reused_tokens: int = 0  # of those, copied from cached prompts (beyond the shared prefix)
    evictions: int = 0
    cleared: int = 0


class PromptCache:
    """Recent prompts' cells, at most `budget` cells in at most `slots` sequences, LRU."""

    def __init__(self, budget: int, slots: int) -> None:
        self.budget, self.slots = budget, slots
        self._entries: OrderedDict[int, Entry] = OrderedDict()  # least recently used first
        self.stats = CacheStats()
        #: KV cells the entries hold beyond the shared prefix (shared cells counted once);
        #: kept up to date by every change, so other threads may read it.
        self.cells = 0

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def get(self, sequence: int) -> Entry | None:
        return self._entries.get(sequence)

    def _count_cells(self) -> int:
        held: dict[int, int] = {}
        for entry in self._entries.values():
            for block, count in entry.blocks:
                if block != PREFIX_BLOCK and count > held.get(block, 0):
                    held[block] = count
        self.cells = sum(held.values())
        return self.cells

    def longest(self, tokens: np.ndarray, limit: int) -> tuple[Entry | None, int]:
        """The entry sharing the most leading tokens with `tokens` (at most `limit`), and how
        many; the most recently used wins a tie."""
        best: Entry | None = None
        best_n = 0
        for entry in reversed(self._entries.values()):
            n = common_prefix(entry.tokens, tokens, limit)
            if n > best_n:
                best, best_n = entry, n
        return best, best_n

    def answered(self, tokens: Sequence[int], *, with_hidden: bool) -> Entry | None:
        """The entry holding exactly `tokens` with the output read at its last one (and the
        hidden state, when `with_hidden`), or None."""
        array = np.asarray(tokens, dtype=np.int32)
        for entry in reversed(self._entries.values()):
            final = entry.final
            if final is None or len(entry.tokens) != len(array) or (with_hidden and final.hidden is None):
                continue
            if common_prefix(entry.tokens, array, len(array)) == len(array):
                return entry
        return None

    def touch(self, entry: Entry) -> None:
        """`entry` was used: it is now the most recent."""
        self._entries.move_to_end(entry.sequence)

    def record(self, prompt_tokens: int, reused: int) -> None:
        self.stats.lookups += 1
        self.stats.prompt_tokens += prompt_tokens
        if reused:
            self.stats.hits += 1
            self.stats.reused_tokens += reused

    def insert(self, sequence: int, tokens: Sequence[int], blocks: Sequence[Block],
               final: FinalOutput | None = None) -> list[int]:
        """Keep `sequence`, holding `tokens` in cells `blocks` (and `final`, the output read at
        the last token), as the most recent entry. Returns the sequences the caller must clear:
        evicted entries', or `sequence` itself when it is not kept (nothing new in it, or more
        cells than the whole budget)."""
        array = np.asarray(tokens, dtype=np.int32)
        n = len(array)
        own = sum(count for block, count in blocks if block != PREFIX_BLOCK)
        if n == 0 or own == 0 or own > self.budget or self.slots == 0:
            return [sequence]
        for entry in self._entries.values():
            if len(entry.tokens) >= n and common_prefix(entry.tokens, array, n) == n:
                # already held: the entry serves it (and keeps the output read here, if it had none
                # or one without the hidden state)
                if len(entry.tokens) == n and final is not None and (
                        entry.final is None or (entry.final.hidden is None and final.hidden is not None)):
                    entry.final = final
                self._entries.move_to_end(entry.sequence)
                return [sequence]
        freed = []
        # Entries whose tokens lead this one's serve nothing it does not (but an answer): drop them.
        for entry in [e for e in self._entries.values()
                      if e.final is None and common_prefix(e.tokens, array, n) == len(e.tokens)]:
            del self._entries[entry.sequence]
            freed.append(entry.sequence)
        self._entries[sequence] = Entry(sequence, array, tuple(blocks), final)
        while len(self._entries) > self.slots or self._count_cells() > self.budget:
            freed.append(self.evict())
        return freed

    def evict(self) -> int:
        """Drop the least recently used entry; its sequence, for the caller to clear."""
        sequence, _ = self._entries.popitem(last=False)
        self.stats.evictions += 1
        self._count_cells()
        return sequence

    def clear(self) -> list[int]:
        freed = list(self._entries)
        self._entries.clear()
        self.stats.cleared += 1
        self._count_cells()
        return freed


class PromptCacheStats(BaseModel):
    """The prompt cache as `/ping` reports it."""

    enabled: bool = Field(description="false: DECISION_PROMPT_CACHE_CELLS=0, or a recurrent/hybrid model")
    budget_cells: int = Field(description="DECISION_PROMPT_CACHE_CELLS")
    cells: int = Field(0, description="KV cells cached prompts hold now (beyond the shared instruction prefix)")
    prompts: int = Field(0, description="prompts cached now")
    lookups: int = Field(0, description="prompts (and shared-state stems) looked up since start")
    hits: int = Field(0, description="lookups that a cached prompt gave a longer prefix")
    hit_rate: float = Field(0.0, description="hits / lookups")
    prompt_tokens: int = Field(0, description="tokens of the prompts looked up")
    reused_tokens: int = Field(0, description="of those, tokens copied from cached prompts instead of evaluated")
    evictions: int = Field(0, description="prompts evicted (least recently used) for the budget or for work")
