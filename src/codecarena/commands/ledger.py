"""`codecarena ledger`: a run's bitrate ledger (claimed vs measured rates, the achievable rate, token
statistics and stability), derived from its payload files, or summary.json's when that is still current
(results/ledger_stored.py; `--derive` derives it regardless); `--stability` measures token stability
with two extra encodes per row; `--update` writes the ledger into summary.json (docs/ledger.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from codecarena.choices import STABILITY_SHIFT_MS
from codecarena.commands.common import CliError


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "ledger", help="a run's bitrate ledger: claimed vs measured rates, achievable rate, token statistics "
                       "and stability, derived from its payload files")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument("--stability", action="store_true",
                        help="measure token stability: encode each row's decoded audio again, and its reference "
                             "shifted by --shift-ms, in the codec's own runtime (files under stability/), then "
                             "write the ledger into summary.json")
    parser.add_argument("--shift-ms", type=float, default=STABILITY_SHIFT_MS,
                        help=f"the delay of the shifted input, in ms (default {STABILITY_SHIFT_MS:g})")
    parser.add_argument("--codec", action="append", default=[], metavar="SPEC",
                        help="--stability: only this codec configuration of the run (repeatable)")
    parser.add_argument("--update", action="store_true",
                        help="write the ledger derived now into summary.json (a run made before the ledger)")
    parser.add_argument("--derive", action="store_true",
                        help="derive the ledger from the payload files even when summary.json holds a current one")
    parser.add_argument("--codebooks", action="store_true", help="also one table per configuration, per codebook")
    parser.add_argument("--format", choices=["table", "json"], default="table",
                        help="json: the ledger as summary.json holds it")


def run(args: argparse.Namespace) -> int:
    from codecarena.files import write_json
    from codecarena.results import ledger
    from codecarena.results import ledger_view as view
    from codecarena.results.ledger_stored import current_ledger
    from codecarena.results.record import RunLoadError
    from codecarena.results.run import Run
    from codecarena.results.stability import StabilityError, measure

    if not args.run_dir.is_dir():
        raise CliError(f"{args.run_dir}: not a run directory")
    failures: list[str] = []
    if args.stability:
        try:
            loaded, failures = measure(args.run_dir, args.shift_ms, tuple(args.codec), _progress(args.format))
        except StabilityError as exc:
            raise CliError(str(exc)) from None
    elif args.codec:
        raise CliError("--codec chooses what --stability measures; add --stability")
    else:
        try:
            loaded = Run.open(args.run_dir)
        except RunLoadError as exc:
            raise CliError(str(exc)) from None
    stored = None if args.update or args.stability or args.derive else current_ledger(loaded.summary, loaded.rows,
                                                                                       loaded.dir)
    derived = stored if stored is not None else ledger.build(loaded.rows, loaded.dir)
    if args.update:
        if loaded.summary is None:
            raise CliError(f"{loaded.dir.summary}: missing (the run did not finish: rerun it to resume)")
        write_json(loaded.dir.summary, {**loaded.summary, "ledger": derived})
    if args.format == "json":
        sys.stdout.write(json.dumps(derived, indent=1, sort_keys=True, allow_nan=False) + "\n")
    else:
        print_ledger({**derived, "codecs": view.labelled(derived["codecs"], loaded.rows)}, args.codebooks)
    for failure in failures:
        print(f"stability: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _progress(fmt: str) -> Any:
    from codecarena.console import console

    def on_row(row: Any, what: str) -> None:
        if fmt == "table":
            console.print(f"stability: {row.codec} {row.utterance}: {what}")
    return on_row


def print_ledger(derived: dict[str, Any], codebooks: bool = False) -> None:
    from rich.table import Table

    from codecarena.console import Spec, console, fit_table
    from codecarena.results import ledger_view as view
    from codecarena.results.formatting import fmt_num

    entries, left_out = view.clean(derived["codecs"])
    for title, columns in (("bitrate ledger", view.RATE_COLUMNS), ("tokens over the whole run", view.TOKEN_COLUMNS)):
        table = Table(title=title)
        for header, _ in columns:
            table.add_column(header, justify="left" if header in ("codec", "weights") else "right", overflow="fold")
        for entry in entries:
            table.add_row(*(Spec(cell(entry)) if header == "codec" else cell(entry) for header, cell in columns))
        fit_table(table, console.width)
        console.print(table)
    if codebooks:
        for entry in entries:
            if not entry.get("codebooks"):
                continue
            table = Table(title=f"{entry['codec']} ({view.weights(entry)}) per codebook")
            stability = view.codebook_stability(entry)
            for header, _ in view.CODEBOOK_COLUMNS:
                table.add_column(header, justify="right", overflow="fold")
            table.add_column("idempotence", justify="right")
            table.add_column("shift stability", justify="right")
            for book in entry["codebooks"]:
                measured = stability.get((book["stream"], book["codebook"]), {})
                table.add_row(*(cell(book) for _, cell in view.CODEBOOK_COLUMNS),
                              fmt_num(measured.get("idempotence")), fmt_num(measured.get("shift_stability")))
            console.print(table)
    coder = derived["coder"]
    console.print(f"order-0 achievable: every stream losslessly coded over the whole run by the {coder['name']} "
                  f"(version {coder['version']}: {coder['model']}): each symbol from its own stream's counts so far, "
                  "no context, so a coder that conditions on context can go lower; entropy: the empirical per-codebook entropy "
                  "(a bound for coders that take tokens one at a time); container: payload minus representation; "
                  "framing: the part of a command-line bitstream that is its file format's; stability: first "
                  "codebook / all codebooks (docs/ledger.md)", soft_wrap=True)
    for entry in entries:
        for note in view.notes(entry):
            console.print(note, style="yellow" if "stability" in note or "no ledger" in note else None,
                          soft_wrap=True)
    if left_out:
        console.print(view.left_out_note(left_out), soft_wrap=True)
