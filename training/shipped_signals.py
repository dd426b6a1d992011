"""The embedded model's signals for the shipped labelled sets, shipped with the code, so a
relearning run (the local one of `make learn`, or a stack's first) trains on the shipped sets
without asking the model for them first (about an hour on two CPU cores).

    python -m training.shipped_signals              # score what the file lacks, then write it
    python -m training.shipped_signals --check      # say what it holds, write nothing
    python -m training.shipped_signals --neighbours # nearest train item by hidden state: its answer right?

One file per model, named by the GGUF's sha256 (`bench/data/signals/<sha256>.npz`): a run whose
model is another finds no file and asks its endpoint as before. The file is one compressed shard
of the signals store (training/signals_store.py: `SignalsStore.include_shipped` reads it where it
is), keyed by `decision_contract.signals.request_key` (the model's sha256 and the decision's
content), so a changed prompt, question or item simply finds no row. Its hidden states are in
float16 (their values are far inside float16's range; the rounding moves a head's probabilities
slightly, which can tip a verdict taken on a handful of labels, never the sets' figures).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from decision_contract.signals import request_key
from evaluation.cases import load_file

from .features import case_decisions, score_cases
from .fitting import REPO, SHIPPED
from .scoring import LocalBatchScoring
from .signals_store import SHIPPED_SIGNALS, SignalsStore, shipped_path

#: Decisions a run of the batch scorer (each run's shard joins the store as it ends).
SHARD_ITEMS = 200


def nearest_agreement(path: Path, question: str, directory: Path = SHIPPED_SIGNALS) -> float | None:
    """Share of the set's test items whose nearest train item by hidden state (cosine, centred on
    the train items' mean: the raw states share one large common direction) has their gold
    answer; None when no shipped signals cover the set."""
    files = sorted(directory.glob("*.npz"))
    if not files:
        return None
    sha = files[0].stem
    store = SignalsStore(None)
    store.include(files[0], sha)
    cases = load_file(path).cases
    rows = store.rows(case_decisions(cases, sha)[1])
    pairs: dict[str, list[tuple[np.ndarray, str]]] = {"train": [], "test": []}
    for case in cases:
        for d in case.decisions:
            key = request_key(sha, d.decision.model_copy(update={"return_hidden_state": True}))
            if d.question == question and key in rows and case.split in pairs:
                pairs[case.split].append((rows[key][0], d.gold))
    if not pairs["train"] or not pairs["test"]:
        return None
    train = np.stack([h for h, _ in pairs["train"]])
    mean = train.mean(axis=0)

    def unit(m: np.ndarray) -> np.ndarray:
        m = m - mean
        return m / np.linalg.norm(m, axis=-1, keepdims=True)

    nearest = (unit(np.stack([h for h, _ in pairs["test"]])) @ unit(train).T).argmax(axis=1)
    golds = [g for _, g in pairs["train"]]
    return sum(golds[j] == g for j, (_, g) in zip(nearest, pairs["test"])) / len(pairs["test"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.shipped_signals", description=__doc__.splitlines()[0])
    p.add_argument("--model", help="GGUF the batch scorer loads (default: SM_LLAMA_CPP_MODEL or the embedded model)")
    p.add_argument("--cache", type=Path, default=REPO / "reports/fit/cache",
                   help="make fit's signals store: what it holds is not asked again")
    p.add_argument("--check", action="store_true", help="say how many of the shipped decisions the file holds")
    p.add_argument("--neighbours", action="store_true",
                   help="print, as JSON, per shipped set and question, how often the nearest train item by hidden "
                        "state has a test item's gold answer (no model)")
    args = p.parse_args(argv)
    if args.neighbours:
        print(json.dumps({f"{path.name}/{q}": nearest_agreement(path, q) for path in SHIPPED
                          for q in sorted({d.question for c in load_file(path).cases for d in c.decisions})}))
        return 0
    # the batch scorer's command in a child process: each shard of SHARD_ITEMS joins the store as it
    # is written, so an interrupted run resumes
    scorer = LocalBatchScoring(print, model_file=Path(args.model) if args.model else None, chunk=SHARD_ITEMS)
    model = scorer.describe()
    cases = [c for path in SHIPPED for c in load_file(path).cases if c.kind == "policy"]
    keys = sorted(set(case_decisions(cases, model.sha256)[1]))
    path = shipped_path(model.sha256)
    shipped = SignalsStore(None)
    shipped.include_shipped(model.sha256)
    print(f"{path.relative_to(REPO)}: {len(keys) - len(shipped.missing(keys))} of the {len(keys)} shipped decisions")
    if args.check:
        return 0
    started = time.perf_counter()
    store = SignalsStore(args.cache / model.sha256)
    store.include_shipped(model.sha256)
    for failure in score_cases(scorer, store, model.sha256, cases):
        print(f"not scored: {failure}")
    store.write_file(path, model.sha256, keys)
    print(f"wrote {path.relative_to(REPO)}: {len(keys) - len(store.missing(keys))} decisions, "
          f"{path.stat().st_size / 1e6:.1f} MB, in {time.perf_counter() - started:.0f}s")
    return 0

if __name__ == "__main__":
    sys.exit(main())
