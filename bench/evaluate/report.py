"""The evaluation report as JSON (everything), Markdown (for people) and PNG plots:
reliability diagram, latency histogram, threshold curve."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from .analysis import finite
from .schema import CalibrationGroup, EvalReport

PLOTS = {
    "reliability": "reliability.png",
    "latency": "latency.png",
    "thresholds": "thresholds.png",
}


def write_all(report: EvalReport, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "report.json", "markdown": out_dir / "report.md"}
    if report.calibration:
        paths.update({name: out_dir / file for name, file in PLOTS.items()})
        reliability_diagram(report, paths["reliability"])
        latency_histogram(report, paths["latency"])
        threshold_curve(report, paths["thresholds"])
    report.files = {k: str(v) for k, v in paths.items()}
    document = finite(report.model_dump(mode="json"))
    paths["json"].write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(report), encoding="utf-8")
    return paths


# --- plots ---------------------------------------------------------------------------------------


def reliability_diagram(report: EvalReport, path: Path) -> None:
    groups = report.calibration
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 4.2), squeeze=False)
    for ax, (name, group) in zip(axes[0], groups.items()):
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfect calibration")
        for reliability, label, marker in (
            (group.reliability_before, f"T = 1 (ECE {group.at_t1.ece:.3f})", "o"),
            (group.reliability_after_cv, _after_label(group), "s"),
        ):
            bins = [b for b in reliability or [] if b.count]
            if bins:
                ax.plot([b.mean_confidence for b in bins], [b.accuracy for b in bins], marker=marker, label=label)
        ax.set(title=f"{name} (n={group.decisions})", xlabel="top-label confidence (10 bins)", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1))
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle("Reliability: accuracy vs confidence per bin")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _after_label(group: CalibrationGroup) -> str:
    cv = group.cross_validated
    if not cv:
        return "fitted T"
    return f"fitted T, {cv.folds}-fold out-of-fold (ECE {cv.after.ece:.3f})"


def latency_histogram(report: EvalReport, path: Path) -> None:
    assert report.latency is not None, "no latency without scored decisions"
    latency = report.latency
    values = [v * 1000 for v in latency.histogram_values]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(values, bins=30, color="tab:blue", alpha=0.8)
    s = latency.per_decision_seconds
    for value, label, style in ((s.median, "median", "-"), (s.p95, "p95", "--")):
        if value is not None:
            ax.axvline(value * 1000, color="black", linestyle=style, label=f"{label} {value * 1000:.0f} ms")
    ax.set(title="Decision latency (client wall time per decision)", xlabel="milliseconds", ylabel="decisions")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def threshold_curve(report: EvalReport, path: Path) -> None:
    fig, (share_ax, error_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for color, (name, group) in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], report.calibration.items()):
        for rows, style, label in ((group.threshold_table, "-", f"{name}, fitted T"), (group.threshold_table_t1, ":", f"{name}, T = 1")):
            x = [r.threshold for r in rows]
            share_ax.plot(x, [r.share_auto_routed for r in rows], style, marker=".", color=color, label=label)
            error_ax.plot(
                x, [r.error_rate if r.error_rate is not None else float("nan") for r in rows], style, marker=".", color=color, label=label
            )
    target = next(iter(report.calibration.values())).target_error_rate
    error_ax.axhline(target, color="grey", linestyle=":", label=f"target {target:.0%}")
    share_ax.set(title="Share auto-routed", xlabel="confidence threshold", ylabel="share", xlim=(0, 1), ylim=(0, 1.02))
    error_ax.set(title="Error rate among auto-routed", xlabel="confidence threshold", ylabel="error rate", xlim=(0, 1), ylim=(0, 1.02))
    share_ax.legend(fontsize=7)
    error_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- Markdown ------------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def ms(value: float | None) -> str:
    """Seconds as whole milliseconds ('–' for none)."""
    return "–" if value is None else f"{value * 1000:.0f} ms"


def markdown(report: EvalReport) -> str:
    """The report for people: the run, then (when any decision was scored) accuracy, temperature,
    thresholds, latency, the decode comparison, policy changes, plots and misses; its problems last."""
    lines = ["# Decision evaluation report", "", *_run_lines(report)]
    if not report.overall or not report.latency or not report.input_tokens or not report.allowed_token_mass:
        lines.append("No decision could be scored.")
        return "\n".join(lines + _problems(report)) + "\n"
    for section in (_accuracy_lines, _temperature_lines, _threshold_lines, _latency_lines, _decode_lines,
                    _closing_lines):
        lines += section(report)
    return "\n".join(lines + _problems(report)) + "\n"


def _run_lines(report: EvalReport) -> list[str]:
    """What was run, on what, by which model and prompt; how to read the probabilities."""
    run = report.run
    assert run is not None, "the CLI records the run before the report is written"
    lines = [
        f"- Command: `{run.command}`",
        f"- Scored by: {run.runner}",
        f"- Data: {', '.join(run.data)}",
    ]
    if run.splits:
        other = sum(n for counts in run.rows_of_other_splits.values() for n in counts.values())
        lines.append(f"- Split: {', '.join(run.splits)} (rows of other splits, not scored: {other})")
    lines += [
        f"- Decisions scored: {report.decisions} in {report.requests} requests; "
        f"bad rows: {len(report.row_errors)}; scoring failures: {len(report.scoring_failures)}",
    ]
    if report.model:
        m = report.model
        lines.append(
            f"- Model: `{m.file}` (sha256 {m.sha256[:12]}…, {m.threads} threads, ctx {m.context_size}), "
            f"prompt `{report.prompt_version}`"
        )
    return lines + [
        "",
        "Probabilities are the readout's softmax over the offered options: conditional on those options and "
        "uncalibrated until a temperature is fitted. A small model's decisions are weak; read accuracy and "
        "calibration together, per question.",
        "",
    ]


def _accuracy_lines(report: EvalReport) -> list[str]:
    o = report.overall
    assert o is not None
    lines = [
        "## Accuracy and calibration (T = 1)",
        "",
        f"Overall: accuracy **{_pct(o.accuracy)}**, Brier {_num(o.brier)}, log-loss {_num(o.log_loss)}, "
        f"ECE {_num(o.ece)} (10 equal-width bins, top-label confidence).",
        "",
        "| policy / family, question | decisions | correct | accuracy |",
        "|---|---:|---:|---:|",
    ]
    for name, a in {**report.accuracy_by_family, **report.accuracy_by_question}.items():
        lines.append(f"| {name} | {a.decisions} | {a.correct} | {_pct(a.accuracy)} |")
    return lines


def _temperature_lines(report: EvalReport) -> list[str]:
    lines = [
        "",
        "## Temperature (fitted by minimising log-loss) and cross-validated calibration",
        "",
        "| question | n | fitted T | log-loss T=1 → fitted | ECE T=1 | ECE out-of-fold | Brier T=1 → out-of-fold | fold T |",
        "|---|---:|---:|---|---:|---:|---|---|",
    ]
    for name, g in report.calibration.items():
        fit, cv = g.temperature_fit, g.cross_validated
        bound = " (at search bound)" if fit.at_bound else ""
        lines.append(
            f"| {name} | {g.decisions} | {fit.temperature:.3f}{bound} | {fit.log_loss_at_1:.3f} → {fit.log_loss:.3f} | "
            f"{g.at_t1.ece:.3f} | {_num(cv.after.ece) if cv else '–'} | "
            f"{g.at_t1.brier:.3f} → {_num(cv.after.brier) if cv else '–'} | "
            f"{', '.join(f'{t:.2f}' for t in cv.fold_temperatures) if cv else '–'} |"
        )
    return lines + [
        "",
        "Out-of-fold: each decision is scored with the temperature fitted on the other folds, so the "
        "after-figures are not measured on the data the temperature was fitted to. Rows that share a "
        "`group` are always in the same fold (group k-fold), so a paraphrase never calibrates its twin.",
        "",
    ]


def _threshold_lines(report: EvalReport) -> list[str]:
    lines = ["## Thresholds (a decision whose confidence is at or above the threshold is auto-routed)", ""]
    for name, g in report.calibration.items():
        lines += _question_threshold_lines(name, g)
    return lines


def _question_threshold_lines(name: str, g: CalibrationGroup) -> list[str]:
    """One question's threshold table at T = 1 and at its fitted T, its recommendation, and the
    policy's routes as shipped and as proposed."""
    lines = [
        f"### {name} — {g.confidence_formula}",
        "",
        f"| threshold | T = 1: auto-routed | share | error rate "
        f"| T = {g.temperature_fit.temperature:.3f}: auto-routed | share | error rate |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r1, r in zip(g.threshold_table_t1, g.threshold_table):
        lines.append(
            f"| {r.threshold:.2f} | {r1.auto_routed} | {_pct(r1.share_auto_routed)} | {_pct(r1.error_rate)} "
            f"| {r.auto_routed} | {_pct(r.share_auto_routed)} | {_pct(r.error_rate)} |"
        )
    lines += ["", f"Recommended `min_confidence` = **{g.recommended_min_confidence:.2f}** ({g.recommendation_note})."]
    for p, label in ((g.policy_now, "Policy as shipped"), (g.policy_proposed, "With fitted T and recommended min_confidence")):
        if p:
            lines.append(
                f"- {label} (T {p.temperature:.3f}, min_confidence {p.thresholds['min_confidence']:.2f}, "
                f"min_margin {p.thresholds['min_margin']:.2f}, min_allowed_token_mass {p.thresholds['min_allowed_token_mass']:.2f}; "
                f"the pipeline's own routing code): auto-routed {p.auto_routed}/{g.decisions} ({_pct(p.share_auto_routed)}), "
                f"error rate among them {_pct(p.error_rate)}"
            )
    lines.append("")
    return lines


def _latency_lines(report: EvalReport) -> list[str]:
    lat, tokens, m = report.latency, report.input_tokens, report.allowed_token_mass
    assert lat is not None and tokens is not None and m is not None
    d, s, b = lat.per_decision_seconds, lat.single_request_seconds, lat.batch_request_seconds
    return [
        "## Latency and prompt size",
        "",
        f"- Per decision ({lat.per_decision_note}): median {ms(d.median)}, p95 {ms(d.p95)}, max {ms(d.max)} over {d.count}",
        f"- Single-decision requests: median {ms(s.median)}, p95 {ms(s.p95)} over {s.count}",
        f"- Shared-state batch requests: median {ms(b.median)}, p95 {ms(b.p95)} over {b.count}",
        f"- Input tokens per decision: median {_num(tokens.median, 0)}, max {_num(tokens.max, 0)}",
        f"- allowed_token_mass: min {_num(m.min)}, median {_num(m.median)}, max {_num(m.max)}; "
        f"{m.below_0_5} decisions below 0.5",
        "",
        "| allowed_token_mass | " + " | ".join(f"{h.lower:.1f}–{h.upper:.1f}" for h in m.histogram) + " |",
        "|---|" + "---:|" * len(m.histogram),
        "| decisions | " + " | ".join(str(h.count) for h in m.histogram) + " |",
        "",
    ]


def _decode_lines(report: EvalReport) -> list[str]:
    """The single-pass readout beside generating the answer, when the run compared them."""
    decode = report.decode_comparison
    if not (decode and decode.readout and decode.generation):
        return []
    r, gen = decode.readout, decode.generation
    return [
        "## Decode comparison: single-pass readout vs generating the answer",
        "",
        f"Same {decode.decisions} decisions, same prompt, one request each; generation is greedy, "
        f"max {decode.max_tokens} tokens, parsed for the option letter.",
        "",
        "| path | accuracy | median | p95 |",
        "|---|---:|---:|---:|",
        f"| readout (one forward pass) | {_pct(r.accuracy)} | {ms(r.latency_seconds.median)} | {ms(r.latency_seconds.p95)} |",
        f"| generation + parse | {_pct(gen.accuracy)} | {ms(gen.latency_seconds.median)} | {ms(gen.latency_seconds.p95)} |",
        "",
        f"Latency ratio generation / readout: **{_num(decode.ratio_median, 2)}×** at the median, "
        f"{_num(decode.ratio_p95, 2)}× at p95. Generated answers naming no offered letter: {gen.unparsed}; "
        f"generation agrees with the readout on {_pct(gen.agrees_with_readout)}.",
        "",
        "Generated answers (first few):",
        "",
        *(f"- `{e.decision}`: {e.generated!r}" for e in gen.examples),
        "",
    ]


def _closing_lines(report: EvalReport) -> list[str]:
    """The policy changes proposed, the plots, and the wrong decisions."""
    lines: list[str] = []
    for change in report.policy_changes:
        lines += [f"## Policy change: {change.policy} ({'written' if change.written else 'not written; run with --write-policy'})", ""]
        lines += ["```diff", change.diff.rstrip() or "(no change)", "```", ""]
    if report.files.get("reliability"):
        lines += ["## Plots", "", "![reliability](reliability.png)", "![latency](latency.png)", "![thresholds](thresholds.png)", ""]
    if report.misses:
        lines += ["## Wrong decisions", "", "| case | question | gold | predicted | p(top) | note |", "|---|---|---|---|---:|---|"]
        for miss in report.misses:
            lines.append(f"| {miss.case} | {miss.question} | {miss.gold} | {miss.predicted} | {miss.p_top:.2f} | {miss.note or ''} |")
        lines.append("")
    return lines


def _problems(report: EvalReport) -> list[str]:
    out = []
    if report.row_warnings:
        out += ["## Row warnings (rows kept and scored)", ""]
        out += [f"- {w}" for w in report.row_warnings]
        out.append("")
    if report.row_errors or report.scoring_failures:
        out += ["## Rows not evaluated", ""]
        out += [f"- {e}" for e in report.row_errors + report.scoring_failures]
        out.append("")
    return out
