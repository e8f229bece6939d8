"""The report's figures: Pareto plots of quality vs representation bitrate and the cost plot, as
PNG bytes (matplotlib's object API on the Agg canvas: no pyplot state, no display)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from typing import Any

from codecarena.metrics import outputs
from codecarena.results import leaderboard as lb
from codecarena.results.formatting import shown_interval


def pareto_metrics(entries: list[dict[str, Any]]) -> tuple[str, ...]:
    """The metrics that get a Pareto plot, in order: the headline of the entries' languages (the content
    score in the language's own unit: dWER, or dCER for Mandarin)."""
    return outputs.headline(sorted({language for e in entries for language in e["languages"]}))

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
    """Marker and colour of each family: fixed by the family's place in the codec catalogue, so a
    family looks the same in every report; a family outside it gets a style from its name's hash."""
    from codecarena.registry.catalog import FAMILIES

    known = list(FAMILIES)
    styles = {}
    for fam in set(families):
        i = known.index(fam) if fam in known else int(hashlib.sha256(fam.encode()).hexdigest(), 16) % 97
        styles[fam] = (MARKERS[i % len(MARKERS)], COLORS[i % len(COLORS)])
    return styles


def _one_two_five(axis: Any) -> None:
    """Log-axis ticks at 1, 2 and 5 times each power of ten, labelled plainly (0.5, 1, 2, 5, 10, 20)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def _one_two_five_bounds(low: float, high: float) -> tuple[float, float]:
    """Log-axis limits that hold [low, high] and at least two 1-2-5 ticks, so every plot has y values."""
    ticks = [m * 10.0**p for p in range(-6, 7) for m in (1.0, 2.0, 5.0)]
    below = max((t for t in ticks if t <= low), default=ticks[0])
    above = min((t for t in ticks if t >= high and t > below), default=ticks[-1])
    return below / 1.15, above * 1.15


def _log_kbps_axis(ax: Any) -> None:
    ax.set_xscale("log")
    _one_two_five(ax.xaxis)
    ax.set_xlabel("representation kbps (log scale)")
    ax.grid(True, which="major", alpha=0.25)


def _point_label(entry: dict[str, Any], with_run: bool) -> str:
    return entry["codec"] + (f" @{entry['run_label']}" if with_run else "")


def _place_labels(ax: Any, points: list[tuple[float, float]], texts: list[str], fontsize: float) -> None:
    """Annotate each point, right of it, or left of it where the label would leave the axes, moving a
    label up or down until its box overlaps no label placed before and stays inside the axes (boxes
    estimated from the text length in display pixels, after the axes' limits are final)."""
    fig = ax.figure
    to_px = ax.transData.transform
    frame = ax.bbox
    height = fontsize * fig.dpi / 72 * 1.25
    placed: list[tuple[float, float, float, float]] = []
    order = sorted(range(len(points)), key=lambda i: (points[i][1], points[i][0]))
    offsets: dict[int, tuple[float, float]] = {}
    for i in order:
        px, py = to_px(points[i])
        width = len(texts[i]) * fontsize * fig.dpi / 72 * 0.55
        left = px + 5 + width > frame.x1  # a label that would run past the right edge goes left of its point
        x0 = px - 5 - width if left else px + 5
        chosen = None
        for step in range(40):
            shift = (step + 1) // 2 * height * (1 if step % 2 else -1)
            box = (x0, py + 3 + shift, x0 + width, py + 3 + shift + height)
            inside = frame.y0 <= box[1] and box[3] <= frame.y1
            if inside and not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                chosen = (box, shift)
                break
        box, shift = chosen or ((x0, py + 3, x0 + width, py + 3 + height), 0.0)
        placed.append(box)
        offsets[i] = ((-5 if left else 5), 3 + shift * 72 / fig.dpi)
    for i, (x, y) in enumerate(points):
        dx, dy = offsets[i]
        ax.annotate(texts[i], (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=fontsize, zorder=4,
                    ha="right" if dx < 0 else "left")


def _family_legend(ax: Any, families: list[str], styles: dict[str, tuple[str, str]], frontier: bool,
                   title: str | None = None, synthetic: bool = False) -> None:
    from matplotlib.lines import Line2D

    handles = []
    if frontier:
        handles.append(Line2D([], [], color="#444444", linewidth=1.2, label="Pareto frontier"))
    for fam in sorted(set(families)):
        marker, color = styles[fam]
        handles.append(Line2D([], [], linestyle="none", marker=marker, color=color, markersize=6, label=fam))
    if synthetic:
        handles.append(Line2D([], [], linestyle="none", marker="o", markerfacecolor="none", color="#444444",
                              markersize=6, label="hollow: synthetic weights"))
    ax.legend(handles=handles, fontsize=7, loc="best", framealpha=0.8, title=title, title_fontsize=7)


# A control (PCM) whose bitrate is this many times the highest codec's is drawn at the axis's edge, so
# the codecs' range fills the plot.
CONTROL_FAMILIES = ("pcm",)
OUT_OF_RANGE = 4.0


def _in_range(entries: list[dict[str, Any]]) -> tuple[float, float, bool]:
    """The kbps range a plot of these entries shows, and whether a control lies beyond it (marked at
    the right edge)."""
    xs = [e["representation_bps"] / 1000 for e in entries]
    codecs = [x for x, e in zip(xs, entries) if e["family"] not in CONTROL_FAMILIES]
    top = max(codecs) if codecs else max(xs)
    beyond = any(x > top * OUT_OF_RANGE for x in xs)
    return min(xs) / 1.6, (top * 2.2 if beyond or not codecs else max(xs) * 2.2), beyond


def pareto_plot(entries: list[dict[str, Any]], metric: str, styles: dict[str, tuple[str, str]],
                with_run: bool) -> tuple[bytes | None, str, int, int]:
    """PNG of metric vs representation kbps with the frontier, the number of 95% interval bars drawn
    on it and the number of points without one (fewer units than the bound), or None and why it was
    skipped."""
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
        return None, why, 0, 0
    lower = metric in lb.LOWER_IS_BETTER
    left, right, beyond = _in_range([p[2] for p in points])
    edge = right / 1.25  # where a control beyond the range is drawn
    shown = [(min(x, edge), y, e, stats) for x, y, e, stats in points]
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    front = pareto_front(xs, ys, lower_is_better=lower)
    fig = _figure(5.6, 3.9)
    ax = fig.add_subplot(1, 1, 1)
    fx, fy = [shown[i][0] for i in front], [ys[i] for i in front]
    ax.step(fx, fy, where="post", color="#444444", linewidth=1.2, alpha=0.8, zorder=1,
            label="Pareto frontier")
    # One thin line through each family's configurations (per run, variant and weights), in bitrate order.
    lines: dict[tuple[Any, ...], list[tuple[float, float]]] = {}
    for x, y, e, _ in shown:
        lines.setdefault((e["family"], e["run_index"], e["variant"], e["weights"]), []).append((x, y))
    for (family, *_), pts in lines.items():
        if len(pts) > 1:
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=styles[family][1], linewidth=0.8, alpha=0.5,
                    zorder=2)
    texts = []
    bars = 0
    for i, (x, y, e, stats) in enumerate(shown):
        marker, color = styles[e["family"]]
        synthetic = e["weights"] == "synthetic"
        ci = shown_interval(stats)
        if ci:
            ax.errorbar([x], [y], yerr=[[y - ci[0]], [ci[1] - y]], fmt="none", ecolor=color, elinewidth=0.9,
                        capsize=2.5, alpha=0.8, zorder=2)
            bars += 1
        ax.scatter([x], [y], marker=">" if x < points[i][0] else marker, s=46, color="none" if synthetic else color,
                   edgecolors="black" if i in front and not synthetic else color, linewidths=0.9 if not synthetic else 1.3,
                   zorder=3)
        text = _point_label(e, with_run)
        if synthetic:
            text += " (synthetic)"
        if x < points[i][0]:
            text += f" at {points[i][0]:g} kbps, off scale"
        if stats["n_failed"]:
            text += f" ({stats['n_failed']} failed)"
        texts.append(text)
    _family_legend(ax, [p[2]["family"] for p in points], styles, frontier=True,
                   synthetic=any(p[2]["weights"] == "synthetic" for p in points))
    _log_kbps_axis(ax)
    name = lb.metric_label(metric)
    ax.set_ylabel(name + (" (lower is better)" if lower else " (higher is better)"))
    ax.set_title(f"{name} vs bitrate" + (" (bars: 95% interval of the mean)" if bars else ""), fontsize=9)
    ax.set_xlim(left, right)  # room for the labels
    if beyond:
        ax.axvline(edge * 0.88, color="#999999", linewidth=0.8, linestyle=":", zorder=0)
    # beyond the last frontier point the best reachable value stays the same: carry the step on
    ax.plot([fx[-1], right], [fy[-1], fy[-1]], color="#444444", linewidth=1.2, alpha=0.8, zorder=1)
    _place_labels(ax, [(x, y) for x, y, _, _ in shown], texts, 7)
    return _png(fig), "", bars, len(shown) - bars


def cost_plot(entries: list[dict[str, Any]], styles: dict[str, tuple[str, str]], with_run: bool) -> bytes | None:
    """Cold and warm RTF (encode hollow, decode filled) and peak RSS vs representation kbps; points of
    synthetic weights have a dashed edge and "(synthetic)" in their label."""
    usable = [e for e in entries if e["representation_bps"]]
    if not usable:
        return None
    left, right, _ = _in_range(usable)
    edge = right / 1.25
    fig = _figure(13.5, 3.6)
    panels = [("cold RTF (process start to result)", "cold_rtf_median", True),
              ("warm RTF (codec call only)", "warm_rtf_median", True),
              ("peak RSS MiB (max of encode, decode)", "peak", False)]
    for k, (title, key, log_y) in enumerate(panels):
        ax = fig.add_subplot(1, 3, k + 1)
        labelled: list[tuple[float, float]] = []
        texts: list[str] = []
        for e in usable:
            x = min(e["representation_bps"] / 1000, edge)
            marker, color = styles[e["family"]]
            if x < e["representation_bps"] / 1000:
                marker = ">"  # a control beyond the codecs' range, at the edge
            if key == "peak":
                if e["peak_rss_bytes_max"] is None:
                    continue
                vals = [("peak", e["peak_rss_bytes_max"] / 2**20)]
            else:
                vals = [(s, e[s][key]) for s in ("encode", "decode")]
            # Hollow already means "encode" here, so synthetic weights get a dashed edge and a label instead.
            synthetic = e["weights"] == "synthetic"
            for stage, v in vals:
                if v is None or v <= 0:
                    continue
                filled = stage != "encode"
                ax.scatter([x], [v], marker=marker, s=40, color=color if filled else "none",
                           edgecolors=color, linewidths=1.2, linestyles="--" if synthetic else "-", zorder=3)
                if stage != "encode":
                    labelled.append((x, v))
                    off_scale = x < e["representation_bps"] / 1000
                    texts.append(_point_label(e, with_run) + (" (synthetic)" if synthetic else "")
                                 + (f" at {e['representation_bps'] / 1000:g} kbps" if off_scale else ""))
        _log_kbps_axis(ax)
        ax.set_xlim(left, right)
        if log_y:
            ax.set_yscale("log")
            _one_two_five(ax.yaxis)
            values = [v for x, v in labelled] + [e["encode"][key] for e in usable if e["encode"][key]]
            if values:
                ax.set_ylim(*_one_two_five_bounds(min(values), max(values)))
        ax.set_ylabel(title.split(" (")[0])
        ax.set_title(title, fontsize=9)
        fig.tight_layout()
        _place_labels(ax, labelled, texts, 6.5)
        if k == 0:
            _family_legend(ax, [e["family"] for e in usable], styles, frontier=False,
                           title="hollow: encode, filled: decode")
    fig.tight_layout()
    return _png(fig)
