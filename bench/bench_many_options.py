"""Decision latency against the number of options: 5, 16, 77 and 150, side by side in one run.

    python bench/bench_many_options.py [-n 12]

One decision is what the routing function does for one item: build the request, ask the
embedded model in-process (the real engine, the real prompt) and judge the answer with the
question's head (`judging.model_entry`). Up to 16 options the model reads them lettered and the
head also reads the letters; beyond 16 the model is asked the question's signals decision (two
fixed options) and the head alone answers, so the prompt, and the decision's cost, do not grow
with the options: the head's part is a product of its weights with the item's features.

The heads are synthetic, with the shapes `make fit-history` writes (a text block over a real
vocabulary of the shipped tickets, a hidden block of the model's width); their values do not
change the cost. Prints a table (median and p95 milliseconds, ratio to 5 options) and writes
reports/bench-many-options.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for root in ("contract", "container", "functions", "."):
    sys.path.insert(0, str(REPO / root))

from decision_router.domain.heads import FORMAT
from decision_router.domain.judging import model_entry
from decision_router.domain.lexical import evidence_text, term_counts
from decision_router.domain.model_requests import build_decisions
from decision_router.domain.policies import Policy, load_policy
from decision_router.items import parse_item
from evaluation.stats import percentile

SIZES = (5, 16, 77, 150)
TICKETS = REPO / "bench/data/support-tickets.jsonl"
TARGETS = ["billing", "account-access", "technical-support", "product-help", "sales"]
STATE = [{"key": "subject", "field": "subject", "max_chars": 300}, {"key": "message", "field": "body", "max_chars": 3000}]
VOCABULARY = 8000


def tickets(limit: int) -> list[dict]:
    rows = [json.loads(line) for line in TICKETS.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "item" in r]
    items = []
    for i, row in enumerate(rows[:limit]):
        item = row["item"]
        items.append({"ticket_id": f"B-{i}", "subject": item["subject"], "body": item["body"],
                      "customer": {"id": "C-1", "tier": "pro"}, "channel": "email", "created_at": "2026-12-01T10:00:00Z"})
    return items


def policy_with_head(directory: Path, n: int, model, vocabulary: list[str], rng: random.Random) -> Policy:
    options = [{"id": f"intent{i}", "description": f"Customer intent number {i} of the catalogue",
                "target": TARGETS[i % len(TARGETS)]} for i in range(n)]
    raw = {"name": f"bench-{n}", "version": "1", "item_kind": "ticket", "description": "Latency against options.",
           "state": STATE, "questions": [{"id": "intent", "question": "Which intent does the customer's message express?",
                                          "options": options,
                                          "thresholds": {"min_confidence": 0.5, "min_margin": 0.0, "min_allowed_token_mass": 0.0}}]}
    (directory / f"p{n}.json").write_text(json.dumps(raw))
    from decision_router.domain.heads import question_digest

    digest = question_digest(raw["questions"][0]["question"], [(o["id"], o["description"]) for o in options],
                             [f"{s['key']}={s['field']}:{s['max_chars']}" for s in STATE])
    terms = vocabulary[:max(1, min(len(vocabulary), 1_800_000 // n - model.hidden_size))]
    document = {
        "format": FORMAT, "version": f"bench-{n}", "question_sha256": digest, "model_sha256": model.sha256,
        "hidden_size": model.hidden_size, "prompt_version": "direct-options-v1", "options": [o["id"] for o in options],
        "text": {"fields": ["subject", "message"], "terms": terms, "idf": [1.0] * len(terms),
                 "weights": [[round(rng.gauss(0, 1), 4) for _ in terms] for _ in range(n)]},
        "hidden": {"weights": [[round(rng.gauss(0, 0.01), 5) for _ in range(model.hidden_size)] for _ in range(n)]},
        "bias": [0.0] * n, "temperature": 1.0, "thresholds": {"min_confidence": 0.5, "min_margin": 0.0},
        "fit": {"examples": 100, "fitted_on": "2026-12-01", "regularisation": 10.0, "folds": 3, "cv_accuracy": 0.5, "cv_ece": 0.1},
    }
    if n <= 16:
        document["letters"] = {"weights": [[round(rng.gauss(0, 0.1), 4) for _ in range(n)] for _ in range(n)]}
    data = json.dumps(document).encode()
    (directory / f"h{n}.json").write_bytes(data)
    raw["questions"][0]["head"] = {"file": f"h{n}.json", "sha256": hashlib.sha256(data).hexdigest()}
    (directory / f"p{n}.json").write_text(json.dumps(raw))
    return load_policy(directory / f"p{n}.json")


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("-n", type=int, default=12, help="items per option count")
    args.add_argument("--report", type=Path, default=REPO / "reports/bench-many-options.json")
    opts = args.parse_args(argv)

    from decision_server.engine import DecisionEngine
    from decision_server.model_files import embedded_model_path

    engine = DecisionEngine(model_path=embedded_model_path())
    model = engine.model_info
    rng = random.Random(0)
    items = [parse_item("ticket", t) for t in tickets((opts.n + 1) * len(SIZES))]
    df: Counter[str] = Counter()
    for row in tickets(10_000):
        df.update(term_counts(evidence_text({"s": row["subject"], "m": row["body"]}, ["s", "m"])).keys())
    vocabulary = sorted(t for t, _ in df.most_common(VOCABULARY))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        policies = {n: policy_with_head(Path(tmp), n, model, vocabulary, rng) for n in SIZES}
        # every size gets its own tickets (a prompt already cached would cost nothing), and the
        # sizes take turns, so a machine busy for a moment slows them alike
        timings: dict[int, dict[str, list[float]]] = {n: {"total": [], "head": [], "tokens": []} for n in SIZES}
        asked = {}
        for round_ in range(-1, opts.n):
            for j, (n, policy) in enumerate(policies.items()):
                item = items[(round_ + 1) * len(SIZES) + j]
                question = policy.questions[0]
                started = time.perf_counter()
                (decision,) = build_decisions(policy, item)
                result = engine.decide_one(decision)
                judged = time.perf_counter()
                entry = model_entry(question, result, decision.state)
                done = time.perf_counter()
                assert entry.readout == "head"
                asked[n] = len(decision.options)
                if round_ < 0:
                    continue  # warm-up: the template header enters the prompt cache
                timings[n]["total"].append((done - started) * 1000)
                timings[n]["head"].append((done - judged) * 1000)
                timings[n]["tokens"].append(result.input_tokens)
        for n, policy in policies.items():
            t = timings[n]
            rows.append({"options": n, "request_options": asked[n], "input_tokens": statistics.median(t["tokens"]),
                         "median_ms": statistics.median(t["total"]), "p95_ms": percentile(t["total"], 0.95),
                         "head_median_ms": statistics.median(t["head"]),
                         "terms": len(policy.questions[0].learned_head.text.terms)})
    base = rows[0]["median_ms"]
    print(f"decision latency against options (embedded model in-process, {opts.n} tickets each, {model.threads} threads)")
    print(f"{'options':>7} {'asked':>5} {'tokens':>6} {'median ms':>9} {'p95 ms':>7} {'head ms':>7} {'x 5 options':>11}")
    for row in rows:
        row["ratio_to_5"] = row["median_ms"] / base
        print(f"{row['options']:>7} {row['request_options']:>5} {row['input_tokens']:>6.0f} {row['median_ms']:>9.1f} "
              f"{row['p95_ms']:>7.1f} {row['head_median_ms']:>7.2f} {row['ratio_to_5']:>11.2f}")
    opts.report.parent.mkdir(parents=True, exist_ok=True)
    opts.report.write_text(json.dumps({"model": model.file, "items": opts.n, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
