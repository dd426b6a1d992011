"""`make fit-history`'s report (`build_report`: report.json) and what it says beyond its overall
figures (training/history_judging.py): TEST's figures per group (label), the next step after the
verdict with numbers (how many labelled rows to collect), whether the text alone's learning curve
has levelled off, judged on its points, and the command's last lines (`out_of_scope_line`,
`last_line`).

Every bound is the project's one definition (decision_router/domain/precision_bound.py): the one-sided
Clopper–Pearson lower bound `precision_lower_bound`, and `items_needed`, the fewest answers, all
right, that could show a target.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from decision_contract import ModelInfo
from decision_router.domain.policies import Question
from decision_router.domain.precision_bound import PRECISION_CONFIDENCE, items_needed, precision_lower_bound
from evaluation import metrics

from .history_export import Export, ExportAsked
from .history_fit import FORMULA, Fitted
from .history_judging import Judged, figures, head_figures, tiers
from .thresholds import promise, verdict

#: The learning curve has levelled off when its last step added less than this much accuracy
#: (0.01: one point); otherwise it is still rising and more labelled rows would help.
LEVELLED_OFF_GAIN = 0.01
#: The most automatic answers `answers_to_confirm` looks for: beyond, a precision this close to
#: the target cannot be confirmed by collecting rows.
MOST_ANSWERS = 1_000_000
#: Groups named in a next step, those needing the most rows first.
GROUPS_NAMED = 3
#: The group of a TEST item whose gold label is not an option.
OUT_OF_SCOPE = "(out of scope)"


def answers_to_confirm(right: int, n: int, target: float, level: float = PRECISION_CONFIDENCE) -> int | None:
    """The fewest automatic answers that, at today's error rate (`right` of `n`), have a lower
    bound of at least `target`: `items_needed(target)` when none was wrong; None when the rate
    itself is not above the target (no number of answers confirms it), or when it takes more than
    MOST_ANSWERS; `n` itself when today's answers already show it."""
    if n == 0:
        return items_needed(target, level)
    if (precision_lower_bound(right, n, level) or 0.0) >= target:
        return n
    rate = right / n
    if rate <= target:
        return None

    def shows(m: int) -> bool:
        return (precision_lower_bound(min(m, math.floor(m * rate + 1e-9)), m, level) or 0.0) >= target

    high = max(n, items_needed(target, level))
    while not shows(high):
        high *= 2
        if high > MOST_ANSWERS:
            return None
    low = max(n, 1)  # does not show it (or is `high`)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if shows(middle) else (middle, high)
    return high


def rows_to_confirm(right: int, n: int, rows: int, target: float) -> int | None:
    """How many more labelled TEST rows, answered automatically at today's share (`n` of `rows`)
    and error rate, would show `target`: 0 when today's already do; None when none would (the
    error rate is not below the target's, or nothing was answered automatically)."""
    needed = answers_to_confirm(right, n, target)
    if needed is None or n == 0 or rows == 0:
        return None
    return math.ceil((needed - n) * rows / n)


def group_figures(groups: Sequence[str], gold: Sequence[str | None], answers: Sequence[str | None],
                  auto: Sequence[bool], target: float) -> dict[str, dict[str, Any]]:
    """TEST's figures per group (`groups[i]`, the label row i counts under): rows, accuracy, the
    automatic share, the automatic answers' precision (None: nothing answered) and its lower bound,
    `status` (`kept`, `too few to confirm`, `missed`: precision below the target, `not shown`: at
    least `items_needed(target)` answers and the bound still below it, `nothing answered`),
    `flagged` (missed or not shown) and `rows_to_confirm` (`rows_to_confirm`)."""
    enough = items_needed(target)
    by: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(g, []).append(i)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(by):
        rows = by[name]
        right = [(gold[i] is None and not auto[i]) or (gold[i] is not None and answers[i] == gold[i]) for i in rows]
        routed = [r for i, r in zip(rows, right) if auto[i]]
        n, hits = len(routed), sum(routed)
        precision = hits / n if n else None
        bound = precision_lower_bound(hits, n)
        if precision is None:
            status = "nothing answered"
        elif precision < target:
            status = "missed"
        elif bound is not None and bound >= target:
            status = "kept"
        elif n >= enough:
            status = "not shown"
        else:
            status = "too few to confirm"
        out[name] = {"rows": len(rows), "accuracy": sum(right) / len(rows), "auto_answers": n,
                     "auto_share": n / len(rows), "auto_precision": precision, "auto_precision_lower_bound": bound,
                     "status": status, "flagged": status in ("missed", "not shown"),
                     "rows_to_confirm": rows_to_confirm(hits, n, len(rows), target) if status != "kept" else 0}
    return out


def group_lines(groups: dict[str, dict[str, Any]], target: float) -> list[str]:
    """One printed line per group, flagged ones marked."""
    lines = []
    for name, g in groups.items():
        if g["auto_precision"] is None:
            auto = "nothing answered automatically"
        else:
            auto = (f"answered {g['auto_share']:.1%} automatically, {g['auto_precision']:.1%} right "
                    f"({round(g['auto_precision'] * g['auto_answers'])} of {g['auto_answers']}), "
                    f"at least {g['auto_precision_lower_bound']:.1%} with 95 % confidence")
        mark = {"missed": f" — MISSES {target:.1%}", "not shown": f" — DOES NOT SHOW {target:.1%}",
                "too few to confirm": f" — too few to confirm {target:.1%}"}.get(g["status"], "")
        if g["status"] == "too few to confirm" and g["rows_to_confirm"]:
            mark += f" (about {g['rows_to_confirm']} more labelled rows would)"
        lines.append(f"group {name}: {g['rows']} rows, accuracy {g['accuracy']:.1%}; {auto}{mark}")
    return lines


def _names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def next_step(report: dict[str, Any], groups: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """After the verdict, what to do, with numbers: `text`, and `rows` (labelled rows to collect,
    None where rows alone will not do) and `groups` (the groups named)."""
    target = report["target_precision"]
    flagged = [name for name, g in groups.items() if g["flagged"]]
    if not report["routed_alone"]:
        holdout = report.get("holdout", {})
        need, accuracy = report["items_needed"], holdout.get("accuracy") or 0.0
        judged = holdout.get("judged_rows") or report.get("n_train", 0)
        if accuracy <= target:
            return {"rows": None, "groups": flagged,
                    "text": (f"out of fold the head was {accuracy:.1%} right, below {target:.1%}: more rows of the same "
                             f"will not show the target; check the labels" + (f" of {_names(flagged)}" if flagged else "")
                             + " or lower the target (--max-error)")}
        total = math.ceil(need / accuracy)  # every row answered at out-of-fold accuracy: the fewest that could
        more = max(0, total - judged)
        return {"rows": more, "groups": flagged,
                "text": (f"collect about {more} more labelled rows for DATA (showing {target:.1%} takes at least {need} "
                         f"automatic answers above a threshold, all right: at least {total} rows judged out of fold at "
                         f"{accuracy:.1%} accuracy, {judged} now)" if more else
                         f"DATA has enough rows ({judged}); its out-of-fold answers are not right often enough above any "
                         f"threshold to show {target:.1%}: check the labels"
                         + (f" of {_names(flagged)}" if flagged else "") + " or lower the target (--max-error)")}
    if report["auto_precision"] is None:
        return {"rows": None, "groups": [], "text": "nothing was answered automatically on TEST: add TEST rows like the "
                                                    "ones the head answers (DATA's) to measure the target"}
    n_test, share = report["n_test"], report["auto_share"]
    answered = round(share * n_test)
    right = round(report["auto_precision"] * answered)
    if report["target_missed"] or report["auto_precision"] <= target:
        wrong = answered - right
        drop = max(1, math.ceil(answered - right / target))  # wrong answers to send to review for the rate to reach it
        wrong_of = {name: g["auto_answers"] - round((g["auto_precision"] or 0.0) * g["auto_answers"]) for name, g in groups.items()}
        named = flagged or [name for name in sorted(wrong_of, key=lambda k: -wrong_of[k]) if wrong_of[name]][:1]
        return {"rows": None, "groups": named,
                "text": (f"{drop} of the {wrong} wrong automatic answers must go (to review, or right) for {target:.1%}: "
                         + (f"collect more labelled training rows of {_names(named)} and fit again, or route "
                          f"{'them' if len(named) > 1 else 'it'} to review (targets.json)" if named else
                          "collect more labelled training rows and fit again"))}
    bound = report["auto_precision_lower_bound"]
    if bound is not None and bound >= target:
        return {"rows": 0, "groups": [], "text": f"none needed: TEST shows {target:.1%}"}
    more = rows_to_confirm(right, answered, n_test, target)
    waiting = sorted(((g["rows_to_confirm"], name) for name, g in groups.items()
                      if g["status"] == "too few to confirm" and g["rows_to_confirm"]), reverse=True)[:GROUPS_NAMED]
    named = [name for _, name in waiting]
    if more is None:
        return {"rows": None, "groups": named,
                "text": (f"at today's error rate ({1 - report['auto_precision']:.1%}) TEST would need more than "
                         f"{MOST_ANSWERS} automatic answers to confirm {target:.1%}: lower the error rate first")}
    per_group = "; ".join(f"{name} about {rows}" for rows, name in waiting)
    return {"rows": more, "groups": named,
            "text": (f"collect about {more} more labelled TEST rows" + (f", most of groups {_names(named)}" if named else "")
                     + f", to confirm {target:.1%} (at today's {share:.1%} automatic share and "
                     f"{1 - report['auto_precision']:.1%} error rate, {answered + math.ceil(more * share)} automatic "
                     f"answers)" + (f"; per group alone: {per_group}" if per_group else ""))}


def judge_curve(points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The learning curve judged on its points: `levelled_off` only when its last step added less
    than LEVELLED_OFF_GAIN of accuracy (`last_gain`, None with a single point), and `says`, the
    words printed."""
    if len(points) < 2:
        return {"levelled_off": None, "last_gain": None, "levelled_off_below": LEVELLED_OFF_GAIN,
                "says": (f"reaches {points[-1]['accuracy']:.3f} (one point: too few to tell whether it has levelled off)"
                         if points else "was not measured")}
    before, last = points[-2], points[-1]
    gain = round(last["accuracy"] - before["accuracy"], 6)
    step = (f"{gain * 100:+.1f} points from the previous: {before['accuracy']:.3f} → {last['accuracy']:.3f} from "
            f"{before['rows']} to {last['rows']} rows")
    if gain < LEVELLED_OFF_GAIN:
        says = (f"has levelled off at {last['accuracy']:.3f} ({step}; levelled off means under "
                f"+{LEVELLED_OFF_GAIN * 100:.0f} point a step)")
    else:
        says = f"is still rising at the last point ({step}: more labelled rows would help)"
    return {"levelled_off": gain < LEVELLED_OFF_GAIN, "last_gain": gain, "levelled_off_below": LEVELLED_OFF_GAIN,
            "says": says}


def precision_words(precision: float | None, digits: int = 3) -> str:
    """`at precision 0.987`, or `(nothing answered)` (never precision 0 when nothing was)."""
    return "(nothing answered)" if precision is None else f"at precision {precision:.{digits}f}"


def build_report(asked: ExportAsked, export: Export, question: Question, judged: Judged, fitted: Fitted, *,
                 head_file: tuple[str, int], curve: dict[str, Any], outlook: str, model: ModelInfo | None,
                 seconds: dict[str, float]) -> dict[str, Any]:
    """report.json: the head's figures on TEST against the text classifier's at its own threshold,
    whether TEST kept the promise, the head (`head_file`: its name in OUT and its bytes), the
    choices out of fold, what reading the export found (`asked`: how it was read), who answers
    (`model`: None when nothing was scored, --text-only), the text alone's curve, and the groups
    and the next step."""
    vocab = export.vocab
    P = fitted.baseline_probabilities
    base_conf = [float(c) for c in metrics.confidences(list(P), FORMULA)]
    base_threshold = fitted.baseline_threshold if fitted.baseline_threshold is not None else 1.01
    base_answers = [vocab.options[int(i)] for i in P.argmax(axis=1)]
    found = head_figures(question, judged, vocab.options)
    learned = question.learned_head
    assert learned is not None, "fit-history writes the question's head"
    target = 1 - asked.max_error
    report = {
        "n_train": len(export.train_rows), "n_test": len(export.test_rows), "options": len(vocab.options),
        **found,
        **promise(found["auto_precision"], target, fitted.holdout["items_needed"]),
        "baseline": figures(judged.gold, base_answers, base_conf, [c >= base_threshold for c in base_conf], vocab.options),
        "readout": "head over the model's signals (signals decision)" if question.many_options else "head over the letters' request",
        "head": {"file": head_file[0], "bytes": head_file[1], "version": fitted.document["version"],
                 "model_weight": fitted.document["fit"]["model_weight"], "min_confidence": learned.thresholds.min_confidence,
                 "encoder": fitted.document["sentence"]["encoder"] if "sentence" in fitted.document else None,
                 "reads_model": learned.reads_model},
        "holdout": fitted.holdout,
        "rare": {"min_examples": asked.min_examples, "mode": asked.rare, "labels": vocab.rare},
        "read": export.read,
        "tiers": tiers(question, judged.auto, found),
        "scoring": "text-only" if model is None else "model",
        "text_curve": {**{k: v for k, v in curve.items() if k != "seconds"}, "outlook": outlook},
        "model": None if model is None else {"file": model.file, "sha256": model.sha256},
        "seconds": seconds,
    }
    report["text_curve"].update({k: v for k, v in judge_curve(curve["points"]).items() if k != "says"})
    report["groups"] = group_figures([vocab.option_of(r[asked.label]) or r[asked.label] for r in export.test_rows],
                                     judged.gold, judged.answers, judged.auto, target)
    report["next_step"] = next_step(report, report["groups"])
    return report


def out_of_scope_line(report: dict[str, Any]) -> str | None:
    """With out-of-scope TEST items: in-scope accuracy, the share answered and its precision, the
    out-of-scope share caught against the in-scope share sent to review (and what the head's
    thresholds alone did), the novelty score's AUROC. None without out-of-scope items."""
    oos = report.get("out_of_scope")
    if not oos:
        return None
    answered = ("nothing answered automatically" if report["auto_precision"] is None else
                f"answered {report['auto_share']:.1%} at precision {report['auto_precision']:.1%}")
    line = (f"in scope {_pct(report['in_scope_accuracy'])} right; {answered}; "
            f"out of scope: {oos['caught']:.1%} of {oos['items']} caught at "
            f"{oos['in_scope_sent_to_review']:.1%} of in-scope sent to review")
    found = report.get("novelty")
    if found and "head_thresholds_alone" in found:
        alone = found["head_thresholds_alone"]
        line += f" (head thresholds alone: {alone['caught']:.1%} at {alone['in_scope_sent_to_review']:.1%})"
        if found.get("auroc") is not None:
            line += f"; novelty AUROC {found['auroc']:.3f}"
    else:
        line += " (no novelty part)"
    return line


def last_line(report: dict[str, Any]) -> str:
    """The command's last line: whether TEST kept the promise, plainly (`verdict`), or, when it
    did, what it showed and whether TEST was large enough to show it with 95 % confidence."""
    return _verdict_line(report) + (f"; next: {report['next_step']['text']}" if report.get("next_step") else "")


def _verdict_line(report: dict[str, Any]) -> str:
    target, bound = report["target_precision"], report["auto_precision_lower_bound"]
    if not report["routed_alone"]:  # the next step says how many rows, where `verdict` gives answers
        return f"NOTHING IS ROUTED ALONE: out of fold, no threshold shows {target:.1%} precision with 95 % confidence"
    said = verdict(report)
    if said:
        return said
    if report["auto_precision"] is None:
        return f"TEST: nothing was answered automatically, so it shows nothing of the {target:.1%} target"
    if bound is None or bound < target:
        return (f"TEST IS TOO SMALL TO CONFIRM the {target:.1%} target: its automatic answers were "
                f"{report['auto_precision']:.1%} right, at least {bound or 0:.1%} with 95 % confidence")
    return f"target kept: TEST's automatic answers were at least {bound:.1%} right with 95 % confidence"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"
