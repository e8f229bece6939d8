"""`codecarena report`: one self-contained HTML report of one or more runs, and a Markdown summary."""

from __future__ import annotations

import argparse
from pathlib import Path

from typing import TYPE_CHECKING

from codecarena.choices import AUDIO_MODES, LISTEN_ALL_UP_TO, LISTEN_SAMPLE
from codecarena.commands.common import CliError

if TYPE_CHECKING:
    from codecarena.results.report.context import Listen


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "report", help="one self-contained HTML report (leaderboard, Pareto plots, audio, failures, provenance)")
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--out", type=Path, default=Path("report.html"),
                        help="HTML file to write (default report.html); the Markdown summary goes beside it (.md)")
    parser.add_argument("--audio", choices=AUDIO_MODES, default="flac",
                        help="embed audio as lossless FLAC (default; WAV bytes where FLAC does not help), the "
                             "WAV files' own bytes, or not at all")
    parser.add_argument("--title", help="page title (default: codecarena report)")
    parser.add_argument("--listen", default=None, metavar="N|all",
                        help="utterances per leaderboard embedded in the listening section, taken in turn from each "
                             "language (all: every one, the file then grows with the corpus); default: every one up to "
                             f"{LISTEN_ALL_UP_TO}, beyond that each configuration's worst, median and best by PESQ-WB "
                             f"(else ViSQOL, else STOI) and {LISTEN_SAMPLE} drawn at random; the rest are linked")


def run(args: argparse.Namespace) -> int:
    from codecarena.results.formatting import fmt_mib
    from codecarena.results.report import write_report
    from codecarena.results.report.context import AUTO

    listen: Listen = AUTO
    if args.listen == "all":
        listen = None
    elif args.listen is not None:
        if not (args.listen.isdigit() and int(args.listen) >= 1):
            raise CliError(f"--listen {args.listen!r}: expected a number >= 1 or all")
        listen = int(args.listen)
    out = write_report(list(args.run_dirs), args.out, audio=args.audio, title=args.title, listen=listen)
    print(f"report: {out} ({fmt_mib(out.stat().st_size, 1)} MiB); summary: {out.with_suffix('.md')}")
    return 0
