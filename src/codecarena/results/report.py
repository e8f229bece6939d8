"""`codecarena report`: one self-contained HTML file to look at, and a Markdown summary beside it.

The HTML makes no request of its own: CSS and the small script are inline, plots and spectrograms
are PNG `data:` URIs, and every reference and decoded file is embedded as a `data:` URI in an
`<audio controls>` player. Audio is embedded losslessly: FLAC (written with soundfile/libsndfile,
bit-exact with the 16-bit PCM WAV on disk, about half its size) unless the file's sample format has
no FLAC equivalent or FLAC comes out larger, in which case the file's own bytes are embedded.
Lossy compression (Opus, MP3) would add its own artifacts to the codec output under test and is
never used. `--audio none` leaves the players out.

Sections: leaderboards (one per group of comparable runs; the leaderboard numbers come from DuckDB
over the exported rows, see `leaderboard.py`), Pareto plots of quality vs representation bitrate,
a cost plot, a comparison of consecutive comparable runs (when `codecarena.results.compare`
provides `render_html`), per-utterance listening with spectrograms, every failure with its reason,
and provenance. What each section shows: docs/report.md.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import html
import importlib
import io
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import codecarena
from codecarena.results import leaderboard as lb
from codecarena.results.schema import Row
from codecarena.results.store import StoreError
from codecarena.rundir import RunDir, UnsafePathError

# Metrics that get a Pareto plot, in this order, and whether lower is better.
PARETO_METRICS = ("pesq_wb", "stoi", "dwer", "dnsmos_ovrl", "speaker_sim")
AUDIO_MODES = ("flac", "wav", "none")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
          "#7f7f7f", "#bcbd22")
SPEC_ROWS = 96  # spectrogram height in pixels (0..8 kHz)
SPEC_MAX_COLS = 320  # spectrogram width in pixels at most
SPEC_RANGE_DB = 80.0


class ReportError(ValueError):
    """Run directories that cannot be reported on."""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


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
# Figures (matplotlib, object API on the Agg canvas: no pyplot state, no display)


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


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


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


# ---------------------------------------------------------------------------------------------
# Audio and spectrograms


def _read_audio(path: Path) -> tuple[np.ndarray, int]:
    import soundfile as sf

    data, rate = sf.read(str(path), dtype="float64", always_2d=True)
    return data.mean(axis=1), rate


def spectrogram_db(audio: np.ndarray, rate: int) -> np.ndarray:
    """Log-magnitude STFT in dB (rows: 0 .. 8 kHz at 16 kHz, columns: time), pooled to a small image."""
    n_fft, hop = 512, max(1, rate // 100)
    if audio.size < n_fft:
        audio = np.pad(audio, (0, n_fft - audio.size))
    frames = 1 + (audio.size - n_fft) // hop
    idx = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    window = np.hanning(n_fft)
    mag = np.abs(np.fft.rfft(audio[idx] * window, axis=1)).T  # (257, frames)
    db = 20.0 * np.log10(mag + 1e-9)
    db = db[: (db.shape[0] - 1) // SPEC_ROWS * SPEC_ROWS] if db.shape[0] > SPEC_ROWS else db
    if db.shape[0] >= SPEC_ROWS:
        db = db.reshape(SPEC_ROWS, -1, db.shape[1]).max(axis=1)
    step = max(1, math.ceil(db.shape[1] / SPEC_MAX_COLS))
    cols = math.ceil(db.shape[1] / step)
    padded = np.pad(db, ((0, 0), (0, cols * step - db.shape[1])), mode="edge")
    return padded.reshape(db.shape[0], cols, step).max(axis=2)


_PALETTE: list[int] | None = None


def _palette() -> list[int]:
    global _PALETTE
    if _PALETTE is None:
        from matplotlib import colormaps

        rgba = colormaps["magma"](np.linspace(0.0, 1.0, 256))
        _PALETTE = [int(round(c * 255)) for color in rgba for c in color[:3]]
    return _PALETTE


def spectrogram_png(db: np.ndarray, top_db: float) -> bytes:
    """8-bit palette PNG (magma), low frequencies at the bottom, scaled to [top - 80 dB, top]."""
    from PIL import Image

    scaled = np.clip((db - (top_db - SPEC_RANGE_DB)) / SPEC_RANGE_DB, 0.0, 1.0)
    pixels = np.ascontiguousarray(np.flipud(np.round(scaled * 255)).astype(np.uint8))
    image = Image.frombytes("P", (pixels.shape[1], pixels.shape[0]), pixels.tobytes())
    image.putpalette(_palette())
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


@dataclass
class AudioStats:
    mode: str
    files: int = 0
    flac: int = 0
    original: int = 0
    bytes_embedded: int = 0
    bytes_on_disk: int = 0
    notes: list[str] = field(default_factory=list)


def embed_audio(path: Path, mode: str, stats: AudioStats) -> str:
    """A data: URI of the audio file, lossless (see the module docstring for the FLAC/WAV choice)."""
    import soundfile as sf

    raw = path.read_bytes()
    info = sf.info(str(path))
    mime = {"WAV": "audio/wav", "FLAC": "audio/flac", "OGG": "audio/ogg"}.get(info.format, "audio/wav")
    stats.files += 1
    stats.bytes_on_disk += len(raw)
    best, best_mime = raw, mime
    flac_subtypes = {"PCM_16": "int16", "PCM_24": "int32", "PCM_S8": "int16"}
    if mode == "flac" and info.format != "FLAC" and info.subtype in flac_subtypes and "FLAC" in sf.available_formats():
        data, rate = sf.read(str(path), dtype=flac_subtypes[info.subtype], always_2d=True)
        buf = io.BytesIO()
        sf.write(buf, data, rate, format="FLAC", subtype=info.subtype)
        if len(buf.getvalue()) < len(raw):
            best, best_mime = buf.getvalue(), "audio/flac"
    if best_mime == "audio/flac" and info.format != "FLAC":
        stats.flac += 1
    else:
        stats.original += 1
    stats.bytes_embedded += len(best)
    return data_uri(best, best_mime)


# ---------------------------------------------------------------------------------------------
# HTML pieces

CSS = """
:root { --fg: #1d2329; --muted: #5f6b76; --line: #d9dee3; --bg: #ffffff; --soft: #f4f6f8;
        --bad: #b3261e; --warn: #8a5a00; --good: #1b6e3a; --accent: #2458a6; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--fg); background: var(--bg); }
header.top { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); background: var(--soft); }
header.top h1 { margin: 0 0 4px; font-size: 22px; }
header.top p { margin: 2px 0; color: var(--muted); }
nav.toc { padding: 8px 28px; border-bottom: 1px solid var(--line); position: sticky; top: 0; background: var(--bg);
          z-index: 5; font-size: 13px; }
nav.toc a { margin-right: 14px; color: var(--accent); text-decoration: none; }
main { padding: 8px 28px 40px; }
h2 { margin: 28px 0 8px; font-size: 19px; border-bottom: 2px solid var(--line); padding-bottom: 4px; }
h3 { margin: 20px 0 6px; font-size: 16px; }
h4 { margin: 14px 0 6px; font-size: 14px; }
p.note, .muted { color: var(--muted); }
.box { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; margin: 8px 0; background: var(--soft); }
.box.warn { border-color: #e0c27a; background: #fff8e6; }
.box.bad { border-color: #e2a19c; background: #fdf0ef; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 12.5px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: right; vertical-align: top; white-space: nowrap; }
th { background: var(--soft); position: sticky; top: 0; cursor: pointer; user-select: none; }
th.l, td.l { text-align: left; }
td.wrap { white-space: normal; min-width: 200px; max-width: 560px; text-align: left; overflow-wrap: anywhere; }
table.provenance td.wrap { min-width: 140px; max-width: 420px; }
tr:hover td { background: #f0f5fc; }
td .sub { display: block; font-size: 10.5px; color: var(--muted); }
td .sub.bad, .bad { color: var(--bad); }
.good { color: var(--good); }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
.plots { display: flex; flex-wrap: wrap; gap: 10px; }
.plots figure { margin: 0; border: 1px solid var(--line); border-radius: 6px; padding: 6px; background: #fff; }
.plots figure img { display: block; max-width: 100%; height: auto; }
.plots figure.wide img { max-width: 1300px; width: 100%; }
figcaption { font-size: 12px; color: var(--muted); max-width: 520px; }
.utt { margin: 14px 0 22px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(235px, 1fr)); gap: 10px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 6px; background: #fff; }
.card.ref { border-color: #8fb0dd; background: #f3f7fd; }
.card h5 { margin: 0 0 4px; font-size: 13px; }
.card img.spec { width: 100%; height: 86px; display: block; border-radius: 3px; image-rendering: auto; }
.card audio { width: 100%; margin-top: 4px; height: 32px; }
.card .m { font-size: 11px; color: var(--muted); min-height: 30px; }
.card.failed { border-color: #e2a19c; background: #fdf0ef; }
details > summary { cursor: pointer; color: var(--accent); }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 6px 0; }
dl.kv dt { color: var(--muted); } dl.kv dd { margin: 0; word-break: break-all; }
.pill { display: inline-block; padding: 0 6px; border-radius: 9px; font-size: 11px; background: #e8edf3; }
.pill.synthetic { background: #fde2c8; } .pill.real { background: #d7ecd9; } .pill.none { background: #e8edf3; }
"""

# Click a header to sort its table (numbers by data-v, text otherwise); nothing else runs.
SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('thead th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var dir = th.dataset.dir === 'asc' ? -1 : 1;
      th.dataset.dir = dir === 1 ? 'asc' : 'desc';
      rows.sort(function (a, b) {
        var x = a.cells[col], y = b.cells[col];
        var vx = x.dataset.v, vy = y.dataset.v;
        if (vx !== undefined && vy !== undefined) {
          var nx = vx === '' ? Infinity : parseFloat(vx), ny = vy === '' ? Infinity : parseFloat(vy);
          return dir * (nx - ny);
        }
        return dir * x.textContent.localeCompare(y.textContent);
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


def _num_td(value: float | None, text: str, extra: str = "", cls: str = "") -> str:
    v = "" if value is None else repr(float(value))
    c = f' class="{cls}"' if cls else ""
    return f'<td data-v="{v}"{c}>{esc(text)}{extra}</td>'


def _fmt(value: float | None, digits: int = 3) -> str:
    return lb.fmt_num(value, digits)


def _mib(value: int | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value / 2**20:.{digits}f}"


def _weights_pill(weights: str) -> str:
    return f'<span class="pill {esc(weights)}">{esc(weights)}</span>'


def _declaration_titles(runs: list[lb.RunInfo]) -> dict[str, str]:
    titles: dict[str, str] = {}
    for run in runs:
        for decl in run.run.get("metrics") or []:
            for output in decl.get("outputs") or []:
                titles.setdefault(output, decl.get("description", ""))
    return titles


def leaderboard_html(board: lb.Leaderboard, group: lb.Group, titles: dict[str, str]) -> str:
    entries = board.group_entries(group.id)
    names = [n for n in board.metric_names if any(n in e["metrics"] for e in entries)]
    multi_run = len(group.runs) > 1
    head = []
    if multi_run:
        head.append('<th class="l">run</th>')
    head += ['<th class="l">codec</th>', '<th class="l">family</th>', '<th class="l">weights</th>',
             '<th class="l">variant</th>', '<th title="representation bits / second of audio">repr kbps</th>',
             '<th title="whole payload file (header and framing) bits / second">payload kbps</th>']
    for n in names:
        arrow = "&darr;" if n in lb.LOWER_IS_BETTER else "&uarr;"
        head.append(f'<th title="{esc(titles.get(n, n))} (mean over successes; '
                    f'{"lower" if n in lb.LOWER_IS_BETTER else "higher"} is better)">{esc(lb.metric_label(n))} {arrow}</th>')
    head += ['<th title="median over rows: process start + imports + load + I/O + first call, / audio s">dec RTF cold</th>',
             '<th title="median of the repeated in-process decode call / audio s">dec RTF warm</th>',
             '<th>enc RTF cold</th>', '<th>enc RTF warm</th>',
             '<th title="max over encode and decode stages of the process-tree peak RSS">peak RSS MiB</th>',
             '<th title="model bytes the decoder needs: decoder_model_bytes (Lyra) or parameter_bytes (0 for DSP)">'
             'dec model MiB</th>',
             '<th title="rows of the replay sample whose second decode in another fresh process gave identical bytes">replay identical</th>',
             '<th title="rows whose decoded audio is finite and not silent">checks</th>',
             '<th>rows ok</th>']
    body = []
    for e in entries:
        cells = []
        if multi_run:
            cells.append(f'<td class="l">{esc(e["run_label"])}</td>')
        cells.append(f'<td class="l"><b>{esc(e["codec"])}</b></td>')
        cells.append(f'<td class="l">{esc(e["family"])}</td>')
        cells.append(f'<td class="l">{_weights_pill(e["weights"])}</td>')
        cells.append(f'<td class="l">{esc(e["variant"] or "-")}</td>')
        rep, pay = e["representation_bps"], e["payload_bps"]
        cells.append(_num_td(rep, lb.fmt_kbps(rep)))
        cells.append(_num_td(pay, lb.fmt_kbps(pay)))
        for n in names:
            stats = e["metrics"].get(n)
            if not stats:
                cells.append('<td data-v="">-</td>')
                continue
            subs = []
            if stats["n_failed"]:
                subs.append(f'<span class="sub bad">{stats["n_failed"]} failed</span>')
            if stats["n_not_applicable"]:
                subs.append(f'<span class="sub">{stats["n_not_applicable"]} n/a</span>')
            cells.append(_num_td(stats["mean"], _fmt(stats["mean"]), "".join(subs)))
        for stage, key, digits in (("decode", "cold_rtf_median", 3), ("decode", "warm_rtf_median", 4),
                                   ("encode", "cold_rtf_median", 3), ("encode", "warm_rtf_median", 4)):
            cells.append(_num_td(e[stage][key], _fmt(e[stage][key], digits)))
        cells.append(_num_td(e["peak_rss_bytes_max"], _mib(e["peak_rss_bytes_max"], 0)))
        dm = e["decoder_model_bytes"]
        cells.append(_num_td(dm, "-" if dm is None else f"{dm / 2**20:.2f}"))
        n = e["rows"]
        sampled = e["replay_sampled"]
        cells.append(_num_td(e["replay_identical"], f'{e["replay_identical"]}/{sampled}',
                             cls="bad" if e["replay_identical"] < sampled else "good"))
        cells.append(_num_td(e["checks_passed"], f'{e["checks_passed"]}/{n}',
                             cls="bad" if e["checks_passed"] < n else "good"))
        cells.append(_num_td(e["rows_ok"], f'{e["rows_ok"]}/{n}', cls="bad" if e["rows_ok"] < n else ""))
        body.append(f'<tr class="lb-row" data-codec="{esc(e["codec"])}" data-run="{esc(e["run_label"])}">'
                    + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table class="leaderboard sortable" data-group="{esc(group.id)}">'
            f'<thead><tr>{"".join(head)}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def _kv(pairs: list[tuple[str, Any]]) -> str:
    return '<dl class="kv">' + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def _code(value: Any) -> str:
    return f"<code>{esc(value)}</code>"


# ---------------------------------------------------------------------------------------------
# The report


@dataclass
class ReportContext:
    board: lb.Leaderboard
    audio_mode: str
    audio: AudioStats
    styles: dict[str, tuple[str, str]]
    skipped_plots: list[tuple[str, str, str]] = field(default_factory=list)  # (group, metric, why)
    comparison_notes: list[str] = field(default_factory=list)
    comparisons: list[tuple[str, str, str]] = field(default_factory=list)  # (label a, label b, html)
    images: int = 0


def _rows_by_key(board: lb.Leaderboard) -> dict[tuple[int, str, str], Row]:
    return {(run.index, row.codec, row.utterance): row for run in board.runs for row in run.rows}


def _resolve(run: lb.RunInfo, path: str) -> Path | None:
    """A row's stored path inside its run; None for one that leaves the run (never read into a report)."""
    try:
        return RunDir(run.path).resolve(path)
    except UnsafePathError:
        return None


def _row_metric_line(row: Row) -> str:
    parts = []
    for name in PARETO_METRICS:
        rec = row.metrics.get(name)
        if rec is None:
            continue
        label = lb.metric_label(name)
        if rec["status"] == "ok":
            parts.append(f"{label} {rec['value']:.3f}")
        elif rec["status"] == "failed":
            parts.append(f'<span class="bad" title="{esc(rec["error"])}">{esc(label)} failed</span>')
        else:
            parts.append(f'<span title="{esc(rec["error"])}">{esc(label)} n/a</span>')
    bits = [f"{row.representation_bps / 1000:.2f} kbps"] if row.representation_bps else []
    return " · ".join(bits + [p if p.startswith("<") else esc(p) for p in parts])


def listening_html(ctx: ReportContext, group: lb.Group) -> str:
    board = ctx.board
    rows = _rows_by_key(board)
    entries = board.group_entries(group.id)
    multi_run = len(group.runs) > 1
    first = board.runs[group.runs[0]]
    utterances = [u[0] if isinstance(u, (list, tuple)) else u for u in first.plan.get("utterances") or []]
    for run_index in group.runs:
        for row in board.runs[run_index].rows:
            if row.utterance not in utterances:
                utterances.append(row.utterance)
    out = []
    for utt in utterances:
        versions = [(e, rows.get((e["run_index"], e["codec"], utt))) for e in entries]
        versions = [(e, r) for e, r in versions if r is not None]
        if not versions:
            continue
        cards = []
        # The reference: once per distinct reference sha256 (runs of one group share the set).
        refs: dict[str, tuple[lb.RunInfo, Row]] = {}
        for e, r in versions:
            refs.setdefault(r.reference_sha256, (board.runs[e["run_index"]], r))
        top_db: float | None = None
        ref_cards = []
        for sha, (run, r) in refs.items():
            path = _resolve(run, r.reference)
            if path is None or not path.is_file():
                ref_cards.append(f'<div class="card ref failed"><h5>reference</h5><div class="m bad">'
                                 f'reference not found in the run at {esc(r.reference)}</div></div>')
                continue
            audio, rate = _read_audio(path)
            db = spectrogram_db(audio, rate)
            top_db = float(db.max()) if top_db is None else top_db
            ref_cards.append(_card(ctx, "reference", f"{r.duration_s:.2f} s · {esc(r.language or '-')} · "
                                   f'<span class="mono" title="{esc(sha)}">{esc(sha[:10])}</span>', db, top_db,
                                   path, "ref"))
        cards += ref_cards
        for e, r in versions:
            title = e["codec"] + (f" @{e['run_label']}" if multi_run else "")
            if r.decoded is None or r.status != "ok":
                cards.append(f'<div class="card failed"><h5>{esc(title)}</h5><div class="m bad">'
                             f'{esc(r.status)}: {esc(r.error or "no decoded audio")}</div></div>')
                continue
            path = _resolve(board.runs[e["run_index"]], r.decoded)
            if path is None or not path.is_file():
                cards.append(f'<div class="card failed"><h5>{esc(title)}</h5><div class="m bad">'
                             f'decoded file missing in the run: {esc(r.decoded)}</div></div>')
                continue
            audio, rate = _read_audio(path)
            db = spectrogram_db(audio, rate)
            if top_db is None:
                top_db = float(db.max())
            flags = []
            if r.replay_sampled and r.replay_identical is not True:
                flags.append('<span class="bad">replay differs</span>')
            if not r.checks_passed:
                flags.append(f'<span class="bad">checks failed: {esc(r.error)}</span>')
            meta = _row_metric_line(r) + ("<br>" + " ".join(flags) if flags else "")
            cards.append(_card(ctx, title, meta, db, top_db, path, "dec"))
        lang = versions[0][1].language
        out.append(f'<div class="utt" data-utterance="{esc(utt)}"><h4>{esc(utt)} '
                   f'<span class="muted">({esc(lang or "no language")}, {versions[0][1].duration_s:.2f} s)</span></h4>'
                   f'<div class="cards">{"".join(cards)}</div></div>')
    return "".join(out)


def _card(ctx: ReportContext, title: str, meta_html: str, db: np.ndarray, top_db: float, path: Path,
          kind: str) -> str:
    png = spectrogram_png(db, top_db)
    ctx.images += 1
    player = ""
    if ctx.audio_mode != "none":
        player = (f'<audio controls preload="metadata" class="{kind}" data-file="{esc(path.name)}" '
                  f'src="{embed_audio(path, ctx.audio_mode, ctx.audio)}"></audio>')
    cls = "card ref" if kind == "ref" else "card"
    return (f'<div class="{cls}"><h5>{esc(title)}</h5><div class="m">{meta_html}</div>'
            f'<img class="spec" alt="spectrogram of {esc(title)}" src="{data_uri(png, "image/png")}">{player}</div>')


def plots_html(ctx: ReportContext, group: lb.Group) -> str:
    entries = ctx.board.group_entries(group.id)
    with_run = len(group.runs) > 1
    figures = []
    for metric in PARETO_METRICS:
        png, why = pareto_plot(entries, metric, ctx.styles, with_run)
        if png is None:
            ctx.skipped_plots.append((group.id, metric, why))
            continue
        ctx.images += 1
        label = lb.metric_label(metric)
        direction = "lower" if metric in lb.LOWER_IS_BETTER else "higher"
        figures.append(f'<figure data-metric="{esc(metric)}"><img class="plot" alt="{esc(label)} vs kbps" '
                       f'src="{data_uri(png, "image/png")}"><figcaption>{esc(label)} ({direction} is better) vs '
                       f'representation kbps; outlined points and the step line are the Pareto frontier.'
                       f'</figcaption></figure>')
    skipped = [(m, why) for g, m, why in ctx.skipped_plots if g == group.id]
    note = ""
    if skipped:
        note = ('<p class="note">Plots skipped: ' + "; ".join(f"{esc(lb.metric_label(m))} ({esc(why)})"
                                                             for m, why in skipped) + ".</p>")
    cost = cost_plot(entries, ctx.styles, with_run)
    cost_html = ""
    if cost is not None:
        ctx.images += 1
        cost_html = (f'<figure class="wide" data-metric="cost"><img class="plot" alt="cost vs kbps" '
                     f'src="{data_uri(cost, "image/png")}"><figcaption>Cost vs representation kbps: median cold '
                     f'and warm real-time factor (hollow: encode, filled: decode; log scale, lower is faster) and '
                     f'peak RSS.</figcaption></figure>')
    return f'<div class="plots">{"".join(figures)}</div>{note}<div class="plots">{cost_html}</div>'


def failures_html(ctx: ReportContext) -> tuple[str, int]:
    """The failures section, and how many failures it lists (failed rows, failed checks and
    failed metric values; not-applicable values and skipped plots are listed but not counted)."""
    board = ctx.board
    parts = []
    count = 0
    notes = [(run.label, note) for run in board.runs for note in run.notes]
    if notes:
        parts.append("<h3>Runs</h3><ul>" + "".join(f"<li><b>{esc(l)}</b>: {esc(n)}</li>" for l, n in notes) + "</ul>")
    row_fail = []
    check_fail = []
    for run in board.runs:
        for r in run.rows:
            if r.status != "ok":
                row_fail.append((run, r, r.error or "failed"))
            else:
                if not r.checks_passed:
                    why = r.error or ", ".join(w for w, bad in (("non-finite output", r.finite is False),
                                                                ("silent output", r.silent is True)) if bad)
                    check_fail.append((run, r, "checks", why or "checks failed"))
                if r.replay_sampled and r.replay_identical is not True:
                    check_fail.append((run, r, "replay", f"second decode differs: {r.decoded_sha256} vs "
                                                         f"{r.replay_sha256}"))
    multi = len(board.runs) > 1
    runcol = "<th class=\"l\">run</th>" if multi else ""

    def runcell(run: lb.RunInfo) -> str:
        return f'<td class="l">{esc(run.label)}</td>' if multi else ""

    if row_fail:
        count += len(row_fail)
        parts.append(f"<h3>Failed rows ({len(row_fail)})</h3><div class=\"scroll\"><table class=\"failures\"><thead><tr>"
                     f"{runcol}<th class=\"l\">codec</th><th class=\"l\">utterance</th><th class=\"l\">stage</th>"
                     f"<th class=\"l\">reason</th></tr></thead><tbody>"
                     + "".join(f'<tr class="failure">{runcell(run)}<td class="l">{esc(r.codec)}</td><td class="l">'
                               f'{esc(r.utterance)}</td><td class="l">'
                               f'{esc(", ".join(s.name for s in r.stages if not s.ok) or "-")}</td>'
                               f'<td class="wrap">{esc(why)}</td></tr>' for run, r, why in row_fail)
                     + "</tbody></table></div>")
    if check_fail:
        count += len(check_fail)
        parts.append(f"<h3>Failed checks ({len(check_fail)})</h3><div class=\"scroll\"><table class=\"failures\"><thead><tr>"
                     f"{runcol}<th class=\"l\">codec</th><th class=\"l\">utterance</th><th class=\"l\">check</th>"
                     f"<th class=\"l\">reason</th></tr></thead><tbody>"
                     + "".join(f'<tr class="failure">{runcell(run)}<td class="l">{esc(r.codec)}</td><td class="l">'
                               f'{esc(r.utterance)}</td><td class="l">{esc(kind)}</td><td class="wrap">{esc(why)}</td></tr>'
                               for run, r, kind, why in check_fail)
                     + "</tbody></table></div>")
    problems = board.metric_problems
    if problems:
        failed = sum(p["n"] for p in problems if p["status"] == "failed")
        skipped = sum(p["n"] for p in problems if p["status"] == "not_applicable")
        count += failed
        body = []
        for p in problems:
            utts = p["utterances"]
            shown = ", ".join(utts[:6]) + (f" and {len(utts) - 6} more" if len(utts) > 6 else "")
            cls = "bad" if p["status"] == "failed" else "muted"
            body.append(f'<tr class="metric-problem">{runcell(board.runs[p["run_index"]])}<td class="l">{esc(p["codec"])}</td>'
                        f'<td class="l">{esc(p["output"])}</td><td class="l {cls}">'
                        f'{"failed" if p["status"] == "failed" else "not applicable (skipped)"}</td>'
                        f'<td>{p["n"]}</td><td class="wrap">{esc(p["error"])}</td>'
                        f'<td class="wrap mono">{esc(shown)}</td></tr>')
        parts.append(f"<h3>Metric values that are not ok ({failed} failed, {skipped} not applicable)</h3>"
                     f'<p class="note">Nothing is replaced by 0 or 1: these values are left out of the means and '
                     f'counted in the leaderboard.</p><div class="scroll"><table class="failures"><thead><tr>{runcol}'
                     f'<th class="l">codec</th><th class="l">metric output</th><th class="l">status</th><th>rows</th>'
                     f'<th class="l">reason</th><th class="l">utterances</th></tr></thead><tbody>{"".join(body)}'
                     f"</tbody></table></div>")
    if ctx.skipped_plots:
        parts.append("<h3>Plots skipped</h3><ul>" + "".join(
            f"<li>{esc(g)}: {esc(lb.metric_label(m))}: {esc(why)}</li>" for g, m, why in ctx.skipped_plots) + "</ul>")
    if not parts:
        parts.append('<p class="good">No failures: every row completed, every check passed, the replay was '
                     "identical everywhere and every metric value is ok.</p>")
    return "".join(parts), count


def comparison_html(ctx: ReportContext) -> str:
    board = ctx.board
    if len(board.runs) < 2:
        return ""
    parts = ['<h2 id="comparison">Comparison of consecutive comparable runs</h2>']
    by_key: dict[Any, list[lb.RunInfo]] = {}
    for run in board.runs:
        by_key.setdefault(lb.comparison_key(run), []).append(run)
    pairs = [(a, b) for runs in by_key.values() for a, b in zip(runs, runs[1:])]
    if not pairs:
        parts.append('<p class="note">No two runs share an evaluation set, a machine and a weights kind, so no pair '
                     'is compared.</p>')
        ctx.comparison_notes.append("no comparable pair of runs")
        return "".join(parts)
    try:
        compare = importlib.import_module("codecarena.results.compare")
    except ImportError as exc:
        note = f"comparison skipped: codecarena.results.compare is not available ({exc})"
        ctx.comparison_notes.append(note)
        return "".join(parts) + f'<p class="note">{esc(note)}.</p>'
    missing = [name for name in ("compare_runs", "render_html") if not callable(getattr(compare, name, None))]
    if missing:
        note = f"comparison skipped: codecarena.results.compare has no {' or '.join(missing)}"
        ctx.comparison_notes.append(note)
        return "".join(parts) + f'<p class="note">{esc(note)}.</p>'
    for a, b in pairs:
        parts.append(f"<h3>{esc(a.label)} &rarr; {esc(b.label)}</h3>")
        try:
            fragment = compare.render_html(compare.compare_runs(a.path, b.path))
        except Exception as exc:  # noqa: BLE001 - another module's failure must not lose the report
            note = f"{a.label} -> {b.label}: comparison failed ({type(exc).__name__}: {exc})"
            ctx.comparison_notes.append(note)
            parts.append(f'<p class="note bad">{esc(note)}</p>')
            continue
        ctx.comparisons.append((a.label, b.label, fragment))
        parts.append(f'<div class="comparison">{fragment}</div>')
    return "".join(parts)


def _short_sha(value: Any) -> str:
    text = str(value)
    return f'<span class="mono" title="{esc(text)}">{esc(text[:12])}</span>' if len(text) == 64 else esc(text)


def _model_file(f: dict[str, Any]) -> str:
    sha = f.get("sha256") or ""
    pinned = f.get("pinned_sha256")
    text = f"<br>{esc(f.get('file') or f.get('name') or f.get('path') or '')} {_short_sha(sha)}"
    if pinned and pinned != sha:
        text += f' <span class="bad">differs from the pinned {_short_sha(pinned)}</span>'
    return text


def _facts(data: Any, prefix: str = "") -> list[str]:
    """Nested facts as `key: value` lines (nested keys joined with dots)."""
    if not isinstance(data, dict):
        return [f"{prefix}: {data}"] if prefix else [str(data)]
    lines: list[str] = []
    for key in sorted(data):
        name = f"{prefix}.{key}" if prefix else str(key)
        value = data[key]
        if isinstance(value, dict) and value:
            lines += _facts(value, name)
        else:
            lines.append(f"{name}: {value}")
    return lines


def _facts_html(data: Any) -> str:
    return "<br>".join(esc(line) for line in _facts(data)) or '<span class="muted">-</span>'


def _limits_text(run: lb.RunInfo) -> str:
    """The limits the rows ran under (rows record them; a resumed run may mix several), or what an
    older run's plan said."""
    seen = sorted({(x.memory_limit_bytes, x.guard_poll_s, x.stage_timeout_s) for x in (r.limits for r in run.rows) if x})
    if not seen:
        plan = run.plan
        seen = [(plan.get("memory_limit_bytes"), plan.get("guard_poll_s"), plan.get("stage_timeout_s"))]
    return "; ".join(f"memory limit {_mib(mem, 0)} MiB, guard poll {esc(poll)} s, stage timeout {esc(timeout)} s"
                     for mem, poll, timeout in seen)


def provenance_html(board: lb.Leaderboard) -> str:
    parts = []
    for run in board.runs:
        r = run.run
        env = r.get("environment") or {}
        git = r.get("git") or {}
        plan = run.plan
        rev = git.get("revision") or "unknown"
        dirty = ' <span class="bad">(dirty working tree)</span>' if git.get("dirty") else ""
        mem = env.get("memory_bytes")
        pairs = [
            ("path", _code(run.path.resolve())),
            ("created", esc(r.get("created_at"))),
            ("finished", esc(r.get("finished"))),
            ("command", _code(shlex.join(str(a) for a in r.get("command") or []))),
            ("codecarena", f"{esc(r.get('codecarena'))}, revision {_code(rev)}{dirty}"),
            ("machine", esc(f"{env.get('cpu')} x{env.get('cpu_count')}, "
                            f"{mem / 2**30:.1f} GiB" if mem else f"{env.get('cpu')} x{env.get('cpu_count')}")),
            ("os", esc(env.get("os"))),
            ("python", f"{esc(env.get('python'))} {_code(env.get('executable'))}"),
            ("evaluation set", f"{esc(plan.get('set'))}, {len(plan.get('utterances') or [])} utterances, "
                               f"manifest {_short_sha(plan.get('manifest_sha256'))}"),
            ("plan", f"sha256 {_short_sha(r.get('plan_sha256'))}; warm repeats {esc(plan.get('warm_repeats'))}; "
                     f"metrics {esc(', '.join(plan.get('metrics') or []) or 'none')}"),
            ("stage limits", _limits_text(run)),
        ]
        packages = env.get("packages") or {}
        pkg = ", ".join(f"{k} {v}" for k, v in sorted(packages.items()))
        pairs.append(("packages", esc(pkg)))
        parts.append(f'<h3 id="prov-{run.index}">{esc(run.label)}</h3>{_kv(pairs)}')
        # codecs: spec, config, registry entry, checkpoint identity, variant, weights, runtime
        runtimes = r.get("runtimes")
        codec_rows = []
        first_rows: dict[str, Row] = {}
        for row in run.rows:
            first_rows.setdefault(row.codec, row)
        configs = {c.get("codec"): c.get("config") for c in plan.get("codecs") or []}
        for codec, row in first_rows.items():
            ck = row.checkpoint or {}
            if ck:
                files = "".join(f"<br>{esc(k)} {_short_sha(v)}" for k, v in sorted(ck.items())
                                if k not in ("registry", "revision"))
                ck_html = f"{esc(ck.get('registry', ''))} @ {_short_sha(ck.get('revision', ''))}{files}"
            else:
                ck_html = '<span class="muted">none (DSP)</span>'
            rt = (runtimes or {}).get(row.registry) if isinstance(runtimes, dict) else None
            if rt:
                pk = rt.get("packages") or []
                rt_html = (f"{esc(rt.get('environment'))} {_code(rt.get('interpreter'))}<br>packages "
                           f"{_short_sha(rt.get('packages_sha256'))} ({len(pk)})"
                           f"<details><summary>list</summary><span class=\"mono\">{esc(', '.join(pk))}</span></details>")
            else:
                rt_html = '<span class="muted">not recorded in run.json</span>'
            worker = row.runtime or {}
            model = {k: v for k, v in (row.model or {}).items() if k not in ("checkpoint",)}
            codec_rows.append(
                f'<tr><td class="l"><b>{esc(codec)}</b></td><td class="wrap mono">{_facts_html(configs.get(codec) or row.config)}</td>'
                f'<td class="l">{esc(row.registry)}</td><td class="wrap">{ck_html}</td>'
                f'<td class="l">{_weights_pill(row.weights)}</td><td class="l">{esc(row.variant or "-")}</td>'
                f'<td class="wrap">{rt_html}<br><span class="muted">worker: python {esc(worker.get("python"))}, '
                f'numpy {esc(worker.get("numpy"))}</span></td><td class="wrap mono">{_facts_html(model)}</td></tr>')
        parts.append('<h4>Codecs, registry entries, checkpoints and runtimes</h4><div class="scroll"><table class="provenance">'
                     '<thead><tr><th class="l">codec</th><th class="l">config</th><th class="l">registry</th>'
                     '<th class="l">checkpoint identity</th><th class="l">weights</th><th class="l">variant</th>'
                     '<th class="l">runtime</th><th class="l">model facts</th></tr></thead><tbody>'
                     + "".join(codec_rows) + "</tbody></table></div>")
        decls = r.get("metrics") or []
        if decls:
            mrows = []
            for d in decls:
                versions = ", ".join(f"{k} {v}" for k, v in (d.get("versions") or {}).items())
                files = "".join(_model_file(f) for f in d.get("model_files") or [] if isinstance(f, dict))
                mrows.append(f'<tr><td class="l">{esc(d.get("name"))}</td><td class="l">{esc(", ".join(d.get("outputs") or []))}</td>'
                             f'<td class="l">{esc(versions)}</td><td class="wrap">{esc(d.get("description"))}{files}</td></tr>')
            parts.append('<h4>Metrics</h4><div class="scroll"><table class="provenance"><thead><tr><th class="l">metric</th>'
                         '<th class="l">outputs</th><th class="l">versions</th><th class="l">how</th></tr></thead><tbody>'
                         + "".join(mrows) + "</tbody></table></div>")
    return "".join(parts)


def grouping_html(board: lb.Leaderboard) -> str:
    runs = "".join(f"<li><b>{esc(r.label)}</b>: {_code(r.path)} &mdash; set {esc(r.set_name)}, {len(r.rows)} rows, "
                   f"{esc(lb.machine_text(r.machine))}</li>" for r in board.runs)
    text = f"<ul>{runs}</ul>"
    if len(board.groups) > 1:
        items = "".join(f"<li><b>{esc(g.id)}</b> ({esc(g.title)}): {esc('; '.join(g.reasons))}</li>" for g in board.groups)
        text += (f'<div class="box warn"><b>Not one ranking.</b> These runs differ in evaluation set, machine or '
                 f'weights kind, so they are shown as {len(board.groups)} separate leaderboards:<ul>{items}</ul></div>')
    return text


def _markdown(ctx: ReportContext, out_html: Path, failure_count: int) -> str:
    board = ctx.board
    lines = ["# codecarena report", "",
             f"Full report (plots, audio, spectrograms, provenance): `{out_html.name}`.", ""]
    lines.append("Runs:")
    for run in board.runs:
        lines.append(f"- {run.label}: `{run.path}` (set {run.set_name}, {len(run.rows)} rows, "
                     f"{lb.machine_text(run.machine)}, codecarena {run.run.get('codecarena')} "
                     f"{(run.run.get('git') or {}).get('revision') or ''})")
    lines.append("")
    for group in board.groups:
        entries = board.group_entries(group.id)
        names = [n for n in PARETO_METRICS if any(n in e["metrics"] for e in entries)]
        lines += [f"## {group.id}: {group.title}", ""]
        for reason in group.reasons:
            lines.append(f"- {reason}")
        if group.reasons:
            lines.append("")
        multi = len(group.runs) > 1
        head = (["run"] if multi else []) + ["codec", "weights", "variant", "repr kbps", "payload kbps"]
        head += [lb.metric_label(n) + (" (lower better)" if n in lb.LOWER_IS_BETTER else "") for n in names]
        head += ["dec RTF cold/warm", "enc RTF cold/warm", "peak RSS MiB", "dec model MiB", "replay", "checks"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join("---" if i < (3 + multi) else "---:" for i in range(len(head))) + "|")
        for e in entries:
            cells = ([e["run_label"]] if multi else []) + [e["codec"], e["weights"], e["variant"] or "-",
                                                           lb.fmt_kbps(e["representation_bps"]), lb.fmt_kbps(e["payload_bps"])]
            cells += [lb.metric_cell(e["metrics"].get(n)) for n in names]
            cells += [f"{_fmt(e['decode']['cold_rtf_median'])}/{_fmt(e['decode']['warm_rtf_median'], 4)}",
                      f"{_fmt(e['encode']['cold_rtf_median'])}/{_fmt(e['encode']['warm_rtf_median'], 4)}",
                      _mib(e["peak_rss_bytes_max"], 0),
                      "-" if e["decoder_model_bytes"] is None else f"{e['decoder_model_bytes'] / 2**20:.2f}",
                      f"{e['replay_identical']}/{e['replay_sampled']}", f"{e['checks_passed']}/{e['rows']}"]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    lines.append("Metrics: mean over successful values; failed and not-applicable values are counted, never "
                 "replaced. kbps: total bits / total seconds of completed rows. RTF: medians. All metric outputs "
                 "are in the HTML report and in `codecarena leaderboard --format csv`.")
    lines.append("")
    if ctx.skipped_plots:
        lines.append("Plots skipped: " + "; ".join(f"{g} {lb.metric_label(m)} ({why})" for g, m, why in ctx.skipped_plots))
        lines.append("")
    fails = sum(1 for run in board.runs for r in run.rows if r.status != "ok")
    checks = sum(1 for run in board.runs for r in run.rows if r.status == "ok" and not r.checks_passed)
    replay = sum(1 for run in board.runs for r in run.rows if r.status == "ok" and r.replay_sampled and r.replay_identical is not True)
    mfail = sum(p["n"] for p in board.metric_problems if p["status"] == "failed")
    mna = sum(p["n"] for p in board.metric_problems if p["status"] == "not_applicable")
    lines.append(f"Failures: {fails} failed rows, {checks} failed checks, {replay} replays not identical, "
                 f"{mfail} failed and {mna} not-applicable metric values (each with its reason in the HTML report).")
    for note in ctx.comparison_notes:
        lines.append(f"Comparison: {note}.")
    lines.append("")
    lines.append(_audio_note(ctx))
    return "\n".join(lines) + "\n"


def _audio_note(ctx: ReportContext) -> str:
    a = ctx.audio
    if ctx.audio_mode == "none":
        return "Audio: not embedded (--audio none); spectrograms only."
    how = ("FLAC (lossless, bit-exact with the 16-bit PCM WAV files; written with soundfile)" if ctx.audio_mode == "flac"
           else "the files' own bytes (WAV)")
    return (f"Audio: {a.files} files embedded as data: URIs, {a.flac} as FLAC, {a.original} as their own bytes; "
            f"{a.bytes_embedded / 2**20:.1f} MiB embedded for {a.bytes_on_disk / 2**20:.1f} MiB on disk. "
            f"Mode: {how}. No lossy re-encoding.")


def write_report(run_dirs: list[Path], out_html: Path, audio: str = "flac", title: str | None = None) -> Path:
    """Write the self-contained HTML report of `run_dirs` to `out_html` and its Markdown summary
    to `out_html.with_suffix('.md')`; returns `out_html`."""
    if audio not in AUDIO_MODES:
        raise ReportError(f"audio must be one of {AUDIO_MODES}, got {audio!r}")
    out_html = Path(out_html)
    try:
        board = lb.compute([Path(d) for d in run_dirs])
    except StoreError as exc:
        raise ReportError(str(exc)) from None
    if not board.entries:
        raise ReportError("the runs hold no rows: nothing to report")
    ctx = ReportContext(board=board, audio_mode=audio, audio=AudioStats(mode=audio),
                        styles=family_styles([e["family"] for e in board.entries]))
    titles = _declaration_titles(board.runs)
    sections = []
    # Leaderboards and plots, one block per group
    lb_parts = [grouping_html(board)]
    for group in board.groups:
        lb_parts.append(f'<section class="group" id="group-{esc(group.id)}" data-group="{esc(group.id)}">'
                        f"<h3>{esc(group.id)}: {esc(group.title)}</h3>")
        for reason in group.reasons:
            lb_parts.append(f'<p class="note">{esc(group.id)} {esc(reason)}.</p>')
        lb_parts.append(leaderboard_html(board, group, titles))
        lb_parts.append('<p class="note">kbps: total bits / total seconds of the rows that completed. Metrics: mean '
                        'over successful values (hover a header for its definition); failed and not-applicable values are '
                        'counted under the mean and listed in <a href="#failures">Failures</a>, never replaced. RTF: '
                        'medians over completed rows (cold: a fresh process from start to result; warm: the codec call '
                        'repeated in-process). Click a header to sort.</p>')
        lb_parts.append(f"<h4>Pareto plots and cost</h4>{plots_html(ctx, group)}")
        lb_parts.append("</section>")
    sections.append('<h2 id="leaderboard">Leaderboard</h2>' + "".join(lb_parts))
    sections.append(comparison_html(ctx))
    listen = []
    for group in board.groups:
        listen.append(f'<section class="listen" data-group="{esc(group.id)}"><h3>{esc(group.id)}: '
                      f'{esc(group.title)}</h3>{listening_html(ctx, group)}</section>')
    sections.append('<h2 id="listening">Listening: every utterance, reference and decoded versions</h2>'
                    '<p class="note">Spectrograms: 0 to 8 kHz, 80 dB range, one colour scale per utterance (set by the '
                    f'reference), so a quieter or band-limited version looks darker. {esc(_audio_note(ctx))}</p>'
                    + "".join(listen))
    failures, failure_count = failures_html(ctx)
    sections.append(f'<h2 id="failures">Failures, failed checks and metric values that are not ok</h2>{failures}')
    sections.append(f'<h2 id="provenance">Provenance</h2>{provenance_html(board)}')
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    heading = title or "codecarena report"
    toc = ['<a href="#leaderboard">Leaderboard</a>']
    if len(board.runs) > 1:
        toc.append('<a href="#comparison">Comparison</a>')
    toc += ['<a href="#listening">Listening</a>', f'<a href="#failures">Failures ({failure_count})</a>',
            '<a href="#provenance">Provenance</a>']
    n_rows = sum(len(r.rows) for r in board.runs)
    page = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; media-src data:; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
        f"<title>{esc(heading)}</title><style>{CSS}</style></head><body>"
        f'<header class="top"><h1>{esc(heading)}</h1><p>{len(board.runs)} run(s), {n_rows} rows, '
        f"{len(board.entries)} codec configurations in {len(board.groups)} leaderboard(s). Generated {esc(now)} by "
        f"codecarena {esc(codecarena.__version__)}.</p></header>"
        f'<nav class="toc">{"".join(toc)}</nav><main>{"".join(sections)}</main>'
        f"<script>{SCRIPT}</script></body></html>\n"
    )
    out_html.parent.mkdir(parents=True, exist_ok=True)
    out_html.write_text(page, encoding="utf-8")
    out_html.with_suffix(".md").write_text(_markdown(ctx, out_html, failure_count), encoding="utf-8")
    return out_html


# ---------------------------------------------------------------------------------------------
# Command line


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "report", help="one self-contained HTML report (leaderboard, Pareto plots, audio, failures, provenance)")
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--out", type=Path, default=Path("report.html"),
                        help="HTML file to write (default report.html); the Markdown summary goes beside it (.md)")
    parser.add_argument("--audio", choices=AUDIO_MODES, default="flac",
                        help="embed audio as lossless FLAC (default; WAV bytes where FLAC does not help), the "
                             "WAV files' own bytes, or not at all")
    parser.add_argument("--title", help="page title (default: codecarena report)")
    return parser


def run(args: argparse.Namespace) -> int:
    out = write_report(list(args.run_dirs), args.out, audio=args.audio, title=args.title)
    size = out.stat().st_size
    print(f"report: {out} ({size / 2**20:.1f} MiB); summary: {out.with_suffix('.md')}")
    return 0
