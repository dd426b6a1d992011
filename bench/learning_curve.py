"""What the model's hidden state adds over the text alone, against the number of training items.

    python bench/learning_curve.py --data train.jsonl --test test.jsonl [--sizes 25,100,1000,all] [--seed 0]
        [--layout criterion-first] [--text text --label label]

For each size N (`all`: every DATA row), the first N items of DATA (shuffled with --seed, so each
size is a random sample and the sizes are nested) go through `make fit-history`
(`python -m training.history`, as a subprocess: the benchmarks never import the fitter) twice on
the same TEST: the head on the text alone (`--model-weight 0`) and on text and hidden state
(`--model-weight 1`); the text classifier fitted in the first run is the third column. Each head
chooses its own regularisation C on its held-out fifth (report.json `holdout.regularisation`),
shown in the table. The model's signals are cached per model and prompt layout (--layout, passed
to fit-history's), so only the first run scores. Prints a Markdown table and writes it with the
reports under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import typing
from datetime import date
from pathlib import Path

from decision_contract import Layout

REPO = Path(__file__).resolve().parents[1]
#: The import roots fit-history runs with (as the Makefile's PYTHONPATH).
ROOTS = ("contract", "container", "functions", ".")
HEADER = ["| training items | options seen | test items in scope | text alone: accuracy | "
          "text + hidden state: accuracy | text classifier: accuracy | C chosen: text alone / text + hidden state | "
          "text alone: answered at target | text + hidden state: answered at target (precision) |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def sizes_of(spec: str, rows: int) -> list[int]:
    """--sizes: training items per run, comma-separated; `all` is every one of DATA's `rows`."""
    sizes = []
    for part in (s.strip() for s in spec.split(",")):
        if part == "all":
            sizes.append(rows)
            continue
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"--sizes: {part!r} is neither a positive number of training items nor 'all'")
        if int(part) > rows:
            raise ValueError(f"--sizes: {part} is more training items than DATA's {rows} rows ('all' takes every one)")
        sizes.append(int(part))
    return sizes


def fit_history_command(data: Path, test: Path, out: Path, weight: str, *, text: str = "text", label: str = "label",
                        cache: Path | None = None, layout: str | None = None) -> list[str]:
    """The `python -m training.history` command of one head at one size."""
    command = [sys.executable, "-m", "training.history", "--data", str(data), "--test", str(test), "--text", text,
               "--label", label, "--out", str(out), "--targets", "own", "--replace", "--min-examples", "1",
               "--model-weight", weight, "--no-progress"]
    command += ["--cache", str(cache)] if cache is not None else []
    command += ["--layout", layout] if layout else []
    return command


def run(command: list[str], out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / p) for p in ROOTS))
    subprocess.run(command, cwd=REPO, env=env, check=True)
    return json.loads((out / "report.json").read_text())


def row(size: int, rows: int, text: dict, both: dict) -> str:
    """One size's table row from the two heads' report.json (`text`: --model-weight 0, `both`: 1).
    Accuracy is on the test items whose label the training items saw: with few training items most
    labels are unseen, and counting those right when sent to review would flatter the small sizes."""
    in_scope = both["n_test"] - both.get("out_of_scope", {}).get("items", 0)
    items = f"{size:,}" + (" (all)" if size == rows else "")
    return (f"| {items} | {text['options']} | {in_scope} | {pct(text['in_scope_accuracy'])} | "
            f"{pct(both['in_scope_accuracy'])} | {pct(text['baseline']['in_scope_accuracy'])} | "
            f"{text['holdout']['regularisation']:g} / {both['holdout']['regularisation']:g} | "
            f"{pct(text['auto_share'])} | {pct(both['auto_share'])} ({pct(both['auto_precision'])}) |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--test", type=Path, required=True)
    p.add_argument("--text", default="text")
    p.add_argument("--label", default="label")
    p.add_argument("--sizes", default="25,100,1000", help="training items per run, comma-separated; all: every DATA row")
    p.add_argument("--out", type=Path, default=REPO / "reports/learning-curve")
    p.add_argument("--cache", type=Path)
    p.add_argument("--layout", choices=typing.get_args(Layout),
                   help="the signals decisions' prompt layout, passed to fit-history (default: its own, evidence first)")
    p.add_argument("--seed", type=int, default=0, help="shuffles DATA before the first N are taken (-1: keep its order)")
    args = p.parse_args(argv)
    rows = [line for line in args.data.read_text(encoding="utf-8").splitlines() if line.strip()]
    try:
        sizes = sizes_of(args.sizes, len(rows))
    except ValueError as e:
        p.error(str(e))
    if args.seed >= 0:
        random.Random(args.seed).shuffle(rows)
    started = time.perf_counter()
    table = list(HEADER)
    for size in sizes:
        folder = args.out / f"n{size}"
        folder.mkdir(parents=True, exist_ok=True)
        data = folder / "train.jsonl"
        data.write_text("\n".join(rows[:size]) + "\n", encoding="utf-8")
        reports = [run(fit_history_command(data, args.test, folder / name, weight, text=args.text, label=args.label,
                                           cache=args.cache, layout=args.layout), folder / name)
                   for name, weight in (("text", "0"), ("hidden", "1"))]
        table.append(row(size, len(rows), *reports))
    text = ("\n".join(table) + f"\n\nDATA: {args.data} (seed {args.seed}); TEST: {args.test}; layout: "
            f"{args.layout or 'fit-history default'}; {date.today().isoformat()}, {time.perf_counter() - started:.0f} s\n")
    (args.out / "RESULTS.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
