"""The report: one self-contained HTML file to look at, and a Markdown summary beside it.

The HTML makes no request of its own: CSS and the small script (`static/`, sorting a table by a
clicked header and nothing else) are inline, plots and spectrograms are PNG `data:` URIs, and every
reference and decoded file is embedded losslessly as a `data:` URI in an `<audio controls>` player
(`audio.py` says how); `--audio none` leaves the players out.

Sections: leaderboards (one per group of comparable runs; the numbers come from DuckDB over the
exported rows, see `results/leaderboard.py`), Pareto plots of quality vs representation bitrate and
a cost plot (`plots.py`), the runs' listening tests and which metric predicts their listeners
(`mushra.py`), the bitrate ledger of each run (`ledger.py`), a comparison of consecutive comparable runs (`results/compare.py`),
per-utterance listening with spectrograms (`listening.py`), every failure with its reason, and
provenance (`provenance.py`). What each section shows: docs/report.md.
"""

from __future__ import annotations

import datetime as dt
from importlib import resources
from pathlib import Path

import codecarena
from codecarena.choices import AUDIO_MODES
from codecarena.plural import counted
from codecarena.results import leaderboard as lb
from codecarena.results.bootstrap import MIN_UNITS
from codecarena.results.report.audio import AudioStats
from codecarena.results.report.channel import channel_html
from codecarena.results.report.conditions import conditions_html
from codecarena.results.report.context import AUTO, Listen, ReportContext, audio_note, listening_heading
from codecarena.results.report.ledger import ledger_html
from codecarena.results.report.listening import listening_html
from codecarena.results.report.markdown import markdown_summary
from codecarena.results.report.markup import esc
from codecarena.results.report.mushra import listening_tests_html
from codecarena.results.report.plots import family_styles
from codecarena.results.report.provenance import provenance_html
from codecarena.results.report.sections import (
    by_language_html,
    comparison_html,
    cost_html,
    declaration_titles,
    failures_html,
    grouping_html,
    leaderboard_html,
    plots_html,
)
from codecarena.results.store import StoreError


class ReportError(ValueError):
    """Run directories that cannot be reported on."""


def _static(name: str) -> str:
    return (resources.files(__name__) / "static" / name).read_text(encoding="utf-8")


def write_report(run_dirs: list[Path], out_html: Path, audio: str = "flac", title: str | None = None,
                 listen: Listen = AUTO) -> Path:
    """Write the self-contained HTML report of `run_dirs` to `out_html` and its Markdown summary
    to `out_html.with_suffix('.md')`; returns `out_html`."""
    if audio not in AUDIO_MODES:
        raise ReportError(f"audio must be one of {AUDIO_MODES}, got {audio!r}")
    out_html = Path(out_html)
    try:
        board = lb.compute([Path(d) for d in run_dirs], by="language")
    except StoreError as exc:
        raise ReportError(str(exc)) from None
    if not board.entries:
        raise ReportError("the runs hold no rows: nothing to report")
    ctx = ReportContext(board=board, audio_mode=audio, audio=AudioStats(mode=audio),
                        styles=family_styles([e["family"] for e in board.entries]), out_dir=out_html.resolve().parent,
                        listen=listen)
    titles = declaration_titles(board.runs)
    sections = []
    lb_parts = [grouping_html(board)] + [_group_html(ctx, group, titles) for group in board.groups]
    sections.append('<h2 id="leaderboard">Leaderboard</h2>' + "".join(lb_parts))
    channel = channel_html(ctx, [f'<h4>{esc(group.id)}: {esc(group.title)}</h4>'
                                 f'{leaderboard_html(board, group, titles, channel=True)}'
                                 for group in board.groups if board.group_entries(group.id, channel=True)])
    sections.append(channel)
    conditions = conditions_html(ctx, [f'<h4>{esc(group.id)}: {esc(group.title)}</h4>'
                                       f'{leaderboard_html(board, group, titles, condition=True)}'
                                       for group in board.groups if board.group_entries(group.id, condition=True)])
    sections.append(conditions)
    tests = listening_tests_html(board.listening)
    sections.append(tests)
    sections.append(ledger_html(board))
    sections.append(comparison_html(ctx))
    listen = []
    for group in board.groups:
        listen.append(f'<section class="listen" data-group="{esc(group.id)}"><h3>{esc(group.id)}: '
                      f'{esc(group.title)}</h3>{listening_html(ctx, group)}</section>')
    sections.append(f'<h2 id="listening">{esc(listening_heading(ctx))}</h2>'
                    '<p class="note">Spectrograms: 0 to 8 kHz, 80 dB range, one colour scale per utterance (set by the '
                    f'reference), so a quieter or band-limited version looks darker. {esc(audio_note(ctx))}</p>'
                    + "".join(listen))
    failures, failure_count = failures_html(ctx)
    sections.append(f'<h2 id="failures">Failures, failed checks and metric values that are not ok</h2>{failures}')
    sections.append(f'<h2 id="provenance">Provenance</h2>{provenance_html(board)}')
    heading = title or "codecarena report"
    toc = (['<a href="#leaderboard">Leaderboard</a>'] + (['<a href="#listening-tests">Listening tests</a>'] if tests else [])
           + ['<a href="#ledger">Bitrate ledger</a>'] + (['<a href="#channel">Channel</a>'] if channel else [])
           + (['<a href="#conditions">Conditions</a>'] if conditions else []))
    if len(board.runs) > 1:
        toc.append('<a href="#comparison">Comparison</a>')
    # Suspect values are not failures (they are kept out of the means, not lost), so they are counted apart.
    suspect = sum(p["n"] for p in board.metric_problems if p["status"] == "suspect")
    toc += ['<a href="#listening">Listening</a>', f'<a href="#failures">Failures ({failure_count})</a>'
            + (f'<a href="#suspect" class="warn">Suspect values ({suspect})</a>' if suspect else ""),
            '<a href="#provenance">Provenance</a>']
    page = _page(board, heading, toc, sections)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    out_html.write_text(page, encoding="utf-8")
    out_html.with_suffix(".md").write_text(markdown_summary(ctx, out_html, failure_count), encoding="utf-8")
    return out_html


def _group_html(ctx: ReportContext, group: lb.Group, titles: dict[str, str]) -> str:
    """One group of comparable runs in the leaderboard section: why it stands apart, each language's
    table and plots, the pooled table, what it leaves out, how to read it, and its cost."""
    board = ctx.board
    lb_parts = [f'<section class="group" id="group-{esc(group.id)}" data-group="{esc(group.id)}">'
                f"<h3>{esc(group.id)}: {esc(group.title)}</h3>"]
    for reason in group.reasons:
        lb_parts.append(f'<p class="note">{esc(group.id)} {esc(reason)}.</p>')
    # Per language first: each language's table and plots open the group; the pooled table follows.
    languages = by_language_html(ctx, group, titles)
    if languages:
        lb_parts.append(languages)
        lb_parts.append(f'<section class="pooled"><h4>All {len(board.group_languages(group.id))} languages '
                        'pooled</h4>')
    lb_parts.append(leaderboard_html(board, group, titles))
    through = board.group_entries(group.id, channel=True)
    if through:
        lb_parts.append(f'<p class="note">Not in this table, its plots or the ledger: '
                        f'{counted(len(through), "configuration")} through a channel (<code>SPEC@CHANNEL</code>), '
                        "whose rates and costs are their clean configuration's; their quality is in "
                        '<a href="#channel">Quality against channel impairment</a>.</p>')
    conditioned = board.group_entries(group.id, condition=True)
    if conditioned:
        lb_parts.append(f'<p class="note">Not in this table or its plots: {counted(len(conditioned), "configuration")} '
                        "whose input went through a condition (<code>SPEC%CONDITION</code>), which rank apart: "
                        '<a href="#conditions">Quality against input conditions</a>.</p>')
    unit = "speakers" if board.ci_unit == "speaker" else "utterances"
    lb_parts.append('<p class="note">kbps: total bits / total seconds of the rows that completed. Metrics: mean '
                    'over successful values (hover a header for its definition), under it its 95% bootstrap '
                    f'interval [lo, hi] over {unit} and n, the {unit} resampled; with fewer than {MIN_UNITS} no '
                    'interval is given (hover for why); failed and not-applicable values are counted under the '
                    'mean and listed in <a href="#failures">Failures</a>, never replaced. RTF: medians over '
                    'completed rows (cold: a fresh process from start to result; warm: the codec call repeated '
                    'in-process, only in the rows of the warm sample, n under it). Click a header to sort.</p>')
    if languages:
        lb_parts.append(f"<h4>Cost</h4>{cost_html(ctx, group)}</section>")
    else:
        lb_parts.append(f"<h4>Pareto plots and cost</h4>{plots_html(ctx, group)}{cost_html(ctx, group)}")
    lb_parts.append("</section>")
    return "".join(lb_parts)


def _page(board: lb.Leaderboard, heading: str, toc: list[str], sections: list[str]) -> str:
    """The whole HTML page: inline CSS and script, a Content-Security-Policy that allows nothing else."""
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    n_rows = sum(len(r.run.rows) for r in board.runs)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; media-src data:; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
        f"<title>{esc(heading)}</title><style>\n{_static('report.css')}</style></head><body>"
        f'<header class="top"><h1>{esc(heading)}</h1><p>{counted(len(board.runs), "run")}, {counted(n_rows, "row")}, '
        f"{counted(len(board.pooled), 'codec configuration')} in {counted(len(board.groups), 'leaderboard')}. Generated "
        f"{esc(now)} by "
        f"codecarena {esc(codecarena.__version__)}.</p></header>"
        f'<nav class="toc">{"".join(toc)}</nav><main>{"".join(sections)}</main>'
        f"<script>\n{_static('report.js')}</script></body></html>\n"
    )
