"""How often an item's nearest resolved item has its gold answer, on the shipped labelled sets.

    python bench/nearest_neighbour.py

The resolved items are the train split, the items asked about the test split (fit on train,
report on test). Three vectors, each compared by cosine:
- the evidence's TF-IDF over the shipped head's own vocabulary (`Head.text`, the lexical block the
  routing function computes anyway): the text alone, no model;
- the vector the pipeline keeps (decision_router.domain.similar: the routing question's head's
  heaviest 32 terms), its neighbours found by `nearest`, as the console finds them;
- the hidden state the heads read (576 floats for the embedded model), read from the embedded
  model's shipped signals (`bench/data/signals/`, no model run), centred on the training items'
  mean (the raw states share one large common direction).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for root in ("contract", "functions", "."):
    sys.path.insert(0, str(REPO / root))

from decision_router.domain.lexical import evidence_text, term_counts, tfidf  # noqa: E402
from decision_router.domain.model_requests import build_state  # noqa: E402
from decision_router.domain.policies import load_policy  # noqa: E402
from decision_router.domain.similar import ResolvedItem, item_terms, nearest  # noqa: E402
from decision_router.items import parse_item  # noqa: E402

DATA = {"support-ticket": REPO / "bench/data/support-tickets.jsonl", "incident": REPO / "bench/data/incidents.jsonl"}


def vector(head, state) -> dict[int, float]:
    text = head.text
    v = tfidf(term_counts(evidence_text(state, text.fields), text.word_ngrams, text.char_ngrams),
              head._index, text.idf)
    norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
    return {k: x / norm for k, x in v.items()}


def cosine(a: dict[int, float], b: dict[int, float]) -> float:
    if len(a) > len(b):
        a, b = b, a
    return sum(x * b.get(k, 0.0) for k, x in a.items())


def item_vector(head, policy, row: dict) -> dict[int, float]:
    return vector(head, build_state(policy, parse_item(policy.item_kind, row["item"])))


def gold(row: dict, question: str) -> str:
    """A row's gold answer: one per question, or the routing question's alone as plain text."""
    return row["gold"][question] if isinstance(row["gold"], dict) else row["gold"]


def hidden_agreement() -> dict[str, float | None]:
    """`set.jsonl/question` → the nearest train item's agreement by hidden state, from the shipped
    signals (`python -m training.shipped_signals --neighbours`, run as a command: the benchmarks
    never import the fitter)."""
    done = subprocess.run([sys.executable, "-m", "training.shipped_signals", "--neighbours"], cwd=REPO,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def kept_agreement(policy, rows: list[dict], question: str) -> float:
    """The nearest train item by the vector the pipeline keeps (its routing head's heaviest terms)."""
    def terms(row: dict) -> dict[str, float]:
        return item_terms(policy, parse_item(policy.item_kind, row["item"]))

    train = [ResolvedItem(policy=policy.name, item_kind=policy.item_kind, item_id=str(i), summary="", target=None,
                          answers={question: gold(r, question)}, resolved_by="router", resolved_at="", terms=terms(r))
             for i, r in enumerate(rows) if r["split"] == "train"]
    test = [r for r in rows if r["split"] == "test"]
    hits = sum(bool(found := nearest(terms(r), train, k=1)) and found[0].answers[question] == gold(r, question)
               for r in test)
    return hits / len(test)


def main() -> int:
    by_hidden_state = hidden_agreement()
    print(f"{'policy/question':26} {'nearest = gold':>15} {'kept (32 terms)':>16} {'by hidden state':>16} "
          f"{'majority class':>15} {'test items':>10}")
    for name, path in DATA.items():
        policy = load_policy(name)
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for question in policy.questions:
            head = question.learned_head
            if head is None or head.text is None:
                continue
            train = [(item_vector(head, policy, r), gold(r, question.id)) for r in rows if r["split"] == "train"]
            test = [(item_vector(head, policy, r), gold(r, question.id)) for r in rows if r["split"] == "test"]
            hits = sum(max(train, key=lambda t: cosine(v, t[0]))[1] == gold for v, gold in test)
            answers = [g for _, g in train]
            majority = max(set(answers), key=answers.count)
            base = sum(g == majority for _, g in test)
            hidden = by_hidden_state.get(f"{path.name}/{question.id}")
            by_hidden = "–" if hidden is None else f"{hidden:.1%}"
            kept = kept_agreement(policy, rows, question.id)
            print(f"{name + '/' + question.id:26} {hits / len(test):14.1%} {kept:15.1%} {by_hidden:>16} "
                  f"{base / len(test):14.1%} {len(test):10d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
