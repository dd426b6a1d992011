"""`make bench-public`: Banking77 and CLINC150 through `make fit-history`, and the scoreboard.

    python bench/public_run.py                   # the full sets; the table in bench/public/RESULTS.md
    python bench/public_run.py --limit 40        # a slice: 40 training items of the first 5 labels per set

Each set is written as DATA and TEST files (reports/public/<set>/), then routed through the
command a user runs (`python -m training.history`, as a subprocess: the benchmarks never import
the fitter), and its `report.json` read back. CLINC150's 100 out-of-scope training queries are in DATA
and its out-of-scope test queries in TEST, right only when sent to review (see
bench/public/README.md), their label named to the fitter (`--out-of-scope-label oos`): the
training ones are no option, only examples the novelty part learns to send to review, and the
report gives what it catches of the test ones and its AUROC. The table puts our head
beside the text classifier fitted in the same run and the figures published for these sets; a
slice writes its table beside its runs, never over bench/public/RESULTS.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PUBLIC = REPO / "bench/public"
SETS = ("banking77", "clinc150")
#: The label that means "none of these" in a set that has one.
OUT_OF_SCOPE = {"clinc150": "oos"}
#: A slice takes this many training items per label.
PER_LABEL = 8
#: Published or measured elsewhere (the model cards; `python -m bench.text_fit`: the text classifier
#: fitted on all of train, scored once on test, its answered share read off test): not run here.
PUBLISHED = {
    "banking77": [
        ("text classifier, measured apart (`python -m bench.text_fit`)", "91.2 %", "–", "–", "84.8 %", "–"),
        ("ModernBERT-base fine-tuned (model card)", "94.0 %", "–", "–", "–", "–"),
        ("frozen ModernBERT + linear probe (model card)", "89.5 %", "–", "–", "–", "–"),
    ],
    "clinc150": [
        ("text classifier, measured apart (`python -m bench.text_fit`), in scope", "92.4 %", "–", "–", "87.5 %",
         "65.1 % caught at 3.2 % of in-scope sent to review (top probability < 0.2)"),
    ],
}


def banking77() -> tuple[list[dict], list[dict]]:
    def read(name: str) -> list[dict]:
        with (PUBLIC / "banking77" / name).open(newline="", encoding="utf-8") as handle:
            return [{"text": row["text"], "label": row["category"]} for row in csv.DictReader(handle)]

    return read("train.csv"), read("test.csv")


def clinc150() -> tuple[list[dict], list[dict]]:
    data = json.loads((PUBLIC / "clinc150/data_full.json").read_text(encoding="utf-8"))
    train = [{"text": text, "label": label} for text, label in data["train"] + data["oos_train"]]
    test = [{"text": text, "label": label} for text, label in data["test"] + data["oos_test"]]
    return train, test


def sliced(train: list[dict], test: list[dict], limit: int, seed: int = 0,
           out_of_scope: str | None = None) -> tuple[list[dict], list[dict]]:
    """`limit` training items, PER_LABEL of each of the first labels (sorted), and half as many
    test items of those labels, plus a few out-of-scope training and test items where the set has
    them (labelled `out_of_scope`)."""
    labels = sorted({row["label"] for row in train} - {out_of_scope})[:max(2, limit // PER_LABEL)]
    rng = random.Random(seed)
    keep_train, keep_test = [], []
    for label in labels:
        mine = [row for row in train if row["label"] == label]
        keep_train += rng.sample(mine, min(len(mine), max(2, limit // len(labels))))
        theirs = [row for row in test if row["label"] == label]
        keep_test += rng.sample(theirs, min(len(theirs), max(1, limit // (2 * len(labels)))))
    for rows, keep in ((train, keep_train), (test, keep_test)):
        oos = [row for row in rows if row["label"] == out_of_scope]
        keep += rng.sample(oos, min(len(oos), max(1, limit // 16))) if oos else []
    return keep_train, keep_test


def write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def run_set(name: str, out: Path, limit: int | None, model: str | None, cache: Path | None,
            layout: str | None = None) -> dict:
    train, test = {"banking77": banking77, "clinc150": clinc150}[name]()
    if limit:
        train, test = sliced(train, test, limit, out_of_scope=OUT_OF_SCOPE.get(name))
    folder = out / name
    data, held = write(folder / "train.jsonl", train), write(folder / "test.jsonl", test)
    command = fit_history_command(name, data, held, folder / "fit", limit, model, cache, layout)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / p) for p in ("contract", "container", "functions", ".")))
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=REPO)
    report = json.loads((folder / "fit/report.json").read_text())
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    # each novelty signal beside the kept one, from the run's cache (a run on the words alone has none)
    if name in OUT_OF_SCOPE and "novelty" in report and report.get("model"):
        report["novelty_methods"] = subprocess.run(novelty_methods_command(name, data, held, folder / "fit", limit, cache, layout),
                                                   check=True, env=env, cwd=REPO, capture_output=True, text=True).stdout
    return report


def fit_history_command(name: str, data: Path, held: Path, out: Path, limit: int | None, model: str | None,
                        cache: Path | None, layout: str | None = None) -> list[str]:
    """The `python -m training.history` command a set is run through."""
    command = [sys.executable, "-m", "training.history", "--data", str(data), "--test", str(held), "--text", "text",
               "--label", "label", "--out", str(out), "--name", name, "--targets", "own", "--replace",
               "--min-examples", "2" if limit else "10"]
    command += ["--out-of-scope-label", OUT_OF_SCOPE[name]] if name in OUT_OF_SCOPE else []
    command += ["--text-only"] if model == "none" else ["--model", model] if model else []
    command += ["--cache", str(cache)] if cache is not None else []
    command += ["--layout", layout] if layout else []
    return command


def novelty_methods_command(name: str, data: Path, held: Path, run: Path, limit: int | None, cache: Path | None,
                            layout: str | None = None) -> list[str]:
    """The `python -m bench.novelty_methods` command that compares the novelty signals on a
    set's run (its TEST's out-of-scope items against its in-scope ones): the run's own fit-history
    options, so its export reads the same and its signals come from the same cache."""
    return [sys.executable, "-m", "bench.novelty_methods", *fit_history_command(name, data, held, run, limit, None, cache, layout)[3:]]


def out_of_scope_cell(figures: dict) -> str:
    """Out-of-scope caught / in-scope sent to review; for a head with a novelty part, what its
    thresholds alone did and the novelty score's AUROC."""
    oos = figures.get("out_of_scope")
    if not oos:
        return "–"
    cell = f"{pct(oos['caught'])} / {pct(oos['in_scope_sent_to_review'])}"
    found = figures.get("novelty") or {}
    if "head_thresholds_alone" in found:
        alone = found["head_thresholds_alone"]
        cell += f" (without novelty: {pct(alone['caught'])} / {pct(alone['in_scope_sent_to_review'])}"
        cell += f"; novelty AUROC {found['auroc']:.3f})" if found.get("auroc") is not None else ")"
    return cell


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def answered_cell(figures: dict, target: float) -> str:
    """The share answered alone; its precision on test, that precision's 95 % lower bound, and a
    flag when the precision is below the target."""
    if not figures["auto_share"]:
        return "0.0 % (nothing answered alone)"
    cell = f"{pct(figures['auto_share'])} ({pct(figures['auto_precision'])}, ≥ {pct(figures['auto_precision_lower_bound'])}"
    precision = figures["auto_precision"]
    if precision is not None and precision < target:
        cell += f"; **target missed by {100 * (target - precision):.1f} points**"
    return cell + ")"


def table(reports: dict[str, dict], limit: int | None, seconds: float, layout: str | None = None) -> str:
    lines = ["# Public scoreboard (`make bench-public`)", ""]
    what = f"a slice (LIMIT={limit})" if limit else "the full sets"
    target = next(iter(reports.values()))["target_precision"] if reports else 0.97
    lines += [f"Made by `make bench-public{f' LAYOUT={layout}' if layout else ''}` on {what}, on this repository's machine, "
              f"in {seconds / 60:.0f} min. "
              "Data: Banking77 (Casanueva et al., 2020, CC BY 4.0) and CLINC150 (Larson et al., 2019, CC BY 3.0); see "
              "`bench/public/README.md`. Accuracy counts an out-of-scope item right only when it is sent to review; "
              "in-scope accuracy, macro-F1 and ECE are over in-scope items; *answered* is the share routed automatically at "
              f"the thresholds chosen out of fold over the training set so that the 95 % lower confidence bound of their "
              f"precision meets the {pct(target)} target, with the precision it reached on test and that precision's own "
              "lower bound; a precision below the target is flagged.", ""]
    lines += ["| set | options | readout | accuracy | in-scope accuracy | macro-F1 | ECE | answered (precision, lower bound) "
              "| out-of-scope caught / in-scope to review |",
              "|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for name, report in reports.items():
        reads = ["text"] + ([report["head"]["encoder"]] if report["head"].get("encoder") else []) + (
            ["hidden state"] if report["head"]["reads_model"] else [])
        for label, figures in ((f"**our head** ({' + '.join(reads)})", report),
                               ("text classifier, same run (TF-IDF + LR)", report["baseline"])):
            lines.append(f"| {name} | {report['options']} | {label} | {pct(figures['accuracy'])} | "
                         f"{pct(figures.get('in_scope_accuracy'))} | {pct(figures['macro_f1'])} | "
                         f"{pct(figures['ece'])} | {answered_cell(figures, report['target_precision'])} | "
                         f"{out_of_scope_cell(figures)} |")
        lines.append(f"| {name} | {report['options']} | letters | do not apply: more options than the endpoint's 16 letters | | | | | |"
                     if report["options"] > 16 else f"| {name} | {report['options']} | letters | not measured here | | | | | |")
        for label, accuracy, f1, ece, answered, oos_text in PUBLISHED.get(name, []) if not limit else []:
            lines.append(f"| {name} | {report['options']} | {label} | {accuracy} | – | {f1} | {ece} | {answered} | {oos_text} |")
    for name, report in reports.items():
        words = (report.get("tiers") or {}).get("words")
        if words:
            lines.append(f"\n{name}, the cascade (`model: when_unsure`): {pct(words['share'])} of TEST decided from the words "
                         f"alone, without the endpoint, at {pct(words['precision'])} precision.")
    lines += ["", "| set | training items | test items | head model weight | head C | head terms | scoring s | fitting s | total s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, report in reports.items():
        lines.append(f"| {name} | {report['n_train']} | {report['n_test']} | {report['head']['model_weight']} | "
                     f"{report['holdout'].get('regularisation', '–')} | "
                     f"{report['holdout']['terms']} | {report['seconds']['scoring']} | {report['seconds']['fitting']} | "
                     f"{report['wall_seconds']} |")
    for name, report in reports.items():
        if report.get("novelty_methods"):
            lines += ["", f"Novelty signals on {name}'s TEST (`python -m bench.novelty_methods`: each read off TEST "
                          "for comparison, none chosen by it; the router uses the kept score at its threshold chosen "
                          "on DATA, in the table above):", "", report["novelty_methods"].strip()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, help="a slice: this many training items per set")
    p.add_argument("--sets", default=",".join(SETS), help="comma-separated: banking77, clinc150")
    p.add_argument("--model", help="GGUF (default: the embedded model); none: the words alone (fit-history --text-only)")
    p.add_argument("--out", type=Path, default=REPO / "reports/public")
    p.add_argument("--results", type=Path, help="the table (default: bench/public/RESULTS.md, a slice's beside its runs)")
    p.add_argument("--cache", type=Path, help="signal cache folder (default: fit-history's, ~/.cache/decision-router/signals)")
    p.add_argument("--layout", choices=("evidence-first", "criterion-first"),
                   help="the signals decisions' prompt layout (default: fit-history's, evidence first); criterion "
                        "first scores about three times as fast (docs/benchmarks/prompt-layout.md)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    reports = {name: run_set(name, args.out, args.limit, args.model, args.cache, args.layout) for name in args.sets.split(",")}
    text = table(reports, args.limit, time.perf_counter() - started, args.layout)
    results = args.results or (args.out / "RESULTS.md" if args.limit else PUBLIC / "RESULTS.md")
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
