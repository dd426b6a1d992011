"""The fit's evidence: held-out folds and the test split, letters beside the head; the policy
diffs; JSON, Markdown and PNG plots (learning curve, threshold curves)."""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from decision_contract import ModelInfo
from evaluation import metrics

from . import learn
from .features import Example
from .question_fit import QuestionFit
from .thresholds import promise, verdict


@dataclass
class QuestionResult:
    policy: Any  # decision_router.domain.policies.Policy
    question: Any  # decision_router.domain.policies.Question
    fit: QuestionFit
    head: dict
    test: dict

    @property
    def name(self) -> str:
        return self.fit.name


def _scores(probabilities: list[np.ndarray], gold: list[int], auto: list[bool], chosen: list[int],
            protected: Sequence[int]) -> dict:
    correct = [c == g for c, g in zip(chosen, gold)]
    right = [c for c, a in zip(correct, auto) if a]
    under = [a and g in protected and c > g for c, g, a in zip(chosen, gold, auto)]
    return {
        "accuracy": float(np.mean(correct)),
        "log_loss": metrics.log_loss(probabilities, gold),
        "ece": metrics.expected_calibration_error(probabilities, gold),
        "auto_routed": len(right),
        "auto_routed_share": len(right) / len(correct),
        "auto_routed_accuracy": float(np.mean(right)) if right else None,
        "auto_routed_lower_bound": metrics.precision_lower_bound(int(sum(right)), len(right)),
        **({"protected_auto_assigned_lower": int(sum(under))} if protected else {}),
    }


def score_test(question: Any, head_document: dict, examples: Sequence[Example], model: ModelInfo,
               fit: QuestionFit) -> dict:
    """The test split side by side: the letters and the fitted head through the routing function
    itself (`judging.model_entry`, at the thresholds written), and the text-only classifier and
    the hidden-state-only head fitted on the same training rows, each auto-routing at the
    threshold its own held-out folds chose. Also per language, where items declare one."""
    from decision_router.domain.heads import Head
    from decision_router.domain.judging import model_entry

    if not examples:
        return {}
    gold = [e.gold for e in examples]
    protected = fit.targets.protected
    out: dict[str, Any] = {"decisions": len(examples)}
    readouts: dict[str, tuple[list[np.ndarray], list[bool], list[int]]] = {}
    for name, head in (("letters", None), ("head", Head.model_validate(head_document))):
        q = question.with_head(head)
        entries = [model_entry(q, e.result(model), e.state) for e in examples]
        probabilities = [np.array([entry.probabilities[o] for o in e.option_ids]) for entry, e in zip(entries, examples)]
        chosen = [e.option_ids.index(entry.option_id) for entry, e in zip(entries, examples)]
        readouts[name] = (probabilities, [entry.passed for entry in entries], chosen)
        if name == "head":
            out["misses"] = [{"item": e.case_id, "gold": e.option_ids[e.gold], "chosen": entry.option_id, "auto": entry.passed,
                              "language": e.language, "note": e.note}
                             for entry, e in zip(entries, examples) if entry.option_id != e.option_ids[e.gold]][:40]
    test = learn.Signals.build([e.state for e in examples], np.array([e.hidden for e in examples]),
                               [e.letter_logits for e in examples], np.array(gold), [e.fold_group for e in examples],
                               fit.signals.text_fields, fit.signals.categorical_fields)
    for name, probabilities in (("text_only", fit.text_only_test(test)), ("hidden_only", fit.hidden_only_test(test))):
        readout = getattr(fit, name)
        conf = metrics.confidences(list(probabilities), fit.formula)
        minimum = readout.min_confidence if readout.min_confidence is not None else float("inf")
        readouts[name] = (list(probabilities), [bool(c >= minimum) for c in conf], [int(p.argmax()) for p in probabilities])
    for name in READOUTS:
        probabilities, auto, chosen = readouts[name]
        out[name] = _scores(probabilities, gold, auto, chosen, protected)
        by_language: dict[str, list[int]] = {}
        for i, e in enumerate(examples):
            by_language.setdefault(e.language or "(none given)", []).append(i)
        if len(by_language) > 1:
            out[name]["by_language"] = {
                language: {"decisions": len(rows), "accuracy": float(np.mean([chosen[i] == gold[i] for i in rows]))}
                for language, rows in sorted(by_language.items())}
    return out


#: The readouts compared in every report, in the order they are shown.
READOUTS = ("letters", "text_only", "hidden_only", "head")
READOUT_NAMES = {"letters": "letters (zero-shot)", "text_only": "TF-IDF + LR (text only)",
                 "hidden_only": "hidden-state head", "head": "combined head (shipped)"}


def policy_changes(results: Sequence[QuestionResult], write: bool) -> list[dict]:
    """Per policy: head files in where they win, out where they no longer do; the diff; written and
    loaded back through the policy validation unless `write` is false."""
    from decision_router.domain.policies import POLICY_DIR, load_policy
    from evaluation.policy_file import format_policy

    changes = []
    for name in sorted({r.policy.name for r in results}):
        path = POLICY_DIR / f"{name}.json"
        old_text = path.read_text(encoding="utf-8")
        document = json.loads(old_text)
        wanted = copy.deepcopy(document)
        files: dict[Path, str] = {}
        for question in wanted["questions"]:
            result = next((r for r in results if r.policy.name == name and r.question.id == question["id"]), None)
            if result is None:
                continue
            if result.fit.head_wins:
                relative = f"heads/{name}.{question['id']}.json"
                text = learn.head_bytes(result.head).decode()
                files[POLICY_DIR / relative] = text
                question["head"] = {"file": relative, "sha256": hashlib.sha256(text.encode()).hexdigest()}
            else:
                question.pop("head", None)
        new_text = format_policy(wanted)
        diff = "".join(difflib.unified_diff(old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                            fromfile=f"{path} (now)", tofile=f"{path} (fitted)"))
        written = write and new_text != old_text or write and any(
            not p.is_file() or p.read_text(encoding="utf-8") != t for p, t in files.items())
        if written:
            for head_path, text in files.items():
                head_path.parent.mkdir(parents=True, exist_ok=True)
                head_path.write_text(text, encoding="utf-8")
            path.write_text(new_text, encoding="utf-8")
            load_policy(name)  # the written files must load, or this raises naming the problem
        changes.append({"policy": name, "path": str(path), "written": written, "diff": _shorten(diff),
                        "head_files": {str(p.relative_to(POLICY_DIR)): len(t.encode()) for p, t in files.items()}})
    return changes


def _shorten(diff: str, width: int = 160) -> str:
    """Weight rows are thousands of characters long: the diff shows their start."""
    return "".join(line if len(line) <= width else line[:width] + " …\n" for line in diff.splitlines(keepends=True))


def _readout(r: Any) -> dict:
    return {"accuracy": r.accuracy, "ece": r.ece, "log_loss": r.log_loss, "min_confidence": r.min_confidence,
            "auto_routed_share": r.auto_routed_share, "auto_routed_accuracy": r.auto_routed_accuracy,
            "auto_routed_lower_bound": r.auto_routed_lower_bound, "items_needed": r.items_needed}


def kept_promise(fit: QuestionFit, test: dict) -> dict:
    """`thresholds.promise` for the test split's automatic answers (the combined head, at the
    thresholds written)."""
    return promise(test.get("head", {}).get("auto_routed_accuracy"), 1 - fit.targets.max_error, fit.head.items_needed)


def build(results: Sequence[QuestionResult], changes: list[dict], *, command: str, model: ModelInfo,
          sources: list[str], seconds: float, failures: list[str]) -> dict:
    questions = {}
    for r in results:
        f = r.fit
        questions[r.name] = {
            "options": f.option_ids,
            "train_decisions": f.n_train,
            "folds": f.folds,
            "max_auto_error": f.targets.max_error,
            "chance_rate": f.chance_rate,
            "beats_chance": f.beats_chance,
            "head_written": f.head_wins,
            "regularisation": f.regularisation,
            "model_weight": f.model_weight,
            "head_temperature": f.temperature,
            "letters_temperature": f.letters_temperature,
            "cross_validated": {name: _readout(getattr(f, name)) for name in READOUTS},
            "under_assignment": f.under_assignment,
            "thresholds": r.head["thresholds"],
            "test": r.test,
            "learning_curve": f.learning_curve,
            "overtakes_letters_at": f.overtakes_letters_at,
            "head_version": r.head["version"],
            **kept_promise(f, r.test),
        }
    return {"run": {"command": command, "model": model.model_dump(), "data": sources, "seconds": round(seconds, 1),
                    "scoring_failures": failures},
            "questions": questions, "policy_changes": changes}


def write_all(summary: dict, results: Sequence[QuestionResult], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "markdown": out / "report.md",
             "learning_curve": out / "learning-curve.png", "thresholds": out / "thresholds.png"}
    paths["json"].write_text(json.dumps(summary, indent=2, default=float) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(summary), encoding="utf-8")
    learning_curve_plot(summary, paths["learning_curve"])
    threshold_plot(results, paths["thresholds"])
    return paths


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(summary: dict) -> str:
    run = summary["run"]
    lines = [
        "# Heads fitted on labelled decisions",
        "",
        f"`{run['command']}` · model `{run['model']['file']}` (sha256 `{run['model']['sha256'][:12]}…`) · "
        f"data: {', '.join(run['data'])} · {run['seconds']} s",
        "",
        "Four readouts side by side, on the same folds: the model's letters (zero-shot), the plain text "
        "classifier (TF-IDF + logistic regression), the hidden-state head, and the combined head that ships. "
        "Cross-validated on the training rows (group k-fold); **test** rows (`split: test`) were never fitted "
        "on: the letters and the combined head are scored through the routing function at the thresholds "
        "written, the other two at the thresholds their own folds chose.",
        "",
        "Auto-routed cells: the share routed alone, (the share of those right, and the one-sided 95 % lower "
        "confidence bound of that precision, which thresholds hold to the target).",
        "",
        "| question | readout | CV accuracy | CV log loss | CV ECE | CV auto-routed (right, ≥) | test accuracy | "
        "test log loss | test ECE | test auto-routed (right, ≥) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, q in summary["questions"].items():
        for readout in READOUTS:
            cv = q["cross_validated"][readout]
            test = q["test"].get(readout, {})
            lines.append(
                f"| {name} | {READOUT_NAMES[readout]} | {_pct(cv['accuracy'])} | {_num(cv['log_loss'])} | "
                f"{_num(cv['ece'])} | {_pct(cv['auto_routed_share'])} ({_pct(cv['auto_routed_accuracy'])}, "
                f"≥ {_pct(cv.get('auto_routed_lower_bound'))}) | "
                f"{_pct(test.get('accuracy'))} | {_num(test.get('log_loss'))} | {_num(test.get('ece'))} | "
                f"{_pct(test.get('auto_routed_share'))} ({_pct(test.get('auto_routed_accuracy'))}, "
                f"≥ {_pct(test.get('auto_routed_lower_bound'))}) |"
            )
    languages = [(name, q) for name, q in summary["questions"].items() if q["test"].get("head", {}).get("by_language")]
    if languages:
        lines += ["", "## Test accuracy by language", "",
                  "| question | language | decisions | " + " | ".join(READOUT_NAMES[r] for r in READOUTS) + " |",
                  "|---|---|---:|" + "---:|" * len(READOUTS)]
        for name, q in languages:
            for language, cell in q["test"]["head"]["by_language"].items():
                row = [_pct(q["test"][r].get("by_language", {}).get(language, {}).get("accuracy")) for r in READOUTS]
                lines.append(f"| {name} | {language} | {cell['decisions']} | " + " | ".join(row) + " |")
    lines += ["", "## Decisions", ""]
    for name, q in summary["questions"].items():
        written = "head written" if q["head_written"] else "no head (letters keep deciding)"
        why = "" if q["beats_chance"] else f"; the head does not beat always-the-commonest-answer ({q['chance_rate']:.0%})"
        overtakes = q["overtakes_letters_at"]
        lines.append(f"- **{name}**: {written}{why}. C = {q['regularisation']}, model weight = {q['model_weight']}, "
                     f"head T = {q['head_temperature']:.3f}, thresholds {q['thresholds']} (at most "
                     f"{q['max_auto_error']:.0%} of auto-routed answers wrong with 95 % confidence, out of fold); "
                     f"overtakes the letters at {overtakes if overtakes is not None else '–'} labelled examples."
                     + (f" **{verdict(q)}**." if verdict(q) else ""))
        if q["under_assignment"]:
            u = q["under_assignment"]
            test = q["test"].get("head", {})
            lines.append(f"  - under-assignment, out of fold: {u['auto_assigned_lower']} of {u['protected_gold']} protected "
                         f"gold answers auto-assigned a lower option ({u['rate']:.1%}); test: "
                         f"{test.get('protected_auto_assigned_lower', '–')}.")
    lines += ["", "## Learning curve (cross-validated)", "", "![learning curve](learning-curve.png)", "",
              "| question | examples | " + " | ".join(READOUT_NAMES[r] for r in READOUTS) + " |",
              "|---|---:|" + "---:|" * len(READOUTS)]
    for name, q in summary["questions"].items():
        for point in q["learning_curve"]:
            cells = [f"{_pct(point[r]['accuracy'])} ({_pct(point[r]['auto_routed_share'])})" for r in READOUTS]
            lines.append(f"| {name} | {point['examples']} | " + " | ".join(cells) + " |")
    lines += ["", "Cells: accuracy (share auto-routed at the question's target error).", "",
              "![threshold curves](thresholds.png)", "", "## Policy changes", ""]
    for change in summary["policy_changes"]:
        state = "written" if change["written"] else "not written"
        files = ", ".join(f"{p} ({n / 1024:.0f} KiB)" for p, n in change.get("head_files", {}).items())
        lines += [f"### {change['policy']} ({state})", "", f"Head files: {files or 'none'}", "", "```diff",
                  change["diff"] or "(no change)", "```", ""]
    lines += ["## Test misses (combined head)", ""]
    for name, q in summary["questions"].items():
        for miss in q["test"].get("misses", []):
            note = f" — {miss['note']}" if miss.get("note") else ""
            lines.append(f"- {name} {miss['item']}: gold {miss['gold']}, chose {miss['chosen']}"
                         f"{' (auto-routed)' if miss['auto'] else ' (review)'}{note}")
    return "\n".join(lines) + "\n"


def learning_curve_plot(summary: dict, path: Path) -> None:
    questions = list(summary["questions"].items())
    fig, axes = plt.subplots(1, max(1, len(questions)), figsize=(4.6 * max(1, len(questions)), 3.9), squeeze=False)
    for axis, (name, q) in zip(axes[0], questions):
        xs = [p["examples"] for p in q["learning_curve"]]
        for readout in READOUTS:
            axis.plot(xs, [p[readout]["accuracy"] for p in q["learning_curve"]], marker="o", label=READOUT_NAMES[readout])
        axis.set(xlabel="labelled examples", ylabel="accuracy (held-out folds)", ylim=(0, 1), title=name, xscale="log")
        axis.minorticks_off()
        axis.set_xticks(xs, [str(x) for x in xs])
        axis.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def threshold_plot(results: Sequence[QuestionResult], path: Path) -> None:
    fig, axes = plt.subplots(1, max(1, len(results)), figsize=(4.5 * max(1, len(results)), 3.8), squeeze=False)
    for axis, r in zip(axes[0], results):
        for readout in READOUTS:
            rows = [row for row in getattr(r.fit, readout).threshold_table if row.auto_routed]
            axis.plot([row.share_auto_routed for row in rows], [row.error_rate for row in rows], marker=".",
                      label=READOUT_NAMES[readout])
        axis.set(title=r.name, xlabel="share auto-routed", ylabel="error among auto-routed", xlim=(0, 1), ylim=(0, 1))
        axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_summary(summary: dict, paths: dict[str, Path]) -> None:
    for name, q in summary["questions"].items():
        cv, test = q["cross_validated"], q["test"]
        cells = " | ".join(f"{r} CV {_pct(cv[r]['accuracy'])} test {_pct(test.get(r, {}).get('accuracy'))} "
                           f"auto {_pct(test.get(r, {}).get('auto_routed_share'))} "
                           f"({_pct(test.get(r, {}).get('auto_routed_accuracy'))})" for r in READOUTS)
        note = f" | {verdict(q)}" if verdict(q) else ""
        print(f"{name}: n={q['train_decisions']} | {cells} | {'head written' if q['head_written'] else 'letters kept'}{note}")
    for change in summary["policy_changes"]:
        print(f"\npolicy {change['policy']}: {'written' if change['written'] else 'unchanged or dry run'}\n"
              f"{change['diff'] or '(no change)'}")
    print(f"report: {paths['markdown']} (JSON {paths['json']})")
