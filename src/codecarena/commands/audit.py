"""`codecarena audit`: re-derive a run from its files."""

from __future__ import annotations

import argparse
from pathlib import Path

from codecarena.choices import DEFAULT_ROWS_PER_CODEC
from codecarena.commands.common import CliError, device_option


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    audit = subparsers.add_parser("audit", help="re-derive a run from its files; non-zero exit on any disagreement")
    audit.add_argument("run_dir", type=Path)
    audit.add_argument("--replay", action="store_true",
                       help="also decode every payload again in a fresh process, on the device its row was made on "
                            "(refused if this machine cannot give it)")
    audit.add_argument("--replay-device", default=None, metavar="cpu|cuda[:N]|mps",
                       help="--replay: decode the torch families' payloads on this device instead; a payload made on "
                            "another device is then a cross-device comparison, counted, not a failure")
    audit.add_argument("--rescore", nargs="?", const=str(DEFAULT_ROWS_PER_CODEC), default=None, metavar="N|all",
                       help="also recompute the metric values of the first N ok rows of each codec configuration "
                            f"(default {DEFAULT_ROWS_PER_CODEC}) or of all ok rows, and compare them within each "
                            "metric's declared tolerance")


def run(args: argparse.Namespace) -> int:
    from codecarena.console import console
    from codecarena.plural import counted
    from codecarena.results.audit import ReplayDeviceError, audit
    from codecarena.results.rescore import parse_sample

    if not args.run_dir.is_dir():
        raise CliError(f"{args.run_dir}: not a run directory")
    if args.replay_device is not None and not args.replay:
        raise CliError("--replay-device chooses where --replay decodes; add --replay")
    replay_device = device_option(args.replay_device, "--replay-device") if args.replay_device is not None else None
    notes: list[str] = []
    try:
        problems = audit(args.run_dir, replay=args.replay,
                         rescore=parse_sample(args.rescore) if args.rescore is not None else None,
                         replay_device=replay_device, notes=notes)
    except ReplayDeviceError as exc:
        raise CliError(str(exc)) from None
    for note in notes:
        console.print(f"note: {note}", soft_wrap=True)
    for problem in problems:
        console.print(problem, style="red", soft_wrap=True)
    if problems:
        console.print(f"audit failed: {counted(len(problems), 'problem')} in {args.run_dir}")
        return 1
    console.print(f"audit passed: {args.run_dir} re-derives from its files")
    return 0
