"""The report's conditions section: quality against each input condition (SNR, RT60, level, generation),
one plot per kind of condition with one colour per codec configuration, solid against the clean reference
(end to end) and dashed against the conditioned input (the codec alone), 95% intervals where they rest
on enough utterances; the table of every point and the robustness figures (results/condition_curves.py;
docs/conditions.md); and the leaderboard of the configurations with a condition, which the clean
leaderboards, plots and ledger tables leave out. The same section in Markdown for report.md."""

from __future__ import annotations

from typing import Any

from codecarena.metrics import outputs
from codecarena.results import condition_curves as cc
from codecarena.results import leaderboard as lb
from codecarena.results.bootstrap import MIN_UNITS
from codecarena.results.formatting import fmt_num
from codecarena.results.report.context import ReportContext
from codecarena.results.report.markup import data_uri, esc
from codecarena.results.report.plots import _figure, _png
from codecarena.results.summary import mean_ci

LABELS = {"vs_clean": "vs clean reference (end to end)", "vs_input": "vs conditioned input (the codec alone)"}
AXES = {"noise": "SNR over the active speech level, dB", "rt60": "RT60, s", "level": "active speech level, dBov",
        "gen": "generation"}


def _metric(conditions: dict[str, Any], languages: list[str]) -> str | None:
    present = list(dict.fromkeys(name for c in conditions["curves"] for p in c["points"] for name in p["vs_clean"]))
    return next((m for m in outputs.headline(languages) if m in present), present[0] if present else None)


def curve_plot(curves: list[dict[str, Any]], metric: str, styles: dict[str, tuple[str, str]]) -> tuple[bytes, int]:
    """PNG of `metric` against the swept value of one kind of condition; and how many bars it drew."""
    fig = _figure(5.6, 3.9)
    ax = fig.add_subplot(1, 1, 1)
    bars = 0
    for curve in curves:
        family = curve["codec"].partition(":")[0]
        marker, color = styles.get(family, ("o", "#444444"))
        for reference, style in (("vs_clean", "-"), ("vs_input", "--")):
            points = [(p["value"], p[reference][metric]) for p in curve["points"] if metric in p[reference]]
            ax.plot([x for x, _ in points], [s["mean"] for _, s in points], marker=marker, color=color, linewidth=1.1,
                    linestyle=style, markersize=5, label=f"{curve['codec']} {reference.replace('_', ' ')}")
            for x, stats in points:
                if stats["ci95"] is not None:
                    ax.errorbar([x], [stats["mean"]], yerr=[[stats["mean"] - stats["ci95"][0]],
                                                            [stats["ci95"][1] - stats["mean"]]],
                                fmt="none", ecolor=color, elinewidth=0.9, capsize=2.5, alpha=0.8)
                    bars += 1
        clean = (curve["clean"] or {}).get("vs_clean", {}).get(metric)
        if clean is not None:
            ax.axhline(clean["mean"], color=color, linewidth=0.7, linestyle=":")
    model = curves[0]["model"]
    if model == "noise":
        ax.invert_xaxis()  # from the mildest (high SNR) to the harshest
    ax.set_xlabel(AXES[model])
    label = lb.metric_label(metric)
    ax.set_ylabel(label + (" (lower is better)" if metric in lb.LOWER_IS_BETTER else " (higher is better)"))
    ax.set_title(f"{label} vs {curves[0]['curve']}; solid: vs clean, dashed: vs input, dotted: clean", fontsize=8)
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=6, loc="best", framealpha=0.8)
    return _png(fig), bars


def _stats(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "-"
    interval = (f" [{fmt_num(stats['ci95'][0])}, {fmt_num(stats['ci95'][1])}]" if stats["ci95"] is not None
                else "")
    return f"{fmt_num(stats['mean'])}{interval} n={stats['n']}"


def _rows(conditions: dict[str, Any], metric: str) -> list[list[str]]:
    """codec, condition, realised, clipped, vs clean, vs input: one row per point, the clean one first."""
    out = []
    for c in conditions["curves"]:
        if c["clean"] is not None:
            out.append([c["codec"], "clean", "-", "-", _stats(c["clean"]["vs_clean"].get(metric)), "(the same)"])
        for p in c["points"]:
            out.append([c["codec"], p["condition"], fmt_num(p["realised"]), str(p["clipped_samples"]),
                        _stats(p["vs_clean"].get(metric)), _stats(p["vs_input"].get(metric))])
    for p in conditions["points"]:
        extra = (" (first " + ", ".join(f"{bps / 1000:.2f}" for bps in p.get("hops_bps", [])) + " kbps, then "
                 f"{fmt_num((p.get('representation_bps') or 0.0) / 1000)} kbps)" if p.get("hops_bps") else "")
        out.append([p["codec"], p["condition"] + extra, fmt_num(p["realised"]), str(p["clipped_samples"]),
                    _stats(p["vs_clean"].get(metric)), _stats(p["vs_input"].get(metric))])
    return out


def _robustness(conditions: dict[str, Any], metric: str) -> list[str]:
    lines = []
    for c in conditions["curves"]:
        for reference in cc.REFERENCES:
            found = (c["robustness"] or {}).get(reference, {}).get(metric)
            if found is not None:
                lines.append(f"{c['codec']} {c['curve']}, {LABELS[reference]}: {cc.crossing_text(found, c['model'])}")
    return lines


HEAD = ("codec", "condition", "realised", "clipped samples", "vs clean reference (end to end)",
        "vs conditioned input (the codec alone)")


def _runs(ctx: ReportContext) -> list[tuple[lb.RunInfo, dict[str, Any], str]]:
    out = []
    for run in ctx.board.runs:
        if not any(r.condition for r in run.run.rows):
            continue
        conditions = cc.summary(run.run.rows, mean_ci)
        metric = _metric(conditions, sorted({r.language for r in run.run.rows}))
        if metric is not None:
            out.append((run, conditions, metric))
    return out


def conditions_html(ctx: ReportContext, leaderboards: list[str]) -> str:
    """The section, or "" when no run of the report has conditioned rows; `leaderboards`: the conditioned
    configurations' tables, one per group that has them."""
    parts = []
    for run, conditions, metric in _runs(ctx):
        kinds: dict[str, list[dict[str, Any]]] = {}
        for c in conditions["curves"]:
            kinds.setdefault(c["curve"], []).append(c)
        label = lb.metric_label(metric)
        figures = []
        for kind, members in kinds.items():
            png, bars = curve_plot(members, metric, ctx.styles)
            note = (f" Bars: 95% bootstrap interval of the mean over utterances ({bars})." if bars else
                    f" No bars: fewer than {MIN_UNITS} utterances per point, too few for an interval.")
            figures.append(f'<figure data-metric="{esc(metric)}" data-condition="{esc(kind)}" data-intervals="{bars}">'
                           f'<img class="plot" alt="{esc(label)} vs {esc(kind)}" src="{data_uri(png, "image/png")}">'
                           f"<figcaption>{esc(label)} (mean over utterances) against {esc(kind)}: solid lines "
                           "against the clean reference (end to end), dashed against the conditioned input (the "
                           f"codec alone), dotted the clean configuration.{esc(note)}</figcaption></figure>")
        cells = "".join("<tr>" + "".join(f'<td class="{"l" if i < 2 else "wrap"}">{esc(v)}</td>'
                                          for i, v in enumerate(row)) + "</tr>" for row in _rows(conditions, metric))
        table = ('<div class="scroll"><table class="lb condition"><thead><tr>'
                 + "".join(f'<th class="l">{esc(h)}</th>' for h in HEAD) + f"</tr></thead><tbody>{cells}</tbody>"
                 "</table></div>")
        robust = "".join(f"<li>{esc(line)}</li>" for line in _robustness(conditions, metric))
        parts.append(f'<h3>run {esc(run.label)} ({esc(label)})</h3><div class="plots">{"".join(figures)}</div>'
                     f"{table}" + (f'<ul class="note">{robust}</ul>' if robust else ""))
    if not parts and not leaderboards:
        return ""
    return ('<h2 id="conditions">Quality against input conditions</h2><p class="note">Each configuration\'s '
            "encoder got its input through a seeded, traced condition (noise at an SNR over the P.56 active level, "
            "an image-source or measured room response, a level, a tandem codec, generations of re-encoding; "
            "docs/conditions.md). Every metric is shown against two references, never mixed: the clean reference "
            "(end to end) and the conditioned input (what the codec did with what it was given); a pcm:16 row is "
            f"the condition's own effect. {esc(cc.METHOD)}.</p>" + "".join(parts)
            + ('<h3>Configurations with an input condition</h3><p class="note">Ranked apart from the clean ones: '
               "their quality (against the clean reference) is of another input.</p>" + "".join(leaderboards)
               if leaderboards else ""))


def conditions_markdown(ctx: ReportContext) -> list[str]:
    """The section in report.md: per run, the table of every point and the robustness figures."""
    runs = _runs(ctx)
    if not runs:
        return []
    lines = ["## Quality against input conditions", "", cc.METHOD + ".", ""]
    for run, conditions, metric in runs:
        lines += [f"Run {run.label} ({lb.metric_label(metric)}):", "", "| " + " | ".join(HEAD) + " |",
                  "|---|---|---:|---:|---|---|"]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in _rows(conditions, metric)]
        lines += [""] + [f"- {line}" for line in _robustness(conditions, metric)] + [""]
    return lines
