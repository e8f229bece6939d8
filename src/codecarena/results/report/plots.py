"""The report's figures: Pareto plots of quality vs representation bitrate and the cost plot, as
PNG bytes (matplotlib's object API on the Agg canvas: no pyplot state, no display)."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from codecarena.results import leaderboard as lb

# Metrics that get a Pareto plot, in this order.
PARETO_METRICS = ("pesq_wb", "stoi", "dwer", "dnsmos_ovrl", "speaker_sim")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
          "#7f7f7f", "#bcbd22")


# ---------------------------------------------------------------------------------------------
# Pareto frontier


def pareto_front(xs: Sequence[float], ys: Sequence[float], lower_is_better: bool = False) -> list[int]:
    """Indices of the points no other point dominates, ordered by x (cost, lower is better).

    Point j dominates point i when x_j <= x_i and y_j is at least as good as y_i, and one of the
    two strictly. Identical points do not dominate each other (both stay on the frontier)."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    sign = -1.0 if lower_is_better else 1.0
    front = []
    for i, (xi, yi) in enumerate(zip(xs, ys)):
        dominated = False
        for j, (xj, yj) in enumerate(zip(xs, ys)):
            if j == i:
                continue
            better_or_equal = sign * yj >= sign * yi
            if xj <= xi and better_or_equal and (xj < xi or sign * yj > sign * yi):
                dominated = True
                break
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (xs[i], -sign * ys[i]))


# ---------------------------------------------------------------------------------------------
# Figures


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def family_styles(families: Sequence[str]) -> dict[str, tuple[str, str]]:
    return {fam: (MARKERS[i % len(MARKERS)], COLORS[i % len(COLORS)])
            for i, fam in enumerate(sorted(set(families)))}


def _log_kbps_axis(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("representation kbps (log scale)")
    ax.grid(True, which="both", alpha=0.25)


def _point_label(entry: dict[str, Any], with_run: bool) -> str:
    return entry["codec"] + (f" @{entry['run_label']}" if with_run else "")


def _label_offsets(points: list[tuple[float, float]], ys: Sequence[float]) -> list[float]:
    """Vertical label offsets (points) so that labels of coinciding points do not overprint."""
    span = (max(ys) - min(ys)) or 1.0
    taken: dict[tuple[float, float], int] = {}
    out = []
    for x, y in points:
        key = (round(math.log10(x) * 8) / 8, round((y - min(ys)) / span * 12) / 12)
        k = taken.get(key, 0)
        taken[key] = k + 1
        out.append(-10.0 * k)
    return out


def _family_legend(ax: Any, families: list[str], styles: dict[str, tuple[str, str]], frontier: bool,
                   title: str | None = None, hollow_note: bool = False) -> None:
    from matplotlib.lines import Line2D

    handles = []
    if frontier:
        handles.append(Line2D([], [], color="#444444", linewidth=1.2, label="Pareto frontier"))
    for fam in sorted(set(families)):
        marker, color = styles[fam]
        handles.append(Line2D([], [], linestyle="none", marker=marker, color=color, markersize=6, label=fam))
    ax.legend(handles=handles, fontsize=7, loc="best", framealpha=0.8, title=title, title_fontsize=7)


def pareto_plot(entries: list[dict[str, Any]], metric: str, styles: dict[str, tuple[str, str]],
                with_run: bool) -> tuple[bytes | None, str]:
    """PNG of metric vs representation kbps with the frontier, or None and why it was skipped."""
    points = []
    for e in entries:
        stats = e["metrics"].get(metric)
        x = e["representation_bps"]
        if stats is None or stats["mean"] is None or x is None or x <= 0:
            continue
        points.append((x / 1000, stats["mean"], e, stats))
    if not points:
        present = any(metric in e["metrics"] for e in entries)
        why = ("no codec configuration has a successful value" if present
               else "the metric was not computed in these runs")
        return None, why
    lower = metric in lb.LOWER_IS_BETTER
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    front = pareto_front(xs, ys, lower_is_better=lower)
    fig = _figure(5.2, 3.7)
    ax = fig.add_subplot(1, 1, 1)
    fx, fy = [xs[i] for i in front], [ys[i] for i in front]
    ax.step(fx, fy, where="post", color="#444444", linewidth=1.2, alpha=0.8, zorder=1,
            label="Pareto frontier")
    offsets = _label_offsets([(x, y) for x, y, _, _ in points], ys)
    for i, (x, y, e, stats) in enumerate(points):
        marker, color = styles[e["family"]]
        ax.scatter([x], [y], marker=marker, s=46, color=color, edgecolors="black" if i in front else "none",
                   linewidths=0.9, zorder=3)
        text = _point_label(e, with_run)
        if stats["n_failed"]:
            text += f" ({stats['n_failed']} failed)"
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, 4 + offsets[i]), fontsize=7, zorder=4)
    _family_legend(ax, [p[2]["family"] for p in points], styles, frontier=True)
    _log_kbps_axis(ax)
    name = lb.metric_label(metric)
    ax.set_ylabel(name + (" (lower is better)" if lower else " (higher is better)"))
    ax.set_title(f"{name} vs bitrate", fontsize=10)
    lo, hi = min(xs), max(xs)
    ax.set_xlim(lo / 1.6, hi * 2.2)  # room for the labels
    # beyond the last frontier point the best reachable value stays the same: carry the step on
    ax.plot([fx[-1], hi * 2.2], [fy[-1], fy[-1]], color="#444444", linewidth=1.2, alpha=0.8, zorder=1)
    return _png(fig), ""


def _cost_value(e: dict[str, Any], key: str) -> float:
    if key == "peak":
        v = e["peak_rss_bytes_max"]
        return 0.0 if v is None else v / 2**20
    v = e["decode"][key]
    return 0.0 if v is None else float(v)


def cost_plot(entries: list[dict[str, Any]], styles: dict[str, tuple[str, str]], with_run: bool) -> bytes | None:
    """Cold and warm RTF (encode hollow, decode filled) and peak RSS vs representation kbps."""
    usable = [e for e in entries if e["representation_bps"]]
    if not usable:
        return None
    fig = _figure(13.5, 3.6)
    panels = [("cold RTF (process start to result)", "cold_rtf_median", True),
              ("warm RTF (codec call only)", "warm_rtf_median", True),
              ("peak RSS MiB (max of encode, decode)", "peak", False)]
    for k, (title, key, log_y) in enumerate(panels):
        ax = fig.add_subplot(1, 3, k + 1)
        heights = [_cost_value(e, key) for e in usable]
        if log_y:
            heights = [math.log10(h) if h > 0 else 0.0 for h in heights]
        offsets = _label_offsets([(e["representation_bps"] / 1000, h) for e, h in zip(usable, heights)], heights)
        for n, e in enumerate(usable):
            x = e["representation_bps"] / 1000
            marker, color = styles[e["family"]]
            if key == "peak":
                if e["peak_rss_bytes_max"] is None:
                    continue
                vals = [("peak", e["peak_rss_bytes_max"] / 2**20)]
            else:
                vals = [(s, e[s][key]) for s in ("encode", "decode")]
            for stage, v in vals:
                if v is None or v <= 0:
                    continue
                filled = stage != "encode"
                ax.scatter([x], [v], marker=marker, s=40, color=color if filled else "none",
                           edgecolors=color, linewidths=1.2, zorder=3)
                if stage != "encode":
                    ax.annotate(_point_label(e, with_run), (x, v), textcoords="offset points",
                                xytext=(5, 3 + offsets[n]), fontsize=6.5)
        _log_kbps_axis(ax)
        if log_y:
            from matplotlib.ticker import FuncFormatter

            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_title(title, fontsize=9)
        if k == 0:
            _family_legend(ax, [e["family"] for e in usable], styles, frontier=False,
                           title="hollow: encode, filled: decode")
    fig.tight_layout()
    return _png(fig)
