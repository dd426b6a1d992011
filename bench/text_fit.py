"""A fit on the words alone, timed: the text classifier a head is compared with, and `make
fit-history MODEL=none`, at 2,000 and 100,000 rows.

    python -m bench.text_fit                          # everything below (about 9 minutes on 2 idle cores)
    python -m bench.text_fit --skip-previous          # the previous classifier left out (minutes, gigabytes)
    python -m bench.text_fit --sizes 2000             # fit-history at 2,000 rows only

1. The text classifier (evaluation/text_classifier.py: hashed word 1-2 and character 2-5-gram
   TF-IDF, logistic regression C=10 by stochastic gradient descent) beside the one it replaced
   (scikit-learn's TfidfVectorizer of the same n-grams, every n-gram a column, and
   LogisticRegression(C=10) by L-BFGS, max_iter=3000), each fitted on the full training set and
   scored once on the test set: Banking77, and CLINC150's in-scope queries. Each runs in a fresh
   process on one BLAS thread (as the fitter runs it): accuracy, the share answered at 97 %
   precision (the most probable first, read off the test set), CLINC150's out-of-scope test
   queries caught below a top probability of 0.2 and 0.3 (and the in-scope ones sent with them),
   seconds to fit and predict, peak memory (the process's resident high-water mark).
2. `make fit-history MODEL=none` (`python -m training.history --text-only`, run as a command: the
   benchmarks never import the fitter), its report's seconds (the text curve, fitting, total),
   wall time and peak memory, on:
   - 2,000 rows of Banking77 (a seeded shuffle of its training set, not its first rows, which are
     sorted by label; 800 of its test queries), short queries, 77 labels;
   - 2,000 long documents: each joins 6 to 12 CLINC150 training queries of one of its 10 domains
     (about 380 characters), labelled by the domain (bench/public/clinc150/domains.json); 800 test
     documents joined from its test queries. Tickets of a help desk are this long; the documents
     are easy to tell apart (each is several queries of one domain), so they time the fit, not
     its accuracy;
   - 100,000 such long documents (each one drawn afresh: 100,000 distinct documents from 15,000
     queries), 2,000 test documents.

Prints a Markdown table and writes reports/bench/text-fit.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline, make_union
from threadpoolctl import threadpool_limits

from bench.memory import peak_mib
from evaluation import text_classifier

REPO = Path(__file__).resolve().parents[1]
PUBLIC = REPO / "bench/public"
#: The import roots fit-history runs with (as the Makefile's PYTHONPATH).
ROOTS = ("contract", "container", "functions", ".")
CLASSIFIERS = ("previous", "current")
SETS = ("banking77", "clinc150")
#: Queries joined into one long document, and the seed of every draw.
JOINED, SEED = (6, 12), 0
TEST_ROWS = {2000: 800, 100_000: 2000}
#: The precision of the share answered; CLINC150's out-of-scope queries go to review below these top probabilities.
PRECISION, REVIEW_BELOW = 0.97, (0.2, 0.3)


def public_set(name: str) -> tuple[list[str], list[str], list[str], list[str]]:
    """Training texts and labels, test texts and labels: Banking77, or CLINC150's in-scope queries
    (its out-of-scope test queries: `out_of_scope_test`)."""
    if name == "banking77":
        def read(file: str) -> list[dict]:
            with (PUBLIC / "banking77" / file).open(newline="", encoding="utf-8") as handle:
                return list(csv.DictReader(handle))

        train, test = read("train.csv"), read("test.csv")
        return ([r["text"] for r in train], [r["category"] for r in train], [r["text"] for r in test],
                [r["category"] for r in test])
    data = json.loads((PUBLIC / "clinc150/data_full.json").read_text(encoding="utf-8"))
    return ([t for t, _ in data["train"]], [label for _, label in data["train"]], [t for t, _ in data["test"]],
            [label for _, label in data["test"]])


def out_of_scope_test() -> list[str]:
    return [text for text, _ in json.loads((PUBLIC / "clinc150/data_full.json").read_text(encoding="utf-8"))["oos_test"]]


def answered_at(top: np.ndarray, right: np.ndarray, precision: float = PRECISION) -> float:
    """The largest share of the items, the most probable first, whose answers are right at least
    `precision` of the time (read off the test set itself)."""
    hits = np.cumsum(right[np.argsort(-top, kind="stable")])
    good = np.flatnonzero(hits / np.arange(1, len(hits) + 1) >= precision)
    return float((good[-1] + 1) / len(top)) if len(good) else 0.0


def previous_classifier() -> Any:
    """The text classifier the fitter compared its heads with before evaluation/text_classifier.py."""
    return make_pipeline(
        make_union(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
                   TfidfVectorizer(analyzer="char", ngram_range=(2, 5), sublinear_tf=True)),
        LogisticRegression(C=text_classifier.C, max_iter=3000))


def classify(which: str, name: str) -> dict[str, Any]:
    """One classifier fitted on a set's training texts and scored once on its test texts."""
    train, train_labels, test, test_labels = public_set(name)
    labels = sorted(set(train_labels))
    gold = np.array([labels.index(label) for label in train_labels])
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        held = test + (out_of_scope_test() if name == "clinc150" else [])
        started = time.perf_counter()
        if which == "previous":
            probabilities = previous_classifier().fit(train, gold).predict_proba(held)
        else:
            probabilities = text_classifier.probabilities(text_classifier.count(train), gold, text_classifier.count(held),
                                                          len(labels))
        seconds = time.perf_counter() - started
    top, scope = probabilities.max(axis=1), slice(0, len(test))
    right = np.array([labels[p] == g for p, g in zip(probabilities[scope].argmax(axis=1), test_labels)])
    out = {"classifier": which, "set": name, "train": len(train), "test": len(test), "accuracy": round(float(right.mean()), 4),
           "answered": round(answered_at(top[scope], right), 4), "seconds": round(seconds, 1), "peak_mib": round(peak_mib())}
    if len(held) > len(test):  # out of scope: sent to review below a top probability
        out["out_of_scope"] = {f"{below}": {"caught": round(float(np.mean(top[len(test):] < below)), 4),
                                            "in_scope_to_review": round(float(np.mean(top[scope] < below)), 4)}
                               for below in REVIEW_BELOW}
    return out


def long_documents(pairs: list[tuple[str, str]], domains: dict[str, str], n: int, seed: int) -> list[dict[str, str]]:
    """`n` documents, each JOINED queries of one domain drawn at random, labelled by the domain."""
    rng = random.Random(seed)
    by_domain: dict[str, list[str]] = {}
    for text, intent in pairs:
        by_domain.setdefault(domains[intent], []).append(text)
    names = sorted(by_domain)
    rows = []
    for _ in range(n):
        domain = rng.choice(names)
        queries = rng.sample(by_domain[domain], rng.randint(*JOINED))
        rows.append({"text": ". ".join(queries) + ".", "category": domain})
    return rows


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "category"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def exports(kind: str, rows: int, folder: Path) -> tuple[Path, Path]:
    """The training and test exports of one fit-history run: `banking77` (a shuffled slice of
    its queries) or `long` (CLINC150 queries joined into documents by domain)."""
    rng = random.Random(SEED)
    if kind == "banking77":
        train, train_labels, test, test_labels = public_set("banking77")
        train_rows = [{"text": t, "category": c} for t, c in zip(train, train_labels)]
        test_rows = [{"text": t, "category": c} for t, c in zip(test, test_labels)]
        rng.shuffle(train_rows)
        rng.shuffle(test_rows)
        train_rows, test_rows = train_rows[:rows], test_rows[:TEST_ROWS[rows]]
    else:
        data = json.loads((PUBLIC / "clinc150/data_full.json").read_text(encoding="utf-8"))
        domains = {intent: domain for domain, intents in
                   json.loads((PUBLIC / "clinc150/domains.json").read_text(encoding="utf-8")).items() for intent in intents}
        train_rows = long_documents(data["train"], domains, rows, SEED + 1)
        test_rows = long_documents(data["test"], domains, TEST_ROWS[rows], SEED + 2)
    return write_csv(folder / "train.csv", train_rows), write_csv(folder / "test.csv", test_rows)


def fit_history(kind: str, rows: int, folder: Path) -> dict[str, Any]:
    """`python -m training.history --text-only` on one export, as a user runs it."""
    data, test = exports(kind, rows, folder)
    with data.open(newline="", encoding="utf-8") as handle:
        destinations = ",".join(sorted({row["category"] for row in csv.DictReader(handle)}))
    command = [sys.executable, "-m", "training.history", "--data", str(data), "--test", str(test), "--text", "text",
               "--label", "category", "--out", str(folder / "out"), "--name", "bench", "--targets", "own",
               "--destinations", destinations, "--text-only"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / p) for p in ROOTS))
    started = time.perf_counter()
    with (folder / "log.txt").open("w+", encoding="utf-8") as log:
        child = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log, text=True)
        _, status, usage = os.wait4(child.pid, 0)  # this run's own peak memory, not the largest child's so far
        wall = time.perf_counter() - started
        log.seek(0)
        err = log.read()
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"fit-history on {kind} ({rows} rows) failed: {err[-2000:]}")
    report = json.loads((folder / "out/report.json").read_text())
    return {"export": kind, "rows": rows, "test": report["n_test"], "options": report["options"],
            "seconds": report["seconds"], "wall_seconds": round(wall, 1), "peak_mib": round(usage.ru_maxrss / 1024),
            "accuracy": round(report["accuracy"], 4), "auto_share": round(report["auto_share"], 4),
            "baseline_accuracy": round(report["baseline"]["accuracy"], 4), "fitted_rows": report["holdout"]["fitted_rows"],
            "grid_rows": report["holdout"]["grid_rows"], "baseline_rows": report["holdout"]["baseline_rows"],
            "steps": [line.strip() for line in err.splitlines() if line.startswith("  ")]}


def run_classifier(which: str, name: str) -> dict[str, Any]:
    """One classifier in a fresh process (its own peak memory)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / p) for p in ROOTS))
    done = subprocess.run([sys.executable, "-m", "bench.text_fit", "--one", which, name], env=env, cwd=REPO,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(classifiers: list[dict], fits: list[dict]) -> str:
    lines = [f"| set | classifier | training / test rows | accuracy | answered at ≥ {PRECISION:.0%} precision | "
             "out of scope caught / in scope to review, top probability below " + " / ".join(map(str, REVIEW_BELOW))
             + " | seconds (fit and predict) | peak MiB |", "|---|---|---:|---:|---:|---|---:|---:|"]
    for r in classifiers:
        oos = " / ".join(f"{100 * f['caught']:.1f} % / {100 * f['in_scope_to_review']:.1f} %"
                         for f in r["out_of_scope"].values()) if "out_of_scope" in r else "–"
        lines.append(f"| {r['set']} | {r['classifier']} | {r['train']:,} / {r['test']:,} | {100 * r['accuracy']:.2f} % | "
                     f"{100 * r['answered']:.1f} % | {oos} | {r['seconds']} | {r['peak_mib']:,} |")
    lines += ["", "| export | rows (test) | options | text curve s | fitting s | total s | wall s | peak MiB | head fitted on "
              "| accuracy | answered | text classifier accuracy |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['export']} | {r['rows']:,} ({r['test']:,}) | {r['options']} | {r['seconds']['text_curve']} | "
              f"{r['seconds']['fitting']} | {r['seconds']['total']} | {r['wall_seconds']} | {r['peak_mib']:,} | "
              f"{r['fitted_rows']:,} | {100 * r['accuracy']:.1f} % | {100 * r['auto_share']:.1f} % | "
              f"{100 * r['baseline_accuracy']:.1f} % |" for r in fits]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-previous", action="store_true", help="leave the previous classifier out")
    parser.add_argument("--sizes", default="2000,100000", help="fit-history rows, comma-separated (2000, 100000)")
    parser.add_argument("--sets", default=",".join(SETS), help="public sets the classifiers are scored on")
    parser.add_argument("--one", nargs=2, metavar=("CLASSIFIER", "SET"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(classify(*args.one)))
        return 0
    sizes = [int(n) for n in args.sizes.split(",") if n]
    unknown = [n for n in sizes if n not in TEST_ROWS]
    if unknown:
        parser.error(f"--sizes: {unknown} not among {sorted(TEST_ROWS)}")
    classifiers = [run_classifier(which, name) for name in args.sets.split(",") if name
                   for which in CLASSIFIERS if not (args.skip_previous and which == "previous")]
    fits = []
    for rows in sizes:
        for kind in (("banking77", "long") if rows == 2000 else ("long",)):
            with tempfile.TemporaryDirectory(prefix="text-fit-") as tmp:
                fits.append(fit_history(kind, rows, Path(tmp)))
            print(json.dumps(fits[-1]), file=sys.stderr, flush=True)
    print(table(classifiers, fits))
    report = REPO / "reports/bench/text-fit.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps({"classifiers": classifiers, "fit_history": fits}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
