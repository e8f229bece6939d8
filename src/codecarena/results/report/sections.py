"""The report's HTML sections that come from the leaderboard: how the runs were grouped, one
leaderboard table and its plots per group, the failures, and the comparison of consecutive
comparable runs."""

from __future__ import annotations

from typing import Any

from codecarena.choices import COLUMN_GROUPS
from codecarena.plural import counted
from codecarena.results.listening.board import column_header
from codecarena.results.listening.board import columns as listening_columns
from codecarena.results import compare, compare_text
from codecarena.results import leaderboard as lb
from codecarena.results.bootstrap import MIN_UNITS
from codecarena.results.formatting import (
    corpus_text,
    fmt_kbps,
    fmt_mib,
    fmt_num,
    interval_text,
    interval_title,
    language_label,
    withheld_basis,
)
from codecarena.results.report.context import ReportContext
from codecarena.results.report.markup import code, data_uri, esc, num_td, spec_html, weights_pill
from codecarena.results.report.mushra import mushra_td
from codecarena.results.report.plot_cache import cached
from codecarena.results.report.plots import cost_plot, pareto_metrics, pareto_plot
from codecarena.results.schema import Row
from codecarena.results.verdict import verdict


def declaration_titles(runs: list[lb.RunInfo]) -> dict[str, str]:
    """Metric output -> its description in the runs' metric declarations (the header tooltips)."""
    titles: dict[str, str] = {}
    for run in runs:
        for decl in run.run.record.metrics:
            for output in decl.get("outputs") or []:
                titles.setdefault(output, decl.get("description", ""))
    return titles


def leaderboard_html(board: lb.Leaderboard, group: lb.Group, titles: dict[str, str],
                     language: str | None = None, channel: bool = False, condition: bool = False) -> str:
    """A group's leaderboard over one language (None: pooled): its clean configurations, or with
    `channel` those through a channel (the channel section's), with `condition` those whose input went
    through a condition (the conditions section's; their metrics against the clean reference)."""
    entries = board.group_entries(group.id, language, channel, condition)
    names = [n for n in board.metric_names if any(n in e["metrics"] for e in entries)]
    listening = listening_columns(entries)
    multi_run = len(group.runs) > 1
    head = _leaderboard_head(names, listening, titles, multi_run)
    body = []
    withheld: set[int] = set()  # the n of each mean without an interval: why there is none is said once
    for e in entries:
        cells = []
        if multi_run:
            cells.append(f'<td class="l">{esc(e["run_label"])}</td>')
        cells.append(f'<td class="l codec"><b>{spec_html(e["codec"])}</b></td>')
        cells.append(f'<td class="l">{esc(e["family"])}</td>')
        cells.append(f'<td class="l">{weights_pill(e["weights"], e.get("user_codec") or "", e.get("runtime") or "")}</td>')
        cells.append(f'<td class="l">{esc(e["variant"] or "-")}</td>')
        rep, pay = e["representation_bps"], e["payload_bps"]
        cells.append(num_td(rep, fmt_kbps(rep)))
        cells.append(num_td(pay, fmt_kbps(pay)))
        for n in names:
            stats = e["metrics"].get(n)
            if not stats:
                cells.append('<td data-v="">-</td>')
                continue
            cells.append(_metric_td(stats, withheld))
        cells += [mushra_td(e.get("listening", {}).get(key)) for key in listening]
        cost, doubtful = _cost_and_check_tds(e)
        cells += cost
        failed = " failed-row" if doubtful else ""
        body.append(f'<tr class="lb-row{failed}" data-codec="{esc(e["codec"])}" data-run="{esc(e["run_label"])}">'
                    + "".join(cells) + "</tr>")
    lang = ((f' data-language="{esc(language)}"' if language is not None else "") + (' data-channel=""' if channel else "")
            + (' data-condition=""' if condition else ""))
    toggles = "".join(f'<label><input type="checkbox" checked data-toggle="{g}"> {g}</label>' for g in COLUMN_GROUPS
                      if g != "listening" or listening)
    note = ""
    if withheld:
        unit = "speakers" if board.ci_unit == "speaker" else "utterances"
        ns = ", ".join(f"n={n}" for n in sorted(withheld))
        note = (f'<p class="note ci-note">No interval under a mean on fewer than {MIN_UNITS} {unit} ({ns} here): too '
                "few for a percentile bootstrap interval (hover a value for why).</p>")
    return (f'<div class="columns">columns: {toggles}</div>'
            f'<div class="scroll"><table class="leaderboard sortable" data-group="{esc(group.id)}"{lang}>'
            f'<thead><tr>{"".join(head)}</tr></thead><tbody>{"".join(body)}</tbody></table></div>{note}')


def _leaderboard_head(names: list[str], listening: list[Any], titles: dict[str, str], multi_run: bool) -> list[str]:
    """The header cells of a leaderboard table, each in its column group (what the toggles hide)."""
    head = []
    if multi_run:
        head.append('<th class="l" data-col-group="id">run</th>')
    head += ['<th class="l codec" data-col-group="id">codec</th>', '<th class="l" data-col-group="id">family</th>',
             '<th class="l" data-col-group="id">weights</th>', '<th class="l" data-col-group="id">variant</th>',
             '<th data-col-group="rate" title="representation bits / second of audio">repr kbps</th>',
             '<th data-col-group="rate" title="whole payload file (header and framing) bits / second">payload kbps</th>']
    for n in names:
        arrow = "&darr;" if n in lb.LOWER_IS_BETTER else "&uarr;"
        head.append(f'<th data-col-group="{lb.metric_group(n)}" title="{esc(titles.get(n, n))} (mean over successes; '
                    f'{"lower" if n in lb.LOWER_IS_BETTER else "higher"} is better)">{esc(lb.metric_label(n))} {arrow}</th>')
    head += [f'<th data-col-group="listening" title="mean rating (0-100) of the listeners post-screening kept, 95% '
             f'interval resampling listeners and utterances (docs/listening.md)">{esc(column_header(key))} &uarr;</th>'
             for key in listening]
    # The RTF columns in the order of every table (formatting.RTF_KINDS): warm, then cold; encode, then decode.
    head += ['<th data-col-group="cost" title="median over the rows of the warm sample of the repeated in-process encode call / audio s">'
             'RTF warm enc</th>',
             '<th data-col-group="cost" title="median over the rows of the warm sample of the repeated in-process decode call / audio s">'
             'RTF warm dec</th>',
             '<th data-col-group="cost" title="median over rows: process start + imports + load + I/O + first call, / '
             'audio s">RTF cold enc</th>', '<th data-col-group="cost">RTF cold dec</th>',
             '<th data-col-group="cost" title="max over encode and decode stages of the process-tree peak RSS">'
             'peak RSS MiB</th>',
             '<th data-col-group="cost" title="model bytes the decoder needs: decoder_model_bytes (Lyra) or '
             'parameter_bytes (0 for DSP)">dec model MiB</th>',
             '<th data-col-group="checks" title="rows of the replay sample whose second decode in another fresh '
             'process gave identical bytes">replay identical</th>',
             '<th data-col-group="checks" title="rows whose decoded audio is finite and not silent">checks</th>',
             '<th data-col-group="checks">rows ok</th>']
    return head


def _metric_td(stats: dict[str, Any], withheld: set[int]) -> str:
    """A metric's cell: the mean, its interval (or, below the bound, the n it rests on, added to
    `withheld`), the corpus rate, and the suspect, failed and not-applicable counts."""
    subs = []
    if stats["mean"] is not None:
        # The interval as [lo, hi] with the units it rests on; below the bound only what the mean
        # rests on (n=6), why there is no interval being said once under the table and on hover.
        short = withheld_basis(stats)
        if short:
            withheld.add(int(short[2:]))
        subs.append(f'<span class="sub ci{" none" if short else ""}" title="{esc(interval_title(stats))}">'
                    f'{esc(short or interval_text(stats))}</span>')
    if corpus_text(stats):
        subs.append(f'<span class="sub" title="total errors over total reference tokens">'
                    f'{esc(corpus_text(stats))}</span>')
    if stats.get("n_suspect"):
        subs.append(f'<span class="sub warn" title="mean with them: {fmt_num(stats["mean_with_suspect"])}">'
                    f'{stats["n_suspect"]} suspect</span>')
    if stats["n_failed"]:
        subs.append(f'<span class="sub bad">{stats["n_failed"]} failed</span>')
    if stats["n_not_applicable"]:
        subs.append(f'<span class="sub">{stats["n_not_applicable"]} n/a</span>')
    return num_td(stats["mean"], fmt_num(stats["mean"]), "".join(subs))


def _cost_and_check_tds(e: dict[str, Any]) -> tuple[list[str], bool]:
    """An entry's cost and check cells, and whether its numbers are doubtful (a failed row or check, or
    a replay that differs)."""
    cells = []
    for stage, key, digits in (("encode", "warm_rtf_median", 4), ("decode", "warm_rtf_median", 4),
                               ("encode", "cold_rtf_median", 3), ("decode", "cold_rtf_median", 3)):
        # Only the rows of the warm sample have a warm RTF: its cell says how many.
        n = e[stage].get("warm_rtf_n") if key == "warm_rtf_median" else None
        over = (f'<span class="sub" title="rows with a warm RTF (the warm sample, --warm-sample)">n={n}</span>'
                if n is not None else "")
        cells.append(num_td(e[stage][key], fmt_num(e[stage][key], digits), over))
    cells.append(num_td(e["peak_rss_bytes_max"], fmt_mib(e["peak_rss_bytes_max"])))
    dm = e["decoder_model_bytes"]
    cells.append(num_td(dm, fmt_mib(dm, 2)))
    n = e["rows"]
    sampled = e["replay_sampled"]
    cells.append(num_td(e["replay_identical"], f'{e["replay_identical"]}/{sampled}',
                         cls="bad" if e["replay_identical"] < sampled else "good"))
    cells.append(num_td(e["checks_passed"], f'{e["checks_passed"]}/{n}',
                         cls="bad" if e["checks_passed"] < n else "good"))
    cells.append(num_td(e["rows_ok"], f'{e["rows_ok"]}/{n}', cls="bad" if e["rows_ok"] < n else ""))
    # A check that failed or a replay that differs makes the configuration's numbers as doubtful as
    # a failed row does, so the whole row is marked for any of them.
    doubtful = e["rows_ok"] < n or e["checks_passed"] < n or e["replay_identical"] < sampled
    return cells, doubtful


def by_language_html(ctx: ReportContext, group: lb.Group, titles: dict[str, str]) -> str:
    """With several languages, one open section per language, first: its leaderboard (its own means
    and intervals) and its Pareto plots; "" with one language, whose numbers are the pooled ones."""
    board = ctx.board
    languages = board.group_languages(group.id)
    if len(languages) < 2:
        return ""
    parts = []
    for lang in languages:
        utterances = max(e["rows"] for e in board.group_entries(group.id, lang))
        label = language_label(lang)
        parts.append(f'<section class="language" data-language="{esc(lang)}"><h4>Language {esc(label)}: '
                     f'{utterances} utterance{"s" if utterances != 1 else ""}</h4>'
                     f'{leaderboard_html(board, group, titles, lang)}'
                     f'<h5>Pareto plots, {esc(label)}</h5>{plots_html(ctx, group, lang)}</section>')
    return "".join(parts)


def plots_html(ctx: ReportContext, group: lb.Group, language: str | None = None) -> str:
    """The Pareto plots of a group's clean configurations over one language (None: pooled)."""
    entries = ctx.board.group_entries(group.id, language, channel=False)
    with_run = len(group.runs) > 1
    where = group.id if language is None else f"{group.id} {language_label(language)}"
    figures = []
    for metric in pareto_metrics(entries):
        png, why, bars, without = cached(pareto_plot, entries, metric, ctx.styles, with_run)
        if png is None:
            ctx.skipped_plots.append((where, metric, why))
            continue
        label = lb.metric_label(metric)
        direction = "lower" if metric in lb.LOWER_IS_BETTER else "higher"
        # data-intervals counts the bars actually drawn, so a reader (or a browser test) can tell a plot
        # with intervals from one whose means had none (fewer utterances than the bound, say).
        unit = "speakers" if ctx.board.ci_unit == "speaker" else "utterances"
        bars_note = (f" Bars: 95% bootstrap interval of the mean over {unit}, on {bars} points." if bars else "")
        if without:
            bars_note += (f" No bar on {without} point{'s' if without != 1 else ''}: fewer than {MIN_UNITS} "
                          f"{unit}, too few for an interval.")
        lang = "" if language is None else f' data-language="{esc(language)}"'
        figures.append(f'<figure data-metric="{esc(metric)}"{lang} data-intervals="{bars}"><img class="plot" '
                       f'alt="{esc(label)} vs kbps" src="{data_uri(png, "image/png")}"><figcaption>{esc(label)} '
                       f'({direction} is better) vs representation kbps'
                       f'{"" if language is None else ", " + esc(language_label(language))}; outlined points and '
                       f'the step line are the Pareto frontier.{esc(bars_note)}</figcaption></figure>')
    skipped = [(m, why) for g, m, why in ctx.skipped_plots if g == where]
    note = ""
    if skipped:
        note = ('<p class="note">Plots skipped: ' + "; ".join(f"{esc(lb.metric_label(m))} ({esc(why)})"
                                                             for m, why in skipped) + ".</p>")
    return f'<div class="plots">{"".join(figures)}</div>{note}'


def cost_html(ctx: ReportContext, group: lb.Group) -> str:
    """The cost plot of a group's clean configurations (costs are not split by language; a channel
    configuration's are its clean configuration's)."""
    cost = cached(cost_plot, ctx.board.group_entries(group.id, channel=False), ctx.styles, len(group.runs) > 1)
    if cost is None:
        return ""
    return (f'<div class="plots"><figure class="wide" data-metric="cost"><img class="plot" alt="cost vs kbps" '
            f'src="{data_uri(cost, "image/png")}"><figcaption>Cost vs representation kbps: median cold '
            f'and warm real-time factor (hollow: encode, filled: decode; log scale, lower is faster) and '
            f'peak RSS; a dashed edge and "(synthetic)" mark synthetic weights.</figcaption></figure></div>')


def failures_html(ctx: ReportContext) -> tuple[str, int]:
    """The failures section, and how many failures it lists (failed rows, failed checks and
    failed metric values; not-applicable values and skipped plots are listed but not counted)."""
    board = ctx.board
    parts = []
    count = 0
    notes = [(run.label, note) for run in board.runs for note in run.notes]
    if notes:
        parts.append("<h3>Runs</h3><ul>" + "".join(f"<li><b>{esc(l)}</b>: {esc(n)}</li>" for l, n in notes) + "</ul>")
    # (run, row, failed stages or check, reason)
    row_fail: list[tuple[lb.RunInfo, Row, str, str]] = []
    check_fail: list[tuple[lb.RunInfo, Row, str, str]] = []
    for run in board.runs:
        for r in run.run.rows:
            said = verdict(r)
            if said.kind == "failed":
                row_fail.append((run, r, ", ".join(s.name for s in r.stages if not s.ok) or "-", said.reason))
            elif said.kind:  # a replay that differed, or failed checks: listed with the check
                check_fail.append((run, r, said.kind, said.reason))
    multi = len(board.runs) > 1
    runcol = "<th class=\"l\">run</th>" if multi else ""

    def runcell(run: lb.RunInfo) -> str:
        return f'<td class="l">{esc(run.label)}</td>' if multi else ""

    for title, column, failed in (("Failed rows", "stage", row_fail), ("Failed checks", "check", check_fail)):
        if not failed:
            continue
        count += len(failed)
        parts.append(f"<h3>{title} ({len(failed)})</h3><div class=\"scroll\"><table class=\"failures\"><thead><tr>"
                     f"{runcol}<th class=\"l\">codec</th><th class=\"l\">utterance</th><th class=\"l\">{column}</th>"
                     f"<th class=\"l\">reason</th></tr></thead><tbody>"
                     + "".join(f'<tr class="failure">{runcell(run)}<td class="l">{esc(r.codec)}</td><td class="l">'
                               f'{esc(r.utterance)}</td><td class="l">{esc(what)}</td><td class="wrap">{esc(why)}</td></tr>'
                               for run, r, what, why in failed)
                     + "</tbody></table></div>")
    problems = board.metric_problems
    if problems:
        failed = sum(p["n"] for p in problems if p["status"] == "failed")
        skipped = sum(p["n"] for p in problems if p["status"] == "not_applicable")
        doubted = sum(p["n"] for p in problems if p["status"] == "suspect")
        count += failed
        body = []
        for p in problems:
            utts = p["utterances"]
            shown = ", ".join(utts[:6]) + (f" and {len(utts) - 6} more" if len(utts) > 6 else "")
            cls = {"failed": "bad", "suspect": "warn"}.get(p["status"], "muted")
            shown_status = {"failed": "failed", "suspect": "suspect (kept out of the mean)"}.get(
                p["status"], "not applicable (skipped)")
            body.append(f'<tr class="metric-problem">{runcell(board.runs[p["run_index"]])}<td class="l">{esc(p["codec"])}</td>'
                        f'<td class="l">{esc(p["output"])}</td><td class="l {cls}">'
                        f'{shown_status}</td>'
                        f'<td>{p["n"]}</td><td class="wrap">{esc(p["error"])}</td>'
                        f'<td class="wrap mono">{esc(shown)}</td></tr>')
        anchor = ' id="suspect"' if doubted else ""
        parts.append(f"<h3{anchor}>Metric values that are not ok ({failed} failed, {doubted} suspect, {skipped} not "
                     "applicable)</h3>"
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
    for a, b in pairs:
        parts.append(f"<h3>{esc(a.label)} &rarr; {esc(b.label)}</h3>")
        shared = {r.codec for r in a.run.rows} & {r.codec for r in b.run.rows}
        if not shared:
            # Runs of different codecs on one set are complementary, not a failed comparison.
            note = (f"{a.label} and {b.label} share no codec configuration: nothing to pair (their codecs are "
                    "ranked together in the leaderboard above)")
            ctx.comparison_notes.append(note)
            parts.append(f'<p class="note">{esc(note)}.</p>')
            continue
        try:
            result = compare.compare_runs(a.run, b.run)
            fragment = compare_text.render_html(result)
            ctx.comparisons.append((a.label, b.label, compare_text.render_text(result)))
        except Exception as exc:  # noqa: BLE001 - a comparison that fails must not lose the report
            note = f"{a.label} -> {b.label}: comparison failed ({type(exc).__name__}: {exc})"
            ctx.comparison_notes.append(note)
            parts.append(f'<p class="note bad">{esc(note)}</p>')
            continue
        parts.append(f'<div class="comparison">{fragment}</div>')
    return "".join(parts)


def grouping_html(board: lb.Leaderboard) -> str:
    runs = "".join(f"<li><b>{esc(r.label)}</b>: {code(r.run.path)} &mdash; set {esc(r.set_name)}, {counted(len(r.run.rows), 'row')}, "
                   f"{esc(lb.machine_text(r.machine))}</li>" for r in board.runs)
    text = f"<ul>{runs}</ul>"
    if len(board.groups) > 1:
        items = "".join(f"<li><b>{esc(g.id)}</b> ({esc(g.title)}): {esc('; '.join(g.reasons))}</li>" for g in board.groups)
        text += (f'<div class="box warn"><b>Not one ranking.</b> These runs differ in evaluation set, machine or '
                 f'weights kind, so they are shown as {len(board.groups)} separate leaderboards:<ul>{items}</ul></div>')
    return text
