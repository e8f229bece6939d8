"""`codecarena leaderboard`: rank the codec configurations of one or more runs, in the terminal or
as a csv/json/parquet export."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codecarena.choices import BY_CHOICES, CI_UNITS, COLUMN_GROUPS, SORT_BY_RATE
from codecarena.plural import counted
from codecarena.results import ledger_view
from codecarena.results.formatting import (
    fmt_kbps,
    fmt_mib,
    fmt_rtf,
    language_label,
    metric_ci_cell,
    suspect_lines,
    weights_label,
)

if TYPE_CHECKING:
    from codecarena.results.leaderboard import Leaderboard



def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "leaderboard", help="rank codec configurations of one or more runs (DuckDB over the exported rows)")
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--format", default="table", choices=["table", "csv", "json", "parquet"],
                        help="table: print in the terminal; csv/json/parquet: one flat record per codec "
                             "configuration (metric stats as <output>_mean, <output>_n_ok, ...)")
    parser.add_argument("--out", type=Path, help="write the export here (csv/json default: stdout; parquet needs it)")
    parser.add_argument("--rows-parquet", type=Path,
                        help="also keep the Parquet file of every row of every run that the query ran on")
    parser.add_argument("--all-metrics", action="store_true", help="table: every metric output, not only the headline ones")
    parser.add_argument("--sort", default=SORT_BY_RATE, metavar="METRIC",
                        help="table: rank by a metric output's mean in its declared direction (best first), or "
                             f"{SORT_BY_RATE} (representation bitrate, lowest first; the default)")
    parser.add_argument("--columns", metavar="NAME,...",
                        help="table: exactly these columns (metric outputs, kbps, payload_kbps, claimed_kbps, "
                             "achievable_kbps, n, rtf_warm, "
                             "rtf_cold, peak_rss, dec_model, replay, checks, run, weights, variant) or groups "
                             f"({', '.join(COLUMN_GROUPS)}); the codec is always shown")
    parser.add_argument("--by", choices=BY_CHOICES,
                        help="export: also one record per language beside the pooled one (the table splits by "
                             "language whenever the runs hold several, each language first)")
    parser.add_argument("--ci-unit", choices=CI_UNITS, default="utterance",
                        help="what the 95%% intervals resample: utterances (default, as summary.json) or speakers "
                             "with all their utterances (utterances of an unknown speaker count as their own)")


def run(args: argparse.Namespace) -> int:
    from codecarena.results.leaderboard import LeaderboardError, compute
    from codecarena.results.leaderboard_export import write_export
    from codecarena.results.store import StoreError

    # The terminal table is split by language whenever the runs hold several (per language first); an
    # export has per-language records only when asked (--by language), so its shape stays what was asked.
    by = "language" if args.format == "table" else args.by

    try:
        board = compute(list(args.run_dirs), rows_parquet=args.rows_parquet, by=by, ci_unit=args.ci_unit)
    except StoreError as exc:
        raise LeaderboardError(str(exc)) from None
    if args.format == "table":
        columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
        options = {"all_metrics": args.all_metrics, "sort": args.sort, "columns": columns}
        if args.out is not None:
            with open(args.out, "w", encoding="utf-8") as fh:
                print_table(board, stream=fh, **options)
        else:
            print_table(board, **options)
        return 0
    result = write_export(board, args.format, args.out)
    if args.out is None:
        sys.stdout.write(result if isinstance(result, str) else "")
    else:
        print(f"wrote {args.out} ({counted(len(board.pooled), 'codec configuration')}, "
              f"{counted(len(board.entries), 'record')}, {counted(len(board.groups), 'group')})", file=sys.stderr)
    return 0


# The groups whose cells wrap between words (a metric's "n=3, no interval" under its mean).
WRAPPING_GROUPS = ("quality", "content")


@dataclass(frozen=True)
class Column:
    key: str  # the name --columns takes
    header: str
    cell: Callable[[dict[str, Any]], str]
    group: str  # id, rate, quality, content, listening, cost or checks: --columns takes these names too
    left: bool = False


def metric_column(name: str) -> Column:
    from codecarena.results.leaderboard import LOWER_IS_BETTER, metric_group, metric_label

    arrow = " v" if name in LOWER_IS_BETTER else " ^"
    return Column(name, metric_label(name).replace(" ", "\n") + arrow,
                  lambda e: metric_ci_cell(e["metrics"].get(name)),
                  metric_group(name))


def listening_column(key: str) -> Column:
    from codecarena.results.listening.board import cell_lines, column_header

    return Column(key, column_header(key).replace(" ", "\n") + " ^",
                  lambda e: "\n".join(cell_lines(e.get("listening", {}).get(key))), "listening")


def all_columns(board: Leaderboard) -> list[Column]:
    """Every column the table can show, in display order."""
    from codecarena.results.listening.board import columns as listening_columns

    return [
        Column("run", "run", lambda e: e["run_label"], "id", left=True),
        Column("codec", "codec", lambda e: e["codec"], "id", left=True),
        Column("weights", "weights", lambda e: weights_label(e["weights"], e.get("user_codec") or "", e.get("runtime") or ""), "id", left=True),
        Column("variant", "variant", lambda e: e["variant"] or "-", "id", left=True),
        Column("n", "n", lambda e: str(e["rows_ok"]), "id"),
        Column("kbps", "repr\nkbps", lambda e: fmt_kbps(e["representation_bps"]), "rate"),
        Column("payload_kbps", "payload\nkbps", lambda e: fmt_kbps(e["payload_bps"]), "rate"),
        # From the run's bitrate ledger (summary.json, derived from the payloads): the claim and what a
        # lossless coder reaches over the run.
        Column("claimed_kbps", "claimed\nkbps", lambda e: ledger_view.claimed(e["ledger"]) if e.get("ledger") else "-",
               "rate"),
        Column("achievable_kbps", "achievable\norder-0 kbps",
               lambda e: fmt_kbps(e["ledger"]["achievable_bps"]) if e.get("ledger") else "-", "rate"),
        *[metric_column(n) for n in board.metric_names],
        *[listening_column(key) for key in listening_columns(board.entries)],
        Column("rtf_warm", "RTF warm\nenc/dec", lambda e: fmt_rtf(e, "warm"), "cost"),
        Column("rtf_cold", "RTF cold\nenc/dec", lambda e: fmt_rtf(e, "cold"), "cost"),
        Column("peak_rss", "peak RSS\nMiB", lambda e: fmt_mib(e["peak_rss_bytes_max"]), "cost"),
        Column("dec_model", "dec model\nMiB", lambda e: fmt_mib(e["decoder_model_bytes"], 2), "cost"),
        Column("replay", "replay", lambda e: f"{e['replay_identical']}/{e['replay_sampled']}", "checks"),
        Column("checks", "checks", lambda e: f"{e['checks_passed']}/{e['rows']}", "checks"),
    ]


def choose_columns(board: Leaderboard, requested: list[str] | None, all_metrics: bool, sort: str,
                   languages: list[str] | None = None) -> list[Column]:
    """The columns asked for (codec always first), else the defaults: identity, rates, the headline
    metrics of a table of rows of `languages` (the content score in their own unit: dWER, or dCER for
    Mandarin; none over several languages; every language of the board when not given), the sort
    metric, costs and checks. Raises LeaderboardError on an unknown name."""
    from codecarena.metrics.outputs import headline
    from codecarena.results.leaderboard import LeaderboardError

    columns = all_columns(board)
    known = {c.key for c in columns}
    multi_run = len(board.runs) > 1
    has_variant = any(e["variant"] for e in board.entries)
    if requested:
        keys = {"codec"}
        for name in requested:
            if name in COLUMN_GROUPS:
                keys |= {c.key for c in columns if c.group == name}
            elif name in known:
                keys.add(name)
            else:
                raise LeaderboardError(f"--columns {name}: not a column (columns: {', '.join(sorted(known))}; "
                                       f"groups: {', '.join(COLUMN_GROUPS)})")
        return [c for c in columns if c.key in keys]
    if languages is None:
        languages = sorted({lang for e in board.entries for lang in e["languages"]})
    metrics = set(board.metric_names) if all_metrics else set(headline(languages)) | {sort}
    shown = [c for c in columns if c.group not in ("quality", "content") or c.key in metrics]
    return [c for c in shown if (c.key != "run" or multi_run) and (c.key != "variant" or has_variant)]


def value_width(column: Column, entries: list[dict[str, Any]]) -> int:
    """The width that shows the header's words, every value's first line and every word of its other
    lines whole (a metric's `n=3, no interval` wraps between words, never inside one); a column that
    does not wrap (every one but the metrics') needs its longest line."""
    words = column.header.replace("\n", " ").split(" ")
    lines = [column.cell(e).split("\n") for e in entries]
    wraps = column.group in WRAPPING_GROUPS
    words += [part for cell in lines for line in cell[1:] for part in (line.split(" ") if wraps else [line])]
    return max(len(text) for text in words + [cell[0] for cell in lines])


# When the terminal is too narrow, columns are hidden in this order (first hidden first): the ledger's
# and the costs, then metrics from the last; the replay and checks columns, which say whether a row's
# numbers hold, last.
_HIDE_FIRST = ("claimed_kbps", "achievable_kbps", "dec_model", "rtf_cold", "peak_rss", "payload_kbps", "rtf_warm")
_HIDE_LAST = ("replay", "checks")


def fit_columns(columns: list[Column], entries: list[dict[str, Any]], width: int,
                keep: set[str]) -> tuple[list[Column], list[Column]]:
    """The columns that fit `width` without truncating any value, and those hidden to make them fit
    (in the order of `_HIDE_FIRST`, the metrics from the last, `_HIDE_LAST`); `keep` (codec, the sort
    column) is never hidden."""
    def need(column: Column) -> int:
        return value_width(column, entries) + 2  # rich's padding between columns
    shown = list(columns)
    order = [*_HIDE_FIRST, *(c.key for c in reversed(columns) if c.group in ("quality", "content")), *_HIDE_LAST]
    hidden: list[Column] = []
    for key in order:
        if sum(need(c) for c in shown) <= width:
            break
        victim = next((c for c in shown if c.key == key and key not in keep), None)
        if victim is not None:
            shown.remove(victim)
            hidden.append(victim)
    return shown, hidden


def print_table(board: Leaderboard, all_metrics: bool = False, stream: Any = None, sort: str = SORT_BY_RATE,
                columns: list[str] | None = None) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from codecarena.console import Spec, make_console
    from codecarena.console import console as default_console
    from codecarena.results.leaderboard import LOWER_IS_BETTER, LeaderboardError, metric_label, ranked

    if sort != SORT_BY_RATE and sort not in board.metric_names:
        raise LeaderboardError(f"--sort {sort}: no such metric in these runs (metrics: "
                               f"{', '.join(board.metric_names) or 'none'}; or {SORT_BY_RATE})")
    console = default_console if stream is None else make_console(file=stream, width=200)
    choose_columns(board, columns, all_metrics, sort)  # an unknown column is refused before anything prints
    order = (f"sorted by {metric_label(sort)}, {'lower' if sort in LOWER_IS_BETTER else 'higher'} is better"
             if sort != SORT_BY_RATE else "sorted by representation bitrate, lowest first")
    hidden_all: dict[str, str] = {}
    for group in board.groups:
        # Per language first, then pooled; one language is the pooled table, named.
        languages = board.group_languages(group.id)
        sections: list[tuple[str | None, str]] = [(None, f"language {language_label(languages[0])}"
                                                   if len(languages) == 1 else "")]
        if len(languages) > 1:
            sections = [(lang, f"language {language_label(lang)}") for lang in languages]
            sections.append((None, f"all {len(languages)} languages pooled"))
        sections = [(language, what, "clean") for language, what in sections]
        # Configurations through a channel last, in a table of their own: their rates and costs are their
        # clean configuration's, so only their quality and checks are shown. Configurations whose input went
        # through a condition rank apart too: their quality is of another input.
        sections.append((None, "through a channel (SPEC@CHANNEL; rates and costs: the clean configuration's)",
                         "channel"))
        sections.append((None, "with an input condition (SPEC%CONDITION; quality against the clean reference, "
                               "docs/conditions.md)", "condition"))
        for language, what, kind in sections:
            channel = kind == "channel"
            entries = ranked(board.group_entries(group.id, language, channel, kind == "condition"), sort)
            if not entries:
                continue
            heading = Text.assemble((group.id, "bold"), f": {group.title}" + (f" - {what}" if what else ""),
                                    f"; {order}")
            console.print(heading)
            chosen = choose_columns(board, columns, all_metrics, sort, sorted({x for e in entries for x in e["languages"]}))
            if channel:
                chosen = [c for c in chosen if c.group not in ("rate", "cost")]
            shown, hidden = fit_columns(chosen, entries, console.width, {"codec", sort})
            hidden_all.update({c.key: c.header.replace("\n", " ") for c in hidden})
            table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
            for c in shown:
                # metric cells may wrap their "(n failed, n n/a)" onto a second line; values never do
                table.add_column(c.header, justify="left" if c.left else "right", overflow="fold",
                                 min_width=value_width(c, entries), no_wrap=c.group not in ("quality", "content"))
            for e in entries:
                table.add_row(*[Spec(c.cell(e)) if c.key == "codec" else c.cell(e) for c in shown])
            console.print(table)
        for reason in group.reasons:
            console.print(f"{group.id} {reason}", style="yellow")
    for line in suspect_lines(board.metric_problems, [r.label for r in board.runs]):
        console.print(line, style="yellow", soft_wrap=True)
    from codecarena.results.bootstrap import MIN_UNITS

    unit = "speakers (each with all their utterances)" if board.ci_unit == "speaker" else "utterances"
    console.print("n: utterances with every stage ok; kbps: total bits / total seconds of those rows; metrics: mean "
                  f"over ok values, its 95% bootstrap interval [lo, hi] over {unit} and under it n={unit} "
                  f"resampled (no interval below {MIN_UNITS}: too few), ^ higher is better, v lower is better, "
                  "failures counted; achievable: an order-0 adaptive coder's rate over the run (docs/ledger.md); "
                  "content: dWER for a language written with spaces, dCER for one written "
                  "without (Mandarin), per language only (error rates are never pooled across languages); RTF: "
                  "medians")
    for line in listening_lines(board):
        console.print(line, soft_wrap=True)
    if hidden_all:
        console.print(f"hidden to fit {console.width} columns: {', '.join(hidden_all.values())} "
                      f"({','.join(hidden_all)}); choose the columns with --columns (names or the groups "
                      f"{', '.join(COLUMN_GROUPS)}) or widen the terminal (COLUMNS=200)", style="yellow")
    for run_info in board.runs:
        for note in run_info.notes:
            console.print(f"{run_info.label}: {note}", style="yellow")


def listening_lines(board: Leaderboard) -> list[str]:
    """What the MUSHRA columns rest on: per test, its listeners and who post-screening excluded."""
    from codecarena.results.bootstrap import MIN_UNITS

    lines = []
    for results in board.listening:
        doc = results.document
        if doc["kind"] != "mushra":
            continue
        included = [s for s in doc["listeners"] if s["status"] == "included"]
        excluded = [f"{s['listener']} ({'; '.join(s['reasons'])})" for s in doc["listeners"] if s["status"] == "excluded"]
        incomplete = [s["listener"] for s in doc["listeners"] if s["status"] == "incomplete"]
        lines.append(f"MUSHRA ({results.test.name}, in {results.home.root.name}): mean rating 0-100 of the "
                     f"{counted(len(included), 'included listener')} over {counted(len(results.test.trials), 'utterance')}, "
                     f"95% interval resampling listeners and utterances (none below {MIN_UNITS} of either), n=listeners "
                     f"and the ratings; excluded by BS.1534-3 post-screening: {', '.join(excluded) or 'none'}; incomplete: "
                     f"{', '.join(incomplete) or 'none'}")
    return lines
