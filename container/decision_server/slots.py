"""The context's sequences (llama-server's slots): which stream holds which, and how a stream's
sequence is filled before it is evaluated and saved once it is done.

Sequence 0 holds the global prefix every decision shares; the others are slots for streams. A
stream starting in a slot gets the longest prefix of its tokens held anywhere: a cached
prompt's cells restored from host memory (prompt_cache.py), or its source sequence's cells
shared (sequence 0, or its work's stem). A finished stream's prompt is saved to the cache before
its slot is freed, once the answers of the step are out. Only the worker thread calls in here.
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from .llama import BatchToken, LlamaContext, LlamaError
from .prompt_cache import FinalOutput, PromptCache, common_prefix
from .work import PREFIX_SEQUENCE, Stream

# The decode loop's logger: saving to the cache is one of its steps.
log = logging.getLogger("decision_server.scheduler")


class Slots:
    """The global prefix in sequence 0, and the streams holding the other sequences."""

    def __init__(self, ctx: LlamaContext, *, copy_by_state: bool, cache: PromptCache | None) -> None:
        self.ctx = ctx
        self.copy_by_state = copy_by_state
        #: Recent prompts' cells in host memory (None: no cache).
        self.cache = cache
        self.prefix_tokens: list[int] = []
        self.running: list[Stream] = []  # streams holding a sequence, arrival order
        self.extra_cost = 0  # cells of streams beyond each work's reservation
        self._free_sequences = list(range(ctx.n_seq_max - 1, PREFIX_SEQUENCE, -1))
        self._unsaved: list[Stream] = []  # finished streams to save to the cache once answers are out

    # --- the global prefix -----------------------------------------------------------------------

    def load_prefix(self, tokens: Sequence[int]) -> None:
        """Evaluate the prefix every decision shares into sequence 0."""
        self.clear_cache()  # entries were built on the old prefix
        self.ctx.remove_sequence(PREFIX_SEQUENCE)
        for offset in range(0, len(tokens), self.ctx.n_batch):
            chunk = tokens[offset:offset + self.ctx.n_batch]
            self.ctx.decode([BatchToken(t, offset + i, PREFIX_SEQUENCE, False) for i, t in enumerate(chunk)])
        self.prefix_tokens = list(tokens)

    def reusable(self, tokens: Sequence[int], limit: int | None = None) -> int:
        """How many leading `tokens` (at most `limit`) can be copied from the global prefix; never
        all of them, as the last token must be evaluated for its output."""
        prefix = self.prefix_tokens
        limit = min(len(prefix), len(tokens) - 1, len(tokens) if limit is None else limit)
        n = 0
        while n < limit and prefix[n] == tokens[n]:
            n += 1
        if self.copy_by_state and n != len(prefix):
            return 0  # a serialised state is all of sequence 0 or nothing
        return n

    def clear_cache(self) -> None:
        if self.cache is not None:
            self.cache.clear()

    # --- starting a stream -----------------------------------------------------------------------

    @property
    def has_free(self) -> bool:
        return bool(self._free_sequences)

    def start(self, stream: Stream, *, extra: bool) -> None:
        """Give `stream` a free sequence and fill it; `extra`: its cells are beyond its work's
        reservation, so they are counted apart (`extra_cost`) until it is released."""
        stream.sequence = self._free_sequences.pop()
        self._fill(stream)
        if extra:
            self.extra_cost += stream.cost
            stream.counted_extra = True
        self.running.append(stream)

    def cached_answer(self, stream: Stream) -> FinalOutput | None:
        """The output cached for the stream's whole prompt, when its work may be answered from
        it (the stream then needs no sequence: it is marked as evaluated); else None."""
        cache = self.cache
        if cache is None or not (stream.cached and stream.wants_output and stream.work.answers_from_cache):
            return None
        entry = cache.answered(stream.tokens, with_hidden=stream.wants_hidden)
        if entry is None or entry.final is None:
            return None
        cache.touch(entry)
        cache.record(len(stream.tokens), len(stream.tokens) - stream.start)
        stream.start = stream.n_past = len(stream.tokens)
        return entry.final

    def _fill(self, stream: Stream) -> None:
        """Put the longest prefix of the stream's tokens held anywhere into its sequence: a
        cached prompt's cells, restored, where one shares more than the source its work gave
        (sequence 0, or its stem: the cache is not asked then, as a restored copy of the stem's
        cells would hold them twice); else the source's cells, shared. A stream that reads an
        output evaluates its last token at least."""
        cache = self.cache
        if cache is not None and stream.cached and stream.source in (None, PREFIX_SEQUENCE):
            given = stream.start
            limit = len(stream.tokens) - (1 if stream.wants_output else 0)
            entry, n = cache.longest(np.asarray(stream.tokens, dtype=np.int32), limit)
            if entry is not None and n > given:
                assert entry.state is not None  # longest() returns only entries with cells
                if self.ctx.load_sequence(stream.sequence, entry.state, n, prefix_source=PREFIX_SEQUENCE):
                    cache.touch(entry)
                    cache.record(len(stream.tokens), n - given)
                    stream.start = stream.n_past = n
                    return
                cache.stats.restore_failures += 1  # no run of free cells that long: evaluate it
            cache.record(len(stream.tokens), 0)
        if stream.source is not None:
            self.ctx.copy_sequence(stream.source, stream.sequence, stream.start, by_state=self.copy_by_state)
        stream.n_past = stream.start

    # --- releasing a stream ----------------------------------------------------------------------

    def release(self, stream: Stream, *, keep: bool = False) -> None:
        """Give back a stream's sequence; `keep` (it finished) offers it to the prompt cache
        first, once the answers of this step are out (`save_finished`, at the end of each
        iteration of the loop)."""
        if stream in self.running:
            self.running.remove(stream)
            if keep and stream.cached and self.cache is not None:
                self._unsaved.append(stream)
            else:
                self._free(stream.sequence)
            if stream.counted_extra:
                self.extra_cost -= stream.cost
        stream.n_past = len(stream.tokens)

    def save_finished(self) -> None:
        """Save the streams finished since the last call to the cache, and free their sequences.
        Called after their requests were answered: saving a prompt's cells takes 1 to 3 ms, which
        no answer should wait for."""
        while self._unsaved:
            stream = self._unsaved.pop(0)
            self._save(stream)
            self._free(stream.sequence)

    def _save(self, stream: Stream) -> None:
        """Offer a finished stream's prompt to the cache: its cells beyond the instruction prefix
        sequence 0 holds are serialised (unless an entry already serves the prompt), with the
        output read at its last token."""
        assert self.cache is not None
        tokens = stream.tokens[:stream.n_past]
        # A serialised state is the whole sequence's; KV cells are saved from past the shared prefix.
        shared = 0 if self.copy_by_state else common_prefix(
            np.asarray(self.prefix_tokens, dtype=np.int32), np.asarray(tokens, dtype=np.int32), len(tokens))
        # A question of a batch keeps only its output: its state's cells are the stem's, which the
        # batch keeps once (saving each question's copy of them cost 1 % of a batch of 8).
        from_stem = stream.source not in (None, PREFIX_SEQUENCE)
        try:
            self.cache.insert(tokens, shared, None if from_stem else lambda: self.ctx.save_sequence(
                stream.sequence, shared), final=stream.final)
        except LlamaError as exc:  # a cache that cannot save only costs a later evaluation
            log.warning("could not cache a prompt of %d tokens: %s", len(tokens), exc)

    def _free(self, sequence: int) -> None:
        self.ctx.remove_sequence(sequence)
        self._free_sequences.append(sequence)
