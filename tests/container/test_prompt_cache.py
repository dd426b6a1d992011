"""The prompt cache across requests: its bookkeeping alone, then on the real embedded model
(a cached answer equals a cold one, nothing leaks between prompts, the budget holds)."""

from __future__ import annotations

import ctypes
import logging
import threading

import pytest

from bench.engine_questions import QUESTIONS
from decision_contract import Decision
from decision_server.llama import SequenceState
from decision_server.prompt_cache import FinalOutput, PromptCache
from tests.container.test_engine import BATCH_TOLERANCE, HIDDEN_TOLERANCE, cold_decision, hidden_distance, ticket_decision

# --- bookkeeping (no model) --------------------------------------------------------------------------


def state_of(cells: int, start: int = 0) -> SequenceState:
    """A stand-in for llama.cpp's serialised cells: 100 bytes a cell (bookkeeping reads only sizes)."""
    return SequenceState(data=b"", size=100 * cells, start=start)


def put(cache: PromptCache, tokens: list[int], shared: int = 0, final: FinalOutput | None = None,
        cells: bool = True):
    """Insert `tokens`; returns the entry kept and the lengths of the prompts whose cells were saved."""
    saved: list[int] = []

    def snapshot() -> SequenceState:
        saved.append(len(tokens))
        return state_of(len(tokens) - shared, shared)

    return cache.insert(tokens, shared, snapshot if cells else None, final=final), saved


def test_least_recently_used_is_evicted_to_keep_the_budget():
    cache = PromptCache(budget=10_000)
    for token in (1, 2, 3):
        put(cache, [token] * 40)  # 4,000 bytes of cells and 160 of tokens each
    assert [int(e.tokens[0]) for e in cache.entries()] == [2, 3]  # three did not fit: the oldest went
    cache.touch(cache.entries()[0])
    put(cache, [4] * 40)  # 3 is now the least recently used
    assert [int(e.tokens[0]) for e in cache.entries()] == [2, 4]
    assert cache.nbytes == 2 * 4160 <= cache.budget
    assert cache.stats.evictions == 2


def test_a_prompt_larger_than_the_budget_held_already_or_all_shared_prefix_is_not_saved_again():
    cache = PromptCache(budget=1000)
    assert put(cache, [1] * 60) == (None, [60])  # saved, then found too large
    entry, saved = put(cache, [5, 6, 7, 8])
    assert entry is not None and saved == [4]
    assert put(cache, [5, 6, 7]) == (entry, [])  # a prefix of a cached prompt: served, nothing saved
    assert put(cache, [5, 6, 7, 8, 9, 10], shared=6) == (None, [])  # nothing beyond the shared prefix
    longer, _ = put(cache, [5, 6, 7, 8, 9])  # extends the first, which serves nothing more
    assert cache.entries() == [longer] and cache.nbytes == 500 + 20


def test_the_cells_before_the_shared_prefix_are_not_saved():
    cache = PromptCache(budget=10_000)
    entry, _ = put(cache, list(range(100)), shared=40)
    assert entry.state.start == 40 and cache.nbytes == 100 * 60 + 4 * 100


def test_an_entry_keeps_the_output_read_at_its_last_token():
    import numpy as np

    plain = FinalOutput(np.zeros(16), 0.0, 1)
    with_hidden = FinalOutput(np.zeros(16), 0.0, 1, hidden=np.ones(4))
    cache = PromptCache(budget=1000)
    put(cache, [1, 2, 3])  # e.g. a chat: no output kept
    assert cache.answered([1, 2, 3], with_hidden=False) is None
    assert put(cache, [1, 2, 3], final=plain)[1] == []  # the same prompt: the entry takes the output
    assert cache.answered([1, 2, 3], with_hidden=False).final is plain
    assert cache.answered([1, 2, 3], with_hidden=True) is None
    put(cache, [1, 2, 3], final=with_hidden)
    assert cache.answered([1, 2, 3], with_hidden=True).final is with_hidden
    put(cache, [1, 2, 3], final=plain)  # an output without the hidden state does not replace one with it
    assert cache.answered([1, 2, 3], with_hidden=True).final is with_hidden
    assert cache.answered([1, 2], with_hidden=False) is None  # a prefix is not the prompt
    # an entry with an answer is not dropped for a longer prompt that leads with it
    put(cache, [1, 2, 3, 4])
    assert len(cache) == 2
    assert cache.nbytes == sum(e.nbytes for e in cache.entries()) == (300 + 12 + 128 + 32) + (400 + 16)


def test_an_answer_only_entry_answers_its_prompt_and_serves_no_other():
    import numpy as np

    answer = FinalOutput(np.zeros(4), 0.0, 1)
    cache = PromptCache(budget=10_000)
    assert put(cache, [1, 2, 3, 4], cells=False) == (None, [])  # nothing to keep without an output
    entry, saved = put(cache, [1, 2, 3, 4], final=answer, cells=False)
    assert saved == [] and entry.state is None and cache.nbytes == 16 + 32
    assert cache.answered([1, 2, 3, 4], with_hidden=False) is entry
    assert cache.longest(np.array([1, 2, 3, 4, 5]), limit=5) == (None, 0)  # it has no cells to restore
    # the same prompt with its cells: one entry holds both, the output kept
    with_cells, saved = put(cache, [1, 2, 3, 4])
    assert saved == [4] and cache.entries() == [with_cells] and with_cells.final is answer


def test_whole_prompts_only_an_entry_serves_prompts_that_start_with_all_of_it():
    import numpy as np

    cache = PromptCache(budget=10_000, whole_only=True)
    stem, _ = put(cache, [1, 2, 3])
    question, _ = put(cache, [1, 2, 3, 4, 5])  # the shorter entry stays: it serves what this cannot
    assert cache.entries() == [stem, question]
    assert cache.longest(np.array([1, 2, 3, 4, 9]), limit=5) == (stem, 3)  # not cut back to 4 tokens
    assert cache.longest(np.array([1, 2, 3, 4, 5, 6]), limit=6) == (question, 5)
    assert cache.longest(np.array([1, 2, 9]), limit=3) == (None, 0)
    assert put(cache, [1, 2, 3, 4])[1] == [4]  # a prefix of an entry is not held by it


def test_longest_prefix_prefers_the_most_recent_on_a_tie():
    import numpy as np

    cache = PromptCache(budget=1000)
    put(cache, [1, 2, 3, 4])
    newer, _ = put(cache, [1, 2, 3, 9])
    entry, n = cache.longest(np.array([1, 2, 3, 5, 6]), limit=4)
    assert (entry, n) == (newer, 3)
    entry, n = cache.longest(np.array([1, 2, 3, 4, 5]), limit=3)  # the limit caps the match
    assert n == 3


# --- on the embedded model ------------------------------------------------------------------------


def settle(engine):
    """Wait until the worker is between steps: a finished prompt is saved to the cache once its
    answer is out, so right after a call returns its entry may still be on the way."""
    engine.scheduler.call(lambda: None)


def differing_states() -> tuple[str, str]:
    """Two ticket states that share a long prefix, then differ; the tiny embedded model answers
    them far apart (Δp ≈ 0.27), as it does few pairs of realistic tickets."""
    shared = ("Ticket from the Acme account. The customer writes about their March invoice and the "
              "charges on their card, and the team that should look at it. ")
    return shared + "Answer A.", shared + "The answer is Billing."


@pytest.mark.model
def test_a_repeated_decision_is_answered_from_the_cache_exactly_as_the_first_time(embedded_engine):
    decision = ticket_decision(id="repeat", state={"subject": "Refund", "body": "I was charged twice for the Pro plan."})
    cold = cold_decision(embedded_engine, decision)
    before = embedded_engine.prompt_cache_stats()
    cached = embedded_engine.decide_one(decision)
    # the temperature is not in the prompt: the same cached answer, divided otherwise
    again = embedded_engine.decide_one(decision.model_copy(update={"id": "again", "temperature": 2.0}))
    # the whole prompt came from the cache, with the output read at its last token: no forward pass
    assert cached.reused_prefix_tokens == cached.input_tokens == cold.input_tokens
    assert cached.option_logits == cold.option_logits and cached.probabilities == cold.probabilities
    assert (cached.allowed_token_mass, cached.full_vocab_argmax_id) == (cold.allowed_token_mass, cold.full_vocab_argmax_id)
    assert again.option_logits == cold.option_logits and again.temperature == 2.0
    assert again.probabilities != cold.probabilities  # the temperature still applies
    after = embedded_engine.prompt_cache_stats()
    assert after.enabled and after.hits == before.hits + 2 and after.lookups == before.lookups + 2
    assert after.reused_tokens - before.reused_tokens == 2 * (cold.input_tokens - cold.reused_prefix_tokens)
    assert 0 < after.hit_rate <= 1 and 0 < after.mib <= after.budget_mib


@pytest.mark.model
def test_a_second_question_on_a_cached_state_evaluates_only_its_own_tokens(embedded_engine):
    state = {"subject": "Outage", "body": "Checkout has failed for every customer since the deploy at 09:00."}
    first = Decision(id="q0", state=state, question=QUESTIONS[0][0], options=QUESTIONS[0][1])
    second = Decision(id="q1", state=state, question=QUESTIONS[1][0], options=QUESTIONS[1][1])
    cold_second = cold_decision(embedded_engine, second)
    embedded_engine.scheduler.clear_cache()
    embedded_engine.decide_one(first)
    warm_second = embedded_engine.decide_one(second)
    shared = embedded_engine.tokenize(embedded_engine.readout.render(second).split('"criterion"')[0])
    assert warm_second.reused_prefix_tokens >= len(shared) - 2  # the state came from the first question
    assert max(abs(a - b) for a, b in zip(warm_second.probabilities, cold_second.probabilities)) <= BATCH_TOLERANCE


@pytest.mark.model
def test_nothing_leaks_between_interleaved_prompts_that_share_a_prefix(embedded_engine):
    state_a, state_b = differing_states()
    a = ticket_decision(id="a", state=state_a)
    b = ticket_decision(id="b", state=state_b)
    cold_a, cold_b = cold_decision(embedded_engine, a), cold_decision(embedded_engine, b)
    # The two answers must tell each other apart well beyond the tolerance, or the test could not see a leak.
    # Fixed state: both are cold and alone, the same digits whatever ran before (see
    # test_same_input_gives_same_output), so only the build's CPU variant can move this 0.27.
    assert max(abs(x - y) for x, y in zip(cold_a.probabilities, cold_b.probabilities)) > 2 * BATCH_TOLERANCE
    common = len(embedded_engine.tokenize(embedded_engine.readout.render(a))) - 1
    embedded_engine.scheduler.clear_cache()
    answers = [embedded_engine.decide_one(d) for d in (a, b, a, b, b, a)]
    for answer in answers:
        cold = cold_a if answer.id == "a" else cold_b
        assert max(abs(x - y) for x, y in zip(answer.probabilities, cold.probabilities)) <= BATCH_TOLERANCE
    # b reused a's cells only up to where the prompts part; later repeats came whole from the cache
    assert answers[1].reused_prefix_tokens < common
    assert answers[2].reused_prefix_tokens == answers[2].input_tokens
    # concurrently too: both in one decode, each from its own cached cells
    results: dict[str, object] = {}
    threads = [threading.Thread(target=lambda d=d: results.update({d.id: embedded_engine.decide_one(d)})) for d in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for key, cold in (("a", cold_a), ("b", cold_b)):
        assert max(abs(x - y) for x, y in zip(results[key].probabilities, cold.probabilities)) <= BATCH_TOLERANCE


def questions_on(state) -> list[Decision]:
    """A `decisions` batch: every test question on one state."""
    return [Decision(id=f"q{i}", state=state, question=q, options=o) for i, (q, o) in enumerate(QUESTIONS)]


@pytest.mark.model
def test_a_shared_state_batch_starts_from_a_cached_prompt(embedded_engine):
    state = "A cached state: the VPN drops every ten minutes for the whole Berlin office."
    decisions = questions_on(state)
    embedded_engine.scheduler.clear_cache()
    cold = embedded_engine.decide(decisions)
    embedded_engine.scheduler.clear_cache()
    embedded_engine.decide_one(decisions[0])  # the state is now cached
    warm = embedded_engine.decide(decisions)
    again = embedded_engine.decide(decisions)  # every question is now cached whole
    for c, w, g in zip(cold.results, warm.results, again.results):
        assert w.reused_prefix_tokens >= warm.timing.shared_prefix_tokens
        assert max(abs(x - y) for x, y in zip(w.probabilities, c.probabilities)) <= BATCH_TOLERANCE
        assert g.reused_prefix_tokens == g.input_tokens and g.option_logits == w.option_logits


@pytest.mark.model
def test_a_batch_keeps_its_state_once_and_each_questions_answer(embedded_engine):
    state = "Every laptop in the Lyon office lost Wi-Fi after last night's update."
    decisions = questions_on(state)
    embedded_engine.scheduler.clear_cache()
    batch = embedded_engine.decide(decisions)
    settle(embedded_engine)
    entries = embedded_engine.scheduler.cache.entries()
    # the stem's cells once, and for each question only what was read at its last token
    (stem,) = [e for e in entries if e.state is not None]
    assert len(stem.tokens) == batch.timing.shared_prefix_tokens
    assert sorted(len(e.tokens) for e in entries if e.state is None and e.final is not None) == \
        sorted(r.input_tokens for r in batch.results)
    again = embedded_engine.decide_one(decisions[1])
    assert again.reused_prefix_tokens == again.input_tokens and again.option_logits == batch.results[1].option_logits
    other = Decision(id="other", state=state, question="Does the ticket mention a deadline?",
                     options=[{"id": "yes", "description": "yes"}, {"id": "no", "description": "no"}])
    assert embedded_engine.decide_one(other).reused_prefix_tokens >= len(stem.tokens) - 2  # from the stem's cells


@pytest.mark.model
def test_the_hidden_state_of_a_cached_prompt_matches_a_cold_one(embedded_engine):
    plain = ticket_decision(id="h", state="The export to CSV button crashes the desktop app.")
    with_hidden = plain.model_copy(update={"return_hidden_state": True})
    embedded_engine.scheduler.clear_cache()
    cold = embedded_engine.decide_one(with_hidden)
    embedded_engine.scheduler.clear_cache()
    embedded_engine.decide_one(plain)
    # the prompt is cached, its hidden state is not: the last token is evaluated for it
    cached = embedded_engine.decide_one(with_hidden)
    assert cached.reused_prefix_tokens == cached.input_tokens - 1
    # tolerance: the last token evaluated alone over restored cells (was max |Δ| < 0.5 per value,
    # which the measured drift, 0.58, exceeds)
    assert hidden_distance(cached.hidden_state, cold.hidden_state) <= HIDDEN_TOLERANCE
    assert max(abs(a - b) for a, b in zip(cached.probabilities, cold.probabilities)) <= BATCH_TOLERANCE
    # now it is: answered whole, hidden state included
    again = embedded_engine.decide_one(with_hidden)
    assert again.reused_prefix_tokens == again.input_tokens and again.hidden_state == cached.hidden_state
    assert embedded_engine.decide_one(plain).hidden_state is None


@pytest.mark.model
def test_a_repeated_chat_reuses_its_prompt_and_answers_the_same(embedded_engine):
    """The same greedy text from a cold prompt and from its cached cells. A wide margin: at each of
    the 6 tokens the model's pick leads the runner-up by 1.6 logits or more (measured), four times
    the largest last-digit drift seen in a logit (0.39, LOGIT_TOLERANCE); the former prompt, "Name
    one colour of the rainbow.", led by only 0.35 at its second token, so one move could fork it."""
    request = {"messages": [{"role": "user", "content": "Name the first month of the year."}], "max_tokens": 6,
               "temperature": 0.0}
    embedded_engine.scheduler.clear_cache()
    cold = embedded_engine.chat_completion(**request)
    before = embedded_engine.prompt_cache_stats().reused_tokens
    cached = embedded_engine.chat_completion(**request)
    assert cached["choices"][0]["message"] == cold["choices"][0]["message"]
    assert embedded_engine.prompt_cache_stats().reused_tokens > before


@pytest.fixture(scope="module")
def small_cache_engine():
    """A second engine, its cache budget and context small enough to fill with a few prompts."""
    from decision_server.engine import DecisionEngine
    from decision_server.model_files import embedded_model_path

    engine = DecisionEngine(model_path=embedded_model_path(), ctx_size=1024, max_decision_tokens=1024,
                            prompt_cache_mib=8, parallel_sequences=2)
    yield engine
    engine.close()


@pytest.mark.model
def test_eviction_keeps_the_budget_and_drops_the_least_recent(small_cache_engine):
    engine = small_cache_engine
    cache = engine.scheduler.cache
    decisions = [ticket_decision(id=f"e{i}", state=f"Customer {i} writes: my invoice number {i} shows a wrong amount.")
                 for i in range(6)]
    for decision in decisions:
        engine.decide_one(decision)
        settle(engine)
        assert 0 < cache.nbytes <= cache.budget == 8 * 1024 * 1024
    stats = engine.prompt_cache_stats()
    assert stats.evictions > 0 and stats.prompts < len(decisions)
    newest, oldest = engine.decide_one(decisions[-1]), engine.decide_one(decisions[0])
    assert newest.reused_prefix_tokens == newest.input_tokens  # still cached
    assert oldest.reused_prefix_tokens < oldest.input_tokens - 1  # evicted first


def sequences_holding_cells(engine) -> list[int]:
    import llama_cpp

    memory = engine.ctx.memory
    return [s for s in range(engine.ctx.n_seq_max) if llama_cpp.llama_memory_seq_pos_max(memory, s) >= 0]


@pytest.mark.model
def test_cached_prompts_leave_the_kv_cache_to_the_shared_prefix_and_running_work(small_cache_engine):
    engine = small_cache_engine
    for i in range(3):
        engine.decide_one(ticket_decision(id=f"w{i}", state=f"Short ticket {i}: the app is slow today."))
    settle(engine)
    assert len(engine.scheduler.cache) > 0
    # fresh prompts attend over no cached prompt's cells: only sequence 0 holds any
    assert sequences_holding_cells(engine) == [0]
    # so a prompt that needs nearly the whole context is admitted beside a full cache, which keeps it
    words = " ".join(["charged twice"] * 330)
    big = ticket_decision(id="big", state=words)
    needed = len(engine.readout.prompt(big).tokens) - len(engine.scheduler.prefix_tokens)
    assert needed > engine.scheduler.capacity - 300, "the prompt must need most of the context"
    evictions = engine.prompt_cache_stats().evictions
    result = engine.decide_one(big)
    assert result.id == "big" and result.reused_prefix_tokens < result.input_tokens - 1
    settle(engine)
    assert engine.prompt_cache_stats().evictions - evictions <= 1  # at most for its own bytes, not its cells
    assert sequences_holding_cells(engine) == [0]


@pytest.mark.model
def test_a_cached_prompt_that_cannot_be_written_back_is_evaluated_instead(embedded_engine):
    from decision_server.llama import SequenceState

    decision = ticket_decision(id="r", state="The shared drive is read-only since this morning.")
    cold = cold_decision(embedded_engine, decision)
    embedded_engine.scheduler.clear_cache()
    embedded_engine.decide_one(decision.model_copy(update={"id": "first"}))
    settle(embedded_engine)
    (entry,) = embedded_engine.scheduler.cache.entries()
    # What llama.cpp refuses to read back: truncated bytes, and a valid header of no cells.
    for broken in (SequenceState((ctypes.c_uint8 * 3)(255, 255, 255), 3, entry.state.start),
                   SequenceState((ctypes.c_uint8 * 4)(), 4, entry.state.start)):
        entry.state, entry.final = broken, None
        failures = embedded_engine.prompt_cache_stats().restore_failures
        result = embedded_engine.decide_one(decision)
        assert embedded_engine.prompt_cache_stats().restore_failures == failures + 1
        assert result.reused_prefix_tokens == len(embedded_engine.scheduler.prefix_tokens)  # evaluated
        assert max(abs(a - b) for a, b in zip(result.probabilities, cold.probabilities)) <= BATCH_TOLERANCE
        embedded_engine.scheduler.clear_cache()
        embedded_engine.decide_one(decision.model_copy(update={"id": "again"}))
        settle(embedded_engine)
        (entry,) = embedded_engine.scheduler.cache.entries()


@pytest.fixture(scope="module")
def state_copy_engine():
    """The embedded model with sequences copied by serialised state, the path recurrent/hybrid
    models (whose memory cannot be cut back to a shorter prefix) take."""
    from decision_server.engine import DecisionEngine
    from decision_server.model_files import embedded_model_path

    engine = DecisionEngine(model_path=embedded_model_path(), ctx_size=2048, max_decision_tokens=1024,
                            parallel_sequences=2, sequence_copy="state")
    yield engine
    engine.close()


@pytest.mark.model
def test_a_model_copied_by_state_caches_whole_prompts_and_says_so(caplog):
    from decision_server.engine import DecisionEngine
    from decision_server.model_files import embedded_model_path

    with caplog.at_level(logging.INFO, logger="decision_server.engine"):
        engine = DecisionEngine(model_path=embedded_model_path(), ctx_size=512, max_decision_tokens=512,
                                parallel_sequences=1, sequence_copy="state")
    engine.close()
    assert "prompt cache=512 MiB of host memory, whole prompts only (DECISION_SEQUENCE_COPY=state: a state " \
           "cannot be cut back to a shorter prefix)" in caplog.text


@pytest.mark.model
def test_a_model_copied_by_state_answers_a_repeat_from_the_cache(state_copy_engine, embedded_engine):
    engine = state_copy_engine
    decision = ticket_decision(id="s", state="The payroll export has stopped at 80 % every night this week.")
    cold = cold_decision(embedded_engine, decision)
    first = engine.decide_one(decision)
    again = engine.decide_one(decision)
    assert first.reused_prefix_tokens == len(engine.scheduler.prefix_tokens)
    assert again.reused_prefix_tokens == again.input_tokens and again.option_logits == first.option_logits
    assert max(abs(a - b) for a, b in zip(first.probabilities, cold.probabilities)) <= BATCH_TOLERANCE
    assert engine.prompt_cache_stats().whole_prompts_only


@pytest.mark.model
def test_a_model_copied_by_state_restores_a_cached_state_only_whole(state_copy_engine, embedded_engine):
    engine = state_copy_engine
    state = {"subject": "Printer", "body": "The third-floor printer jams on every duplex job since Monday."}
    first, second, third = (Decision(id=f"q{i}", state=state, question=q, options=o)
                            for i, (q, o) in enumerate(QUESTIONS[:3]))
    prefix = len(engine.scheduler.prefix_tokens)
    engine.scheduler.clear_cache()
    engine.decide_one(first)
    # the cached prompt ends in the first question: a state cannot be cut back to where they part
    assert engine.decide_one(second).reused_prefix_tokens == prefix
    # a batch on the state caches its stem, which a later question extends whole
    batch = engine.decide([first, second])
    stem = batch.timing.shared_prefix_tokens
    assert stem > prefix
    warm = engine.decide_one(third)
    assert warm.reused_prefix_tokens == stem
    cold = cold_decision(embedded_engine, third)
    assert max(abs(a - b) for a, b in zip(warm.probabilities, cold.probabilities)) <= BATCH_TOLERANCE


def criterion_first(text: str) -> Decision:
    return ticket_decision(id=text, state={"text": text}, layout="criterion-first", return_hidden_state=True)


@pytest.mark.model
def test_a_model_copied_by_state_reuses_a_criterion_first_prefix_across_requests(state_copy_engine, embedded_engine):
    # a cached state serves only prompts that extend it whole: the next item's stem is that prompt whole
    engine = state_copy_engine
    engine.scheduler.clear_cache()
    fixed = engine.readout.prompt(criterion_first("a")).fixed_prefix
    engine.decide_one(criterion_first("My card was declined."))
    second = engine.decide_one(criterion_first("How do I reset my password?"))
    assert second.reused_prefix_tokens == fixed
    embedded_engine.scheduler.clear_cache()
    cold = embedded_engine.decide_one(criterion_first("How do I reset my password?"))
    assert hidden_distance(second.hidden_state, cold.hidden_state) <= HIDDEN_TOLERANCE


@pytest.mark.model
def test_without_a_prompt_cache_a_criterion_first_decision_is_evaluated_in_one_go(embedded_engine):
    from decision_server.engine import DecisionEngine
    from decision_server.model_files import embedded_model_path

    engine = DecisionEngine(model_path=embedded_model_path(), ctx_size=1024, max_decision_tokens=1024,
                            parallel_sequences=1, prompt_cache_mib=0)
    try:
        decodes: list[int] = []
        decode = engine.ctx.decode
        engine.ctx.decode = lambda tokens, **kw: (decodes.append(len(tokens)), decode(tokens, **kw))[1]
        result = engine.decide_one(criterion_first("How do I reset my password?"))
    finally:
        engine.close()
    assert len(decodes) == 2  # the prompt but its last token, then that token with its hidden state
    assert result.prompt_version == "criterion-first-v1"
