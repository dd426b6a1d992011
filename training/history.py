"""`make fit-history`: a policy from a help desk's history, in one command.

    python -m training.history --data train.jsonl --test test.jsonl --text text --label label --out dir
    make fit-history DATA=train.csv TEST=test.csv TEXT=subject,body LABEL=group OUT=dir [MIN_EXAMPLES=10 RARE=merge|review]

A user's export of past items (CSV with a header, or JSONL: one object a line), the text fields
and the label field named on the command line, becomes:

- `dir/policy.json`: one ticket question whose options are the labels seen in DATA (any number:
  beyond 16 the endpoint is asked for the model's signals only and the head answers), loadable by
  the routing function's own loader (this command loads it before it ends);
- `dir/heads/<question>.json`: the head, fitted on DATA (TF-IDF word and character n-grams of the
  text and the model's hidden state, the model's weight chosen on a held-out fifth of DATA), with
  its temperature and its `min_confidence` from the question's target precision (`--max-error`,
  97 % precision by default) on that held-out fifth;
- `dir/predictions.jsonl`: one line per TEST item, `{"text", "gold", "answer", "confidence",
  "auto"}`, scored through the routing function's own judging (`judging.model_entry`);
- `dir/report.json`: `n_train`, `n_test`, `options`, `accuracy`, `macro_f1`, `ece`, `auto_share`,
  `auto_precision`, and `baseline` with the same figures for the text classifier a user would
  compare with (TF-IDF word 1-2 + character 2-5-grams, logistic regression C=10), fitted in the
  same run on the same split, its threshold chosen the same way.

Each option routes to a destination of its own, named after its label, unless `--targets` maps
the labels onto the deployment's destination keys (`DESTINATION_QUEUES`; `"*"`: every other label).

TEXT may name several comma-separated fields: the first is the ticket's subject and the others,
one a paragraph, its body (one field: the body). A TEST item whose gold label is not an option (out
of scope) is right only when it is not routed automatically; the report counts those apart too.
Labels with fewer than MIN_EXAMPLES training items are reported and, as RARE says, merged into one
option `other` (`merge`) or left out of the options, so that their items go to review (`review`).

The model's signals (hidden state) are cached per model file (its sha256) and per request under
~/.cache/decision-router/signals/ (`--cache`): a second run scores nothing again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import typing
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import f1_score
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from decision_contract import MAX_OPTIONS, Decision, DecisionResult, Layout, ModelInfo
from decision_contract.signals import request_key
from decision_router.domain.heads import FORMAT
from decision_router.domain.judging import model_entry
from decision_router.domain.model_requests import question_decision
from decision_router.domain.policies import Policy, Question, load_policy
from evaluation import metrics
from evaluation.runners import RunFailure, Runner

from . import learn
from .history_policy import (
    MERGED,
    HistoryError,
    key_of,
    question_of,
    question_sha256,
    raw_policy,
    read_rows,
    read_targets,
    states,
    vocabulary,
)
from .thresholds import judge

DEFAULT_CACHE = Path.home() / ".cache/decision-router/signals"
#: Weights in a head's rows (options x terms + hidden width) at most; make fit-history keeps the
#: most frequent terms so a many-option head stays within MAX_MANY_OPTIONS_HEAD_BYTES.
MAX_WEIGHTS = 1_600_000
#: The same for a head of at most 16 options (MAX_HEAD_BYTES, 2 MB).
LETTERED_WEIGHTS = 150_000
#: The model's blocks against the lexical ones, chosen on the held-out fifth (0: text only).
MODEL_WEIGHTS = (0.0, 1.0)
HEAD_C = 10.0
HOLDOUT = 0.2



# ----------------------------------------------------------------------------------- signals
class SignalCache:
    """Hidden state, letter logits, token mass and prompt version per request key, kept in
    shards under one folder per model (its sha256), so a run appends and a rerun reads."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.rows: dict[str, tuple[np.ndarray, np.ndarray, float, str]] = {}
        self.fresh: list[str] = []
        if folder is not None and folder.is_dir():
            for shard in sorted(folder.glob("shard-*.npz")):
                with np.load(shard, allow_pickle=False) as data:
                    for key, h, z, m, v in zip(data["keys"], data["hidden"], data["logits"], data["mass"], data["version"]):
                        self.rows[str(key)] = (h, z, float(m), str(v))

    def get(self, key: str):
        return self.rows.get(key)

    def put(self, key: str, result: DecisionResult) -> None:
        self.rows[key] = (np.asarray(result.hidden_state, dtype=np.float32), np.asarray(result.option_logits),
                          result.allowed_token_mass, result.prompt_version)
        self.fresh.append(key)

    def save(self) -> None:
        if self.folder is None or not self.fresh:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        keys, self.fresh = self.fresh, []
        name = self.folder / f"shard-{time.time_ns()}.npz"
        np.savez(name.with_suffix(".tmp.npz"), keys=np.array(keys), hidden=np.stack([self.rows[k][0] for k in keys]),
                 logits=np.stack([self.rows[k][1] for k in keys]), mass=np.array([self.rows[k][2] for k in keys]),
                 version=np.array([self.rows[k][3] for k in keys]))
        name.with_suffix(".tmp.npz").rename(name)


def score(runner: Runner, model: ModelInfo, decisions: Sequence[Decision], cache: SignalCache, *, what: str,
          progress: bool = True, workers: int = 4, save_every: int = 500) -> list[tuple[np.ndarray, np.ndarray, float, str]]:
    """The model's signals for each decision (one request each), from the cache where it has them;
    a progress bar says how many are left and how long that takes."""
    keys = [request_key(model.sha256, d) for d in decisions]
    todo = [i for i, k in enumerate(dict.fromkeys(keys)) if cache.get(k) is None]
    unique = list(dict.fromkeys(keys))
    first = {k: keys.index(k) for k in unique} if todo else {}
    bar = tqdm(total=len(todo), desc=f"scoring {what} ({len(keys) - len(todo)} cached)", unit="item",
               disable=not progress or not todo, file=sys.stderr, mininterval=2.0)

    def one(index: int) -> None:
        key = unique[index]
        result = runner.decide([decisions[first[key]]]).results[0]
        if result.hidden_state is None or result.model.sha256 != model.sha256:
            raise RunFailure("the endpoint returned no hidden state, or another model answered")
        cache.put(key, result)
        bar.update(1)

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for start in range(0, len(todo), save_every):
                list(pool.map(one, todo[start:start + save_every]))
                cache.save()
    finally:
        cache.save()
        bar.close()
    return [cache.rows[k] for k in keys]


# ----------------------------------------------------------------------------------- fitting
@dataclass
class Fitted:
    document: dict[str, Any]
    holdout: dict[str, Any]
    baseline_threshold: float | None
    baseline_probabilities: np.ndarray  # on TEST


def _signals(st: Sequence[Any], hidden: np.ndarray, gold: np.ndarray, fields: Sequence[str]) -> learn.Signals:
    # the letters are not read (a many-option question has none): one constant column, weight 0
    return learn.Signals.build(st, hidden, list(np.zeros((len(st), 1))), gold, [str(i) for i in range(len(st))],
                               text_fields=fields, categorical_fields=[])


def fit(raw: dict[str, Any], train_states: list[Any], train_hidden: np.ndarray, gold: np.ndarray,
        test_states: list[Any], test_hidden: np.ndarray, *, model: ModelInfo, prompt_version: str, max_error: float,
        seed: int, data: list[str], say: Callable[[str], None], terms_cap: int | None = None,
        model_weight: float | None = None) -> Fitted:
    question = raw["questions"][0]
    k = len(question["options"])
    fields = [s["key"] for s in raw["state"]]
    s = _signals(train_states, train_hidden, gold, fields)
    test = _signals(test_states, test_hidden, np.zeros(len(test_states), dtype=int), fields)
    n = len(s)
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    held = np.sort(order[:max(1, int(round(HOLDOUT * n)))])
    fit_rows = np.setdiff1d(np.arange(n), held)
    budget = MAX_WEIGHTS if k > MAX_OPTIONS else LETTERED_WEIGHTS
    max_terms = min(learn.MAX_TERMS, max(500, budget // k - train_hidden.shape[1]), terms_cap or learn.MAX_TERMS)
    formula = "normalized_peak"
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        space = learn.Space.fit(s, fit_rows, max_terms=max_terms)
        losses, held_logits = {}, {}
        weights = MODEL_WEIGHTS if model_weight is None else (model_weight,)
        for weight in weights:
            started = time.perf_counter()
            linear = learn.fit_linear(s, fit_rows, k, HEAD_C, weight, space=space)
            held_logits[weight] = learn.numpy_logits(linear, s, held)
            losses[weight] = metrics.mean_nll_at(list(held_logits[weight]), list(gold[held]), 1.0)
            say(f"  head, model weight {weight}: held-out log loss {losses[weight]:.3f} ({time.perf_counter() - started:.0f} s)")
        weight = min(weights, key=lambda w: (round(losses[w], 9), w))
        temperature = metrics.fit_temperature(list(held_logits[weight]), list(gold[held])).temperature
        readout = judge(learn._softmax_rows(held_logits[weight], temperature), gold[held], formula, max_error, 5)
        started = time.perf_counter()
        final = learn.fit_linear(s, np.arange(n), k, HEAD_C, weight, space=learn.Space.fit(s, np.arange(n), max_terms=max_terms))
        say(f"  head on all {n}: {time.perf_counter() - started:.0f} s")
        started = time.perf_counter()
        base_held = learn.baseline_probabilities(s, fit_rows, held, k)
        base_readout = judge(list(base_held), gold[held], formula, max_error, 5)
        base_test = learn.baseline_probabilities(s, np.arange(n), np.arange(len(test)), k, test)
        say(f"  text classifier (TF-IDF + logistic regression): {time.perf_counter() - started:.0f} s")
    blocks = final.blocks(s)
    blocks.pop("letters", None)
    reads_model = "hidden" in blocks
    document = {
        "format": FORMAT, "version": "", "question_sha256": question_sha256(raw),
        **({"model_sha256": model.sha256, "hidden_size": model.hidden_size, "prompt_version": prompt_version} if reads_model else {}),
        "options": [o["id"] for o in question["options"]], **blocks, "temperature": round(temperature, 4),
        "thresholds": {"min_confidence": readout.min_confidence if readout.min_confidence is not None else 1.0, "min_margin": 0.0},
        "fit": {"examples": n, "fitted_on": date.today().isoformat(), "data": data, "regularisation": HEAD_C,
                "model_weight": weight, "folds": 2, "cv_accuracy": round(readout.accuracy, 4), "cv_ece": round(readout.ece, 4),
                "text_only_cv_accuracy": round(base_readout.accuracy, 4)},
    }
    digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:10]
    document["version"] = f"{raw['name']}.{question['id']}.{document['fit']['fitted_on']}.{digest}"
    holdout = {"rows": len(held), "model_weight": weight, "log_loss": {str(w): v for w, v in losses.items()},
               "accuracy": readout.accuracy, "min_confidence": readout.min_confidence, "auto_share": readout.auto_routed_share,
               "baseline_accuracy": base_readout.accuracy, "baseline_min_confidence": base_readout.min_confidence,
               "terms": len(final.space.terms)}
    return Fitted(document, holdout, base_readout.min_confidence, base_test)


# ----------------------------------------------------------------------------------- scoring TEST
def figures(gold: Sequence[str | None], answers: Sequence[str], confidences: Sequence[float], auto: Sequence[bool],
            options: Sequence[str]) -> dict[str, Any]:
    """accuracy (out of scope right only when not routed), macro-F1 and ECE over in-scope items,
    the share routed automatically and its precision, and the out-of-scope figures."""
    n = len(gold)
    right = [(g is None and not a) or (g is not None and ans == g) for g, ans, a in zip(gold, answers, auto)]
    scope = [i for i, g in enumerate(gold) if g is not None]
    oos = [i for i, g in enumerate(gold) if g is None]
    routed = [i for i in range(n) if auto[i]]
    hits = [gold[i] == answers[i] for i in scope]
    out: dict[str, Any] = {
        "accuracy": sum(right) / n,
        "in_scope_accuracy": sum(hits) / len(scope) if scope else None,
        # over the labels the in-scope items have or were given (an option no test item has is not a zero)
        "macro_f1": float(f1_score([gold[i] for i in scope], [str(answers[i]) for i in scope], average="macro",
                                   zero_division=0)) if scope else None,
        "ece": _ece([confidences[i] for i in scope], hits) if scope else None,
        "auto_share": len(routed) / n,
        "auto_precision": (sum(right[i] for i in routed) / len(routed)) if routed else None,
    }
    if oos:
        out["out_of_scope"] = {"items": len(oos), "caught": sum(not auto[i] for i in oos) / len(oos),
                               "in_scope_sent_to_review": sum(not auto[i] for i in scope) / max(1, len(scope))}
    return out


def _ece(confidences: Sequence[float], hits: Sequence[bool], bins: int = 15) -> float:
    c, h = np.asarray(confidences, dtype=float), np.asarray(hits, dtype=float)
    edges = np.linspace(0, 1, bins + 1)
    total = 0.0
    for low, high in zip(edges[:-1], edges[1:]):
        mask = (c > low) & (c <= high) if low > 0 else (c >= low) & (c <= high)
        if mask.any():
            total += mask.mean() * abs(h[mask].mean() - c[mask].mean())
    return float(total)


# ----------------------------------------------------------------------------------- the command
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.history", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="training export (.csv with a header, or JSONL)")
    p.add_argument("--test", type=Path, required=True, help="test export, same fields; never fitted on")
    p.add_argument("--text", required=True, help="the text field(s), comma-separated (first: subject, others: body)")
    p.add_argument("--label", required=True, help="the field to predict (the group that took the item)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--name", help="the policy's name (default: the OUT folder's name)")
    p.add_argument("--min-examples", type=int, default=10, help="labels with fewer training items are rare")
    p.add_argument("--rare", choices=("merge", "review"), default="review",
                   help=f"merge rare labels into one option {MERGED!r}, or leave them out so their items go to review")
    p.add_argument("--max-error", type=float, default=0.03, help="share of automatic answers allowed wrong (0.03: 97 %% precision)")
    p.add_argument("--targets", type=Path, help="JSON object label → destination key (\"*\": every other label); "
                   "default: each label its own destination, named after it")
    p.add_argument("--max-terms", type=int, help="at most this many text terms in the head (a smaller file, a faster "
                   "cold start; default: as many as the head's size limit allows)")
    p.add_argument("--model-weight", type=float, choices=MODEL_WEIGHTS,
                   help="fix the model's weight instead of choosing it on the held-out fifth (0: the text alone)")
    p.add_argument("--layout", choices=typing.get_args(Layout),
                   help="the prompt layout of a many-option question's signals decision (default: the request's own)")
    p.add_argument("--limit", type=int, help="only the first N rows of DATA and of TEST (a quick look)")
    p.add_argument("--model", help="GGUF to load in-process (default: the embedded model)")
    p.add_argument("--url", help="score with a running decision container instead")
    p.add_argument("--threads", type=int)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="signal cache folder ('' to disable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None, runner: Runner | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        run(args, runner)
    except HistoryError as error:
        print(f"fit-history: {error}", file=sys.stderr)
        return 2
    return 0


def run(args: argparse.Namespace, runner: Runner | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    say = (lambda text: None) if args.no_progress else (lambda text: print(text, file=sys.stderr, flush=True))
    fields = [f.strip() for f in args.text.split(",") if f.strip()]
    if not fields:
        raise HistoryError("--text names no field")
    train_rows = read_rows(args.data, fields, args.label, limit=args.limit)
    test_rows = read_rows(args.test, fields, args.label, limit=args.limit)
    vocab = vocabulary([r[args.label] for r in train_rows], args.min_examples, args.rare)
    if vocab.rare:
        say(f"{len(vocab.rare)} label(s) with fewer than {args.min_examples} training items "
            f"({'merged into ' + repr(MERGED) if args.rare == 'merge' else 'left to review'}): "
            + ", ".join(f"{label} ({n})" for label, n in vocab.rare.items()))
    name = args.name or key_of(args.out.resolve().name).lower()[:64]
    targets = read_targets(args.targets, vocab) if args.targets else None
    raw = raw_policy(name, fields, args.label, vocab, args.max_error, targets)
    question = question_of(raw)
    train_rows = [r for r in train_rows if vocab.option_of(r[args.label]) is not None]
    gold = np.array([vocab.options.index(vocab.option_of(r[args.label])) for r in train_rows])
    train_states, test_states = states(raw, train_rows, fields), states(raw, test_rows, fields)
    ask = lambda state: question_decision(question, state, args.layout).model_copy(update={"return_hidden_state": True})  # noqa: E731

    own = runner is None
    if runner is None:
        from evaluation.runners import EngineRunner, HttpRunner

        runner = HttpRunner(args.url) if args.url else EngineRunner.load(model_path=args.model, threads=args.threads)
    try:
        model = runner.model_info()
        cache = SignalCache(args.cache / model.sha256 if str(args.cache) else None)
        say(f"{len(vocab.options)} options; {len(train_rows)} training and {len(test_rows)} test items; "
            f"model {model.file} ({runner.description})")
        scoring = time.perf_counter()
        train_signals = score(runner, model, [ask(s) for s in train_states], cache, what="DATA", progress=not args.no_progress)
        test_signals = score(runner, model, [ask(s) for s in test_states], cache, what="TEST", progress=not args.no_progress)
        scoring = time.perf_counter() - scoring
    finally:
        if own:
            runner.close()
    train_hidden = np.array([row[0] for row in train_signals], dtype=np.float64)
    test_hidden = np.array([row[0] for row in test_signals], dtype=np.float64)
    prompt_version = train_signals[0][3]

    fitting = time.perf_counter()
    fitted = fit(raw, train_states, train_hidden, gold, test_states, test_hidden, model=model, prompt_version=prompt_version,
                 max_error=args.max_error, seed=args.seed, data=[f"{args.data.name}"], say=say, terms_cap=args.max_terms,
                 model_weight=args.model_weight)
    fitting = time.perf_counter() - fitting

    out: Path = args.out
    (out / "heads").mkdir(parents=True, exist_ok=True)
    head_bytes = json.dumps(fitted.document, separators=(",", ":")).encode()
    head_name = f"heads/{question.id}.json"
    (out / head_name).write_bytes(head_bytes)
    raw["questions"][0]["head"] = {"file": head_name, "sha256": hashlib.sha256(head_bytes).hexdigest()}
    (out / "policy.json").write_text(json.dumps(raw, indent=2, ensure_ascii=False) + "\n")
    policy: Policy = load_policy(out / "policy.json")  # the routing function's own loader
    question = policy.questions[0]

    # TEST through the routing function's judging, and the text classifier at its own threshold
    label_of = dict(zip([o.id for o in question.options], vocab.options))
    golds = [vocab.option_of(r[args.label]) for r in test_rows]
    head_answers, head_conf, head_auto, lines = [], [], [], []
    for row, state, signal in zip(test_rows, test_states, test_signals):
        entry = model_entry(question, _result(question, model, signal), state)
        answer = label_of[entry.option_id] if entry.option_id else None
        head_answers.append(answer)
        head_conf.append(entry.confidence or 0.0)
        head_auto.append(entry.passed)
        lines.append({"text": " / ".join(row[f] for f in fields), "gold": row[args.label], "answer": answer,
                      "confidence": entry.confidence, "auto": entry.passed})
    with (out / "predictions.jsonl").open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    P = fitted.baseline_probabilities
    base_conf = [float(c) for c in metrics.confidences(list(P), "normalized_peak")]
    base_threshold = fitted.baseline_threshold if fitted.baseline_threshold is not None else 1.01
    base_answers = [vocab.options[int(i)] for i in P.argmax(axis=1)]
    report = {
        "n_train": len(train_rows), "n_test": len(test_rows), "options": len(vocab.options),
        **figures(golds, head_answers, head_conf, head_auto, vocab.options),
        "baseline": figures(golds, base_answers, base_conf, [c >= base_threshold for c in base_conf], vocab.options),
        "target_precision": 1 - args.max_error,
        "readout": "head over the model's signals (signals decision)" if question.many_options else "head over the letters' request",
        "head": {"file": head_name, "bytes": len(head_bytes), "version": fitted.document["version"],
                 "model_weight": fitted.document["fit"]["model_weight"], "min_confidence": question.learned_head.thresholds.min_confidence,
                 "reads_model": question.learned_head.reads_model},
        "holdout": fitted.holdout,
        "rare": {"min_examples": args.min_examples, "mode": args.rare, "labels": vocab.rare},
        "model": {"file": model.file, "sha256": model.sha256},
        "seconds": {"scoring": round(scoring, 1), "fitting": round(fitting, 1), "total": round(time.perf_counter() - started, 1)},
    }
    (out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    say(f"accuracy {report['accuracy']:.3f} (text classifier {report['baseline']['accuracy']:.3f}); answered automatically "
        f"{report['auto_share']:.3f} at precision {report['auto_precision'] or 0:.3f}; wrote {out}/policy.json, {head_name}, "
        f"predictions.jsonl, report.json in {report['seconds']['total']:.0f} s")
    return report


def _result(question: Question, model: ModelInfo, signal: tuple[np.ndarray, np.ndarray, float, str]) -> DecisionResult:
    """The endpoint's answer, as the routing function receives it, from the cached signals."""
    hidden, logits, mass, version = signal
    ids = question_decision(question, "x").option_ids
    z = [float(v) for v in logits]
    return DecisionResult(id=question.id, option_ids=ids, probabilities=[1 / len(z)] * len(z), option_logits=z,
                          temperature=1.0, input_tokens=0, allowed_token_mass=mass, prompt_sha256="0" * 64,
                          prompt_version=version, model=model,
                          timing={"tokenize_seconds": 0.0, "prefill_seconds": 0.0, "total_seconds": 0.0},
                          hidden_state=[float(v) for v in hidden])


if __name__ == "__main__":
    raise SystemExit(main())
