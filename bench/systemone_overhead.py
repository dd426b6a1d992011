"""System One benchmark: what the compatibility layer costs, and what the shared state saves.

In one process, on the embedded model, for the same ticket and the same three questions
(noul, choice with 4 criteria, score with 3 levels), interleaved per round:

  semif     engine.decide(decisions)        the three decisions as one SemIf batch
  systemone answer(engine, body)            the System One request (parse, map, batch, answers)
  separate  answer(...) once per question   three one-question System One requests

Prints medians and ratios: systemone/semif (the layer's overhead; target ~1.0),
systemone/separate (what evaluating the state once saves), and the layer's own time
without the model.

    .venv/bin/python -m bench.systemone_overhead --rounds 15
"""

from __future__ import annotations

import argparse
import statistics
import time

from decision_server.engine import DecisionEngine
from decision_server.model_files import embedded_model_path
from decision_server.systemone import SystemOneRequest, parse_request, to_decisions, to_response
from decision_server.systemone.router import answer
from evaluation.stats import percentile

STATE = {
    "ticket_id": "T-1042",
    "subject": "Charged twice for my Pro plan",
    "body": (
        "Hello, my card was charged twice for the Pro plan this month (two charges of 49 EUR on the 3rd). "
        "I opened a chat yesterday but nobody answered. Our finance team needs the duplicate refunded "
        "before the quarter closes on Friday, otherwise we will have to dispute the charge with the bank. "
        "The invoice numbers are INV-88213 and INV-88214. Please confirm once it is done."
    ),
    "customer": {"id": "C-77", "tier": "pro"},
    "channel": "email",
}
QUESTIONS = {
    "billing": {"type": "noul", "instructions": "Is this ticket about billing or payments?"},
    "queue": {"type": "choice", "instructions": "Which team should handle this ticket?",
              "criteria": {"billing": "Charges, refunds, invoices", "technical": "Bugs and outages",
                           "account": "Login, access, profile", "sales": None}},
    "urgency": {"type": "score", "instructions": "How urgent is this ticket?",
                "criteria": ["Can wait", "Needs attention this week", "Needs attention today"]},
}


def body(questions: dict) -> dict:
    return {"model": "jev-latest", "state": STATE, "questions": questions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None, help="default: the engine's (CPUs available)")
    args = parser.parse_args()

    engine = DecisionEngine(model_path=embedded_model_path(), threads=args.threads)
    decisions = to_decisions(SystemOneRequest.model_validate(body(QUESTIONS)))
    runs = {
        "semif": lambda: engine.decide(decisions),
        "systemone": lambda: answer(engine, body(QUESTIONS)),
        "separate": lambda: [answer(engine, body({name: q})) for name, q in QUESTIONS.items()],
    }
    for run in runs.values():  # warm-up
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)

    # The layer's own work, without the model: validate, map, and build the answers.
    batch = engine.decide(decisions)
    layer: list[float] = []
    for _ in range(200):
        started = time.perf_counter()
        request = parse_request(body(QUESTIONS), max_options=16)
        to_decisions(request)
        to_response(request, batch).model_dump_json()
        layer.append(time.perf_counter() - started)

    usage = answer(engine, body(QUESTIONS)).usage.input_tokens
    separate_tokens = sum(answer(engine, body({n: q})).usage.input_tokens for n, q in QUESTIONS.items())
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"model {engine.model_info.file}, threads {engine.settings.threads}, rounds {args.rounds}")
    for name, value in median.items():
        print(f"  {name:<10} median {value * 1000:8.1f} ms   p90 {percentile(times[name], 0.9) * 1000:8.1f} ms")
    print(f"  layer only (parse + map + answers, no model) median {statistics.median(layer) * 1000:.3f} ms")
    print(f"  input tokens: mixed request {usage}, three separate requests {separate_tokens}")
    print(f"  systemone / semif      = {median['systemone'] / median['semif']:.3f}  (layer overhead)")
    print(f"  systemone / separate   = {median['systemone'] / median['separate']:.3f}  (shared state saves)")


if __name__ == "__main__":
    main()
