"""How far batching and the prompt cache move a probability, on one llama.cpp CPU variant.

For each of 12 states x ROUNDS and 4 questions (`bench/engine_questions.py`, the engine tests'
too): the batch cold, the batch again after the state's first question was cached, and each
question alone; the max |Δp| over options of warm vs. cold and of batch vs. alone. The float sums run in another order in each
(see BATCH_TOLERANCE in tests/container/test_engine.py, which these figures justify). Beside them,
the same drift in the letters' logits (max |Δlogit|, LOGIT_TOLERANCE) and in the final hidden state
(Euclidean distance, HIDDEN_TOLERANCE), each of batch, warm batch and a prompt re-read from the
cache (cached without its hidden state, so its last token is evaluated again) against the decision
alone.

    PYTHONPATH=contract:container:. .venv/bin/python -m bench.batch_drift [--variant haswell] [--rounds 4]

A process loads one variant: run it once per variant to compare them.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

from bench.engine_questions import QUESTIONS
from decision_contract import Decision
from decision_server.engine import DecisionEngine
from decision_server.model_files import embedded_model_path

STATES = [
    "the VPN drops every ten minutes for the whole Berlin office.",
    "invoices since March show a double charge for the Pro plan.",
    "the password reset email never arrives for our team of twelve.",
    "the export to CSV button crashes the desktop app on Windows.",
    "API rate limits hit the reporting endpoint every Monday morning.",
    "the mobile app shows a blank screen after the last update.",
    "we were charged in euros although our contract is in dollars.",
    "single sign-on with Okta fails with an invalid audience error.",
    "the dashboard loads for a minute and then times out.",
    "a former employee still has access to our admin console.",
    "please cancel our subscription at the end of this month.",
    "webhooks to our endpoint stopped after we rotated the key.",
]


def max_delta(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b))


def max_logit_delta(a, b) -> float:
    return max(abs(x - y) for x, y in zip(a.option_logits, b.option_logits))


def hidden_distance(a, b) -> float:
    return math.dist(a.hidden_state, b.hidden_state)


def summary(deltas: list[float]) -> dict:
    return {"max": max(deltas), "median": statistics.median(deltas), "n": len(deltas)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default=None, help="CPU variant (default: the best for this CPU)")
    parser.add_argument("--rounds", type=int, default=4, help="each state again under another prefix, this often")
    args = parser.parse_args(argv)
    engine = DecisionEngine(model_path=embedded_model_path(), cpu_variant=args.variant)
    warm_vs_cold, batch_vs_alone, logits_vs_alone, hidden_vs_alone = [], [], [], []
    for n, text in [(f"{r}.{k}", text) for r in range(args.rounds) for k, text in enumerate(STATES)]:
        decisions = [Decision(id=f"q{i}", state=f"State {n}: {text}", question=q, options=o, return_hidden_state=True)
                     for i, (q, o) in enumerate(QUESTIONS)]
        engine.scheduler.clear_cache()
        cold = engine.decide(decisions)
        engine.scheduler.clear_cache()
        engine.decide_one(decisions[0])  # the state is cached now
        warm = engine.decide(decisions)
        warm_vs_cold += [max_delta(c.probabilities, w.probabilities) for c, w in zip(cold.results, warm.results)]
        for decision, batched, warmed in zip(decisions, cold.results, warm.results):
            engine.scheduler.clear_cache()
            alone = engine.decide_one(decision)
            batch_vs_alone.append(max_delta(batched.probabilities, alone.probabilities))
            engine.scheduler.clear_cache()
            engine.decide_one(decision.model_copy(update={"return_hidden_state": False}))
            reread = engine.decide_one(decision)  # its last token evaluated again, for the hidden state
            logits_vs_alone += [max_logit_delta(x, alone) for x in (batched, warmed, reread)]
            hidden_vs_alone += [hidden_distance(x, alone) for x in (batched, warmed, reread)]
    print(json.dumps({"cpu_variant": engine.llama_build.cpu_variant, "warm_vs_cold": summary(warm_vs_cold),
                      "batch_vs_alone": summary(batch_vs_alone), "logits_vs_alone": summary(logits_vs_alone),
                      "hidden_distance_vs_alone": summary(hidden_vs_alone)}))
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
