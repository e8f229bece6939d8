"""`codecarena leaderboard`: rank the codec configurations of one or more runs, in the terminal or
as a csv/json/parquet export."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from codecarena.results.formatting import fmt_kbps, fmt_mib, fmt_num, metric_cell, weights_label
from codecarena.results.leaderboard import (
    LOWER_IS_BETTER,
    Leaderboard,
    LeaderboardError,
    compute,
    metric_label,
)
from codecarena.results.leaderboard_export import write_export
from codecarena.results.store import StoreError

# What the terminal table shows by default (the Pareto metrics); --all-metrics shows every output.
HEADLINE_METRICS = ("pesq_wb", "stoi", "dwer", "dnsmos_ovrl", "speaker_sim")


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


def run(args: argparse.Namespace) -> int:
    try:
        board = compute(list(args.run_dirs), rows_parquet=args.rows_parquet)
    except StoreError as exc:
        raise LeaderboardError(str(exc)) from None
    if args.format == "table":
        if args.out is not None:
            with open(args.out, "w", encoding="utf-8") as fh:
                print_table(board, all_metrics=args.all_metrics, stream=fh)
        else:
            print_table(board, all_metrics=args.all_metrics)
        return 0
    result = write_export(board, args.format, args.out)
    if args.out is None:
        sys.stdout.write(result if isinstance(result, str) else "")
    else:
        print(f"wrote {args.out} ({len(board.entries)} codec configurations, {len(board.groups)} group(s))",
              file=sys.stderr)
    return 0


def print_table(board: Leaderboard, all_metrics: bool = False, stream: Any = None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from codecarena.console import console as default_console

    console = default_console if stream is None else Console(file=stream, width=200, highlight=False)
    names = board.metric_names if all_metrics else [n for n in HEADLINE_METRICS if n in board.metric_names]
    for group in board.groups:
        entries = board.group_entries(group.id)
        multi_run = len(group.runs) > 1
        show_variant = any(e["variant"] for e in entries)
        console.print(f"[bold]{group.id}[/bold]: {group.title}", soft_wrap=True)
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        cols = (["run"] if multi_run else []) + ["codec", "weights"] + (["variant"] if show_variant else [])
        cols += ["repr\nkbps", "payload\nkbps"]
        cols += [metric_label(n).replace(" ", "\n") + (" v" if n in LOWER_IS_BETTER else " ^") for n in names]
        cols += ["RTF warm\nenc/dec", "RTF cold\nenc/dec", "peak RSS\nMiB", "dec model\nMiB", "replay", "checks"]
        metric_cols = set(cols[len(cols) - 6 - len(names):len(cols) - 6])
        for c in cols:
            left = c in ("run", "codec", "weights", "variant")
            # metric cells may wrap their "(n failed, n n/a)" onto a second line
            table.add_column(c, justify="left" if left else "right", no_wrap=c not in metric_cols)
        for e in entries:
            cells = ([e["run_label"]] if multi_run else []) + [e["codec"], weights_label(e["weights"])]
            cells += [e["variant"] or "-"] if show_variant else []
            cells += [fmt_kbps(e["representation_bps"]), fmt_kbps(e["payload_bps"])]
            cells += [metric_cell(e["metrics"].get(n)) for n in names]
            cells += [f"{fmt_num(e['encode']['warm_rtf_median'], 4)}/{fmt_num(e['decode']['warm_rtf_median'], 4)}",
                      f"{fmt_num(e['encode']['cold_rtf_median'])}/{fmt_num(e['decode']['cold_rtf_median'])}",
                      fmt_mib(e["peak_rss_bytes_max"]), fmt_mib(e["decoder_model_bytes"], 2),
                      f"{e['replay_identical']}/{e['replay_sampled']}", f"{e['checks_passed']}/{e['rows']}"]
            table.add_row(*cells)
        console.print(table)
        for reason in group.reasons:
            console.print(f"[yellow]{group.id} {reason}[/yellow]", soft_wrap=True)
    console.print("kbps: total bits / total seconds of completed rows; metrics: mean over successes "
                  "(^ higher is better, v lower is better), failures counted; RTF: medians", soft_wrap=True)
    for run_info in board.runs:
        for note in run_info.notes:
            console.print(f"[yellow]{run_info.label}: {note}[/yellow]", soft_wrap=True)
