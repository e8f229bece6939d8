"""The report's channel section: quality against the rate of each kind of channel, one line per codec
configuration, and the robustness table (results/robustness.py; docs/channel.md)."""

from __future__ import annotations

from typing import Any

from codecarena.results import leaderboard as lb
from codecarena.results import robustness
from codecarena.results.report.context import ReportContext
from codecarena.results.report.markup import data_uri, esc, num_td
from codecarena.metrics import outputs
from codecarena.results.report.plots import _figure, _png


def _metric(curves: list[dict[str, Any]], languages: list[str]) -> str | None:
    """The metric the plots draw: the first of the headline metrics of the run's languages the curves
    have, else any."""
    present = list(dict.fromkeys(name for c in curves for p in c["points"] for name in p["metrics"]))
    return next((m for m in outputs.headline(languages) if m in present), present[0] if present else None)


def curve_plot(curves: list[dict[str, Any]], metric: str, styles: dict[str, tuple[str, str]]) -> bytes:
    """PNG of `metric` against the channel's rate, one line per codec configuration of one kind of channel."""
    fig = _figure(5.6, 3.9)
    ax = fig.add_subplot(1, 1, 1)
    ber = curves[0]["curve"].startswith("ber")
    for curve in curves:
        points = [(p["rate"] * (1 if ber else 100), p["metrics"][metric]) for p in curve["points"]
                  if metric in p["metrics"]]
        family = curve["codec"].partition(":")[0]
        marker, color = styles.get(family, ("o", "#444444"))
        ax.plot([x for x, _ in points], [y for _, y in points], marker=marker, color=color, linewidth=1.1,
                markersize=5, label=curve["codec"])
        crossing = curve["robustness"].get(metric, {})
        if crossing.get("rate") is not None:
            ax.axvline(crossing["rate"] * (1 if ber else 100), color=color, linewidth=0.7, linestyle=":")
    if ber:
        ax.set_xscale("symlog", linthresh=1e-5)
    ax.set_xlabel("bit error rate" if ber else "packet loss rate, % of packets (or frames)")
    label = lb.metric_label(metric)
    ax.set_ylabel(label + (" (lower is better)" if metric in lb.LOWER_IS_BETTER else " (higher is better)"))
    ax.set_title(f"{label} vs {curves[0]['curve']}; dotted: where it has fallen by {robustness.DROP}", fontsize=9)
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=7, loc="best", framealpha=0.8)
    return _png(fig)


def _rate_text(rate: float | None, beyond: float | None, ber: bool) -> str:
    scale, unit = (1, "") if ber else (100, "%")
    if rate is not None:
        return f"{rate * scale:.3g}{unit}"
    return f"> {beyond * scale:g}{unit}" if beyond is not None else "n/a"


def _table(curves: list[dict[str, Any]], metric: str) -> str:
    rows = []
    for c in curves:
        ber = c["curve"].startswith("ber")
        crossing = c["robustness"].get(metric, {})
        clean = crossing.get("clean")
        points = "; ".join(f"{_rate_text(p['rate'], None, ber)}: {p['metrics'][metric]:.3f}" for p in c["points"]
                           if metric in p["metrics"])
        rows.append(f'<tr><td class="l">{esc(c["codec"])}</td><td class="l">{esc(c["curve"])}</td>'
                    f'{num_td(clean, "n/a" if clean is None else f"{clean:.3f}")}'
                    f'{num_td(crossing.get("rate"), _rate_text(crossing.get("rate"), crossing.get("beyond"), ber))}'
                    f'<td class="l">{esc(points)}</td></tr>')
    return ('<table class="lb"><thead><tr><th>codec</th><th>channel</th><th>clean</th>'
            f'<th>rate at a drop of {robustness.DROP}</th><th>mean at each rate</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def channel_html(ctx: ReportContext) -> str:
    """The section, or "" when no run of the report has rows that crossed a channel."""
    parts = []
    for run in ctx.board.runs:
        curves = robustness.curves(run.run.rows)
        metric = _metric(curves, sorted({r.language for r in run.run.rows}))
        if metric is None:
            continue
        kinds: dict[str, list[dict[str, Any]]] = {}
        for c in curves:
            kinds.setdefault(c["curve"], []).append(c)
        label = lb.metric_label(metric)
        figures = "".join(
            f'<figure data-metric="{esc(metric)}" data-channel="{esc(kind)}"><img class="plot" '
            f'alt="{esc(label)} vs {esc(kind)}" src="{data_uri(curve_plot(members, metric, ctx.styles), "image/png")}">'
            f"<figcaption>{esc(label)} (mean over utterances) against the rate of {esc(kind)}, one line per codec "
            f"configuration from its clean channel (rate 0).</figcaption></figure>" for kind, members in kinds.items())
        parts.append(f'<h3>run {esc(run.label)}</h3><div class="plots">{figures}</div>{_table(curves, metric)}')
    if not parts:
        return ""
    return ('<h2 id="channel">Quality against channel impairment</h2><p class="note">Packets (or frames) lost or '
            "bits flipped by seeded channel models, each decoder concealing what it can (see each row's "
            "codec_facts.decode.receiver: the codec's own concealment or the arena's named policy; docs/channel.md). "
            f"{esc(robustness.METHOD)}.</p>" + "".join(parts))
