"""Decision work: a request's decisions as streams, and their answers read from the logits.

A batch of decisions evaluates the token prefix they share once, in a *stem* sequence; each
question's sequence is then copied from the stem (or from the global prefix, sequence 0) and
evaluates only its own suffix. A criterion-first decision asked alone has a stem too: the part of
its prompt before the evidence, which the prompt cache keeps once for every item asked the same
criterion (a recurrent model's cache serves whole prompts only, and the next item's stem is that
prompt whole). The answer at a question's last position goes through the readout maths
(readout.py) into a `DecisionResult`. The engine (engine.py) validates and
tokenizes the decisions and queues this work.
"""

from __future__ import annotations

import time
from typing import Protocol

import numpy as np

from decision_contract import (
    BatchDecisionResponse,
    BatchTiming,
    Decision,
    DecisionResult,
    DecisionTiming,
    ModelInfo,
    softmax,
)

from .llama import LlamaContext
from .prompt_cache import FinalOutput
from .readout import Prompt, Readout, letter_readout, longest_common_prefix, read_final_output
from .scheduler import Scheduler
from .work import PREFIX_SEQUENCE, Stream, Work


class DecidingEngine(Protocol):
    """What decision work reads of its engine (a DecisionEngine), named here so that this module
    does not import engine.py, which imports it."""

    scheduler: Scheduler
    readout: Readout
    model_info: ModelInfo


class DecisionWork(Work):
    """A request's decisions: their common token prefix once (a stem sequence; all of the state
    when they share one), then each question's suffix in a sequence copied from it, many in one decode."""

    def __init__(self, engine: DecidingEngine, decisions: list[Decision], prompts: list[Prompt],
                 tokenize_seconds: list[float], started: float) -> None:
        super().__init__()
        self.engine, self.decisions, self.prompts = engine, decisions, prompts
        self.tokenize_seconds, self.started = tokenize_seconds, started
        scheduler = engine.scheduler
        lengths = [len(p.tokens) for p in prompts]
        # The shared prefix is the longest common *token* prefix of the full prompts, so each
        # decision sees exactly the tokens it would see alone; one token at least stays per
        # decision so that its final position is evaluated after the copy. A criterion-first
        # decision asked alone has its evidence-free prefix as its stem, so that the prompt
        # cache keeps that prefix once, for the next item asked the same criterion (without a
        # cache, a stem would only split its evaluation in two).
        self.shared_prefix = 0
        if len(prompts) > 1:
            self.shared_prefix = min(longest_common_prefix([p.tokens for p in prompts]), min(lengths) - 1)
        elif scheduler.cache is not None:
            self.shared_prefix = min(prompts[0].fixed_prefix, lengths[0] - 1)
        self.reuse = scheduler.reusable(prompts[0].tokens, self.shared_prefix if len(prompts) > 1 or self.shared_prefix else None)
        by_state = scheduler.copy_by_state
        self._stem: Stream | None = None
        stem_source, stem_start = (PREFIX_SEQUENCE, self.reuse) if self.reuse else (None, 0)
        if self.shared_prefix > self.reuse:
            self._stem = Stream(self, prompts[0].tokens[: self.shared_prefix], start=stem_start, source=stem_source,
                                wants_output=False, index=-1)
            self._stem.cost = self.shared_prefix if by_state else self.shared_prefix - self.reuse
        self._stem_ready = self._stem is None
        self._pending = list(range(len(decisions)))
        self.results: list[DecisionResult | None] = [None] * len(decisions)
        self.prefix_seconds = 0.0
        # question streams: from the stem, or straight from the global prefix
        copied = self.shared_prefix if self._stem is not None else self.reuse
        self._costs = [n if by_state else n - copied for n in lengths]
        stem_cost = self._stem.cost if self._stem is not None else 0
        self.reservation = stem_cost + max(self._costs)

    def first_streams(self) -> list[Stream]:
        return [self._stem] if self._stem is not None else []

    def next_stream(self) -> Stream | None:
        if not self._stem_ready or not self._pending:
            return None
        index = self._pending.pop(0)
        if self._stem is not None:
            source, start = self._stem.sequence, self.shared_prefix
        else:
            source, start = (PREFIX_SEQUENCE, self.reuse) if self.reuse else (None, 0)
        return Stream(self, self.prompts[index].tokens, start=start, source=source, index=index,
                      wants_hidden=self.decisions[index].return_hidden_state, cost=self._costs[index])

    def on_stream_done(self, stream: Stream) -> None:
        self._stem_ready = True
        self.prefix_seconds = time.perf_counter() - stream.started_at

    answers_from_cache = True

    def on_output(self, stream: Stream, ctx: LlamaContext, index: int, hidden: np.ndarray | None) -> bool:
        # every letter's logit, so the cached output answers this prompt again whatever it is asked
        stream.final = read_final_output(ctx.logits(index), self.engine.readout.letter_token_ids, hidden)
        self.on_cached_output(stream, stream.final)
        return True

    def on_cached_output(self, stream: Stream, final: FinalOutput) -> None:
        engine = self.engine
        decision, prompt = self.decisions[stream.index], self.prompts[stream.index]
        letter_ids = engine.readout.letter_token_ids[: len(decision.options)]
        logits, mass = letter_readout(final, len(decision.options))
        hidden = final.hidden if decision.return_hidden_state else None
        forward = time.perf_counter() - stream.started_at
        tokenize = self.tokenize_seconds[stream.index]
        self.results[stream.index] = DecisionResult(
            id=decision.id,
            option_ids=decision.option_ids,
            probabilities=softmax(logits, decision.temperature),
            option_logits=logits,
            temperature=decision.temperature,
            input_tokens=len(prompt.tokens),
            reused_prefix_tokens=self._reused(stream),
            allowed_token_mass=mass,
            prompt_sha256=prompt.sha256,
            prompt_version=prompt.version,
            model=engine.model_info,
            timing=DecisionTiming(tokenize_seconds=tokenize, prefill_seconds=forward, total_seconds=tokenize + forward),
            answer_token_ids=list(letter_ids),
            full_vocab_argmax_id=final.argmax,
            forward_seconds=forward,
            total_seconds=time.perf_counter() - self.started,
            hidden_state=hidden.tolist() if hidden is not None else None,
        )

    def _reused(self, stream: Stream) -> int:
        """Tokens of the stream's prompt taken already evaluated: a batch's questions count the
        prefix their stem evaluated for all of them; a decision asked alone counts only what its
        stem was given (from the global prefix or the prompt cache), as it evaluated the rest."""
        if self._stem is None or len(self.decisions) > 1 or stream.start > self.shared_prefix:
            return stream.start
        return self._stem.start

    @property
    def done(self) -> bool:
        return all(result is not None for result in self.results)

    def finish(self) -> None:
        self.future.set_result(BatchDecisionResponse(
            results=[r for r in self.results if r is not None],
            timing=BatchTiming(
                shared_prefix_tokens=self.shared_prefix,
                shared_prefix_seconds=self.prefix_seconds,
                total_seconds=time.perf_counter() - self.started,
                batch_size=len(self.decisions),
            ),
        ))
