"""How far each novelty signal separates a fit-history run's out-of-scope TEST items from its
in-scope ones: the comparison behind the novelty part's design, rerun on any run whose TEST has
out-of-scope items.

    python -m bench.novelty_methods [--budget 0.04] <the fit-history run's own arguments>
    python -m bench.novelty_methods --data DATA --test TEST --text text --label label \\
        --out OUT --out-of-scope-label oos --layout criterion-first

With the run's own arguments its export reads the same and the model's signals come from the
same cache (nothing is scored: a signal the cache lacks is an error); OUT is read (its
predictions.jsonl and report.json), never written. Each signal is read off TEST for comparison only:
its AUROC (out of scope against in scope) and the share of out-of-scope items above its
threshold set at the budget's share of in-scope ones. Nothing here chooses anything the router
uses; the kept score's threshold was chosen on DATA (training/novelty.py). Signals:

- the kept novelty score and the head's confidence (1 - confidence), from predictions.jsonl; the
  kept score's two parts, the distance alone and the head's surprise alone;
- the hidden state's nearest training item (cosine distance after centring on the training
  mean, Sun et al. 2022): a score the head file cannot carry (it needs every training item's
  hidden state, about 7 MB of JSON a thousand items);
- the text classifier's surprise (-ln of its top probability; fit-history's own TF-IDF and
  logistic regression, fitted on DATA's in-scope items): a second classifier the head would carry;
- the kept score with each of those, their ranks averaged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from decision_router import sentences
from decision_router.domain.lexical import evidence_text
from decision_router.domain.policies import load_policy
from training import learn
from training.head_fit import BASELINE_ROWS
from training.history import parser as history_parser
from training.history_export import ExportAsked, read_export
from training.history_fit import head_signals
from training.history_policy import states
from training.history_scoring import request_keys, requests
from training.learn import stratified_sample
from training.novelty import DEFAULT_BUDGET, Surprise
from training.signals_store import SignalsStore


def separation(out_of_scope: np.ndarray, score: np.ndarray, budget: float) -> tuple[float, float]:
    """AUROC of `score` (higher: more unlike) and the share of out-of-scope items above the
    in-scope items' (1 - budget) quantile."""
    threshold = float(np.quantile(score[~out_of_scope], 1.0 - budget))
    return float(roc_auc_score(out_of_scope, score)), float((score[out_of_scope] > threshold).mean())


def nearest_distance(train: np.ndarray, held: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """Cosine distance of each held row to its nearest training row, both centred on the
    training mean."""
    centre = train.mean(axis=0)

    def unit(rows: np.ndarray) -> np.ndarray:
        rows = rows - centre
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)

    known = unit(train).astype(np.float32)
    out = np.empty(len(held))
    for start in range(0, len(held), chunk):
        out[start:start + chunk] = 1.0 - (unit(held[start:start + chunk]).astype(np.float32) @ known.T).max(axis=1)
    return out


def ranks(*scores: np.ndarray) -> np.ndarray:
    return sum(rankdata(s) / len(s) for s in scores)


def table(rows: Sequence[tuple[str, float, float]], budget: float) -> str:
    lines = [f"| signal (read off TEST) | out of scope caught at {budget:.0%} of in scope | AUROC |", "|---|---:|---:|"]
    lines += [f"| {name} | {100 * caught:.1f} % | {auroc:.3f} |" for name, auroc, caught in rows]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.novelty_methods", description=__doc__.splitlines()[0],
                                epilog="every other argument is the fit-history run's own (python -m training.history --help)")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="in-scope share above each threshold (%(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args, rest = parser().parse_known_args(argv)
    run = history_parser().parse_args(rest)
    if not run.out_of_scope_label:
        raise SystemExit("--out-of-scope-label: the run's label for items that belong nowhere (its TEST needs some)")
    run.data, run.test = Path(run.data), Path(run.test)
    export = read_export(ExportAsked.of(run), lambda text: None)
    predictions = [json.loads(line) for line in (run.out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    if len(predictions) != len(export.test_rows):
        raise SystemExit(f"{run.out}/predictions.jsonl has {len(predictions)} lines; TEST has {len(export.test_rows)} rows: "
                         "not this run's TEST")
    out_of_scope = np.array([p["gold"] == run.out_of_scope_label for p in predictions])
    if not out_of_scope.any() or out_of_scope.all():
        raise SystemExit(f"TEST needs both in-scope items and items labelled {run.out_of_scope_label!r}")
    if any("novelty" not in p for p in predictions):
        raise SystemExit(f"{run.out}'s head has no novelty part: nothing to compare")

    sha256 = json.loads((run.out / "report.json").read_text())["model"]["sha256"]
    if not str(run.cache):
        raise SystemExit("--cache '': the run's signals are read from its cache; pass the folder it used")
    cache = SignalsStore(run.cache / sha256)
    train_states = states(export.raw, export.train_rows, export.fields)
    test_states = states(export.raw, export.test_rows, export.fields)
    keys = [request_keys(requests(export.question, s, run.layout), len(s), sha256) for s in (train_states, test_states)]
    missing = sum(len(cache.missing(k)) for k in keys)
    if missing:
        raise SystemExit(f"{missing} of the run's signals are not in {cache.folder}: pass the run's --cache and --layout")
    train_hidden, test_hidden = (cache.gather(k).hidden.astype(np.float64) for k in keys)

    kept = np.array([p["novelty"] for p in predictions])
    unsure = 1.0 - np.array([p["confidence"] or 0.0 for p in predictions])
    head = load_policy(run.out / "policy.json").questions[0].learned_head
    assert head is not None and head.novelty is not None, "predictions with novelty come from a head with a novelty part"
    sure = [1.0] + [0.0] * (len(head.options) - 1)  # a surprise of 0: the distance alone
    if head.novelty.score == "nearest":  # in the sentence encoder's space: the test items embedded as routing embeds them
        assert head.sentence is not None
        vectors = sentences.embed_all(head.sentence.encoder, [evidence_text(st, head.sentence.fields) for st in test_states])
        distance = np.array([head.novelty_score(None, sure, list(v)) for v in vectors])
        distance_name = f"its distance alone (cosine, {head.novelty.k} nearest training items, {head.sentence.encoder})"
    else:
        distance = np.array([head.novelty_score(list(h), sure) for h in test_hidden])
        distance_name = "its distance alone (Mahalanobis)"
    nearest = nearest_distance(train_hidden, test_hidden)
    s = head_signals(train_states, train_hidden, export.gold, export.fields, None)
    held = head_signals(test_states, test_hidden, np.zeros(len(test_states), dtype=int), export.fields, None)
    rows = stratified_sample(s.gold, BASELINE_ROWS, 0)
    text = learn.baseline_probabilities(s, rows, np.arange(len(test_states)), len(export.vocab.options), held)
    text_surprise = Surprise.of(text)
    signals = [("the kept novelty score", kept), ("the head's confidence (1 − confidence)", unsure),
               (distance_name, distance)]
    if head.novelty.surprise_weight > 0:
        signals.append(("its surprise alone (−ln top probability)", (kept - distance) / head.novelty.surprise_weight))
    signals += [("hidden state: nearest training item (cosine, centred)", nearest),
                ("the text classifier's surprise", text_surprise),
                ("kept score + nearest training item (ranks)", ranks(kept, nearest)),
                ("kept score + text classifier's surprise (ranks)", ranks(kept, text_surprise)),
                ("all three (ranks)", ranks(kept, nearest, text_surprise))]
    result = table([(name, *separation(out_of_scope, score, args.budget)) for name, score in signals], args.budget)
    print(f"{int(out_of_scope.sum())} out-of-scope and {int((~out_of_scope).sum())} in-scope TEST items\n\n{result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
