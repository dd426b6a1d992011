"""The fit's evidence: held-out folds and the test split, letters beside the head; the policy
diffs; JSON, Markdown and PNG plots (learning curve, threshold curves)."""

from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from bench.evaluate import metrics
from decision_contract import ModelInfo

from .features import Example
from .learn import QuestionFit


@dataclass
class QuestionResult:
    policy: Any  # decision_router.policies.Policy
    question: Any  # decision_router.policies.Question
    fit: QuestionFit
    head: dict
    test: dict

    @property
    def name(self) -> str:
        return self.fit.name


def score_test(question: Any, head_document: dict, examples: Sequence[Example], model: ModelInfo) -> dict:
    """The test split through the routing function itself (`judging.model_entry`): the question
    as shipped (letters) and the question with the fitted head, each at its own thresholds."""
    from decision_router.heads import Head
    from decision_router.judging import model_entry

    if not examples:
        return {}
    with_head = question.model_copy(update={"head": Head.model_validate(head_document)})
    letters_only = question.model_copy(update={"head": None})
    out: dict[str, Any] = {"decisions": len(examples)}
    for name, q in (("letters", letters_only), ("head", with_head)):
        entries = [model_entry(q, e.result(model)) for e in examples]
        gold = [e.option_ids[e.gold] for e in examples]
        correct = [entry.option_id == g for entry, g in zip(entries, gold)]
        probabilities = [np.array([entry.probabilities[o] for o in e.option_ids]) for entry, e in zip(entries, examples)]
        auto = [c for entry, c in zip(entries, correct) if entry.passed]
        out[name] = {
            "accuracy": float(np.mean(correct)),
            "ece": metrics.expected_calibration_error(probabilities, [e.gold for e in examples]),
            "auto_routed": len(auto),
            "auto_routed_share": len(auto) / len(entries),
            "auto_routed_accuracy": float(np.mean(auto)) if auto else None,
            "readouts": sorted({entry.readout for entry in entries}),
            "misses": [{"item": e.case_id, "gold": g, "chosen": entry.option_id, "auto": entry.passed, "note": e.note}
                       for entry, e, g, c in zip(entries, examples, gold, correct) if not c][:40],
        }
    return out


def policy_changes(results: Sequence[QuestionResult], write: bool) -> list[dict]:
    """Per policy: heads in where they win, out where they no longer do; the diff; written and
    loaded back through the policy validation unless `write` is false."""
    from decision_router.policies import POLICY_DIR, format_policy, load_policy

    changes = []
    for name in sorted({r.policy.name for r in results}):
        path = POLICY_DIR / f"{name}.json"
        old_text = path.read_text(encoding="utf-8")
        document = json.loads(old_text)
        wanted = copy.deepcopy(document)
        for question in wanted["questions"]:
            result = next((r for r in results if r.policy.name == name and r.question.id == question["id"]), None)
            if result is None:
                continue
            if result.fit.head_wins:
                question["head"] = result.head
            else:
                question.pop("head", None)
        new_text = format_policy(wanted)
        diff = "".join(difflib.unified_diff(old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                            fromfile=f"{path} (now)", tofile=f"{path} (fitted)"))
        written = write and new_text != old_text
        if written:
            path.write_text(new_text, encoding="utf-8")
            load_policy(name)  # the written file must load, or this raises naming the problem
        changes.append({"policy": name, "path": str(path), "written": written, "diff": _shorten(diff)})
    return changes


def _shorten(diff: str, width: int = 160) -> str:
    """Weight rows are thousands of characters long: the diff shows their start."""
    return "".join(line if len(line) <= width else line[:width] + " …\n" for line in diff.splitlines(keepends=True))


def _readout(r: Any) -> dict:
    return {"accuracy": r.accuracy, "ece": r.ece, "log_loss": r.log_loss, "min_confidence": r.min_confidence,
            "auto_routed_share": r.auto_routed_share}


def build(results: Sequence[QuestionResult], changes: list[dict], *, command: str, model: ModelInfo,
          sources: list[str], seconds: float, failures: list[str]) -> dict:
    questions = {}
    for r in results:
        f = r.fit
        questions[r.name] = {
            "options": f.option_ids,
            "train_decisions": f.n_train,
            "folds": f.folds,
            "chance_rate": f.chance_rate,
            "beats_chance": f.beats_chance,
            "head_written": f.head_wins,
            "regularisation": f.regularisation,
            "head_temperature": f.temperature,
            "letters_temperature": f.letters_temperature,
            "cross_validated": {"letters": _readout(f.letters), "head": _readout(f.head)},
            "thresholds": r.head["thresholds"],
            "test": r.test,
            "learning_curve": f.learning_curve,
            "head_version": r.head["version"],
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


def markdown(summary: dict) -> str:
    run = summary["run"]
    lines = [
        "# Heads fitted on labelled decisions",
        "",
        f"`{run['command']}` · model `{run['model']['file']}` (sha256 `{run['model']['sha256'][:12]}…`) · "
        f"data: {', '.join(run['data'])} · {run['seconds']} s",
        "",
        "Cross-validated on the training rows (group k-fold); **test** rows (`split: test`) were never fitted "
        "on and are scored through the routing function at the thresholds written to the policy.",
        "",
        "| question | n train | readout | CV accuracy | CV ECE | CV auto-routed @ target | test accuracy | test ECE | "
        "test auto-routed | test auto-routed accuracy |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, q in summary["questions"].items():
        for readout in ("letters", "head"):
            cv = q["cross_validated"][readout]
            test = q["test"].get(readout, {})
            lines.append(
                f"| {name} | {q['train_decisions']} | {readout} | {_pct(cv['accuracy'])} | {cv['ece']:.3f} | "
                f"{_pct(cv['auto_routed_share'])} | {_pct(test.get('accuracy'))} | "
                f"{test.get('ece', float('nan')):.3f} | {_pct(test.get('auto_routed_share'))} | "
                f"{_pct(test.get('auto_routed_accuracy'))} |"
            )
    lines += ["", "## Decisions", ""]
    for name, q in summary["questions"].items():
        verdict = "head written" if q["head_written"] else "no head (letters keep deciding)"
        why = "" if q["beats_chance"] else f"; the head does not beat always-the-commonest-answer ({q['chance_rate']:.0%})"
        lines.append(f"- **{name}**: {verdict}{why}. C = {q['regularisation']}, head T = {q['head_temperature']:.3f}, "
                     f"thresholds {q['thresholds']}.")
    lines += ["", "## Learning curve (cross-validated)", "", "![learning curve](learning-curve.png)", "",
              "| question | examples | accuracy | auto-routed at target error |", "|---|---:|---:|---:|"]
    for name, q in summary["questions"].items():
        for point in q["learning_curve"]:
            lines.append(f"| {name} | {point['examples']} | {_pct(point['accuracy'])} | {_pct(point['auto_routed_share'])} |")
    lines += ["", "![threshold curves](thresholds.png)", "", "## Policy changes", ""]
    for change in summary["policy_changes"]:
        state = "written" if change["written"] else "not written"
        lines += [f"### {change['policy']} ({state})", "", "```diff", change["diff"] or "(no change)", "```", ""]
    lines += ["## Test misses (head)", ""]
    for name, q in summary["questions"].items():
        for miss in q["test"].get("head", {}).get("misses", []):
            note = f" — {miss['note']}" if miss.get("note") else ""
            lines.append(f"- {name} {miss['item']}: gold {miss['gold']}, chose {miss['chosen']}"
                         f"{' (auto-routed)' if miss['auto'] else ' (review)'}{note}")
    return "\n".join(lines) + "\n"


def learning_curve_plot(summary: dict, path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, q in summary["questions"].items():
        xs = [p["examples"] for p in q["learning_curve"]]
        left.plot(xs, [p["accuracy"] for p in q["learning_curve"]], marker="o", label=name)
        right.plot(xs, [p["auto_routed_share"] for p in q["learning_curve"]], marker="o", label=name)
    left.set(xlabel="labelled examples", ylabel="accuracy (held-out folds)", ylim=(0, 1), title="Head accuracy")
    right.set(xlabel="labelled examples", ylabel="share auto-routed", ylim=(0, 1), title="Auto-routed at the target error")
    left.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def threshold_plot(results: Sequence[QuestionResult], path: Path) -> None:
    fig, axes = plt.subplots(1, max(1, len(results)), figsize=(4.5 * max(1, len(results)), 3.8), squeeze=False)
    for axis, r in zip(axes[0], results):
        for readout, table in (("letters", r.fit.letters.threshold_table), ("head", r.fit.head.threshold_table)):
            rows = [row for row in table if row.auto_routed]
            axis.plot([row.share_auto_routed for row in rows], [row.error_rate for row in rows], marker=".", label=readout)
        axis.set(title=r.name, xlabel="share auto-routed", ylabel="error among auto-routed", xlim=(0, 1), ylim=(0, 1))
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_summary(summary: dict, paths: dict[str, Path]) -> None:
    for name, q in summary["questions"].items():
        cv, test = q["cross_validated"], q["test"]
        print(f"{name}: n={q['train_decisions']} | CV letters {_pct(cv['letters']['accuracy'])} head "
              f"{_pct(cv['head']['accuracy'])} | test letters {_pct(test.get('letters', {}).get('accuracy'))} head "
              f"{_pct(test.get('head', {}).get('accuracy'))}, auto-routed {_pct(test.get('head', {}).get('auto_routed_share'))} "
              f"at {_pct(test.get('head', {}).get('auto_routed_accuracy'))} right | "
              f"{'head written' if q['head_written'] else 'letters kept'}")
    for change in summary["policy_changes"]:
        print(f"\npolicy {change['policy']}: {'written' if change['written'] else 'unchanged or dry run'}\n"
              f"{change['diff'] or '(no change)'}")
    print(f"report: {paths['markdown']} (JSON {paths['json']})")
