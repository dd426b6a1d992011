"""What the model's hidden state adds over the text alone, against the number of training items.

    python bench/learning_curve.py --data train.jsonl --test test.jsonl [--sizes 25,100,1000] [--seed 0] [--text text --label label]

For each size N, the first N items of DATA (shuffled with --seed, so each size is a random sample
and the sizes are nested) go through `make fit-history`
(`python -m training.history`, as a subprocess: the benchmarks never import the fitter) three
times on the same TEST: the text alone (`--model-weight 0`), text and hidden state
(`--model-weight 1`), and the text classifier fitted in the same run. The model's signals are
cached per model, so only the first run scores. Prints a Markdown table and writes it with the
reports under --out.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def run(data: Path, test: Path, out: Path, args: argparse.Namespace, weight: str) -> dict:
    command = [sys.executable, "-m", "training.history", "--data", str(data), "--test", str(test), "--text", args.text,
               "--label", args.label, "--out", str(out), "--targets", "own", "--replace", "--min-examples", "1",
               "--model-weight", weight, "--no-progress"]
    if args.cache is not None:
        command += ["--cache", str(args.cache)]
    subprocess.run(command, cwd=REPO, check=True)
    return json.loads((out / "report.json").read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--test", type=Path, required=True)
    p.add_argument("--text", default="text")
    p.add_argument("--label", default="label")
    p.add_argument("--sizes", default="25,100,1000")
    p.add_argument("--out", type=Path, default=REPO / "reports/learning-curve")
    p.add_argument("--cache", type=Path)
    p.add_argument("--seed", type=int, default=0, help="shuffles DATA before the first N are taken (-1: keep its order)")
    args = p.parse_args(argv)
    rows = [line for line in args.data.read_text(encoding="utf-8").splitlines() if line.strip()]
    if args.seed >= 0:
        random.Random(args.seed).shuffle(rows)
    started = time.perf_counter()
    # Accuracy on the test items whose label the training items saw: with few training items most
    # labels are unseen, and counting those right when sent to review would flatter the small sizes.
    table = ["| training items | options seen | test items in scope | text alone: accuracy | "
             "text + hidden state: accuracy | text classifier: accuracy | text alone: answered at target | "
             "text + hidden state: answered at target (precision) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for size in [int(s) for s in args.sizes.split(",")]:
        folder = args.out / f"n{size}"
        folder.mkdir(parents=True, exist_ok=True)
        data = folder / "train.jsonl"
        data.write_text("\n".join(rows[:size]) + "\n", encoding="utf-8")
        text = run(data, args.test, folder / "text", args, "0")
        both = run(data, args.test, folder / "hidden", args, "1")
        in_scope = both["n_test"] - both.get("out_of_scope", {}).get("items", 0)
        table.append(f"| {min(size, len(rows))} | {text['options']} | {in_scope} | "
                     f"{pct(text['in_scope_accuracy'])} | {pct(both['in_scope_accuracy'])} | "
                     f"{pct(text['baseline']['in_scope_accuracy'])} | {pct(text['auto_share'])} | "
                     f"{pct(both['auto_share'])} ({pct(both['auto_precision'])}) |")
    text = "\n".join(table) + f"\n\nTEST: {args.test} ; {time.perf_counter() - started:.0f} s\n"
    (args.out / "RESULTS.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
