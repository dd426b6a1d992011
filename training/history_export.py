"""`make fit-history`'s first step: the export read as the fitter uses it (`read_export`: the rows
of the named fields, labels merged or refused, rare labels, the out-of-scope label, the policy
written from the labels, its options mapped onto the deployment's destinations by
training/history_targets.py), after OUT is checked (`check_out`)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from decision_router.domain.policies import Question

from .history_policy import MERGED, HistoryError, ReadStats, key_of, question_of, raw_policy, read_rows, spellings, vocabulary
from .history_targets import STARTING_MAP, resolve_targets


@dataclass
class Export:
    """The export as the fitter uses it: its rows (only the named fields), the policy written
    from its labels, each training row's option index, and what reading it found (`read`: the
    CSV delimiters, rows left out without a label, spellings merged)."""

    fields: list[str]
    raw: dict[str, Any]
    question: Question
    vocab: Any
    train_rows: list[dict[str, str]]
    test_rows: list[dict[str, str]]
    gold: np.ndarray
    read: dict[str, Any] = field(default_factory=dict)
    out_of_scope_rows: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class ExportAsked:
    """What the command's arguments say of the export (its files, fields and how to read them)
    and of the policy written from it (its name, OUT, the error allowed, the options' targets)."""

    data: Path
    test: Path
    text: str
    label: str
    out: Path
    name: str | None = None
    encoding: str = "utf-8"
    limit: int | None = None
    skip_unlabelled: bool = False
    merge_labels: bool = False
    out_of_scope_label: str | None = None
    min_examples: int = 10
    rare: str = "review"
    max_error: float = 0.03
    targets: str | None = None
    destinations: str | None = None

    @classmethod
    def of(cls, args: Any) -> ExportAsked:
        """The values of these names in the command's arguments (an argparse Namespace)."""
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


#: What a run writes into OUT (`check_out`): anything else there is the user's.
WRITTEN = ("policy.json", "heads", "predictions.jsonl", "report.json", "targets.json", STARTING_MAP)


def check_out(out: Path, read: Sequence[str | Path | None], replace: bool, say: Callable[[str], None]) -> None:
    """OUT must be empty, or hold only what the run reads (`read`: the exports and the targets
    map, wherever they are; `own` and S3 objects are no file there) and the starting map a run
    wrote there (STARTING_MAP), unless --replace: a second run never writes over a policy unasked."""
    if not out.exists():
        return
    if not out.is_dir():
        raise HistoryError(f"--out {out}: not a folder")
    inputs = {Path(p).resolve() for p in read if p and str(p) != "own" and not str(p).startswith("s3://")}
    there = sorted(p.name for p in out.iterdir() if p.resolve() not in inputs and p.name != STARTING_MAP)
    if there and not replace:
        raise HistoryError(f"--out {out} is not empty ({', '.join(there[:5])}{' …' if len(there) > 5 else ''}): name "
                           "another folder, or pass --replace (make fit-history REPLACE=1) to write over it")
    if there:
        say(f"--replace: writing over {out} ({', '.join(name for name in there if name in WRITTEN) or 'nothing of a previous run'})")


def export_rows(path: str | Path, limit: int | None) -> int | None:
    """The rows of a local export, counted without parsing them (a CSV's records, a JSONL's
    lines); None for one on S3 or not there (reading it says why)."""
    import csv

    if str(path).startswith("s3://") or not Path(path).is_file():
        return None
    with Path(path).open(encoding="utf-8", errors="replace", newline="") as handle:
        if Path(path).suffix.lower() in (".jsonl", ".json", ".ndjson"):
            n = sum(1 for line in handle if line.strip())
        else:
            n = max(0, sum(1 for record in csv.reader(handle) if record) - 1)  # less the header
    return min(n, limit) if limit is not None else n


def read_export(asked: ExportAsked, say: Callable[[str], None]) -> Export:
    """The export as `asked` says to read it, its policy written and its targets checked."""
    fields = [f.strip() for f in asked.text.split(",") if f.strip()]
    if not fields:
        raise HistoryError("--text names no field")
    read: dict[str, Any] = {"encoding": asked.encoding}
    rows = []
    for what, path in (("data", asked.data), ("test", asked.test)):
        stats = ReadStats()
        rows.append(read_rows(path, fields, asked.label, limit=asked.limit, encoding=asked.encoding,
                              skip_unlabelled=asked.skip_unlabelled, stats=stats))
        read[what] = {"rows": len(rows[-1]), "unlabelled_skipped": stats.unlabelled, "delimiter": stats.delimiter}
        say(f"{path}: {len(rows[-1])} rows" + (f" ({stats.delimiter_name()}-separated CSV)" if stats.delimiter else "")
            + (f"; {stats.unlabelled} row(s) without a label left out" if stats.unlabelled else ""))
    train_rows, test_rows = rows
    spelled = spellings(Counter(r[asked.label] for r in train_rows) + Counter(r[asked.label] for r in test_rows),
                        asked.merge_labels)
    if spelled:
        merged = {s: to for s, to in spelled.items() if s != to}
        say(f"--merge-labels: {len(merged)} spelling(s) counted as another: "
            + ", ".join(f"{s!r} → {to!r}" for s, to in list(merged.items())[:10]))
        read["merged_spellings"] = merged
        for row in (*train_rows, *test_rows):
            row[asked.label] = spelled.get(row[asked.label], row[asked.label])
    out_of_scope_rows: list[dict[str, str]] = []
    if asked.out_of_scope_label is not None:
        label = asked.out_of_scope_label
        out_of_scope_rows = [r for r in train_rows if r[asked.label] == label]
        in_test = sum(r[asked.label] == label for r in test_rows)
        if not out_of_scope_rows and not in_test:
            raise HistoryError(f"--out-of-scope-label {label!r}: no row of DATA or TEST has that {asked.label}")
        train_rows = [r for r in train_rows if r[asked.label] != label]
        read["out_of_scope"] = {"label": label, "data": len(out_of_scope_rows), "test": in_test}
        say(f"--out-of-scope-label {label!r}: {len(out_of_scope_rows)} DATA row(s) are no option (scored for the "
            f"novelty part's report), {in_test} TEST row(s) are out of scope")
    vocab = vocabulary([r[asked.label] for r in train_rows], asked.min_examples, asked.rare)
    if vocab.rare:
        say(f"{len(vocab.rare)} label(s) with fewer than {asked.min_examples} training items "
            f"({'merged into ' + repr(MERGED) if asked.rare == 'merge' else 'left to review'}): "
            + ", ".join(f"{label} ({n})" for label, n in vocab.rare.items()))
    name = asked.name
    if not name:
        name = key_of(asked.out.resolve().name).lower()[:64]
        say(f"the policy is named {name!r}, after the OUT folder (NAME= / --name to choose)")
    targets = resolve_targets(asked.targets, asked.destinations, asked.out, vocab, say)
    raw = raw_policy(name, fields, asked.label, vocab, asked.max_error, targets)
    say("tickets to route carry the text in " + (f"their body ({fields[0]})" if len(fields) == 1 else
        f"their subject ({fields[0]}) and body ({', '.join(fields[1:])}, one a paragraph)"))
    train_rows = [r for r in train_rows if vocab.option_of(r[asked.label]) is not None]
    position = {label: i for i, label in enumerate(vocab.options)}
    gold = np.array([position[vocab.option_of(r[asked.label])] for r in train_rows])
    return Export(fields, raw, question_of(raw), vocab, train_rows, test_rows, gold, read, out_of_scope_rows)
