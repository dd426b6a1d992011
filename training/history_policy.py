"""`make fit-history`, its first half: the export read and the policy written from it.

`read_rows` reads a CSV or JSONL export (HistoryError names the file, line and field);
`vocabulary` turns its labels into options (rare ones merged or left to review); `raw_policy`
writes the one-question ticket policy, `read_targets` maps options onto destinations, and
`states` builds each row's evidence as the routing function builds a ticket's. `training.history`
scores, fits and reports on top of these.
"""

from __future__ import annotations

import codecs
import csv
import itertools
import json
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Sequence

from decision_router.domain.heads import question_digest
from decision_router.domain.model_requests import build_state
from decision_router.domain.policies import MAX_QUESTION_OPTIONS, Question
from decision_router.items import parse_item
from local.destinations import QueueError, read_targets_map

#: Text entries of the policy's evidence are cut here (the ticket's own limit is 20,000).
SUBJECT_CHARS, BODY_CHARS = 300, 3000
MERGED = "other"
ID_PATTERN = re.compile(r"[^A-Za-z0-9_.-]+")


class HistoryError(ValueError):
    """The export cannot be used; the message says where and why."""


# ----------------------------------------------------------------------------------- reading
#: The delimiters an export's CSV may use, told apart by its header (`sniff_delimiter`).
DELIMITERS = {",": "comma", ";": "semicolon", "\t": "tab"}
#: The longest CSV cell the reader takes (Python's csv module's own limit): a longer one is named.
MAX_CELL_CHARS = csv.field_size_limit()


@dataclass
class ReadStats:
    """What reading an export found besides its rows: the CSV delimiter it used, and how many
    rows had no label (left out with `skip_unlabelled`)."""

    delimiter: str | None = None
    unlabelled: int = 0

    def delimiter_name(self) -> str:
        return DELIMITERS.get(self.delimiter or "", repr(self.delimiter))


def read_rows(path: Path, fields: Sequence[str], label: str, *, limit: int | None = None, encoding: str = "utf-8",
              skip_unlabelled: bool = False, stats: ReadStats | None = None) -> list[dict[str, str]]:
    """The rows of a CSV (by extension) or JSONL export, each with the text fields and the label
    as strings; HistoryError names the file, the line and the missing or empty field."""
    rows = list(iter_rows(path, fields, label, limit=limit, encoding=encoding, skip_unlabelled=skip_unlabelled, stats=stats))
    if not rows:
        raise HistoryError(f"{path}: no rows")
    return rows


def iter_rows(path: Path, fields: Sequence[str], label: str, *, limit: int | None = None, encoding: str = "utf-8",
              skip_unlabelled: bool = False, stats: ReadStats | None = None) -> Iterator[dict[str, str]]:
    """`read_rows` as a stream: one row at a time, only the named fields kept, so an export of a
    million rows is never held whole (neither the file nor the fields no one reads). With
    `skip_unlabelled` a row whose label is empty is left out and counted in `stats`."""
    if not path.is_file():
        raise HistoryError(f"{path}: no such file")
    stats = stats if stats is not None else ReadStats()
    wanted = [*fields, label]
    kept = 0
    if limit is not None and limit <= 0:
        return
    for line, row in _records(path, wanted, encoding, stats):
        value = row.get(label)
        if value is None or not str(value).strip():
            if skip_unlabelled:
                stats.unlabelled += 1
                continue
            raise HistoryError(f"{path}:{line}: field {label!r} is missing or empty (to leave rows without a label "
                               "out, counted in the report: --skip-unlabelled, make fit-history SKIP_UNLABELLED=1)")
        out = {}
        for name in wanted:
            value = row.get(name)
            if value is None or not str(value).strip():
                raise HistoryError(f"{path}:{line}: field {name!r} is missing or empty")
            out[name] = str(value).strip()
        kept += 1
        yield out
        if limit is not None and kept >= limit:
            return  # before the next record is read: LIMIT reads no more of the file than it keeps


def _lines(path: Path, encoding: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of a file read line by line in `encoding`, a UTF-8 byte order mark
    dropped (spreadsheets write one); a byte that is not `encoding` is named with its line."""
    try:
        codec = codecs.lookup(encoding)
    except LookupError:
        raise HistoryError(f"--encoding {encoding!r}: no such encoding (e.g. utf-8, cp1252, latin-1)") from None
    decoder = codecs.getincrementaldecoder("utf-8-sig" if codec.name == "utf-8" else codec.name)()
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = decoder.decode(raw)
            except UnicodeDecodeError as error:
                raise HistoryError(
                    f"{path}:{number}: not {codec.name} text (byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the "
                    f"line): pass the export's encoding, e.g. --encoding cp1252 (make fit-history ENCODING=cp1252; "
                    "spreadsheets and older help desks often export Windows-1252 or Latin-1)") from None
            if number == 1:
                text = text.removeprefix("\ufeff")
            yield number, text


def sniff_delimiter(header: str) -> str:
    """The delimiter of a CSV export, from its header: whichever of comma, semicolon and tab it
    holds most of (a spreadsheet in a comma-decimal locale writes `;`); a comma when none."""
    counts = {d: header.count(d) for d in DELIMITERS}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def _records(path: Path, wanted: Sequence[str], encoding: str, stats: ReadStats) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of a CSV with a header or a JSONL file, read line by line."""
    lines = _lines(path, encoding)
    if path.suffix.lower() == ".csv":
        first = next(lines, None)
        if first is None:
            raise HistoryError(f"{path}: empty (a CSV export needs a header line)")
        stats.delimiter = sniff_delimiter(first[1])
        reader = csv.DictReader(itertools.chain([first[1]], (text for _, text in lines)), delimiter=stats.delimiter)
        missing = [f for f in wanted if f not in (reader.fieldnames or [])]
        if missing:
            raise HistoryError(f"{path}: no column {', '.join(map(repr, missing))} (columns: {', '.join(reader.fieldnames or [])}; "
                               f"delimiter: {stats.delimiter_name()})")
        records = 0
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                cell = "a cell longer than the reader's limit of " \
                       f"{MAX_CELL_CHARS:,} characters" if "field limit" in str(error) else str(error)
                # the reader counts the line it failed on only once it is parsed
                raise HistoryError(f"{path}:{reader.line_num + 1}: row {records + 1}: {cell} (leave the row out of the export "
                                   "or cut the cell)") from None
            records += 1
            yield reader.line_num, row
    for line, text in lines:
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as error:
            raise HistoryError(f"{path}:{line}: not JSON ({error.msg})") from None
        if not isinstance(row, dict):
            raise HistoryError(f"{path}:{line}: a JSON object per line is expected")
        yield line, row


def label_key(label: str) -> str:
    """What two spellings of one label share: case, spaces and punctuation ignored."""
    return re.sub(r"[\W_]+", "", unicodedata.normalize("NFKC", label).casefold())


def spellings(counts: Counter[str], merge: bool) -> dict[str, str]:
    """label → the spelling it counts as, for labels that differ only in case, spaces or
    punctuation ("Billing", "billing", "BILLING."): the most frequent spelling of each group when
    `merge`, else HistoryError naming every such group (each would be an option of its own)."""
    groups: dict[str, list[str]] = {}
    for label in counts:
        groups.setdefault(label_key(label) or label, []).append(label)
    clashes = [sorted(group, key=lambda s: (-counts[s], s)) for group in groups.values() if len(group) > 1]
    if clashes and not merge:
        shown = "; ".join(", ".join(f"{s!r} ({counts[s]})" for s in group) for group in clashes[:5])
        raise HistoryError(f"{len(clashes)} label(s) spelled more than one way, which would each be an option: {shown}"
                           f"{' …' if len(clashes) > 5 else ''}; correct the export, or count each group as its most "
                           "frequent spelling with --merge-labels (make fit-history MERGE_LABELS=1)")
    return {spelling: group[0] for group in clashes for spelling in group}


def option_ids(labels: Sequence[str]) -> dict[str, str]:
    """label → option id (letters, digits, `_.-`, 64 at most), unique."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for label in labels:
        base = ID_PATTERN.sub("_", label).strip("_.-")[:60] or "label"
        if not base[0].isalnum():
            base = "x" + base
        candidate, n = base, 2
        while candidate in taken:
            candidate, n = f"{base[:57]}_{n}", n + 1
        taken.add(candidate)
        out[label] = candidate
    return out


def target_of(option_id: str) -> str:
    target = re.sub(r"[^a-z0-9-]+", "-", option_id.lower()).strip("-")[:64]
    return target or "queue"


@dataclass(frozen=True)
class Vocabulary:
    """What the policy's options are made of, and what became of the rare labels."""

    options: list[str]  # labels, in option order (MERGED for the merged rare labels)
    ids: dict[str, str]  # label → option id
    rare: dict[str, int]  # rare label → its training count
    merged: set[str]  # rare labels merged into MERGED

    def option_of(self, label: str) -> str | None:
        """The option label a gold label counts as (None: out of scope)."""
        if label in self.merged:
            return MERGED
        return label if label in self.ids else None


def vocabulary(labels: Sequence[str], min_examples: int, rare_mode: str) -> Vocabulary:
    counts = Counter(labels)
    spellings(counts, merge=False)  # labels spelled several ways are never options apart (read_export merges them when asked)
    rare = {label: n for label, n in sorted(counts.items()) if n < min_examples}
    kept = sorted(label for label in counts if label not in rare)
    merged: set[str] = set()
    if rare and rare_mode == "merge":
        if MERGED in counts and MERGED not in rare:
            raise HistoryError(f"RARE=merge would merge {len(rare)} rare labels into {MERGED!r}, a label the data already has")
        merged = set(rare)
        kept.append(MERGED)
    if len(kept) < 2:
        raise HistoryError(f"{len(kept)} label(s) with at least {min_examples} training examples; a question needs two")
    if len(kept) > MAX_QUESTION_OPTIONS:
        raise HistoryError(f"{len(kept)} options from {len(counts)} labels (at least {min_examples} training items each"
                           f"{', plus ' + repr(MERGED) if merged else ''}); a question has at most {MAX_QUESTION_OPTIONS}: "
                           "raise MIN_EXAMPLES (the labels below it go to review, or into one option with RARE=merge), "
                           "or group the labels in the export")
    return Vocabulary(kept, option_ids(kept), rare, merged)


# ----------------------------------------------------------------------------------- the policy
def read_targets(path: Path, vocab: Vocabulary) -> dict[str, str]:
    """`--targets`: a JSON object label → destination key (a queue the deployment knows); `"*"`
    names the destination of every label the file does not name. Without a `"*"`, every option
    must be named; a label that is no option is refused too (a typo would route nothing)."""
    try:
        mapping = read_targets_map(path)
    except QueueError as error:
        raise HistoryError(str(error)) from None
    unknown = sorted(set(mapping) - set(vocab.options) - {"*"})
    if unknown:
        raise HistoryError(f"--targets {path}: {len(unknown)} label(s) that are no option: {', '.join(unknown[:10])}")
    missing = [o for o in vocab.options if o not in mapping]
    if missing and "*" not in mapping:
        raise HistoryError(f"--targets {path}: {len(missing)} option(s) without a destination and no \"*\": "
                           + ", ".join(missing[:10]))
    return {o: mapping.get(o, mapping.get("*", "")) for o in vocab.options}


def raw_policy(name: str, fields: Sequence[str], label: str, vocab: Vocabulary, max_error: float,
               targets: dict[str, str] | None = None) -> dict[str, Any]:
    if len(fields) == 1:
        state = [{"key": key_of(fields[0]), "field": "body", "max_chars": BODY_CHARS}]
    else:
        state = [{"key": key_of(fields[0]), "field": "subject", "max_chars": SUBJECT_CHARS},
                 {"key": key_of("_".join(fields[1:])), "field": "body", "max_chars": BODY_CHARS}]
    question_id = key_of(label)
    options = [{"id": vocab.ids[o], "target": (targets or {}).get(o) or target_of(vocab.ids[o]),
                "description": (f"Any of the {len(vocab.merged)} labels too rare to learn alone" if o == MERGED and vocab.merged
                                else o)[:2000]} for o in vocab.options]
    return {
        "name": name, "version": "1", "item_kind": "ticket",
        "description": f"Routes to the {len(options)} values of {label!r} seen in a history export (make fit-history).",
        "notes": "Written by make fit-history; the head beside it was fitted on the export named in its fit.data.",
        "state": state,
        "questions": [{
            "id": question_id, "question": f"Which {label} should handle this item?", "options": options,
            "thresholds": {"min_confidence": 0.6, "min_margin": 0.1, "min_allowed_token_mass": 0.5},
            "learning": {"max_auto_error": max_error},
        }],
    }


def key_of(name: str) -> str:
    """A name as a policy key or id: letters, digits and `_.-`, 64 at most, starting alphanumeric."""
    key = ID_PATTERN.sub("_", name).strip("_.-")[:64] or "text"
    return key if key[0].isalnum() else "x" + key[:63]


def question_of(raw: dict[str, Any]) -> Question:
    return Question.model_validate(raw["questions"][0])


def question_sha256(raw: dict[str, Any]) -> str:
    question = raw["questions"][0]
    return question_digest(question["question"], [(o["id"], o["description"]) for o in question["options"]],
                           [f"{s['key']}={s['field']}:{s['max_chars']}" for s in raw["state"]])


def states(raw: dict[str, Any], rows: Sequence[dict[str, str]], fields: Sequence[str]) -> list[dict[str, Any]]:
    """Each row's evidence, as the routing function builds it from a ticket (build_state)."""
    shape = SimpleNamespace(state=[SimpleNamespace(**s) for s in raw["state"]])
    out = []
    for i, row in enumerate(rows):
        subject = row[fields[0]] if len(fields) > 1 else "(none)"
        body = "\n\n".join(row[f] for f in fields[1:]) if len(fields) > 1 else row[fields[0]]
        item = parse_item("ticket", {"ticket_id": f"H-{i}", "subject": subject[:20_000], "body": body[:20_000],
                                     "customer": {"id": "history", "tier": "pro"}, "channel": "web",
                                     "created_at": "2026-01-01T00:00:00Z"})
        out.append(build_state(shape, item))  # type: ignore[arg-type]
    return out


# ----------------------------------------------------------------------------------- destinations
def starting_targets(vocab: Vocabulary) -> dict[str, str]:
    """A starting map of each option label onto a destination of its own, for the user to edit:
    the target named after the label (its option id slugified to a target's rules, lower-case
    letters, digits and `-`, 64 at most: 'Administrative rights' → administrative-rights)."""
    return {label: target_of(vocab.ids[label]) for label in vocab.options}


def check_destinations(targets: dict[str, str], destinations: Sequence[str], where: str,
                       how: Callable[[list[str]], str] | None = None) -> None:
    """Every mapped destination is one the deployment has (a policy naming another is refused
    where it is loaded: better here, before anything is scored); `how(unknown)`: what to do
    about the others (how to add their queues), appended."""
    unknown = sorted({t for t in targets.values() if t not in destinations})
    if unknown:
        raise HistoryError(f"{where}: destination(s) the deployment does not have: {', '.join(unknown)} "
                           f"(its destinations: {', '.join(sorted(destinations))})" + (f"; {how(unknown)}" if how else ""))
