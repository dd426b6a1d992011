"""Prompt cache across requests: the KV cells of recent prompts are kept in host memory, so that
a new request restores its longest cached token prefix and evaluates only the rest.

When a request's sequence finishes, its KV cells (beyond the instruction prefix every decision
shares, which sequence 0 keeps) are serialised into an *entry* with its tokens, and the sequence
is cleared. A new stream that shares more leading tokens with an entry than with anything the
context holds gets the entry's cells written back into its sequence (a memory copy, well under a
millisecond for a 300-token prompt on the embedded model) and cut back to the shared tokens.

Why host memory and not cells left resident in the KV cache: every forward pass attends over
all occupied cells of the unified cache (masked), so resident prompts slow every fresh prompt,
measured at about 5 % per 1,000 cells on the embedded model. Entries in host memory cost
nothing until they are used; the stock llama-server keeps its prompt cache in host memory too.

A decision's entry also keeps what was read at its last position (`FinalOutput`), so the very
same prompt again is answered with the very same numbers and no forward pass at all.

Recurrent/hybrid memory (a linear-attention layer's state, say) cannot be cut back to a shorter
prefix: for those models an entry serves only prompts that extend its tokens whole (`whole_only`),
such as the same decision again or another question after a batch on the same state.

Entries are evicted least recently used, to stay within a budget of bytes. Pure bookkeeping:
the scheduler owns the context and makes and restores the snapshots.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from .llama import SequenceState

MIB = 1024 * 1024


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

    @property
    def nbytes(self) -> int:
        return self.letter_logits.nbytes + (self.hidden.nbytes if self.hidden is not None else 0)

    def better_than(self, other: "FinalOutput | None") -> bool:
        """Whether to keep this output rather than `other` (it also has the hidden state)."""
        return other is None or (other.hidden is None and self.hidden is not None)


_entry_ids = itertools.count(1)


@dataclass(eq=False)
class Entry:
    tokens: np.ndarray
    #: The cells of tokens[state.start:] (the first `state.start` are sequence 0's); None for an
    #: answer-only entry, which answers the same prompt again and serves no other.
    state: SequenceState | None
    final: FinalOutput | None = None  # the output at its last token, where a decision read one
    key: int = field(default_factory=lambda: next(_entry_ids))

    @property
    def nbytes(self) -> int:
        return self.tokens.nbytes + (self.state.size if self.state is not None else 0) + (
            self.final.nbytes if self.final is not None else 0)


@dataclass
class CacheStats:
    """Counters since start: a lookup per prompt (or shared-state stem) a request evaluates; a
    hit when a cached prompt gave it more tokens than it had without the cache."""

    lookups: int = 0
    hits: int = 0
    prompt_tokens: int = 0  # tokens of the prompts looked up
    reused_tokens: int = 0  # of those, restored from cached prompts (beyond the shared prefix)
    evictions: int = 0
    cleared: int = 0
    restore_failures: int = 0  # entries llama.cpp could not write back (the prompt was evaluated)


class PromptCache:
    """Recent prompts' KV cells in host memory, at most `budget` bytes, least recently used out.
    `whole_only`: an entry serves a prompt only when the prompt starts with all of its tokens."""

    def __init__(self, budget: int, *, whole_only: bool = False) -> None:
        self.budget = budget
        self.whole_only = whole_only
        self._entries: OrderedDict[int, Entry] = OrderedDict()  # least recently used first
        self.stats = CacheStats()
        #: Bytes the entries hold; kept up to date by every change, so other threads may read it.
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def longest(self, tokens: np.ndarray, limit: int) -> tuple[Entry | None, int]:
        """The entry sharing the most leading tokens with `tokens` (at most `limit`), and how
        many; the most recently used wins a tie."""
        best: Entry | None = None
        best_n = 0
        for entry in reversed(self._entries.values()):
            if entry.state is None:
                continue
            n = common_prefix(entry.tokens, tokens, limit)
            if self.whole_only and n < len(entry.tokens):
                continue
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
        if entry.key in self._entries:
            self._entries.move_to_end(entry.key)

    def record(self, prompt_tokens: int, reused: int) -> None:
        self.stats.lookups += 1
        self.stats.prompt_tokens += prompt_tokens
        if reused:
            self.stats.hits += 1
            self.stats.reused_tokens += reused

    def insert(self, tokens: Sequence[int], shared: int, snapshot: Callable[[], SequenceState] | None,
               final: FinalOutput | None = None) -> Entry | None:
        """Keep the prompt `tokens` (and `final`, the output read at its last token) as the most
        recent entry. Its first `shared` tokens are the instruction prefix sequence 0 holds;
        `snapshot()` serialises the cells of the rest, called only when no entry already serves
        the prompt. Without a snapshot only the output is kept (for a question of a batch, whose
        state the batch's stem keeps). Returns the entry that serves the prompt, if any."""
        array = np.asarray(tokens, dtype=np.int32)
        n = len(array)
        if self.budget <= 0 or (n <= shared if snapshot is not None else final is None):
            return None  # nothing to keep beyond the shared prefix
        same = [e for e in self._entries.values() if len(e.tokens) == n and common_prefix(e.tokens, array, n) == n]
        for entry in same:  # whatever else, the entry of this very prompt keeps the best output read
            if final is not None and final.better_than(entry.final):
                self._resize(entry, final=final)
        if snapshot is None:
            holder = same[-1] if same else None
        else:
            holder = next((e for e in reversed(self._entries.values()) if e.state is not None and (
                len(e.tokens) == n or not self.whole_only and len(e.tokens) > n)
                and common_prefix(e.tokens, array, n) == n), None)
        if holder is not None:
            self.touch(holder)
            return holder
        state = snapshot() if snapshot is not None else None
        if state is not None:
            # Entries of this prompt without cells, and entries without an output whose tokens lead
            # this one's (except where entries serve whole prompts only), serve nothing it does not.
            for entry in [e for e in self._entries.values() if e in same or not self.whole_only and
                          e.final is None and common_prefix(e.tokens, array, n) == len(e.tokens)]:
                if entry.final is not None and entry.final.better_than(final):
                    final = entry.final
                self._remove(entry.key)
        kept = Entry(array, state, final)
        if kept.nbytes > self.budget:
            return None
        self._entries[kept.key] = kept
        self.nbytes += kept.nbytes
        while self.nbytes > self.budget:
            self.evict()
        return kept

    def _resize(self, entry: Entry, *, final: FinalOutput) -> None:
        self.nbytes -= entry.nbytes
        entry.final = final
        self.nbytes += entry.nbytes

    def _remove(self, key: int) -> None:
        self.nbytes -= self._entries.pop(key).nbytes

    def evict(self) -> None:
        """Drop the least recently used entry."""
        self._remove(next(iter(self._entries)))
        self.stats.evictions += 1

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0
        self.stats.cleared += 1


class PromptCacheStats(BaseModel):
    """The prompt cache as `/ping` reports it."""

    enabled: bool = Field(description="false: DECISION_PROMPT_CACHE_MIB=0")
    whole_prompts_only: bool = Field(False, description="true for recurrent/hybrid models: a cached prompt "
                                     "serves only prompts that start with all of its tokens")
    budget_mib: float = Field(description="DECISION_PROMPT_CACHE_MIB")
    mib: float = Field(0.0, description="host memory the cached prompts' KV cells hold now")
    prompts: int = Field(0, description="prompts cached now")
    lookups: int = Field(0, description="prompts (and shared-state stems) looked up since start")
    hits: int = Field(0, description="lookups that a cached prompt gave a longer prefix")
    hit_rate: float = Field(0.0, description="hits / lookups")
    prompt_tokens: int = Field(0, description="tokens of the prompts looked up")
    reused_tokens: int = Field(0, description="of those, tokens restored from cached prompts instead of evaluated")
    evictions: int = Field(0, description="prompts evicted (least recently used) for the budget")
    restore_failures: int = Field(0, description="cached prompts llama.cpp could not write back into the KV "
                                  "cache (no run of free cells long enough); those prompts were evaluated")
