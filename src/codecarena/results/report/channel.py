"""The report's channel section: quality against the realised rate of each kind of channel, one line
per codec configuration with its intervals where they rest on enough utterances, the robustness
table (results/robustness.py; docs/channel.md), and the leaderboard of the configurations through a
channel, which the clean leaderboards, plots and ledger leave out. The same section in Markdown for
report.md. Plots and tables are drawn for the run's headline metric and for PLCMOS, the packet loss
concealment challenge's own metric, when the run has it."""

from __future__ import annotations

from typing import Any

from codecarena.metrics import outputs
from codecarena.results import leaderboard as lb
from codecarena.results import robustness
from codecarena.results.bootstrap import MIN_UNITS
from codecarena.results.formatting import fmt_num
from codecarena.results.report.context import ReportContext
from codecarena.results.report.markup import data_uri, esc, num_td
from codecarena.results.report.plots import _figure, _png
from codecarena.results.schema import Row
from codecarena.results.summary import mean_ci


#: Drawn beside the headline metric whenever the curves have it: the metric made to judge concealment.
CONCEALMENT_METRIC = "plcmos"


def _metrics(curves: list[dict[str, Any]], languages: list[str]) -> list[str]:
    """The metrics the plots draw: the first of the headline metrics of the run's languages the curves
    have (else any), then PLCMOS when they have it."""
    present = list(dict.fromkeys(name for c in curves for p in c["points"] for name in p["metrics"]))
    first = next((m for m in outputs.headline(languages) if m in present), present[0] if present else None)
    if first is None:
        return []
    return [first] + ([CONCEALMENT_METRIC] if CONCEALMENT_METRIC in present and first != CONCEALMENT_METRIC else [])


def _interval(rows: list[Row], configuration: str, metric: str) -> list[float] | None:
    """The 95% interval of a point's mean (its ok values in utterance order, as summary.json's), or
    None below bootstrap.MIN_UNITS values."""
    values = [r.metrics[metric]["value"] for r in sorted(rows, key=lambda r: r.utterance)
              if r.codec == configuration and r.status == "ok" and metric in r.metrics
              and r.metrics[metric]["status"] == "ok"]
    return mean_ci(values)


def curve_plot(curves: list[dict[str, Any]], metric: str, styles: dict[str, tuple[str, str]],
               rows: list[Row]) -> tuple[bytes, int, int]:
    """PNG of `metric` against the realised rate, one line per codec configuration of one kind of channel,
    each mean with its 95% interval where it rests on enough values; and the bars drawn and the points
    without one."""
    fig = _figure(5.6, 3.9)
    ax = fig.add_subplot(1, 1, 1)
    kind = curves[0]["curve"]
    ber = kind.startswith("ber")
    at = robustness.realised_key(kind)
    scale = 1 if ber else 100
    bars = without = 0
    for curve in curves:
        points = [(p[at] * scale, p["metrics"][metric], p["configuration"]) for p in curve["points"]
                  if metric in p["metrics"]]
        family = curve["codec"].partition(":")[0]
        marker, color = styles.get(family, ("o", "#444444"))
        ax.plot([x for x, _, _ in points], [y for _, y, _ in points], marker=marker, color=color, linewidth=1.1,
                markersize=5, label=curve["codec"])
        for x, y, configuration in points:
            ci = _interval(rows, configuration, metric)
            if ci is None:
                without += 1
                continue
            ax.errorbar([x], [y], yerr=[[y - ci[0]], [ci[1] - y]], fmt="none", ecolor=color, elinewidth=0.9,
                        capsize=2.5, alpha=0.8)
            bars += 1
        crossing = curve["robustness"].get(metric, {})
        if crossing.get("rate") is not None:
            ax.axvline(crossing["rate"] * scale, color=color, linewidth=0.7, linestyle=":")
    if ber:
        ax.set_xscale("symlog", linthresh=1e-5)
    ax.set_xlabel("realised bit error rate" if ber else "realised loss, % of packets (or frames)")
    label = lb.metric_label(metric)
    ax.set_ylabel(label + (" (lower is better)" if metric in lb.LOWER_IS_BETTER else " (higher is better)"))
    ax.set_title(f"{label} vs {kind}; dotted: fallen by {robustness.DROP} (interpolated)", fontsize=9)
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=7, loc="best", framealpha=0.8)
    return _png(fig), bars, without


def _points_text(curve: dict[str, Any], metric: str) -> str:
    return "; ".join(f"{robustness.realised_text(p, curve['curve'])}: {p['metrics'][metric]:.3f}"
                     + (f" (n={p['n'][metric]})" if metric in p.get("n", {}) else "")
                     for p in curve["points"] if metric in p["metrics"])


def _table(curves: list[dict[str, Any]], metric: str) -> str:
    rows = []
    for c in curves:
        clean = c["robustness"].get(metric, {}).get("clean")
        rows.append(f'<tr><td class="l">{esc(c["codec"])}</td><td class="l">{esc(c["curve"])}</td>'
                    f'{num_td(clean, "n/a" if clean is None else f"{clean:.3f}")}'
                    f'<td class="wrap">{esc(robustness.crossing_text(c, metric))}</td>'
                    f'<td class="wrap">{esc(_points_text(c, metric))}</td></tr>')
    return ('<div class="scroll"><table class="lb channel"><thead><tr><th class="l">codec</th><th class="l">channel'
            f'</th><th>clean</th><th class="l">where it has fallen by {robustness.DROP}</th><th class="l">mean at '
            f'each rate (realised rate; n)</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


def _runs(ctx: ReportContext) -> list[tuple[lb.RunInfo, list[dict[str, Any]], list[str]]]:
    """The runs with channel rows: their curves and the metrics drawn."""
    out = []
    for run in ctx.board.runs:
        curves = robustness.curves(run.run.rows)
        metrics = _metrics(curves, sorted({r.language for r in run.run.rows}))
        if metrics:
            out.append((run, curves, metrics))
    return out


def _figures(ctx: ReportContext, run: lb.RunInfo, curves: list[dict[str, Any]], metric: str) -> str:
    """One figure of `metric` per kind of channel of the run."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for c in curves:
        kinds.setdefault(c["curve"], []).append(c)
    label = lb.metric_label(metric)
    figures = []
    for kind, members in kinds.items():
        png, bars, without = curve_plot(members, metric, ctx.styles, run.run.rows)
        note = f" Bars: 95% bootstrap interval of the mean over utterances, on {bars} points." if bars else ""
        if without:
            note += (f" No bar on {without} point{'s' if without != 1 else ''}: fewer than {MIN_UNITS} "
                     "utterances, too few for an interval.")
        figures.append(f'<figure data-metric="{esc(metric)}" data-channel="{esc(kind)}" data-intervals="{bars}">'
                       f'<img class="plot" alt="{esc(label)} vs {esc(kind)}" src="{data_uri(png, "image/png")}">'
                       f"<figcaption>{esc(label)} (mean over utterances) against the realised rate of {esc(kind)}, "
                       f"one line per codec configuration from its clean channel (rate 0).{esc(note)}"
                       "</figcaption></figure>")
    return f'<div class="plots">{"".join(figures)}</div>'


def channel_html(ctx: ReportContext, leaderboards: list[str]) -> str:
    """The section, or "" when no run of the report has rows that crossed a channel; `leaderboards`:
    the channel configurations' tables, one per group that has them."""
    parts = []
    for run, curves, metrics in _runs(ctx):
        parts.append(f"<h3>run {esc(run.label)}</h3>" + "".join(
            (f"<h4>{esc(lb.metric_label(metric))}</h4>" if len(metrics) > 1 else "")
            + _figures(ctx, run, curves, metric) + _table(curves, metric) for metric in metrics))
    if not parts and not leaderboards:
        return ""
    return ('<h2 id="channel">Quality against channel impairment</h2><p class="note">Packets (or frames) lost or '
            "bits flipped by seeded channel models, each decoder concealing what it can (see each row's "
            "codec_facts.decode.receiver: the codec's own concealment or the arena's named policy; docs/channel.md). "
            f"{esc(robustness.METHOD)}. Every figure is an interpolation between the two rates measured around it.</p>"
            + "".join(parts) + ('<h3>Configurations through a channel</h3><p class="note">Their payloads are their '
                                "clean configuration's, so their rates, costs and ledger are its (in the leaderboards "
                                "and ledger above); here is what the channel left of their quality.</p>"
                                + "".join(leaderboards) if leaderboards else ""))


def channel_markdown(ctx: ReportContext) -> list[str]:
    """The section in report.md: per run, the robustness table with each point's realised rate."""
    runs = _runs(ctx)
    if not runs:
        return []
    lines = ["## Quality against channel impairment", "", robustness.METHOD + ".", ""]
    for run, curves, metrics in runs:
        for metric in metrics:
            lines += [f"Run {run.label} ({lb.metric_label(metric)}):", "",
                      f"| codec | channel | clean | where it has fallen by {robustness.DROP} | mean at each rate "
                      "(realised rate; n) |", "|---|---|---:|---|---|"]
            for c in curves:
                clean = c["robustness"].get(metric, {}).get("clean")
                cells = [c["codec"], c["curve"], fmt_num(clean), robustness.crossing_text(c, metric),
                         _points_text(c, metric)]
                lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
            lines.append("")
    return lines
